"""One consistent plotting style for every chapter."""

from __future__ import annotations

import torch

try:
    import matplotlib as mpl
    import matplotlib.pyplot as plt
except ModuleNotFoundError:  # the library alone does not install matplotlib
    from . import needs

    raise needs("matplotlib", __name__) from None

__all__ = [
    "set_plot_style",
    "heatmap",
    "COLORS",
    "color_for",
    "label_points",
    "overlapping_labels",
    "line_styles",
    "overlapping_tick_labels",
]

# One colour per encoding, so a method looks the same in every chapter's figures.
COLORS: dict[str, str] = {
    "nope": "#7f7f7f",
    "sinusoidal": "#1f77b4",
    "learned": "#ff7f0e",
    "axial": "#8c564b",
    "shaw": "#2ca02c",
    "transformer_xl": "#17becf",
    "tener": "#bcbd22",
    "t5": "#9467bd",
    "huang_m1": "#aec7e8",
    "huang_m2": "#6baed6",
    "huang_m3": "#3182bd",
    "huang_m4": "#08519c",
    "da_transformer": "#98df8a",
    "rope": "#d62728",
    "rope_dynamic": "#7b0d1e",
    "xpos": "#ff9896",
    "alibi": "#e377c2",
}


def color_for(name: str) -> str:
    """The colour of an encoding: its own from ``COLORS`` (also for variants like
    ``rope_ntk``), else a stable pick from matplotlib's tab20 palette."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string (an encoding's), got {name!r}")
    if name in COLORS:
        return COLORS[name]
    for key, value in COLORS.items():
        if name.startswith(key + "_"):
            return value
    palette = plt.get_cmap("tab20").colors
    return mpl.colors.to_hex(palette[sum(map(ord, name)) % len(palette)])


def set_plot_style() -> None:
    """Small, legible, colour-blind-friendly defaults (applied by
    ``posenc_lib.book.setup``)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "image.cmap": "viridis",
        }
    )


def heatmap(
    matrix: torch.Tensor,
    ax: plt.Axes | None = None,
    title: str = "",
    xlabel: str = "j (key)",
    ylabel: str = "i (query)",
    cmap: str = "viridis",
    colorbar: bool = True,
    **kwargs,
) -> plt.Axes:
    """Draw a 2-D tensor (or array, or nested list) as an image with labelled axes;
    returns the axes."""
    if not isinstance(matrix, torch.Tensor):
        try:
            matrix = torch.as_tensor(matrix, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                "matrix must be a 2-D tensor, array or nested list of numbers, got "
                f"{type(matrix).__name__}"
            ) from None
    if matrix.dim() != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    ax = ax or plt.gca()
    im = ax.imshow(
        matrix.detach().float().cpu().numpy(), cmap=cmap, aspect="auto", **kwargs
    )
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(False)
    if colorbar:
        plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def label_points(
    ax: plt.Axes,
    xs,
    ys,
    labels: list[str],
    fontsize: float = 6,
    max_steps: int = 40,
) -> list[mpl.text.Text]:
    """Write ``labels[k]`` next to the point ``(xs[k], ys[k])`` of ``ax`` so that no
    two labels overlap each other or cover a point; returns the text artists.

    Greedy placement in display coordinates (call it after the axes' limits and
    scales are set): for each point in turn, try offsets around it at growing
    distance (up to ``max_steps`` rings of 8 directions, 4 points apart) and keep the
    first whose text box meets no box placed so far and no marker; a label moved
    away from its point gets a thin leader line. Raises ``RuntimeError`` naming the
    label when no place is found, so a crowded figure fails instead of drawing text
    over text. (adjustText does this iteratively with a physics model; this is a
    deterministic 40-line version without the extra dependency.)
    """
    if not (len(xs) == len(ys) == len(labels)):
        raise ValueError(
            f"xs, ys and labels must have one entry per point, got "
            f"{len(xs)}, {len(ys)} and {len(labels)}"
        )
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    points = [to_px((float(x), float(y))) for x, y in zip(xs, ys)]
    marker = 3.0  # half the side of the box kept free around each point (px)
    taken = [
        mpl.transforms.Bbox.from_extents(
            px - marker, py - marker, px + marker, py + marker
        )
        for px, py in points
    ]
    directions = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    pt_to_px = fig.dpi / 72
    texts = []

    def note(label, x, y, off, leader=False):  # the label, ``off`` points away
        return ax.annotate(
            label,
            (float(x), float(y)),
            xytext=off,
            textcoords="offset points",
            fontsize=fontsize,
            ha="left" if off[0] > 0 else ("right" if off[0] < 0 else "center"),
            va="bottom" if off[1] > 0 else ("top" if off[1] < 0 else "center"),
            arrowprops=(
                {"arrowstyle": "-", "lw": 0.4, "color": "0.5", "shrinkA": 0}
                if leader
                else None
            ),
        )

    inside = ax.get_window_extent(renderer)
    for x, y, label in zip(xs, ys, labels):
        placed = None
        for step in range(1, max_steps + 1):
            for dx, dy in directions:
                off = (dx * 4 * step, dy * 4 * step)  # points
                probe = note(label, x, y, off)
                box = probe.get_window_extent(renderer).padded(1)
                probe.remove()
                clear = not any(box.overlaps(b) for b in taken) and (
                    inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
                )
                if clear:
                    placed = (box, off)
                    break
            if placed:
                break
        if placed is None:
            raise RuntimeError(f"label_points: no free place for the label {label!r}")
        box, off = placed
        far = max(abs(off[0]), abs(off[1])) * pt_to_px > 12
        texts.append(note(label, x, y, off, leader=far))
        taken.append(box)
    return texts


def overlapping_labels(texts: list[mpl.text.Text]) -> list[tuple[str, str]]:
    """The pairs of ``texts`` whose drawn boxes overlap (empty when none do)."""
    renderer = texts[0].figure.canvas.get_renderer() if texts else None
    boxes = []
    for t in texts:
        # the text's own box (an Annotation's extent also covers its leader line)
        if isinstance(t, mpl.text.Annotation):
            t.update_positions(renderer)
        boxes.append(mpl.text.Text.get_window_extent(t, renderer))
    return [
        (texts[a].get_text(), texts[b].get_text())
        for a in range(len(texts))
        for b in range(a + 1, len(texts))
        if boxes[a].overlaps(boxes[b])
    ]


# Ten colours a reader tells apart (matplotlib's tab10, Tableau's qualitative palette;
# tab20 adds a lighter twin of each, which reads as the same colour in a legend), and
# the dashes that multiply them.
LINE_COLORS = tuple(mpl.colors.to_hex(c) for c in plt.get_cmap("tab10").colors)
LINE_DASHES = ("-", "--", ":", "-.")


def line_styles(n: int) -> list[tuple[str, str]]:
    """``n`` distinct (colour, linestyle) pairs for the lines of one axes: the ten
    colours of ``LINE_COLORS`` with solid lines first, then each colour again dashed,
    dotted, dash-dotted; at most 40 lines (more cannot be told apart anyway)."""
    n = int(n)
    most = len(LINE_COLORS) * len(LINE_DASHES)
    if not 0 <= n <= most:
        raise ValueError(f"n must be between 0 and {most} lines, got {n}")
    k = len(LINE_COLORS)
    return [(LINE_COLORS[i % k], LINE_DASHES[i // k]) for i in range(n)]


def overlapping_tick_labels(ax: plt.Axes) -> list[tuple[str, str]]:
    """The pairs of drawn tick labels of ``ax`` (major and minor, both axes) whose
    boxes overlap; empty when none do. Draws the figure first."""
    ax.figure.canvas.draw()
    pairs = []
    for axis in (ax.xaxis, ax.yaxis):
        texts = [
            t
            for minor in (False, True)
            for t in axis.get_ticklabels(minor=minor)
            if t.get_visible() and t.get_text()
        ]
        pairs += overlapping_labels(texts)
    return pairs

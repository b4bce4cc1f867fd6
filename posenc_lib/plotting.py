"""One consistent plotting style for every chapter."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import torch

__all__ = ["set_plot_style", "heatmap", "COLORS", "color_for"]

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
    """Draw a 2-D tensor as an image with labelled axes; returns the axes."""
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

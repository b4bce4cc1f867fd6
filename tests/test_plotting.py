"""pl.label_points: labels that cover no other label and no point."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import posenc_lib as pl  # noqa: E402


@pytest.mark.parametrize("seed", range(5))
def test_labels_of_a_crowded_scatter_do_not_overlap(seed):
    g = torch.Generator().manual_seed(seed)
    xs = (torch.rand(40, generator=g) * 3 + 1).tolist()
    ys = (torch.rand(40, generator=g) * 20 + 1).tolist()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.scatter(xs, ys, s=18)
    ax.set(xscale="log", yscale="log")
    naive = [
        ax.annotate(f"encoding_{k}", (x, y)) for k, (x, y) in enumerate(zip(xs, ys))
    ]
    assert pl.overlapping_labels(naive), "the naive labels overlap: the check has teeth"
    for t in naive:
        t.remove()
    texts = pl.label_points(ax, xs, ys, [f"encoding_{k}" for k in range(40)])
    assert len(texts) == 40
    assert pl.overlapping_labels(texts) == []
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    for t in texts:
        t.update_positions(renderer)
        box = matplotlib.text.Text.get_window_extent(t, renderer)
        assert inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
    plt.close(fig)


def test_no_room_is_an_error_naming_the_label():
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.scatter([0.5] * 30, [0.5] * 30)
    with pytest.raises(RuntimeError, match="no free place for the label"):
        pl.label_points(
            ax, [0.5] * 30, [0.5] * 30, [f"long label {k}" for k in range(30)]
        )
    plt.close(fig)


def test_lengths_must_agree():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="one entry per point"):
        pl.label_points(ax, [1, 2], [1], ["a", "b"])
    plt.close(fig)


def test_line_styles_are_distinct_and_from_the_qualitative_palette():
    styles = pl.plotting.line_styles(16)
    assert len(set(styles)) == 16
    assert {c for c, _ in styles} <= set(pl.plotting.LINE_COLORS)
    assert styles[:10] == [(c, "-") for c in pl.plotting.LINE_COLORS]
    assert len(set(pl.plotting.line_styles(40))) == 40
    with pytest.raises(ValueError, match="at most|between 0 and 40"):
        pl.plotting.line_styles(41)


def test_overlapping_tick_labels_sees_crowded_log_ticks():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.loglog([256, 4096], [1, 10])  # matplotlib labels 3x10^2 and 4x10^2 side by side
    assert pl.plotting.overlapping_tick_labels(ax), "the check has teeth"
    ax.set_xticks([256, 1024, 4096], ["256", "1024", "4096"])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    assert pl.plotting.overlapping_tick_labels(ax) == []
    plt.close(fig)

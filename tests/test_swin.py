"""Swin's relative position bias: properties of the index, the bias, the clamp; parity
with Swin's ``WindowAttention`` and timm (golden vectors from
golden/make_vision_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "vision_swin.json").read_text()
)


@pytest.mark.parametrize("wh, ww", [(2, 3), (3, 3), (4, 1)])
def test_index_counts_each_offset_once_and_is_antisymmetric(wh, ww):
    idx = pl.swin_relative_position_index(wh, ww)
    n, rows = wh * ww, (2 * wh - 1) * (2 * ww - 1)
    assert idx.shape == (n, n) and idx.dtype == torch.int64
    assert idx.min() >= 0 and idx.max() < rows
    centre = (wh - 1) * (2 * ww - 1) + ww - 1  # offset (0, 0)
    assert (idx.diagonal() == centre).all()
    assert (idx + idx.T == 2 * centre).all()  # (dr, dc) and (-dr, -dc) mirror
    assert set(idx.flatten().tolist()) == set(range(rows))  # every offset occurs


def test_index_is_a_function_of_the_offset_query_minus_key():
    pos = pl.grid_positions(3, 4)
    idx = pl.relative_index_2d(pos, pos, 3, 4)
    rel = pos[:, None] - pos[None]  # (i, j, 2): query minus key
    assert (idx == (rel[..., 0] + 2) * 7 + rel[..., 1] + 3).all()
    assert (pl.relative_index_2d(pos + 5, pos + 5, 3, 4) == idx).all()


def test_offsets_past_the_window_are_clamped_or_refused():
    q, k = torch.tensor([[0, 0]]), torch.tensor([[5, 1], [2, -9]])
    idx = pl.relative_index_2d(q, k, 3, 3)  # reach 2 in each direction
    edge = pl.relative_index_2d(q, torch.tensor([[2, 1], [2, -2]]), 3, 3)
    assert (idx == edge).all()
    with pytest.raises(
        ValueError, match=r"\(\|drow\|, \|dcol\|\) = \(5, 9\).*clamp=True"
    ):
        pl.relative_index_2d(q, k, 3, 3, clamp=False)


def test_bias_reads_the_table_per_head_and_depends_on_offsets_only():
    pe = pl.make_encoding("swin", d_model=16, n_heads=4, max_len=16)
    assert isinstance(pe, pl.SwinRelativeBias) and pe.window == (4, 4)
    assert pe.table.shape == (49, 4)
    pos = pl.grid_positions(3, 3)[None]  # (1, 9, 2)
    q = torch.zeros(1, 4, 9, 4)
    bias = pe.score_bias(q, q, pos, pos)  # (1, h, i, j)
    idx = pl.relative_index_2d(pos[0], pos[0], 4, 4)
    assert_close(bias[0], pe.table.detach()[idx].permute(2, 0, 1))
    assert_close(pe.score_bias(q, q, pos + 7, pos + 7), bias)


def test_bias_is_added_after_the_scaling_as_swin_does():
    torch.manual_seed(0)
    pe = pl.SwinRelativeBias(2, (2, 2)).double()
    q, k, v = torch.randn(3, 1, 2, 4, 8, dtype=torch.float64).unbind(0)
    pos = pl.grid_positions(2, 2)[None]
    idx = pl.swin_relative_position_index(2, 2)
    bias = pe.table.detach()[idx].permute(2, 0, 1)  # (h, i, j)
    # softmax((q / sqrt(d)) k^T + B) v, WindowAttention's order
    expect = torch.softmax((q / math.sqrt(8)) @ k.transpose(-1, -2) + bias, -1) @ v
    assert_close(pl.attention(q, k, v, pe, pos, pos), expect)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"window\[0\] must be > 0"):
        pl.SwinRelativeBias(2, (0, 3))
    with pytest.raises(TypeError, match="clamp must be a bool"):
        pl.SwinRelativeBias(2, (2, 2), clamp=1)
    pe = pl.SwinRelativeBias(2, (2, 2))
    pos = pl.grid_positions(2, 2)[None]
    with pytest.raises(ValueError, match="n_heads=2"):
        pe.score_bias(torch.zeros(1, 3, 4, 4), None, pos, pos)


@pytest.mark.parametrize("wh, ww", [(2, 3), (3, 2), (7, 7)])
def test_parity_with_swin_window_attention_and_timm(wh, ww):
    ours = pl.swin_relative_position_index(wh, ww)
    assert ours.tolist() == GOLDEN[f"swin_{wh}x{ww}"]
    assert ours.tolist() == GOLDEN[f"timm_{wh}x{ww}"]

"""2-D sinusoidal embeddings: properties, then every layout in use reproduced from ours
with its convention mapped (golden vectors from Hugging Face, MAE, timm, DETR and
Deformable DETR, made by golden/make_vision_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "vision_sincos.json").read_text()
)
F32 = {"atol": 1e-5, "rtol": 1e-5}  # the references compute in float32


def golden(key):
    return torch.tensor(GOLDEN[key], dtype=torch.float64)


def blocks(table):
    """sin(r w), cos(r w), sin(c w), cos(c w)."""
    return table.split(table.shape[-1] // 4, dim=-1)


def test_layout_rows_first_then_columns_sin_then_cos():
    d = 12
    table = pl.sinusoidal_2d(2, 3, d, dtype=torch.float64)  # (6, D)
    omega = 10000.0 ** (-torch.arange(3, dtype=torch.float64) / 3)  # D/4 = 3
    r, c = pl.grid_positions(2, 3).double().unbind(-1)
    sr, cr, sc, cc = blocks(table)
    assert_close(sr, torch.sin(r[:, None] * omega))
    assert_close(cr, torch.cos(r[:, None] * omega))
    assert_close(sc, torch.sin(c[:, None] * omega))
    assert_close(cc, torch.cos(c[:, None] * omega))


def test_dot_product_is_a_sum_of_a_row_and_a_column_offset_term():
    d = 16
    pts = torch.tensor([[0, 0], [2, 5], [7, 1], [3, 3]])
    pe = pl.sinusoidal_2d_at(pts, d)
    omega = 10000.0 ** (-torch.arange(4, dtype=torch.float64) / 4)
    rel = (pts[:, None] - pts[None]).double()  # (n, n, 2)
    # pe(p) . pe(p') = sum_k cos(dr w_k) + cos(dc w_k)
    expect = torch.cos(rel[..., :1] * omega).sum(-1) + torch.cos(
        rel[..., 1:] * omega
    ).sum(-1)
    assert_close(pe @ pe.T, expect)
    assert_close(
        pl.sinusoidal_2d_at(pts + 9, d) @ pl.sinusoidal_2d_at(pts + 9, d).T, expect
    )


def test_encoding_adds_the_table_at_the_coordinates():
    pe = pl.make_encoding("sincos_2d", d_model=8, n_heads=2, max_len=16)
    assert isinstance(pe, pl.Sinusoidal2D) and not list(pe.parameters())
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pos = pl.grid_positions(2, 3).expand(2, 6, 2)
    assert_close(pe.encode_input(x, pos), x + pl.sinusoidal_2d(2, 3, 8, dtype=x.dtype))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="divisible by 4"):
        pl.sinusoidal_2d(2, 2, 10)
    with pytest.raises(ValueError, match="divisible by 4"):
        pl.Sinusoidal2D(6)
    with pytest.raises(ValueError, match="base must be a number > 1"):
        pl.sinusoidal_2d(2, 2, 8, base=1.0)
    with pytest.raises(ValueError, match=r"\(\.\.\., 2\)"):
        pl.sinusoidal_2d_at(torch.zeros(3, 3), 8)
    with pytest.raises(ValueError, match="d_model=8"):
        pl.Sinusoidal2D(8).encode_input(
            torch.randn(1, 2, 4), torch.zeros(1, 2, 2).long()
        )


def test_parity_with_hugging_face_build_2d_sinusoidal_position_embedding():
    h, w, d = GOLDEN["height"], GOLDEN["width"], GOLDEN["dim"]
    assert_close(pl.sinusoidal_2d(h, w, d, dtype=torch.float64), golden("hf_build_2d"))


def test_mae_puts_the_columns_first():
    """MAE's meshgrid takes w first: [sin c | cos c | sin r | cos r] (its class token
    row is zeros). Hugging Face's ViT-MAE swaps the halves to load MAE's weights."""
    sr, cr, sc, cc = blocks(pl.sinusoidal_2d(4, 4, GOLDEN["dim"], dtype=torch.float64))
    mae = torch.cat((sc, cc, sr, cr), dim=-1)
    for key in ("mae_4x4_with_cls", "hf_vit_mae_init_4x4_with_cls"):
        table = golden(key)
        assert_close(table[0], torch.zeros_like(table[0]))
        assert_close(table[1:], mae, **F32)
    assert not torch.allclose(
        golden("mae_4x4_with_cls")[1:], torch.cat((sr, cr, sc, cc), -1)
    )


def test_timm_orders_the_blocks_sin_sin_cos_cos_unless_interleaved():
    h, w, d = GOLDEN["height"], GOLDEN["width"], GOLDEN["dim"]
    sr, cr, sc, cc = blocks(pl.sinusoidal_2d(h, w, d, dtype=torch.float64))
    assert_close(golden("timm_default"), torch.cat((sr, sc, cr, cc), -1), **F32)
    assert_close(
        golden("timm_interleave_sin_cos"), torch.cat((sr, cr, sc, cc), -1), **F32
    )


def detr_sine(h, w, d, normalize, centre=0.0):
    """DETR's PositionEmbeddingSine from ours: positions 1..H (normalised: (p - centre)
    / H * 2 pi), sin and cos interleaved within each axis, rows first."""
    pos = pl.grid_positions(h, w).double() + 1  # cumsum of the unpadded mask
    if normalize:
        pos = (pos - centre) / (torch.tensor([h, w]) + 1e-6) * 2 * math.pi
    sr, cr, sc, cc = blocks(pl.sinusoidal_2d_at(pos, d))
    return torch.cat(
        (torch.stack((sr, cr), -1).flatten(-2), torch.stack((sc, cc), -1).flatten(-2)),
        -1,
    )


@pytest.mark.parametrize("normalize", [False, True])
def test_parity_with_detr_and_deformable_detr_position_embedding_sine(normalize):
    h, w, d = GOLDEN["height"], GOLDEN["width"], GOLDEN["dim"]
    assert_close(
        golden(f"detr_normalize_{normalize}"), detr_sine(h, w, d, normalize), **F32
    )
    # Deformable DETR centres the normalised positions: (p - 0.5) / H * 2 pi
    centre = 0.5 if normalize else 0.0
    assert_close(
        golden(f"deformable_detr_normalize_{normalize}"),
        detr_sine(h, w, d, normalize, centre),
        **F32,
    )

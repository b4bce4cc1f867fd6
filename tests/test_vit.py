"""ViT's learned table and its resizing: properties, then parity with timm's
``resample_abs_pos_embed`` and ViT's ``interpolate_posembed`` (committed golden vectors
from golden/make_vision_golden.py)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = pathlib.Path(__file__).parent / "golden" / "vision_resize.json"


def test_grid_positions_are_raster_order():
    pos = pl.grid_positions(3, 4)
    assert pos.shape == (12, 2) and pos.dtype == torch.int64
    p = torch.arange(12)
    assert_close(pos[:, 0] * 4 + pos[:, 1], p)  # p = r * width + c
    assert pos[5].tolist() == [1, 1]
    with pytest.raises(ValueError, match=r"\(height, width\)\[1\] must be > 0"):
        pl.grid_positions(3, 0)
    with pytest.raises(TypeError, match="must be an int"):
        pl.grid_positions(2.0, 3)


def test_registered_table_has_one_row_per_patch_of_a_square_grid():
    pe = pl.make_encoding("vit_learned", d_model=8, n_heads=2, max_len=30)
    assert isinstance(pe, pl.VitLearned) and pe.grid == (6, 6)  # 36 >= 30 cells
    assert pe.table.shape == (36, 8) and pe.coord_axes == 2


def test_the_table_is_read_in_raster_order():
    pe = pl.VitLearned((3, 4), 5)
    x = torch.randn(2, 12, 5)
    pos = pl.grid_positions(3, 4).expand(2, 12, 2)
    assert_close(pe.encode_input(x, pos), x + pe.table.detach())  # row p = r W + c
    shuffled = pos[:, torch.randperm(12)]
    rows = shuffled[..., 0] * 4 + shuffled[..., 1]
    assert_close(pe.encode_input(x, shuffled), x + pe.table.detach()[rows])


def test_coordinates_off_the_grid_are_a_clear_error():
    pe = pl.VitLearned((3, 4), 5)
    x = torch.randn(1, 2, 5)
    with pytest.raises(ValueError, match=r"3 x 4 grid.*resized"):
        pe.encode_input(x, torch.tensor([[[0, 0], [3, 0]]]))
    with pytest.raises(ValueError, match="cols in"):
        pe.encode_input(x, torch.tensor([[[0, 0], [0, 4]]]))
    with pytest.raises(TypeError, match="integer coordinates"):
        pe.encode_input(x, torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match=r"\(b, n, 2\)"):
        pe.encode_input(x, torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="d_model=5"):
        pe.encode_input(torch.randn(1, 2, 4), torch.zeros(1, 2, 2, dtype=torch.long))


def test_resizing_to_the_same_grid_changes_nothing_and_keeps_the_prefix():
    table = torch.randn(1 + 12, 3)
    assert_close(pl.resize_pos_embed(table, (3, 4), (3, 4), num_prefix_tokens=1), table)
    out = pl.resize_pos_embed(table, (3, 4), (5, 7), num_prefix_tokens=1)
    assert out.shape == (1 + 35, 3)
    assert_close(out[0], table[0])  # the class token's row is kept apart
    batched = pl.resize_pos_embed(table[None], (3, 4), (5, 7), num_prefix_tokens=1)
    assert_close(batched[0], out)


def test_interpolation_keeps_constants_and_bilinear_corners_keeps_ramps():
    const = torch.full((12, 2), 0.7, dtype=torch.float64)
    assert_close(pl.resize_pos_embed(const, (3, 4), (6, 9)), torch.full((54, 2), 0.7,
                 dtype=torch.float64))  # fmt: skip
    ramp = pl.grid_positions(3, 4).double()  # value = (row, col)
    out = pl.resize_pos_embed(
        ramp, (3, 4), (5, 7), interpolation="bilinear", antialias=False,
        align_corners=True,
    )  # fmt: skip
    grid = pl.grid_positions(5, 7).double()
    assert_close(out, grid * torch.tensor([2 / 4, 3 / 6]))  # corners map to corners


def test_half_precision_tables_are_interpolated_in_float32():
    table = torch.randn(12, 4)
    half = pl.resize_pos_embed(table.half(), (3, 4), (6, 8))
    assert half.dtype == torch.float16
    in_float = pl.resize_pos_embed(table.half().float(), (3, 4), (6, 8))
    assert_close(half.float(), in_float, atol=1e-3, rtol=1e-3)


def test_bad_resize_arguments_are_clear_errors():
    table = torch.randn(13, 4)
    with pytest.raises(ValueError, match=r"13 rows.*1 \+ 3 \* 3 = 10"):
        pl.resize_pos_embed(table, (3, 3), (4, 4), num_prefix_tokens=1)
    with pytest.raises(ValueError, match="interpolation must be one of"):
        pl.resize_pos_embed(table[:12], (3, 4), (4, 4), interpolation="area")
    with pytest.raises(ValueError, match="antialias=True needs align_corners=False"):
        pl.resize_pos_embed(table[:12], (3, 4), (4, 4), align_corners=True)
    with pytest.raises(TypeError, match="floating-point"):
        pl.resize_pos_embed(torch.ones(12, 4, dtype=torch.long), (3, 4), (4, 4))
    with pytest.raises(TypeError, match="pair"):
        pl.resize_pos_embed(table[:12], 12, (4, 4))


def test_resized_module_serves_a_larger_grid():
    pe = pl.VitLearned((3, 4), 5)
    big = pe.resized((6, 8))
    assert big.grid == (6, 8) and big.table.shape == (48, 5)
    assert_close(
        big.table.detach(), pl.resize_pos_embed(pe.table.detach(), (3, 4), (6, 8))
    )
    model = pl.TinyTransformer(7, 16, 2, 1, pe=pl.VitLearned((2, 2), 16))
    with pytest.raises(ValueError, match="2 x 2 grid"):
        model(torch.randint(7, (1, 9)), pos=pl.grid_positions(3, 3), causal=False)
    model.pe = model.blocks[0].attn.pe = model.pe.resized((3, 3))
    assert model(torch.randint(7, (1, 9)), pos=pl.grid_positions(3, 3)).shape == (
        1,
        9,
        7,
    )


@pytest.mark.parametrize("new", [(6, 5), (3, 3)])
@pytest.mark.parametrize("antialias", [True, False])
def test_parity_with_timm_resample_abs_pos_embed(new, antialias):
    golden = json.loads(GOLDEN.read_text())
    table = torch.tensor(golden["table_1_cls_4x4"], dtype=torch.float32)
    ours = pl.resize_pos_embed(table, (4, 4), new, num_prefix_tokens=1,
                               antialias=antialias)  # fmt: skip
    key = f"timm_{new[0]}x{new[1]}_antialias_{antialias}"
    assert_close(ours, torch.tensor(golden[key], dtype=torch.float32))


def test_parity_with_vit_interpolate_posembed_scipy_zoom_order_1():
    """ViT's own resizing is bilinear with the corners aligned, not timm's bicubic."""
    golden = json.loads(GOLDEN.read_text())
    table = torch.tensor(golden["table_1_cls_4x4"], dtype=torch.float64)
    ours = pl.resize_pos_embed(
        table, (4, 4), (6, 6), num_prefix_tokens=1, interpolation="bilinear",
        antialias=False, align_corners=True,
    )  # fmt: skip
    assert_close(ours, torch.tensor(golden["vit_zoom_6x6"], dtype=torch.float64),
                 atol=1e-6, rtol=1e-6)  # fmt: skip

"""2-D RoPE, axial and mixed: scores depend on (drow, dcol) only, then parity with
RoPE-ViT's ``compute_axial_cis`` / ``compute_mixed_cis`` (golden vectors made by
golden/make_vision_golden.py from naver-ai/rope-vit)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "vision_rope.json").read_text()
)
F32 = {"atol": 1e-5, "rtol": 1e-5}


def encodings():
    torch.manual_seed(0)
    return [pl.Rotary2D(8).double(), pl.RotaryMixed(8, 2).double(),
            pl.Rotary2D(8, layout="half").double()]  # fmt: skip


@pytest.mark.parametrize("pe", encodings(), ids=["axial", "mixed", "axial-half"])
def test_scores_depend_on_the_offset_only(pe):
    torch.manual_seed(1)
    q, k = torch.randn(2, 1, 2, 1, 8, dtype=torch.float64).unbind(0)
    pts = torch.tensor([[0, 0], [1, 2], [4, 1], [3, 5], [2, 2]])
    n = len(pts)
    q, k = q.expand(1, 2, n, 8), k.expand(1, 2, n, 8)  # the same q, k everywhere

    def scores(coords):
        rq, rk = pe.transform_qk(q, k, coords[None], coords[None])
        return rq @ rk.transpose(-1, -2)  # (1, h, i, j)

    base = scores(pts)
    for shift in ([3, 0], [0, 7], [5, 2]):
        assert_close(scores(pts + torch.tensor(shift)), base)
    # and on nothing else: move two of the points by the same step, the rest not
    moved = pts.clone()
    moved[1:3] += torch.tensor([6, 3])
    assert_close(scores(moved)[..., 1, 2], base[..., 1, 2])


@pytest.mark.parametrize("pe", encodings(), ids=["axial", "mixed", "axial-half"])
def test_rotation_keeps_the_norm(pe):
    q = torch.randn(2, 2, 6, 8, dtype=torch.float64)
    pos = torch.randint(0, 20, (2, 6, 2))
    rq, _ = pe.transform_qk(q, q, pos, pos)
    assert_close(rq.norm(dim=-1), q.norm(dim=-1))


def test_axial_is_a_1d_rope_of_the_row_then_one_of_the_column():
    d, base = 16, 100.0
    x = torch.randn(1, 2, 6, d, dtype=torch.float64)
    pos = torch.randint(0, 9, (1, 6, 2))
    rq, _ = pl.Rotary2D(d, base).transform_qk(x, x, pos, pos)
    inv, _ = pl.rope_inv_freq(d // 2, base)  # omega_k = base^(-k/(d/4))
    rows = pl.apply_rope(x[..., : d // 2], pos[..., 0], inv, "interleaved")
    cols = pl.apply_rope(x[..., d // 2 :], pos[..., 1], inv, "interleaved")
    assert_close(rq, torch.cat((rows, cols), -1))
    freqs = pl.axial_frequencies(d, 2, base)
    assert_close(
        freqs, torch.stack((torch.cat((inv, 0 * inv)), torch.cat((0 * inv, inv))))
    )
    assert pl.axial_frequencies(12, 3).shape == (3, 6)  # a video's (t, row, col)


def test_mixed_without_rotation_is_axial_with_the_column_block_first():
    f = pl.mixed_frequencies(8, 3, base=10.0, rotate=False)  # (2, h, d/2): row, col
    axial = pl.axial_frequencies(8, 2, base=10.0)  # (2, d/2): row block first
    assert_close(f, axial.flip(0)[:, None].expand(2, 3, 4), atol=1e-15, rtol=0)


def test_mixed_frequencies_are_learned_and_get_gradients():
    pe = pl.make_encoding("rope_mixed", d_model=16, n_heads=2, max_len=16)
    assert isinstance(pe, pl.RotaryMixed) and pe.freqs.shape == (2, 2, 4)
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    pos = pl.grid_positions(2, 2)[None]
    rq, rk = pe.transform_qk(q, q, pos, pos)
    (rq @ rk.transpose(-1, -2)).sum().backward()
    assert pe.freqs.grad is not None and pe.freqs.grad.abs().sum() > 0
    mags = pe.freqs.detach().double().norm(dim=0)  # |f| = base^(-k/(d/4)), twice
    assert_close(
        mags,
        torch.tensor([1.0, 10**-0.5] * 2, dtype=torch.float64).expand(2, 4),
        atol=1e-6,
        rtol=1e-6,
    )


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="divisible by 2 \\* n_axes = 4"):
        pl.Rotary2D(6)
    with pytest.raises(ValueError, match="layout must be one of"):
        pl.RotaryMixed(8, 2, layout="pairs")
    pe = pl.RotaryMixed(8, 2)
    pos = pl.grid_positions(2, 2)[None]
    with pytest.raises(ValueError, match="n_heads=2"):
        pe.transform_qk(torch.zeros(1, 3, 4, 8), torch.zeros(1, 3, 4, 8), pos, pos)
    with pytest.raises(ValueError, match="d_head=8"):
        pl.Rotary2D(8).transform_qk(torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4),
                                    pos, pos)  # fmt: skip
    with pytest.raises(TypeError, match="integer coordinates"):
        pl.rotary_angles(pos.double(), pl.axial_frequencies(8))
    with pytest.raises(ValueError, match="a = 2 axes"):
        pl.rotary_angles(pos, pl.axial_frequencies(12, 3))


def golden(key):
    return torch.tensor(GOLDEN[key], dtype=torch.float32)[None]


def test_parity_with_rope_vit_axial():
    """RoPE-ViT rotates its first d/4 pairs with x (the column): ours with the
    coordinates given as (col, row)."""
    pe = pl.Rotary2D(GOLDEN["dim"], base=GOLDEN["axial_theta"])
    cols_first = pl.grid_positions(GOLDEN["end_y"], GOLDEN["end_x"]).flip(-1)[None]
    rq, rk = pe.transform_qk(golden("q"), golden("k"), cols_first, cols_first)
    assert_close(rq, golden("axial_q"), **F32)
    assert_close(rk, golden("axial_k"), **F32)


def test_parity_with_rope_vit_mixed():
    """RoPE-ViT's freqs are (x, y) = (col, row): ours take them flipped."""
    pe = pl.RotaryMixed(GOLDEN["dim"], GOLDEN["heads"], base=GOLDEN["mixed_theta"])
    with torch.no_grad():
        pe.freqs.copy_(golden("mixed_freqs_xy")[0].flip(0))
    pos = pl.grid_positions(GOLDEN["end_y"], GOLDEN["end_x"])[None]
    rq, rk = pe.transform_qk(golden("q"), golden("k"), pos, pos)
    assert_close(rq, golden("mixed_q"), **F32)
    assert_close(rk, golden("mixed_k"), **F32)
    unrotated = pl.mixed_frequencies(GOLDEN["dim"], GOLDEN["heads"], 10.0, rotate=False)
    assert_close(unrotated.flip(0).float(), golden("unrotated_freqs_xy")[0], **F32)

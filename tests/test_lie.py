"""Rotations from generators: properties of ``lie_rotation``, LieRE and ComRoPE, then
parity with timm's RoPE-Mixed and DINOv3 RoPE (golden vectors made by
golden/make_lie_golden.py)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "lie_timm.json").read_text()
)
F32 = {"atol": 1e-5, "rtol": 1e-5}


def scores(pe, q, k, pos):
    rq, rk = pe.transform_qk(q, k, pos, pos)
    return rq @ rk.transpose(-1, -2)  # (b, h, i, j)


def encodings():
    g = torch.Generator().manual_seed(0)
    return {
        "comrope-ld": pl.ComRoPE(8, 2, generator=g).double(),
        "comrope-ap": pl.ComRoPE(8, 2, variant="ap", generator=g).double(),
        "comrope-ld-2": pl.ComRoPE(8, 2, block_size=2, generator=g).double(),
        "liere": pl.LieRE(8, 2, generator=g).double(),
        "liere-blocks": pl.LieRE(8, 2, block_size=2, generator=g).double(),
    }


def test_lie_rotation_is_orthogonal_and_the_exponential_of_the_sum():
    g = pl.skew_symmetric(torch.randn(3, 6, 6, dtype=torch.float64))
    p = torch.randn(2, 4, 3, dtype=torch.float64)
    rot = pl.lie_rotation(p, g)  # (b, n, d, d)
    assert rot.shape == (2, 4, 6, 6)
    assert_close(
        rot @ rot.transpose(-1, -2),
        torch.eye(6, dtype=torch.float64).expand(2, 4, 6, 6),
    )
    a = p[1, 2, 0] * g[0] + p[1, 2, 1] * g[1] + p[1, 2, 2] * g[2]
    assert_close(rot[1, 2], torch.linalg.matrix_exp(a))
    per_head = pl.lie_rotation(p, g[:, None].expand(3, 2, 6, 6))  # (b, h, n, d, d)
    assert_close(per_head, rot[:, None].expand(2, 2, 4, 6, 6))


def test_2x2_generators_give_rope():
    """One axis, G = theta J in each 2 x 2 block: R(p) turns pair k by p theta_k."""
    theta = torch.tensor([1.0, 0.1], dtype=torch.float64)
    j = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    g = torch.block_diag(theta[0] * j, theta[1] * j)[None]  # (1, 4, 4)
    pos = torch.arange(5)[None, :, None]
    x = torch.randn(1, 1, 5, 4, dtype=torch.float64)
    rot = pl.lie_rotation(pos, g)  # (1, 5, 4, 4)
    ours = torch.einsum("bnde,bhne->bhnd", rot, x)
    assert_close(ours, pl.apply_rope(x, pos[..., 0], theta, "interleaved"))


@pytest.mark.parametrize("name", ["comrope-ld", "comrope-ap", "comrope-ld-2"])
def test_comrope_generators_commute_and_scores_depend_on_the_offset_only(name):
    pe = encodings()[name]
    gens = pe.generators()  # (a, h, d, d)
    assert_close(pl.commutator(gens[0], gens[1]), torch.zeros_like(gens[0]))
    assert_close(gens, -gens.transpose(-1, -2))
    q, k = torch.randn(2, 1, 2, 6, 8, dtype=torch.float64).unbind(0)
    pos = torch.randint(0, 9, (1, 6, 2))
    for shift in ([3, 0], [0, -7], [5, 2]):
        assert_close(scores(pe, q, k, pos + torch.tensor(shift)), scores(pe, q, k, pos))


def test_comrope_blocks_follow_the_authors_definitions():
    """LD: block j of axis a is theta_{a j} (P_j - P_j^T); AP: block j only on axis
    j mod a (Longin-Yu/ComRoPE, model.py, ComRoPELDAttention / ComRoPEAPAttention)."""
    ld, ap = encodings()["comrope-ld"], pl.ComRoPE(16, 2, variant="ap", block_size=2)
    base = ld.params - ld.params.transpose(-1, -2)  # (h, m, s, s)
    assert_close(ld.blocks(), ld.theta[:, None, :, None, None] * base)
    blocks = ap.blocks()  # (a, h, m, s, s)
    for a in range(2):
        for j in range(blocks.shape[2]):
            assert bool(blocks[a, :, j].abs().sum() > 0) == (j % 2 == a)


def test_liere_generators_do_not_commute_and_scores_move_with_the_origin():
    pe = encodings()["liere"]
    gens = pe.generators()
    assert pl.commutator(gens[0], gens[1]).abs().max() > 0.1
    q, k = torch.randn(2, 1, 2, 6, 8, dtype=torch.float64).unbind(0)
    pos = torch.randint(0, 9, (1, 6, 2))
    moved = scores(pe, q, k, pos + torch.tensor([3, -2]))
    assert (moved - scores(pe, q, k, pos)).abs().max() > 0.1
    # along one axis alone the generator commutes with itself: relative again
    one = pos * torch.tensor([1, 0])
    assert_close(scores(pe, q, k, one + torch.tensor([4, 0])), scores(pe, q, k, one))


@pytest.mark.parametrize("name", list(encodings()))
def test_rotation_keeps_the_norm_and_gets_gradients(name):
    pe = encodings()[name]
    q = torch.randn(2, 2, 6, 8, dtype=torch.float64)
    pos = torch.randint(0, 20, (2, 6, 2))
    rq, _ = pe.transform_qk(q, q, pos, pos)
    assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    rq.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pe.parameters())


def test_block_rotation_equals_the_full_matrix():
    pe = encodings()["comrope-ld"]
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    pos = torch.randint(0, 6, (1, 5, 2))
    rq, _ = pe.transform_qk(q, q, pos, pos)
    rot = pl.lie_rotation(pos, pe.generators().detach())  # (b, h, n, d, d)
    assert_close(rq, torch.einsum("bhnde,bhne->bhnd", rot, q))


def test_bad_arguments_are_clear_errors():
    p = torch.zeros(1, 3, 2)
    with pytest.raises(ValueError, match="skew-symmetric"):
        pl.lie_rotation(p, torch.eye(4).expand(2, 4, 4))
    with pytest.raises(ValueError, match="a = 2 axes"):
        pl.lie_rotation(p, torch.zeros(3, 4, 4))
    with pytest.raises(ValueError, match="coords must be"):
        pl.lie_rotation(torch.zeros(3, 2), torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match="square"):
        pl.lie_rotation(p, torch.zeros(2, 4, 3))
    with pytest.raises(TypeError, match="floating"):
        pl.lie_rotation(p, torch.zeros(2, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible by block_size"):
        pl.LieRE(8, 2, block_size=3)
    with pytest.raises(ValueError, match="block_size \\* n_axes = 8"):
        pl.ComRoPE(4, 2, block_size=4, variant="ap")
    with pytest.raises(ValueError, match="variant must be one of"):
        pl.ComRoPE(8, 2, variant="xx")
    pe, pos = pl.ComRoPE(8, 2), pl.grid_positions(2, 2)[None]
    with pytest.raises(ValueError, match="n_heads=2, d_head=8"):
        pe.transform_qk(torch.zeros(1, 3, 4, 8), torch.zeros(1, 3, 4, 8), pos, pos)
    with pytest.raises(TypeError, match="integer"):
        pe.transform_qk(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8),
                        pos.double(), pos.double())  # fmt: skip
    with pytest.raises(ValueError, match="normalize must be one of"):
        pl.dinov3_coords(3, 4, normalize="mean")
    with pytest.raises(ValueError, match="divisible by 4"):
        pl.dinov3_frequencies(6)
    with pytest.raises(ValueError, match="jitter must be finite and >= 1"):
        pl.augment_coords(torch.zeros(3, 2), jitter=0.5)


def golden(key):
    return torch.tensor(GOLDEN[key], dtype=torch.float32)[None]


def test_parity_with_timm_rope_mixed():
    """timm's freqs are (x, y) = (col, row): RotaryMixed takes them flipped."""
    pe = pl.RotaryMixed(GOLDEN["head_dim"], GOLDEN["heads"], base=10.0)
    with torch.no_grad():
        pe.freqs.copy_(golden("mixed_freqs")[0].flip(0))
    pos = pl.grid_positions(GOLDEN["height"], GOLDEN["width"])[None]
    rq, rk = pe.transform_qk(golden("q"), golden("k"), pos, pos)
    assert_close(rq, golden("mixed_q"), **F32)
    assert_close(rk, golden("mixed_k"), **F32)


def dinov3(q, coords, base=100.0):
    """DINOv3's RoPE from the library's pieces: axial angles, half layout."""
    freqs = pl.dinov3_frequencies(q.shape[-1], base)  # (2, d/2)
    # theta_k = x_row f_k^row + x_col f_k^col
    angles = coords.double() @ freqs  # (n, d/2)
    return pl.apply_rotary_angles(q, angles[None, None], layout="half")


@pytest.mark.parametrize("normalize", ["separate", "max"])
def test_parity_with_timm_dinov3(normalize):
    h, w = GOLDEN["height"], GOLDEN["width"]
    coords = pl.dinov3_coords(h, w, normalize=normalize)
    assert_close(coords, golden(f"dinov3_{normalize}_coords")[0], **F32)
    assert coords.abs().max() < 1
    assert_close(dinov3(golden("q"), coords), golden(f"dinov3_{normalize}_q"), **F32)


def test_parity_with_timm_dinov3_augmentations():
    aug = GOLDEN["dinov3_aug"]
    g = torch.Generator().manual_seed(GOLDEN["dinov3_aug_seed"])
    coords = pl.augment_coords(
        pl.dinov3_coords(GOLDEN["height"], GOLDEN["width"]), generator=g, **aug
    )
    assert_close(dinov3(golden("q"), coords), golden("dinov3_aug_q"), **F32)


def test_dinov3_is_axial_rope_of_the_patch_index():
    """On a fixed grid, DINOv3's angles are axial RoPE's for the integer (r, c) with
    frequencies 4 pi / H base^(-k/(d/4)), plus a constant phase: same scores."""
    h, w, d = 4, 6, 16
    q, k = torch.randn(2, 1, 2, h * w, d, dtype=torch.float64).unbind(0)
    ours_q, ours_k = (
        dinov3(x, pl.dinov3_coords(h, w, dtype=torch.float64)) for x in (q, k)
    )
    axial = pl.Rotary2D(d, base=100.0, layout="half").double()
    with torch.no_grad():
        axial.freqs *= torch.tensor(
            [4 * torch.pi / h, 4 * torch.pi / w], dtype=torch.float64
        )[:, None]
    pos = pl.grid_positions(h, w)[None]
    assert_close(ours_q @ ours_k.transpose(-1, -2), scores(axial, q, k, pos))

"""RoPE, its scalings and xPos: properties, golden values, parity with Hugging Face
and torchscale.

Parity runs without those packages: ``tests/golden/rope_hf.json`` holds their outputs,
produced by ``tests/golden/make_rope_golden.py`` (which documents the versions).
"""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "rope_hf.json").read_text()
)
CASES = {c["name"]: c for c in GOLDEN["cases"]}


def block_matrix(m, inv_freq):
    """The explicit (d, d) block-diagonal R_m of RoFormer eq. (15),
    interleaved pairs."""
    blocks = [
        torch.tensor(
            [[math.cos(m * t), -math.sin(m * t)], [math.sin(m * t), math.cos(m * t)]],
            dtype=torch.float64,
        )
        for t in inv_freq.tolist()
    ]
    return torch.block_diag(*blocks)


def rope1(x, m, inv_freq, layout="half"):
    """One vector (d,) at one position m."""
    return pl.apply_rope(x[None, None, None], torch.tensor([m]), inv_freq, layout)[
        0, 0, 0
    ]


# ---- properties ----


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_scores_depend_only_on_offset(layout):
    d = 16
    inv_freq, _ = pl.rope_inv_freq(d)
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    for offset in (-7, 0, 3, 20):
        scores = [
            rope1(q, m + offset, inv_freq, layout) @ rope1(k, m, inv_freq, layout)
            for m in (0, 5, 100, 1234)
        ]
        assert_close(torch.stack(scores), scores[0].expand(4))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_preserves_the_norm(layout):
    inv_freq, _ = pl.rope_inv_freq(32)
    x = torch.randn(2, 3, 50, 32, dtype=torch.float64)
    y = pl.apply_rope(x, torch.arange(50) * 37, inv_freq, layout)
    assert_close(y.norm(dim=-1), x.norm(dim=-1))


def test_interleaved_equals_the_explicit_block_matrix():
    d = 8
    inv_freq, _ = pl.rope_inv_freq(d)
    x = torch.randn(d, dtype=torch.float64)
    for m in (0, 1, 7, 300):
        assert_close(
            rope1(x, m, inv_freq, "interleaved"), block_matrix(m, inv_freq) @ x
        )


def test_half_equals_interleaved_up_to_a_fixed_permutation():
    d = 12
    inv_freq, _ = pl.rope_inv_freq(d)
    # interleaved slot 2i <- half slot i, interleaved slot 2i+1 <- half slot i + d/2
    perm = torch.stack(
        (torch.arange(d // 2), torch.arange(d // 2) + d // 2), dim=-1
    ).flatten()
    x = torch.randn(2, 2, 9, d, dtype=torch.float64)
    pos = torch.arange(9) * 5
    assert_close(
        pl.apply_rope(x, pos, inv_freq, "half")[..., perm],
        pl.apply_rope(x[..., perm], pos, inv_freq, "interleaved"),
    )


def test_half_and_interleaved_are_not_interchangeable_on_the_same_weights():
    d = 16
    inv_freq, _ = pl.rope_inv_freq(d)
    q, k = (
        torch.randn(1, 1, 10, d, dtype=torch.float64),
        torch.randn(1, 1, 10, d, dtype=torch.float64),
    )
    pos = torch.arange(10)
    half = pl.apply_rope(q, pos, inv_freq, "half") @ pl.apply_rope(
        k, pos, inv_freq, "half"
    ).transpose(-1, -2)
    inter = pl.apply_rope(q, pos, inv_freq, "interleaved") @ pl.apply_rope(
        k, pos, inv_freq, "interleaved"
    ).transpose(-1, -2)
    assert (half - inter).abs().max() > 0.5


def test_rotate_half_and_rotate_every_two_square_to_minus_identity():
    x = torch.randn(3, 10)
    assert_close(pl.rotate_half(pl.rotate_half(x)), -x)
    assert_close(pl.rotate_every_two(pl.rotate_every_two(x)), -x)
    assert_close(
        pl.rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])),
        torch.tensor([-3.0, -4.0, 1.0, 2.0]),
    )
    assert_close(
        pl.rotate_every_two(torch.tensor([1.0, 2.0, 3.0, 4.0])),
        torch.tensor([-2.0, 1.0, -4.0, 3.0]),
    )


def test_gradient_is_rotated_back_by_the_transpose():
    d = 8
    inv_freq, _ = pl.rope_inv_freq(d)
    x = torch.randn(d, dtype=torch.float64, requires_grad=True)
    g = torch.randn(d, dtype=torch.float64)
    (rope1(x, 5, inv_freq, "interleaved") @ g).backward()
    r = block_matrix(5, inv_freq)
    assert_close(x.grad, r.T @ g)  # dL/dx = R_m^T dL/dy
    assert (x.grad - r @ g).abs().max() > 1e-3  # not R_m dL/dy


def test_position_zero_is_the_identity_and_batched_positions_broadcast():
    inv_freq, _ = pl.rope_inv_freq(8)
    x = torch.randn(2, 3, 4, 8)
    assert_close(pl.apply_rope(x, torch.zeros(4, dtype=torch.long), inv_freq), x)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    both = pl.apply_rope(x, pos, inv_freq)
    assert_close(both[1:], pl.apply_rope(x[1:], pos[1], inv_freq))


def test_scalings_only_lower_frequencies_and_keep_the_none_case():
    d, kw = 64, {"original_max_position_embeddings": 128}
    plain, _ = pl.rope_inv_freq(d)
    for scaling, params in [
        ("linear", {"factor": 4.0}),
        ("ntk", {"factor": 4.0}),
        ("yarn", {"factor": 4.0, **kw}),
        ("llama3", {"factor": 4.0, **kw}),
        ("dynamic", {"factor": 2.0, "seq_len": 512, **kw}),
    ]:
        scaled, _ = pl.rope_inv_freq(d, scaling=scaling, **params)
        assert (scaled <= plain * (1 + 1e-12)).all(), scaling
    # NTK keeps the highest frequency and divides the lowest by exactly the factor
    ntk, _ = pl.rope_inv_freq(d, scaling="ntk", factor=4.0)
    assert_close(ntk[0], plain[0])
    assert_close(ntk[-1], plain[-1] / 4)
    # dynamic at or below L0 is plain RoPE
    assert_close(
        pl.rope_inv_freq(d, scaling="dynamic", factor=2.0, seq_len=100, **kw)[0], plain
    )


def test_rotary_encoding_is_relative_in_attention():
    torch.manual_seed(0)
    for name in ("rope", "rope_dynamic", "xpos"):
        mha = pl.MultiHeadAttention(
            32, 4, pl.make_encoding(name, d_model=32, n_heads=4, max_len=64)
        ).double()
        x = torch.randn(1, 10, 32, dtype=torch.float64)
        # shifting every position by the same amount changes nothing (dynamic: while
        # max pos < L0)
        assert_close(
            mha(x, torch.arange(10), causal=True),
            mha(x, torch.arange(10) + 40, causal=True),
        )


# ---- golden values ----


def test_seed_002_worked_example():
    # d = 4, m = 2, theta = (1, 0.1) (base 100), q = (1, 0, 1, 0), RoFormer's
    # interleaved pairs
    inv_freq, _ = pl.rope_inv_freq(4, base=100.0)
    assert_close(inv_freq, torch.tensor([1.0, 0.1], dtype=torch.float64))
    out = rope1(
        torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64),
        2,
        inv_freq,
        "interleaved",
    )
    assert_close(
        out,
        torch.tensor(
            [math.cos(2), math.sin(2), math.cos(0.2), math.sin(0.2)],
            dtype=torch.float64,
        ),
    )
    assert_close(
        out,
        torch.tensor([-0.416147, 0.909297, 0.980067, 0.198669], dtype=torch.float64),
        atol=1e-6,
        rtol=0,
    )


def test_default_frequencies():
    inv_freq, factor = pl.rope_inv_freq(8)
    assert_close(inv_freq, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64))
    assert factor == 1.0
    assert_close(
        pl.rope_inv_freq(
            8, scaling="yarn", factor=4.0, original_max_position_embeddings=64
        )[1],
        0.1 * math.log(4.0) + 1,
    )


# ---- parity with Hugging Face (and torchscale for xPos), from the golden file ----


def golden(name, key):
    return torch.tensor(CASES[name][key] if name else GOLDEN[key]).reshape(
        GOLDEN["shape"]
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity_inv_freq_with_hugging_face(name):
    case = CASES[name]
    params = dict(case["params"])
    if case["scaling"] in ("dynamic", "longrope"):
        params["seq_len"] = case["seq_len"]
    inv_freq, factor = pl.rope_inv_freq(
        GOLDEN["d_head"], case["base"], case["scaling"], **params
    )
    assert_close(inv_freq.float(), torch.tensor(case["inv_freq"]), rtol=2e-6, atol=1e-9)
    assert factor == pytest.approx(case["attention_factor"], rel=1e-12)


@pytest.mark.parametrize("name", sorted(n for n in CASES if "q_half" in CASES[n]))
def test_parity_half_layout_with_hugging_face_llama(name):
    case = CASES[name]
    params = dict(case["params"])
    if case["scaling"] in ("dynamic", "longrope"):
        params["seq_len"] = case["seq_len"]
    inv_freq, factor = pl.rope_inv_freq(
        GOLDEN["d_head"], case["base"], case["scaling"], **params
    )
    pos = torch.tensor(case["positions"])
    for x, key in ((golden(None, "q"), "q_half"), (golden(None, "k"), "k_half")):
        assert_close(
            pl.apply_rope(x, pos, inv_freq, "half", factor),
            golden(name, key),
            rtol=1e-5,
            atol=2e-5,
        )


def test_parity_interleaved_layout_with_hugging_face_gptj():
    ref = GOLDEN["interleaved"]
    inv_freq, _ = pl.rope_inv_freq(GOLDEN["d_head"])
    pos = torch.tensor(ref["positions"])
    for x, key in ((golden(None, "q"), "q"), (golden(None, "k"), "k")):
        assert_close(
            pl.apply_rope(x, pos, inv_freq, "interleaved"),
            torch.tensor(ref[key]).reshape(GOLDEN["shape"]),
            rtol=1e-5,
            atol=2e-5,
        )


def test_rotary_module_matches_hugging_face_dynamic_and_yarn():
    """The encoding classes, not only the functions: ``rope_dynamic`` uses the
    current length."""
    case = CASES["dynamic"]
    pe = pl.DynamicRotary(
        GOLDEN["d_head"], original_max_position_embeddings=32, factor=2.0
    )
    pos = torch.tensor(case["positions"])
    q, k = pe.transform_qk(golden(None, "q"), golden(None, "k"), pos, pos)
    assert_close(q, golden("dynamic", "q_half"), rtol=1e-5, atol=2e-5)
    pe = pl.Rotary(GOLDEN["d_head"], scaling="yarn", **CASES["yarn"]["params"])
    q, k = pe.transform_qk(golden(None, "q"), golden(None, "k"), pos, pos)
    assert_close(k, golden("yarn", "k_half"), rtol=1e-5, atol=2e-5)


def test_parity_xpos_scores_with_torchscale():
    ref = GOLDEN["xpos"]
    pe = pl.XPos(GOLDEN["d_head"], scale_base=ref["scale_base"], gamma=ref["gamma"])
    q, k = golden(None, "q"), golden(None, "k")
    n = q.shape[2]
    pos = torch.arange(n)[None].expand(q.shape[0], n)
    qx, kx = pe.transform_qk(q, k, pos, pos)
    assert_close(
        qx @ kx.transpose(-1, -2),
        torch.tensor(ref["scores"]).reshape(q.shape[0], 1, n, n),
        rtol=1e-5,
        atol=2e-5,
    )


def test_xpos_is_rope_with_pair_weights_zeta_to_the_offset():
    """score(m, n) = sum_i zeta_i^((m-n)/B) * (pair i of RoPE's score): relative,
    and < RoPE's weight for m > n."""
    d, base_b = 16, 8.0
    pe, rope = pl.XPos(d, scale_base=base_b), pl.Rotary(d, layout="interleaved")
    q, k = (
        torch.randn(1, 1, 1, d, dtype=torch.float64),
        torch.randn(1, 1, 1, d, dtype=torch.float64),
    )
    zeta = pl.xpos_decay(d).repeat_interleave(2)  # (d,)
    for m, n in ((5, 4), (40, 4), (100, 97)):
        mp, np_ = torch.tensor([[m]]), torch.tensor([[n]])
        qx, kx = pe.transform_qk(q, k, mp, np_)
        qr, kr = rope.transform_qk(q * zeta ** ((m - n) / base_b), k, mp, np_)
        assert_close((qx * kx).sum(), (qr * kr).sum())
    assert (zeta < 1).all() and (zeta > 0.28).all()


# ---- errors ----


def test_odd_head_dimension_is_a_clear_error():
    with pytest.raises(ValueError, match="must be even"):
        pl.apply_rope(torch.randn(1, 1, 3, 7), torch.arange(3), torch.ones(3))
    with pytest.raises(ValueError, match="d_head must be even"):
        pl.rope_inv_freq(7)
    with pytest.raises(ValueError, match="d_head must be even"):
        pl.Rotary(9)


def test_bad_arguments_are_clear_errors():
    inv_freq, _ = pl.rope_inv_freq(8)
    x = torch.randn(1, 1, 3, 8)
    with pytest.raises(TypeError, match="positions must hold integer positions"):
        pl.apply_rope(x, torch.arange(3.0), inv_freq)
    with pytest.raises(ValueError, match="positions must have shape"):
        pl.apply_rope(x, torch.arange(4), inv_freq)
    with pytest.raises(ValueError, match="layout must be one of"):
        pl.apply_rope(x, torch.arange(3), inv_freq, layout="neox")
    with pytest.raises(ValueError, match="inv_freq must have shape"):
        pl.apply_rope(x, torch.arange(3), inv_freq[:3])
    with pytest.raises(ValueError, match=r"x must be a tensor \(\.\.\., n, d\)"):
        pl.apply_rope(torch.randn(8), torch.arange(3), inv_freq)
    with pytest.raises(ValueError, match="scaling must be one of"):
        pl.rope_inv_freq(8, scaling="ntk-by-parts")
    with pytest.raises(TypeError, match="needs the parameters"):
        pl.rope_inv_freq(8, scaling="yarn", factor=2.0)
    with pytest.raises(TypeError, match="does not take"):
        pl.rope_inv_freq(8, scaling="linear", factor=2.0, beta_fast=3)
    with pytest.raises(ValueError, match="factor must be a finite number >= 1"):
        pl.rope_inv_freq(8, scaling="linear", factor=0.5)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        pl.rope_inv_freq(8, base=1.0)
    with pytest.raises(ValueError, match="short_factor must hold"):
        pl.rope_inv_freq(
            8,
            scaling="longrope",
            factor=2.0,
            original_max_position_embeddings=16,
            short_factor=[1.0],
            long_factor=[1.0] * 4,
        )
    with pytest.raises(ValueError, match="built for d_head=8"):
        pl.Rotary(8).transform_qk(
            torch.randn(1, 1, 2, 6),
            torch.randn(1, 1, 2, 6),
            torch.arange(2)[None],
            torch.arange(2)[None],
        )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_takes_any_leading_dimensions(layout):
    """(n, d), (b, n, d) and (b, h, n, d) rotate alike: no x[None, None] needed."""
    inv_freq, _ = pl.rope_inv_freq(8)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 7, 9], [3, 4, 5, 6, 7]])
    full = pl.apply_rope(x, pos, inv_freq, layout)
    assert_close(pl.apply_rope(x[:, 0], pos, inv_freq, layout), full[:, 0])
    assert_close(pl.apply_rope(x[1, 2], pos[1], inv_freq, layout), full[1, 2])

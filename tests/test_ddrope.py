"""Data-dependent RoPE (Mamba-3's rotation in attention form): properties, then golden
vectors from the Mamba-3 authors' reference (tests/golden/make_ddrope_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.ddrope import (
    DataDependentRotary,
    cumulative_angles,
    mamba3_angles,
)
from posenc_lib.encodings.rope2d import apply_rotary_angles

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "ddrope_mamba3.json").read_text()
)
D_MODEL, N_HEADS = 16, 2


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def encoding(seed=0, rope_fraction=0.5):
    torch.manual_seed(seed)
    pe = DataDependentRotary(D_MODEL, N_HEADS, rope_fraction=rope_fraction).double()
    with torch.no_grad():
        pe.dt_bias.fill_(0.5)  # steps of ~1: angles that turn visibly
    return pe


def rotated_scores(pe, x, pos=None, seed=1):
    b, n, _ = x.shape
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, N_HEADS, n, 8, generator=g, dtype=x.dtype) for _ in "qk")
    pos = torch.arange(n)[None] if pos is None else pos
    q2, k2 = pe.transform_qk(q, k, pos, pos, ctx=pl.Context(x=x))
    return q, k, q2 @ k2.mT  # (b, h, i, j)


# ---------------------------------------------------------------- properties


def test_a_constant_angle_is_plain_rope():
    """theta_t = theta for every token: phi_t = (t + 1) theta, and the rotation is
    RoPE's at position t + 1 with inverse frequencies theta."""
    theta = torch.tensor([0.7, 0.05], dtype=torch.float64)
    phi = cumulative_angles(theta.expand(1, 1, 6, 2))
    x = torch.randn(1, 1, 6, 4, dtype=torch.float64)
    rope = pl.apply_rope(x, torch.arange(1, 7), theta, "interleaved")
    assert_close(apply_rotary_angles(x, phi, "interleaved"), rope)


def test_the_angle_between_two_tokens_is_what_the_tokens_between_say():
    """q_t . k_s moves only with the angles of the tokens s + 1 .. t: changing the
    input of a token at or before the key leaves it, changing one in between does
    not. The first token's angle never matters."""
    pe = encoding()
    x = torch.randn(1, 8, D_MODEL, dtype=torch.float64)
    _, _, scores = rotated_scores(pe, x)
    before = x.clone()
    before[:, 2] = torch.randn(D_MODEL)  # token 2: at or before keys 2..
    _, _, moved = rotated_scores(pe, before)
    assert_close(moved[..., 6, 2], scores[..., 6, 2])  # key 2, query 6: unchanged
    assert (moved[..., 6, 1] - scores[..., 6, 1]).abs().max() > 1e-6  # 2 is between


def test_the_rotation_keeps_lengths_and_leaves_the_unrotated_half():
    pe = encoding()
    x = torch.randn(2, 7, D_MODEL, dtype=torch.float64)
    q = torch.randn(2, N_HEADS, 7, 8, dtype=torch.float64)
    pos = torch.arange(7)[None]
    q2, _ = pe.transform_qk(q, q, pos, pos, ctx=pl.Context(x=x))
    assert_close(q2.norm(dim=-1), q.norm(dim=-1))
    assert_close(q2[..., 2 * pe.n_angles :], q[..., 2 * pe.n_angles :])
    assert pe.n_angles == 2  # d = 8, rope_fraction 0.5: two pairs


def test_positions_order_the_sum_not_the_tokens():
    """Tokens stored in reverse position order get the angles of the same tokens in
    order: the running sum follows positions, as the causal mask does."""
    pe = encoding()
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    theta = pe.angles(x)  # (1, h, n, p)
    forward = cumulative_angles(theta)
    rev = torch.arange(5, -1, -1)
    backward = cumulative_angles(theta[:, :, rev], pos=torch.arange(6)[None, rev])
    assert_close(backward[:, :, rev], forward)


def test_a_cached_model_decodes_as_its_full_forward():
    pe = encoding()
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe.float()).double().eval()
    tokens = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(2))
    cache, steps = model.new_cache(), []
    for start, size in ((0, 4), (4, 1), (5, 3), (8, 1)):
        steps.append(model(tokens[:, start : start + size], cache=cache))
    assert_close(torch.cat(steps, 1), model(tokens))


# ---------------------------------------------------------------- golden vectors


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_matches_the_mamba3_reference(name):
    """mamba3_siso_fwd_ref (chunked) and mamba3_siso_step_ref (recurrent, the cache):
    with no decay and identity values their outputs are (R(phi_t) C_t) . (R(phi_s)
    B_s) * DT_s for s <= t, which our angles and rotation reproduce; their final
    angle state is our running sum at the last token, mod 2 pi."""
    c = GOLDEN["cases"][name]
    q, k = f64(c["q"]).transpose(1, 2), f64(c["k"]).transpose(1, 2)  # (b, h, t, d)
    dt = f64(c["dt"])  # (b, h, t)
    phi = cumulative_angles(mamba3_angles(f64(c["angle_logits"]), dt))  # (b,h,t,p)
    d, p = q.shape[-1], phi.shape[-1]
    phi_all = torch.nn.functional.pad(phi, (0, d // 2 - p))  # pairs past: not rotated
    q2 = apply_rotary_angles(q, phi_all, "interleaved")
    k2 = apply_rotary_angles(k, phi_all, "interleaved")
    n = q.shape[2]
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    want = (q2 @ k2.mT * dt[:, :, None, :]).masked_fill(~seen, 0.0)  # (b, h, t, s)
    for key in ("out", "out_step"):
        got = f64(c[key]).permute(0, 2, 1, 3)  # (b, t, h, s) -> (b, h, t, s)
        assert_close(got, want, rtol=1e-4, atol=2e-5)
    for key in ("final_angles", "final_angles_step"):
        gap = torch.remainder(phi[:, :, -1] - f64(c[key]) + math.pi, 2 * math.pi)
        assert_close(gap - math.pi, torch.zeros_like(gap), rtol=0, atol=1e-5)


def test_the_encoding_writes_mamba3_angles_from_its_input():
    """theta = pi tanh(W_a x) softplus(w_h . x + b_h), from the layer's projections."""
    pe = encoding()
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    dt = torch.nn.functional.softplus(pe.dt_proj(x) + pe.dt_bias).transpose(1, 2)
    want = math.pi * torch.tanh(pe.angle_proj(x))[:, None] * dt[..., None]
    assert_close(pe.angles(x), want)
    assert pe.angles(x).shape == (2, N_HEADS, 5, 2)


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="rope_fraction"):
        DataDependentRotary(16, 2, rope_fraction=0.25)
    with pytest.raises(ValueError, match="dt_min"):
        DataDependentRotary(16, 2, dt_min=0.5, dt_max=0.1)
    with pytest.raises(ValueError, match="leaves no pair"):
        DataDependentRotary(6, 2)  # d = 3: int(1.5) = 1 coordinate
    with pytest.raises(ValueError, match="angle_logits"):
        mamba3_angles(torch.ones(2, 5), torch.ones(2, 2, 5))
    with pytest.raises(ValueError, match="theta"):
        cumulative_angles(torch.ones(2, 5, 3))
    pe = encoding()
    q = torch.randn(1, N_HEADS, 4, 8, dtype=torch.float64)
    pos = torch.arange(4)[None]
    with pytest.raises(ValueError, match="reads ctx.x"):
        pe.transform_qk(q, q, pos, pos, ctx=pl.Context())
    x = torch.randn(1, 2, D_MODEL, dtype=torch.float64)  # the queries' rows only
    with pytest.raises(ValueError, match="every key's layer input"):
        pe.transform_qk(q[:, :, -2:], q, pos[:, -2:], pos, ctx=pl.Context(x=x))

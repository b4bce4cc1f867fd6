"""Issue 25, "five silent wrong answers": the three that live in encodings.

* xPos at long context: its key scale zeta^(-n/B) overflowed float32 near n = 36,000
  (float16 near 4,500), so the scores became NaN where the offset-only maths is fine.
* Stick-breaking with queries that are not the last tokens: it broke the stick on the
  query's own key and gave the leftover to a later token's value.
* CoPE and FoX with positions that do not increase along the sequence: they counted
  or gated in token order while the causal mask followed the positions.
"""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


# ---- xPos ----


def xpos_reference(q, k, v, pos, d, scale_base=512.0):
    """Causal xPos attention in float64 from the offset-only formula: pair i of the
    RoPE score q_m . R_(n-m) k_n weighted by zeta_i^((m - n)/B)."""
    q, k, v = q.double(), k.double(), v.double()
    rope = pl.Rotary(d, layout="interleaved")
    qr, kr = rope.transform_qk(q, k, pos[None], pos[None])  # angles in float64
    zeta = pl.xpos_decay(d).repeat_interleave(2)  # (d,)
    offset = (pos[:, None] - pos[None, :]).double()  # (i, j), m - n
    weight = zeta ** (offset[..., None] / scale_base)  # (i, j, d)
    scores = torch.einsum("bhid,bhjd,ijd->bhij", qr, kr, weight) / d**0.5
    causal = pos[None, :] <= pos[:, None]
    scores = scores.masked_fill(~causal, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("start", [40_000, 1_000_000])
@pytest.mark.parametrize("path", ["reference", "fused"])
def test_xpos_is_finite_and_right_far_from_position_zero_in_float32(start, path):
    d = 8
    q, k, v = (randn(1, 2, 4, d, seed=s, dtype=torch.float32) for s in (1, 2, 3))
    pos = torch.arange(start, start + 4)
    out = pl.attention(q, k, v, pl.XPos(d), pos, pos, causal=True, path=path)
    assert torch.isfinite(out).all()
    assert_close(out.double(), xpos_reference(q, k, v, pos, d), rtol=0, atol=1e-5)


def test_xpos_is_finite_and_right_far_from_position_zero_in_float16():
    d = 16
    q, k, v = (randn(1, 2, 64, d, seed=s, dtype=torch.float16) for s in (4, 5, 6))
    for start in (5_000, 1_000_000):
        pos = torch.arange(start, start + 64)
        out = pl.attention(q, k, v, pl.XPos(d), pos, pos, causal=True, path="reference")
        assert torch.isfinite(out).all()
        # float16 angles of RoPE are rounded once: a few 1e-3
        assert_close(out.double(), xpos_reference(q, k, v, pos, d), rtol=0, atol=1e-2)


def test_xpos_window_far_out_matches_the_same_window_at_zero():
    """Relative: a 3,000-position window at 10^6 gives what it gives at 0, in float32
    (scales up to zeta_0^(-1500/512) ~ 39 either way)."""
    d = 8
    q, k, v = (randn(1, 1, 6, d, seed=s, dtype=torch.float32) for s in (7, 8, 9))
    pos = torch.tensor([0, 1, 500, 1500, 2999, 3000])
    pe = pl.XPos(d)
    near = pl.attention(q, k, v, pe, pos, pos, causal=True)
    far = pl.attention(q, k, v, pe, pos + 10**6, pos + 10**6, causal=True)
    assert torch.isfinite(far).all()
    assert_close(far, near, rtol=0, atol=2e-5)
    assert_close(far.double(), xpos_reference(q, k, v, pos, d), rtol=0, atol=2e-5)


# ---- stick-breaking ----


@pytest.mark.parametrize("leftover", ["value", None])
@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_queries_that_are_not_the_last_tokens(leftover, attend_current):
    pe = pl.StickBreaking(attend_current=attend_current, leftover=leftover)
    q, k, v = (randn(2, 2, 5, 4, seed=s) for s in (10, 11, 12))
    full = pl.attention(q, k, v, pe, causal=True)
    keys = torch.arange(5)
    for rows in ([1, 2], [0], [0, 3], [2, 4]):
        sub = pl.attention(
            q[:, :, rows], k, v, pe, torch.tensor(rows), keys, causal=True
        )
        assert_close(sub, full[:, :, rows])


def test_stick_breaking_query_after_every_key_breaks_over_all_of_them():
    """A query at position 10 over keys 0..4 (its own token is not among them): every
    key is before it, so the stick is broken over all five; no own value, so the
    leftover is dropped."""
    pe = pl.StickBreaking()
    q, k, v = (randn(1, 2, 5, 4, seed=s) for s in (13, 14, 15))
    out = pl.attention(q[:, :, :1], k, v, pe, torch.tensor([10]), torch.arange(5),
                       causal=True)  # fmt: skip
    z = (q[:, :, :1] @ k.mT) / 2  # (b, h, 1, 5)
    a = pl.stick_breaking_weights(z, attend_current=True)  # keys 0..4, query at 4
    assert_close(out, a @ v)


def test_stick_breaking_refuses_keys_out_of_position_order_with_fewer_queries():
    """The stick is broken nearest first in token order: keys whose positions do not
    increase would be broken in the wrong order, so the call is refused (with as many
    queries as keys the mask check already refuses it)."""
    q = randn(1, 2, 5, 4, seed=16)
    keys = torch.tensor([1, 0, 2, 3, 4])
    with pytest.raises(ValueError, match="key positions that increase"):
        pl.attention(q[:, :, 1:3], q, q, pl.StickBreaking(), torch.tensor([1, 2]),
                     keys, causal=True)  # fmt: skip


# ---- CoPE and FoX: positions that do not increase along the sequence ----


def reversed_and_ordered(pe, q, k, v, x=None):
    """The same tokens at positions 3, 2, 1, 0 (in that token order) and in position
    order: the outputs must be the same tokens' outputs."""
    n = q.shape[2]
    back = torch.arange(n).flip(0)
    out_rev = pl.attention(q, k, v, pe, back, back, causal=True, x=x, path="reference")
    xf = None if x is None else x.flip(1)
    out_ord = pl.attention(
        q.flip(2), k.flip(2), v.flip(2), pe, torch.arange(n), torch.arange(n),
        causal=True, x=xf, path="reference",
    )  # fmt: skip
    return out_rev, out_ord.flip(2)


def test_cope_counts_in_position_order():
    torch.manual_seed(0)
    pe = pl.CoPE(4, 6)
    with torch.no_grad():
        pe.pos_emb.copy_(randn(6, 4, seed=16).float())
    q, k, v = (randn(1, 2, 4, 4, seed=s, dtype=torch.float32) for s in (17, 18, 19))
    rev, ordered = reversed_and_ordered(pe, q, k, v)
    assert_close(rev, ordered)
    # NoPE agrees already: the mask follows the positions
    nope = reversed_and_ordered(pl.PositionalEncoding(), q, k, v)
    assert_close(*nope)


def test_cope_counts_in_position_order_for_any_permutation():
    pe = pl.CoPE(4, 9).double()
    with torch.no_grad():
        pe.pos_emb.copy_(randn(9, 4, seed=20))
    q, k, v = (randn(2, 2, 8, 4, seed=s) for s in (21, 22, 23))
    perm = torch.tensor([5, 2, 7, 0, 1, 6, 3, 4])  # token t sits at position perm[t]
    out = pl.attention(q, k, v, pe, perm, perm, causal=True)
    order = perm.argsort()  # token order of the positions 0 .. 7
    ref = pl.attention(q[:, :, order], k[:, :, order], v[:, :, order], pe,
                       causal=True)  # fmt: skip
    assert_close(out[:, :, order], ref)


@pytest.mark.parametrize("path", ["reference", "fused", "flex"])
@torch.no_grad()  # FlexAttention runs forward only on CPU
def test_fox_gates_in_position_order(path):
    dtype = torch.float32 if path == "flex" else torch.float64  # flex: CPU kernel
    pe = pl.ForgettingAttention(8, 2).to(dtype)
    pe.gate.weight.copy_(randn(2, 8, seed=24))
    q, k, v = (randn(1, 2, 4, 4, seed=s, dtype=dtype) for s in (25, 26, 27))
    x = randn(1, 4, 8, seed=28, dtype=dtype)
    back = torch.arange(4).flip(0)
    rev = pl.attention(q, k, v, pe, back, back, causal=True, x=x, path=path)
    ordered = pl.attention(q.flip(2), k.flip(2), v.flip(2), pe, causal=True,
                           x=x.flip(1), path=path)  # fmt: skip
    assert_close(rev, ordered.flip(2))
    perm = torch.tensor([2, 0, 3, 1])  # token t at position perm[t]
    out = pl.attention(q, k, v, pe, perm, perm, causal=True, x=x, path=path)
    o = perm.argsort()
    ref = pl.attention(q[:, :, o], k[:, :, o], v[:, :, o], pe, causal=True,
                       x=x[:, o], path=path)  # fmt: skip
    assert_close(out[:, :, o], ref)


# ---- memory sized by what a call needs, not by the span of its positions ----


@pytest.mark.parametrize("name", ["t5", "tener", "transformer_xl"])
@pytest.mark.parametrize("path", ["reference", "auto"])
def test_far_apart_positions_cost_what_the_tokens_need(name, path):
    """Four tokens at [0, 1, 2, 10^6]: the relative tables were built over every
    offset in the span (T5's per-offset bias, TENER's and Transformer-XL's
    sinusoids), 2 * 10^6 rows; at 10^9, 16 GB. Now they cost a few KiB, and the
    attention equals the one at [0, 1, 2, 50] wherever T5's buckets agree."""
    torch.manual_seed(0)
    pe = pl.make_encoding(name, 16, 2).double()
    q, k, v = torch.randn(3, 1, 2, 4, 8, dtype=torch.float64)
    far = torch.tensor([0, 1, 2, 10**6])
    out, peak = pl.tensor_memory(
        lambda: pl.attention(q, k, v, pe, far, far, causal=True, path=path)
    )
    assert peak < 2**16, peak
    assert torch.isfinite(out).all()
    if name == "t5":  # 10^6 and 500 share T5's last bucket
        near = torch.tensor([0, 1, 2, 500])
        assert_close(out, pl.attention(q, k, v, pe, near, near, causal=True))
    else:  # each row against the sinusoids of its own offsets, built one by one
        ref = _per_pair_reference(pe, q, k, v, far)
        assert_close(out, ref)


def _per_pair_reference(pe, q, k, v, pos):
    """Attention with the bias of every (query, key) pair computed on its own."""
    rows = []
    for t in range(4):
        row = [
            pe.score_bias(q[:, :, t : t + 1], k[:, :, s : s + 1], pos[None, t : t + 1],
                          pos[None, s : s + 1])[..., 0, 0]
            for s in range(4)
        ]  # fmt: skip
        rows.append(torch.stack(row, -1))
    bias = torch.stack(rows, -2)  # (b, h, i, j)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * (pe.scale or 8**-0.5) + bias
    scores = scores.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), -math.inf)
    return scores.softmax(-1) @ v


def test_t5_construction_costs_nothing_for_a_far_max_distance():
    """``max_distance=10**9`` built an arange over every distance up to it to find
    the band (8 GB); now a search over a few dozen distances, the same band."""
    _, peak = pl.tensor_memory(lambda: pl.T5RelativeBias(2, max_distance=10**7))
    assert peak < 2**16, peak
    for bidirectional in (True, False):
        for max_distance in (20, 128, 1000):
            pe = pl.T5RelativeBias(2, 32, max_distance, bidirectional)
            far = -torch.arange(max_distance + 1)
            buckets = pl.t5_relative_bucket(far, bidirectional, 32, max_distance)
            assert pe.band == int((buckets != buckets[-1]).sum())
    pe = pl.T5RelativeBias(2, max_distance=10**9)
    q, k, v = torch.randn(3, 1, 2, 300, 8)
    out, peak = pl.tensor_memory(lambda: pl.attention(q, k, v, pe, causal=True))
    assert peak < 2**22, peak
    assert_close(out, pl.attention(q, k, v, pe, causal=True, path="reference"))


# ---- an infinite bias and enormous log gates on the fused path ----


def test_t5_with_a_far_bucket_of_minus_inf_is_right_on_the_default_path():
    """A T5 table whose last bucket is -inf (attention cut beyond the band): the
    fused band path recentred the bias on that bucket, c - (-inf), and answered NaN
    everywhere; the reference is right. Forward and backward."""
    torch.manual_seed(0)
    pe = pl.T5RelativeBias(2, init_std=1.0)
    with torch.no_grad():
        pe.bias[15] = float("-inf")  # the far past of every head
    attn = pl.MultiHeadAttention(16, 2, pe)
    x = torch.randn(2, 200, 16)
    outs, grads = [], []
    for path in ("auto", "reference"):
        pe.zero_grad()
        out = attn(x, causal=True, path=path)
        out.square().sum().backward()
        outs.append(out)
        grads.append(pe.bias.grad.clone())
    assert torch.isfinite(outs[0]).all()
    assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)
    assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-3)


class _ClosingFox(pl.ForgettingAttention):
    """FoX with log gates of about -1e37: every gate shut."""

    def log_forget_gates(self, x):
        return super().log_forget_gates(x) - 1e37


@pytest.mark.parametrize("n", [64, 300])
def test_fox_with_enormous_negative_log_gates_is_right_on_the_default_path(n):
    """Log gates below about -5e36: the fused path's key term, recentred per block
    in float32, overflowed to -inf - (-inf) and answered NaN; the reference is
    right (every gate shut: each query sees its own value)."""
    torch.manual_seed(0)
    attn = pl.MultiHeadAttention(16, 2, _ClosingFox(16, 2))
    x = torch.randn(1, n, 16)
    fast = attn(x, causal=True)
    slow = attn(x, causal=True, path="reference")
    assert torch.isfinite(fast).all()
    assert_close(fast, slow)
    v = attn.w_v(x).view(1, n, 2, 8)
    own = attn.w_o(v.reshape(1, n, 16))  # each query's own value
    assert_close(fast, own)

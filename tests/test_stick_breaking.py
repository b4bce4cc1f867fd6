"""Stick-breaking attention: properties, golden values, parity with fla and authors."""

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "stick_breaking_fla.json").read_text()
)
CASES = {case["name"]: case for case in GOLDEN["cases"]}


def logits(b, h, n, scale=2.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(b, h, n, n, generator=g, dtype=dtype)


def direct_product(z, attend_current=False):
    """A_ij = beta_ij prod_{j<l<i} (1 - beta_il) (or j < l <= i), term by term."""
    beta = torch.sigmoid(z)
    n = z.shape[-1]
    a = torch.zeros_like(z)
    for i in range(n):
        last = i + 1 if attend_current else i  # keys j < last are visible
        for j in range(last):
            a[..., i, j] = beta[..., i, j] * (1 - beta[..., i, j + 1 : last]).prod(-1)
    return a


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("attend_current", [False, True])
def test_weights_equal_the_direct_product_in_float64(attend_current):
    z = logits(2, 3, 9)
    assert_close(
        pl.stick_breaking_weights(z, attend_current), direct_product(z, attend_current)
    )


@pytest.mark.parametrize("attend_current", [False, True])
def test_rows_sum_to_one_minus_the_unbroken_stick(attend_current):
    """sum_j A_ij = 1 - prod_l (1 - beta_il) <= 1: what is not given away is left."""
    z = logits(2, 3, 12)
    a = pl.stick_breaking_weights(z, attend_current)
    keep = torch.sigmoid(-z)  # 1 - beta
    seen = torch.ones(12, 12, dtype=torch.bool).tril(0 if attend_current else -1)
    left = torch.where(seen, keep, torch.ones_like(keep)).prod(-1)  # (b, h, i)
    assert_close(a.sum(-1), 1 - left)
    assert (a >= 0).all() and (a.sum(-1) <= 1).all()
    assert (a[..., ~seen] == 0).all()  # exactly zero where not allowed


def test_log_form_is_score_minus_softplus_of_the_keys_in_between():
    """log A_ij = z_ij - sum_{l=j}^{i-1} softplus(z_il): the score plus a non-positive
    penalty that grows with every key between j and the query."""
    z = logits(1, 2, 8)
    a = pl.stick_breaking_weights(z)
    for i in range(8):
        for j in range(i):
            penalty = F.softplus(z[..., i, j:i]).sum(-1)
            assert_close(a[..., i, j].log(), z[..., i, j] - penalty)


def test_a_key_with_beta_one_takes_everything_left_and_hides_older_keys():
    z = logits(1, 1, 10, seed=1)
    z[..., 9, 4] = 1e4  # query 9 breaks the whole remaining stick at key 4
    a = pl.stick_breaking_weights(z)[0, 0, 9]  # (j,)
    assert (a[:4] == 0).all()  # every older key is hidden
    later = torch.sigmoid(-z[0, 0, 9, 5:9]).prod()  # what keys 5..8 left over
    assert_close(a[4], later)
    assert_close(a.sum(), torch.tensor(1.0, dtype=torch.float64))  # nothing left
    base = pl.stick_breaking_weights(logits(1, 1, 10, seed=1))[0, 0, 9]
    assert_close(a[5:], base[5:])  # keys after 4 are not affected


def test_stable_in_float32_for_huge_logits_and_long_rows():
    n = 2048
    g = torch.Generator().manual_seed(2)
    z = 1e4 * torch.sign(torch.randn(1, 1, 4, n, generator=g))  # beta = 0 or 1
    z = torch.cat([z, 3 * torch.randn(1, 1, 4, n, generator=g)], 2)  # and moderate
    z = torch.cat([torch.zeros(1, 1, n - 8, n), z], 2)  # (1, 1, n, n): last 8 rows
    a = pl.stick_breaking_weights(z)
    assert a.dtype == torch.float32 and torch.isfinite(a).all()
    truth = pl.stick_breaking_weights(z.double())
    assert_close(a.double(), truth, rtol=1e-5, atol=1e-6)
    # a row of +-1e4: all weight on the most recent key with z = +1e4
    row = z[0, 0, -8, :-8]
    newest = int(torch.nonzero(row > 0).max())
    assert a[0, 0, -8, newest] == 1 and a[0, 0, -8].sum() == 1
    # and -1e4 everywhere: nothing breaks, the weights are exactly zero (no NaN)
    assert (pl.stick_breaking_weights(torch.full((1, 1, 64, 64), -1e4)) == 0).all()


def test_naive_forms_fail_in_float32_where_the_log_form_does_not():
    """Three ways of writing the same weights that break in float32."""
    z = torch.tensor([[[[0.0, 0.0], [100.0, 0.0]]]])  # query 1, key 0: z = 100
    ours = pl.stick_breaking_weights(z)
    assert ours[0, 0, 1, 0] == 1.0  # beta = sigmoid(100) = 1 in float32
    # 1. the textbook sigmoid e^z / (1 + e^z): inf / inf = NaN
    beta = z.exp() / (1 + z.exp())
    assert torch.isnan(beta[0, 0, 1, 0])
    # 2. the paper's log form with an unguarded softplus log(1 + e^z): the key that
    #    should take the whole stick gets exp(100 - inf) = 0
    softplus = torch.log(1 + z.exp())
    assert torch.exp(z - softplus)[0, 0, 1, 0] == 0.0
    # 3. products as ratios of prefix products: 0 / 0 = NaN once the prefix
    #    underflows, at ordinary logits in a long row
    n = 400
    zr = torch.zeros(1, 1, 1, n)  # beta = 1/2 everywhere, query at index n
    keep = torch.sigmoid(-zr)  # (1, 1, 1, n)
    prefix = keep.cumprod(-1)  # prod_{l <= j}, underflows below ~1e-45
    ratio = prefix[..., -1:] / prefix  # prod_{j < l < n} = prefix_n-1 / prefix_j
    assert torch.isnan(ratio).any()
    full = torch.zeros(1, 1, n + 1, n + 1)  # the same row inside a square matrix
    a = pl.stick_breaking_weights(full)[0, 0, n, :n]
    assert torch.isfinite(a).all()
    assert_close(a[-3:], torch.tensor([0.125, 0.25, 0.5]))


def test_shifted_sum_keeps_digits_that_subtracting_the_own_term_loses():
    """fla's naive reference takes the inclusive reversed sum and subtracts key j's
    own log(1 - beta); in float32 that cancels when the own term is huge. Shifting by
    one key never forms the sum."""
    n = 9
    z = torch.randn(1, 1, n, n, generator=torch.Generator().manual_seed(9))
    z[..., -1, 2] = 1e5  # query 8 breaks (almost) all of what is left at key 2
    truth = pl.stick_breaking_weights(z.double())
    ours = pl.stick_breaking_weights(z)
    assert_close(ours.double(), truth, rtol=1e-6, atol=1e-7)
    seen = torch.ones(n, n, dtype=torch.bool).tril(-1)
    log_keep = F.logsigmoid(-z).masked_fill(~seen, 0.0)
    inclusive = log_keep.flip(-1).cumsum(-1).flip(-1)
    sub = (F.logsigmoid(z) + inclusive - log_keep).masked_fill(~seen, -math.inf).exp()
    rel = (sub.double() - truth).abs()[0, 0, -1, 2] / truth[0, 0, -1, 2]
    assert rel > 1e-4  # measured: 2e-3


def test_constant_logit_is_alibi_renormalised():
    """With z_ij = z for all keys: A_ij = beta (1 - beta)^(i - j) (attend_current), so
    A_i. / sum_j A_ij = softmax_j(-m (i - j)), ALiBi with slope m = softplus(z)."""
    n, z0 = 12, torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)  # 3 heads
    z = z0[None, :, None, None].expand(1, 3, n, n)
    m = F.softplus(z0)  # (h,) = -log(1 - beta)
    pos = torch.arange(n)[None]
    alibi = pl.alibi_bias(m, pos, pos)  # (1, h, i, j): -m (i - j)
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    softmax = alibi.masked_fill(~seen, float("-inf")).softmax(-1)
    a = pl.stick_breaking_weights(z, attend_current=True)
    assert_close(a / a.sum(-1, keepdim=True), softmax)
    beta = torch.sigmoid(z0)[:, None]
    k = torch.arange(n, dtype=torch.float64)  # distance i - j for the last query
    assert_close(a[0, :, -1].flip(-1), beta * (1 - beta) ** k)  # geometric
    # without the current key: the same shape one step back, over keys j < i
    a0 = pl.stick_breaking_weights(z)[0, :, -1, :-1].flip(-1)  # distances 1 .. n-1
    assert_close(a0, beta * (1 - beta) ** k[:-1])


def test_positions_are_not_read_but_token_order_is():
    pe = pl.StickBreaking()
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64) for _ in "qkv")
    out = pl.attention(q, k, v, pe, causal=True)
    pos = torch.arange(9) + 100
    assert_close(pl.attention(q, k, v, pe, pos, pos, causal=True), out)
    # permuting the keys (not a shift) changes the stick's order: not equivariant
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6, 7, 8])
    swapped = pl.attention(q, k[:, :, perm], v[:, :, perm], pe, causal=True)
    assert not torch.allclose(swapped[:, :, 2:], out[:, :, 2:])


def test_scale_is_one_over_sqrt_d_as_the_authors_default():
    g = torch.Generator().manual_seed(4)
    q, k, v = (
        torch.randn(1, 2, 7, 16, generator=g, dtype=torch.float64) for _ in "qkv"
    )
    pe = pl.StickBreaking(leftover=None)
    assert pe.scale is None  # the attention function's 1/sqrt(d)
    a = pl.stick_breaking_weights(q @ k.mT / math.sqrt(16))
    assert_close(pl.attention(q, k, v, pe, causal=True), a @ v)


def test_leftover_to_the_value_is_a_sink_before_the_first_token():
    """o_i + (1 - sum_j A_ij) v_i is stick-breaking over one more key, older than
    every token, whose break point is 1 (z = +inf) and whose value is v_i: the query's
    own value takes whatever the real keys left over."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=g, dtype=torch.float64) for _ in "qkv")
    out = pl.attention(q, k, v, pl.StickBreaking(), causal=True)
    z = q @ k.mT / 2  # (b, h, i, j), 1/sqrt(d) with d = 4
    sink = torch.full((2, 3, 8, 1), math.inf, dtype=torch.float64)
    a = pl.stick_breaking_weights(torch.cat([sink, z], -1))  # (b, h, i, 1 + j)
    assert_close(a.sum(-1), torch.ones(2, 3, 8, dtype=torch.float64))
    assert_close(out, a[..., 1:] @ v + a[..., :1] * v)
    assert_close(out[:, :, 0], v[:, :, 0])  # the first token sees only itself
    plain = pl.attention(q, k, v, pl.StickBreaking(leftover=None), causal=True)
    assert (plain[:, :, 0] == 0).all()  # without the leftover it outputs nothing


def test_a_hidden_key_leaves_the_stick_unchanged():
    """Masking key 3 gives the weights of the sequence with key 3 removed."""
    z = logits(1, 2, 9, seed=6)
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    mask[:, 3] = False
    a = pl.stick_breaking_weights(z, mask=mask)
    keep = [t for t in range(9) if t != 3]
    short = pl.stick_breaking_weights(z[..., keep, :][..., keep])
    assert_close(a[..., keep, :][..., keep], short)
    assert (a[..., 3] == 0).all()


def test_a_padding_mask_through_the_attention_function():
    pe = pl.StickBreaking(leftover=None)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g, dtype=torch.float64) for _ in "qkv")
    pad = torch.ones(1, 1, 8, 8, dtype=torch.bool)
    pad[..., 2:, :2] = False  # two left-padding tokens the real tokens may not see
    out = pl.attention(q, k, v, pe, causal=True, mask=pad)
    assert_close(
        out[:, :, 2:],
        pl.attention(q[:, :, 2:], k[:, :, 2:], v[:, :, 2:], pe, causal=True),
    )


@pytest.mark.parametrize("leftover", ["value", None])
def test_kv_cache_queries_are_the_last_tokens(leftover):
    pe = pl.StickBreaking(leftover=leftover)
    g = torch.Generator().manual_seed(8)
    q, k, v = (
        torch.randn(2, 2, 10, 4, generator=g, dtype=torch.float64) for _ in "qkv"
    )
    full = pl.attention(q, k, v, pe, causal=True)
    assert_close(pl.attention(q[:, :, -3:], k, v, pe, causal=True), full[:, :, -3:])


def test_gradients_are_finite_for_huge_logits():
    z = (1e4 * torch.randn(1, 2, 16, 16)).requires_grad_()
    pl.stick_breaking_weights(z).sum().backward()
    assert torch.isfinite(z.grad).all()
    mha = pl.MultiHeadAttention(16, 4, pl.StickBreaking())
    x = torch.randn(2, 10, 16)
    mha(x, causal=True).square().sum().backward()
    assert all(
        torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
        for p in mha.parameters()
    )


def test_half_precision_is_computed_in_float32_and_returned_as_given():
    z = logits(1, 2, 6, dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        a = pl.stick_breaking_weights(z.to(dtype))
        assert a.dtype == dtype
        ref = pl.stick_breaking_weights(z.to(dtype).float())
        assert_close(a.float(), ref, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------- golden values


def test_golden_values_by_hand():
    """Breaks of 1/2, 1/3, 1/4 (oldest to newest) cut four equal quarters."""
    beta = torch.tensor([0.5, 1 / 3, 0.25, 0.9], dtype=torch.float64)
    z = torch.log(beta / (1 - beta))  # the logit of each break
    scores = z.expand(1, 1, 4, 4)  # every query sees the same break points
    a = pl.stick_breaking_weights(scores)[0, 0]
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # query 0 has no earlier key
            [0.5, 0.0, 0.0, 0.0],
            [0.5 * 2 / 3, 1 / 3, 0.0, 0.0],
            [0.25, 0.25, 0.25, 0.0],  # and a quarter is left over
        ],
        dtype=torch.float64,
    )
    assert_close(a, expected)
    with_self = pl.stick_breaking_weights(scores, attend_current=True)[0, 0, 3]
    assert_close(with_self, torch.tensor([0.025, 0.025, 0.025, 0.9]).double())


# ---------------------------------------------------------------- parity


def fla_to_ours(t):
    """fla's (b, t, h, ...) -> the course's (b, h, t, ...)."""
    return torch.tensor(t, dtype=torch.float64).transpose(1, 2)


@pytest.mark.parametrize("name", ["plain", "attend_current", "saturated", "long"])
def test_attention_matches_fla_and_the_authors(name):
    case = CASES[name]
    q, k, v = (fla_to_ours(case[key]) for key in "qkv")  # (b, h, t, d)
    plain = pl.StickBreaking(case["attend_current"], leftover=None)
    for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 2e-5)):
        out, w = pl.attention(
            *(t.to(dtype) for t in (q, k, v)), plain, causal=True, return_weights=True
        )
        assert_close(out.double(), fla_to_ours(case["out"]), rtol=tol, atol=tol)
        rem = fla_to_ours(case["rem"])  # (b, h, t)
        assert_close(1 - w.double().sum(-1), rem, rtol=tol, atol=tol)
    if "out_plus_rem_v_authors" in case and not case["attend_current"]:
        # the authors' ref_fwd: o + rem * v, as leftover="value"
        out = pl.attention(q, k, v, pl.StickBreaking(), causal=True)
        theirs = fla_to_ours(case["out_plus_rem_v_authors"])
        assert_close(out, theirs, rtol=2e-5, atol=2e-5)  # theirs is float32


@pytest.mark.parametrize("attend_current", [False, True])
def test_weights_match_fla(attend_current):
    case = CASES[f"weights_attend_current_{attend_current}"]
    q, k = fla_to_ours(case["q"]), fla_to_ours(case["k"])  # (b, h, t, d)
    z = q @ k.mT / math.sqrt(q.shape[-1])
    theirs = torch.tensor(case["weights"], dtype=torch.float64).transpose(1, 2)
    assert_close(
        pl.stick_breaking_weights(z, attend_current), theirs, atol=1e-12, rtol=1e-9
    )


# ---------------------------------------------------------------- errors


def test_stick_breaking_weights_refuses_bad_input():
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        pl.stick_breaking_weights(torch.zeros(1, 1, 3, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        pl.stick_breaking_weights([[[[0.0]]]])
    with pytest.raises(TypeError, match="attend_current must be a bool"):
        pl.stick_breaking_weights(torch.zeros(1, 1, 3, 3), attend_current=1)
    with pytest.raises(ValueError, match=r"scores must have shape \(b, h, i, j\)"):
        pl.stick_breaking_weights(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="no more queries than keys"):
        pl.stick_breaking_weights(torch.zeros(1, 1, 4, 3))
    with pytest.raises(ValueError, match="scores hold NaN"):
        pl.stick_breaking_weights(torch.full((1, 1, 3, 3), float("nan")))
    z = torch.zeros(1, 1, 3, 3)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        pl.stick_breaking_weights(z, mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="mask must be broadcastable"):
        pl.stick_breaking_weights(z, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="after it in token order"):
        pl.stick_breaking_weights(z, mask=torch.ones(3, 3, dtype=torch.bool))


def test_stick_breaking_refuses_bad_calls():
    with pytest.raises(ValueError, match="leftover must be one of"):
        pl.StickBreaking(leftover="bias")
    with pytest.raises(TypeError, match="attend_current must be a bool"):
        pl.StickBreaking(attend_current="yes")
    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(ValueError, match="causal attention only"):
        pl.attention(q, q, q, pl.StickBreaking(), causal=False)
    # positions that decrease along the sequence: the causal mask they make lets a
    # query see later tokens, which the stick (broken in token order) cannot honour
    pos = torch.arange(5).flip(0)
    with pytest.raises(ValueError, match="after it in token order"):
        pl.attention(q, q, q, pl.StickBreaking(), pos, pos, causal=True)
    w = torch.zeros(1, 2, 5, 5)
    with pytest.raises(ValueError, match="reads ctx.v"):
        pl.StickBreaking().value_bias(w, None, None, ctx=pl.Context())
    with pytest.raises(ValueError, match="ctx.v must hold the 5 keys"):
        pl.StickBreaking().value_bias(w, None, None, ctx=pl.Context(v=q[:, :, :3]))


def test_registry_builds_the_authors_configuration():
    pe = pl.make_encoding("stick_breaking", d_model=32, n_heads=4, max_len=16)
    assert isinstance(pe, pl.StickBreaking) and pe.causal_only
    assert pe.attend_current is False and pe.leftover == "value"
    assert pe.needs_score_path and not list(pe.parameters())

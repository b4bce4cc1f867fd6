"""FoX: properties, golden values, parity with flash-linear-attention's naive FoX."""

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "fox_fla.json").read_text()
)
CASES = {case["name"]: case for case in GOLDEN["cases"]}


def random_log_f(b, h, n, scale=1.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return F.logsigmoid(scale * torch.randn(b, h, n, generator=g, dtype=dtype))


def fox_with_constant_gates(d_model, log_odds):
    """A ForgettingAttention whose gates ignore x: f_h = sigmoid(log_odds[h])."""
    pe = pl.ForgettingAttention(d_model, len(log_odds)).double()
    with torch.no_grad():
        pe.gate.weight.zero_()
        pe.gate.bias.copy_(torch.tensor(log_odds, dtype=torch.float64))
    return pe


# ---------------------------------------------------------------- properties


def test_constant_gates_are_alibi_with_slope_minus_log_f():
    log_f = torch.log(torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64))  # (h,)
    n = 10
    bias = pl.forgetting_bias(log_f[None, :, None].expand(2, 3, n))  # (b, h, i, j)
    pos = torch.arange(n).expand(2, n)
    alibi = pl.alibi_bias(-log_f, pos, pos)  # -m (i - j) with m = -log f
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    assert_close(bias[..., seen], alibi[..., seen])
    assert torch.isneginf(bias[..., ~seen]).all()


def test_constant_gate_fox_attends_exactly_like_alibi():
    """The whole attention (fused path): FoX with gates that ignore x equals ALiBi with
    slopes -log sigmoid(b_h)."""
    log_odds = [-1.0, 0.5, 2.0, 5.0]
    fox = fox_with_constant_gates(16, log_odds)
    alibi = pl.ALiBi(4).double()
    alibi.slopes = -F.logsigmoid(torch.tensor(log_odds, dtype=torch.float64))
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 4, 11, 8, generator=g, dtype=torch.float64) for _ in "qkv"
    )
    x = torch.randn(2, 11, 16, generator=g, dtype=torch.float64)
    assert_close(
        pl.attention(q, k, v, fox, causal=True, x=x),
        pl.attention(q, k, v, alibi, causal=True),
    )


def test_bias_is_additive_along_the_chain():
    """D_ik = D_ij + D_jk for k <= j <= i: forgetting from k to i is forgetting from k
    to j, then from j to i."""
    d = pl.forgetting_bias(random_log_f(2, 3, 12))  # (b, h, i, j)
    n = 12
    for i in range(n):
        for j in range(i + 1):
            for k in range(j + 1):
                assert_close(d[..., i, k], d[..., i, j] + d[..., j, k])


def test_softmax_of_the_bias_is_the_multiplicative_form():
    """softmax_j(s_ij + D_ij) = F_ij exp(s_ij) / sum_j F_ij exp(s_ij), with F_ij the
    product of the gates f_{j+1} .. f_i, computed term by term in float64."""
    b, h, n = 2, 3, 9
    log_f = random_log_f(b, h, n, scale=2.0)
    f = log_f.exp()  # (b, h, n)
    s = torch.randn(b, h, n, n, dtype=torch.float64)
    prod = torch.zeros(b, h, n, n, dtype=torch.float64)  # F_ij, 0 above the diagonal
    for i in range(n):
        for j in range(i + 1):
            prod[..., i, j] = f[..., j + 1 : i + 1].prod(-1)  # 1 when i == j
    expected = prod * s.exp() / (prod * s.exp()).sum(-1, keepdim=True)
    assert_close((s + pl.forgetting_bias(log_f)).softmax(-1), expected)


def test_diagonal_is_zero_the_future_is_minus_inf_and_older_keys_decay_more():
    d = pl.forgetting_bias(random_log_f(1, 2, 8))[0]  # (h, i, j)
    assert (torch.diagonal(d, dim1=-2, dim2=-1) == 0).all()
    assert torch.isneginf(d.triu(1)[..., torch.ones(8, 8).triu(1).bool()]).all()
    below = d.tril()  # 0 above, so the differences below are the decay per step back
    assert (below[..., :, 1:] - below[..., :, :-1] >= 0).all()  # j older -> lower


def test_the_first_gate_never_matters():
    """D_ij sums the gates of l = j+1 .. i, so token 0's gate enters no sum."""
    log_f = random_log_f(1, 2, 7)
    other = log_f.clone()
    other[..., 0] = -50.0
    assert_close(pl.forgetting_bias(log_f), pl.forgetting_bias(other))


def test_open_gates_are_nope():
    """f = 1 everywhere: no bias at all below the diagonal, attention as without PE."""
    assert_close(
        pl.forgetting_bias(torch.zeros(1, 2, 5)).tril(), torch.zeros(1, 2, 5, 5)
    )
    fox = fox_with_constant_gates(16, [60.0, 60.0])  # log sigmoid(60) ~ -1e-26
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 7, 8, generator=g, dtype=torch.float64) for _ in "qkv")
    x = torch.randn(1, 7, 16, generator=g, dtype=torch.float64)
    assert_close(
        pl.attention(q, k, v, fox, causal=True, x=x),
        pl.attention(q, k, v, pl.NoPE(), causal=True),
    )


def test_gates_follow_the_layer_input_not_the_positions():
    pe = pl.ForgettingAttention(16, 4).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 9, 16, generator=g, dtype=torch.float64)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64)
    pos = torch.arange(9).expand(2, 9)

    def bias(x, pos):
        return pe.score_bias(q, q, pos, pos, ctx=pl.Context(x=x, causal=True))

    assert_close(bias(x, pos + 100), bias(x, pos))  # positions ignored
    assert not torch.allclose(bias(x.flip(1), pos), bias(x, pos))  # content matters
    log_f = pe.log_forget_gates(x)  # (b, h, n)
    assert_close(log_f, F.logsigmoid(x @ pe.gate.weight.T + pe.gate.bias).mT)


def test_gate_starts_at_one_half_as_the_authors_initialise_it():
    pe = pl.ForgettingAttention(32, 4)
    assert (pe.gate.bias == 0).all()
    x = torch.zeros(1, 3, 32)
    assert_close(pe.log_forget_gates(x), torch.full((1, 4, 3), math.log(0.5)))


def test_float32_bias_is_accurate_late_in_a_long_sequence():
    """c_i - c_j in float32 loses D_ij's digits once |c_i| is large; ours does not."""
    n = 1024
    g = torch.Generator().manual_seed(4)
    log_f = -20 * torch.rand(1, 1, n, generator=g)  # float32, |c_n| ~ 1e4
    truth = pl.forgetting_bias(log_f.double())  # (1, 1, n, n) float64
    ours = pl.forgetting_bias(log_f)
    assert ours.dtype == torch.float32
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    # within float32 rounding of D itself (relative ~6e-8), not of c_i
    assert_close(ours[..., seen].double(), truth[..., seen], rtol=1.2e-7, atol=1e-30)
    c = log_f.cumsum(-1)  # the naive float32 version, for contrast
    naive = c[..., :, None] - c[..., None, :]
    assert (naive[..., seen].double() - truth[..., seen]).abs().max() > 1e-4


def test_score_mod_keeps_the_digits_in_float32_too():
    """The FlexAttention form subtracts inside the kernel, in float32: the hi + lo split
    of the cumulative sums keeps D_ij as accurate as ``forgetting_bias``."""
    n, d_model = 1024, 8
    pe = pl.ForgettingAttention(d_model, 1)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        pe.gate.weight.copy_(3 * torch.randn(1, d_model, generator=g))
        pe.gate.bias.fill_(-8.0)  # log f around -8: |c_n| ~ 1e4
    x = torch.randn(1, n, d_model, generator=g)
    q = torch.zeros(1, 1, n, 4)
    mod = pe.score_mod(None, None, ctx=pl.Context(x=x, q=q, k=q, causal=True))
    idx = [torch.arange(s).view(shape) for s, shape in ((1, (1, 1, 1, 1)),) * 2]
    rows, cols = torch.arange(n).view(1, 1, n, 1), torch.arange(n).view(1, 1, 1, n)
    with torch.no_grad():
        ours = mod(torch.zeros(()), *idx, rows, cols)  # (1, 1, n, n) float32
        log_f = pe.log_forget_gates(x)
    truth = pl.forgetting_bias(log_f.double())
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    assert ours.dtype == torch.float32 and torch.isneginf(ours[..., ~seen]).all()
    # float32 rounding of D itself, and ~1e-11 absolute where D is nearly 0
    assert_close(ours[..., seen].double(), truth[..., seen], rtol=2.5e-7, atol=1e-9)
    c = log_f.cumsum(-1)  # float32: what a kernel given c alone would compute
    naive = (c[..., :, None] - c[..., None, :])[..., seen].double()
    assert (naive - truth[..., seen]).abs().max() > 1e-4


def test_gradients_reach_the_gates_and_stay_finite():
    mha = pl.MultiHeadAttention(16, 4, pl.ForgettingAttention(16, 4))
    x = torch.randn(2, 10, 16)
    for path in ("fused", "reference"):
        mha.zero_grad()
        mha(x, causal=True, path=path).square().sum().backward()
        grad = mha.pe.gate.weight.grad
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0, path
        assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_fast_sdpa_path_equals_the_slow_path_with_shifted_positions():
    mha = pl.MultiHeadAttention(32, 4, pl.ForgettingAttention(32, 4)).double()
    x = torch.randn(2, 15, 32, dtype=torch.float64)
    pos = torch.arange(15) + 7
    assert_close(
        mha(x, pos, causal=True, path="fused"),
        mha(x, pos, causal=True, path="reference"),
    )


def test_a_model_with_one_gate_per_layer():
    model = pl.TinyTransformer(
        11, 32, 4, 2, pe=pl.ForgettingAttention(32, 4), share_pe=False
    )
    gates = [block.attn.pe.gate for block in model.blocks]
    assert gates[0] is not gates[1]
    assert model(torch.randint(11, (2, 9))).shape == (2, 9, 11)


# ---------------------------------------------------------------- golden values


def test_golden_values_by_hand():
    f = torch.tensor([0.5, 0.25, 1.0, 0.5], dtype=torch.float64)
    d = pl.forgetting_bias(f.log()[None, None])[0, 0]
    ln = math.log
    inf = float("inf")
    expected = torch.tensor(
        [
            [0.0, -inf, -inf, -inf],
            [ln(0.25), 0.0, -inf, -inf],
            [ln(0.25), 0.0, 0.0, -inf],  # f_2 = 1 forgets nothing
            [ln(0.125), ln(0.5), ln(0.5), 0.0],
        ],
        dtype=torch.float64,
    )
    assert_close(d, expected)


# ---------------------------------------------------------------- parity with fla


def fla_to_ours(t):
    """fla's (b, t, h, ...) -> the course's (b, h, t, ...)."""
    return torch.tensor(t, dtype=torch.float64).transpose(1, 2)


@pytest.mark.parametrize("name", ["forget_hard", "forget_soft", "long"])
def test_attention_matches_fla_naive_forgetting_attn(name):
    case = CASES[name]
    x = torch.tensor(case["x"], dtype=torch.float64)  # (b, t, D)
    weight = torch.tensor(case["gate_weight"], dtype=torch.float64)  # (h, D)
    h, d_model = weight.shape
    pe = pl.ForgettingAttention(d_model, h).double()
    with torch.no_grad():
        pe.gate.weight.copy_(weight)
        pe.gate.bias.copy_(torch.tensor(case["gate_bias"], dtype=torch.float64))
    assert_close(pe.log_forget_gates(x), fla_to_ours(case["log_f"]), rtol=0, atol=1e-6)
    q, k, v = (fla_to_ours(case[key]) for key in "qkv")  # (b, h, t, d)
    for path in ("fused", "reference"):
        out = pl.attention(q, k, v, pe, causal=True, x=x, path=path)  # (b, h, t, d)
        assert_close(out, fla_to_ours(case["out"]), rtol=1e-5, atol=1e-5)


def test_attention_weights_match_fla():
    case = CASES["weights"]
    log_f = fla_to_ours(case["log_f"])  # (b, h, t)
    theirs = torch.tensor(case["weights"], dtype=torch.float64).transpose(1, 2)
    ours = pl.forgetting_bias(log_f).softmax(-1)  # (b, h, i, j)
    assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- errors


def test_forgetting_bias_refuses_bad_input():
    with pytest.raises(TypeError, match="log_f must be a floating-point tensor"):
        pl.forgetting_bias(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="log_f must be a floating-point tensor"):
        pl.forgetting_bias([[[-0.1]]])
    with pytest.raises(ValueError, match=r"log_f must have shape \(b, h, n\)"):
        pl.forgetting_bias(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="log_f must be <= 0"):
        pl.forgetting_bias(torch.tensor([[[-0.1, 0.2]]]))
    for bad in (float("-inf"), float("nan")):
        with pytest.raises(ValueError, match="log_f must be finite"):
            pl.forgetting_bias(torch.tensor([[[-0.1, bad]]]))


def test_forgetting_attention_refuses_bad_calls():
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.ForgettingAttention(8, 0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        pl.ForgettingAttention(8.0, 2)
    pe = pl.ForgettingAttention(8, 2)
    q = torch.zeros(1, 2, 5, 4)
    pos = torch.arange(5)[None]
    with pytest.raises(ValueError, match="reads ctx.x"):
        pl.attention(q, q, q, pe, causal=True)  # no x=
    with pytest.raises(ValueError, match="causal attention only"):
        pl.attention(q, q, q, pe, causal=False, x=torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(b, n, 8\)"):
        pe.score_bias(q, q, pos, pos, ctx=pl.Context(x=torch.zeros(1, 5, 6)))
    with pytest.raises(ValueError, match=r"q must have shape \(b, 2, n, d\)"):
        pe.score_bias(torch.zeros(1, 3, 5, 4), q, pos, pos, ctx=pl.Context())
    with pytest.raises(ValueError, match="forget gate of every key"):
        k = torch.zeros(1, 2, 7, 4)
        pl.attention(q, k, k, pe, causal=True, x=torch.zeros(1, 5, 8))


def test_registry_builds_fox_with_the_model_sizes():
    pe = pl.make_encoding("fox", d_model=48, n_heads=6, max_len=16)
    assert isinstance(pe, pl.ForgettingAttention) and pe.causal_only
    assert pe.gate.weight.shape == (6, 48) and pe.gate.bias.shape == (6,)
    assert not pe.needs_score_path  # a bias only: the fused path


def test_a_variant_that_overrides_the_gates_is_what_the_layer_uses():
    """``log_forget_gates`` is the hook a variant overrides (the chapter's fixed-gate
    FoX does): every path computes with the variant's gates, never the base ones."""

    class NoForgetting(pl.ForgettingAttention):  # f = 1 everywhere: NoPE
        def log_forget_gates(self, x):
            return x.new_zeros(x.shape[0], self.n_heads, x.shape[1])

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=g) for _ in range(3))
    x = torch.randn(2, 6, 32, generator=g)
    want = pl.attention(q, k, v, pl.NoPE(), causal=True)
    for path in ("reference", "fused"):
        got = pl.attention(q, k, v, NoForgetting(32, 4), causal=True, x=x, path=path)
        assert_close(got, want)
    base = pl.attention(q, k, v, pl.ForgettingAttention(32, 4), causal=True, x=x)
    assert (base - want).abs().max() > 1e-3  # the base gates (1/2) do forget

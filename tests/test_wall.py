"""Wall attention: properties, the stable blocked form against the reference (and at
20,000 tokens), then golden vectors from flash-linear-attention's naive reference
(tests/golden/make_wall_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings import wall
from posenc_lib.encodings.wall import WallAttention, wall_attention, wall_scores

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "wall_fla.json").read_text()
)


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def inputs(b=2, h=2, n=11, d=4, rate=1.0, seed=0, dtype=torch.float64):
    """q, k, v and log-decays whose per-token rates spread over [0, rate]."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in "qkv")
    log_g = -rate * torch.rand(b, h, n, d, generator=g, dtype=dtype)
    return q, k, v, log_g


def reference(q, k, v, log_g):
    """softmax over the keys j <= i of Wall's scores, explicitly."""
    i, j = q.shape[2], k.shape[2]
    seen = torch.ones(i, j, dtype=torch.bool).tril(j - i)
    s = wall_scores(q, k, log_g).masked_fill(~seen, float("-inf"))
    return s.softmax(-1) @ v


# ---------------------------------------------------------------- properties


def test_no_decay_is_plain_causal_attention():
    q, k, v, log_g = inputs()
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(wall_attention(q, k, v, torch.zeros_like(log_g)), plain)
    assert_close(reference(q, k, v, torch.zeros_like(log_g)), plain)


def test_one_decay_per_head_is_a_multiplicative_forget_gate():
    """Every channel alike: exp(G_i - G_j) factors out, s_ij = q_i . k_j / sqrt(d)
    times prod_{j < l <= i} f_l (FoX adds log F_ij; Wall multiplies by F_ij)."""
    q, k, _, log_g = inputs()
    log_g = log_g[..., :1].expand_as(log_g)  # (b, h, n, d), one rate per token
    c = log_g[..., 0].cumsum(-1)  # (b, h, n)
    decay = (c[..., :, None] - c[..., None, :]).exp()  # F_ij for j <= i
    want = (q @ k.mT) / 2.0 * decay  # d = 4
    seen = torch.ones(11, 11, dtype=torch.bool).tril()
    got = wall_scores(q, k, log_g)
    assert_close(got[..., seen], want[..., seen])
    assert torch.isinf(got[..., ~seen]).all()


@pytest.mark.parametrize("block", [1, 3, 4, 16])
@pytest.mark.parametrize("i", [11, 4, 1])
def test_the_blocked_form_is_the_reference_forward_and_backward(block, i, monkeypatch):
    """Any block size, queries the last i keys (a cache), float64: outputs and the
    gradients of q, k, v and the decays."""
    monkeypatch.setattr(wall, "BLOCK", block)
    q, k, v, log_g = (t.requires_grad_() for t in inputs(rate=3.0))
    grad = torch.randn(2, 2, i, 4, dtype=torch.float64)
    results = []
    for fn in (reference, wall_attention):
        out = fn(q[:, :, -i:], k, v, log_g)
        results.append(
            [out, *torch.autograd.grad((out * grad).sum(), (q, k, v, log_g))]
        )
    for got, want in zip(results[1], results[0]):
        assert_close(got, want)


def test_the_blocked_form_is_stable_at_twenty_thousand_tokens():
    """20,000 tokens, one head, decays that span ~10,000 nats in half the channels
    and ~2 in the others: the blocked form is finite and equal, row by row, to the
    scores computed directly in float64; the plain transform_qk form (q e^(G - c),
    k e^(c - G)) overflows, whatever the centre c."""
    torch.manual_seed(0)
    n, d = 20_000, 16
    q, k, v = (torch.randn(1, 1, n, d) for _ in "qkv")
    rate = torch.tensor([1.0] * 8 + [1e-4] * 8)  # per channel
    log_g = -rate * torch.rand(1, 1, n, d)  # G spans ~10,000 nats in channels 0-7
    g = log_g.double().cumsum(2)
    assert float(-g[..., 0].min()) > 9_000
    with torch.no_grad():
        out = wall_attention(q, k, v, log_g)
    assert torch.isfinite(out).all()
    for i in (0, 1, 31, 32, 33, 5_000, 12_345, n - 1):
        # s_ij = sum_n q_in k_jn exp(G_in - G_jn), directly in float64
        decay = (g[0, 0, i] - g[0, 0, : i + 1]).exp()  # (i + 1, d)
        s = (q[0, 0, i].double() * k[0, 0, : i + 1].double() * decay).sum(-1) / 4.0
        want = s.softmax(-1) @ v[0, 0, : i + 1].double()
        assert_close(out[0, 0, i].double(), want, rtol=1e-4, atol=1e-5)
    centre = g.amax(2, keepdim=True) / 2 + g.amin(2, keepdim=True) / 2
    k_far = k * (centre - g).float().exp()  # overflows float32 past ~88 nats
    assert not torch.isfinite(k_far).all()


def test_the_blocked_form_keeps_memory_linear_in_the_length():
    """The fused path's blocks hold O(n (d + BLOCK)); the reference O(n^2 d)."""
    torch.manual_seed(0)
    mha = pl.MultiHeadAttention(32, 2, "wall").eval()
    peaks = {}
    for n in (512, 1024):
        x = torch.randn(1, n, 32)
        with torch.no_grad():
            _, peaks[n] = pl.tensor_memory(lambda: mha(x, causal=True))
    assert peaks[1024] / peaks[512] < 2.5, peaks


def test_a_cached_model_decodes_as_its_full_forward():
    torch.manual_seed(0)
    pe = pl.make_encoding("wall", 16, 2)
    with torch.no_grad():
        pe.gate.bias.fill_(0.0)  # decays that matter
    model = pl.TinyTransformer(11, 16, 2, 2, pe).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    cache, steps = model.new_cache(), []
    for start, size in ((0, 4), (4, 1), (5, 3), (8, 1)):
        steps.append(model(tokens[:, start : start + size], cache=cache))
    assert_close(torch.cat(steps, 1), model(tokens))


# ---------------------------------------------------------------- golden vectors


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_matches_fla_naive_wall_attn(name):
    """fla's naive_wall_attn (base 2 inside) and its layer's gates: the decays from
    the same g_proj, then both attention paths, against fla's output ([B, T, H, K]
    transposed to (b, h, t, d))."""
    c = GOLDEN["cases"][name]
    q, k, v, g = (f64(c[key]).transpose(1, 2) for key in ("q", "k", "v", "g"))
    x = f64(c["x"])
    b, h, n, d = q.shape
    pe = WallAttention(h * d, h).double()
    with torch.no_grad():
        pe.gate.weight.copy_(f64(c["g_proj_weight"]))
        pe.gate.bias.copy_(f64(c["g_proj_bias"]))
    assert_close(pe.log_decays(x), g, rtol=1e-5, atol=1e-6)
    want = f64(c["o"]).transpose(1, 2)
    for path in ("reference", "fused"):
        got = pl.attention(q, k, v, pe, causal=True, x=x, path=path)
        assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert math.isclose(pe._scale(q), d**-0.5)  # fla's default scale


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_by_name():
    q, k, v, log_g = inputs()
    with pytest.raises(ValueError, match="log_g must be <= 0"):
        wall_scores(q, k, -log_g + 0.1)
    with pytest.raises(ValueError, match="no more queries"):
        wall_attention(k, q[:, :, :3], v[:, :, :3], log_g[:, :, :3])
    with pytest.raises(ValueError, match="share a"):
        wall_scores(q, k, log_g[..., :2])
    with pytest.raises(ValueError, match="divisible"):
        WallAttention(10, 4)
    with pytest.raises(ValueError, match="gate_init_bias"):
        WallAttention(8, 2, gate_init_bias=float("inf"))
    pe = WallAttention(8, 2).double()
    with pytest.raises(ValueError, match="reads ctx.x"):
        pl.attention(q, k, v, pe, causal=True)
    x = torch.randn(2, 3, 8, dtype=torch.float64)  # the queries' inputs only
    with pytest.raises(ValueError, match="decays of every key"):
        pl.attention(q[:, :, -3:], k, v, pe, causal=True, x=x)
    with pytest.raises(ValueError, match="causal attention only"):
        pl.attention(q, k, v, pe, x=torch.randn(2, 11, 8, dtype=torch.float64))

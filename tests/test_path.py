"""PaTH: properties, parity with flash-linear-attention's naive PaTH, bad input."""

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings import path

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "path_fla.json").read_text()
)
CASES = {case["name"]: case for case in GOLDEN["cases"]}


def random_call(b=2, h=2, n=7, d=4, seed=0, beta_range=(0.0, 2.0)):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in "qkv")
    w = F.normalize(torch.randn(b, h, n, d, generator=g, dtype=torch.float64), dim=-1)
    lo, hi = beta_range
    beta = lo + (hi - lo) * torch.rand(b, h, n, generator=g, dtype=torch.float64)
    return q, k, v, w, beta


def scores_by_matrices(q, k, w, beta):
    """s_ij = q_i^T H_i ... H_{j+1} k_j with every d x d matrix formed (O(n^3 d^3))."""
    b, h, n, d = q.shape
    eye = torch.eye(d, dtype=q.dtype)
    hs = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # (b,h,n,d,d)
    s = torch.full((b, h, n, n), float("-inf"), dtype=q.dtype)
    for i in range(n):
        for j in range(i + 1):
            p = eye.expand(b, h, d, d)
            for t in range(j + 1, i + 1):
                p = hs[:, :, t] @ p  # H_i ... H_{j+1}
            s[:, :, i, j] = torch.einsum("bhd,bhde,bhe->bh", q[:, :, i], p, k[:, :, j])
    return s


def test_scores_equal_the_product_of_matrices():
    q, k, _, w, beta = random_call()
    assert_close(pl.path_scores(q, k, w, beta), scores_by_matrices(q, k, w, beta))


def test_beta_zero_is_nope_and_with_a_gate_is_fox():
    q, k, v, w, _ = random_call()
    zero = torch.zeros(q.shape[:3], dtype=q.dtype)
    nope = pl.attention(q, k, v, causal=True)
    assert_close(pl.path_attention(q, k, v, w, zero), nope)
    log_f = F.logsigmoid(torch.randn(q.shape[:3], dtype=q.dtype))
    fox = ((q @ k.mT) / math.sqrt(q.shape[-1]) + pl.forgetting_bias(log_f)).softmax(-1)
    assert_close(pl.path_attention(q, k, v, w, zero, log_f=log_f), fox @ v)


def test_two_reflections_per_step_give_rope_like_relative_scores():
    """Fixed transforms: the score depends on i - j only (a fixed rotation R)."""
    d, n = 2, 6
    theta = 0.7
    a = torch.tensor([1.0, 0.0], dtype=torch.float64)
    c = torch.tensor([math.cos(theta / 2), math.sin(theta / 2)], dtype=torch.float64)
    # tokens alternate reflections across a and c: H_c H_a is a rotation by theta
    w = torch.stack([a if t % 2 else c for t in range(2 * n)])[None, None]
    beta = torch.full((1, 1, 2 * n), 2.0, dtype=torch.float64)
    q, k = (torch.randn(1, 1, 2 * n, d, dtype=torch.float64) for _ in "qk")
    q[..., 1::2, :] = q[..., :1, :]  # the same query and key on every odd token
    k[..., 1::2, :] = k[..., :1, :]
    s = pl.path_scores(q, k, w, beta)[0, 0, 1::2, 1::2]  # odd tokens: pairs of steps
    for i in range(n):
        for j in range(i + 1):
            assert_close(s[i, j], s[i - j, 0])


def test_positions_decide_the_order_of_the_transforms():
    q, k, _, w, beta = random_call(n=6)
    rev = torch.arange(5, -1, -1)
    pos = torch.arange(6)[None]
    s = pl.path_scores(q, k, w, beta)
    s_rev = pl.path_scores(q[:, :, rev], k[:, :, rev], w[:, :, rev], beta[:, :, rev],
                           pos[:, rev])  # fmt: skip
    assert_close(s_rev, s[:, :, rev][:, :, :, rev])


def test_encoding_equals_path_attention_with_its_own_w_and_beta():
    torch.manual_seed(0)
    for gate in (False, True):
        pe = pl.PaTHAttention(8, 2, forget_gate=gate).double()
        x = torch.randn(2, 7, 8, dtype=torch.float64)
        q, k, v, _, _ = random_call()
        w, beta = pe.transforms(x)
        assert_close(w.norm(dim=-1), torch.ones_like(beta))
        assert ((beta > 0) & (beta < 2)).all()
        log_f = F.logsigmoid(pe.gate(x)).transpose(1, 2) if gate else None
        expected = pl.path_attention(q, k, v, w, beta, log_f=log_f)
        for path in ("reference", "fused"):
            out = pl.attention(q, k, v, pe, causal=True, x=x, path=path)
            assert_close(out, expected)


# ---------------------------------------------------------------- the chunked form

# (b, h, n, d, chunk): one chunk, n a multiple of the chunk, not one, n < chunk, n = 1
SHAPES = [
    (2, 3, 7, 4, 3),
    (1, 2, 12, 8, 4),
    (2, 1, 13, 5, 4),
    (1, 1, 5, 4, 64),
    (1, 2, 1, 3, 4),
    (3, 2, 9, 6, 9),
    (1, 1, 150, 8, 64),
]


def finite(s):
    """Scores with the -inf above the diagonal set to 0, to differentiate a sum."""
    return s.masked_fill(~torch.isfinite(s), 0.0)


@pytest.mark.parametrize("b, h, n, d, chunk", SHAPES)
def test_chunked_scores_equal_the_loop_over_diagonals(b, h, n, d, chunk):
    q, k, _, w, beta = random_call(b, h, n, d, seed=n + chunk)
    loop = path._diagonal_scores(q, k, w, beta)
    assert_close(path._chunked_scores(q, k, w, beta, chunk), loop)
    # plain=False: what PaTH adds to the plain logit q_i . k_j
    added = path._chunked_scores(q, k, w, beta, chunk, plain=False)
    assert_close(added, loop - q @ k.mT)
    f32 = [t.float() for t in (q, k, w, beta)]
    got = path._chunked_scores(*f32, chunk)
    assert got.dtype == torch.float32
    assert_close(got, path._diagonal_scores(*f32), rtol=1e-5, atol=1e-5)


def test_chunked_scores_of_an_empty_sequence_are_empty():
    q, k, _, w, beta = random_call(n=0)
    assert path._chunked_scores(q, k, w, beta).shape == (2, 2, 0, 0)


@pytest.mark.parametrize("beta_range", [(0.0, 0.0), (2.0, 2.0), (0.95, 1.05)])
def test_chunked_scores_at_the_ends_of_the_beta_range(beta_range):
    """beta = 0 (identity), 2 (reflections) and near 1 (near-projections)."""
    q, k, _, w, beta = random_call(2, 2, 37, 6, seed=3, beta_range=beta_range)
    loop = path._diagonal_scores(q, k, w, beta)
    for chunk in (1, 8, 16, 64):
        assert_close(path._chunked_scores(q, k, w, beta, chunk), loop)


@pytest.mark.parametrize("b, h, n, d, chunk", SHAPES)
def test_chunked_scores_have_the_gradients_of_the_loop(b, h, n, d, chunk):
    inputs = [t.requires_grad_(True) for t in random_call(b, h, n, d, seed=n)]
    q, k, _, w, beta = inputs
    weight = torch.randn(b, h, n, n, dtype=torch.float64)
    grads = []
    for scores in (path._diagonal_scores, path._chunked_scores):
        args = (q, k, w, beta) + ((chunk,) if scores is path._chunked_scores else ())
        loss = (finite(scores(*args)) * weight).sum()
        # n = 1 uses no transform: the loop's graph then lacks w and beta (zero)
        grads.append(torch.autograd.grad(loss, (q, k, w, beta), materialize_grads=True))
    for loop, chunked in zip(*grads):
        assert_close(chunked, loop)


def test_chunked_scores_pass_gradcheck():
    q, k, _, w, beta = (t.requires_grad_(True) for t in random_call(1, 2, 7, 3))
    assert torch.autograd.gradcheck(
        lambda *a: finite(path._chunked_scores(*a, 3)), (q, k, w, beta)
    )


@pytest.mark.parametrize("d", [8, 32])
def test_chunked_scores_keep_no_n_by_n_by_d_tensor_for_the_backward(d):
    """Forward and backward over 512 tokens peak at a few n x n score matrices (the
    backward's carried keys add n^2 d / 2C numbers for a while); the loop's autograd
    keeps O(n^2 d): 12 matrices at d = 16."""
    g = torch.Generator().manual_seed(0)
    b, h, n = 1, 2, 512
    q, k, w = (torch.randn(b, h, n, d, generator=g).requires_grad_() for _ in "qkw")
    beta = (2 * torch.rand(b, h, n, generator=g)).requires_grad_()
    seen = torch.ones(n, n, dtype=torch.bool).tril()

    def forward_backward():
        s = path._chunked_scores(q, k, F.normalize(w, dim=-1), beta)
        s.masked_fill(~seen, 0.0).sum().backward()

    _, peak = pl.tensor_memory(forward_backward)
    assert peak < 5 * (b * h * n * n * 4)  # bytes of 5 float32 score matrices


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_layer_on_several_chunks_equals_the_loop(gate, shuffle):
    """150 tokens (three chunks of 64, the last part full), positions in order (a
    run: nothing sorted) or shuffled: the bias and both attention paths equal the
    loop's, in token order."""
    torch.manual_seed(0)
    n, b = 150, 2
    pe = pl.PaTHAttention(8, 2, forget_gate=gate).double()
    x = torch.randn(b, n, 8, dtype=torch.float64)
    q, k, v, _, _ = random_call(b, 2, n, 4, seed=1)
    pos = torch.randperm(n)[None] if shuffle else torch.arange(n)[None]
    w, beta = pe.transforms(x)
    order = pos[0].argsort()
    rank = order.argsort()
    s = path._diagonal_scores(*(t[:, :, order] for t in (q, k, w, beta)))
    s = s[:, :, rank][:, :, :, rank]  # token order, -inf where j is after i
    bias = (s - q @ k.mT) / 2  # scale 1 / sqrt(4)
    if gate:
        log_f = F.logsigmoid(pe.gate(x)).transpose(1, 2)
        bias = bias + pl.forgetting_bias(log_f, pos)
    assert_close(pe.score_bias(q, k, pos, pos, pl.Context(x=x)), bias)
    expected = ((q @ k.mT) / 2 + bias).softmax(-1) @ v
    for path_ in ("reference", "fused"):
        out = pl.attention(
            q, k, v, pe, q_pos=pos, k_pos=pos, causal=True, x=x, path=path_
        )
        assert_close(out, expected)


# ---------------------------------------------------------------- parity with fla


def fla_to_ours(t):
    """fla's (b, t, h, ...) -> the course's (b, h, t, ...)."""
    return torch.tensor(t, dtype=torch.float64).transpose(1, 2)


@pytest.mark.parametrize(
    "name", ["plain", "plain_near_2", "plain_raw_w", "plain_two_chunks", "gated"]
)
def test_path_attention_matches_fla_naive_path_attn(name):
    case = CASES[name]
    q, k, v, w, beta, g = (
        fla_to_ours(case[key]) for key in ("q", "k", "v", "w", "beta", "g")
    )
    scale = case["scale"]
    # fla adds its gate before the scale: our log_f is scale * g
    log_f = scale * g if name == "gated" else None
    out = pl.path_attention(q, k, v, w, beta, log_f=log_f, scale=scale)
    assert_close(out, fla_to_ours(case["out"]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chunk", [3, 16, 64])
@pytest.mark.parametrize(
    "name", ["plain", "plain_near_2", "plain_raw_w", "plain_two_chunks"]
)
def test_chunked_scores_match_fla_naive_path_attn(name, chunk):
    case = CASES[name]
    q, k, v, w, beta = (fla_to_ours(case[key]) for key in ("q", "k", "v", "w", "beta"))
    s = path._chunked_scores(q, k, w, beta, chunk) * case["scale"]
    assert_close(s.softmax(-1) @ v, fla_to_ours(case["out"]), rtol=1e-4, atol=1e-4)


def test_layer_matches_fla_layer_transforms_and_output():
    case = CASES["layer"]
    x = torch.tensor(case["x"], dtype=torch.float64)
    pe = pl.PaTHAttention(8, 2).double()
    with torch.no_grad():
        pe.w_proj.weight.copy_(torch.tensor(case["w_weight"]))
        pe.beta_proj.weight.copy_(torch.tensor(case["bt_weight"]))
        pe.beta_proj.bias.copy_(torch.tensor(case["bt_bias"]))
    w, beta = pe.transforms(x)
    assert_close(w, fla_to_ours(case["w"]), rtol=1e-5, atol=1e-6)
    assert_close(beta, fla_to_ours(case["beta"]), rtol=1e-5, atol=1e-6)
    q, k, v = (fla_to_ours(case[key]) for key in "qkv")
    for path in ("reference", "fused"):
        out = pl.attention(q, k, v, pe, causal=True, x=x, path=path)
        assert_close(out, fla_to_ours(case["out"]), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- errors


def test_path_attention_refuses_bad_input():
    q, k, v, w, beta = random_call()
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 2\]"):
        pl.path_attention(q, k, v, w, beta + 2.5)
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 2\]"):
        pl.path_attention(q, k, v, w, beta - 2.5)
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 2\]"):
        pl.path_attention(q, k, v, w, beta * float("nan"))
    with pytest.raises(ValueError, match=r"beta must have shape \(b, h, n\)"):
        pl.path_attention(q, k, v, w, beta[..., :3])
    with pytest.raises(ValueError, match="q, k and w must have the same shape"):
        pl.path_attention(q, k, v, w[..., :3], beta)
    with pytest.raises(TypeError, match="w must be a floating-point tensor"):
        pl.path_attention(q, k, v, w.long(), beta)
    with pytest.raises(ValueError, match=r"v must have shape \(b, h, n, e\)"):
        pl.path_attention(q, k, v[:, :, :3], w, beta)
    with pytest.raises(ValueError, match="scale must be a positive"):
        pl.path_attention(q, k, v, w, beta, scale=-1.0)
    with pytest.raises(ValueError, match="log_f must be <= 0"):
        pl.path_attention(q, k, v, w, beta, log_f=torch.ones_like(beta))
    with pytest.raises(ValueError, match=r"log_f must have shape \(b, h, n\)"):
        pl.path_attention(q, k, v, w, beta, log_f=beta[..., :3])


def test_layer_refuses_bad_calls():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        pl.PaTHAttention(10, 3)
    with pytest.raises(TypeError, match="forget_gate must be a bool"):
        pl.PaTHAttention(8, 2, forget_gate=1)
    pe = pl.PaTHAttention(8, 2)
    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(ValueError, match="reads ctx.x"):
        pl.attention(q, q, q, pe, causal=True)
    with pytest.raises(ValueError, match="causal attention only"):
        pl.attention(q, q, q, pe, causal=False, x=torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match="transform of every key"):
        k = torch.zeros(1, 2, 7, 4)
        pl.attention(q, k, k, pe, causal=True, x=torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match="path='flex' cannot be used"):
        pl.attention(q, q, q, pe, causal=True, x=torch.zeros(1, 5, 8), path="flex")


def test_registry_builds_both_variants():
    plain = pl.make_encoding("path", d_model=32, n_heads=4, max_len=16)
    gated = pl.make_encoding("path_fox", d_model=32, n_heads=4, max_len=16)
    assert plain.gate is None and gated.gate is not None


@pytest.mark.parametrize("d", [5, 6])
def test_a_head_size_other_than_the_layers_is_refused_by_name(d):
    """q and k whose head size is not d_model / n_heads: a clear error, not a bare
    reshape failure inside the transforms."""
    pe = pl.make_encoding("path", d_model=32, n_heads=4, max_len=16)
    q, k, v = (torch.randn(1, 4, 6, d) for _ in range(3))
    with pytest.raises(ValueError, match="d_head=8"):
        pl.attention(q, k, v, pe, causal=True, x=torch.randn(1, 6, 32))

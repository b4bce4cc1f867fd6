"""CoPE: properties, golden values, parity with x-transformers and the authors' code."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "cope_ref.json").read_text()
)
CASES = {case["name"]: case for case in GOLDEN["cases"]}
INF = float("inf")


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def causal_logits(b, h, n, seed=0, scale=1.0):
    """Random scaled scores with -inf above the diagonal (b, h, n, n)."""
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return (scale * randn(b, h, n, n, seed=seed)).masked_fill(future, -INF)


def cope_layer(d_head, n_positions, seed=0):
    pe = pl.CoPE(d_head, n_positions).double()
    with torch.no_grad():
        pe.pos_emb.copy_(randn(n_positions, d_head, seed=seed))
    return pe


# ---------------------------------------------------------------- properties


def test_open_gates_count_every_token_a_relative_position():
    """Every gate 1 => p_ij = i - j + 1 on and below the diagonal, 0 above."""
    n = 7
    logits = causal_logits(1, 2, n).masked_fill(
        torch.ones(n, n, dtype=torch.bool).tril(), INF
    )  # sigmoid(+inf) = 1 exactly
    pos = pl.cope_positions(logits, n_positions=n + 1)[0, 0]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert_close(pos, (i - j + 1).clamp(min=0).double())


def test_open_gates_make_cope_a_relative_position_bias():
    """Every gate 1: CoPE's term is q_i . e[i - j + 1], Shaw-style, indexed directly."""
    b, h, n, d = 2, 3, 6, 4
    q, emb = randn(b, h, n, d, seed=1), randn(n + 1, d, seed=2)
    logits = torch.full((b, h, n, n), INF).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), -INF
    )
    bias = pl.cope_bias(q, logits, emb)
    for i in range(n):
        for j in range(i + 1):
            assert_close(bias[..., i, j], q[..., i, :] @ emb[i - j + 1])


def test_scalar_interpolation_equals_vector_interpolation():
    """Interpolating z_i[k] = q_i . e[k] equals dotting q_i with the interpolated
    vector e[p]."""
    b, h, n, d, n_pos = 2, 2, 8, 5, 6  # n_pos < n: some positions clamp
    q, emb = randn(b, h, n, d, seed=3), randn(n_pos, d, seed=4)
    logits = causal_logits(b, h, n, seed=5, scale=2.0)
    pos = pl.cope_positions(logits, n_pos)
    lo, hi = pos.floor().long(), pos.ceil().long()
    w = (pos - lo)[..., None]  # (b, h, i, j, 1)
    e_p = w * emb[hi] + (1 - w) * emb[lo]  # (b, h, i, j, d): a vector per pair
    direct = torch.einsum("bhid,bhijd->bhij", q, e_p)
    assert_close(pl.cope_bias(q, logits, emb), direct)


def test_positions_sum_the_gates_from_key_to_query():
    b, h, n = 1, 2, 9
    logits = causal_logits(b, h, n, seed=6)
    gates = torch.sigmoid(logits)
    pos = pl.cope_positions(logits, n_positions=100)
    for i in range(n):
        for j in range(i + 1):
            assert_close(pos[..., i, j], gates[..., i, j : i + 1].sum(-1))
    assert (pos.triu(1) == 0).all()


def test_gates_closed_except_on_marked_tokens_count_the_marks():
    """Gates 1 on marked keys and 0 elsewhere: p_ij = the number of marks in j..i."""
    n = 10
    marked = torch.tensor([1, 0, 0, 1, 0, 1, 1, 0, 0, 1], dtype=torch.bool)
    logits = torch.where(marked, INF, -INF).expand(1, 1, n, n)
    logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -INF)
    pos = pl.cope_positions(logits, n_positions=n + 1)[0, 0]
    for i in range(n):
        for j in range(i + 1):
            assert pos[i, j] == marked[j : i + 1].sum()


def test_masked_keys_contribute_nothing():
    """What the scores hold where the mask forbids attention changes nothing: neither
    the positions of the visible keys nor the attention output."""
    b, h, n, d = 2, 2, 8, 4
    pe = cope_layer(d, n + 1, seed=7)
    q = randn(b, h, n, d, seed=8)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    mask = mask.expand(b, 1, n, n).clone()
    mask[1, :, :, 2] = False  # key 2 of row 1 is padding
    mask[1, 0, 2, 2] = True  # that pad token sees itself
    ctx = pl.Context(q=q, mask=mask, causal=True)
    pos = torch.arange(n).expand(b, n)
    scores = randn(b, h, n, n, seed=9)
    noise = scores + 100 * randn(b, h, n, n, seed=10) * ~mask
    a = pe.transform_scores(scores, pos, pos, ctx=ctx)
    c = pe.transform_scores(noise, pos, pos, ctx=ctx)
    assert_close(a[mask.expand(b, h, n, n)], c[mask.expand(b, h, n, n)])
    assert_close(
        pe.attention_weights(a, mask), pe.attention_weights(c, mask)
    )  # the mask then removes the masked entries themselves


def test_positions_clamp_at_n_positions_minus_one():
    n, n_pos, d = 12, 4, 3
    logits = torch.full((1, 1, n, n), INF, dtype=torch.float64)  # every gate 1
    pos = pl.cope_positions(logits, n_pos)[0, 0, -1]
    assert pos.max() == n_pos - 1
    assert_close(pos, (n - torch.arange(n)).clamp(max=n_pos - 1).double())
    q, emb = randn(1, 1, n, d, seed=11), randn(n_pos, d, seed=12)
    bias = pl.cope_bias(q, logits, emb)[0, 0, -1]
    far = n - torch.arange(n) >= n_pos - 1
    assert_close(bias[far], (q[0, 0, -1] @ emb[-1]).expand(int(far.sum())))


def test_integer_positions_are_not_read_only_token_order():
    b, h, n, d = 2, 2, 7, 4
    pe = cope_layer(d, n + 1, seed=13)
    q, k, v = (randn(b, h, n, d, seed=s) for s in (14, 15, 16))
    pos = torch.arange(n).expand(b, n)
    out = pl.attention(q, k, v, pe, pos, pos, causal=True)
    assert_close(pl.attention(q, k, v, pe, pos + 50, pos + 50, causal=True), out)


def test_zero_table_at_initialisation_is_nope():
    """The table starts at zero, as the authors initialise it: no positional term."""
    pe = pl.CoPE(4, 9).double()
    assert (pe.pos_emb == 0).all()
    q, k, v = (randn(2, 3, 8, 4, seed=s) for s in (17, 18, 19))
    assert_close(
        pl.attention(q, k, v, pe, causal=True),
        pl.attention(q, k, v, pl.NoPE(), causal=True),
    )


def test_attention_is_scores_plus_the_unscaled_cope_term():
    """softmax(q.k / sqrt(d) + q.e[p]): the paper's appendix and x-transformers."""
    b, h, n, d = 1, 2, 6, 8
    pe = cope_layer(d, n + 1, seed=20)
    q, k, v = (randn(b, h, n, d, seed=s) for s in (21, 22, 23))
    s = q @ k.mT / math.sqrt(d)
    logits = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -INF)
    expected = (logits + pl.cope_bias(q, logits, pe.pos_emb)).softmax(-1) @ v
    assert_close(pl.attention(q, k, v, pe, causal=True), expected)


def test_kv_cache_queries_match_the_full_sequence():
    """Queries 5..8 against all 9 keys give the last rows of the full attention."""
    b, h, n, d = 2, 2, 9, 4
    pe = cope_layer(d, n + 1, seed=24)
    q, k, v = (randn(b, h, n, d, seed=s) for s in (25, 26, 27))
    full = pl.attention(q, k, v, pe, causal=True)
    assert_close(pl.attention(q[:, :, 5:], k, v, pe, causal=True), full[:, :, 5:])


def test_gradients_reach_table_and_gates_and_stay_finite():
    b, h, n, d = 1, 2, 6, 4
    pe = cope_layer(d, n + 1, seed=28)
    q = randn(b, h, n, d, seed=29).requires_grad_()
    k, v = randn(b, h, n, d, seed=30), randn(b, h, n, d, seed=31)
    pl.attention(q, k, v, pe, causal=True).square().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(pe.pos_emb.grad).all()
    assert pe.pos_emb.grad.abs().sum() > 0
    # through the gates alone: d bias / d logits = (z[ceil] - z[floor]) summed
    logits = causal_logits(b, h, n, seed=32).requires_grad_()
    pl.cope_bias(q.detach(), logits, pe.pos_emb.detach()).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    assert (logits.grad.triu(1) == 0).all()  # masked logits get no gradient


def test_registry_table_covers_the_training_length():
    pe = pl.make_encoding("cope", d_model=32, n_heads=4, max_len=64)
    assert isinstance(pe, pl.CoPE) and pe.pos_emb.shape == (65, 8)
    assert pe.causal_only and pe.needs_score_path


# ---------------------------------------------------------------- golden values


def test_golden_half_open_gates():
    """d = 1, q = 2, e = (10, 20, 40), every gate 1/2 (logit 0), three tokens:
    row 2 has p = (1.5, 1, 0.5), so z = (20, 40, 80) interpolates to (60, 40, 30)."""
    q = torch.full((1, 1, 3, 1), 2.0, dtype=torch.float64)
    logits = torch.zeros(1, 1, 3, 3, dtype=torch.float64).masked_fill(
        torch.ones(3, 3, dtype=torch.bool).triu(1), -INF
    )
    bias = pl.cope_bias(q, logits, t([[10.0], [20.0], [40.0]]))[0, 0]
    expected = t([[30.0, 20.0, 20.0], [40.0, 30.0, 20.0], [60.0, 40.0, 30.0]])
    assert_close(bias, expected)  # masked entries: p = 0, z[0] = 20


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("name", ["xt_causal", "xt_clamped", "xt_cache"])
def test_bias_matches_x_transformers(name):
    """x-transformers masks with -finfo.max; the course with -inf: both close the gate,
    so the two agree everywhere, masked entries included."""
    case = CASES[name]
    q, scores, emb = t(case["q"]), t(case["scores"]), t(case["pos_emb"])
    i, j = scores.shape[-2:]
    future = torch.ones(i, j, dtype=torch.bool).triu(j - i + 1)
    bias = pl.cope_bias(q, scores.masked_fill(future, -INF), emb)
    assert_close(bias, t(case["bias"]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["ram_div", "ram_nodiv", "ram_nodiv_clamped_padded"])
def test_attention_matches_the_authors_code(name):
    """``ContextPosSelfAttn`` of facebookresearch/RAM. With ``--cope-nodiv`` it is the
    course's CoPE with the same table; by default it divides q.e[p] by sqrt(d) too,
    which is the course's CoPE with the table e / sqrt(d). Their table is (1, d, npos),
    stored here transposed as (npos, d); their 1/0 mask is the boolean mask."""
    case = CASES[name]
    q, k, v, emb = (t(case[key]) for key in ("q", "k", "v", "pos_emb"))
    d = q.shape[-1]
    pe = pl.CoPE(d, emb.shape[0]).double()
    with torch.no_grad():
        pe.pos_emb.copy_(emb if case["nodiv"] else emb / math.sqrt(d))
    allowed = torch.tensor(case["allowed"])[:, None]  # (b, 1, i, j)
    out, weights = pl.attention(
        q, k, v, pe, causal=True, mask=allowed, return_weights=True
    )
    assert_close(out, t(case["out"]), rtol=1e-10, atol=1e-10)
    assert_close(weights, t(case["weights"]), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- bad input


def test_bad_inputs_are_named():
    q, emb = randn(1, 2, 4, 8), randn(5, 8)
    logits = causal_logits(1, 2, 4)
    with pytest.raises(TypeError, match="q must be a floating-point"):
        pl.cope_bias(q.long(), logits, emb)
    with pytest.raises(TypeError, match="logits must be a floating-point"):
        pl.cope_bias(q, logits.tolist(), emb)
    with pytest.raises(TypeError, match="pos_emb must be a floating-point"):
        pl.cope_bias(q, logits, emb.long())
    with pytest.raises(TypeError, match="pos_emb must have q's dtype"):
        pl.cope_bias(q, logits, emb.float())
    with pytest.raises(ValueError, match=r"q must have shape \(b, h, i, d\)"):
        pl.cope_bias(q[0], logits, emb)
    with pytest.raises(ValueError, match=r"pos_emb must have shape \(n_positions, 8\)"):
        pl.cope_bias(q, logits, randn(5, 4))
    with pytest.raises(ValueError, match="n_positions > 0"):
        pl.cope_bias(q, logits, randn(0, 8))
    with pytest.raises(ValueError, match=r"logits must have shape \(1, 2, 4, j\)"):
        pl.cope_bias(q, logits[:, :1], emb)
    with pytest.raises(ValueError, match="logits hold NaN"):
        pl.cope_bias(q, logits.masked_fill(logits > 0, float("nan")), emb)
    with pytest.raises(ValueError, match="n_positions must be > 0"):
        pl.cope_positions(logits, 0)
    with pytest.raises(ValueError, match="n_positions must be > 0"):
        pl.CoPE(8, 0)
    with pytest.raises(TypeError, match="n_positions must be an int"):
        pl.CoPE(8, 2.5)
    with pytest.raises(ValueError, match="d_head must be > 0"):
        pl.CoPE(0, 8)


def test_bad_calls_are_named():
    pe = pl.CoPE(8, 9)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="causal attention only"):
        pl.attention(q, q, q, pe, causal=False)
    with pytest.raises(ValueError, match="head dimension 8"):
        pl.attention(q[..., :4], q[..., :4], q[..., :4], pe, causal=True)
    pos = torch.arange(4).expand(1, 4)
    with pytest.raises(ValueError, match="CoPE reads ctx.q"):
        pe.transform_scores(torch.zeros(1, 2, 4, 4), pos, pos, ctx=pl.Context())

"""Inkling's content-conditioned relative logits: properties, then golden vectors from
transformers 5.24's Inkling attention (tests/golden/make_inkling_golden.py)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.inkling import (
    InklingBias,
    content_relative_bias,
    relative_logits,
)

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "inkling_hf.json").read_text()
)
D_MODEL, N_HEADS = 16, 2


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def encoding(extent=5, d_rel=3, seed=0):
    torch.manual_seed(seed)
    pe = InklingBias(D_MODEL, N_HEADS, d_rel=d_rel, extent=extent).double()
    with torch.no_grad():
        pe.proj.normal_()  # profiles large enough to see
    return pe


def bias_of(pe, x, q_pos, k_pos, j=None):
    b, i = x.shape[0], q_pos.shape[1]
    q = torch.zeros(b, N_HEADS, i, 8, dtype=x.dtype)
    k = torch.zeros(b, N_HEADS, j or i, 8, dtype=x.dtype)
    return pe.score_bias(q, k, q_pos, k_pos, ctx=pl.Context(x=x))  # (b, h, i, j)


# ---------------------------------------------------------------- properties


def test_the_bias_is_the_queries_content_at_the_distance():
    """bias_ij = profile(x_i)[i - j]: the same query content at another position
    writes the same profile, shifted with it; 0 for later keys and beyond E."""
    pe = encoding(extent=4)
    x = torch.randn(1, 10, D_MODEL, dtype=torch.float64)
    x[:, 7] = x[:, 3]  # token 7 says what token 3 says
    pos = torch.arange(10)[None] + 11
    bias = bias_of(pe, x, pos, pos)[0]  # (h, i, j)
    assert_close(bias[:, 7, 4:8], bias[:, 3, 0:4])  # distances 3, 2, 1, 0
    distance = pos[0, :, None] - pos[0, None, :]
    outside = (distance < 0) | (distance >= 4)
    assert (bias[:, outside] == 0).all() and (bias[:, ~outside] != 0).all()


def test_the_mix_is_linear_no_softmax():
    """Twice the relative states, twice the bias (Inkling mixes the bank linearly)."""
    pe = encoding()
    g = torch.Generator().manual_seed(1)
    r = torch.randn(2, N_HEADS, 7, 3, generator=g, dtype=torch.float64)
    pos = torch.arange(7)[None]
    proj = pe.proj.detach()
    assert_close(relative_logits(2 * r, proj, pos, pos),
                 2 * relative_logits(r, proj, pos, pos))  # fmt: skip


def test_any_queries_get_their_rows_of_the_full_call():
    """The bias reads the queries' inputs only: rows 2-4 alone (x of those rows), or
    as the last queries of a cache (x of every key), give rows 2-4 of the full bias."""
    pe = encoding()
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64)
    pos = torch.arange(8)[None] + 3
    full = bias_of(pe, x, pos, pos)
    rows = torch.arange(2, 5)
    alone = bias_of(pe, x[:, rows], pos[:, rows], pos, j=8)
    assert_close(alone, full[:, :, rows])
    last = bias_of(pe, x, pos[:, 5:], pos, j=8)  # x holds every key: the last 3 rows
    assert_close(last, full[:, :, 5:])


def test_a_cached_model_decodes_as_its_full_forward():
    pe = encoding(extent=4)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe.float()).double().eval()
    tokens = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(2))
    cache, steps = model.new_cache(), []
    for start, size in ((0, 3), (3, 1), (4, 4), (8, 1)):
        steps.append(model(tokens[:, start : start + size], cache=cache))
    assert_close(torch.cat(steps, 1), model(tokens))


def test_the_flex_form_states_the_same_bias():
    pe = encoding()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    q, k = (torch.randn(2, N_HEADS, 6, 8, dtype=torch.float64) for _ in "qk")
    pos = torch.tensor([[0, 2, 3, 4, 7, 9]])
    ctx = pl.Context(x=x, q=q, k=k)
    mod = pe.score_mod(pos, pos, ctx=ctx)
    from posenc_lib.backends.flex import evaluate

    zero = torch.zeros((), dtype=torch.float64)
    got = evaluate(mod, (2, N_HEADS, 6, 6), zero)
    assert_close(got, pe.score_bias(q, k, pos, pos, ctx=ctx))


# ---------------------------------------------------------------- golden vectors


@pytest.mark.parametrize("layer", [0, 1], ids=["full", "sliding"])
def test_matches_inkling_attention(layer):
    """transformers' InklingAttention: our bias from its r_proj and proj equals its
    position_bias; softmax(q k^T * scaling + bias + mask) equals its weights (the bias
    after the scale, unscaled); the decoding steps' bias, from the new token's input
    alone, equals its rows against the cached keys (a sliding layer caches the last
    window)."""
    c = GOLDEN["layers"][layer]
    h, n, extent = 2, GOLDEN["n"], c["rel_extent"]
    r_proj, proj = f64(c["r_proj"]), f64(c["proj"])
    d_model = r_proj.shape[1]
    pe = InklingBias(d_model, h, d_rel=proj.shape[0], extent=extent).double()
    with torch.no_grad():
        pe.r_proj.weight.copy_(r_proj)
        pe.proj.copy_(proj)
    x = f64(c["x"])[None]  # (1, n, D)
    pos = torch.arange(n)[None]
    q, k = f64(c["q"])[None], f64(c["k"])[None]  # (1, h, n, d)
    bias = pe.score_bias(q, k, pos, pos, ctx=pl.Context(x=x))
    assert_close(bias[0], f64(c["bias"]), rtol=1e-5, atol=1e-6)
    # the weights: causal, and within the window in the sliding layer
    distance = pos[0, :, None] - pos[0, None, :]
    seen = distance >= 0
    if c["sliding_window"] is not None:
        seen &= distance < c["sliding_window"]
    scores = (q @ k.mT) * c["scaling"] + bias
    weights = scores.masked_fill(~seen, float("-inf")).softmax(-1)
    assert_close(weights[0], f64(c["weights"]), rtol=1e-4, atol=1e-5)
    # decoding: one new token against the keys the layer's cache holds
    for s, step in enumerate(c["steps"]):
        t = GOLDEN["prompt"] + s  # the new token's position
        want = f64(step["bias"])  # (h, 1, keys)
        keys = torch.arange(t - want.shape[-1] + 1, t + 1)[None]
        got = bias_of(
            pe, f64(step["x"])[None], torch.tensor([[t]]), keys, j=keys.shape[1]
        )
        assert_close(got[0], want, rtol=1e-5, atol=1e-6)


def test_the_model_tables_helper_is_this_bias():
    """models_data.content_relative_bias, the helper of the model table, is the same
    function (one implementation), checked on models_2026_hf.json's case."""
    assert pl.models_data.content_relative_bias is content_relative_bias
    case = json.loads(
        (pathlib.Path(__file__).parent / "golden" / "models_2026_hf.json").read_text()
    )["functions"]["inkling_relative_logits"]
    got = content_relative_bias(f64(case["relative_states"]), f64(case["proj"]))
    assert_close(got, f64(case["bias"]), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="extent"):
        InklingBias(16, 2, extent=0)
    with pytest.raises(ValueError, match="d_rel"):
        InklingBias(16, 2, d_rel=0)
    pos = torch.arange(4)[None]
    with pytest.raises(ValueError, match="d_rel"):
        relative_logits(torch.ones(1, 2, 4, 3), torch.ones(5, 6), pos, pos)
    with pytest.raises(ValueError, match="q_pos"):
        relative_logits(torch.ones(1, 2, 4, 3), torch.ones(3, 6), torch.arange(4), pos)
    pe = encoding()
    q = torch.zeros(1, N_HEADS, 4, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="reads ctx.x"):
        pe.score_bias(q, q, pos, pos, ctx=pl.Context())
    x = torch.randn(1, 3, D_MODEL, dtype=torch.float64)
    with pytest.raises(ValueError, match="queries' layer inputs"):
        pe.score_bias(q, q, pos, pos, ctx=pl.Context(x=x))
    with pytest.raises(ValueError, match="n_heads=2"):
        pe.score_bias(q[:, :1], q[:, :1], pos, pos, ctx=pl.Context(x=x))

"""LeRoPE (Mistral Large 4's learned RoPE frequencies): properties, then golden vectors
from the model's own classes (tests/golden/make_lerope_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.lerope import LearnedRotary, learned_log_scale

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "lerope_hf.json").read_text()
)


# Hugging Face takes the angles in float32: at position 5000 and theta exp(alpha) ~ 1.8
# an angle of ~9000 rad is rounded by up to ~5e-4 (float64 here)
TOL = 1e-3


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def qk(b=2, h=3, n=9, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in "qk")


def with_alpha(pe, seed=1, spread=0.4):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        pe.alpha.copy_(spread * torch.randn(pe.alpha.shape, generator=g))
    return pe


# ---------------------------------------------------------------- properties


def test_alpha_zero_is_the_scaling_it_sits_on():
    params = dict(factor=4.0, original_max_position_embeddings=32)
    pe = LearnedRotary(16, scaling="yarn", **params).double()
    plain = pl.Rotary(16, layout="interleaved", scaling="yarn", **params).double()
    q, k = qk()
    pos = torch.arange(9)[None] + 5
    for got, want in zip(
        pe.transform_qk(q, k, pos, pos), plain.transform_qk(q, k, pos, pos)
    ):
        assert_close(got, want)


def test_learned_frequencies_are_the_table_times_exp_alpha():
    """exp(alpha) = 2 on every pair turns position m as plain RoPE turns 2m."""
    pe = LearnedRotary(16).double()
    with torch.no_grad():
        pe.alpha.fill_(math.log(2.0))
    q, k = qk()
    pos = torch.arange(9)[None] + 3
    plain = pl.Rotary(16, layout="interleaved").double()
    assert_close(
        pe.transform_qk(q, k, pos, pos), plain.transform_qk(q, k, 2 * pos, 2 * pos)
    )


def test_scores_depend_on_the_offset_only():
    yarn = dict(scaling="yarn", factor=8.0, original_max_position_embeddings=16)
    pe = with_alpha(LearnedRotary(16, **yarn).double())
    q, k = qk()
    pos = torch.arange(9)[None]
    scores = []
    for shift in (0, 137):
        q2, k2 = pe.transform_qk(q, k, pos + shift, pos + shift)
        scores.append(q2 @ k2.mT)
    assert_close(scores[0], scores[1])


def test_alpha_learns():
    """The gradient reaches alpha through the model's attention (every layer shares
    it), and a step changes the frequencies."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, 32, 2, 2, pe="lerope")
    tokens = torch.randint(0, 11, (2, 12))
    model(tokens).square().mean().backward()
    assert model.pe.alpha.grad is not None and model.pe.alpha.grad.abs().max() > 0


def test_the_query_scale_is_a_log_of_the_position_per_head():
    pe = LearnedRotary(16, query_scale=True, n_heads=3).double()
    q, k = qk()
    pos = torch.arange(9)[None] + 2
    at_first = LearnedRotary(16).double().transform_qk(q, k, pos, pos)
    assert_close(pe.transform_qk(q, k, pos, pos), at_first)  # a = 0, b = 1
    with torch.no_grad():
        pe.query_slope.copy_(torch.tensor([0.5, -0.1, 0.0]))
        pe.query_bias.copy_(torch.tensor([1.0, 2.0, 0.5]))
    rotated, _ = LearnedRotary(16).double().transform_qk(q, k, pos, pos)
    scaled, _ = pe.transform_qk(q, k, pos, pos)
    s = pe.query_slope[:, None] * torch.log(pos[0] + 1.0) + pe.query_bias[:, None]
    assert_close(scaled, rotated * s[None, :, :, None].detach())
    assert_close(learned_log_scale(pos, pe.query_slope, pe.query_bias)[:, 0], s)


def test_a_cached_model_decodes_as_its_full_forward():
    torch.manual_seed(0)
    pe = with_alpha(pl.make_encoding("lerope", 32, 2))
    model = pl.TinyTransformer(11, 32, 2, 2, pe).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    cache, steps = model.new_cache(), []
    for start, size in ((0, 4), (4, 1), (5, 3), (8, 1)):
        steps.append(model(tokens[:, start : start + size], cache=cache))
    assert_close(torch.cat(steps, 1), model(tokens))


# ---------------------------------------------------------------- golden vectors


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_matches_mistral_large4(name):
    """inv_freq, cos and sin of MistralLarge4TextRotaryEmbedding with non-zero alpha;
    q and k rotated by apply_rotary_pos_emb_interleave (which lists the rotated even
    coordinates, then the odd ones: mapped explicitly); the softmax scaling."""
    c = GOLDEN["cases"][name]
    params = {k: v for k, v in c["rope_parameters"].items()
              if k not in ("rope_type", "rope_theta")}  # fmt: skip
    d = c["head_dim"]
    pe = LearnedRotary(d, c["rope_parameters"]["rope_theta"], scaling="yarn",
                       query_scale=True, n_heads=3, **params).double()  # fmt: skip
    assert_close(pe.inv_freq, f64(c["inv_freq"]), rtol=1e-6, atol=0)
    assert pe.attention_factor == c["attention_scaling"]
    with torch.no_grad():
        pe.alpha.copy_(f64(c["alpha"]))
    pos = torch.tensor([c["positions"]])
    # Hugging Face's cos and sin are cat(freqs, freqs): the half layout's
    args = (pe.learned_inv_freq(), "half", pe.attention_factor, torch.float64)
    cos, sin = pl.rope_cos_sin(pos, *args)
    assert_close(cos[0, 0], f64(c["cos"]), rtol=0, atol=TOL)
    assert_close(sin[0, 0], f64(c["sin"]), rtol=0, atol=TOL)
    q, k = f64(c["q"])[None], f64(c["k"])[None]  # (1, h, n, d)
    with torch.no_grad():
        q_out, k_out = pe.transform_qk(q, k, pos, pos)
    to_hf = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # evens, odds
    assert_close(k_out[0][..., to_hf], f64(c["k_out"]), rtol=0, atol=TOL)
    # the query: rotated, then scaled by a_h log(m + 1) + b_h (set after the rotation)
    with torch.no_grad():
        pe.query_slope.copy_(f64(c["query_scale"]))
        pe.query_bias.copy_(f64(c["query_bias"]))
        q_scaled, _ = pe.transform_qk(q, k, pos, pos)
    assert_close(q_scaled[0][..., to_hf], f64(c["q_scaled"]), rtol=0, atol=2 * TOL)
    # and, unscaled, apply_rotary_pos_emb_interleave's own query
    with torch.no_grad():
        pe.query_slope.zero_()
        pe.query_bias.fill_(1.0)
        q_plain, _ = pe.transform_qk(q, k, pos, pos)
    assert_close(q_plain[0][..., to_hf], f64(c["q_out"]), rtol=0, atol=TOL)


def test_learned_log_scale_is_the_function_the_model_table_uses():
    assert pl.models_data.learned_log_scale is learned_log_scale


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="query_scale"):
        LearnedRotary(16, query_scale=1)
    with pytest.raises(ValueError, match="n_heads"):
        LearnedRotary(16, query_scale=True)
    with pytest.raises(ValueError, match="scaling"):
        LearnedRotary(16, scaling="nope")
    pe = LearnedRotary(16, query_scale=True, n_heads=3)
    q, k = (torch.randn(1, 2, 4, 16) for _ in "qk")
    with pytest.raises(ValueError, match="3 heads"):
        pe.transform_qk(q, k, torch.arange(4)[None], torch.arange(4)[None])
    q, k = (torch.randn(1, 3, 4, 16) for _ in "qk")
    with pytest.raises(ValueError, match=">= 0"):
        pe.transform_qk(q, k, torch.arange(4)[None] - 2, torch.arange(4)[None])
    with pytest.raises(ValueError, match="scale and bias"):
        learned_log_scale(torch.tensor([1]), torch.ones(2), torch.ones(3))
    with pytest.raises(TypeError, match="integer positions"):
        learned_log_scale(torch.tensor([1.0]), torch.ones(2), torch.ones(2))

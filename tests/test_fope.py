"""FoPE as it ships: properties, then golden vectors from vLLM's FourierRotaryEmbedding
(tests/golden/make_fope_golden.py: sin padded with 0) and from Intern-S1-Pro's remote
code (tests/golden/models_2026_hf.json, ``fope``: sin padded with 1)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.fope import FourierRotary, fope_cos_sin, fope_inv_freq

GOLDEN = pathlib.Path(__file__).parent / "golden"
VLLM = json.loads((GOLDEN / "fope_vllm.json").read_text())
REMOTE = json.loads((GOLDEN / "models_2026_hf.json").read_text())["fope"]


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


def identity(pe):
    with torch.no_grad():
        for c in (pe.cos_coef, pe.sin_coef):
            c.copy_(torch.eye(c.shape[-1]).expand_as(c))
    return pe


def qk(h=2, n=7, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, h, n, d, generator=g, dtype=torch.float64) for _ in "qk")


# ---------------------------------------------------------------- properties


def test_the_kept_frequencies_turn_within_the_window():
    inv = fope_inv_freq(16, 10000.0, 64)
    full = pl.rope_inv_freq(16, 10000.0)[0]
    assert_close(inv, full[: len(inv)])
    assert (2 * math.pi / inv < 64).all() and 2 * math.pi / full[len(inv)] >= 64


def test_identity_mixing_is_rope_with_the_slow_frequencies_at_zero():
    """C = S = I, sin padded with 0: RoPE (half layout) whose dropped frequencies are
    0, the paper's 'zero frequency'; scores then depend on the offset only."""
    pe = identity(FourierRotary(16, 2, max_len=64)).double()
    kept = pe.inv_freq.numel()
    theta = torch.cat([pe.inv_freq, torch.zeros(8 - kept, dtype=torch.float64)])
    q, k = qk()
    pos = torch.tensor([[0, 3, 4, 9, 20, 41, 63]])
    got = pe.transform_qk(q, k, pos, pos)
    want = tuple(pl.apply_rope(t, pos, theta, "half") for t in (q, k))
    assert_close(got, want)
    shifted = pe.transform_qk(q, k, pos + 100, pos + 100)
    assert_close(got[0] @ got[1].mT, shifted[0] @ shifted[1].mT)


def test_learned_mixing_is_no_longer_a_function_of_the_offset():
    """With mixed cos and sin the map is not a rotation: shifting every position
    changes the scores (FoPE trades the relative property for the Fourier series)."""
    pe = FourierRotary(16, 2, max_len=64).double()
    q, k = qk()
    pos = torch.arange(7)[None]
    a, b = pe.transform_qk(q, k, pos, pos), pe.transform_qk(q, k, pos + 5, pos + 5)
    assert (a[0] @ a[1].mT - b[0] @ b[1].mT).abs().max() > 1e-3


@pytest.mark.parametrize("pad_sin, factor", [(0.0, 1.0), (1.0, 2.0)])
def test_the_padding_of_the_dropped_pairs(pad_sin, factor):
    """On the dropped channels alone, vLLM's padding (sin 0) leaves q . k as it is at
    every position; the remote code's (sin 1) maps a pair (x, y) to (x - y, x + y)
    in q and k alike, which doubles q . k, at every position too."""
    pe = FourierRotary(16, 2, max_len=64, pad_sin=pad_sin).double()
    kept = pe.inv_freq.numel()
    q, k = qk()
    dropped = torch.zeros(16, dtype=torch.bool)
    dropped[kept:8] = dropped[8 + kept :] = True
    q, k = q * dropped, k * dropped
    pos = torch.tensor([[0, 5, 9, 17, 30, 44, 60]])
    q2, k2 = pe.transform_qk(q, k, pos + 2, pos)
    assert_close((q2 * k2).sum(-1), factor * (q * k).sum(-1))


def test_a_window_too_short_for_any_turn_keeps_no_frequency():
    """max_len <= 2 pi: no period fits, every pair is dropped; with vLLM's padding
    nothing is rotated (the sources compute the same: an empty table, padded)."""
    pe = FourierRotary(16, 2, max_len=4).double()
    assert pe.inv_freq.numel() == 0
    q, k = qk()
    pos = torch.arange(7)[None] * 3
    assert_close(pe.transform_qk(q, k, pos, pos), (q, k))


def test_a_cached_model_decodes_as_its_full_forward():
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, 32, 2, 2, pl.make_encoding("fope", 32, 2, 64))
    model = model.double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    cache, steps = model.new_cache(), []
    for start, size in ((0, 4), (4, 1), (5, 3), (8, 1)):
        steps.append(model(tokens[:, start : start + size], cache=cache))
    assert_close(torch.cat(steps, 1), model(tokens))


# ---------------------------------------------------------------- golden vectors


@pytest.mark.parametrize("name", sorted(VLLM["cases"]))
def test_matches_vllm_fourier_rotary_embedding(name):
    """vLLM's forward_native (sin padded with 0): the kept frequencies, then keys
    rotated by the encoding (one head per key head); queries of a group share their
    key head's cos and sin (GQA, which the encoding does not do: mapped explicitly)."""
    c = VLLM["cases"][name]
    hd, kv, heads = c["head_size"], c["kv_heads"], c["heads"]
    inv = fope_inv_freq(hd, c["base"], c["max_position_embeddings"], c["num_inv_freq"])
    assert_close(inv, f64(c["inv_freq"]), rtol=1e-6, atol=0)
    pe = FourierRotary(hd, kv, c["max_position_embeddings"], c["base"],
                       c["num_inv_freq"], c["sep_head"]).double()  # fmt: skip
    with torch.no_grad():
        pe.cos_coef.copy_(f64(c["cos_coef"])[: pe.cos_coef.shape[0]])
        pe.sin_coef.copy_(f64(c["sin_coef"])[: pe.sin_coef.shape[0]])
    pos = torch.tensor([c["positions"]])
    n = pos.shape[1]
    key = f64(c["key"]).view(n, kv, hd).transpose(0, 1)[None]  # (1, kv, n, d)
    query = f64(c["query"]).view(n, heads, hd).transpose(0, 1)[None]
    _, k_out = pe.transform_qk(key, key, pos, pos)
    want_k = f64(c["key_out"]).view(n, kv, hd).transpose(0, 1)[None]
    assert_close(k_out, want_k, rtol=1e-5, atol=1e-5)
    cos, sin = pe.cos_sin(pos, torch.float64)  # (1, kv|1, n, d)
    group = heads // kv
    cos, sin = (t.expand(1, kv, n, hd).repeat_interleave(group, 1) for t in (cos, sin))
    q_out = query * cos + pl.rotate_half(query) * sin
    want_q = f64(c["query_out"]).view(n, heads, hd).transpose(0, 1)[None]
    assert_close(q_out, want_q, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(REMOTE["cases"]))
def test_matches_intern_s1_pro_remote_code_with_its_padding(name):
    """The remote code (sin padded with 1), through the encoding: its keys."""
    c = REMOTE["cases"][name]
    k = f64(c["k"])[None]  # (1, kv, n, d)
    kv, hd = k.shape[1], c["head_dim"]
    pe = FourierRotary(hd, kv, c["max_position_embeddings"], c["rope_theta"],
                       pad_sin=1.0).double()  # fmt: skip
    with torch.no_grad():
        pe.cos_coef.copy_(f64(c["cos_coef"]))
        pe.sin_coef.copy_(f64(c["sin_coef"]))
    pos = torch.tensor([c["positions"]])
    _, k_out = pe.transform_qk(k, k, pos, pos)
    assert_close(k_out[0], f64(c["k_out"]), rtol=1e-4, atol=1e-4)


def test_the_future_chapters_helpers_are_these():
    assert pl.frontier.fope_cos_sin is fope_cos_sin
    assert pl.frontier.fope_inv_freq is fope_inv_freq


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="pad_sin"):
        FourierRotary(16, 2, 64, pad_sin=0.5)
    with pytest.raises(ValueError, match="max_len"):
        FourierRotary(16, 2, 0)
    with pytest.raises(ValueError, match="base"):
        FourierRotary(16, 2, 64, base=1.0)
    with pytest.raises(ValueError, match="init_factor"):
        FourierRotary(16, 2, 64, init_factor=-1.0)
    with pytest.raises(ValueError, match="num_inv_freq"):
        FourierRotary(16, 2, 64, num_inv_freq=9)
    pe = FourierRotary(16, 2, 64)
    q = torch.randn(1, 3, 4, 16)
    with pytest.raises(ValueError, match="2 heads"):
        pe.transform_qk(q, q, torch.arange(4)[None], torch.arange(4)[None])
    with pytest.raises(ValueError, match=r"\(b, h, n, 16\)"):
        pe.transform_qk(q[..., :8], q[..., :8], torch.arange(4)[None], None)
    with pytest.raises(TypeError, match="needs max_len"):
        pl.make_encoding("fope", 32, 2)

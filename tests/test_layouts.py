"""RoPE layouts, checkpoint conversion and KV-cache decoding: properties, then parity
with Meta's Llama, Hugging Face's conversion and gpt-fast's.

Parity runs without those packages: ``tests/golden/layouts_llama.json`` holds their
outputs, produced by ``tests/golden/make_layouts_golden.py`` (versions there).
"""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "layouts_llama.json").read_text()
)
F64 = dict(dtype=torch.float64)
F32_TOL = dict(atol=2e-5, rtol=2e-5)  # Meta rotates, and HF makes cos/sin, in float32


def t(x):
    return torch.tensor(x, **F64)


# ---- properties ----


@pytest.mark.parametrize("n_heads,d", [(1, 2), (3, 8), (2, 16)])
def test_the_two_conversions_are_inverse(n_heads, d):
    W = torch.randn(n_heads * d, 5, **F64)
    assert_close(pl.half_to_interleaved(pl.interleaved_to_half(W, n_heads), n_heads), W)
    assert_close(pl.interleaved_to_half(pl.half_to_interleaved(W, n_heads), n_heads), W)
    bias = torch.randn(n_heads * d, **F64)
    assert_close(
        pl.interleaved_to_half(bias, n_heads),
        pl.interleaved_to_half(bias[:, None], n_heads)[:, 0],
    )


def test_half_of_permuted_is_permuted_interleaved():
    d, n = 12, 7
    inv_freq, _ = pl.rope_inv_freq(d)
    perm = pl.layout_permutation(d)
    x = torch.randn(2, 3, n, d, **F64)
    pos = torch.arange(n) * 5
    assert_close(
        pl.apply_rope(x[..., perm], pos, inv_freq, "half"),
        pl.apply_rope(x, pos, inv_freq, "interleaved")[..., perm],
    )


def test_conversion_permutes_each_head_by_the_layout_permutation():
    h, d = 3, 8
    W = torch.randn(h * d, 4, **F64)
    perm = pl.layout_permutation(d)
    expected = W.view(h, d, 4)[:, perm].reshape(h * d, 4)
    assert_close(pl.interleaved_to_half(W, h), expected)


def test_converted_attention_layer_gives_the_same_output():
    torch.manual_seed(0)
    d_model, h, n = 24, 3, 9
    half = pl.MultiHeadAttention(d_model, h, pl.Rotary(d_model // h, layout="half"))
    inter = pl.MultiHeadAttention(
        d_model, h, pl.Rotary(d_model // h, layout="interleaved")
    )
    half, inter = half.double(), inter.double()
    state = dict(half.state_dict())
    for name in ("w_q.weight", "w_k.weight"):
        state[name] = pl.half_to_interleaved(state[name], h)
    inter.load_state_dict(state)
    x = torch.randn(2, n, d_model, **F64)
    assert_close(inter(x, causal=True), half(x, causal=True))
    # permuting only W_q changes the scores
    state["w_k.weight"] = half.state_dict()["w_k.weight"]
    inter.load_state_dict(state)
    assert (inter(x, causal=True) - half(x, causal=True)).abs().max() > 1e-3


def test_decoding_with_the_cache_matches_the_full_forward_with_left_padding():
    torch.manual_seed(1)
    model = pl.TinyTransformer(13, 32, 4, 2, pe=pl.Rotary(8)).double().eval()
    b, n, prompt = 3, 10, 4
    tokens = torch.randint(0, 13, (b, n))
    mask = torch.ones(b, n, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :3] = 0
    pos = pl.positions_from_mask(mask)
    full = model(tokens, pos=pos, causal=False, mask=pl.padded_causal_mask(mask, n))
    logits, cache = pl.forward_with_cache(
        model, tokens[:, :prompt], pos[:, :prompt], mask[:, :prompt]
    )
    steps = [logits]
    for i in range(prompt, n):
        nxt = pos[:, i - 1 : i] + 1  # the last position + 1
        assert_close(nxt, pos[:, i : i + 1])
        logits, cache = pl.forward_with_cache(
            model, tokens[:, i : i + 1], nxt, mask[:, : i + 1], cache
        )
        steps.append(logits)
    assert_close(torch.cat(steps, 1), full)
    # an off-by-one position for the last token breaks it
    logits, _ = pl.forward_with_cache(
        model,
        tokens[:, -1:],
        pos[:, -1:] + 1,
        mask,
        [(k[:, :, :-1], v[:, :, :-1]) for k, v in cache],
    )
    assert (logits - full[:, -1:]).abs().max() > 1e-3


# ---- golden: Meta's Llama, Hugging Face's conversion, gpt-fast ----


@pytest.mark.parametrize("case", GOLDEN["conversion"], ids=lambda c: c["name"])
def test_interleaved_to_half_is_hugging_faces_permute(case):
    assert_close(
        pl.interleaved_to_half(t(case["wq_meta"]), case["n_heads"]), t(case["wq_hf"])
    )
    assert_close(
        pl.interleaved_to_half(t(case["wk_meta"]), case["n_kv_heads"]), t(case["wk_hf"])
    )


@pytest.mark.parametrize("case", GOLDEN["conversion"], ids=lambda c: c["name"])
def test_half_to_interleaved_is_gpt_fasts_permute(case):
    assert_close(
        pl.half_to_interleaved(t(case["wq_hf"]), case["n_heads"]),
        t(case["wq_back_gptfast"]),
    )
    assert_close(t(case["wq_back_gptfast"]), t(case["wq_meta"]))


@pytest.mark.parametrize("case", GOLDEN["conversion"], ids=lambda c: c["name"])
def test_rotations_match_meta_and_hugging_face(case):
    h, hk, d = case["n_heads"], case["n_kv_heads"], case["d_head"]
    x = t(case["x"])  # (1, n, D)
    n = x.shape[1]
    inv_freq, _ = pl.rope_inv_freq(d, case["theta"])

    def heads(W, h):
        return (x @ t(W).T).view(1, n, h, d).transpose(1, 2)  # (b, h, n, d)

    pos = torch.arange(n)
    for W, hh, key in ((case["wq_meta"], h, "q"), (case["wk_meta"], hk, "k")):
        rot = pl.apply_rope(heads(W, hh), pos, inv_freq, "interleaved")
        assert_close(rot, t(case[f"{key}_rot_meta"]), **F32_TOL)
    for W, hh, key in ((case["wq_hf"], h, "q"), (case["wk_hf"], hk, "k")):
        rot = pl.apply_rope(heads(W, hh), pos, inv_freq, "half")
        assert_close(rot, t(case[f"{key}_rot_hf"]), **F32_TOL)
    # the two models' scores agree: the conversion does not change them
    assert_close(t(case["scores_hf"]), t(case["scores_meta"]), **F32_TOL)


@pytest.mark.parametrize("case", GOLDEN["positions"], ids=lambda c: c["name"])
def test_positions_from_mask_match_hugging_face(case):
    got = pl.positions_from_mask(torch.tensor(case["attention_mask"]))
    assert got.tolist() == case["position_ids"]


# ---- bad input ----


@pytest.mark.parametrize("fn", [pl.interleaved_to_half, pl.half_to_interleaved])
@pytest.mark.parametrize(
    "W,n_heads,match",
    [
        (torch.zeros(10, 4), 3, "does not divide"),
        (torch.zeros(12, 4), 4, "must be even"),
        (torch.zeros(2, 8, 4), 2, "2-D projection"),
        ([[1.0, 2.0]], 1, "2-D projection"),
        (torch.zeros(8, 4), 0, "n_heads"),
    ],
)
def test_conversion_refuses_bad_shapes(fn, W, n_heads, match):
    with pytest.raises(ValueError, match=match):
        fn(W, n_heads)


def test_layout_permutation_refuses_odd_d():
    with pytest.raises(ValueError, match="even"):
        pl.layout_permutation(7)


def test_decoding_helpers_refuse_bad_input():
    with pytest.raises(ValueError, match="0 .pad. and 1"):
        pl.positions_from_mask(torch.tensor([[0, 2, 1]]))
    with pytest.raises(ValueError, match="n_new"):
        pl.padded_causal_mask(torch.ones(1, 3), 4)
    model = pl.TinyTransformer(
        5, 16, 2, 1, pe=pl.make_encoding("alibi", d_model=16, n_heads=2, max_len=8)
    )
    tok = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="Rotary"):
        pl.forward_with_cache(model, tok, torch.zeros(1, 2), torch.ones(1, 2))
    model = pl.TinyTransformer(5, 16, 2, 1, pe=pl.Rotary(8))
    with pytest.raises(ValueError, match="attention_mask must be"):
        pl.forward_with_cache(model, tok, torch.zeros(1, 2), torch.ones(1, 3))


def test_decoding_with_partial_rotary_matches_the_full_forward():
    """A Rotary that rotates the first r coordinates (rotary_dim) decodes as its full
    forward pass does (the step once rotated all d and refused the r/2 frequencies)."""
    torch.manual_seed(2)
    model = pl.TinyTransformer(7, 16, 2, 2, pe=pl.Rotary(8, rotary_dim=4)).double()
    tokens, n = torch.randint(0, 7, (2, 6)), 6
    mask, pos = torch.ones(2, n, dtype=torch.long), torch.arange(n).expand(2, n)
    full = model(tokens)
    logits, cache = pl.forward_with_cache(model, tokens[:, :3], pos[:, :3], mask[:, :3])
    steps = [logits]
    for i in range(3, n):
        logits, cache = pl.forward_with_cache(
            model, tokens[:, i : i + 1], pos[:, i : i + 1], mask[:, : i + 1], cache
        )
        steps.append(logits)
    assert_close(torch.cat(steps, 1), full)


def test_decoding_refuses_an_encoding_whose_mask_its_step_would_ignore():
    """``rope_attention_step`` applies the rotation and nothing else: a Rotary that
    also masks keys (chunks, a sliding window) decoded with it attended to every
    cached key and gave wrong logits without a word (nanochat#452's bug). The default
    step refuses such a model, in any block; a step passed by name is the caller's."""
    tok = torch.zeros(1, 2, dtype=torch.long)
    pos, mask = torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2)
    chunked = pl.TinyTransformer(5, 16, 2, 1, pe=pl.ChunkedRotary(8, chunk_size=4))
    with pytest.raises(ValueError, match="score_bias.*step"):
        pl.forward_with_cache(chunked, tok, pos, mask)
    second = pl.TinyTransformer(
        5, 16, 2, 2, pe=[pl.Rotary(8), pl.ChunkedRotary(8, chunk_size=4)]
    )
    with pytest.raises(ValueError, match=r"blocks\[1\].*score_bias"):
        pl.forward_with_cache(second, tok, pos, mask)
    nope = pl.TinyTransformer(5, 16, 2, 2, pe=[pl.Rotary(8), pl.NoPE()])
    with pytest.raises(ValueError, match=r"blocks\[1\].*Rotary"):
        pl.forward_with_cache(nope, tok, pos, mask)
    logits, _ = pl.forward_with_cache(
        chunked, tok, pos, mask, step=pl.rope_attention_step
    )
    assert logits.shape == (1, 2, 5)


@pytest.mark.parametrize("shape, n_heads", [((6, 4), 3), ((8, 4), 2), ((6,), 3)])
def test_the_permutations_return_a_new_tensor(shape, n_heads):
    """Both return a new tensor, as documented: with d_head = 2 the permutation is
    the identity, and the result was a view of W (writing it changed W)."""
    W = torch.randn(*shape)
    for permute in (pl.interleaved_to_half, pl.half_to_interleaved):
        before = W.clone()
        out = permute(W, n_heads)
        out.zero_()
        torch.testing.assert_close(W, before)

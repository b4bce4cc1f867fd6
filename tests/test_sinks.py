"""Hybrid models: chunked RoPE, Llama 4's query temperature, learned sinks, and a
TinyTransformer with one encoding per layer. Properties, then parity with Hugging
Face transformers' model code (tests/golden/make_sinks_golden.py)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "sinks_hf.json").read_text()
)


# ---------------------------------------------------------------- properties


def test_attn_scale_is_one_until_floor_scale_then_steps_like_a_log():
    p = torch.arange(40)
    s = pl.llama4_attn_scale(p, floor_scale=8, attn_scale=0.5)
    assert (s[:7] == 1).all()  # floor((p + 1) / 8) = 0 for p < 7
    assert_close(s[7:15], torch.full((8,), 1 + 0.5 * math.log(2)))
    assert_close(s[39], torch.tensor(1 + 0.5 * math.log(1 + 5)))
    assert (s.diff() >= 0).all()


def test_sink_softmax_rows_sum_to_one_minus_the_sink():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64)
    sinks = torch.tensor([-1.0, 0.0, 3.0], dtype=torch.float64)
    w = pl.sink_softmax(scores, sinks)
    # 1 - sum_j w_ij = exp(s_h) / (exp(s_h) + sum_l exp(z_il))
    rest = sinks.exp()[None, :, None] / (
        sinks.exp()[None, :, None] + scores.exp().sum(-1)
    )
    assert_close(1 - w.sum(-1), rest)
    # a very negative sink is plain softmax
    assert_close(
        pl.sink_softmax(scores, torch.full((3,), -1e4, dtype=torch.float64)),
        scores.softmax(-1),
    )


def test_sink_softmax_gives_a_fully_masked_row_to_the_sink():
    scores = torch.randn(1, 2, 3, 3)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[0] = False
    w = pl.sink_softmax(scores, torch.zeros(2), mask)
    assert torch.isfinite(w).all() and (w[:, :, 0] == 0).all()


def test_sink_softmax_with_no_sink_gives_a_fully_masked_row_zeros():
    """A sink of -inf is no sink at all; a row with every key hidden then has no
    logit left, and still gets zeros, as the docstring says (was NaN)."""
    scores = torch.randn(1, 2, 3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 sees no key
    sinks = torch.tensor([float("-inf"), 0.5])
    w = pl.sink_softmax(scores, sinks, mask)
    assert torch.isfinite(w).all()
    assert (w[:, :, 1] == 0).all()  # both heads: no key, zeros
    # the other rows of the -inf head are a plain softmax over the visible keys
    torch.testing.assert_close(w[0, 0, [0, 2]], scores[0, 0, [0, 2]].softmax(-1))


def test_learned_sink_lets_a_head_attend_to_nothing():
    pe = pl.LearnedSink(2).double()
    with torch.no_grad():
        pe.sinks.copy_(torch.tensor([30.0, -30.0]))
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    out = pl.attention(q, k, v, pe, causal=True)
    assert out[0, 0].abs().max() < 1e-9  # head 0: everything to the sink
    plain = pl.attention(q, k, v, pl.NoPE(), causal=True)
    assert_close(out[0, 1], plain[0, 1])  # head 1: plain softmax


def test_learned_sink_gets_a_gradient_on_the_fused_path_as_on_the_reference():
    """The sink is one more key on the fused path (``sink_logits``): the default path,
    with the reference's output and gradient."""
    pe = pl.LearnedSink(2).double()
    mha = pl.MultiHeadAttention(8, 2, pe).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    grads = []
    for path in ("auto", "reference"):
        pe.sinks.grad = None
        mha(x, causal=True, path=path).sum().backward()
        grads.append(pe.sinks.grad.clone())
    assert grads[0].abs().sum() > 0
    assert_close(grads[0], grads[1])
    assert not pe.needs_score_path


def test_a_sink_trains_without_an_n_by_n_tensor():
    """On the fused path the sink is the first key of the key-bias blocks: forward
    and backward hold less than one ``(b, h, n, n)`` float32 tensor at n = 1024, and
    the peak grows like n (an ``(n, n + 1)`` mask, with the kernel's math route per
    block, grew like n^2: 4.2 MiB at n = 1024 for one head of 32, more than the
    score tensor); the output and the gradients are the reference's."""
    torch.manual_seed(0)
    b, h, d = 1, 2, 16
    pe = pl.LearnedSink(h)
    with torch.no_grad():
        pe.sinks.normal_()
    peaks = {}
    for n in (256, 1024):
        q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))

        def step(path):
            for t in (q, k, v, pe.sinks):
                t.grad = None
            pl.attention(q, k, v, pe, causal=True, path=path).square().sum().backward()
            return [t.grad.clone() for t in (q, k, v, pe.sinks)]

        fast, peaks[n] = pl.tensor_memory(lambda: step("fused"))
        for got, want in zip(fast, step("reference")):
            assert_close(got, want, atol=1e-5, rtol=1e-4)
    one_score_tensor = b * h * 1024 * 1024 * 4
    assert peaks[1024] < one_score_tensor / 2, (peaks, one_score_tensor)
    assert peaks[1024] / peaks[256] < 6, peaks  # n^2 would be 16


def test_chunked_rope_sees_only_its_chunk_and_is_shift_invariant_by_chunks():
    torch.manual_seed(0)
    pe = pl.ChunkedRotary(8, chunk_size=4).double()
    q, k, v = (torch.randn(1, 2, 12, 8, dtype=torch.float64) for _ in range(3))
    _, w = pl.attention(q, k, v, pe, causal=True, return_weights=True)
    i = torch.arange(12)
    same = (i[:, None] // 4) == (i[None, :] // 4)
    assert (w[0, :, ~same] == 0).all()
    # each chunk is an independent short sequence: RoPE makes it shift-invariant
    for c in range(3):
        rows = slice(4 * c, 4 * c + 4)
        alone = pl.attention(
            q[:, :, rows], k[:, :, rows], v[:, :, rows], pl.Rotary(8), causal=True
        )
        assert_close(pl.attention(q, k, v, pe, causal=True)[:, :, rows], alone)


def test_rope_layers_puts_nope_every_interval():
    assert pl.rope_layers(8) == [True, True, True, False] * 2
    assert pl.rope_layers(3, nope_interval=1) == [False] * 3


# ---------------------------------------------------------------- per-layer encodings


def hybrid(n_layers=4):
    torch.manual_seed(0)
    rope, nope = pl.Rotary(8), pl.TemperedNoPE(floor_scale=4)
    layers = [rope if use else nope for use in pl.rope_layers(n_layers)]
    return pl.TinyTransformer(16, 32, 4, n_layers, pe=layers).eval()


def test_each_block_gets_its_own_encoding_and_shared_objects_stay_shared():
    m = hybrid()
    kinds = [type(b.attn.pe).__name__ for b in m.blocks]
    assert kinds == ["Rotary", "Rotary", "Rotary", "TemperedNoPE"]
    assert m.blocks[0].attn.pe is m.blocks[1].attn.pe is m.pe


def test_a_list_of_one_encoding_equals_the_single_encoding():
    torch.manual_seed(0)
    pe = pl.Rotary(8)
    single = pl.TinyTransformer(16, 32, 4, 3, pe=pe).eval()
    listed = pl.TinyTransformer(16, 32, 4, 3, pe=[pe] * 3).eval()
    listed.load_state_dict(single.state_dict())
    tokens = torch.randint(0, 16, (2, 9))
    assert_close(listed(tokens), single(tokens))


def test_the_layers_really_differ():
    m = hybrid(2)  # [RoPE, RoPE]: change block 1 to NoPE, the output changes
    tokens = torch.randint(0, 16, (2, 9), generator=torch.Generator().manual_seed(1))
    out = m(tokens)
    m.blocks[1].attn.pe = pl.NoPE()
    assert (m(tokens) - out).abs().max() > 1e-4


@pytest.mark.parametrize("pos", [None, torch.arange(16) + 5])
def test_per_layer_model_syncs_at_most_twice(pos):
    tokens = torch.randint(0, 16, (2, 16), generator=torch.Generator().manual_seed(1))
    counts = []
    for n_layers in (4, 8):
        m = hybrid(n_layers)
        m.blocks[-1].attn.pe = pl.LearnedSink(4)  # a third kind, on the slow path
        with torch.no_grad():
            m(tokens, pos)
            _, syncs = pl.count_host_syncs(lambda: m(tokens, pos))
        counts.append(syncs)
    assert counts[0] == counts[1] <= 2, counts


def test_bad_layer_lists_are_refused_with_the_reason():
    rope = pl.Rotary(8)
    with pytest.raises(ValueError, match="one encoding per layer: n_layers=3, got 2"):
        pl.TinyTransformer(16, 32, 4, 3, pe=[rope, rope])
    with pytest.raises(TypeError, match=r"pe\[1\] must be a PositionalEncoding"):
        pl.TinyTransformer(16, 32, 4, 2, pe=[rope, 3])
    with pytest.raises(KeyError, match="not a registered encoding"):
        pl.TinyTransformer(16, 32, 4, 2, pe=[rope, "nope2"])
    with pytest.raises(ValueError, match="only pe\\[0\\] encodes the input"):
        pl.TinyTransformer(16, 32, 4, 2, pe=[rope, pl.Sinusoidal(32)])
    with pytest.raises(ValueError, match="share_pe=False"):
        pl.TinyTransformer(16, 32, 4, 2, pe=[rope, rope], share_pe=False)
    spatial = pl.make_encoding("rope_2d", d_model=32, n_heads=4, max_len=16)
    with pytest.raises(ValueError, match="coordinates"):
        pl.TinyTransformer(16, 32, 4, 2, pe=[spatial, spatial])


def test_a_later_layers_requirements_are_checked_once_per_forward():
    m = pl.TinyTransformer(16, 32, 4, 2, pe=[pl.Rotary(8), pl.StickBreaking()])
    with pytest.raises(ValueError, match="StickBreaking is defined for causal"):
        m(torch.randint(0, 16, (1, 5)), causal=False)
    m = pl.TinyTransformer(16, 32, 4, 2, pe=pl.Rotary(8))
    m.blocks[1].attn.pe = pl.StickBreaking()  # swapped in after construction
    with pytest.raises(ValueError, match="StickBreaking is defined for causal"):
        m(torch.randint(0, 16, (1, 5)), causal=False)


def test_bad_arguments_are_refused_with_the_reason():
    with pytest.raises(TypeError, match="pos must hold integer positions"):
        pl.llama4_attn_scale(torch.arange(3.0))
    with pytest.raises(ValueError, match="floor_scale"):
        pl.llama4_attn_scale(torch.arange(3), floor_scale=0)
    with pytest.raises(ValueError, match="attn_scale must be a finite number >= 0"):
        pl.llama4_attn_scale(torch.arange(3), attn_scale=-0.1)
    with pytest.raises(ValueError, match=r"sinks must have shape \(h,\) = \(3,\)"):
        pl.sink_softmax(torch.randn(1, 3, 2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match=r"scores must have shape \(b, h, i, j\)"):
        pl.sink_softmax(torch.randn(3, 2, 2), torch.zeros(3))
    with pytest.raises(TypeError, match="sinks must be a floating-point tensor"):
        pl.sink_softmax(torch.randn(1, 3, 2, 2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        pl.ChunkedRotary(8, chunk_size=0)
    with pytest.raises(ValueError, match="nope_interval"):
        pl.rope_layers(4, nope_interval=0)


# ---------------------------------------------------------------- parity with HF


@pytest.mark.parametrize("case", ["llama4_default", "llama4_small", "llama4_cached"])
def test_attn_scale_matches_llama4(case):
    g = GOLDEN[case]
    pos = torch.tensor(g["positions"]) if "positions" in g else torch.arange(g["n"])
    pos = pos + g.get("past", 0)  # Llama 4 counts from the cache's length
    s = pl.llama4_attn_scale(pos, g["floor_scale"], g["attn_scale"])
    assert_close(s, torch.tensor(g["scales"], dtype=s.dtype), atol=1e-6, rtol=1e-6)


def test_tempered_nope_scales_queries_as_llama4():
    g = GOLDEN["llama4_small"]
    pe = pl.TemperedNoPE(g["floor_scale"], g["attn_scale"]).double()
    q = torch.ones(1, 1, g["n"], 4, dtype=torch.float64)
    q2, k2 = pe.transform_qk(
        q, q, torch.arange(g["n"])[None], torch.arange(g["n"])[None]
    )
    assert_close(q2[0, 0, :, 0], torch.tensor(g["scales"], dtype=torch.float64))
    assert k2 is q


def test_sink_softmax_matches_gpt_oss_eager_attention():
    g = GOLDEN["gpt_oss"]
    q, k = (torch.tensor(g[n], dtype=torch.float64) for n in "qk")
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * g["scale"]
    n = q.shape[2]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    w = pl.sink_softmax(scores, torch.tensor(g["sinks"], dtype=torch.float64), mask)
    assert_close(w, torch.tensor(g["weights"], dtype=torch.float64))
    # the same through the attention function with the registered encoding
    pe = pl.LearnedSink(q.shape[1]).double()
    with torch.no_grad():
        pe.sinks.copy_(torch.tensor(g["sinks"]))
    v = torch.randn_like(q)
    _, w2 = pl.attention(q, k, v, pe, causal=True, return_weights=True)
    assert_close(w2, w)


def test_chunk_mask_matches_llama4_chunked_causal_mask():
    g = GOLDEN["chunked"]
    p = torch.arange(g["n"])[None]
    causal = torch.ones(g["n"], g["n"], dtype=torch.bool).tril()
    ours = pl.chunk_mask(p, p, g["chunk"])[0, 0] & causal
    assert (ours == torch.tensor(g["mask"])).all()


def test_layer_patterns_match_the_configs():
    g = GOLDEN["layers"]
    n = len(g["llama4_no_rope_layers"])
    ours = [int(x) for x in pl.rope_layers(n)]
    assert ours == g["llama4_no_rope_layers"] == g["smollm3_no_rope_layers"]
    # Llama 4: chunked attention exactly in the RoPE layers
    assert [t == "chunked_attention" for t in g["llama4_layer_types"]] == [
        bool(x) for x in ours
    ]
    # Cohere 2 and EXAONE 4: RoPE exactly in the sliding-window layers, 3 : 1
    assert g["cohere2_rope"] == g["exaone4_rope"] == pl.rope_layers(n)
    assert g["llama4_floor_scale"] == 8192 and g["llama4_attn_scale"] == 0.1


@pytest.mark.parametrize("path", ["reference", "fused"])
@pytest.mark.parametrize("heads", [2, 8])
def test_a_sink_refuses_queries_with_another_head_count(path, heads):
    """One sink logit per head: q with another head count is refused by name on
    both paths (the fused one's extra key once failed inside a reshape)."""
    pe = pl.LearnedSink(4)
    q, k, v = (torch.randn(1, heads, 5, 8) for _ in range(3))
    with pytest.raises(ValueError, match="heads|sinks"):
        pl.attention(q, k, v, pe, causal=True, path=path)

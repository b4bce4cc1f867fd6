"""The KV-cache contract: decoding token by token through ``MultiHeadAttention`` with a
``KVCache`` gives what one causal forward pass over the whole sequence gives, for every
registered sequence encoding that can serve a cached call; the others refuse it with
the reason, never answer silently wrong."""

import re

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

D_MODEL, N_HEADS = 16, 2


def _sequence_encodings():
    names = []
    for name in sorted(pl.REGISTRY):
        pe = pl.make_encoding(name, D_MODEL, N_HEADS, max_len=32)
        if pe.coord_axes is None and not pe.side_inputs:
            names.append(name)
    return names


def _decode(attn, x, pos, steps):
    """Feed ``x`` (b, n, D) in chunks of ``steps`` tokens through one cache."""
    cache, outs, start = pl.KVCache(), [], 0
    for size in steps:
        chunk = slice(start, start + size)
        outs.append(attn(x[:, chunk], pos[chunk], causal=True, cache=cache))
        start += size
    assert len(cache) == x.shape[1]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("name", _sequence_encodings())
def test_cached_decoding_equals_the_full_forward_or_is_refused(name):
    torch.manual_seed(0)
    pe = pl.make_encoding(name, D_MODEL, N_HEADS, max_len=32)
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).double()
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    pos = torch.arange(3, 12)  # not starting at 0: positions, not token counts
    full = attn(x, pos, causal=True)
    try:
        prompt_then_tokens = _decode(attn, x, pos, [4, 1, 1, 2, 1])
    except ValueError as error:  # a refusal says what the call lacks
        assert re.search(r"quer|key|cache|whole sequence", str(error)), str(error)
        return
    assert_close(prompt_then_tokens, full)
    assert_close(_decode(attn, x, pos, [1] * 9), full)


def test_default_positions_continue_after_the_cache():
    torch.manual_seed(0)
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, pl.make_encoding("rope", 16, 2))
    x = torch.randn(1, 5, D_MODEL)
    cache = pl.KVCache()
    out = torch.cat([attn(x[:, :3], causal=True, cache=cache),
                     attn(x[:, 3:], causal=True, cache=cache)], 1)  # fmt: skip
    assert_close(out, attn(x, causal=True))
    assert cache.pos.tolist() == [[0, 1, 2, 3, 4]]


def test_fox_caches_the_gates_of_every_token():
    """FoX needs the forget gate of every token between query and key: the cache
    keeps the keys' layer inputs, so a single new token sees the decay of all."""
    torch.manual_seed(1)
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, pl.make_encoding("fox", 16, 2))
    x = torch.randn(1, 6, D_MODEL)
    assert_close(_decode(attn, x, torch.arange(6), [1] * 6), attn(x, causal=True))


def test_a_bad_cached_call_is_refused_and_leaves_the_cache_unchanged():
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, pl.make_encoding("alibi", 16, 2))
    cache = pl.KVCache()
    attn(torch.randn(1, 3, D_MODEL), causal=True, cache=cache)
    with pytest.raises(ValueError, match="decodes causally"):
        attn(torch.randn(1, 1, D_MODEL), causal=False, cache=cache)
    with pytest.raises(TypeError, match="integer positions"):
        attn(torch.randn(1, 1, D_MODEL), torch.tensor([3.0]), causal=True, cache=cache)
    with pytest.raises(ValueError, match="one cache per layer"):
        attn(torch.randn(2, 1, D_MODEL), causal=True, cache=cache)
    assert len(cache) == 3


def _decode_model(model, tokens, steps):
    cache, outs, start = model.new_cache(), [], 0
    for size in steps:
        outs.append(model(tokens[:, start : start + size], cache=cache))
        start += size
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("name", _sequence_encodings())
def test_a_model_decodes_with_a_cache_as_its_full_forward_or_refuses(name):
    """TinyTransformer with one encoding in every block: a prompt and then tokens one
    or two at a time, through ``model.new_cache()``, give the full forward's logits
    (encode_input at the new positions, every layer's cache) or a clear refusal."""
    torch.manual_seed(0)
    pe = pl.make_encoding(name, D_MODEL, N_HEADS, max_len=32)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    full = model(tokens)
    try:
        cached = _decode_model(model, tokens, [4, 1, 2, 1, 1])
    except ValueError as error:
        assert re.search(r"cache|quer|key|whole sequence", str(error)), str(error)
        return
    assert_close(cached, full)


def test_a_hybrid_model_decodes_with_a_cache():
    """Part VII's hybrids: chunked RoPE in three layers, a tempered NoPE layer."""
    torch.manual_seed(0)
    layers = [pl.make_encoding("rope_chunked", D_MODEL, N_HEADS, max_len=16)] * 3
    layers += [pl.make_encoding("nope_tempered", D_MODEL, N_HEADS, max_len=16)]
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 4, layers).double().eval()
    tokens = torch.randint(0, 11, (1, 10))
    assert_close(_decode_model(model, tokens, [3] + [1] * 7), model(tokens))


def test_conv_pos_refuses_a_cache_with_the_reason():
    pe = pl.make_encoding("conv_pos", D_MODEL, N_HEADS)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 1, pe)
    with pytest.raises(ValueError, match="convolves each token with its neighbours"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=model.new_cache())
    with pytest.raises(ValueError, match="one KVCache per block"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=[pl.KVCache()] * 2)


# ---- one decode path: positions prepared once per step, a cache per layer ----


@pytest.mark.parametrize("name", ["rope", "alibi", "fox"])
def test_a_decoding_step_syncs_the_host_twice_whatever_the_depth(name):
    """A step prepares its positions once for every layer, as a forward pass does:
    the vocabulary check and the position checks, flat in depth."""
    syncs = {}
    for depth in (2, 4, 8):
        torch.manual_seed(0)
        pe = pl.make_encoding(name, D_MODEL, N_HEADS, max_len=32)
        model = pl.TinyTransformer(11, D_MODEL, N_HEADS, depth, pe).eval()
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.randint(0, 11, (1, 5)), cache=cache)
            _, syncs[depth] = pl.count_host_syncs(
                lambda: model(torch.randint(0, 11, (1, 1)), cache=cache)
            )
    assert max(syncs.values()) <= 2 and len(set(syncs.values())) == 1, syncs


def test_a_cache_belongs_to_one_layer_of_one_model():
    torch.manual_seed(0)
    pe = pl.make_encoding("rope", D_MODEL, N_HEADS)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe).eval()
    other = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe).eval()
    tokens = torch.randint(0, 11, (1, 4))
    c = model.new_cache()
    with pytest.raises(ValueError, match="same KVCache for two blocks"):
        model(tokens, cache=[c[0], c[0]])
    with pytest.raises(ValueError, match="belongs to another attention layer"):
        other(tokens, cache=c)  # another model's cache
    with pytest.raises(ValueError, match="belongs to another attention layer"):
        model(tokens, cache=[c[1], c[0]])  # the blocks' caches swapped
    assert [len(x) for x in c] == [0, 0]  # every refusal came before any layer ran
    a, b = (pl.MultiHeadAttention(D_MODEL, N_HEADS, pe) for _ in range(2))
    shared = pl.KVCache()
    a(torch.randn(1, 3, D_MODEL), causal=True, cache=shared)
    with pytest.raises(ValueError, match="belongs to another attention layer"):
        b(torch.randn(1, 3, D_MODEL), causal=True, cache=shared)
    assert len(shared) == 3


def test_a_refused_cached_call_leaves_the_cache_as_it_was():
    """A call refused after the checks (a bad path, a hook's head count) used to have
    extended the cache already, so the retry attended to the refused tokens too."""
    torch.manual_seed(0)
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, pl.make_encoding("alibi", 16, 2))
    x = torch.randn(1, 6, D_MODEL)
    full = attn(x, causal=True)
    cache = pl.KVCache()
    first = attn(x[:, :4], causal=True, cache=cache)
    with pytest.raises(ValueError, match="path must be one of"):
        attn(x[:, 4:], causal=True, cache=cache, path="bogus")
    assert len(cache) == 4
    retry = attn(x[:, 4:], causal=True, cache=cache)
    assert_close(torch.cat([first, retry], 1), full)
    wrong_heads = pl.MultiHeadAttention(D_MODEL, N_HEADS, pl.ALiBi(N_HEADS + 2))
    cache = pl.KVCache()
    with pytest.raises(ValueError, match="heads"):
        wrong_heads(x[:, :2], causal=True, cache=cache)
    assert len(cache) == 0


class _SlidingRotary(pl.Rotary):
    """RoPE in a window of ``keys`` keys: a query at p sees keys p - keys + 1 .. p."""

    reuse = frozenset({"score_bias"})

    def __init__(self, d_head, keys):
        super().__init__(d_head)
        self.keys = keys

    def score_bias(self, q, k, q_pos, k_pos):
        near = q_pos[:, None, :, None] - k_pos[:, None, None, :] < self.keys
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        return zero.masked_fill(~near, float("-inf"))


def test_a_sliding_window_holds_token_by_token_past_the_window():
    """A decoding step's keys are the cached ones and the new ones, at their
    positions, so a window written as a score_bias of the positions also masks the
    cached keys beyond it (nanochat#452: a step that forgot the window)."""
    torch.manual_seed(0)
    hybrid = [_SlidingRotary(8, keys=3), pl.Rotary(8)]
    model = pl.TinyTransformer(11, 16, 2, 2, pe=hybrid).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(9)]
    assert_close(torch.cat(steps, 1), full)
    wide = pl.TinyTransformer(11, 16, 2, 2, pe=[pl.Rotary(8), pl.Rotary(8)]).double()
    wide.load_state_dict(model.state_dict())
    assert (wide(tokens) - full)[:, 3:].abs().amax() > 1e-3  # the window matters


def test_a_model_cast_between_prefill_and_decode_is_refused_naming_both_dtypes():
    """A model cast to bfloat16 after its cache was filled in float32: the cached
    keys were promoted silently, then PyTorch raised "Expected query, key, and value
    to have the same dtype"; now the cache names its dtype and the layer's."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe="rope").eval()
    cache = model.new_cache()
    model(torch.randint(0, 11, (1, 5)), cache=cache)
    model.to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"float32.*bfloat16|bfloat16.*float32"):
        model(torch.randint(0, 11, (1, 1)), cache=cache)
    assert [len(c) for c in cache] == [5, 5]
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, "rope")
    single = pl.KVCache()
    attn(torch.randn(1, 3, D_MODEL), causal=True, cache=single)
    attn.double()
    with pytest.raises(TypeError, match="KVCache holds torch.float32"):
        attn(torch.randn(1, 1, D_MODEL, dtype=torch.float64), causal=True, cache=single)


def test_the_cache_of_a_model_built_again_is_refused():
    """Re-running the notebook cell that builds a model: the old model is gone, and
    its cache (bound to it by a weak reference) was taken over by the new model,
    which decoded against the old model's keys (0.33 off its own full forward)."""
    import gc

    torch.manual_seed(0)
    tokens = torch.randint(0, 11, (1, 6))
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe="rope").eval()
    cache = model.new_cache()
    model(tokens[:, :5], cache=cache)
    del model
    gc.collect()
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe="rope").eval()
    with pytest.raises(ValueError, match="layer that no longer exists"):
        model(tokens[:, 5:], cache=cache)
    fresh = model.new_cache()  # the new model's own cache decodes as its forward
    model(tokens[:, :5], cache=fresh)
    assert_close(model(tokens[:, 5:], cache=fresh)[:, -1], model(tokens)[:, -1])


def test_a_refusal_in_a_later_block_leaves_every_cache_as_it_was():
    """A hybrid whose second block refuses the step (its T5 table in another dtype):
    the first block had stored the step already, so the caches held different
    numbers of tokens and every retry was refused."""
    torch.manual_seed(0)
    t5 = pl.make_encoding("t5", D_MODEL, N_HEADS)
    model = pl.TinyTransformer(11, D_MODEL, N_HEADS, 2, pe=[pl.Rotary(8), t5]).eval()
    tokens = torch.randint(0, 11, (1, 6))
    cache = model.new_cache()
    model(tokens[:, :4], cache=cache)
    t5.double()
    with pytest.raises(TypeError, match="T5RelativeBias holds torch.float64"):
        model(tokens[:, 4:], cache=cache)
    assert [len(c) for c in cache] == [4, 4]
    t5.float()
    assert_close(model(tokens[:, 4:], cache=cache), model(tokens)[:, 4:])

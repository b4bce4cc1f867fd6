"""posenc_lib as the attention of Hugging Face models (posenc_lib/hf.py), offline: tiny
models built from the configuration classes with random weights, float32, CPU."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")

import posenc_lib as pl  # noqa: E402
import posenc_lib.hf as plhf  # noqa: E402

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
}
SLIDING = {"mistral": ("MistralConfig", "MistralForCausalLM", {})}
ROPES = {
    "default": None,
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "original_max_position_embeddings": 32,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
}


def tiny(family="llama", rope=None, seed=0, **extra):
    """2 layers, hidden 64, 4 heads over 2 key-value heads (GQA), vocab 100."""
    config_name, model_name, kw = {**FAMILIES, **SLIDING}[family]
    config = getattr(transformers, config_name)(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        **kw,
        **({} if rope is None else {"rope_parameters": dict(rope)}),
        **extra,
    )
    torch.manual_seed(seed)
    return getattr(transformers, model_name)(config).eval()


def batch(seed=1, b=3, n=24, pads=(0, 5, 11)):
    """Token ids (b, n) and a left-padded attention mask (row r: pads[r] pads)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 100, (b, n), generator=g)
    mask = torch.ones(b, n, dtype=torch.long)
    for r, p in enumerate(pads):
        mask[r, :p] = 0
        ids[r, :p] = 0
    return ids, mask


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("rope", sorted(ROPES))
def test_logits_equal_the_models_own_attention_with_left_padding(family, rope):
    model = tiny(family, ROPES[rope])
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        plhf.attach(model)
        got = model(ids, attention_mask=mask).logits
    assert model.config._attn_implementation == plhf.NAME
    real = mask.bool()  # pads' logits are not defined by either
    assert_close(got[real], want[real], atol=2e-5, rtol=1e-5)


def test_the_reproduced_rope_has_the_models_frequencies():
    for rope in ROPES.values():
        model = tiny("llama", rope)
        hf = model.model.rotary_emb
        pe = plhf.rope_from_config(model.config)
        assert_close(pe.inv_freq.float(), hf.inv_freq, rtol=1e-6, atol=0)
        assert pe.attention_factor == pytest.approx(hf.attention_scaling)


def test_partial_rotary_is_mapped():
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    pe = plhf.rope_from_config(tiny("llama", rope).config)
    assert pe.rotary_dim == 8 and pe.d_head == 16


def test_no_padding_and_a_batch_of_one():
    model = tiny("qwen3")
    ids = torch.randint(1, 100, (1, 20))
    with torch.no_grad():
        want = model(ids).logits
        plhf.attach(model)
        assert_close(model(ids).logits, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_cached_generation_equals_the_models_and_the_uncached_one(family):
    model = tiny(family, ROPES["yarn"])
    ids, mask = batch(n=16)
    kw = dict(
        attention_mask=mask,
        max_new_tokens=8,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    with torch.no_grad():
        want = model.generate(ids, **kw)
        plhf.attach(model)
        cached = model.generate(ids, **kw)
        uncached = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(cached.sequences, want.sequences)
    assert torch.equal(cached.sequences, uncached.sequences)
    for a, b, c in zip(cached.scores, want.scores, uncached.scores):
        assert_close(a, b, atol=2e-5, rtol=1e-5)
        assert_close(a, c, atol=2e-5, rtol=1e-5)


def test_each_cached_step_equals_a_full_forward_pass():
    """Step by step through the model's own cache, left padding included."""
    model = plhf.attach(tiny("llama"), "alibi")  # a swapped encoding, too
    ids, mask = batch(n=12)
    new = torch.randint(1, 100, (3, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full_ids = torch.cat([ids, new], 1)
        full_mask = torch.cat([mask, torch.ones_like(new)], 1)
        pos = (full_mask.cumsum(-1) - 1).clamp_min(0)
        full = model(full_ids, attention_mask=full_mask, position_ids=pos).logits
        out = model(ids, attention_mask=mask, position_ids=pos[:, :12], use_cache=True)
        cache = out.cache
        for t in range(4):
            step = model(
                new[:, t : t + 1],
                attention_mask=full_mask[:, : 13 + t],
                position_ids=pos[:, 12 + t : 13 + t],
                cache=cache,
                use_cache=True,
            )
            cache = step.cache
            assert_close(step.logits[:, 0], full[:, 12 + t], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "nope"])
def test_a_swapped_encoding_trains(name):
    model = tiny("llama")
    plhf.attach(model, name)
    pe = model.model.layers[0].self_attn.posenc
    assert isinstance(pe, type(pl.make_encoding(name, 64, 4)))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 100, (4, 32), generator=g)
    losses = []
    for _ in range(5):
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_alibi_changes_the_logits_and_a_learned_encoding_gets_gradients():
    model = tiny("llama")
    ids, mask = batch()
    with torch.no_grad():
        rope = model(ids, attention_mask=mask).logits
        plhf.attach(model, "alibi")
        alibi = model(ids, attention_mask=mask).logits
    assert (rope - alibi).abs().max() > 1e-3
    t5 = pl.make_encoding("t5", 64, 4)
    model = tiny("llama")
    plhf.attach(model, t5)
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    assert all(p.grad is not None for p in t5.parameters())


def test_refusals_name_the_reason():
    with pytest.raises(RuntimeError, match="transformers 5.24"):
        plhf.check_version("5.30.0")
    assert plhf.check_version("5.24.1") == "5.24.1"
    with pytest.raises(ValueError, match="embeddings"):
        plhf.attach(tiny("llama"), pl.make_encoding("sinusoidal", 64, 4, max_len=64))
    with pytest.raises(TypeError, match="rotary module"):
        plhf.attach(torch.nn.Linear(2, 2))
    dyn = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    with pytest.raises(ValueError, match="dynamic"):
        plhf.rope_from_config(tiny("llama", dyn).config)


def test_the_model_without_attach_is_refused_clearly():
    model = tiny("llama")
    plhf.register()
    model.set_attn_implementation(plhf.NAME)
    with pytest.raises(RuntimeError, match="attach"):
        model(torch.randint(1, 100, (1, 5)))


@pytest.mark.parametrize("family", ["mistral", "qwen3"])
def test_a_sliding_window_model_generates_as_with_its_own_attention(family):
    """The mask carries the window; generation runs past it (22 tokens, window 6)."""
    extra = {"sliding_window": 6}
    if family == "qwen3":
        extra.update(use_sliding_window=True, max_window_layers=1)
    model = tiny(family, **extra)
    ids, mask = batch(b=2, n=12, pads=(0, 3))
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False)
    kw.update(output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        plhf.attach(model)
        got = model.generate(ids, **kw)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.scores, want.scores):
        assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_the_installed_transformers_rotates_where_the_adapter_expects():
    """What attach relies on, read in the installed code: the model makes cos and
    sin in its rotary module; the attention rotates q and k, then updates the cache,
    then calls the registered attention function."""
    import inspect

    llama = transformers.models.llama.modeling_llama
    forward = inspect.getsource(llama.LlamaAttention.forward)
    order = [
        forward.index(s)
        for s in ("apply_rotary_pos_emb(", "cache.update(", "attention_interface(")
    ]
    assert order == sorted(order)
    assert "self.rotary_emb(" in inspect.getsource(llama.LlamaModel.forward)


def test_the_chapter_asks_for_the_hub_only_when_told_to(monkeypatch):
    """Outside Colab and without POSENC_ONLINE=1 nothing is contacted; asked to, a
    host that does not answer leaves the chapter on its tiny model."""
    monkeypatch.delenv("POSENC_ONLINE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert plhf.hub_wanted() is False
    monkeypatch.setenv("POSENC_ONLINE", "1")
    assert plhf.hub_wanted(host="127.0.0.1") is False  # nothing listens on 443 here

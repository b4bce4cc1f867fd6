"""Produce tests/golden/compressed_hf.json from Hugging Face transformers' model code.

Run with the reference environment (transformers 5.24.0, torch 2.13):

    /work/ref/bin/python tests/golden/make_compressed_golden.py

What is read, and from where (``transformers/models/...``), on tiny configurations
with random weights (no download):

* ``deepseek_v4/modeling_deepseek_v4.py``: a one-layer ``DeepseekV4Model`` whose layer
  is ``"heavily_compressed_attention"`` (blocks of m = 4, window 6, head_dim 16 with
  RoPE on the last 8 coordinates; the compressed rotary is YaRN, factor 16 over 64
  positions, from ``configuration_deepseek_v4.py``). Forward hooks record, in
  ``DeepseekV4Attention.forward``: the queries after ``q_b_norm`` and the shared
  key-value after ``kv_norm`` (both before RoPE), the mask the layer receives, the
  compressor's pooled and normed entries (``compressor.kv_norm``, before RoPE), its
  rotated entries and ``block_bias`` (its outputs), the positions its rotary is
  called at, the attention output before the de-rotation
  (``eager_attention_forward``, wrapped) and after it (the input of ``o_a_proj``).
  The compressor's weights, gates' ``position_bias`` and the sinks are set to random
  values first (``_init_weights`` zeroes the last two).
* ``deepseek_v4/configuration_deepseek_v4.py``: ``DeepseekV4Config()``'s defaults
  (window, block sizes, heads, rotary bases, the layer schedule); the rotaries'
  ``inv_freq`` and attention factors (``main``: plain, base ``rope_theta``;
  ``compress``: base ``compress_rope_theta`` 160000 and YaRN), and the attention
  factor YaRN gives when
  ``attention_factor`` is not forced to 1.
* ``qwen4_exp/modeling_qwen4_exp.py``, ``Qwen4ExpTextQSAIndexer.forward``: the pooled
  keys (``k_layernorm``'s output) and the rotated block keys (``apply_rotary_pos_emb``
  wrapped), for a causal mask and for one that hides the first 2 tokens; the rows of
  the cos table each block key was rotated with are matched to token indices (its
  placement).
"""

import importlib.metadata
import json
import pathlib

import torch
import transformers
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4
from transformers.models.qwen4_exp import modeling_qwen4_exp as qwen

OUT = pathlib.Path(__file__).with_name("compressed_hf.json")
M, WINDOW, N = 4, 6, 14


def as_list(t: torch.Tensor):
    return t.detach().double().tolist()


def deepseek_v4() -> dict:
    config = transformers.DeepseekV4Config(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        partial_rotary_factor=0.5,
        q_lora_rank=16,
        o_groups=2,
        o_lora_rank=8,
        moe_intermediate_size=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        index_n_heads=2,
        index_head_dim=8,
        index_topk=4,
        sliding_window=WINDOW,
        layer_types=["heavily_compressed_attention"],
        mlp_layer_types=["moe"],
        compress_rates={
            "compressed_sparse_attention": 4,
            "heavily_compressed_attention": M,
        },
        max_position_embeddings=1024,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
    )
    torch.manual_seed(0)
    model = transformers.DeepseekV4Model(config).eval()
    attn = model.layers[0].self_attn
    comp = attn.compressor
    with torch.no_grad():  # away from the zeros _init_weights sets
        comp.position_bias.normal_()
        comp.kv_norm.weight.uniform_(0.5, 1.5)
        attn.kv_norm.weight.uniform_(0.5, 1.5)
        attn.sinks.normal_()
        for lin in (comp.kv_proj, comp.gate_proj, attn.kv_proj, attn.q_b_proj):
            lin.weight.normal_(0, 0.3)

    seen = {}

    def put(name, value):  # the first value only (a hook returns None)
        seen.setdefault(name, value)

    hooks = [
        attn.q_b_norm.register_forward_hook(lambda m, a, o: put("q", o)),
        attn.kv_norm.register_forward_hook(lambda m, a, o: put("kv", o)),
        comp.kv_norm.register_forward_hook(lambda m, a, o: put("pooled", o)),
        comp.register_forward_hook(lambda m, a, o: put("comp_out", o)),
        comp.register_forward_pre_hook(
            lambda m, a, k: put("hidden", a[0] if a else k["hidden_states"]),
            with_kwargs=True,
        ),
        comp.rotary_emb.register_forward_pre_hook(
            lambda m, a, k: put("comp_pos", k["position_ids"]), with_kwargs=True
        ),
        attn.register_forward_pre_hook(
            lambda m, a, k: put("mask", k["attention_mask"]), with_kwargs=True
        ),
        attn.o_a_proj.register_forward_pre_hook(lambda m, a: put("out", a[0])),
    ]
    original = v4.eager_attention_forward

    def eager(module, query, key, value, attention_mask, scaling, **kwargs):
        result = original(module, query, key, value, attention_mask, scaling, **kwargs)
        put("rotated_out", result[0])  # (b, n, h, d), before de-rotation
        put("scaling", scaling)
        return result

    v4.eager_attention_forward = eager
    try:
        ids = torch.randint(0, 50, (2, N), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        v4.eager_attention_forward = original
        for h in hooks:
            h.remove()

    rotary = model.rotary_emb
    compress = config.rope_parameters["compress"]
    unforced = {k: v for k, v in compress.items() if k != "attention_factor"}
    config_unforced = transformers.DeepseekV4Config(**{
        **config.to_dict(), "rope_parameters": {"main": config.rope_parameters["main"],
                                                "compress": unforced},
    })  # fmt: skip
    _, unforced_factor = v4.ROPE_INIT_FUNCTIONS["yarn"](
        config_unforced, None, layer_type="compress"
    )
    compressed, block_bias = seen["comp_out"]
    b, n_heads, n, d = seen["q"].shape
    out = seen["out"].reshape(b, n, n_heads, d)  # (b, n, g, h*d/g) -> (b, n, h, d)
    return {
        "config": {
            "m": M,
            "window": WINDOW,
            "head_dim": d,
            "n_heads": n_heads,
            "rope_dim": config.qk_rope_head_dim,
            "rope_theta": config.rope_theta,
            "compress_rope_theta": config.compress_rope_theta,
            "rope_parameters": config.rope_parameters,
            "scaling": seen["scaling"],
            "rms_norm_eps": config.rms_norm_eps,
        },  # fmt: skip
        "main_inv_freq": as_list(rotary.main_inv_freq),
        "main_attention_factor": rotary.main_attention_scaling,
        "compress_inv_freq": as_list(rotary.compress_inv_freq),
        "compress_attention_factor": rotary.compress_attention_scaling,
        "yarn_attention_factor_unforced": unforced_factor,
        "q": as_list(seen["q"]),  # (b, h, n, d), before RoPE
        "kv": as_list(seen["kv"][:, :, 0] if seen["kv"].dim() == 4 else seen["kv"]),
        "hidden": as_list(seen["hidden"]),  # (b, n, D): the compressor's input
        "compressor": {
            "kv_proj": as_list(comp.kv_proj.weight),
            "gate_proj": as_list(comp.gate_proj.weight),
            "position_bias": as_list(comp.position_bias),
            "norm_weight": as_list(comp.kv_norm.weight),
            "pooled": as_list(seen["pooled"]),  # (b, w, d): pooled, normed
            "rotated": as_list(compressed[:, 0]),  # (b, w, d): rotated at its place
            "positions": as_list(seen["comp_pos"]),  # (b, w)
            "visible": as_list(torch.isfinite(block_bias[:, 0])),  # (b, n, w)
        },
        "mask": as_list(seen["mask"][:, 0] == 0),  # (b, n, n) window
        "sinks": as_list(attn.sinks),
        "rotated_out": as_list(seen["rotated_out"].transpose(1, 2)),  # (b, h, n, d)
        "out": as_list(out.transpose(1, 2)),  # (b, h, n, d), de-rotated
    }


def deepseek_v4_defaults() -> dict:
    """``DeepseekV4Config()``'s defaults that the library restates."""
    c = transformers.DeepseekV4Config()
    return {
        "window": c.sliding_window,
        "m_csa": c.compress_rates["compressed_sparse_attention"],
        "m_hca": c.compress_rates["heavily_compressed_attention"],
        "index_topk": c.index_topk,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "rope_dim": c.qk_rope_head_dim,
        "rope_theta": c.rope_theta,
        "compress_rope_theta": c.compress_rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "layer_types": c.layer_types,
    }


def qwen4_exp(hidden_first: int) -> dict:
    """The indexer's pooled and rotated block keys for the last query, with the first
    ``hidden_first`` tokens masked out for every query."""
    config = transformers.Qwen4ExpTextConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, indexer_n_heads=2, indexer_kv_heads=1,
        indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=M,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]},
        layer_types=["indexed_attention"],
    )  # fmt: skip
    torch.manual_seed(2)
    indexer = qwen.Qwen4ExpTextQSAIndexer(config, layer_idx=0).eval()
    rotary = qwen.Qwen4ExpTextRotaryEmbedding(config)
    x = torch.randn(1, N, 32)
    position_ids = torch.arange(N)[None]
    cos, sin = rotary(x, position_ids)  # (1, n, rotary dim)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    causal[:, :hidden_first] = False
    causal[:hidden_first, :hidden_first] = torch.eye(hidden_first, dtype=torch.bool)
    mask = causal[None, None]  # (1, 1, n, n) bool
    calls, pooled = [], []
    original = qwen.apply_rotary_pos_emb

    def record(q, k=None, cos=None, sin=None, unsqueeze_dim=1):
        out = original(q, k, cos, sin, unsqueeze_dim)
        if k is None and q.dim() == 3:  # pooled keys (w, 1, d): a block key call
            calls.append((q[:, 0], cos, out[:, 0]))
        return out

    hook = indexer.k_layernorm.register_forward_hook(
        lambda m, a, o: pooled.append((a[0], o))
    )
    qwen.apply_rotary_pos_emb = record
    try:
        with torch.no_grad():
            indexer(x, (cos, sin), mask, None)
    finally:
        qwen.apply_rotary_pos_emb = original
        hook.remove()
    raw, normed = pooled[-1]  # the last query's blocks
    _, block_cos, rotated = calls[-1]
    # which token's row of the cos table each block key used: its placement
    rows = (block_cos[:, None, :] - cos[0][None]).abs().sum(-1)  # (w, n)
    starts = rows.argmin(-1)
    assert (rows.min(-1).values < 1e-6).all()
    keys = indexer.index_qk_proj(x)[..., -16:]  # the token keys (one kv head)
    return {
        "hidden_first": hidden_first,
        "x": as_list(x[0]),
        "raw_keys": as_list(keys[0]),  # (n, d), before pooling
        "pooled": as_list(raw),  # (w, d): the mean of each block's keys
        "normed": as_list(normed),
        "rotated": as_list(rotated),
        "starts": starts.tolist(),
        "cos": as_list(cos[0]),
        "sin": as_list(sin[0]),
        "k_norm_weight": as_list(indexer.k_layernorm.weight),
    }


def main():
    record = {
        "transformers": transformers.__version__,
        "torch": importlib.metadata.version("torch"),
        "deepseek_v4": deepseek_v4(),
        "deepseek_v4_defaults": deepseek_v4_defaults(),
        "qwen4_exp": [qwen4_exp(0), qwen4_exp(2)],
    }
    OUT.write_text(json.dumps(record) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

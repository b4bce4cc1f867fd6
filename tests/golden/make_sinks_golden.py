"""Produce tests/golden/sinks_hf.json from Hugging Face transformers' own model code.

Run with the reference environment (transformers 5.x, torch):

    /work/ref/bin/python tests/golden/make_sinks_golden.py

What is read, and from where (``transformers/models/...``):

* ``llama4/modeling_llama4.py``, ``Llama4TextAttention.forward``: the NoPE layers'
  query temperature. A NoPE attention layer (``no_rope_layers=[0]``) with an identity
  ``q_proj`` gets all-ones hidden states; the attention function that receives the
  queries is replaced by one that records them, so the recorded query at position p
  is the factor s(p) itself. Done at the real defaults (floor_scale 8192, attn_scale
  0.1) over 3 x 8192 + 5 positions, at a small floor_scale, and with a KV cache
  holding earlier tokens (the positions then start at the cache length).
* ``llama4/configuration_llama4.py`` and ``smollm3/configuration_smollm3.py``: the
  default ``no_rope_layers`` (1 = RoPE) and ``layer_types``; ``cohere2``, ``exaone4``
  and ``gpt_oss`` configs: the default ``layer_types``. Which layers rotate is read in
  the modeling files (cohere2: ``if self.sliding_window is not None``, exaone4: ``if
  self.sliding_window is None or self.is_sliding``) and recorded here by hand next to
  the config defaults.
* ``masking_utils.py``, ``chunked_causal_mask_function``: Llama 4's chunked causal
  mask, evaluated on a grid of (query, key) indices.
* ``gpt_oss/modeling_gpt_oss.py``, ``eager_attention_forward``: attention weights with
  the learned per-head sinks, for random q, k, sinks and a causal additive mask.
"""

import importlib.metadata
import json
import pathlib
import types

import torch
import transformers
from transformers import masking_utils
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama4 import modeling_llama4

OUT = pathlib.Path(__file__).with_name("sinks_hf.json")


class Recorded(Exception):
    pass


def llama4_scales(n: int, floor_scale: int, attn_scale: float, past: int = 0):
    """The query factor of a Llama 4 NoPE layer at positions past .. past + n - 1."""
    config = transformers.Llama4TextConfig(
        hidden_size=4,
        head_dim=4,
        num_attention_heads=1,
        num_key_value_heads=1,
        num_hidden_layers=1,
        no_rope_layers=[0],
        floor_scale=floor_scale,
        attn_scale=attn_scale,
        attn_temperature_tuning=True,
    )
    attn = modeling_llama4.Llama4TextAttention(config, layer_idx=0)
    with torch.no_grad():
        attn.q_proj.weight.copy_(torch.eye(4))
    seen = {}

    def record(module, query, *args, **kwargs):
        seen["q"] = query
        raise Recorded

    cache = None
    if past:
        # a stand-in cache that says it holds ``past`` tokens (only its length is read
        # before the queries reach the attention function)
        cache = types.SimpleNamespace(
            get_seq_length=lambda layer_idx=0: past,
            update=lambda k, v, *args, **kwargs: (k, v),
        )
    original = modeling_llama4.eager_attention_forward
    modeling_llama4.eager_attention_forward = record
    try:
        attn(torch.ones(1, n, 4, dtype=torch.float64).float(), None, None, cache=cache)
    except Recorded:
        pass
    finally:
        modeling_llama4.eager_attention_forward = original
    assert attn.use_rope == 0
    return seen["q"][0, 0, :, 0].double()  # (n,)


def gpt_oss_weights(seed: int, b: int, h: int, n: int, d: int):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in "qkv")
    sinks = 2 * torch.randn(h, generator=g, dtype=torch.float64)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    additive = torch.zeros(n, n, dtype=torch.float64).masked_fill(
        ~causal, torch.finfo(torch.float64).min
    )[None, None]
    module = types.SimpleNamespace(sinks=sinks, num_key_value_groups=1, training=False)
    _, weights = modeling_gpt_oss.eager_attention_forward(
        module, q, k, v, additive, scaling=d**-0.5
    )
    return {
        "q": q.tolist(),
        "k": k.tolist(),
        "sinks": sinks.tolist(),
        "scale": d**-0.5,
        "weights": weights.tolist(),  # (b, h, n, n), the sink dropped
    }


def chunked_mask(n: int, chunk: int) -> list:
    fn = masking_utils.chunked_causal_mask_function(chunk, torch.zeros(1, dtype=int))
    q_idx = torch.arange(n)[:, None]
    kv_idx = torch.arange(n)[None, :]
    return fn(torch.tensor(0), torch.tensor(0), q_idx, kv_idx).tolist()


def layer_patterns(n: int) -> dict:
    llama4 = transformers.Llama4TextConfig(num_hidden_layers=n)
    smol = transformers.SmolLM3Config(num_hidden_layers=n)
    smol_sw = transformers.SmolLM3Config(
        num_hidden_layers=n, use_sliding_window=True, sliding_window=4096
    )
    cohere2 = transformers.Cohere2Config(num_hidden_layers=n)
    exaone4 = transformers.Exaone4Config(num_hidden_layers=n)
    gpt_oss = transformers.GptOssConfig(num_hidden_layers=n)
    return {
        "llama4_no_rope_layers": list(llama4.no_rope_layers),
        "llama4_layer_types": list(llama4.layer_types),
        "llama4_attention_chunk_size": llama4.attention_chunk_size,
        "llama4_floor_scale": llama4.floor_scale,
        "llama4_attn_scale": llama4.attn_scale,
        "smollm3_no_rope_layers": list(smol.no_rope_layers),
        "smollm3_layer_types_with_sliding_window": list(smol_sw.layer_types),
        "cohere2_layer_types": list(cohere2.layer_types),
        "cohere2_rope": [t == "sliding_attention" for t in cohere2.layer_types],
        "exaone4_layer_types": list(exaone4.layer_types),
        "exaone4_rope": [t == "sliding_attention" for t in exaone4.layer_types],
        "gpt_oss_layer_types": list(gpt_oss.layer_types),
        "gpt_oss_sliding_window": gpt_oss.sliding_window,
    }


KEPT = [0, 1, 8189, 8190, 8191, 8192, 16382, 16383, 16384, 24574, 24575, 24580]


def main():
    n_long = 3 * 8192 + 5
    golden = {
        "versions": {
            "transformers": transformers.__version__,
            "torch": importlib.metadata.version("torch"),
        },
        "llama4_default": {
            "n": n_long,
            "floor_scale": 8192,
            "attn_scale": 0.1,
            # the factor at positions around each step (the rest are equal to these)
            "positions": KEPT,
            "scales": llama4_scales(n_long, 8192, 0.1)[KEPT].tolist(),
        },
        "llama4_small": {
            "n": 40,
            "floor_scale": 4,
            "attn_scale": 0.25,
            "scales": llama4_scales(40, 4, 0.25).tolist(),
        },
        "llama4_cached": {
            "n": 6,
            "past": 13,
            "floor_scale": 4,
            "attn_scale": 0.25,
            "scales": llama4_scales(6, 4, 0.25, past=13).tolist(),
        },
        "gpt_oss": gpt_oss_weights(0, 2, 3, 7, 4),
        "chunked": {"n": 11, "chunk": 4, "mask": chunked_mask(11, 4)},
        "layers": layer_patterns(12),
    }
    OUT.write_text(json.dumps(golden))
    print("wrote", OUT, f"({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

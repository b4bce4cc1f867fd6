"""Produce tests/golden/lerope_hf.json from Mistral Large 4's own code in Hugging Face
transformers (the course depends on it nowhere else): LeRoPE, learned frequencies over
YaRN, and the learned query scale.

Made with transformers 5.24.0 and torch 2.13.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_lerope_golden.py

From ``transformers/models/mistral_large4/modeling_mistral_large4.py``:

* ``MistralLarge4TextRotaryEmbedding`` built from a small ``MistralLarge4TextConfig``
  (``qk_rope_head_dim`` 16, YaRN of factor 4 over 64 positions, and the class's
  default YaRN: factor 2048 over 512), with NON-ZERO ``alpha`` (the class initialises
  it to 0, where LeRoPE is plain YaRN): its ``inv_freq``, ``attention_scaling`` and
  the cos and sin it returns at given positions;
* ``apply_rotary_pos_emb_interleave`` of random q, k with those cos and sin (its
  output lists the rotated even coordinates, then the odd ones);
* ``MistralLarge4TextSoftmaxScaling`` with non-zero ``scale`` and ``bias`` on the
  rotated queries (``head_dim_first=True``, as the attention calls it).

Inputs are recorded with the outputs, so the test needs no random generator.
"""

import json
import pathlib
from importlib.metadata import version

import torch
import transformers.models.mistral_large4.modeling_mistral_large4 as ml4
from transformers.models.mistral_large4.configuration_mistral_large4 import (
    MistralLarge4TextConfig,
)

OUT = pathlib.Path(__file__).with_name("lerope_hf.json")
POSITIONS = [0, 1, 2, 7, 63, 64, 300, 5000]


def f32(x: torch.Tensor) -> list:
    """A float32 tensor as nested lists of 9 significant digits (exact in float32)."""

    def short(a):
        return [short(e) for e in a] if isinstance(a, list) else float(f"{a:.9g}")

    return short(x.detach().float().tolist())


def case(rope_parameters: dict | None, seed: int) -> dict:
    kw = {} if rope_parameters is None else {"rope_parameters": rope_parameters}
    cfg = MistralLarge4TextConfig(qk_rope_head_dim=16, num_attention_heads=3, **kw)
    emb = ml4.MistralLarge4TextRotaryEmbedding(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        emb.alpha.copy_(0.3 * torch.randn(emb.alpha.shape, generator=g))
    pos = torch.tensor([POSITIONS])
    q = torch.randn(1, 3, len(POSITIONS), 16, generator=g)  # (b, h, n, d_rope)
    k = torch.randn(1, 3, len(POSITIONS), 16, generator=g)
    cos, sin = emb(q, pos)  # (b, n, d_rope), in q's dtype (float32)
    q_out, k_out = ml4.apply_rotary_pos_emb_interleave(q, k, cos, sin)
    soft = ml4.MistralLarge4TextSoftmaxScaling(3)
    with torch.no_grad():
        soft.scale.copy_(torch.tensor([0.05, 0.1, -0.02]))
        soft.bias.copy_(torch.tensor([1.0, 0.9, 1.1]))
    q_scaled = soft(q_out, pos, head_dim_first=True)
    return {
        "rope_parameters": {
            k: v for k, v in cfg.rope_parameters.items() if not callable(v)
        },
        "head_dim": cfg.head_dim,
        "inv_freq": f32(emb.inv_freq),
        "attention_scaling": float(emb.attention_scaling),
        "alpha": f32(emb.alpha),
        "positions": POSITIONS,
        "cos": f32(cos[0]),
        "sin": f32(sin[0]),
        "q": f32(q[0]),
        "k": f32(k[0]),
        "q_out": f32(q_out[0]),
        "k_out": f32(k_out[0]),
        "query_scale": [0.05, 0.1, -0.02],
        "query_bias": [1.0, 0.9, 1.1],
        "q_scaled": f32(q_scaled[0]),
    }


def main():
    small_yarn = {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "attention_factor": 1.0,
    }
    doc = {
        "source": "transformers/models/mistral_large4/modeling_mistral_large4.py: "
        "MistralLarge4TextRotaryEmbedding, apply_rotary_pos_emb_interleave, "
        "MistralLarge4TextSoftmaxScaling",
        "transformers": version("transformers"),
        "torch": torch.__version__,
        "cases": {
            "yarn_small": case(small_yarn, 0),
            "class_default": case(None, 1),
        },
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

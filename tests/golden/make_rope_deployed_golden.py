"""Produce tests/golden/rope_deployed_hf.json from the models' own code in Hugging Face
transformers (the course depends on it nowhere else).

Made with transformers 5.24.0 and torch 2.15.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_rope_deployed_golden.py

What it records (inputs included, so the tests need no random generator):

* ``models``: for every row of ``posenc_lib.models_data.DEPLOYED_MODELS`` and every
  kind of layer, the ``inv_freq`` buffer and ``attention_scaling`` of the model's own
  rotary-embedding class (``GPTNeoXRotaryEmbedding``, ``Gemma4TextRotaryEmbedding``,
  ...), built from the model's configuration class. Rows whose numbers come from the
  code are built from the DEFAULT configuration (no argument), so the test checks the
  table's numbers too; rows whose numbers come from the checkpoint get them as
  arguments. Also the configuration's ``layer_types`` (first 12).
* ``proportional``: ``ROPE_INIT_FUNCTIONS["proportional"]`` for several head sizes,
  fractions and factors.
* ``apply``: q, k, positions and the outputs of GPT-NeoX's and Phi-3's
  ``apply_rotary_pos_emb`` (partial rotary), Gemma 4's ``apply_rotary_pos_emb`` with the
  proportional frequencies, gpt-oss's ``apply_rotary_pos_emb`` (YaRN x32, cos and sin
  times the attention factor) and DeepSeek-V3's ``apply_rotary_pos_emb_interleave``.
* ``deepseek_mla``: the MLA sizes of the default ``DeepseekV3Config``.
* ``deepseek_scaling``: ``yarn_apply_mscale`` of DeepSeek-V3's numbers, i.e. the
  softmax scale 1/sqrt(192) times mscale^2.
"""

import json
import pathlib
from importlib.metadata import version

import torch
import transformers.models.deepseek_v3.modeling_deepseek_v3 as ds
import transformers.models.gemma3.modeling_gemma3 as g3
import transformers.models.gemma4.modeling_gemma4 as g4
import transformers.models.glm4_moe.modeling_glm4_moe as glm
import transformers.models.gpt_neox.modeling_gpt_neox as neox
import transformers.models.gpt_oss.modeling_gpt_oss as oss
import transformers.models.llama.modeling_llama as llama
import transformers.models.olmo3.modeling_olmo3 as olmo3
import transformers.models.phi3.modeling_phi3 as phi3
import transformers.models.qwen3.modeling_qwen3 as qwen3
import transformers.models.qwen3_next.modeling_qwen3_next as qnext
from transformers import (
    DeepseekV3Config,
    Gemma3TextConfig,
    Gemma4TextConfig,
    Glm4MoeConfig,
    GPTNeoXConfig,
    GptOssConfig,
    LlamaConfig,
    Olmo3Config,
    Phi3Config,
    Qwen3Config,
    Qwen3NextConfig,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

DS_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
LLAMA31 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "original_max_position_embeddings": 8192,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}

# name -> (config class, rotary class, config arguments, layer types to read)
MODELS = {
    "GPT-NeoX-20B": (GPTNeoXConfig, neox.GPTNeoXRotaryEmbedding, {}, [None]),
    "Phi-4-mini": (
        Phi3Config,
        phi3.Phi3RotaryEmbedding,
        {"hidden_size": 3072, "num_attention_heads": 24, "partial_rotary_factor": 0.75},
        [None],
    ),
    # GLM-4.5's d_head 128 is set by its checkpoint; the fraction is the code default
    "GLM-4.5": (Glm4MoeConfig, glm.Glm4MoeRotaryEmbedding, {"head_dim": 128}, [None]),
    "Qwen3-Next": (Qwen3NextConfig, qnext.Qwen3NextRotaryEmbedding, {}, [None]),
    "Gemma 3": (
        Gemma3TextConfig,
        g3.Gemma3RotaryEmbedding,
        {},
        ["sliding_attention", "full_attention"],
    ),
    "Gemma 4": (
        Gemma4TextConfig,
        g4.Gemma4TextRotaryEmbedding,
        {},
        ["sliding_attention", "full_attention"],
    ),
    "OLMo 3": (
        Olmo3Config,
        olmo3.Olmo3RotaryEmbedding,
        {},
        ["sliding_attention", "full_attention"],
    ),
    "gpt-oss": (GptOssConfig, oss.GptOssRotaryEmbedding, {}, [None]),
    "Qwen3": (
        Qwen3Config,
        qwen3.Qwen3RotaryEmbedding,
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
        [None],
    ),
    "DeepSeek-V3": (
        DeepseekV3Config,
        ds.DeepseekV3RotaryEmbedding,
        {"rope_parameters": dict(DS_YARN)},
        [None],
    ),
    "Llama 3.1": (
        LlamaConfig,
        llama.LlamaRotaryEmbedding,
        {"rope_parameters": dict(LLAMA31)},
        [None],
    ),
}


def t(x):
    return x.tolist()


def model_rows():
    out = {}
    for name, (cfg_cls, rot_cls, kwargs, layer_types) in MODELS.items():
        cfg = cfg_cls(**kwargs)
        emb = rot_cls(config=cfg)
        rows = []
        for lt in layer_types:
            pre = "" if lt is None else f"{lt}_"
            inv = getattr(emb, f"{pre}inv_freq")
            att = getattr(emb, f"{pre}attention_scaling")
            rows.append({"layer_type": lt, "inv_freq": t(inv), "attention": float(att)})
        out[name] = {
            "kwargs": kwargs,
            "specs": rows,
            "layer_types": list(getattr(cfg, "layer_types", None) or [])[:12],
        }
    return out


class Cfg:
    """The least config ``ROPE_INIT_FUNCTIONS["proportional"]`` reads."""

    def __init__(self, head_dim, params):
        self.head_dim, self.rope_parameters = head_dim, params

    def standardize_rope_params(self):
        pass


def proportional_cases():
    cases = []
    for d, p, theta, factor in [
        (16, 0.25, 10000.0, 1.0),
        (16, 0.5, 10000.0, 2.0),
        (64, 0.3, 1e6, 1.0),
        (512, 0.25, 1e6, 1.0),
        (32, 1.0, 500.0, 1.0),
        (32, 0.0, 10000.0, 1.0),
    ]:
        params = {
            "rope_type": "proportional",
            "rope_theta": theta,
            "partial_rotary_factor": p,
            "factor": factor,
        }
        inv, att = ROPE_INIT_FUNCTIONS["proportional"](Cfg(d, params))
        cases.append(
            {"d_head": d, "p": p, "base": theta, "factor": factor, "inv_freq": t(inv)}
        )
    return cases


def cos_sin(inv, att, pos):
    # every model's RotaryEmbedding.forward: freqs = pos x inv, emb = cat(freqs, freqs)
    freqs = pos.float()[..., None] * inv.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * att, emb.sin() * att


def apply_cases():
    g = torch.Generator().manual_seed(0)
    b, h, n = 2, 2, 5
    pos = torch.tensor([[0, 1, 2, 3, 4], [3, 7, 11, 20, 41]])
    cases = {}

    def io(q, k, qo, ko):
        return {"q": t(q), "k": t(k), "pos": t(pos), "q_out": t(qo), "k_out": t(ko)}

    def qk(d):
        return (
            torch.randn(b, h, n, d, generator=g),
            torch.randn(b, h, n, d, generator=g),
        )

    # GPT-NeoX: rotary_pct 0.25 of d_head 32 -> 8 rotated
    cfg = GPTNeoXConfig(hidden_size=64, num_attention_heads=2, rotary_pct=0.25)
    emb = neox.GPTNeoXRotaryEmbedding(config=cfg)
    q, k = qk(32)
    cos, sin = emb(q, pos)
    qo, ko = neox.apply_rotary_pos_emb(q, k, cos, sin)
    cases["neox"] = {"rotary_dim": 8, "base": 10000.0, **io(q, k, qo, ko)}
    # Phi-3 (Phi-4-mini's code): partial_rotary_factor 0.75 of 16 -> 12 rotated
    cfg = Phi3Config(hidden_size=32, num_attention_heads=2, partial_rotary_factor=0.75)
    emb = phi3.Phi3RotaryEmbedding(config=cfg)
    q, k = qk(16)
    cos, sin = emb(q, pos)
    qo, ko = phi3.apply_rotary_pos_emb(q, k, cos, sin)
    cases["phi3"] = {"rotary_dim": 12, "base": 10000.0, **io(q, k, qo, ko)}
    # Gemma 4's full layers: proportional, p = 0.25 of 32, base 1e6
    params = {
        "rope_type": "proportional",
        "rope_theta": 1e6,
        "partial_rotary_factor": 0.25,
    }
    inv, att = ROPE_INIT_FUNCTIONS["proportional"](Cfg(32, params))
    q, k = qk(32)
    cos, sin = cos_sin(inv, att, pos)
    qo = g4.apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1)
    ko = g4.apply_rotary_pos_emb(k, cos, sin, unsqueeze_dim=1)
    cases["gemma4_full"] = {"p": 0.25, "base": 1e6, **io(q, k, qo, ko)}
    # gpt-oss: YaRN x32 (truncate False), cos and sin times the attention factor
    cfg = GptOssConfig(head_dim=16, hidden_size=32, num_attention_heads=2)
    emb = oss.GptOssRotaryEmbedding(config=cfg)
    q, k = qk(16)
    cos, sin = emb(q, pos)
    qo, ko = oss.apply_rotary_pos_emb(q, k, cos, sin)
    cases["gpt_oss"] = {"attention": float(emb.attention_scaling), **io(q, k, qo, ko)}
    # DeepSeek-V3: interleaved input, output de-interleaved (half order)
    cfg = DeepseekV3Config(qk_rope_head_dim=16, rope_parameters=dict(DS_YARN))
    emb = ds.DeepseekV3RotaryEmbedding(config=cfg)
    q, k = qk(16)
    cos, sin = emb(q, pos)
    qo, ko = ds.apply_rotary_pos_emb_interleave(q, k, cos, sin)
    cases["deepseek"] = {
        "inv_freq": t(emb.inv_freq),
        "attention": float(emb.attention_scaling),
        **io(q, k, qo, ko),
    }
    return cases


def main():
    cfg = DeepseekV3Config(rope_parameters=dict(DS_YARN))
    out = {
        "versions": {
            "transformers": version("transformers"),
            "torch": version("torch"),
        },
        "models": model_rows(),
        "proportional": proportional_cases(),
        "apply": apply_cases(),
        "deepseek_scaling": {
            "qk_head_dim": cfg.qk_head_dim,
            "scaling": ds.yarn_apply_mscale(cfg.rope_parameters, cfg.qk_head_dim**-0.5),
        },
        "deepseek_mla": {
            key: getattr(DeepseekV3Config(), key)
            for key in (
                "num_attention_heads",
                "kv_lora_rank",
                "qk_nope_head_dim",
                "qk_rope_head_dim",
                "v_head_dim",
            )
        },
    }
    path = pathlib.Path(__file__).with_name("rope_deployed_hf.json")
    path.write_text(json.dumps(out) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()

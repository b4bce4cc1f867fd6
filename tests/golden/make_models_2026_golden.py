"""Produce tests/golden/models_2026_hf.json: the 2026 rows of the model table
(``posenc_lib.models_data.DEPLOYED_MODELS``, block "2026"), recorded from the models'
own classes in Hugging Face transformers (the course depends on it nowhere else), and
the two shipped forms of research ideas that transformers does not hold (FoPE in
Intern-S1-Pro, Dual Chunk Attention in vLLM), recorded from their authors' code.

Made with transformers 5.24.0 and torch 2.15.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_models_2026_golden.py \\
        --intern-s1-pro DIR --vllm-dual-chunk FILE

``DIR`` holds ``modeling_interns1_pro.py`` and ``modeling_rope_utils.py`` of the
checkpoint ``internlm/Intern-S1-Pro`` (its remote code; read from the copy in
``muyaostudio/intern-s1-pro-vs-qwen3-235b-a22b``, ``checkpoints/Intern-S1-Pro/``,
commit 4591d64); ``FILE`` holds the methods ``_compute_inv_freq`` and
``_compute_cos_sin_cache`` of ``DualChunkRotaryEmbedding``, copied verbatim from
``vllm-project/vllm``,
``vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py``
(commit 07b13497). Nothing is downloaded; the weights are random.

What it records, per model (``models``):

* ``rotary``: for every kind of layer, the ``inv_freq`` buffer and the attention factor
  of the model's own rotary-embedding class, built from the configuration class's
  DEFAULTS (``kwargs`` empty) or from the numbers a row takes from a checkpoint
  (``kwargs``); ``alpha``: the shape of a learned frequency parameter, if any.
* ``config``: the configuration defaults the table quotes (windows, layer lists).
* ``layers``: a tiny model of the same class (small widths, the DEFAULT number of
  layers and layer pattern, a sliding window of ``TINY_WINDOW`` keys) run on
  ``TINY_N`` tokens with eager attention: for each layer, which rotary functions it
  called (the module's ``apply_rotary_pos_emb*``, wrapped), how many keys the last
  query attends to (from the attention weights), whether its attention has a
  ``sinks`` parameter and an indexer (or compressor), and the configuration's
  ``layer_types``; ``gate``: whether the attention class multiplies by a sigmoid
  (parsed from its source, as ``make_frontier_golden.py`` does).

And per function (``functions``): the log-length query scales of Ministral 3 and
Mistral Small 4 (``get_llama_4_attn_scale``), Beam (``compute_attention_scaling``) and
Mistral Large 4 (``MistralLarge4TextSoftmaxScaling``) at given positions; Mistral
Large 4's learned frequencies (cos and sin of ``MistralLarge4TextRotaryEmbedding`` with
a given ``alpha``); Qwen3.5's interleaved M-RoPE (cos of ``Qwen3_5TextRotaryEmbedding``
for three position rows); Inkling's relative logits (``InklingRelativeLogits`` with
given ``proj`` and relative states); OLMo 3 checkpoint-style YaRN on full layers.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import pathlib
import re
import warnings
from importlib.metadata import version

import torch
import torch.nn.functional as F
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()

HERE = pathlib.Path(__file__).resolve().parent
TINY_N, TINY_WINDOW = 24, 8

SMALL = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    pad_token_id=0,
)
MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2)
MLA = dict(
    kv_lora_rank=16,
    q_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
    num_key_value_heads=4,
)
# top-k larger than the tiny sequence: the indexer keeps every key, so the keys a
# query sees measure the window alone
IDX = dict(index_topk=64, index_head_dim=16, index_n_heads=2)
W = TINY_WINDOW

# name -> (module, config class, text model class, row kwargs, tiny overrides,
#          rotary layer types (None: one table; []: no rotary class), attention class,
#          config fields quoted by the table)
MODELS = {
    "GLM-5.x": (
        "glm_moe_dsa",
        "GlmMoeDsaConfig",
        "GlmMoeDsaModel",
        {},
        {**SMALL, **MOE, **MLA, **IDX, "n_routed_experts": 4},
        None,
        "GlmMoeDsaAttention",
        ["qk_rope_head_dim", "qk_nope_head_dim", "index_topk", "num_hidden_layers"],
    ),
    "GLM-5.3-Flash": (
        "glm5_next",
        "Glm5NextTextConfig",
        "Glm5NextTextModel",
        {},
        {
            **SMALL,
            **MOE,
            **MLA,
            **IDX,
            "qk_rope_head_dim": 0,
            "qk_nope_head_dim": 16,
            "n_routed_experts": 4,
            "linear_head_dim": 16,
            "linear_num_heads": 4,
            "index_kpool": 4,
            "hc_mult": 2,
        },
        [],
        "Glm5NextTextAttention",
        ["qk_rope_head_dim", "index_kpool", "index_topk", "num_hidden_layers"],
    ),
    "Qwen3.5": (
        "qwen3_5",
        "Qwen3_5TextConfig",
        "Qwen3_5TextModel",
        {},
        {
            **SMALL,
            "head_dim": 32,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
        },
        None,
        "Qwen3_5Attention",
        ["head_dim", "rope_parameters", "num_hidden_layers"],
    ),
    "Qwen3.5-MoE": (
        "qwen3_5_moe",
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeTextModel",
        {},
        {
            **SMALL,
            "head_dim": 32,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
        },
        None,
        "Qwen3_5MoeAttention",
        ["head_dim", "rope_parameters", "num_hidden_layers"],
    ),
    "Ministral 3": (
        "ministral3",
        "Ministral3Config",
        "Ministral3Model",
        {},
        {**SMALL},
        None,
        "Ministral3Attention",
        ["rope_parameters", "sliding_window", "num_hidden_layers"],
    ),
    "Mistral Small 4": (
        "mistral4",
        "Mistral4Config",
        "Mistral4Model",
        {},
        {**SMALL, **MOE, **MLA, "n_routed_experts": 4},
        None,
        "Mistral4Attention",
        ["rope_parameters", "qk_rope_head_dim", "rope_interleave", "num_hidden_layers"],
    ),
    "Mistral Large 4": (
        "mistral_large4",
        "MistralLarge4TextConfig",
        "MistralLarge4TextModel",
        {},
        {**SMALL, **MOE, **MLA, **IDX, "n_routed_experts": 4},
        None,
        "MistralLarge4TextAttention",
        ["rope_parameters", "no_rope_layers", "num_hidden_layers"],
    ),
    "Muse Glimmer": (
        "muse_glimmer",
        "MuseGlimmerTextConfig",
        "MuseGlimmerTextModel",
        {},
        {**SMALL, "sliding_window": W},
        None,
        "MuseGlimmerTextAttention",
        ["sliding_window", "layer_rope_theta", "qk_scale_factor", "num_hidden_layers"],
    ),
    "Muse Spark": (
        "muse_spark",
        "MuseSparkTextConfig",
        "MuseSparkTextModel",
        {},
        {
            **SMALL,
            "sliding_window": W,
            "moe_intermediate_size": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "moe_hidden_size": 32,
        },
        None,
        "MuseSparkTextAttention",
        ["sliding_window", "layer_rope_theta", "qk_scale_factor", "num_hidden_layers"],
    ),
    "MiMo-V2-Flash": (
        "mimo_v2_flash",
        "MiMoV2FlashConfig",
        "MiMoV2FlashModel",
        {},
        {
            **SMALL,
            **MOE,
            "n_routed_experts": 4,
            "head_dim": 48,
            "v_head_dim": 16,
            # the checkpoint's field: 7 earlier tokens and the query
            "sliding_window_size": W - 1,
        },
        ["full_attention", "sliding_attention"],
        "MiMoV2FlashAttention",
        ["sliding_window", "head_dim", "rope_parameters", "num_hidden_layers"],
    ),
    "MiniMax-M2": (
        "minimax_m2",
        "MiniMaxM2Config",
        "MiniMaxM2Model",
        {},
        {**SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
        None,
        "MiniMaxM2Attention",
        ["head_dim", "rope_parameters", "num_hidden_layers"],
    ),
    "MiniMax-M3": (
        "minimax_m3_vl",
        "MiniMaxM3VLTextConfig",
        "MiniMaxM3VLTextModel",
        {},
        {
            **SMALL,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "dense_intermediate_size": 32,
            "shared_intermediate_size": 32,
        },
        None,
        "MiniMaxM3VLAttention",
        ["head_dim", "rotary_dim", "rope_parameters", "num_hidden_layers"],
    ),
    "Nemotron-H": (
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHModel",
        {},
        {
            **SMALL,
            "n_groups": 2,
            "ssm_state_size": 8,
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "n_routed_experts": 4,
            "moe_intermediate_size": 32,
            "num_experts_per_tok": 2,
        },
        [],
        "NemotronHAttention",
        ["layer_types"],
    ),
    "OLMo Hybrid": (
        "olmo_hybrid",
        "OlmoHybridConfig",
        "OlmoHybridModel",
        {},
        {
            **SMALL,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        },
        None,
        "OlmoHybridAttention",
        ["rope_parameters", "num_hidden_layers"],
    ),
    # the released checkpoints set no rope_theta (the model's own comment); the same
    # class, fed that
    "OLMo Hybrid (checkpoint)": (
        "olmo_hybrid",
        "OlmoHybridConfig",
        "OlmoHybridModel",
        {"rope_theta": None},
        {
            **SMALL,
            "rope_theta": None,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        },
        [],
        "OlmoHybridAttention",
        ["rope_parameters", "num_hidden_layers"],
    ),
    "Granite 4.0-H": (
        "granitemoehybrid",
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridModel",
        {},
        {
            **SMALL,
            # the class default is Mamba everywhere; a checkpoint names its attention
            # layers, here one in four
            "num_hidden_layers": 8,
            "layer_types": ["mamba", "mamba", "mamba", "attention"] * 2,
            "mamba_n_heads": 4,
            "mamba_d_head": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
        [],
        "GraniteMoeHybridAttention",
        ["position_embedding_type", "layer_types"],
    ),
    "Trinity": (
        "afmoe",
        "AfmoeConfig",
        "AfmoeModel",
        {},
        {
            **SMALL,
            "sliding_window": W,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
        },
        None,
        "AfmoeAttention",
        ["sliding_window", "global_attn_every_n_layers", "num_hidden_layers"],
    ),
    "Flint": (
        "flint",
        "FlintConfig",
        "FlintModel",
        {},
        {
            **SMALL,
            "sliding_window": W,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
        },
        None,
        "FlintAttention",
        ["sliding_window", "num_hidden_layers"],
    ),
    "Beam": (
        "beam",
        "BeamConfig",
        "BeamModel",
        {},
        {
            **SMALL,
            "n_group": 1,
            "topk_group": 1,
            "sliding_window": W,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
        },
        ["sliding_attention"],
        "BeamAttention",
        ["sliding_window", "rope_parameters", "num_hidden_layers"],
    ),
    "Kolibri": (
        "kolibri1",
        "Kolibri1Config",
        "Kolibri1Model",
        {},
        {
            **SMALL,
            "sliding_window": W,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
        },
        None,
        "Kolibri1Attention",
        ["sliding_window", "num_hidden_layers"],
    ),
    "Inkling": (
        "inkling",
        "InklingTextConfig",
        "InklingTextModel",
        {},
        {
            **SMALL,
            "sliding_window_size": W,
            "swa_num_attention_heads": 4,
            "swa_num_key_value_heads": 2,
            "swa_head_dim": 16,
            "rel_extent": 12,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
        },
        [],
        "InklingAttention",
        [
            "sliding_window_size",
            "rel_extent",
            "d_rel",
            "log_scaling_n_floor",
            "num_hidden_layers",
        ],
    ),
    "DeepSeek-V3.2": (
        "deepseek_v32",
        "DeepseekV32Config",
        "DeepseekV32Model",
        {},
        {
            **SMALL,
            **MOE,
            **MLA,
            **IDX,
            "n_group": 1,
            "topk_group": 1,
            "n_routed_experts": 4,
        },  # fmt: skip
        None,
        "DeepseekV32Attention",
        ["qk_rope_head_dim", "index_topk", "num_hidden_layers"],
    ),
    "DeepSeek-V4": (
        "deepseek_v4",
        "DeepseekV4Config",
        "DeepseekV4Model",
        {},
        {**SMALL, "head_dim": 64, "sliding_window": W},
        ["main", "compress"],
        "DeepseekV4Attention",
        ["head_dim", "sliding_window", "rope_parameters", "num_hidden_layers"],
    ),
    "Qwen4-Exp": (
        "qwen4_exp",
        "Qwen4ExpTextConfig",
        "Qwen4ExpTextModel",
        {},
        {
            **SMALL,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "indexer_n_heads": 2,
            "indexer_kv_heads": 1,
            "indexer_head_dim": 16,
            "indexer_budget": 32,
            "indexer_compress_ratio": 4,
        },
        None,
        "Qwen4ExpTextAttention",
        ["head_dim", "rope_parameters", "num_hidden_layers"],
    ),
    # Kimi K2.5 / K2.6 (models/kimi_k25): the text model is DeepSeek-V3's
    "Kimi K2.6": (
        "deepseek_v3",
        "DeepseekV3Config",
        "DeepseekV3Model",
        {},
        {
            **SMALL,
            **MOE,
            **MLA,
            "head_dim": 8,
            "n_group": 1,
            "topk_group": 1,
            "n_routed_experts": 4,
        },  # fmt: skip
        None,
        "DeepseekV3Attention",
        ["qk_rope_head_dim", "rope_interleave", "num_hidden_layers"],
    ),
    "Kimi Linear": (
        "kimi_linear",
        "KimiLinearConfig",
        "KimiLinearModel",
        {},
        {**SMALL, **MOE, **MLA},
        [],
        "KimiLinearAttention",
        ["layer_types"],
    ),
}


def t(x):
    return x.tolist()


def jsonable(v):
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v


def modules(module):
    cfg = importlib.import_module(
        f"transformers.models.{module}.configuration_{module}"
    )
    mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    return cfg, mod


def rotary_class(mod):
    names = [
        n
        for n in vars(mod)
        if n.endswith("RotaryEmbedding") and "Vision" not in n and "Base" not in n
    ]
    assert len(names) == 1, names
    return getattr(mod, names[0])


def record_rotary(mod, cfg, layer_types):
    """inv_freq and attention factor per kind of layer, from the default config."""
    if layer_types == []:
        return {}
    emb = rotary_class(mod)(cfg)
    out = {}
    for lt in layer_types or [None]:
        pre = "" if lt is None else f"{lt}_"
        out[lt or "all"] = {
            "inv_freq": t(getattr(emb, f"{pre}inv_freq")),
            "attention": float(getattr(emb, f"{pre}attention_scaling")),
        }
    alpha = getattr(emb, "alpha", None)
    if isinstance(alpha, torch.nn.Parameter):
        out["alpha_shape"] = list(alpha.shape)
    return out


def sigmoid_gate(module, cls):
    spec = importlib.util.spec_from_file_location(
        "frontier_golden", HERE / "make_frontier_golden.py"
    )
    frontier = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frontier)
    path = pathlib.Path(importlib.import_module("transformers").__file__).parent
    source = (path / "models" / module / f"modeling_{module}.py").read_text()
    return frontier.position_calls(source, cls)["sigmoid_gate"]


def tiny_layers(mod, cfg_cls, model_cls, attn_name, overrides):
    """Run a tiny model with the default layer pattern; what each layer does."""
    cfg = cfg_cls(**overrides)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).eval()
    current = {"layer": None}
    rot, seen, sinks, indexer = {}, {}, {}, {}
    names = [
        k
        for k, v in vars(mod).items()
        if k.startswith("apply_rotary_pos_emb") and callable(v) and "vision" not in k
    ]
    originals = {k: vars(mod)[k] for k in names}
    for name, f in originals.items():

        def wrap(*a, _f=f, _name=name, **kw):
            rot.setdefault(current["layer"], set()).add(_name)
            return _f(*a, **kw)

        setattr(mod, name, wrap)
    try:
        for i, layer in enumerate(model.layers):
            layer.register_forward_pre_hook(
                lambda m, a, i=i: current.__setitem__("layer", i)
            )
            for sub in layer.modules():
                if type(sub).__name__ == attn_name:
                    sinks[i] = isinstance(
                        getattr(sub, "sinks", None), torch.nn.Parameter
                    )
                    indexer[i] = (
                        getattr(sub, "indexer", None) is not None
                        or getattr(sub, "compressor", None) is not None
                    )

                    def hook(m, a, out, i=i):
                        w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
                        if isinstance(w, torch.Tensor):
                            seen[i] = int((w[0, 0, -1] > 0).sum())

                    sub.register_forward_hook(hook)
                    break
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(1, cfg.vocab_size, (1, TINY_N), generator=g)
        with torch.no_grad():
            model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        for name, f in originals.items():
            setattr(mod, name, f)
    n = len(model.layers)
    return {
        "n": TINY_N,
        "window": TINY_WINDOW,
        "rotates": [sorted(rot.get(i, [])) for i in range(n)],
        "keys_seen": [seen.get(i) for i in range(n)],
        "sinks": [sinks.get(i) for i in range(n)],
        "indexer": [indexer.get(i) for i in range(n)],
        "layer_types": list(getattr(cfg, "layer_types", None) or []),
    }


def model_rows():
    out = {}
    for name, spec in MODELS.items():
        module, cfg_name, model_name, kwargs, tiny, types, attn, fields = spec
        cfg_mod, mod = modules(module)
        cfg_cls = getattr(cfg_mod, cfg_name)
        cfg = cfg_cls(**kwargs)
        out[name] = {
            "module": module,
            "config_class": cfg_name,
            "kwargs": kwargs,
            "config": {f: jsonable(getattr(cfg, f, None)) for f in fields},
            "rotary": record_rotary(mod, cfg, types),
            "layers": tiny_layers(mod, cfg_cls, getattr(mod, model_name), attn, tiny),
            "gate": sigmoid_gate(module, attn),
        }
        print(f"  {name}: {len(out[name]['layers']['rotates'])} layers")
    return out


# ------------------------------------------------------------------ functions

POSITIONS = [0, 1, 511, 512, 2047, 8191, 8192, 16383, 16384, 50000, 10**6]


def functions():
    pos = torch.tensor([POSITIONS])
    out = {"positions": POSITIONS}
    _, m3 = modules("ministral3")
    _, m4 = modules("mistral4")
    out["ministral3_scale"] = t(m3.get_llama_4_attn_scale(pos, 0.1, 16384).flatten())
    out["mistral4_scale"] = t(m4.get_llama_4_attn_scale(pos, 0.1, 8192).flatten())
    _, beam = modules("beam")
    out["beam_scale"] = t(beam.compute_attention_scaling(pos).flatten())
    # Mistral Large 4: learned per-head scale a_h log(p + 1) + b_h on the queries
    _, ml4 = modules("mistral_large4")
    soft = ml4.MistralLarge4TextSoftmaxScaling(3)
    with torch.no_grad():
        soft.scale.copy_(torch.tensor([0.05, 0.1, -0.02]))
        soft.bias.copy_(torch.tensor([1.0, 0.9, 1.1]))
    q = torch.ones(1, 3, len(POSITIONS), 1)
    out["mistral_large4_softmax_scaling"] = {
        "scale": [0.05, 0.1, -0.02],
        "bias": [1.0, 0.9, 1.1],
        "q_scale": t(soft(q, pos, head_dim_first=True)[0, :, :, 0]),  # (h, p)
    }
    # Mistral Large 4: learned frequencies inv_freq * exp(alpha)
    cfg_mod, _ = modules("mistral_large4")
    cfg = cfg_mod.MistralLarge4TextConfig(qk_rope_head_dim=16)
    emb = ml4.MistralLarge4TextRotaryEmbedding(cfg)
    alpha = torch.linspace(-0.5, 0.5, emb.alpha.numel())
    with torch.no_grad():
        emb.alpha.copy_(alpha)
    p = torch.tensor([[0, 1, 7, 300, 5000]])
    cos, sin = emb(torch.zeros(1, dtype=torch.float32), p)
    out["mistral_large4_learned"] = {
        "d_rope": 16,
        "rope_parameters": jsonable(cfg.rope_parameters),
        "inv_freq": t(emb.inv_freq),
        "attention": float(emb.attention_scaling),
        "alpha": t(alpha),
        "positions": t(p[0]),
        "cos": t(cos[0]),
        "sin": t(sin[0]),
    }
    # Qwen3.5: interleaved M-RoPE on text, three rows of positions (t, h, w)
    cfg_mod, q35 = modules("qwen3_5")
    cfg = cfg_mod.Qwen3_5TextConfig()
    emb = q35.Qwen3_5TextRotaryEmbedding(cfg)
    p3 = torch.stack(
        [
            torch.tensor([[0, 5, 9, 40]]),
            torch.tensor([[0, 2, 3, 7]]),
            torch.tensor([[0, 1, 8, 11]]),
        ]
    )  # (3, b, n)
    cos, sin = emb(torch.zeros(1, dtype=torch.float32), p3)
    out["qwen3_5_mrope"] = {
        "mrope_section": list(emb.mrope_section),
        "inv_freq": t(emb.inv_freq),
        "positions": t(p3[:, 0]),
        "cos": t(cos[0]),
        "sin": t(sin[0]),
    }
    # Inkling: content-conditioned relative logits
    _, ink = modules("inkling")
    g = torch.Generator().manual_seed(1)
    rel = ink.InklingRelativeLogits(d_rel=3, rel_extent=5)
    with torch.no_grad():
        rel.proj.copy_(torch.randn(3, 5, generator=g))
    r = torch.randn(1, 7, 2, 3, generator=g)  # (b, n, h, d_rel)
    qp, kp = torch.arange(7), torch.arange(7)
    out["inkling_relative_logits"] = {
        "proj": t(rel.proj),
        "relative_states": t(r[0]),
        "bias": t(rel(r, qp, kp)[0]),  # (h, i, j)
    }
    # OLMo 3 with the YaRN that third parties quote from its released configs: the
    # scaling reaches the full-attention layers only
    cfg_mod, olmo = modules("olmo3")
    yarn = {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "attention_factor": 1.2079441541679836,
    }
    cfg = cfg_mod.Olmo3Config(rope_scaling=dict(yarn))
    emb = olmo.Olmo3RotaryEmbedding(cfg)
    out["olmo3_yarn"] = {
        "rope_scaling": yarn,
        "rope_parameters": jsonable(cfg.rope_parameters),
        **{
            lt: {
                "inv_freq": t(getattr(emb, f"{lt}_inv_freq")),
                "attention": float(getattr(emb, f"{lt}_attention_scaling")),
            }
            for lt in ("sliding_attention", "full_attention")
        },
    }
    return out


# ------------------------------------------------------------------ FoPE, DCA


def extract(source, names, namespace):
    """Execute the top-level functions and classes ``names`` of ``source`` (the
    authors' code, verbatim) in ``namespace``."""
    tree = ast.parse(source)
    for node in tree.body:
        if getattr(node, "name", None) in names:
            code = ast.get_source_segment(source, node)
            exec(compile(code, "<authors' code>", "exec"), namespace)
    return namespace


def fope(directory):
    """Intern-S1-Pro's FoPE, run from the checkpoint's remote code."""
    directory = pathlib.Path(directory)
    spec = importlib.util.spec_from_file_location(
        "is1p_rope", directory / "modeling_rope_utils.py"
    )
    rope_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rope_utils)
    ns = {
        "torch": torch,
        "nn": torch.nn,
        "F": F,
        "ROPE_INIT_FUNCTIONS": rope_utils.ROPE_INIT_FUNCTIONS,
        "dynamic_rope_update": rope_utils.dynamic_rope_update,
        "InternS1ProConfig": object,
        "Optional": __import__("typing").Optional,
    }
    source = (directory / "modeling_interns1_pro.py").read_text()
    extract(
        source,
        {
            "rotate_half",
            "repeat_kv",
            "apply_rotary_pos_emb",
            "apply_rotary_pos_emb_sep",
            "Qwen3VLMoeTextRotaryEmbedding",
            "InternS1ProMoeTextFourierEmbedding",
        },
        ns,
    )

    class Config:  # the fields the two classes read, at a small size
        def __init__(self, **kw):
            self.__dict__.update(kw)

    # the checkpoint's rope block (config.json: text_config), at a small size
    cases = {}
    for name, max_pos in (("small", 4096), ("checkpoint_ratio", 262144)):
        cfg = Config(
            rope_scaling={
                "rope_type": "default",
                "fope_init_factor": 0.5,
                "fope_sep_head": True,
                "num_inv_freq": None,
            },
            rope_theta=5000000.0,
            max_position_embeddings=max_pos,
            head_dim=32,
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        torch.manual_seed(0)
        emb = ns["InternS1ProMoeTextFourierEmbedding"](cfg)
        pos = torch.tensor([[0, 1, 5, 100, 3000]])
        x = torch.zeros(1, 5, 64)
        cos, sin = emb(x, pos)  # (b, h_kv, n, d)
        g = torch.Generator().manual_seed(2)
        q = torch.randn(1, 4, 5, 32, generator=g)
        k = torch.randn(1, 2, 5, 32, generator=g)
        qo, ko = ns["apply_rotary_pos_emb_sep"](q, k, cos, sin)
        cases[name] = {
            "rope_theta": 5000000.0,
            "head_dim": 32,
            "max_position_embeddings": max_pos,
            "inv_freq": t(emb.inv_freq),
            "cos_coef": t(emb.cos_coef),
            "sin_coef": t(emb.sin_coef),
            "positions": t(pos[0]),
            "cos": t(cos[0]),
            "sin": t(sin[0]),
            "q": t(q[0]),
            "k": t(k[0]),
            "q_out": t(qo[0]),
            "k_out": t(ko[0]),
        }
    return {
        "source": "muyaostudio/intern-s1-pro-vs-qwen3-235b-a22b "
        "checkpoints/Intern-S1-Pro/modeling_interns1_pro.py "
        "InternS1ProMoeTextFourierEmbedding, apply_rotary_pos_emb_sep (commit 4591d64)",
        "cases": cases,
    }


def dual_chunk(path):
    """vLLM's DualChunkRotaryEmbedding caches: the positions it rotates by."""
    source = pathlib.Path(path).read_text()
    body = "class DualChunk:\n" + "\n".join(
        line for line in source.splitlines() if not line.startswith("#")
    )
    ns = {"torch": torch}
    exec(compile(body, "<vllm dual_chunk_rope.py>", "exec"), ns)
    out = {}
    for chunk_size, local_size, max_pos in ((48, 4, 200), (64, 8, 300)):
        self = ns["DualChunk"]()
        # two pairs, frequencies 1 and 1e-3: the second one's angle, times 1000, is
        # the position (below 3141)
        self.rotary_dim, self.base = 4, 1e6
        self.chunk_size, self.local_size = chunk_size, local_size
        self.max_position_embeddings = max_pos
        self.dtype, self.device = torch.float64, torch.device("cpu")
        caches = self._compute_cos_sin_cache()
        names = ("q", "qc", "k", "qc_no_clamp", "q_inter")
        positions = {}
        for name, cache in zip(names, caches):
            cos, sin = cache[:, 1], cache[:, 3]  # (cos0, cos1, sin0, sin1)
            positions[name] = t(torch.round(torch.atan2(sin, cos) * 1000).long())
        out[f"{chunk_size}/{local_size}"] = {
            "chunk_size": chunk_size,
            "local_size": local_size,
            "max_position_embeddings": max_pos,
            "positions": positions,
        }
    return {
        "source": "vllm-project/vllm vllm/model_executor/layers/rotary_embedding/"
        "dual_chunk_rope.py DualChunkRotaryEmbedding (commit 07b13497)",
        "cases": out,
    }


# ------------------------------------------------------------------ main


def quoted_lines():
    """Lines of model code the chapters quote, and whether each occurs."""
    root = pathlib.Path(importlib.import_module("transformers").__file__).parent
    wanted = {
        "mistral_large4/modeling_mistral_large4.py": [
            "self.alpha = nn.Parameter(",
            "* self.alpha.to(device=x.device, dtype=torch.float).exp()",
        ],
        "mistral_large4/configuration_mistral_large4.py": [
            "int((layer_idx + 1) % no_rope_layer_interval != 0) for layer_idx in "
            "range(self.num_hidden_layers)",
        ],
        "muse_spark/configuration_muse_spark.py": [
            "sliding_window: int | None = 2048",
            "0 if (self.num_hidden_layers - 1 - i) % 4 == 0 else "
            'self.rope_parameters["rope_theta"]',
        ],
        "glm5_next/configuration_glm5_next.py": ["qk_rope_head_dim: int = 0"],
        "qwen3_5/modeling_qwen3_5.py": [
            "self.mrope_section = "
            'config.rope_parameters.get("mrope_section", [11, 11, 10])',
            "def recomposition_frequencies(self, freq):",
        ],
        "inkling/modeling_inkling.py": ["class InklingRelativeLogits(nn.Module):"],
        "ministral3/modeling_ministral3.py": [
            "scaling = 1 + beta * torch.log(1 + torch.floor(positions_ids / "
            "max_position_embeddings))",
        ],
        "mimo_v2_flash/configuration_mimo_v2_flash.py": [
            'self.sliding_window = kwargs["sliding_window_size"] + 1',
        ],
        "olmo_hybrid/modeling_olmo_hybrid.py": [
            "# Released ckpt don't use any ROPE and have  it set to `None`",
        ],
    }
    out = {}
    for rel, lines in wanted.items():
        text = (root / "models" / rel).read_text().splitlines()
        stripped = [line.strip() for line in text]
        out[rel] = {
            line: (stripped.index(line) + 1 if line in stripped else None)
            for line in lines
        }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intern-s1-pro", required=True)
    parser.add_argument("--vllm-dual-chunk", required=True)
    args = parser.parse_args()
    out = {
        "versions": {
            "transformers": version("transformers"),
            "torch": version("torch"),
        },
        "tiny": {"n": TINY_N, "window": TINY_WINDOW},
        "models": model_rows(),
        "functions": functions(),
        "quoted_lines": quoted_lines(),
        "fope": fope(args.intern_s1_pro),
        "dual_chunk": dual_chunk(args.vllm_dual_chunk),
    }
    dest = HERE / "models_2026_hf.json"
    dest.write_text(json.dumps(out) + "\n")
    print("wrote", dest)


if __name__ == "__main__":
    main()

"""How released models position their tokens: the data behind the table of the
chapter "RoPE as deployed", one ``RopeSpec`` per kind of layer.

Every row names the repository, file and function that apply the encoding, and where
its numbers come from (``numbers``): ``"code"`` when they are the defaults of the
model's configuration class in Hugging Face transformers 5.24 (the golden script
``tests/golden/make_rope_deployed_golden.py`` reads them there, and
``tests/test_rope_deployed.py`` checks this table against them); ``"checkpoint"`` when
they are set by the released checkpoint's ``config.json`` (as published; not
downloaded by the course), in which case the test checks only that the model's own
function, fed these numbers, gives the same frequencies as ``rope_inv_freq``.

A ``"code"`` row named after a checkpoint prints the configuration class's defaults,
which the checkpoint's own ``config.json`` may override; the fields it names in
``class_defaults`` (``"base"``, ``"QK-norm"``) are printed with "(class default)" so
that the table does not pass them off as the checkpoint's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..encodings.rope_scaling import rope_inv_freq

__all__ = [
    "MLA_DEEPSEEK_V3",
    "RopeSpec",
    "DeployedModel",
    "DEPLOYED_MODELS",
    "spec_inv_freq",
    "model_table",
]

HF = "huggingface/transformers"


@dataclass(frozen=True)
class RopeSpec:
    """The RoPE of one kind of layer: ``rope_inv_freq(rotary_dim or d_head, base,
    scaling, **params)`` applied by ``apply_rope(..., layout, rotary_dim=rotary_dim)``
    to heads of size ``d_head``."""

    layers: str  # which layers: "all", "sliding", "full", "MLA rope part"
    d_head: int
    base: float
    scaling: str | None = None
    params: dict = field(default_factory=dict)
    rotary_dim: int | None = None  # None: the whole head
    layout: str = "half"


@dataclass(frozen=True)
class DeployedModel:
    name: str
    checkpoint: str  # a Hugging Face checkpoint of the family
    specs: tuple[RopeSpec, ...]
    pattern: str  # the layer pattern, e.g. "5 sliding : 1 full"
    qk_norm: str  # "none", "per head", "whole projection"
    source: str  # repository, file, function
    numbers: str  # "code" or "checkpoint" (see the module docstring)
    note: str = ""
    # fields printed from the configuration class's defaults, not the checkpoint's
    class_defaults: tuple[str, ...] = ()


DEPLOYED_MODELS: tuple[DeployedModel, ...] = (
    DeployedModel(
        "GPT-NeoX-20B",
        "EleutherAI/gpt-neox-20b",
        (RopeSpec("all", 96, 10000.0, rotary_dim=24),),
        "all full",
        "none",
        f"{HF} models/gpt_neox/modeling_gpt_neox.py apply_rotary_pos_emb",
        "code",
        "rotary_pct 0.25 of d_head 6144/64 = 96",
    ),
    DeployedModel(
        "Phi-4-mini",
        "microsoft/Phi-4-mini-instruct",
        (RopeSpec("all", 128, 10000.0, rotary_dim=96),),
        "all full",
        "none",
        f"{HF} models/phi3/modeling_phi3.py apply_rotary_pos_emb",
        "checkpoint",
        "partial_rotary_factor 0.75; LongRoPE factors (Part III) left out here",
    ),
    DeployedModel(
        "GLM-4.5",
        "zai-org/GLM-4.5",
        (RopeSpec("all", 128, 10000.0, rotary_dim=64),),
        "all full",
        "per head if use_qk_norm, off",
        f"{HF} models/glm4_moe/modeling_glm4_moe.py apply_rotary_pos_emb",
        "code",
        "partial_rotary_factor 0.5 (config default); d_head 128 from the checkpoint",
        class_defaults=("base", "QK-norm"),
    ),
    DeployedModel(
        "Qwen3-Next",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        (RopeSpec("full", 256, 10000.0, rotary_dim=64),),
        "3 linear (Gated DeltaNet) : 1 full",
        "per head",
        f"{HF} models/qwen3_next/modeling_qwen3_next.py apply_rotary_pos_emb",
        "code",
        "partial_rotary_factor 0.25; linear-attention layers have no RoPE",
        class_defaults=("base",),
    ),
    DeployedModel(
        "Gemma 3",
        "google/gemma-3-1b-pt",
        (RopeSpec("sliding", 256, 10000.0), RopeSpec("full", 256, 1000000.0)),
        "5 sliding : 1 full",
        "per head",
        f"{HF} models/gemma3/modeling_gemma3.py Gemma3RotaryEmbedding",
        "code",
        "default_theta: local 10k, global 1M",
    ),
    DeployedModel(
        "Gemma 4",
        "google/gemma-4-26B-A4B-it",
        (
            RopeSpec("sliding", 256, 10000.0),
            RopeSpec(
                "full", 512, 1000000.0, "proportional", {"partial_rotary_factor": 0.25}
            ),
        ),
        "5 sliding : 1 full",
        "per head; score scale 1",
        f"{HF} models/gemma4/modeling_gemma4.py Gemma4TextRotaryEmbedding",
        "code",
        "p-RoPE: 64 of 256 pairs rotated on full layers (global_head_dim 512)",
    ),
    DeployedModel(
        "OLMo 3",
        "allenai/Olmo-3-1025-7B",
        (RopeSpec("sliding", 128, 500000.0), RopeSpec("full", 128, 500000.0)),
        "3 sliding : 1 full",
        "whole projection",
        f"{HF} models/olmo3/modeling_olmo3.py Olmo3RotaryEmbedding",
        "code",
        "one base; a rope_scaling applies to full layers only",
    ),
    DeployedModel(
        "gpt-oss",
        "openai/gpt-oss-20b",
        (
            RopeSpec(
                "all",
                64,
                150000.0,
                "yarn",
                {
                    "factor": 32.0,
                    "original_max_position_embeddings": 4096,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                },
            ),
        ),
        "1 sliding (128) : 1 full",
        "none",
        f"{HF} models/gpt_oss/modeling_gpt_oss.py _apply_rotary_emb",
        "code",
        "one RoPE (YaRN x32) for both kinds of layer",
    ),
    DeployedModel(
        "Qwen3",
        "Qwen/Qwen3-8B",
        (RopeSpec("all", 128, 1000000.0),),
        "all full",
        "per head",
        f"{HF} models/qwen3/modeling_qwen3.py apply_rotary_pos_emb",
        "checkpoint",
        "YaRN (factor 4, L0 32768) only when the user adds it",
    ),
    DeployedModel(
        "DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        (
            RopeSpec(
                "MLA rope part",
                64,
                10000.0,
                "yarn",
                {
                    "factor": 40.0,
                    "original_max_position_embeddings": 4096,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                },
                layout="interleaved",
            ),
        ),
        "all full (MLA)",
        "none (RMSNorm on the latents)",
        f"{HF} models/deepseek_v3/modeling_deepseek_v3.py "
        "apply_rotary_pos_emb_interleave, yarn_apply_mscale",
        "checkpoint",
        "64-dim decoupled key shared by all heads; mscale^2 in the softmax scale",
    ),
    DeployedModel(
        "Llama 3.1",
        "meta-llama/Llama-3.1-8B",
        (
            RopeSpec(
                "all",
                128,
                500000.0,
                "llama3",
                {
                    "factor": 8.0,
                    "original_max_position_embeddings": 8192,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                },
            ),
        ),
        "all full",
        "none",
        f"{HF} modeling_rope_utils.py _compute_llama3_parameters",
        "checkpoint",
        "",
    ),
)


# DeepSeek-V3's multi-head latent attention: the defaults of DeepseekV3Config
# (transformers models/deepseek_v3/configuration_deepseek_v3.py), checked in the tests
MLA_DEEPSEEK_V3 = {
    "num_attention_heads": 128,
    "kv_lora_rank": 512,  # the cached latent c_kv
    "qk_nope_head_dim": 128,  # per head, from the latent
    "qk_rope_head_dim": 64,  # the decoupled rotary part; its key is shared by heads
    "v_head_dim": 128,
}


def spec_inv_freq(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """``(inv_freq, attention_factor)`` of one layer kind: ``(r/2,)`` with r the
    rotated dimensions (``rotary_dim``, else ``d_head``)."""
    if not isinstance(spec, RopeSpec):
        raise TypeError(
            "spec must be a RopeSpec (a layer kind of pl.DEPLOYED_MODELS), got "
            f"{type(spec).__name__}"
        )
    return rope_inv_freq(
        spec.rotary_dim or spec.d_head, spec.base, spec.scaling, **spec.params
    )


CLASS_DEFAULT = " (class default)"


def _encoding(spec: RopeSpec, base_is_class_default: bool = False) -> str:
    r = spec.rotary_dim or spec.d_head
    if spec.scaling == "proportional":
        k = int(spec.params["partial_rotary_factor"] * spec.d_head // 2)
        what = f"p-RoPE {2 * k}/{spec.d_head}"
    elif r < spec.d_head:
        what = f"partial {r}/{spec.d_head}"
    else:
        what = f"RoPE {spec.d_head}"
    if spec.scaling not in (None, "proportional"):
        what += f" {spec.scaling} x{spec.params['factor']:g}"
    default = CLASS_DEFAULT if base_is_class_default else ""
    return f"{spec.layers}: {what}, base {spec.base:g}{default}"


def model_table() -> list[dict[str, str]]:
    """One row per model: name, encoding per kind of layer, pattern, QK-norm, source
    and where the numbers come from; a field that is the configuration class's
    default (``class_defaults``) says so."""
    return [
        {
            "model": m.name,
            "encoding": "; ".join(
                _encoding(s, "base" in m.class_defaults) for s in m.specs
            ),
            "layers": m.pattern,
            "QK-norm": m.qk_norm
            + (CLASS_DEFAULT if "QK-norm" in m.class_defaults else ""),
            "source": m.source.replace(f"{HF} ", ""),
            "numbers": m.numbers,
        }
        for m in DEPLOYED_MODELS
    ]

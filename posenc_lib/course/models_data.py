"""How released models position their tokens: the data behind the tables of the
chapter "RoPE as deployed", one ``RopeSpec`` per kind of layer, in two blocks: the
2024-25 rows (``block="2024-25"``, kept as history) and the 2026 generation
(``block="2026"``: the models transformers 5.24 holds that supersede or extend them).

Every row names the repository, file and function that apply the encoding, and where
its numbers come from (``numbers``): ``"code"`` when they are the defaults of the
model's configuration class in Hugging Face transformers 5.24 (the golden scripts
``tests/golden/make_rope_deployed_golden.py`` and ``make_models_2026_golden.py`` read
them there, and ``tests/test_rope_deployed.py`` checks this table against them);
``"checkpoint"`` when they are set by the released checkpoint's ``config.json`` (as
published; not downloaded by the course), in which case the test checks that the
model's own function, fed these numbers, gives the same frequencies as
``rope_inv_freq``; ``"quoted"`` when the numbers are quoted from third parties' copies
of a checkpoint's ``config.json`` that the course could not read itself (the row says
so in its note).

A ``"code"`` row named after a checkpoint prints the configuration class's defaults,
which the checkpoint's own ``config.json`` may override; the fields it names in
``class_defaults`` (``"base"``, ``"scaling"``, ``"QK-norm"``, ``"layers"``) are printed
with "(class default)" so that the table does not pass them off as the checkpoint's.

A 2026 row also carries its layer plan, one letter per layer of the default
configuration (``LEGEND``: ``r``/``R`` RoPE in a sliding-window or full-attention layer,
``n``/``N`` no RoPE, ``L`` no attention), its window, sinks, output gate, indexer and
query temperature; the golden script records the same facts from a small model of the
same class with the default number of layers, and the tests compare them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# one implementation each, in the library's encodings (the names stay here too)
from ..encodings.inkling import content_relative_bias  # noqa: F401
from ..encodings.lerope import learned_log_scale  # noqa: F401
from ..encodings.rope_scaling import rope_inv_freq

__all__ = [
    "MLA_DEEPSEEK_V3",
    "LEGEND",
    "RopeSpec",
    "DeployedModel",
    "DEPLOYED_MODELS",
    "SOURCE_LINES",
    "spec_inv_freq",
    "layer_plan",
    "describe_plan",
    "log_floor_scale",
    "power_scale",
    "learned_log_scale",
    "content_relative_bias",
    "model_table",
    "model_block",
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
    # the model's own name for this kind of layer (its rotary class keeps one table
    # per name: "full_attention", "sliding_attention", "main", ...); None: one table
    layer_type: str | None = None
    # the frequencies are inv_freq * exp(alpha), alpha a learned vector (d/2,)
    learned_freq: bool = False
    # interleaved multimodal RoPE on text: pairs (t, h, w, t, h, w, ...) with these
    # numbers of pairs per axis
    mrope_section: tuple[int, ...] | None = None


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
    block: str = "2024-25"  # "2024-25" (history) or "2026"
    module: str = ""  # the transformers module (models/<module>/)
    plan: str = ""  # one letter per layer of the default configuration (LEGEND)
    window: int | None = None  # keys a sliding-window query sees, itself included
    sinks: str = ""  # which layers have learned sink logits ("" none)
    gate: str = ""  # the sigmoid output gate ("" none)
    indexer: str = ""  # which layers select keys with an indexer ("" none)
    temperature: str = ""  # the query temperature, and on which layers ("" none)


LEGEND = {
    "R": "full attention, RoPE",
    "r": "sliding window, RoPE",
    "N": "full attention, no RoPE",
    "n": "sliding window, no RoPE",
    "L": "no attention (recurrent or linear attention, or an MLP block)",
}


def layer_plan(
    unit: str, n: int, *, from_last: bool = False, at: dict[int, str] | None = None
) -> str:
    """A layer plan of ``n`` letters: ``unit`` repeated from the first layer (or, with
    ``from_last``, aligned on the last), then the letters ``at`` puts at given
    layers. ``layer_plan("rrrN", 6, from_last=True) == "rNrrrN"``."""
    if not unit or set(unit) - set(LEGEND):
        raise ValueError(f"unit must be letters of {sorted(LEGEND)}, got {unit!r}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    shift = (-n) % len(unit) if from_last else 0
    letters = [unit[(i + shift) % len(unit)] for i in range(n)]
    for i, letter in (at or {}).items():
        if not -n <= i < n or letter not in LEGEND:
            raise ValueError(f"at: layer {i} / letter {letter!r} out of range")
        letters[i] = letter
    return "".join(letters)


def describe_plan(plan: str) -> str:
    """A layer plan in words: ``"rrrNrrrNrrrN"`` -> ``"12 layers: 9 r, 3 N; N every
    4th layer from layer 3"``: the counts, the period of the rarer letter (seen at
    least three times) and the layers that break it (at most two);
    ``"RRR"`` -> ``"3 layers, all R"``."""
    n = len(plan)
    kinds = [c for c in LEGEND if c in plan]
    if len(kinds) == 1:
        return f"{n} layers, all {kinds[0]}"
    counts = ", ".join(f"{plan.count(c)} {c}" for c in kinds)
    best = None
    if len(kinds) == 2:
        rare, common = sorted(kinds, key=plan.count)
        for p in range(2, 9):
            for first in range(2 * p):
                want = [
                    rare if i >= first and (i - first) % p == 0 else common
                    for i in range(n)
                ]
                if want.count(rare) < 3:
                    continue
                off = [i for i in range(n) if want[i] != plan[i]]
                if len(off) <= 2 and (best is None or (len(off), p) < best[0]):
                    best = ((len(off), p), p, first, off)
    if best is None:
        return f"{n} layers: {counts}"
    _, p, first, off = best
    nth = {2: "2nd", 3: "3rd"}.get(p, f"{p}th")
    text = f"{n} layers: {counts}; {rare} every {nth} layer from layer {first}"
    if off:
        text += "; except " + ", ".join(f"layer {i}: {plan[i]}" for i in off)
    return text


_ROWS_2024_25: tuple[DeployedModel, ...] = (
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
        "one base at the class default; a rope_scaling applies to full layers only. "
        "Third-party repositories quote the released configs (Olmo-3-7B-Think, "
        "Olmo-3.1-32B-Think) as adding YaRN x8 from 8192, attention factor 1.208, "
        "which Olmo3Config gives the full-attention layers only; the course could not "
        "read the checkpoints' own config.json",
        class_defaults=("base", "scaling"),
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


def _row(name, checkpoint, module, specs, plan, qk_norm, source, **kw):
    """A 2026 row: numbers from the configuration class (``"code"``) unless given."""
    numbers = kw.pop("numbers", "code")
    note = kw.pop("note", "")
    return DeployedModel(
        name,
        checkpoint,
        specs,
        "",
        qk_norm,
        f"{HF} models/{module}/{source}",
        numbers,
        note,
        block="2026",
        module=module,
        plan=plan,
        **kw,
    )


_YARN = {"beta_fast": 32.0, "beta_slow": 1.0}
_MISTRAL_TEMPERATURE = (
    "every query x 1 + 0.1 log(1 + floor(p / {l0})) (get_llama_4_attn_scale)"
)

_ROWS_2026: tuple[DeployedModel, ...] = (
    _row(
        "GLM-5.x",
        "zai-org/GLM-5",
        "glm_moe_dsa",
        (RopeSpec("MLA rope part", 64, 10000.0, layout="interleaved"),),
        layer_plan("R", 78),
        "none (RMSNorm on the latents)",
        "modeling_glm_moe_dsa.py GlmMoeDsaAttention, GlmMoeDsaIndexer",
        indexer="every layer (DeepSeek Sparse Attention); its keys rotated too, "
        "interleaved",
        class_defaults=("base",),
        note="supersedes GLM-4.5: MLA with a 64-coordinate rotated part",
    ),
    _row(
        "GLM-5.3-Flash",
        "zai-org/GLM-5.3-Flash",
        "glm5_next",
        (),
        layer_plan("LLLN", 45),
        "none (RMSNorm on the latents)",
        "configuration_glm5_next.py Glm5NextTextConfig (qk_rope_head_dim = 0, line "
        "113); modeling_glm5_next.py Glm5NextTextAttention",
        indexer="every MLA layer: keys pooled in groups of 16, with a learned "
        "position table inside each group (index_kpool_compress_ape)",
        note="no RoPE anywhere: 3 Kimi-Delta-Attention layers to 1 MLA layer; the "
        "configuration refuses qk_rope_head_dim > 0",
    ),
    _row(
        "Qwen3.5",
        "Qwen/Qwen3.5-27B",
        "qwen3_5",
        (RopeSpec("full", 256, 10000.0, rotary_dim=64, mrope_section=(11, 11, 10)),),
        layer_plan("LLLR", 32),
        "per head",
        "modeling_qwen3_5.py Qwen3_5TextRotaryEmbedding (recomposition_frequencies), "
        "Qwen3_5Attention",
        gate="sigmoid, per coordinate",
        class_defaults=("base",),
        note="supersedes Qwen3-Next: partial 0.25 and, on text too, interleaved "
        "M-RoPE (t, h, w) with 11, 11 and 10 pairs; 3 Gated DeltaNet : 1 attention",
    ),
    _row(
        "Qwen3.5-MoE",
        "Qwen/Qwen3.5-35B-A3B",
        "qwen3_5_moe",
        (RopeSpec("full", 256, 10000.0, rotary_dim=64, mrope_section=(11, 11, 10)),),
        layer_plan("LLLR", 40),
        "per head",
        "modeling_qwen3_5_moe.py Qwen3_5MoeTextRotaryEmbedding, Qwen3_5MoeAttention",
        gate="sigmoid, per coordinate",
        class_defaults=("base",),
    ),
    _row(
        "Ministral 3",
        "mistralai/Ministral-3-8B-Base-2512",
        "ministral3",
        (
            RopeSpec(
                "all",
                128,
                1000000.0,
                "yarn",
                {
                    "factor": 16.0,
                    "original_max_position_embeddings": 16384,
                    **_YARN,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                },
            ),
        ),
        layer_plan("R", 34),
        "none",
        "modeling_ministral3.py Ministral3Attention, get_llama_4_attn_scale",
        temperature=_MISTRAL_TEMPERATURE.format(l0=16384),
        class_defaults=("base", "scaling"),
        note="YaRN's factor on cos and sin is 1 (mscale = mscale_all_dim); the "
        "log-length temperature takes its place",
    ),
    _row(
        "Mistral Small 4",
        "mistralai/Mistral-Small-4-119B-2603",
        "mistral4",
        (
            RopeSpec(
                "MLA rope part",
                64,
                10000.0,
                "yarn",
                {
                    "factor": 128.0,
                    "original_max_position_embeddings": 8192,
                    **_YARN,
                    "mscale": 1.0,
                    "mscale_all_dim": 1.0,
                },
                layout="interleaved",
            ),
        ),
        layer_plan("R", 36),
        "none (RMSNorm on the latents)",
        "modeling_mistral4.py Mistral4Attention, yarn_apply_mscale, "
        "get_llama_4_attn_scale",
        temperature=_MISTRAL_TEMPERATURE.format(l0=8192)
        + "; softmax scale x mscale^2, as DeepSeek-V3",
        class_defaults=("base", "scaling"),
    ),
    _row(
        "Mistral Large 4",
        "mistralai/Mistral-Large-4-1T-A52B",
        "mistral_large4",
        (
            RopeSpec(
                "MLA rope part",
                64,
                10000.0,
                "yarn",
                {
                    "factor": 2048.0,
                    "original_max_position_embeddings": 512,
                    **_YARN,
                    "attention_factor": 1.0,
                },
                layout="interleaved",
                learned_freq=True,
            ),
        ),
        layer_plan("RRRN", 72),
        "none (RMSNorm on the latents)",
        "modeling_mistral_large4.py MistralLarge4TextRotaryEmbedding (alpha), "
        "MistralLarge4TextSoftmaxScaling, MistralLarge4TextAttention",
        indexer="every layer; its keys rotated in the RoPE layers only",
        temperature="every layer (and the indexer): query x a_h log(p + 1) + b_h, "
        "learned per head",
        class_defaults=("base", "scaling"),
        note="YaRN x2048 from a 512-token window, frequencies times exp(alpha) "
        "learned per pair, no RoPE in every fourth layer",
    ),
    _row(
        "Muse Glimmer",
        "meta-models/Muse-Glimmer-30B",
        "muse_glimmer",
        (RopeSpec("sliding", 128, 10000.0),),
        layer_plan("rrrN", 52, from_last=True),
        "scaleless, query x 3.87",
        "modeling_muse_glimmer.py MuseGlimmerTextModel (layer_rope_theta), "
        "MuseGlimmerTextAttention",
        window=2048,
        gate="sigmoid, per coordinate",
        class_defaults=("base",),
        note="Meta's successor to Llama: RoPE on 2048-token sliding layers, none on "
        "every fourth (full) layer counted from the last",
    ),
    _row(
        "Muse Spark",
        "meta-models/Muse-Spark-Open-816B-A42B",
        "muse_spark",
        (RopeSpec("sliding", 64, 500000.0),),
        layer_plan("rrrN", 62, from_last=True),
        "scaleless, query x 5.47",
        "configuration_muse_spark.py MuseSparkTextConfig (lines 133, 176); "
        "modeling_muse_spark.py MuseSparkTextModel, MuseSparkTextAttention",
        window=2048,
        gate="sigmoid, per coordinate",
        class_defaults=("base",),
        note="layer_rope_theta lists a base per layer, 0 for no RoPE; transformers "
        "reads only whether it is 0 (one rotary table, rope_parameters' base)",
    ),
    _row(
        "MiMo-V2-Flash",
        "XiaomiMiMo/MiMo-V2-Flash",
        "mimo_v2_flash",
        (
            RopeSpec(
                "full", 192, 5000000.0, rotary_dim=64, layer_type="full_attention"
            ),
            RopeSpec(
                "sliding", 192, 10000.0, rotary_dim=64, layer_type="sliding_attention"
            ),
        ),
        layer_plan("rrrrrR", 48, at={0: "R"}),
        "none",
        "modeling_mimo_v2_flash.py MiMoV2FlashRotaryEmbedding, MiMoV2FlashAttention; "
        "configuration_mimo_v2_flash.py (sliding_window = sliding_window_size + 1)",
        window=129,
        sinks="sliding layers",
        class_defaults=("base",),
        note="a base and a partial factor (0.334: 64 of 192) per layer type; the "
        "checkpoint's 128-token window is 129 keys with the query",
    ),
    _row(
        "MiniMax-M2",
        "",
        "minimax_m2",
        (RopeSpec("all", 128, 5000000.0),),
        layer_plan("R", 62),
        "whole projection",
        "modeling_minimax_m2.py MiniMaxM2RotaryEmbedding, MiniMaxM2Attention",
        class_defaults=("base", "layers"),
        note="the class default rotates the whole head; the released checkpoints set "
        "a legacy rotary_dim, which MiniMaxM2Config turns into partial_rotary_factor "
        "(its value is not read here)",
    ),
    _row(
        "MiniMax-M3",
        "MiniMaxAI/MiniMax-M3",
        "minimax_m3_vl",
        (RopeSpec("all", 128, 5000000.0),),
        layer_plan("R", 60),
        "per head",
        "modeling_minimax_m3_vl.py MiniMaxM3VLRotaryEmbedding, MiniMaxM3VLAttention",
        indexer="block indexer on the layers a checkpoint marks minimax_m3_sparse "
        "(class default: none)",
        class_defaults=("base", "layers"),
        note="MiniMaxM3VLTextConfig declares rotary_dim = 64, but its rotary class "
        "reads partial_rotary_factor (absent: 1), so the class default rotates all 128",
    ),
    _row(
        "Nemotron-H",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "nemotron_h",
        (),
        "LLNL",
        "none",
        "modeling_nemotron_h.py NemotronHAttention (apply_rotary_pos_emb defined, "
        "never called)",
        class_defaults=("layers",),
        note="Mamba-2 layers carry order; the attention layers are NoPE. The class "
        "default is one block of each kind (Mamba, MoE, attention, MLP); a "
        "checkpoint lists its own",
    ),
    _row(
        "OLMo Hybrid",
        "allenai/Olmo-Hybrid-7B",
        "olmo_hybrid",
        (RopeSpec("full", 128, 10000.0),),
        layer_plan("LLLR", 32),
        "whole projection",
        "modeling_olmo_hybrid.py OlmoHybridModel, OlmoHybridAttention",
        class_defaults=("base", "layers"),
        note="the class default rotates its attention layers; the released "
        "checkpoints set no rope_theta (OlmoHybridModel's own comment), which the "
        "same class runs as NoPE in every layer (checked)",
    ),
    _row(
        "Granite 4.0-H",
        "",
        "granitemoehybrid",
        (),
        "",
        "none",
        "modeling_granitemoehybrid.py GraniteMoeHybridModel "
        "(position_embedding_type), GraniteMoeHybridAttention",
        note="position_embedding_type defaults to None: the attention layers are "
        "NoPE; the class default has no attention layer at all (every layer Mamba), "
        "a checkpoint names its own",
    ),
    _row(
        "Trinity",
        "arcee-ai/Trinity-Mini",
        "afmoe",
        (RopeSpec("sliding", 128, 10000.0),),
        layer_plan("rrrN", 32),
        "per head",
        "modeling_afmoe.py AfmoeAttention (if self.is_local_attention)",
        window=1024,
        gate="sigmoid, per coordinate",
        class_defaults=("base",),
    ),
    _row(
        "Flint",
        "RecursiveSI/flint",
        "flint",
        (RopeSpec("sliding", 128, 10000.0),),
        layer_plan("rNrr", 49, at={0: "N", 48: "N"}),
        "per head",
        "modeling_flint.py FlintAttention (if self.sliding_window is not None)",
        window=513,
        sinks="every layer",
        class_defaults=("base",),
    ),
    _row(
        "Beam",
        "reflection/Beam-1.0-501B-A23B",
        "beam",
        (RopeSpec("sliding", 128, 10000.0, layer_type="sliding_attention"),),
        layer_plan("rrrrrN", 52, at={51: "N"}),
        "per head",
        "modeling_beam.py BeamModel (rope_parameters per layer type, None: NoPE), "
        "compute_attention_scaling, BeamAttention",
        window=512,
        gate="sigmoid, per coordinate, bias per head",
        temperature="full (NoPE) layers: query x (1 + (p + 1) / 2048)^0.1",
        class_defaults=("base",),
    ),
    _row(
        "Kolibri",
        "Aleph-Alpha/Kolibri-1",
        "kolibri1",
        (RopeSpec("sliding", 128, 10000.0),),
        layer_plan("rrrrN", 50),
        "per head",
        "modeling_kolibri1.py Kolibri1Attention (if self.sliding_window is None or "
        "self.is_sliding)",
        window=513,
        class_defaults=("base",),
    ),
    _row(
        "Inkling",
        "thinkingmachines/Inkling",
        "inkling",
        (),
        layer_plan("nnnnnN", 66),
        "per head; score scale 1/d",
        "modeling_inkling.py InklingRelativeLogits (lines 110-133), InklingAttention",
        window=512,
        note="no RoPE at all: a relative bias per distance (up to 1024 tokens, 512 in "
        "sliding layers) mixed from 16 learned profiles by each query's content; "
        "short convolutions on keys and values",
    ),
    _row(
        "DeepSeek-V3.2",
        "deepseek-ai/DeepSeek-V3.2-Exp",
        "deepseek_v32",
        (RopeSpec("MLA rope part", 64, 10000.0, layout="interleaved"),),
        layer_plan("R", 61),
        "none (RMSNorm on the latents)",
        "modeling_deepseek_v32.py DeepseekV32Attention, DeepseekV32Indexer",
        indexer="every layer; its RoPE in the half layout, the attention's interleaved",
        class_defaults=("base", "scaling"),
        note="supersedes DeepSeek-V3 (whose checkpoint adds YaRN x40)",
    ),
    _row(
        "DeepSeek-V4",
        "deepseek-ai/DeepSeek-V4-Flash-Base",
        "deepseek_v4",
        (
            RopeSpec("main", 512, 10000.0, rotary_dim=64, layer_type="main"),
            RopeSpec("compressed", 512, 160000.0, rotary_dim=64, layer_type="compress"),
        ),
        layer_plan("r", 43),
        "per head (unweighted) on queries",
        "modeling_deepseek_v4.py DeepseekV4RotaryEmbedding, DeepseekV4Attention",
        window=128,
        sinks="every layer",
        indexer="every layer: compressed keys (and a sparse indexer in CSA layers)",
        class_defaults=("base", "scaling"),
        note="K = V: the output's rotated slice is de-rotated at the query's position; "
        "compressed keys get their own base",
    ),
    _row(
        "Qwen4-Exp",
        "Qwen/Qwen4-Exp",
        "qwen4_exp",
        (RopeSpec("full", 256, 10000.0),),
        layer_plan("LLLR", 40),
        "per head",
        "modeling_qwen4_exp.py Qwen4ExpTextAttention, Qwen4ExpTextQSAIndexer",
        gate="sigmoid, per coordinate",
        indexer="every attention layer (QSA: blocks of keys averaged)",
        class_defaults=("base",),
    ),
    _row(
        "Kimi K2.6",
        "moonshotai/Kimi-K2.6",
        "kimi_k25",
        (RopeSpec("MLA rope part", 64, 10000.0, layout="interleaved"),),
        layer_plan("R", 61),
        "none (RMSNorm on the latents)",
        "configuration_kimi_k25.py KimiK25Config (text model: deepseek_v3); "
        "deepseek_v3/modeling_deepseek_v3.py DeepseekV3Attention",
        class_defaults=("base", "scaling"),
    ),
    _row(
        "Kimi Linear",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        "kimi_linear",
        (),
        layer_plan("NLLL", 27, at={0: "L"}),
        "none (RMSNorm on the latents)",
        "modeling_kimi_linear.py KimiLinearAttention (no rotary call)",
        note="MLA layers without RoPE; Kimi Delta Attention carries order",
    ),
    DeployedModel(
        "Intern-S1-Pro (FoPE)",
        "internlm/Intern-S1-Pro",
        (RopeSpec("all", 128, 5000000.0),),
        "all full",
        "per head",
        "internlm/Intern-S1-Pro remote code (copy: muyaostudio/intern-s1-pro-vs-"
        "qwen3-235b-a22b) modeling_interns1_pro.py InternS1ProMoeTextFourierEmbedding",
        "checkpoint",
        "FoPE, not in transformers 5.24: the frequencies with a period shorter than "
        "262144 tokens (45 of 64) mixed by learned matrices per key head; checked "
        "against its remote code run at a small size",
        block="2026",
    ),
    DeployedModel(
        "Qwen2.5-1M (DCA)",
        "Qwen/Qwen2.5-7B-Instruct-1M",
        (RopeSpec("all", 128, 10000000.0),),
        "all full",
        "none",
        "vllm-project/vllm vllm/model_executor/layers/rotary_embedding/"
        "dual_chunk_rope.py DualChunkRotaryEmbedding",
        "quoted",
        "Dual Chunk Attention, not in transformers 5.24: served by vLLM from the "
        "config's dual_chunk_attention_config (chunk 262144, local 8192, quoted by "
        "third parties, not read from the checkpoint); positions checked against "
        "vLLM's code",
        block="2026",
    ),
)

DEPLOYED_MODELS: tuple[DeployedModel, ...] = _ROWS_2024_25 + _ROWS_2026

# lines of transformers 5.24 the chapter cites by number: (file under models/, line)
# -> the line, stripped (tests/test_rope_deployed.py checks them against the golden)
SOURCE_LINES = {
    ("glm5_next/configuration_glm5_next.py", 113): "qk_rope_head_dim: int = 0",
    ("qwen3_5/modeling_qwen3_5.py", 152): (
        'self.mrope_section = config.rope_parameters.get("mrope_section", [11, 11, 10])'
    ),
    ("mistral_large4/modeling_mistral_large4.py", 96): "self.alpha = nn.Parameter(",
    ("mistral_large4/modeling_mistral_large4.py", 123): (
        "* self.alpha.to(device=x.device, dtype=torch.float).exp()"
    ),
    ("mistral_large4/configuration_mistral_large4.py", 156): (
        "int((layer_idx + 1) % no_rope_layer_interval != 0) for layer_idx in "
        "range(self.num_hidden_layers)"
    ),
    (
        "muse_spark/configuration_muse_spark.py",
        133,
    ): "sliding_window: int | None = 2048",
    ("muse_spark/configuration_muse_spark.py", 176): (
        "0 if (self.num_hidden_layers - 1 - i) % 4 == 0 else "
        'self.rope_parameters["rope_theta"]'
    ),
    ("inkling/modeling_inkling.py", 110): "class InklingRelativeLogits(nn.Module):",
    ("ministral3/modeling_ministral3.py", 106): (
        "scaling = 1 + beta * torch.log(1 + torch.floor(positions_ids / "
        "max_position_embeddings))"
    ),
    ("mimo_v2_flash/configuration_mimo_v2_flash.py", 132): (
        'self.sliding_window = kwargs["sliding_window_size"] + 1'
    ),
}


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


# ---- the query temperatures of the 2026 rows (checked against the models' functions
# in tests/test_rope_deployed.py); p: integer positions (any shape) -> factors


def _positions(p: torch.Tensor) -> torch.Tensor:
    if not isinstance(p, torch.Tensor) or p.is_floating_point() or p.is_complex():
        raise TypeError(f"p must be a tensor of integer positions, got {p!r}")
    if p.numel() and int(p.min()) < 0:
        raise ValueError(f"p must be >= 0, got a minimum of {int(p.min())}")
    return p


def log_floor_scale(
    p: torch.Tensor, beta: float, length: int, offset: int = 0
) -> torch.Tensor:
    """``1 + beta * log(1 + floor((p + offset) / length))``: Ministral 3 and Mistral
    Small 4 (``offset = 0``, ``length`` the YaRN window L0, every query); Llama 4
    (``offset = 1``, ``length`` = floor_scale, NoPE layers only)."""
    p = _positions(p)
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    # s(p) = 1 + beta log(1 + floor((p + offset) / L))
    return 1 + beta * torch.log1p(torch.div(p + offset, length, rounding_mode="floor"))


def power_scale(p: torch.Tensor, length: int = 2048, power: float = 0.1):
    """``(1 + (p + 1) / length) ** power``: Beam's NoPE layers
    (``compute_attention_scaling``, ``exp(0.1 log1p((p + 1) / 2048))``)."""
    p = _positions(p)
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    # s(p) = (1 + (p + 1) / L)^power
    return (1 + (p + 1) / length) ** power


# ---- the table, printed

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
        l0 = spec.params.get("original_max_position_embeddings")
        if l0:
            what += f" from {l0}"
    if spec.layout != "half":
        what += f", {spec.layout}"
    if spec.mrope_section:
        what += ", M-RoPE (t, h, w) " + "/".join(map(str, spec.mrope_section))
    if spec.learned_freq:
        what += ", learned x exp(alpha)"
    default = CLASS_DEFAULT if base_is_class_default else ""
    return f"{spec.layers}: {what}, base {spec.base:g}{default}"


def _marked(m: DeployedModel, field_name: str, text: str) -> str:
    return text + (CLASS_DEFAULT if field_name in m.class_defaults else "")


def model_table(block: str | None = None) -> list[dict[str, str]]:
    """One row per model (of ``block``, "2024-25" or "2026", or both): name, block,
    encoding per kind of layer, layers, window, QK-norm, sinks, gate, indexer, query
    temperature, source and where the numbers come from; a field that is the
    configuration class's default (``class_defaults``) says so."""
    if block not in (None, "2024-25", "2026"):
        raise ValueError(f"block must be None, '2024-25' or '2026', got {block!r}")
    rows = []
    for m in DEPLOYED_MODELS:
        if block is not None and m.block != block:
            continue
        encoding = "; ".join(_encoding(s, "base" in m.class_defaults) for s in m.specs)
        if not m.specs:
            encoding = "no RoPE"
        elif "scaling" in m.class_defaults and all(s.scaling is None for s in m.specs):
            encoding += "; no scaling" + CLASS_DEFAULT
        layers = describe_plan(m.plan) if m.plan else m.pattern
        rows.append(
            {
                "model": m.name,
                "block": m.block,
                "encoding": encoding,
                "layers": _marked(m, "layers", layers) if layers else "",
                "window": "" if m.window is None else f"{m.window} keys",
                "QK-norm": _marked(m, "QK-norm", m.qk_norm),
                "sinks": m.sinks,
                "gate": m.gate,
                "indexer": m.indexer,
                "temperature": m.temperature,
                "note": m.note,
                "source": m.source.replace(f"{HF} ", ""),
                "numbers": m.numbers,
            }
        )
    return rows


def model_block(row: dict[str, str], width: int = 60) -> str:
    """One row of ``model_table`` as a block of short lines (``width`` columns, so
    that it reads on a phone): the name and where its numbers come from, then one
    labelled line per non-empty field."""
    import textwrap

    head = f"{row['model']}  [{row['numbers']}]"
    lines = [head]
    for key in (
        "encoding",
        "layers",
        "window",
        "QK-norm",
        "sinks",
        "gate",
        "indexer",
        "temperature",
        "note",
        "source",
    ):
        if row.get(key):
            lines += textwrap.wrap(
                row[key],
                width,
                initial_indent=f"  {key}: ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            )
    return "\n".join(lines)

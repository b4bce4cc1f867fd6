"""Position in the models of 2023-2026, and the toy mechanisms of the future chapter.

Shape letters: b batch, h heads, i/j query/key positions, n length, d head dim.

* ``MODEL_POSITION``: which layers of a model compute a positional encoding, transcribed
  from the model's code in Hugging Face ``transformers`` (5.24): the attention class,
  the function it calls for position, and the ``if`` that guards the call (``None``:
  every layer calls it; ``"never"``: defined in the file but not called).
  ``tests/test_frontier.py`` checks every row against the installed source when it is
  there, and against ``tests/golden/frontier_transformers.json`` (written from that
  source by ``tests/golden/make_frontier_golden.py``) always.
* ``CONFIG_DEFAULTS``: the configuration defaults the chapter quotes (layer patterns,
  chunk sizes), and ``QUOTED_LINES``, the lines of model code it quotes, checked the
  same way; ``llama4_layers`` and ``smollm3_layers``, the layer lists of
  ``Llama4TextConfig`` and ``SmolLM3Config``, transcribed and compared in the tests
  with the real classes' (golden vectors).
* ``ssmax_weights``: Scalable-Softmax (Nakanishi, 2025), softmax of ``s log n`` times
  the scores, ``n`` the number of keys a query sees.
* ``dca_offsets``: the relative positions Dual Chunk Attention (An et al., 2024) gives
  each query-key pair (``HKUNLP/ChunkLlama``, ``chunkllama_attn_replace.py``; with
  ``chunk_size``, as vLLM's ``DualChunkRotaryEmbedding`` serves Qwen's 1M-token
  checkpoints).
* ``fope_inv_freq``, ``fope_cos_sin``: FoPE as Intern-S1-Pro ships it (the checkpoint's
  remote code, ``InternS1ProMoeTextFourierEmbedding``): the frequencies it keeps and
  the cos and sin it mixes from them; defined in the library
  (``posenc_lib.encodings.fope``, the encoding ``"fope"``) and importable from here.
* ``decay_recurrence``: a linear-attention layer with a scalar decay, run as a
  recurrence (how Mamba-2 / gated DeltaNet style layers carry order without any
  positional encoding).
"""

from __future__ import annotations

import math

import torch

# FoPE lives in the library (one implementation): its two functions stay importable
# from here, documented with the library (pl.fope_inv_freq, pl.fope_cos_sin)
from ..encodings.fope import fope_cos_sin, fope_inv_freq  # noqa: F401

__all__ = [
    "MODEL_POSITION",
    "CONFIG_DEFAULTS",
    "QUOTED_LINES",
    "llama4_layers",
    "smollm3_layers",
    "ssmax_weights",
    "dca_offsets",
    "decay_recurrence",
]

# model -> where its position comes from, read from transformers 5.24's
# models/<module>/modeling_<module>.py: "calls" are the (function, guard) pairs inside
# class "cls" (guard: the condition of the `if` around the call, verbatim, or None; a
# tuple of conditions, innermost first, for nested `if`s); "era": "2022-25" (kept as
# history) or "2026" (the generation transformers 5.24 adds);
# "per_layer": a guard reads an attribute __init__ sets from the layer index, so some
# layers call it and others do not; "defines_rope": the file defines
# apply_rotary_pos_emb (Jamba's is never called); "sigmoid_gate": the class calls
# a sigmoid (in an attention class, an output gate: gated attention; in a recurrent
# layer, its own gates).
MODEL_POSITION = {
    "BLOOM (2022)": dict(
        module="bloom",
        cls="BloomModel",
        calls=[
            ("build_alibi_tensor", None),
            ("_get_alibi_slopes", "attention_mask is None"),
            ("build_alibi_tensor", "not (attention_mask is None)"),
        ],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2022-25",
        layers="ALiBi: one bias, added in every layer",
    ),
    "MPT (2023)": dict(
        module="mpt",
        cls="MptModel",
        calls=[("build_mpt_alibi_tensor", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2022-25",
        layers="ALiBi: one bias, added in every layer",
    ),
    "ModernBERT (2024, encoder)": dict(
        module="modernbert",
        cls="ModernBertAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="every layer (local and global bases differ)",
    ),
    "Jamba (2024)": dict(
        module="jamba",
        cls="JambaAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="none: Mamba layers carry order; attention is NoPE",
    ),
    "Jamba (2024), Mamba layers": dict(
        module="jamba",
        cls="JambaMambaMixer",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="no position: the recurrence orders tokens",
    ),
    "Command R7B / A (2024-25)": dict(
        module="cohere2",
        cls="Cohere2Attention",
        calls=[("apply_rotary_pos_emb", "self.sliding_window is not None")],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="RoPE in sliding-window layers (3 of 4); global: none",
    ),
    "DeepSeek-V3, Kimi K2 (2024-25)": dict(
        module="deepseek_v3",
        cls="DeepseekV3Attention",
        calls=[
            ("apply_rotary_pos_emb_interleave", "self.config.rope_interleave"),
            ("apply_rotary_pos_emb", "not (self.config.rope_interleave)"),
        ],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="every layer (MLA's decoupled rotary part)",
    ),
    "Llama 4 (2025)": dict(
        module="llama4",
        cls="Llama4TextAttention",
        calls=[("apply_rotary_emb", "self.use_rope")],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=False,
        era="2022-25",
        layers="RoPE + 8K chunks in 3 of 4; 4th: NoPE, full, temperature",
    ),
    "Qwen3-MoE (2025)": dict(
        module="qwen3_moe",
        cls="Qwen3MoeAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="every layer",
    ),
    "SmolLM3 (2025)": dict(
        module="smollm3",
        cls="SmolLM3Attention",
        calls=[("apply_rotary_pos_emb", "self.use_rope")],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="RoPE in 3 of 4 layers; 4th: none",
    ),
    "EXAONE 4.0 (2025)": dict(
        module="exaone4",
        cls="Exaone4Attention",
        calls=[
            ("apply_rotary_pos_emb", "self.sliding_window is None or self.is_sliding")
        ],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="RoPE in sliding-window layers (3 of 4); global: none",
    ),
    "gpt-oss (2025)": dict(
        module="gpt_oss",
        cls="GptOssAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2022-25",
        layers="every layer (sliding and full alternate)",
    ),
    "Qwen3-Next (2025)": dict(
        module="qwen3_next",
        cls="Qwen3NextAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2022-25",
        layers="every attention layer (1 of 4, 25% of dims); DeltaNet: none",
    ),
    "Qwen3-Next (2025), DeltaNet layers": dict(
        module="qwen3_next",
        cls="Qwen3NextGatedDeltaNet",
        calls=[],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2022-25",
        layers="3 of 4 layers; no position: recurrence",
    ),
    "Kimi Linear (2025)": dict(
        module="kimi_linear",
        cls="KimiLinearAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2022-25",
        layers="none: MLA layers are NoPE; KDA layers carry order",
    ),
    "Kimi Linear (2025), KDA layers": dict(
        module="kimi_linear",
        cls="KimiLinearDeltaAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=False,
        era="2022-25",
        layers="no position: the recurrence orders tokens",
    ),
    # ---- 2026: the generation transformers 5.24 adds
    "GLM-5.x": dict(
        module="glm_moe_dsa",
        cls="GlmMoeDsaAttention",
        calls=[("apply_rotary_pos_emb_interleave", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2026",
        layers="every layer (MLA's rotated part); its indexer rotates too",
    ),
    "GLM-5.3-Flash": dict(
        module="glm5_next",
        cls="Glm5NextTextAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2026",
        layers="none: MLA layers (1 in 4) are NoPE; KDA layers carry order",
    ),
    "Qwen3.5": dict(
        module="qwen3_5",
        cls="Qwen3_5Attention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="every attention layer (1 of 4; 64 of 256 dims, M-RoPE); DeltaNet: none",
    ),
    "Ministral 3": dict(
        module="ministral3",
        cls="Ministral3Attention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer, and a log-length query temperature",
    ),
    "Mistral Small 4": dict(
        module="mistral4",
        cls="Mistral4Attention",
        calls=[
            ("apply_rotary_pos_emb_interleave", "self.config.rope_interleave"),
            ("apply_rotary_pos_emb", "not (self.config.rope_interleave)"),
        ],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer (MLA), and a log-length query temperature",
    ),
    "Mistral Large 4": dict(
        module="mistral_large4",
        cls="MistralLarge4TextAttention",
        calls=[
            (
                "apply_rotary_pos_emb_interleave",
                ("self.is_kv_shared_layer", "self.use_rope"),
            ),
            (
                "apply_rotary_pos_emb_interleave",
                ("not (self.is_kv_shared_layer)", "self.use_rope"),
            ),
        ],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=False,
        era="2026",
        layers="RoPE (learned frequencies) in 3 of 4 layers; 4th: none",
    ),
    "Muse Glimmer": dict(
        module="muse_glimmer",
        cls="MuseGlimmerTextAttention",
        calls=[("apply_rotary_pos_emb", "position_embeddings is not None")],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="RoPE in 2048-token sliding layers; every 4th (full): none",
    ),
    "Muse Spark": dict(
        module="muse_spark",
        cls="MuseSparkTextAttention",
        calls=[("apply_rotary_pos_emb", "position_embeddings is not None")],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="RoPE in 2048-token sliding layers; every 4th (full) from the last: "
        "none (the model passes None)",
    ),
    "MiMo-V2-Flash": dict(
        module="mimo_v2_flash",
        cls="MiMoV2FlashAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer; a base per layer type, sinks in sliding layers",
    ),
    "MiniMax-M2": dict(
        module="minimax_m2",
        cls="MiniMaxM2Attention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer",
    ),
    "MiniMax-M3": dict(
        module="minimax_m3_vl",
        cls="MiniMaxM3VLAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer",
    ),
    "Nemotron-H": dict(
        module="nemotron_h",
        cls="NemotronHAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="none: Mamba-2 layers carry order; attention is NoPE",
    ),
    "OLMo Hybrid": dict(
        module="olmo_hybrid",
        cls="OlmoHybridAttention",
        calls=[("apply_rotary_pos_emb", "position_embeddings is not None")],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="released checkpoints: none (no rope_theta); DeltaNet carries order",
    ),
    "Granite 4.0-H": dict(
        module="granitemoehybrid",
        cls="GraniteMoeHybridAttention",
        calls=[("apply_rotary_pos_emb", "position_embeddings is not None")],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="by default none (position_embedding_type None); Mamba carries order",
    ),
    "Trinity": dict(
        module="afmoe",
        cls="AfmoeAttention",
        calls=[("apply_rotary_pos_emb", "self.is_local_attention")],
        per_layer=True,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="RoPE in sliding-window layers (3 of 4); global: none",
    ),
    "Flint": dict(
        module="flint",
        cls="FlintAttention",
        calls=[("apply_rotary_pos_emb", "self.sliding_window is not None")],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="RoPE in sliding-window layers; global: none; sinks everywhere",
    ),
    "Beam": dict(
        module="beam",
        cls="BeamAttention",
        calls=[("apply_rotary_pos_emb", "position_embeddings is not None")],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="RoPE in sliding-window layers (5 of 6); global: none, temperature",
    ),
    "Kolibri": dict(
        module="kolibri1",
        cls="Kolibri1Attention",
        calls=[
            ("apply_rotary_pos_emb", "self.sliding_window is None or self.is_sliding")
        ],
        per_layer=True,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="RoPE in sliding-window layers (4 of 5); global: none",
    ),
    "Inkling": dict(
        module="inkling",
        cls="InklingAttention",
        calls=[],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=False,
        era="2026",
        layers="no RoPE: relative logits conditioned on content, every layer",
    ),
    "DeepSeek-V3.2": dict(
        module="deepseek_v32",
        cls="DeepseekV32Attention",
        calls=[("apply_rotary_pos_emb_interleave", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer (MLA's rotated part); its indexer rotates too",
    ),
    "DeepSeek-V4": dict(
        module="deepseek_v4",
        cls="DeepseekV4Attention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=False,
        defines_rope=True,
        era="2026",
        layers="every layer (64 of 512 dims; compressed keys: own base)",
    ),
    "Qwen4-Exp": dict(
        module="qwen4_exp",
        cls="Qwen4ExpTextAttention",
        calls=[("apply_rotary_pos_emb", None)],
        per_layer=False,
        sigmoid_gate=True,
        defines_rope=True,
        era="2026",
        layers="every attention layer (1 of 4); DeltaNet: none",
    ),
}


# (module, setting) -> its default in transformers 5.24's configuration_<module>.py,
# the numbers the chapter quotes about layer patterns ("kimi_k2 text model": the
# model type that Kimi K2.5's configuration substitutes for a "kimi_k2" text model).
CONFIG_DEFAULTS = {
    ("llama4", "no_rope_layer_interval"): 4,
    ("llama4", "attention_chunk_size"): 8192,
    ("llama4", "floor_scale"): 8192,
    ("llama4", "attn_scale"): 0.1,
    ("smollm3", "no_rope_layer_interval"): 4,
    ("cohere2", "sliding_window_pattern"): 4,
    ("exaone4", "sliding_window_pattern"): 4,
    ("qwen3_next", "full_attention_interval"): 4,
    ("qwen3_next", "partial_rotary_factor"): 0.25,
    ("deepseek_v3", "qk_rope_head_dim"): 64,
    ("kimi_k25", "kimi_k2 text model"): "deepseek_v3",
    # the 2026 rows
    ("glm5_next", "qk_rope_head_dim"): 0,
    ("mistral_large4", "no_rope_layer_interval"): 4,
    ("muse_spark", "sliding_window"): 2048,
    ("muse_glimmer", "sliding_window"): 2048,
    ("mimo_v2_flash", "sliding_window"): 129,
    ("afmoe", "global_attn_every_n_layers"): 4,
    ("afmoe", "sliding_window"): 1024,
    ("flint", "sliding_window"): 513,
    ("beam", "sliding_window"): 512,
    ("kolibri1", "sliding_window"): 513,
    ("inkling", "rel_extent"): 1024,
    ("inkling", "sliding_window_size"): 512,
    ("granitemoehybrid", "position_embedding_type"): None,
}


# module -> lines of transformers 5.24's modeling_<module>.py that the chapter quotes,
# verbatim (leading spaces stripped): the sink column of gpt-oss, the output gate of
# Qwen3-Next, the temperature of Llama 4's NoPE layers.
QUOTED_LINES = {
    "gpt_oss": [
        "combined_logits = torch.cat([attn_weights, sinks], dim=-1)",
        "scores = probs[..., :-1]  # we drop the sink here",
    ],
    "qwen3_next": ["attn_output = attn_output * torch.sigmoid(gate)"],
    "llama4": [
        "if self.attn_temperature_tuning and not self.use_rope:",
        "torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale))"
        " * self.attn_scale + 1.0",
    ],
    # 2026: where the model, not the attention class, decides a layer is NoPE
    "muse_spark": [
        "position_embeddings=position_embeddings if self.config.layer_rope_theta[i] "
        "else None,",
    ],
    "olmo_hybrid": ["# Released ckpt don't use any ROPE and have  it set to `None`"],
    "beam": [
        "return torch.exp(0.1 * torch.log1p((position_ids.float() + 1) / 2048))"
        "[:, None, :, None]",
    ],
    "inkling": ["rel_logits = (relative_states @ self.proj).transpose(1, 2)"],
}


def llama4_layers(n_layers: int, interval: int, attention_chunk_size: int | None):
    """``Llama4TextConfig.__post_init__`` (transformers 5.24), transcribed: the
    default ``no_rope_layers`` (1 = RoPE) and ``layer_types``. The tests compare it
    with the class itself (``tests/golden/frontier_transformers.json``)."""
    no_rope_layers = [int((i + 1) % interval != 0) for i in range(n_layers)]
    layer_types = [
        "chunked_attention"
        if no_rope and attention_chunk_size is not None
        else "full_attention"
        for no_rope in no_rope_layers
    ]
    return no_rope_layers, layer_types


def smollm3_layers(
    n_layers: int,
    interval: int,
    use_sliding_window: bool = False,
    sliding_window: int | None = None,
):
    """``SmolLM3Config.__post_init__`` (transformers 5.24), transcribed: the default
    ``no_rope_layers`` (1 = RoPE) and ``layer_types``; compared in the tests with the
    class itself."""
    no_rope_layers = [int((i + 1) % interval != 0) for i in range(n_layers)]
    layer_types = []
    for i in range(n_layers):
        has_rope = no_rope_layers[i]
        if use_sliding_window and sliding_window is not None and not has_rope:
            layer_types.append("sliding_attention")
        else:
            layer_types.append("full_attention")
    return no_rope_layers, layer_types


def ssmax_weights(scores: torch.Tensor, s: float, causal: bool = True) -> torch.Tensor:
    """Scalable-Softmax: ``softmax(s * log(n_i) * scores)`` over the keys, where
    ``n_i`` is the number of keys query ``i`` sees (``i + 1`` under a causal mask,
    all ``n`` otherwise). ``scores`` ``(..., i, j)`` -> weights ``(..., i, j)``."""
    if not (isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0):
        raise ValueError(f"s must be a positive number, got {s!r}")
    if scores.dim() < 2:
        raise ValueError(
            f"scores must have shape (..., i, j), got {tuple(scores.shape)}"
        )
    n_q, n_k = scores.shape[-2:]
    if causal and n_q != n_k:
        raise ValueError(f"causal scores must be square, got {(n_q, n_k)}")
    if causal:
        seen = torch.arange(1, n_q + 1, dtype=scores.dtype)[:, None]  # (i, 1)
    else:
        seen = torch.full((n_q, 1), float(n_k), dtype=scores.dtype)
    # z -> s log(n) z, then the ordinary softmax
    logits = s * torch.log(seen) * scores  # (..., i, j)
    if causal:
        keep = torch.ones(n_q, n_k, dtype=torch.bool).tril()
        logits = logits.masked_fill(~keep, float("-inf"))
    return torch.softmax(logits, dim=-1)


def dca_offsets(
    n: int,
    pretrain_len: int,
    local_window: int | None = None,
    chunk_size: int | None = None,
):
    """Dual Chunk Attention's relative position for each pair ``(i, j)``, ``j <= i``
    ``(n, n)`` long (``-1`` above the diagonal), as ChunkLlama computes it.

    chunk_size = 3/4 of the pretraining length (unless given, as vLLM's
    ``dual_chunk_attention_config`` gives it), local window w (default 1/16 of the
    pretraining length), chunk length s = chunk_size - w; keys sit at ``j mod s``; a
    query at ``i`` is at ``i mod s`` for its own chunk, ``min(i mod s + s,
    chunk_size)`` for the previous chunk, and ``chunk_size`` for every earlier
    chunk."""
    for name, v in (("n", n), ("pretrain_len", pretrain_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if chunk_size is None:
        chunk_size = pretrain_len * 3 // 4
    elif (
        not isinstance(chunk_size, int)
        or isinstance(chunk_size, bool)
        or not 1 <= chunk_size <= pretrain_len
    ):
        raise ValueError(
            f"chunk_size must be an int in [1, {pretrain_len}], got {chunk_size!r}"
        )
    w = pretrain_len // 16 if local_window is None else local_window
    if not isinstance(w, int) or not 0 <= w < chunk_size:
        raise ValueError(f"local_window must be an int in [0, {chunk_size}), got {w!r}")
    s = chunk_size - w
    i = torch.arange(n)[:, None]  # (i, 1)
    j = torch.arange(n)[None, :]  # (1, j)
    ci, cj = i // s, j // s  # chunk of the query, chunk of the key
    q_intra = i % s
    q_succ = (i % s + s).clamp(max=chunk_size)
    q_inter = torch.full_like(i, chunk_size)
    q_pos = torch.where(ci == cj, q_intra, torch.where(ci == cj + 1, q_succ, q_inter))
    offsets = q_pos - j % s  # (i, j)
    return torch.where(j <= i, offsets, torch.full_like(offsets, -1))


def decay_recurrence(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor
) -> torch.Tensor:
    """A linear-attention layer with a per-step scalar decay, as a recurrence:
    ``S_t = a_t S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t``. ``q, k`` ``(b, h, n, d)``,
    ``v`` ``(b, h, n, e)``, ``log_a`` ``(b, h, n)`` (``<= 0``) -> ``(b, h, n, e)``.

    Unrolled, ``o_t = sum_{j<=t} (prod_{m=j+1..t} a_m) (q_t . k_j) v_j``: the decay
    weighs keys by distance with no positional encoding anywhere."""
    if q.shape != k.shape or q.dim() != 4:
        raise ValueError(
            f"q and k must share a (b, h, n, d) shape, got {q.shape}, {k.shape}"
        )
    if v.shape[:3] != q.shape[:3] or log_a.shape != q.shape[:3]:
        raise ValueError("v must be (b, h, n, e) and log_a (b, h, n) with q's b, h, n")
    if (log_a > 0).any():
        raise ValueError("log_a must be <= 0 (a decay a_t = exp(log_a) in (0, 1])")
    b, h, n, d = q.shape
    state = q.new_zeros(b, h, d, v.shape[-1])  # (b, h, d, e)
    out = []
    for t in range(n):
        # S_t = a_t S_{t-1} + k_t v_t^T
        state = torch.exp(log_a[..., t])[..., None, None] * state + torch.einsum(
            "bhd,bhe->bhde", k[:, :, t], v[:, :, t]
        )
        # o_t = S_t^T q_t
        out.append(torch.einsum("bhde,bhd->bhe", state, q[:, :, t]))
    return torch.stack(out, dim=2)

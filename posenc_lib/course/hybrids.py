"""Which layers rotate in the hybrids of 2025-2026, transcribed from Hugging Face
transformers 5.24 for book/part7/nope_sinks.ipynb.

A pattern is one letter per layer, layer 0 first:

* ``R`` attention with RoPE over the whole context; ``N`` attention without RoPE over
  the whole context (or, for DSA layers, over the keys an indexer selects from it);
* ``W`` attention with RoPE in a sliding window; ``w`` without RoPE in a window;
* ``C`` attention with RoPE inside chunks (Llama 4);
* ``S`` a recurrent layer (Mamba-2, gated DeltaNet, KDA): no attention, no RoPE;
* ``-`` a feed-forward layer alone (Nemotron-H gives MLP and MoE layers their own
  index).

Each function builds the pattern the way the model's configuration class builds its
``layer_types`` (and ``no_rope_layers`` or ``layer_rope_theta``) and the way its
modeling code decides to rotate; its docstring names both lines. ``HYBRIDS_2026`` is
the chapter's table. ``tests/test_nope_sinks_2026.py`` compares every function with the
configuration classes at several depths and with tiny models run through the models'
own code (``tests/golden/hybrids_2026.json``, from
``tests/golden/make_hybrids_2026_golden.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ..utils import check_positive_int

__all__ = [
    "LETTERS",
    "Hybrid",
    "HYBRIDS_2026",
    "llama4",
    "mistral_large4",
    "muse",
    "trinity",
    "flint",
    "beam",
    "kolibri",
    "nemotron_h",
    "olmo_hybrid",
    "granite_4_h",
    "glm5_flash",
    "inkling",
    "granite_swa",
    "all_rope",
    "rotating",
    "attending",
    "without_rope",
    "MISTRAL_ROPE",
    "mistral_large4_scale",
    "beam_scale",
]

LETTERS = {
    "R": "attention, RoPE, full",
    "N": "attention, no RoPE, full",
    "W": "attention, RoPE, window",
    "w": "attention, no RoPE, window",
    "C": "attention, RoPE, chunk",
    "S": "recurrent, no attention",
    "-": "feed-forward only",
}


def _layers(n_layers: int) -> range:
    return range(check_positive_int(n_layers, "n_layers"))


def llama4(n_layers: int) -> str:
    """Llama 4: ``no_rope_layers = [int((l + 1) % 4 != 0) ...]`` (1 = RoPE), and the
    RoPE layers chunked (``configuration_llama4.py:169-190``); ``if self.use_rope``
    (``modeling_llama4.py:350``)."""
    return "".join("N" if (l + 1) % 4 == 0 else "C" for l in _layers(n_layers))


def mistral_large4(n_layers: int) -> str:
    """Mistral Large 4: ``no_rope_layers = [int((l + 1) % 4 != 0) ...]``
    (``configuration_mistral_large4.py:155-157``); ``if self.use_rope``
    (``modeling_mistral_large4.py:340, 432``). Every layer is DSA attention."""
    return "".join("N" if (l + 1) % 4 == 0 else "R" for l in _layers(n_layers))


def muse(n_layers: int) -> str:
    """Muse Spark and Muse Glimmer: full attention and ``layer_rope_theta = 0`` where
    ``(n_layers - 1 - l) % 4 == 0``, every fourth layer counted from the last; sliding
    windows elsewhere (``configuration_muse_spark.py:167, 176``); the model hands a
    layer no rotation when its theta is 0 (``modeling_muse_spark.py:645``)."""
    return "".join(
        "N" if (n_layers - 1 - l) % 4 == 0 else "W" for l in _layers(n_layers)
    )


def trinity(n_layers: int) -> str:
    """Arcee's Trinity (``afmoe``): sliding where ``(l + 1) % 4`` is not 0
    (``configuration_afmoe.py:108``); rotates ``if self.is_local_attention``
    (``modeling_afmoe.py:360``)."""
    return "".join("N" if (l + 1) % 4 == 0 else "W" for l in _layers(n_layers))


def flint(n_layers: int) -> str:
    """Flint: full attention ``if l < 2 or l % 4 == 1 or l == n_layers - 1``
    (``configuration_flint.py:106``); rotates ``if self.sliding_window is not None``
    (``modeling_flint.py:283``)."""
    full = lambda l: l < 2 or l % 4 == 1 or l == n_layers - 1  # noqa: E731
    return "".join("N" if full(l) else "W" for l in _layers(n_layers))


def beam(n_layers: int) -> str:
    """Beam: full attention where ``(l + 1) % 6 == 0`` and in the last layer
    (``configuration_beam.py:115-117``), whose ``rope_parameters`` are ``None``
    (``:127``): no rotation (``modeling_beam.py:562``)."""
    full = lambda l: (l + 1) % 6 == 0 or l == n_layers - 1  # noqa: E731
    return "".join("N" if full(l) else "W" for l in _layers(n_layers))


def kolibri(n_layers: int) -> str:
    """Aleph Alpha's Kolibri (``kolibri1``): full attention where ``(l + 1) % 5 == 0``
    (``configuration_kolibri1.py:101``); rotates ``if self.sliding_window is None or
    self.is_sliding`` (``modeling_kolibri1.py:184``)."""
    return "".join("N" if (l + 1) % 5 == 0 else "W" for l in _layers(n_layers))


def nemotron_h(n_layers: int = 4) -> str:
    """Nemotron-H: the class's default ``layers_block_type``, Mamba-2, MoE, attention,
    MLP (``configuration_nemotron_h.py:176``); its depth is the pattern's length, so
    ``n_layers`` must be 4. ``NemotronHAttention.forward`` calls no rotation
    (``modeling_nemotron_h.py:889-921``)."""
    if n_layers != 4:
        raise ValueError(
            f"n_layers must be 4, the length of Nemotron-H's default pattern (a "
            f"checkpoint sets its own layers_block_type), got {n_layers!r}"
        )
    return "S-N-"


def olmo_hybrid(n_layers: int, rope_theta: bool = True) -> str:
    """OLMo Hybrid: attention where ``l % 4 == 3`` (the last layer if none),
    gated DeltaNet elsewhere (``configuration_olmo_hybrid.py:121-129``); a rotary
    embedding only when ``rope_parameters`` has a ``rope_theta``, which the class's
    default has and, says the code's comment, the released checkpoints do not
    (``modeling_olmo_hybrid.py:895-900, 218``)."""
    attention = "R" if rope_theta else "N"
    layers = [attention if l % 4 == 3 else "S" for l in _layers(n_layers)]
    if attention not in layers:
        layers[-1] = attention
    return "".join(layers)


def granite_4_h(n_layers: int, attention: tuple[int, ...] = (), rope: bool = False):
    """Granite 4.0-H (``granitemoehybrid``): Mamba-2 in every layer the checkpoint does
    not list as attention; the class's default lists none
    (``configuration_granitemoehybrid.py:116``). Attention rotates only with
    ``position_embedding_type == "rope"``, whose default is ``None``
    (``modeling_granitemoehybrid.py:1057, 167``)."""
    layers = _layers(n_layers)
    if any(l not in layers for l in attention):
        raise ValueError(
            f"attention must list layers in 0 .. {n_layers - 1}, got {attention!r}"
        )
    return "".join(("R" if rope else "N") if l in attention else "S" for l in layers)


def glm5_flash(n_layers: int) -> str:
    """GLM-5.3-Flash (``glm5_next``): KDA where ``l % 4 != 3``, MLA with DSA elsewhere
    (``configuration_glm5_next.py:164-167``), ``qk_rope_head_dim = 0`` (``:113``) and
    ``position_embeddings=None`` for every layer (``modeling_glm5_next.py:1514``)."""
    return "".join("N" if l % 4 == 3 else "S" for l in _layers(n_layers))


def inkling(n_layers: int) -> str:
    """Inkling: sliding windows where ``(l + 1) % 6`` is not 0
    (``configuration_inkling.py:162``), no rotation anywhere: each layer adds its own
    content-conditioned relative logits (``modeling_inkling.py:110-133, 186-206``)."""
    return "".join("N" if (l + 1) % 6 == 0 else "w" for l in _layers(n_layers))


def granite_swa(n_layers: int, layer_rope_theta: list[float] | None = None) -> str:
    """Granite SWA (``granite_swa``): full attention where ``l % 4 == 0``, windows
    elsewhere; a per-layer ``layer_rope_theta`` where 0 means no RoPE, the global
    theta everywhere by default (``configuration_granite_swa.py:104-116``); one rotary
    embedding per distinct non-zero theta (``modeling_granite_swa.py:395, 456``)."""
    layers = _layers(n_layers)
    thetas = [1.0] * n_layers if layer_rope_theta is None else list(layer_rope_theta)
    if len(thetas) != n_layers:
        raise ValueError(
            f"layer_rope_theta must have one entry per layer ({n_layers}), got "
            f"{len(thetas)}"
        )
    letter = {(True, True): "R", (True, False): "N", (False, True): "W"}
    return "".join(letter.get((l % 4 == 0, bool(thetas[l])), "w") for l in layers)


def all_rope(n_layers: int) -> str:
    """Ministral 3 and Mistral Small 4: every layer rotates (``Ministral3Attention``
    and ``Mistral4Attention`` call the rotation unconditionally)."""
    return "R" * len(_layers(n_layers))


def rotating(pattern: str) -> list[int]:
    """The layers of a pattern that rotate."""
    return [l for l, c in enumerate(pattern) if c in "RWC"]


def attending(pattern: str) -> list[int]:
    """The layers of a pattern that hold attention."""
    return [l for l, c in enumerate(pattern) if c in "RNWwC"]


def without_rope(pattern: str) -> list[int]:
    """The attention layers of a pattern that do not rotate."""
    return [l for l, c in enumerate(pattern) if c in "Nw"]


# the defaults of rope_parameters (configuration_ministral3.py:95-106,
# configuration_mistral4.py:112-124, configuration_mistral_large4.py:143-151):
# model -> (original_max_position_embeddings, llama_4_scaling_beta or None, YaRN factor)
MISTRAL_ROPE = {
    "Ministral 3": (16384, 0.1, 16.0),
    "Mistral Small 4": (8192, 0.1, 128.0),
    "Mistral Large 4": (512, None, 2048.0),
}


def mistral_large4_scale(
    pos: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Mistral Large 4's learned query factor, per head h and position p, in every
    layer: ``scale_h * log(p + 1) + bias_h`` (``MistralLarge4TextSoftmaxScaling``,
    ``modeling_mistral_large4.py:133-146``; initialised to scale 0, bias 1, so 1 until
    a checkpoint is loaded). ``pos`` ``(n,)`` integers, ``scale`` and ``bias`` ``(h,)``
    -> ``(h, n)``."""
    # s_h(p) = a_h log(p + 1) + b_h
    log_pos = torch.log(pos.to(scale.dtype) + 1)  # (n,)
    return scale[:, None] * log_pos[None, :] + bias[:, None]  # (h, n)


def beam_scale(pos: torch.Tensor) -> torch.Tensor:
    """Beam's query factor in its layers without RoPE, ``(1 + (p + 1) / 2048) ** 0.1``
    (``compute_attention_scaling``, ``modeling_beam.py:492-494``): smooth, no steps.
    ``pos`` integers, any shape -> float factors of that shape."""
    # s(p) = exp(0.1 * log(1 + (p + 1) / 2048))
    return torch.exp(0.1 * torch.log1p((pos.to(torch.float64) + 1) / 2048))


@dataclasses.dataclass(frozen=True)
class Hybrid:
    """A row of the chapter's table: the model as the book names it, its module in
    ``transformers/models``, the transcription, the configuration class's default
    depth, window (``W``/``w`` layers) and chunk (``C`` layers), and where the
    rule was read."""

    name: str
    module: str
    layers: Callable[[int], str]
    depth: int
    window: int | None = None
    chunk: int | None = None
    source: str = ""

    def pattern(self, n_layers: int | None = None) -> str:
        """The pattern at ``n_layers`` layers (the class's default depth if None)."""
        return self.layers(self.depth if n_layers is None else n_layers)


HYBRIDS_2026 = [
    Hybrid("Mistral Large 4", "mistral_large4", mistral_large4, 72,
           source="configuration_mistral_large4.py:156"),
    Hybrid("Muse Spark", "muse_spark", muse, 62, window=2048,
           source="configuration_muse_spark.py:133, 167, 176"),
    Hybrid("Muse Glimmer", "muse_glimmer", muse, 52, window=2048,
           source="configuration_muse_glimmer.py:134, 149, 158"),
    Hybrid("Trinity (Arcee)", "afmoe", trinity, 32, window=1024,
           source="configuration_afmoe.py:96, 108; modeling_afmoe.py:360"),
    Hybrid("Flint", "flint", flint, 49, window=513,
           source="configuration_flint.py:84, 106; modeling_flint.py:283"),
    Hybrid("Beam", "beam", beam, 52, window=512,
           source="configuration_beam.py:90, 115-127; modeling_beam.py:562"),
    Hybrid("Kolibri", "kolibri1", kolibri, 50, window=513,
           source="configuration_kolibri1.py:84, 101; modeling_kolibri1.py:184"),
    Hybrid("Nemotron-H", "nemotron_h", nemotron_h, 4,
           source="configuration_nemotron_h.py:176; modeling_nemotron_h.py:889"),
    Hybrid("OLMo Hybrid", "olmo_hybrid", olmo_hybrid, 32,
           source="configuration_olmo_hybrid.py:125; modeling_olmo_hybrid.py:899"),
    Hybrid("OLMo Hybrid, no theta", "olmo_hybrid",
           lambda n: olmo_hybrid(n, rope_theta=False), 32,
           source="modeling_olmo_hybrid.py:895-900"),
    Hybrid("Granite 4.0-H", "granitemoehybrid", granite_4_h, 32,
           source="configuration_granitemoehybrid.py:116; modeling_...:1057"),
    Hybrid("GLM-5.3-Flash", "glm5_next", glm5_flash, 45,
           source="configuration_glm5_next.py:113, 164; modeling_...:1514"),
    Hybrid("Inkling", "inkling", inkling, 66, window=512,
           source="configuration_inkling.py:162; modeling_inkling.py:110-133"),
    Hybrid("Ministral 3", "ministral3", all_rope, 34,
           source="modeling_ministral3.py:146"),
    Hybrid("Mistral Small 4", "mistral4", all_rope, 36,
           source="modeling_mistral4.py:468-471"),
]  # fmt: skip

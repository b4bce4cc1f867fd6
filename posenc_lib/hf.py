"""posenc_lib as the attention of a Hugging Face ``transformers`` model.

>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> import posenc_lib.hf as plhf
>>> model = LlamaForCausalLM(LlamaConfig(...))
>>> plhf.attach(model)             # the model's own RoPE, run by posenc_lib
>>> plhf.attach(model, "alibi")    # or another registered encoding in its place

Needs the ``hf`` extra (``pip install "posenc_lib[hf]"``), transformers 5.24: the
adapter was read from, and is tested with, that version's
``models/llama/modeling_llama.py``, ``modeling_utils.AttentionInterface`` and
``masking_utils.AttentionMaskInterface``. :func:`attach` refuses another version
(``check_version``) unless told ``strict=False``.

**Where RoPE is in a Hugging Face model, and the path chosen.** The model
(``LlamaModel.forward``) computes ``cos, sin = rotary_emb(x, position_ids)`` once, and
each attention module (``LlamaAttention.forward``) rotates q and k with
``apply_rotary_pos_emb`` *before* the cache and before the attention function it
looks up in ``ALL_ATTENTION_FUNCTIONS`` by ``config._attn_implementation``. That
lookup is transformers' documented extension point (``AttentionInterface.register``,
with ``AttentionMaskInterface.register`` for the mask the model builds for it), but
the function it calls receives q and k already rotated. So :func:`attach` does three
things, none of which edits transformers' code:

1. registers :func:`posenc_attention` and transformers' own ``sdpa_mask`` (a boolean
   mask, True = may attend, or ``None`` for a plain causal call) under the name
   ``"posenc_lib"`` and sets the model's attention implementation to it
   (``model.set_attn_implementation``);
2. replaces the model's rotary module (``model.model.rotary_emb``) by
   :class:`NeutralRotary`, whose ``cos = 1, sin = 0`` make ``apply_rotary_pos_emb``
   the identity (exactly: ``q * 1 + rotate_half(q) * 0 == q``), so q and k reach the
   attention function unrotated and the cache keeps them unrotated;
3. puts the encoding on every attention module (``module.posenc``, a submodule, so its
   parameters train and move with the model); :func:`posenc_attention` then runs
   ``pl.attention`` with it at the positions the model hands over.

The alternative, patching ``apply_rotary_pos_emb`` or each attention's ``forward``,
would edit transformers' code paths; replacing the one module that makes ``cos`` and
``sin`` keeps every line of the model as it is. The price: cached keys are stored
unrotated and rotated again at every step (for RoPE; an encoding without
``transform_qk`` pays nothing), which is what lets any encoding take RoPE's place.

**Positions.** Queries are at the model's ``position_ids`` (``generate`` counts them
from the attention mask under left padding). Keys: in a call without a cache they are
the queries' positions; with a cache, the keys the last query may see are a run of
consecutive positions ending at that query's, so each key's position is the last
query's minus the number of visible keys after it (hidden keys, pads or past a
window, are masked and their positions unused). The keys of the new tokens are
checked against ``position_ids``; a model whose positions are not such a run (3-D
``position_ids``, packed sequences through a cache) is refused with the reason.

Supported: decoder models built like Llama (``LlamaForCausalLM``, Qwen2/Qwen3,
Mistral, Gemma: one ``rotary_emb`` on ``model.model``); grouped-query heads; sliding
windows (Mistral's, Qwen3's sliding layers: the mask carries them); RoPE
scalings ``default``, ``linear``, ``yarn``, ``llama3`` and partial rotary, mapped to
``pl.RoPE`` by :func:`rope_from_config`. Not supported, refused by name: soft-capped
scores (Gemma 2), attention dropout, models with several rotary modules (Gemma 3's
local and global ones), and encodings that add to the embeddings or need coordinates
or side inputs.
"""

from __future__ import annotations

import importlib
import math

import torch
from torch import nn

from .attention import attention
from .base import PositionalEncoding, overrides
from .encodings.rope import Rotary
from .registry import make_encoding

__all__ = [
    "NAME",
    "SUPPORTED",
    "NeutralRotary",
    "attach",
    "check_version",
    "hub_wanted",
    "posenc_attention",
    "register",
    "rope_from_config",
]

NAME = "posenc_lib"  # the attention implementation's registered name
SUPPORTED = ((5, 24), (5, 25))  # transformers versions >= 5.24, < 5.25

# Hugging Face rope_type -> pl.RoPE scaling, and the rope_parameters keys each reads
_SCALINGS = {
    "default": (None, ()),
    "linear": ("linear", ("factor",)),
    "yarn": (
        "yarn",
        (
            "factor",
            "original_max_position_embeddings",
            "beta_fast",
            "beta_slow",
            "attention_factor",
            "mscale",
            "mscale_all_dim",
            "truncate",
        ),
    ),
    "llama3": (
        "llama3",
        (
            "factor",
            "original_max_position_embeddings",
            "low_freq_factor",
            "high_freq_factor",
        ),
    ),
}


def _transformers():
    """transformers, or an error naming the extra."""
    try:
        return importlib.import_module("transformers")
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError(
            "posenc_lib.hf needs Hugging Face transformers 5.24: "
            'pip install "posenc_lib[hf]"'
        ) from e


def hub_wanted(env: str = "POSENC_ONLINE", host: str = "huggingface.co") -> bool:
    """Whether a chapter should load a real checkpoint: only when asked to (in Colab,
    or with the environment variable ``env`` set to 1) and when ``host`` answers.
    Elsewhere (this course's tests, a machine offline) the chapter builds a tiny model
    instead, and nothing is downloaded."""
    import os
    import socket
    import sys

    if "google.colab" not in sys.modules and os.environ.get(env) != "1":
        return False
    try:
        socket.create_connection((host, 443), timeout=5).close()
        return True
    except OSError:
        return False


def check_version(version: str | None = None) -> str:
    """The installed transformers version if it is one this adapter was read from
    (5.24.x), else a ``RuntimeError`` saying why another may break it."""
    version = version or _transformers().__version__
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    if not SUPPORTED[0] <= major_minor < SUPPORTED[1]:
        raise RuntimeError(
            f"posenc_lib.hf was written against transformers 5.24 and found {version}: "
            "it relies on where that version applies RoPE (the model's rotary_emb "
            "module, apply_rotary_pos_emb before the attention function) and on the "
            "arguments it hands the attention function, which other versions may "
            'change. Install "posenc_lib[hf]" (transformers>=5.24,<5.25), or pass '
            "strict=False to attach() to try it anyway (then compare the logits with "
            "the model's own attention first)"
        )
    return version


def register() -> str:
    """Register :func:`posenc_attention` and its mask under :data:`NAME`; return it."""
    tf = _transformers()
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    tf.AttentionInterface.register(NAME, posenc_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


class NeutralRotary(nn.Module):
    """Stands in for a model's rotary module: ``cos = 1``, ``sin = 0`` ``(b, n, d)``,
    so that the model's ``apply_rotary_pos_emb`` leaves q and k unchanged."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        shape = (*position_ids.shape, self.head_dim)  # (b|1, n, d)
        ones = torch.ones(shape, dtype=x.dtype, device=x.device)
        return ones, torch.zeros_like(ones)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim} (cos 1, sin 0: RoPE runs in posenc_lib)"


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )


def rope_from_config(config) -> Rotary:
    """``pl.RoPE`` with the frequencies and the attention factor of the model's own
    rotary embedding (``config.rope_parameters``: ``rope_theta``, ``rope_type``, its
    scaling's keys, ``partial_rotary_factor``), half-split layout as Hugging Face
    rotates. YaRN's missing ``factor`` is ``max_position_embeddings / original``, as
    Hugging Face's ``_compute_yarn_parameters`` takes it."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if "rope_theta" not in params:
        raise ValueError(
            "config.rope_parameters has no rope_theta: this config describes no "
            f"RoPE model (rope_parameters = {params!r})"
        )
    if "sliding_attention" in params or "full_attention" in params:
        raise ValueError(
            "config.rope_parameters holds one RoPE per layer type (Gemma 3's local "
            "and global layers): posenc_lib.hf supports one rotary module per model"
        )
    rope_type = params.get("rope_type", "default")
    if rope_type not in _SCALINGS:
        raise ValueError(
            f"rope_type {rope_type!r} is not mapped to pl.RoPE (mapped: "
            f"{sorted(_SCALINGS)}); 'dynamic' and 'longrope' depend on the length "
            "Hugging Face has seen, which an attention function does not know"
        )
    scaling, keys = _SCALINGS[rope_type]
    kwargs = {k: params[k] for k in keys if params.get(k) is not None}
    if rope_type == "yarn" and "factor" not in kwargs:
        kwargs["factor"] = (
            config.max_position_embeddings / kwargs["original_max_position_embeddings"]
        )
    if rope_type == "yarn" and "original_max_position_embeddings" not in kwargs:
        raise ValueError(
            "yarn needs rope_parameters['original_max_position_embeddings']"
        )
    d = _head_dim(config)
    partial = params.get("partial_rotary_factor", 1.0)
    rotary_dim = int(d * partial)
    return Rotary(
        d,
        base=float(params["rope_theta"]),
        layout="half",
        scaling=scaling,
        rotary_dim=None if rotary_dim == d else rotary_dim,
        **kwargs,
    )


def _check_encoding(pe: PositionalEncoding) -> None:
    if overrides(pe, "encode_input"):
        raise ValueError(
            f"{type(pe).__name__} adds its term to the embeddings (encode_input): an "
            "attention function cannot add it; posenc_lib.hf runs encodings that act "
            "inside attention (RoPE, ALiBi, T5, NoPE, ...)"
        )
    if pe.coord_axes is not None or pe.side_inputs:
        raise ValueError(
            f"{type(pe).__name__} needs coordinates or side inputs, which a Hugging "
            "Face text model does not hand its attention"
        )


def attach(model: nn.Module, pe=None, strict: bool = True) -> nn.Module:
    """Run ``model``'s attention through posenc_lib, with ``pe`` (default: the model's
    own RoPE, :func:`rope_from_config`); in place, returns the model.

    ``pe``: ``None``, a ``PositionalEncoding`` (built for the model's query heads:
    ``config.num_attention_heads`` heads of ``head_dim``), or a registered name without
    a length table (``"alibi"``, ``"nope"``, ``"t5"``), built with those sizes. One
    encoding is shared by every layer. ``strict``: refuse a transformers version other
    than 5.24 (:func:`check_version`)."""
    if strict:
        check_version()
    config = getattr(model, "config", None)
    inner = getattr(model, "model", model)
    if config is None or not isinstance(getattr(inner, "rotary_emb", None), nn.Module):
        raise TypeError(
            "model must be a Hugging Face decoder with one rotary module at "
            "model.model.rotary_emb (LlamaForCausalLM, Qwen3ForCausalLM, ...), got "
            f"{type(model).__name__}"
        )
    extra = [n for n, _ in inner.named_children() if n.startswith("rotary_emb_")]
    if extra:
        raise TypeError(f"model has several rotary modules ({extra}): not supported")
    d, h = _head_dim(config), config.num_attention_heads
    if pe is None:
        pe = rope_from_config(config)
    elif isinstance(pe, str):
        pe = make_encoding(pe, d * h, h)
    if not isinstance(pe, PositionalEncoding):
        raise TypeError(
            "pe must be None (the model's RoPE), a PositionalEncoding or a registered "
            f"name, got {type(pe).__name__}"
        )
    _check_encoding(pe)
    if getattr(config, "attn_logit_softcapping", None):
        raise ValueError("soft-capped attention scores (Gemma 2) are not supported")
    register()
    ref = next(model.parameters())
    pe = pe.to(ref.device)
    if any(p.is_floating_point() for p in pe.parameters()):
        pe = pe.to(ref.dtype)
    inner.rotary_emb = NeutralRotary(d)
    n = 0
    for module in model.modules():
        if hasattr(module, "q_proj") and hasattr(module, "num_key_value_groups"):
            module.posenc = pe
            n += 1
    if n == 0:
        raise TypeError(f"found no attention module (q_proj) in {type(model).__name__}")
    model.set_attn_implementation(NAME)
    return model


def _key_positions(q_pos, mask, i, j):
    """Positions ``(b|1, j)`` of the keys: see the module's docstring."""
    if j == i:
        return q_pos
    last = q_pos[:, -1:]  # (b|1, 1)
    if mask is None:  # every key visible: a run ending at the last query
        after = torch.arange(j - 1, -1, -1, device=q_pos.device)[None]  # (1, j)
    else:
        seen = mask[:, 0, -1, :].long()  # (b, j): what the last query may see
        after = seen.flip(-1).cumsum(-1).flip(-1) - seen  # visible keys after j
    k_pos = (last - after).clamp_min(0)
    new = k_pos[:, j - i :]  # the keys of this call's tokens
    visible = (
        torch.ones_like(new, dtype=torch.bool)
        if mask is None
        else mask[:, 0, -1, j - i :]
    )
    if not torch.equal(
        torch.where(visible, new, 0), torch.where(visible, q_pos.expand_as(new), 0)
    ):
        raise ValueError(
            "position_ids are not a run of consecutive positions over the keys the "
            "mask shows (packed sequences through a cache?): posenc_lib.hf cannot "
            "place the cached keys"
        )
    return k_pos


def posenc_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_ids: torch.Tensor | None = None,
    **kwargs,
):
    """The attention function registered as ``"posenc_lib"``, in transformers'
    signature: query ``(b, h, i, d)``, key and value ``(b, h_kv, j, d)`` (unrotated,
    :class:`NeutralRotary`), ``attention_mask`` bool ``(b, 1, i, j)`` or ``None``
    (causal) -> ``(out (b, i, h, d), None)``.

    Runs ``pl.attention`` with ``module.posenc`` at queries ``position_ids`` and keys
    placed as the module's docstring says; the scores are scaled by ``scaling``
    (q is multiplied by ``scaling * sqrt(d)`` when the encoding keeps the default
    ``1/sqrt(d)``)."""
    pe = getattr(module, "posenc", None)
    if not isinstance(pe, PositionalEncoding):
        raise RuntimeError(
            f"{type(module).__name__} has no posenc encoding: set the model up with "
            "posenc_lib.hf.attach(model, pe), not attn_implementation alone"
        )
    if kwargs.get("softcap") is not None:
        raise ValueError("posenc_lib.hf does not soft-cap scores (Gemma 2's softcap)")
    if dropout and module.training:
        raise ValueError(
            f"attention dropout {dropout} is not supported: set "
            "config.attention_dropout = 0"
        )
    b, h, i, d = query.shape
    j = key.shape[2]
    groups = h // key.shape[1]
    if groups > 1:  # grouped-query heads: each key head serves `groups` query heads
        key = key.repeat_interleave(groups, dim=1)  # (b, h, j, d)
        value = value.repeat_interleave(groups, dim=1)
    if position_ids is None:
        position_ids = torch.arange(j - i, j, device=query.device)[None]
    if position_ids.dim() != 2:
        raise ValueError(
            f"position_ids must be (b|1, i), got {tuple(position_ids.shape)} (3-D "
            "positions, as in Qwen2-VL's M-RoPE, are not supported)"
        )
    q_pos = position_ids.to(query.device).long()
    mask = attention_mask
    if mask is not None:
        if mask.dtype != torch.bool:  # an additive float mask: 0 where visible
            mask = mask == 0
        # a row that sees nothing (a pad query under left padding): let it see every
        # key, as eager attention's additive mask does, so no NaN reaches the cache
        mask = mask | ~mask.any(-1, keepdim=True)
    k_pos = _key_positions(q_pos, mask, i, j)
    if pe.scale is None and scaling is not None and scaling != d**-0.5:
        query = query * (scaling * math.sqrt(d))  # scores scaled by `scaling`
    out = attention(
        query, key, value, pe, q_pos=q_pos, k_pos=k_pos, causal=True, mask=mask
    )  # (b, h, i, d)
    return out.transpose(1, 2).contiguous(), None

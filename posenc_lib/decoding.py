"""Decoding with a KV cache for a ``TinyTransformer`` whose encoding is RoPE.

A cache keeps, per layer, the keys and values of the tokens already seen, so each new
token costs one query against them instead of a forward pass over everything. With
RoPE the cached keys are stored rotated, each once at its own position (Hugging Face's
``LlamaAttention.forward``, transformers 5.24, hands the keys to ``cache.update``
right after ``apply_rotary_pos_emb``); a new token is rotated at its own position and
nothing cached is touched again.

Positions with left padding follow Hugging Face's
``GenerationMixin._prepare_position_ids_for_generation`` (transformers 5.24):

    p_t = (sum_{s <= t} mask_s) - 1  for a real token,  0 for a pad

and each new token's position is the last one plus 1.

Shapes: tokens ``(b, t)`` new tokens, ``attention_mask`` ``(b, j)`` (1 = real token,
0 = pad) over every key so far, cached k, v ``(b, h, j, d)``.
"""

from __future__ import annotations

import torch

from .attention import attention
from .base import HOOKS, overrides
from .encodings.rope import DynamicRotary, Rotary, apply_rope
from .model import TinyTransformer
from .utils import check_tensor

__all__ = [
    "positions_from_mask",
    "padded_causal_mask",
    "rope_attention_step",
    "forward_with_cache",
]


def _check_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    check_tensor(attention_mask, "attention_mask", "(b, j) of 0/1")
    if attention_mask.dim() != 2:
        raise ValueError(
            "attention_mask must be a (b, j) tensor of 0/1 (1 = real token), got "
            f"shape {tuple(getattr(attention_mask, 'shape', ()))}"
        )
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (pad) and 1 (real token)")
    return attention_mask.bool()


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions ``(b, j)`` int64 of the tokens under a 0/1 ``attention_mask``
    ``(b, j)``: real tokens count 0, 1, 2, .. from the first real one; pads get 0."""
    real = _check_mask(attention_mask)
    # p_t = cumsum(mask)_t - 1, then 0 where the mask is 0
    pos = real.long().cumsum(-1) - 1
    return pos.masked_fill(~real, 0)


def padded_causal_mask(attention_mask: torch.Tensor, n_new: int) -> torch.Tensor:
    """Which key each of the last ``n_new`` tokens may attend to: ``(b, 1, n_new, j)``
    bool. Query t (token order) sees key s when s <= t and s is a real token; a pad
    also sees itself, so no row is empty (its output is never read)."""
    real = _check_mask(attention_mask)
    b, j = real.shape
    if not isinstance(n_new, int) or not 1 <= n_new <= j:
        raise ValueError(f"n_new must be an int in [1, {j}], got {n_new!r}")
    t = torch.arange(j - n_new, j, device=real.device)[:, None]  # (n_new, 1)
    s = torch.arange(j, device=real.device)[None, :]  # (1, j)
    # allowed_ts = (s <= t) and (real_s or s == t)
    allowed = (s <= t) & (real[:, None, :] | (s == t))  # (b, n_new, j)
    return allowed[:, None]


def _split(t: torch.Tensor, h: int) -> torch.Tensor:
    """``(b, n, D) -> (b, h, n, d)``."""
    b, n, D = t.shape
    return t.view(b, n, h, D // h).transpose(1, 2)


def rope_attention_step(attn, x, pos, allowed, past=None):
    """One attention layer on the new tokens ``x`` ``(b, t, D)`` at ``pos``
    ``(b, t)``, given the layer's cache ``past`` = (k, v) ``(b, h, j0, d)`` or None;
    ``allowed`` ``(b, 1, t, j0 + t)``. Returns ``(out (b, t, D), (k, v))``, the cache
    now holding the new keys (rotated) and values too."""
    pe, h = attn.pe, attn.n_heads
    q, k, v = (_split(w(x), h) for w in (attn.w_q, attn.w_k, attn.w_v))
    rope = (pe.inv_freq, pe.layout, pe.attention_factor)
    r = pe.rotary_dim  # partial rotary: the first r coordinates (None: all)
    # each new query and key is rotated once, at its own position
    q, k = (apply_rope(t, pos, *rope, rotary_dim=r) for t in (q, k))
    if past is not None:  # the cached keys were rotated when they were new
        k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
    out = attention(q, k, v, mask=allowed)  # (b, h, t, d); q, k already rotated
    b, t, D = x.shape
    return attn.w_o(out.transpose(1, 2).reshape(b, t, D)), (k, v)


def _check_rope_blocks(model, step) -> None:
    """Every block rotates with fixed frequencies, and, for the default step, does
    nothing else: ``rope_attention_step`` would skip any other hook in silence."""
    for layer, block in enumerate(model.blocks):
        pe = block.attn.pe
        if not isinstance(pe, Rotary) or isinstance(pe, DynamicRotary):
            raise ValueError(
                f"blocks[{layer}] has {type(pe).__name__}: forward_with_cache needs "
                "a TinyTransformer whose every block's pe is a Rotary with fixed "
                "frequencies (DynamicRotary's change with the length, which "
                "invalidates rotated cached keys)"
            )
        extra = [h for h in HOOKS if h != "transform_qk" and overrides(pe, h)]
        if extra and step is None:
            raise ValueError(
                f"blocks[{layer}]'s {type(pe).__name__} overrides {extra} (a mask or "
                "bias beyond the rotation, e.g. chunks or a sliding window), which "
                "rope_attention_step does not apply: its cached keys would all be "
                "attended to. Decode with model.new_cache(), or pass a step= that "
                "applies it"
            )


def forward_with_cache(model, tokens, pos, attention_mask, cache=None, step=None):
    """Logits ``(b, t, V)`` of the new ``tokens`` ``(b, t)`` at positions ``pos``
    ``(b, t)``, and the new cache (a list of (k, v), one per layer).

    ``attention_mask`` ``(b, j)`` covers the cached tokens and the new ones (1 = real,
    0 = pad); ``cache`` is what the previous call returned (None for the prompt).
    ``step`` computes one attention layer (None: ``rope_attention_step``, which
    applies the rotation only, so an encoding that also masks or biases the scores
    is refused; the chapter passes broken steps to show what they break).
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    check_tensor(tokens, "tokens", "(b, t) integer ids")
    check_tensor(attention_mask, "attention_mask", "(b, cached + new) of 0/1")
    _check_rope_blocks(model, step)
    step = rope_attention_step if step is None else step
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError(f"tokens must be (b, t), got {tuple(tokens.shape)}")
    b, t = tokens.shape
    j0 = 0 if cache is None else cache[0][0].shape[2]
    if tuple(attention_mask.shape) != (b, j0 + t):
        raise ValueError(
            f"attention_mask must be (b, cached + new) = ({b}, {j0 + t}), got "
            f"{tuple(attention_mask.shape)}"
        )
    if cache is not None and len(cache) != len(model.blocks):
        raise ValueError(
            f"cache has {len(cache)} layers, the model {len(model.blocks)}"
        )
    pos = torch.as_tensor(pos, device=tokens.device)
    if tuple(pos.shape) != (b, t):
        raise ValueError(f"pos must be (b, t) = ({b}, {t}), got {tuple(pos.shape)}")
    allowed = padded_causal_mask(attention_mask, t)  # (b, 1, t, j0 + t)
    x = model.embed(tokens)  # (b, t, D); RoPE adds nothing to the input
    new_cache = []
    for layer, block in enumerate(model.blocks):
        past = None if cache is None else cache[layer]
        out, kv = step(block.attn, block.ln1(x), pos, allowed, past)
        x = x + out
        x = x + block.mlp(block.ln2(x))
        new_cache.append(kv)
    return model.head(model.ln_f(x)), new_cache

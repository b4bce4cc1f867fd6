"""Attention with a positional encoding: the reference that teaches it, and the entry
points that check a call once and hand it to the reference or a fast backend.

Shapes: q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)``; positions
``(1|b, n)`` or coordinates ``(1|b, n, a)`` (``posenc_lib.positions``).

* ``reference_attention``: explicit scores and every hook, in the fixed order. It is
  the definition; ``path="slow"`` runs it.
* ``posenc_lib.backends``: the same result, fast. ``"fast"`` is PyTorch's fused
  ``scaled_dot_product_attention``, ``"flex"`` compiled FlexAttention; each says what
  it supports, and the registry contract test holds both equal to the reference.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

import torch
from torch import nn

from .backends import BACKENDS
from .base import Context, PositionalEncoding, _autocast_on, overrides
from .positions import Positions, as_positions, prepare, prepare_step
from .registry import as_encoding
from .utils import check_head_split, check_qkv, check_same_device, is_4d

if TYPE_CHECKING:
    from .cache import KVCache

__all__ = [
    "attention",
    "reference_attention",
    "MultiHeadAttention",
    "prepare",
    "prepare_step",
    "as_positions",
    "PATHS",
]

PATHS = ("auto", "fast", "slow", "flex")
_NO_PE = PositionalEncoding()


def reference_attention(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context):
    """Attention as the course defines it: ``(out (b, h, i, e), weights (b, h, i, j))``.

    Half-precision q, k, v are scored in float32, as the fused kernels do."""
    q, k = pe.call_hook("transform_qk", q, k, pos.q, pos.k, ctx=ctx)  # RoPE
    v = pe.call_hook("transform_v", v, pos.k, ctx=ctx)  # DeepSeek-V4: v rotated
    ctx = ctx.replace(q=q, k=k, v=v)  # later hooks see the transformed q, k, v
    work = torch.promote_types(q.dtype, torch.float32)
    # omega_ij = (q_i . k_j) * scale + bias_ij
    scores = torch.einsum("bhid,bhjd->bhij", q.to(work), k.to(work)) * scale_of(pe, q)
    bias = pe.call_hook("score_bias", q, k, pos.q, pos.k, ctx=ctx)  # ALiBi, T5, FoX
    if bias is not None:
        scores = scores + bias  # (b, h, i, j)
    scores = pe.call_hook("transform_scores", scores, pos.q, pos.k, ctx=ctx)  # CoPE
    # alpha_ij = softmax_j(omega_ij) over the keys the mask allows
    weights = pe.call_hook("attention_weights", scores, pos.mask, ctx=ctx)
    # z_i = sum_j alpha_ij v_j (+ a value term: Shaw)
    out = torch.einsum("bhij,bhje->bhie", weights, v.to(work))  # (b, h, i, e)
    extra = pe.call_hook("value_bias", weights, pos.q, pos.k, ctx=ctx)
    if extra is not None:
        out = out + extra
    out = pe.call_hook("transform_out", out, pos.q, ctx=ctx)  # V4: rotated back
    return out.to(v.dtype), weights.to(q.dtype)


def scale_of(pe: PositionalEncoding, q: torch.Tensor) -> float:
    """``pe.scale``, or ``1/sqrt(d)``."""
    return pe.scale if pe.scale is not None else 1.0 / math.sqrt(q.shape[-1])


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pe: PositionalEncoding | None = None,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    path: str = "auto",
    return_weights: bool = False,
    x: torch.Tensor | None = None,
    inputs: Mapping[str, torch.Tensor] | None = None,
    positions: Positions | None = None,
):
    """Scaled dot-product attention with ``pe``'s hooks, checked at the boundary.

    q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> out ``(b, h, i, e)``
    (and weights ``(b, h, i, j)`` when ``return_weights``). q, k, v must be finite,
    and q.k must not overflow (refused, where a kernel would return zeros or NaN).

    * ``pe``: an encoding, None (none), or the registered name of one without
      learned parameters (``"rope"``, ``"alibi"``), built for q's ``h`` heads of
      ``d``.
    * ``q_pos``/``k_pos``: ``(i,)``/``(b|1, i)`` integers (coordinates ``(b|1, i, a)``
      when ``pe.coord_axes == a``); by default keys sit at ``0..j-1`` and queries at
      the last ``i`` of them (a KV cache).
    * ``causal``: query position p sees key positions <= p (coordinates: token order,
      KV-cache aligned); ``mask`` (bool, True = may attend), broadcastable to
      ``(b, h, i, j)``, is combined with it.
    * ``x`` ``(b, i, D)``: the layer input (FoX reads it); ``inputs``: named side
      inputs (graph distances, ...).
    * ``positions``: a ``Positions`` from ``prepare`` instead of ``q_pos``, ``k_pos``,
      ``causal``, ``mask``, ``inputs``: calls that share it share what depends only
      on positions (a model's layers; a benchmark's repeats).
    * ``path``: "auto" ("fast" when the encoding allows it, else "slow"), "slow"
      (``reference_attention``), "fast" or "flex" (``posenc_lib.backends``).
    """
    if isinstance(pe, str) and is_4d(q):  # a name: built with q's h heads of d
        name, pe = pe, as_encoding(pe, q.shape[1] * q.shape[-1], q.shape[1])
        if any(True for _ in pe.parameters()):
            raise TypeError(
                f"pe={name!r} has learned parameters: by name, attention() would "
                "build a new, random one at every call; build it once "
                f"(pl.make_encoding({name!r}, d_model, n_heads)) and pass it"
            )
    elif pe is not None and not isinstance(pe, (str, PositionalEncoding)):
        as_encoding(pe, 1, 1)  # refuses it, naming what pe may be
    pe = _NO_PE if pe is None else pe
    b, h, i, j = check_qkv(q, k, v, scale_of(pe, q) if is_4d(q) else 1.0, x)
    if positions is None:
        positions = prepare(
            pe, b, h, i, j, q_pos, k_pos, causal, mask, inputs, q.device
        )
    elif any(a is not None for a in (q_pos, k_pos, mask, inputs)) or causal:
        raise ValueError("pass either positions= or q_pos/k_pos/causal/mask/inputs")
    elif (positions.q.shape[1], positions.k.shape[1]) != (i, j):
        raise ValueError(f"positions were prepared for other lengths than ({i}, {j})")
    return _attend(q, k, v, pe, positions, x, path, return_weights)


def _attend(q, k, v, pe, pos: Positions, x, path: str, return_weights: bool):
    """Run a checked call on the reference or a backend."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path == "auto":
        path = "fast" if pe.runs_fused(pos) and not return_weights else "slow"
    ctx = Context(
        x=x, q=q, k=k, v=v, causal=pos.causal, inputs=pos.inputs, positions=pos
    )
    if path == "slow":
        out, weights = reference_attention(q, k, v, pe, pos, ctx)
        return (out, weights) if return_weights else out
    backend = BACKENDS[path]
    why = backend.refuses(pe, return_weights, pos)
    if why is not None:
        raise ValueError(why)
    q, k = pe.call_hook("transform_qk", q, k, pos.q, pos.k, ctx=ctx)
    v = pe.call_hook("transform_v", v, pos.k, ctx=ctx)  # per key: before the kernel
    ctx = ctx.replace(q=q, k=k, v=v)
    out = backend.attend(q, k, v, pe, pos, ctx, scale_of(pe, q))
    return pe.call_hook("transform_out", out, pos.q, ctx=ctx)  # per query: after it


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention whose positional behaviour comes from ``pe``'s hooks.

    ``pe``: an encoding, a registered name (built with this layer's sizes:
    ``pe="rope"``) or None (no encoding). An encoding whose term is added to the input
    (``encode_input``: the sinusoidal and learned tables, ...) acts on the embeddings,
    which this layer does not touch: it is refused unless ``input_encoded=True`` says
    that the caller adds it (``x = pe.call_hook("encode_input", x, pos)``), as
    ``TinyTransformer`` does once, for all its blocks. The layer input ``x`` and the
    side ``inputs`` are handed to ``attention``, so data-dependent (FoX) and
    structural (graph) encodings see them.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        pe: PositionalEncoding | str | None = None,
        bias: bool = False,
        input_encoded: bool = False,
    ):
        super().__init__()
        self.d_head = check_head_split(d_model, n_heads)
        self.d_model, self.n_heads = d_model, n_heads
        self.pe = as_encoding(pe, d_model, n_heads)
        if overrides(self.pe, "encode_input") and input_encoded is not True:
            raise ValueError(
                f"{type(self.pe).__name__} adds its term to the input "
                "(encode_input), which MultiHeadAttention does not do: add it to x "
                "yourself (x = pe.call_hook('encode_input', x, pos)) and pass "
                "input_encoded=True, or use pl.TinyTransformer, which adds it once "
                "to the embeddings"
            )
        self.w_q, self.w_k, self.w_v, self.w_o = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        """``(b, n, D) -> (b, h, n, d)``: the heads' slices of the model dimension."""
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor | None = None,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        path: str = "auto",
        return_weights: bool = False,
        inputs: Mapping[str, torch.Tensor] | None = None,
        positions: Positions | None = None,
        cache: KVCache | None = None,
    ):
        """x ``(b, n, D)``, pos ``(n,)``/``(b|1, n)`` integers (or coordinates) ->
        ``(b, n, D)`` (and weights). ``positions``: prepared once for a whole model
        (``TinyTransformer``), instead of ``pos``, ``causal``, ``mask``, ``inputs``.
        ``cache``: decode ``x`` (the new tokens, at ``pos`` or after the cached ones)
        against every token the ``KVCache`` holds; the cache takes them once the call
        has passed (a refused call leaves it as it was)."""
        if (
            not isinstance(x, torch.Tensor)
            or x.dim() != 3
            or x.shape[-1] != self.d_model
        ):
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}), got "
                f"{tuple(getattr(x, 'shape', ()))}"
            )
        check_same_device(x, "x", self.w_q, "layer")
        if x.dtype != self.w_q.weight.dtype and not _autocast_on(x.device.type):
            raise TypeError(
                f"x is {x.dtype} but this MultiHeadAttention holds "
                f"{self.w_q.weight.dtype} parameters: cast one to the other "
                f"(layer.to({x.dtype}), or x.to({self.w_q.weight.dtype}))"
            )
        b, n, _ = x.shape
        q, k, v = (self._split(w(x)) for w in (self.w_q, self.w_k, self.w_v))
        x = x.to(q.dtype)  # autocast projects in a lower dtype: the hooks read x in it
        if cache is not None:  # the new queries against every key so far
            if inputs is not None or (positions is None and causal is not True):
                raise ValueError(
                    "a KV cache decodes causally on its own positions: pass "
                    "causal=True, and no inputs="
                )
            cache.claim(self)
            if positions is None:  # called on its own: the boundary
                check_qkv(q, k, v, scale_of(self.pe, q), x)
                positions = prepare_step(
                    self.pe, cache, b, self.n_heads, n, pos, mask, x.device
                )
            elif pos is not None or mask is not None:
                raise ValueError("pass either positions= or pos/mask, not both")
            elif positions.k.shape[1] != len(cache) + n:
                raise ValueError(
                    f"positions were prepared for {positions.k.shape[1]} keys; this "
                    f"cache holds {len(cache)} tokens and the call adds {n}"
                )
            k, v, x = cache.joined(k, v, x)  # every key, the new ones last
            res = _attend(q, k, v, self.pe, positions, x, path, return_weights)
            cache.store(k, v, positions.k, x)  # the call passed: keep the tokens
        else:
            if positions is None:  # called on its own: the boundary
                check_qkv(q, k, v, scale_of(self.pe, q), x)
                positions = prepare(
                    self.pe, b, self.n_heads, n, n, pos, pos, causal, mask, inputs,
                    x.device, ("pos", "pos"),
                )  # fmt: skip
            res = _attend(q, k, v, self.pe, positions, x, path, return_weights)
        out, weights = res if return_weights else (res, None)
        out = self.w_o(out.transpose(1, 2).reshape(b, n, self.d_model))  # (b, n, D)
        return (out, weights) if return_weights else out

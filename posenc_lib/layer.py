"""The attention layer: ``MultiHeadAttention``, the projections around
``posenc_lib.attention``, with its KV-cache branch (decode new tokens against every
token a ``KVCache`` holds).

Shapes: x ``(b, n, D)``; heads ``(b, h, n, d)`` with ``D = h * d``.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from .attention import _attend, scale_of
from .base import PositionalEncoding, overrides
from .base import _autocast_on as autocast_on
from .cache import KVCache
from .positions import Positions, check_prepared, prepare, prepare_step
from .registry import as_encoding
from .utils import check_head_split, check_qkv, check_same_device

__all__ = ["MultiHeadAttention"]


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
                "yourself (x = pe.call_hook('encode_input', x, pos)) and build the "
                "layer with input_encoded=True (pl.MultiHeadAttention(d_model, "
                "n_heads, pe, input_encoded=True): an argument of the layer, not of "
                "its call), or use pl.TinyTransformer, which adds it once to the "
                "embeddings"
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
        check_prepared(positions, "pos=")
        check_same_device(x, "x", self.w_q, "layer")
        if x.dtype != self.w_q.weight.dtype and not autocast_on(x.device.type):
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

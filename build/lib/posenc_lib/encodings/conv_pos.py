"""Convolutional positional embedding (wav2vec 2.0, Baevski et al. 2020; HuBERT).

No table and no position index: a grouped 1-D convolution over the token axis, with
weight normalisation and a GELU, is added to the input of the Transformer::

    x  <-  x + GELU(conv(x)),    conv: D -> D channels, kernel K, G groups,
           conv(x)_p = b + sum_{k=0}^{K-1} W[:, :, k] x_{p + k - K/2}   (zero outside)

wav2vec 2.0 uses K = 128 and G = 16 over 50 frames per second (``make_conv_pos`` in
fairseq's ``fairseq/models/wav2vec/wav2vec2.py``; ``Wav2Vec2PositionalConvEmbedding`` in
Hugging Face's ``modeling_wav2vec2.py``; HuBERT keeps the same layer). Details kept:

* **Padding K // 2 on both sides, then drop the last frame when K is even**
  (fairseq's ``SamePad``, Hugging Face's ``Wav2Vec2SamePadLayer``): with even K the
  padded convolution returns n + 1 frames; dropping the last leaves frame p reading
  inputs p - K/2 .. p + K/2 - 1. Odd K reads p - (K-1)/2 .. p + (K-1)/2.
* **Weight norm over ``dim=2``**: ``weight_norm(conv, name="weight", dim=2)`` keeps one
  magnitude g_k per *kernel tap* k (the norm is taken over the output and input
  channels), not one per output channel as ``weight_norm``'s default would.
* **Initialisation** N(0, 4 / (K D)) for the weight, 0 for the bias (fairseq, with
  dropout 0; Hugging Face's ``_init_weights`` writes 2 sqrt(1/(K D))).

The output at p depends only on the window around p, by the same weights at every p:
the layer is translation-equivariant, and absolute position enters only through the
zeros outside the sequence, so it is visible within about K/2 tokens of either end
(Part V's chapter measures this). The window reads tokens *after* p: ``causal=True``
pads K - 1 zeros on the left only, so frame p reads p - K + 1 .. p (for a decoder);
a model called with ``causal=True`` gets that window whatever ``causal`` says here.
The positions handed to ``encode_input`` are ignored: the layer reads token order.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int

__all__ = ["ConvPositionalEmbedding"]


class ConvPositionalEmbedding(PositionalEncoding):
    """Adds ``GELU(WeightNorm(grouped Conv1d)(x))`` to the embeddings
    (``encode_input``); reads token order, not ``pos``.

    ``kernel_size`` K (wav2vec 2.0: 128), ``groups`` G (16; must divide ``d_model``),
    ``causal``: pad on the left only, so no token reads a later one.
    """

    # read by TinyTransformer's cached decoding (posenc_lib.cache): a new token's
    # embedding depends on the tokens around it, which a cached call does not hold
    no_cache_reason = (
        "its encode_input convolves each token with its neighbours, which a cached "
        "call does not hold: run the whole sequence"
    )
    four_terms = {
        "content-content": "kept",
        "content-position": "kept, implicitly (conv features of the neighbourhood)",
        "position-content": "kept, implicitly (conv features of the neighbourhood)",
        "position-position": "no position vector: order enters through the window",
    }

    def __init__(
        self,
        d_model: int,
        kernel_size: int = 128,
        groups: int = 16,
        causal: bool = False,
    ):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.kernel_size = check_positive_int(kernel_size, "kernel_size")
        self.groups = check_positive_int(groups, "groups")
        if d_model % groups:
            raise ValueError(
                f"groups ({groups}) must divide d_model ({d_model}) for a grouped "
                "convolution"
            )
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.causal = causal
        k = kernel_size
        conv = nn.Conv1d(d_model, d_model, k, padding=0, groups=groups)
        # W ~ N(0, 4 / (K D)), b = 0 (fairseq's make_conv_pos with dropout 0)
        nn.init.normal_(conv.weight, mean=0.0, std=math.sqrt(4.0 / (k * d_model)))
        nn.init.zeros_(conv.bias)
        # one magnitude per kernel tap: the norm runs over dims 0 and 1
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)

    def features(self, x: torch.Tensor, causal: bool | None = None) -> torch.Tensor:
        """``(b, n, D) -> (b, n, D)``: GELU(conv(x)), the term added to ``x``;
        ``causal`` (default: the layer's own setting) pads on the left only."""
        causal = self.causal if causal is None else causal
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}), got {tuple(x.shape)}"
            )
        k = self.kernel_size
        left, right = (k - 1, 0) if causal else (k // 2, k // 2)
        dtype = self.conv.bias.dtype  # computed in the layer's dtype, returned in x's
        h = F.pad(x.transpose(1, 2).to(dtype), (left, right))  # (b, D, n + padding)
        h = self.conv(h)  # (b, D, n + 1) for even K, symmetric; else (b, D, n)
        if not causal and k % 2 == 0:
            h = h[..., :-1]  # SamePad: drop the extra last frame
        return F.gelu(h).transpose(1, 2).to(x.dtype)  # (b, n, D)

    def encode_input(
        self, x: torch.Tensor, pos: torch.Tensor, ctx=None
    ) -> torch.Tensor:
        # x + GELU(conv(x)); pos is not read: the window follows token order. In a
        # causal model (ctx.causal) the window ends at p, whatever the layer was built
        # with: a centred window would read later tokens, the very ones a language
        # model must predict.
        causal = self.causal or (ctx is not None and ctx.causal)
        return x + self.features(x, causal=causal)  # (b, n, D)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, kernel_size={self.kernel_size}, "
            f"groups={self.groups}, causal={self.causal}"
        )


@register("conv_pos")
def _make(*, d_model: int, n_heads: int, max_len: int) -> ConvPositionalEmbedding:
    # a toy-sized kernel (wav2vec 2.0: 128); even, as wav2vec's, so SamePad applies
    return ConvPositionalEmbedding(
        d_model, kernel_size=16, groups=math.gcd(16, d_model)
    )

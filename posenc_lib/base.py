"""The one interface every positional encoding implements.

An encoding is a ``PositionalEncoding`` that overrides only the hooks it needs; every hook
has an identity default, so ``PositionalEncoding()`` itself is "no positional information".
The attention function (``posenc_lib.attention``) calls the hooks in this fixed order::

    x = encode_input(x, pos)                      # once, on the embeddings, before the blocks
    q, k = transform_qk(q, k, q_pos, k_pos)       # e.g. RoPE rotates q and k
    scores = q @ k^T * scale                      # scale = 1/sqrt(d) unless the encoding says otherwise
    scores = scores + score_bias(q, k, q_pos, k_pos)     # e.g. ALiBi, T5, Shaw
    scores = transform_scores(scores, q_pos, k_pos)      # e.g. multiplicative (DA-Transformer)
    weights = attention_weights(scores, mask)     # softmax unless replaced (stick-breaking)
    out = weights @ v + value_bias(weights, q_pos, k_pos)   # e.g. Shaw's value term

Positions handed to the hooks are always int64 tensors shaped ``(b, i)`` and ``(b, j)``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

__all__ = ["PositionalEncoding", "FOUR_TERMS"]

# The four terms of ((U+P) W_q)((U+P) W_k)^T (Part I's lens): content-content,
# content-position, position-content, position-position.
FOUR_TERMS: tuple[str, ...] = ("content-content", "content-position", "position-content", "position-position")


class PositionalEncoding(nn.Module):
    """Base class with five identity hooks; subclasses override only what they need.

    Class attributes a subclass may set:

    * ``scale``: multiplier of ``q.k`` (``None`` means ``1/sqrt(d)``; T5 uses ``1.0``).
    * ``four_terms``: for each of ``FOUR_TERMS``, how the method treats that term of the
      (U+P) expansion ("kept", "dropped", or "replaced by ..."). Part I's table is drawn from it.
    """

    scale: ClassVar[float | None] = None
    four_terms: ClassVar[dict[str, str]] = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped",
    }

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``(b, n, D), (b, n) -> (b, n, D)``: add (or mix in) position before the first block."""
        return x

    def transform_qk(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor,
                     k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(b, h, i, d), (b, h, j, d) -> same``: transform queries and keys (RoPE)."""
        return q, k

    def score_bias(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor,
                   k_pos: torch.Tensor) -> torch.Tensor | None:
        """``-> None`` or a tensor broadcastable to ``(b, h, i, j)``, added to the scaled scores."""
        return None

    def transform_scores(self, scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b, h, i, j) -> (b, h, i, j)``: any other function of the biased scores."""
        return scores

    def attention_weights(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``(b, h, i, j), bool mask broadcastable to it (True = may attend) -> weights``."""
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def value_bias(self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """``(b, h, i, j) -> None`` or ``(b|1, h|1, i, e)``, added to ``weights @ v`` (Shaw's ``sum_j a_ij a^V_ij``)."""
        return None

    @property
    def needs_score_path(self) -> bool:
        """True when a hook after ``score_bias`` is overridden, so the fused SDPA kernel cannot be used."""
        cls = type(self)
        return any(getattr(cls, hook) is not getattr(PositionalEncoding, hook)
                   for hook in ("transform_scores", "attention_weights", "value_bias"))

    def extra_repr(self) -> str:
        return ""

"""NoPE: no positional encoding at all (every hook is the identity).

Bidirectional attention without position is permutation-equivariant (Part 0); a causal
mask alone leaks some position (Kazemnejad et al., 2023; Part III).
"""

from __future__ import annotations

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["NoPE"]


class NoPE(PositionalEncoding):
    """No positional information: the base class's identity hooks, under its
    own name."""

    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (a causal mask still leaks order)",
    }


@register("nope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> NoPE:
    return NoPE()

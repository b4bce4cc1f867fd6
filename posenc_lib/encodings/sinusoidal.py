"""The sinusoidal encoding of Vaswani et al. (2017), added to the token embeddings.

    PE(p, 2k)   = sin(p * base^(-2k/D))
    PE(p, 2k+1) = cos(p * base^(-2k/D))        k = 0 .. D/2 - 1   (0-based pair index)

Each sin/cos pair shares one frequency; columns interleave (even = sin, odd = cos), the
layout of the paper and of tensor2tensor's ``get_timing_signal_1d`` *after* its halves
are interleaved (tensor2tensor itself concatenates [sin | cos] and spaces frequencies
with D/2 - 1 in the denominator; Part I compares the variants).
"""

from __future__ import annotations

import numbers

import torch

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int

__all__ = ["Sinusoidal", "shift_matrix", "sinusoidal_encoding", "sinusoidal_table"]


def _check_d_model(d_model: int) -> int:
    check_positive_int(d_model, "d_model")
    if d_model % 2:
        raise ValueError(
            "d_model must be even for the sinusoidal encoding (sin/cos pairs), got "
            f"{d_model}"
        )
    return d_model


def _check_base(base: float) -> float:
    """``base`` as a float, or a ``ValueError`` unless it is a finite number > 1
    (infinite: every frequency but the first is 0; NaN: every entry NaN)."""
    if (
        isinstance(base, bool)
        or not isinstance(base, numbers.Real)
        or not (1 < base < float("inf"))
    ):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


def sinusoidal_encoding(
    pos: torch.Tensor,
    d_model: int,
    base: float = 10000.0,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(...)`` integer (or real) positions -> ``(..., d_model)`` encodings, computed
    in float64."""
    _check_d_model(d_model)
    base = _check_base(base)
    pos = torch.as_tensor(pos)
    if pos.is_floating_point() and not torch.isfinite(pos).all():
        raise ValueError("pos must be finite (no NaN or inf)")
    # omega_k = base^(-2k/D),  k = 0 .. D/2-1
    inv_freq = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64, device=pos.device) / d_model
    )  # (D/2,)
    angles = pos.to(torch.float64)[..., None] * inv_freq  # (..., D/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(
        -2
    )  # (..., D): sin, cos, sin, cos, ...
    return pe.to(dtype or torch.get_default_dtype())


def sinusoidal_table(
    n_positions: int, d_model: int, base: float = 10000.0
) -> torch.Tensor:
    """The ``(n_positions, d_model)`` table: row p is ``PE(p)`` in the
    Vaswani layout."""
    check_positive_int(n_positions, "n_positions")
    return sinusoidal_encoding(torch.arange(n_positions), d_model, base)


def shift_matrix(
    k: float, d_model: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``T(k)``, the ``(d_model, d_model)`` matrix with ``PE(p + k) = T(k) @ PE(p)`` for
    every ``p``.

    Block-diagonal: pair ``(sin w_j p, cos w_j p)`` is moved by the 2x2 block
    ``[[cos w_j k, sin w_j k], [-sin w_j k, cos w_j k]]`` (a rotation by ``-w_j k`` in
    the (sin, cos) plane). It does not depend on ``p``; ``T(-k) = T(k)^T = T(k)^-1``.
    """
    _check_d_model(d_model)
    if isinstance(k, bool) or not isinstance(k, numbers.Real):
        raise TypeError(
            f"k must be a number (the offset), got {type(k).__name__} ({k!r})"
        )
    if not abs(float(k)) < float("inf"):
        raise ValueError(f"k must be finite, got {k}")
    base = _check_base(base)
    # w_j = base^(-2j/D),  j = 0 .. D/2-1
    inv_freq = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )  # (D/2,)
    c, s = torch.cos(k * inv_freq), torch.sin(k * inv_freq)  # (D/2,)
    blocks = torch.stack(
        (torch.stack((c, s), -1), torch.stack((-s, c), -1)), -2
    )  # (D/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype or torch.get_default_dtype())  # (D, D)


class Sinusoidal(PositionalEncoding):
    """Adds ``PE(pos)`` to the input embeddings; defined for every position
    (no table limit)."""

    four_terms = {
        "content-content": "kept",
        "content-position": "kept (fixed sinusoids through W_k)",
        "position-content": "kept (fixed sinusoids through W_q)",
        "position-position": (
            "kept (P W_q W_k^T P^T; relative only if W commutes with the rotations)"
        ),
    }

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        self.d_model = _check_d_model(d_model)
        self.base = _check_base(base)

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            raise TypeError(
                f"x must be a floating-point tensor (embeddings), got {x.dtype}: an "
                "integer x would round the sinusoids to 0 and +-1"
            )
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x has model dimension {x.shape[-1]}, but this Sinusoidal encoding "
                f"was built for d_model={self.d_model}"
            )
        # x_p + PE(p)
        return x + sinusoidal_encoding(
            pos, self.d_model, self.base, dtype=x.dtype
        )  # (b, n, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base:g}"


@register("sinusoidal")
def _make(*, d_model: int, n_heads: int, max_len: int) -> Sinusoidal:
    return Sinusoidal(d_model)

"""Fixed 2-D sinusoidal position embeddings: one 1-D sinusoid per axis, concatenated.

A patch at (row, col) = (r, c) gets, with ``D/4`` frequencies
``omega_k = base^(-k / (D/4))``, ``k = 0 .. D/4 - 1``::

    pe(r, c) = [ sin(r omega) | cos(r omega) | sin(c omega) | cos(c omega) ]   (D,)

each block ``D/4`` wide: the layout of Hugging Face's ``build_2d_sinusoidal_position_
embedding`` (``[sin_h | cos_h | sin_w | cos_w]``, rows first), patches in raster order
``p = r * width + c``. Rows and columns use separate channels, so ``pe(r, c) .
pe(r', c')`` is a sum of a function of ``r - r'`` and a function of ``c - c'``.

Other codebases permute the same numbers (the chapter checks each against golden
vectors): MAE's ``get_2d_sincos_pos_embed`` puts the columns first (its ``meshgrid``
takes ``w`` first; Hugging Face swaps the halves to load MAE's weights); timm's
``build_sincos2d_pos_embed`` orders the blocks ``[sin_h | sin_w | cos_h | cos_w]``;
DETR's ``PositionEmbeddingSine`` interleaves ``sin, cos`` within each axis, counts
positions from 1 and (``normalize=True``) rescales them to ``(0, 2 pi]``, and adds the
result to the queries and keys of every attention layer rather than once to the input.
"""

from __future__ import annotations

import torch

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int
from .vit import _check_hw, check_coords, example_grid, grid_positions

__all__ = ["sinusoidal_2d", "sinusoidal_2d_at", "Sinusoidal2D"]


def _check_dim_base(dim: int, base: float) -> tuple[int, float]:
    check_positive_int(dim, "dim")
    if dim % 4:
        raise ValueError(
            f"dim must be divisible by 4 for 2-D sinusoids (sin and cos for each of "
            f"two axes), got {dim}"
        )
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    return dim, float(base)


def sinusoidal_2d_at(
    coords: torch.Tensor, dim: int, base: float = 10000.0
) -> torch.Tensor:
    """``(..., 2)`` (row, col) coordinates, integer or real -> ``(..., dim)`` float64
    ``[sin(r omega) | cos(r omega) | sin(c omega) | cos(c omega)]``."""
    dim, base = _check_dim_base(dim, base)
    if not isinstance(coords, torch.Tensor) or coords.shape[-1:] != (2,):
        raise ValueError(
            "coords must be a tensor (..., 2) of (row, col), got shape "
            f"{tuple(getattr(coords, 'shape', ()))}"
        )
    # omega_k = base^(-k / (D/4)),  k = 0 .. D/4 - 1
    k = torch.arange(dim // 4, dtype=torch.float64, device=coords.device)
    omega = base ** (-k / (dim // 4))  # (D/4,)
    angles = coords.to(torch.float64)[..., :, None] * omega  # (..., 2, D/4): r w, c w
    r, c = angles.unbind(-2)
    return torch.cat((r.sin(), r.cos(), c.sin(), c.cos()), dim=-1)  # (..., D)


def sinusoidal_2d(
    height: int,
    width: int,
    dim: int,
    base: float = 10000.0,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(height * width, dim)``: ``sinusoidal_2d_at`` for every patch in raster order
    (row ``p = r * width + c``), computed in float64, returned in ``dtype`` (default:
    torch's default dtype)."""
    height, width = _check_hw((height, width), "(height, width)")
    table = sinusoidal_2d_at(grid_positions(height, width), dim, base)  # (H W, D)
    return table.to(dtype or torch.get_default_dtype())


class Sinusoidal2D(PositionalEncoding):
    """Adds ``sinusoidal_2d_at(pos)`` to the embeddings once, before the blocks (as MAE
    does); no parameters, defined for any coordinates.
    Paper: He et al., 2022 (MAE)."""

    coord_axes = 2
    four_terms = {
        "content-content": "kept",
        "content-position": "kept (fixed 2-D sinusoids through W_k)",
        "position-content": "kept (fixed 2-D sinusoids through W_q)",
        "position-position": "kept (P W_q W_k^T P^T: a function of both patches; "
        "with W_q W_k^T = I it is sum_k cos(drow w_k) + cos(dcol w_k))",
    }

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        self.d_model, self.base = _check_dim_base(d_model, base)

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x has model dimension {x.shape[-1]}, but this Sinusoidal2D was built "
                f"for d_model={self.d_model}"
            )
        pos = check_coords(pos, "Sinusoidal2D")
        # x_p + pe(r_p, c_p)
        return x + sinusoidal_2d_at(pos, self.d_model, self.base).to(
            x.dtype
        )  # (b, n, D)

    def example_positions(self, b, n, generator=None):
        return example_grid(b, n)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base:g}"


@register("sincos_2d")
def _make(*, d_model: int, n_heads: int, max_len: int) -> Sinusoidal2D:
    return Sinusoidal2D(d_model)

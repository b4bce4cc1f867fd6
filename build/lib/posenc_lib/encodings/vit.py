"""Patches on a grid, ViT's learned position table, and resizing it to a new grid.

**Grid coordinates.** An image cut into ``height x width`` patches is read row by row
(raster order): patch ``p = r * width + c`` sits at row ``r``, column ``c``. Every
vision encoding here sets ``coord_axes = 2`` and receives the coordinates ``(b, n, 2)``
= (row, col) of each token; ``grid_positions(height, width)`` gives them in raster
order.

**ViT's table** (Dosovitskiy et al., 2021, Sec. 3.1) is *one-dimensional*: ``N + 1``
learned vectors for the class token and the ``N = H * W`` patches in raster order,
added to the patch embeddings ("standard learnable 1D position embeddings"; the code,
``AddPositionEmbs`` in google-research/vision_transformer, holds a ``(1, N + 1, D)``
parameter). Nothing in it knows that patch ``p`` has a neighbour at ``p - W``::

    x_p  <-  x_p + E[p],     E in R^{(H W) x D},   p = r W + c

The 2-D structure appears only when the grid changes (a new image size at fine-tuning,
Sec. 3.2): the ``H W`` patch rows are reshaped to an ``H x W`` image with ``D``
channels, interpolated to ``H' x W'``, and flattened again; class and other prefix
tokens are kept apart. ``resize_pos_embed`` does this with timm's defaults
(``resample_abs_pos_embed``: bicubic, ``align_corners=False``, ``antialias=True``).
The original ViT code (``interpolate_posembed``) uses ``scipy.ndimage.zoom(order=1)``,
which is ``interpolation="bilinear", align_corners=True, antialias=False``; DeiT and
MAE use bicubic with ``align_corners=False`` and no antialiasing.

Here the table holds the ``H W`` patch rows only (the course's models have no class
token); ``resize_pos_embed`` takes ``num_prefix_tokens`` for tables that do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_nonnegative_int, check_positive_int

__all__ = ["grid_positions", "resize_pos_embed", "VitLearned"]

INTERPOLATIONS = ("bicubic", "bilinear")


def _check_hw(hw, name: str) -> tuple[int, int]:
    if not isinstance(hw, (tuple, list)) or len(hw) != 2:
        raise TypeError(f"{name} must be a pair (height, width), got {hw!r}")
    return check_positive_int(hw[0], f"{name}[0]"), check_positive_int(
        hw[1], f"{name}[1]"
    )


def grid_positions(height: int, width: int) -> torch.Tensor:
    """``(height * width, 2)`` int64 (row, col) of every patch in raster order:
    row ``p`` of the result is patch ``p = r * width + c``."""
    height, width = _check_hw((height, width), "(height, width)")
    rows = torch.arange(height).repeat_interleave(width)  # r = p // width
    cols = torch.arange(width).repeat(height)  # c = p % width
    return torch.stack((rows, cols), dim=-1)  # (H W, 2)


def example_grid(b: int, n: int) -> torch.Tensor:
    """``(b, n, 2)``: the first ``n`` patches, in raster order, of a grid of width
    ``ceil(sqrt(n))`` (the registry contract's positions for a vision encoding)."""
    width = max(1, math.isqrt(n - 1) + 1) if n > 0 else 1
    return grid_positions(-(-n // width) or 1, width)[:n].expand(b, n, 2)


def check_coords(pos: torch.Tensor, who: str) -> torch.Tensor:
    """``pos`` as int64 ``(b, n, 2)`` coordinates, or a clear error naming ``who``."""
    if not isinstance(pos, torch.Tensor) or pos.dim() != 3 or pos.shape[-1] != 2:
        raise ValueError(
            f"{who} takes (row, col) coordinates of shape (b, n, 2), got "
            f"{tuple(getattr(pos, 'shape', ()))}"
        )
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{who} takes integer coordinates, got dtype {pos.dtype}")
    return pos.long()


def resize_pos_embed(
    table: torch.Tensor,
    old_hw: tuple[int, int],
    new_hw: tuple[int, int],
    num_prefix_tokens: int = 0,
    interpolation: str = "bicubic",
    antialias: bool = True,
    align_corners: bool = False,
) -> torch.Tensor:
    """Resample a raster-order position table from an ``old_hw`` grid to ``new_hw``.

    ``table``: ``(P + H W, D)`` or ``(1, P + H W, D)``, its first ``P =
    num_prefix_tokens`` rows (class, distillation, register tokens) kept unchanged.
    Returns ``(P + H' W', D)`` (or with the leading 1), in ``table``'s dtype; float16
    and bfloat16 are interpolated in float32, as timm does. The defaults are timm's
    ``resample_abs_pos_embed``; ViT's own code is ``interpolation="bilinear",
    align_corners=True, antialias=False``.
    """
    if not isinstance(table, torch.Tensor) or not table.is_floating_point():
        raise TypeError(
            "table must be a floating-point tensor (n, D) or (1, n, D), got "
            f"{getattr(table, 'dtype', type(table).__name__)}"
        )
    batched = table.dim() == 3
    if not (table.dim() == 2 or (batched and table.shape[0] == 1)):
        raise ValueError(f"table must be (n, D) or (1, n, D), got {tuple(table.shape)}")
    (h, w), (h2, w2) = _check_hw(old_hw, "old_hw"), _check_hw(new_hw, "new_hw")
    prefix = check_nonnegative_int(num_prefix_tokens, "num_prefix_tokens")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}"
        )
    if antialias and align_corners:
        raise ValueError("antialias=True needs align_corners=False (torch's rule)")
    rows = table[0] if batched else table  # (P + H W, D)
    if rows.shape[0] != prefix + h * w:
        raise ValueError(
            f"table has {rows.shape[0]} rows, but num_prefix_tokens + height * width "
            f"= {prefix} + {h} * {w} = {prefix + h * w}"
        )
    if (h, w) == (h2, w2):
        return table.clone()
    work = (
        rows[prefix:].float()
        if rows.dtype in (torch.float16, torch.bfloat16)
        else rows[prefix:]
    )
    # (H W, D) -> an H x W image with D channels -> H' x W' -> (H' W', D)
    image = work.T.reshape(1, -1, h, w)  # (1, D, H, W)
    image = F.interpolate(
        image, size=(h2, w2), mode=interpolation, align_corners=align_corners,
        antialias=antialias,
    )  # fmt: skip
    out = torch.cat((rows[:prefix], image.reshape(-1, h2 * w2).T.to(rows.dtype)))
    return out[None] if batched else out  # (P + H' W', D)


class VitLearned(PositionalEncoding):
    """ViT's learned table over an ``H x W`` grid: adds row ``r W + c`` to the patch at
    (row, col) = (r, c). Coordinates outside the grid are a clear error;
    ``resized(new_hw)`` returns a copy whose table is interpolated to a new grid.

    ``init_std`` 1.0 puts the table on the scale of ``TinyTransformer``'s token
    embedding (``nn.Embedding``'s default); ViT initialises it with 0.02 next to patch
    embeddings of the same small scale.
    """

    coord_axes = 2
    four_terms = {
        "content-content": "kept",
        "content-position": "kept (learned absolute E through W_k)",
        "position-content": "kept (learned absolute E through W_q)",
        "position-position": "kept (E W_q W_k^T E^T: any function of the two "
        "patches; nothing ties it to (drow, dcol))",
    }

    def __init__(self, grid: tuple[int, int], d_model: int, init_std: float = 1.0):
        super().__init__()
        self.grid = _check_hw(grid, "grid")
        self.d_model = check_positive_int(d_model, "d_model")
        if not init_std >= 0:
            raise ValueError(f"init_std must be >= 0, got {init_std}")
        h, w = self.grid
        self.table = nn.Parameter(torch.randn(h * w, d_model) * init_std)  # (H W, D)

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x has model dimension {x.shape[-1]}, but this VitLearned table was "
                f"built for d_model={self.d_model}"
            )
        pos = check_coords(pos, "VitLearned")
        (h, w), rows, cols = self.grid, pos[..., 0], pos[..., 1]
        if pos.numel() and (
            rows.min() < 0 or cols.min() < 0 or rows.max() >= h or cols.max() >= w
        ):
            raise ValueError(
                f"pos must lie on the {h} x {w} grid of this table (rows in [0, {h}), "
                f"cols in [0, {w})), got rows {int(rows.min())}..{int(rows.max())}, "
                f"cols {int(cols.min())}..{int(cols.max())}: use .resized((H, W))"
            )
        # x_p + E[r W + c]
        return x + self.table[rows * w + cols].to(x.dtype)  # (b, n, D)

    def resized(self, new_hw: tuple[int, int], **kwargs) -> VitLearned:
        """A copy for an ``new_hw`` grid, its table from ``resize_pos_embed`` (keyword
        arguments go to it)."""
        new = VitLearned(_check_hw(new_hw, "new_hw"), self.d_model, init_std=0.0)
        with torch.no_grad():
            new.table.copy_(
                resize_pos_embed(self.table.detach(), self.grid, new.grid, **kwargs)
            )
        return new.to(self.table.device, self.table.dtype)

    def example_positions(self, b, n, generator=None):
        return example_grid(b, n)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, d_model={self.d_model}"


@register("vit_learned", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> VitLearned:
    side = math.isqrt(max_len - 1) + 1  # the smallest square grid with max_len cells
    return VitLearned((side, side), d_model)

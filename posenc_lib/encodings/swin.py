"""Swin's relative position bias: one learned scalar per head for each 2-D offset.

Swin (Liu et al., 2021) attends inside windows of ``M_h x M_w`` patches. Between query
patch ``i`` at (r_i, c_i) and key patch ``j`` the offset ``(dr, dc) = (r_i - r_j,
c_i - c_j)`` (query minus key) takes ``(2 M_h - 1)(2 M_w - 1)`` values, and a learned
table ``B`` with that many rows and one column per head holds a bias for each::

    omega_hij = q_i . k_j / sqrt(d) + B[idx_ij, h]
    idx_ij    = (dr + M_h - 1) (2 M_w - 1) + (dc + M_w - 1)

(``WindowAttention`` in microsoft/Swin-Transformer builds ``relative_position_index``
exactly so; timm's ``get_relative_position_index`` is the same.) The table is
initialised with a truncated normal of std 0.02, as Swin's.

**Offsets outside the window.** Swin never meets them: attention stays inside a window
(to change the window size at fine-tuning it interpolates the table bicubically; Swin
V2 replaces the table with a small MLP of log-spaced offsets). The course's models
attend over the whole grid, so here an offset beyond the table is *clamped* to its edge
row or column, as Shaw et al. clip 1-D offsets: every key ``M_h - 1`` or more rows
above shares one bias. ``clamp=False`` makes such an offset a ``ValueError`` instead.

BEiT uses the same table plus three rows for the class token (class to patch, patch
to class, class to class) and, in pre-training, one table shared by all layers
(``TinyTransformer``'s default ``share_pe=True``); Swin has one per block
(``share_pe=False``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_integer, check_positive_int, check_tensor
from .vit import _check_hw, check_coords, example_grid, grid_positions

__all__ = ["swin_relative_position_index", "relative_index_2d", "SwinRelativeBias"]


def relative_index_2d(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    window_h: int,
    window_w: int,
    clamp: bool = True,
) -> torch.Tensor:
    """``(..., i, 2)`` and ``(..., j, 2)`` (row, col) -> ``(..., i, j)`` int64 rows of a
    ``(2 window_h - 1)(2 window_w - 1)``-row table, Swin's convention; offsets past the
    window are clamped to its edge (``clamp``) or refused."""
    window_h, window_w = _check_hw((window_h, window_w), "(window_h, window_w)")
    for name, pos in (("q_pos", q_pos), ("k_pos", k_pos)):
        check_tensor(pos, name, "(row, column) coordinates (..., n, 2)")
        if pos.dim() < 2 or pos.shape[-1] != 2:
            raise ValueError(
                f"{name} must be (row, column) coordinates (..., n, 2), got shape "
                f"{tuple(pos.shape)}"
            )
        check_integer(pos, name, "coordinates")
    # (dr, dc) = (r_i - r_j, c_i - c_j): query minus key
    rel = q_pos[..., :, None, :] - k_pos[..., None, :, :]  # (..., i, j, 2)
    reach = torch.tensor([window_h - 1, window_w - 1], device=rel.device)
    if clamp:
        rel = torch.maximum(torch.minimum(rel, reach), -reach)
    elif rel.numel() and (rel.abs() > reach).any():
        far = rel.abs().amax(dim=tuple(range(rel.dim() - 1)))
        raise ValueError(
            f"offsets up to (|drow|, |dcol|) = ({int(far[0])}, {int(far[1])}) exceed "
            f"the {window_h} x {window_w} window's table (|drow| <= {window_h - 1}, "
            f"|dcol| <= {window_w - 1}); pass clamp=True to share the edge biases"
        )
    # idx = (dr + M_h - 1)(2 M_w - 1) + (dc + M_w - 1)
    return (
        (rel[..., 0] + window_h - 1) * (2 * window_w - 1) + rel[..., 1] + window_w - 1
    )


def swin_relative_position_index(window_h: int, window_w: int) -> torch.Tensor:
    """``(window_h * window_w, window_h * window_w)`` int64: Swin's
    ``relative_position_index`` for the patches of one window in raster order."""
    coords = grid_positions(window_h, window_w)  # (M_h M_w, 2)
    return relative_index_2d(coords, coords, window_h, window_w, clamp=False)


class SwinRelativeBias(PositionalEncoding):
    """Adds ``B[idx_ij, h]`` (Swin's table, offsets past ``window`` clamped) to head
    ``h``'s scaled scores; ``n_heads * (2 M_h - 1)(2 M_w - 1)`` parameters."""

    coord_axes = 2
    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a learned bias per head and 2-D offset "
        "(drow, dcol) inside the window (Swin's table)",
    }

    def __init__(
        self,
        n_heads: int,
        window: tuple[int, int],
        clamp: bool = True,
        init_std: float = 0.02,
    ):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.window = _check_hw(window, "window")
        if not isinstance(clamp, bool):
            raise TypeError(f"clamp must be a bool, got {type(clamp).__name__}")
        self.clamp = clamp
        rows = (2 * self.window[0] - 1) * (2 * self.window[1] - 1)
        self.table = nn.Parameter(torch.empty(rows, n_heads))  # ((2M_h-1)(2M_w-1), h)
        nn.init.trunc_normal_(self.table, std=init_std)  # Swin's: cut at +-2, not 2 std

    def score_bias(self, q, k, q_pos, k_pos):
        check_heads(q, self, self.n_heads)
        q_pos, k_pos = (
            check_coords(q_pos, "SwinRelativeBias"),
            check_coords(k_pos, "SwinRelativeBias"),
        )
        idx = relative_index_2d(q_pos, k_pos, *self.window, clamp=self.clamp)
        # B[idx_ij, h]
        return self.table[idx].permute(0, 3, 1, 2).to(q.dtype)  # (b|1, h, i, j)

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor):
        """FlexAttention form: ``score + B[idx_ij, h]`` with the clamped offset
        computed in the kernel from the two tokens' coordinates."""
        q_pos, k_pos = (
            check_coords(q_pos, "SwinRelativeBias"),
            check_coords(k_pos, "SwinRelativeBias"),
        )
        if not self.clamp:  # the extreme offsets decide: refuse as score_bias does
            far = torch.maximum(
                q_pos.amax((0, 1)) - k_pos.amin((0, 1)),
                k_pos.amax((0, 1)) - q_pos.amin((0, 1)),
            )
            corners = torch.stack((far, -far))[:, None]  # (2, 1, 2)
            relative_index_2d(corners, torch.zeros_like(corners), *self.window, False)
        mh, mw = self.window
        table = self.table  # ((2 M_h - 1)(2 M_w - 1), h)

        def mod(score, b, h, q_idx, kv_idx):
            # (dr, dc) = (r_i - r_j, c_i - c_j), clamped to the window's reach
            dr = (q_pos[b, q_idx, 0] - k_pos[b, kv_idx, 0]).clamp(1 - mh, mh - 1)
            dc = (q_pos[b, q_idx, 1] - k_pos[b, kv_idx, 1]).clamp(1 - mw, mw - 1)
            # B[idx, h], idx = (dr + M_h - 1)(2 M_w - 1) + (dc + M_w - 1)
            return score + table[(dr + mh - 1) * (2 * mw - 1) + dc + mw - 1, h]

        return mod

    def example_positions(self, b, n, generator=None):
        return example_grid(b, n)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, window={self.window}, clamp={self.clamp}"


@register("swin", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> SwinRelativeBias:
    side = min(7, max(1, int(max_len**0.5)))  # Swin's windows are 7 x 7
    return SwinRelativeBias(n_heads, (side, side))

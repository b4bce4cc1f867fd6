"""Factorised space-time position embeddings for video (TimeSformer, 2021).

A video is cut into T frames of H x W patches; token (t, h, w) gets a learned spatial
row for its place in the frame plus a learned temporal row for its frame::

    x_(t,h,w)  <-  x_(t,h,w) + E_space[h, w] + E_time[t]
    E_space in R^{H x W x D},  E_time in R^{T x D}   (trainable)

This is TimeSformer's ``pos_embed`` (one row per patch of a frame, ``h * W + w``, plus
the class token's; loaded from an ImageNet ViT) and ``time_embed`` (``num_frames``
rows, initialised to zeros), added in ``VisionTransformer.forward_features`` of
``timesformer/models/vit.py``. MAE-ST's ``sep_pos_embed`` (``pos_embed_spatial`` +
``pos_embed_temporal``) is the same sum. The spatial table is one joint 2-D table, not
a sum of a height and a width table: ``E_space[h, w]`` is any function of (h, w).

The sum has T*D + H*W*D parameters instead of a joint table's T*H*W*D, and it is a
constraint: the full table ``P[t, h, w] = E_time[t] + E_space[h, w]`` has every
difference between two frames independent of the place, ``P[t] - P[t'] = E_time[t] -
E_time[t']`` (``spacetime_table``). ViViT (Arnab et al. 2021) instead learns one joint
table over all t*h*w tokens, initialised by repeating the image model's spatial table
over the frames (``tile_positional_embeddings`` in scenic's ViViT): at initialisation
that *is* this sum with E_time = 0, and training may leave the sum structure.

Coordinates are ``(b, n, 3)`` integers (t, h, w), each below its table size; a
coordinate past its table is a clear ``ValueError`` (TimeSformer interpolates its tables
with ``F.interpolate(mode="nearest")`` when the input differs in size).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_integer, check_positive_int

__all__ = ["SpaceTimeEmbedding"]

AXES = ("t", "h", "w")


class SpaceTimeEmbedding(PositionalEncoding):
    """Adds ``E_time[t] + E_space[h, w]`` to each token (``encode_input``); learned.

    ``frames``, ``height``, ``width``: table sizes, so 0 <= t < frames, 0 <= h <
    height, 0 <= w < width. ``init_std``: standard deviation of both tables' normal
    initialisation; 1.0 matches ``TinyTransformer``'s token embeddings (TimeSformer
    starts the time table at zero and takes the spatial one from ImageNet).
    """

    coord_axes = 3
    four_terms = {
        "content-content": "kept",
        "content-position": "kept (learned E_time[t] + E_space[h, w] through W_k)",
        "position-content": "kept (learned E_time[t] + E_space[h, w] through W_q)",
        "position-position": "kept (P W_q W_k^T P^T, P = time row + place row)",
    }

    def __init__(
        self, d_model: int, frames: int, height: int, width: int, init_std: float = 1.0
    ):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.sizes = tuple(
            check_positive_int(v, name)
            for v, name in ((frames, "frames"), (height, "height"), (width, "width"))
        )
        if isinstance(init_std, bool) or not (
            isinstance(init_std, (int, float)) and math.isfinite(init_std)
            and init_std >= 0
        ):  # fmt: skip
            raise ValueError(f"init_std must be a finite number >= 0, got {init_std!r}")
        self.time = nn.Parameter(torch.randn(frames, d_model) * init_std)  # (T, D)
        self.space = nn.Parameter(
            torch.randn(height, width, d_model) * init_std
        )  # (H, W, D)

    def check_positions(self, pos: torch.Tensor) -> None:
        """Raise unless ``pos`` is ``(b, n, 3)`` integers inside the tables."""
        check_integer(pos, "pos", "coordinates")
        if pos.dim() != 3 or pos.shape[-1] != 3:
            raise ValueError(
                f"pos must have shape (b, n, 3) = (t, h, w) per token, got "
                f"{tuple(pos.shape)}"
            )
        for axis, (name, size) in enumerate(zip(AXES, self.sizes)):
            c = pos[..., axis]
            if c.numel() and (c.min() < 0 or c.max() >= size):
                raise ValueError(
                    f"pos[..., {axis}] ({name}) must lie in [0, {size}) for these "
                    f"tables, got values in [{int(c.min())}, {int(c.max())}]"
                )

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}), got {tuple(x.shape)}"
            )
        self.check_positions(pos)
        t, h, w = pos.unbind(-1)  # (b, n) each
        # x + E_time[t] + E_space[h, w]
        return x + (self.time[t] + self.space[h, w]).to(x.dtype)  # (b, n, D)

    def spacetime_table(self) -> torch.Tensor:
        """The full table ``P[t, h, w] = E_time[t] + E_space[h, w]``: (T, H, W, D)."""
        return self.time[:, None, None, :] + self.space[None]  # (T, H, W, D)

    def example_positions(self, b, n, generator=None):
        """Frames of 2 x 2 patches, frames outer, rows, then columns: ``(b, n, 3)``."""
        k = torch.arange(n)
        pos = torch.stack([k // 4, (k % 4) // 2, k % 2], dim=-1)  # (n, 3)
        return pos.expand(b, n, 3)

    def extra_repr(self) -> str:
        t, h, w = self.sizes
        return f"d_model={self.d_model}, frames={t}, height={h}, width={w}"


@register("spacetime", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> SpaceTimeEmbedding:
    # every coordinate of a video of at most max_len tokens is below max_len; the
    # spatial table then has max_len^2 rows (pass the real grid for a real model)
    return SpaceTimeEmbedding(d_model, max_len, max_len, max_len)

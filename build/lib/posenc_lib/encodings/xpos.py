"""xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer"): RoPE plus an
exponential decay.

Pair i of a query at position m is multiplied by zeta_i^(m/B) and of a key at n by
zeta_i^(-n/B):

    zeta_i = (2i/d + gamma) / (1 + gamma),   i = 0 .. d/2 - 1,
    gamma = 0.4,   B = scale_base = 512

so the score of pair i carries zeta_i^((m-n)/B): still a function of the offset only,
and below 1 for keys in the past (causal use; for keys in the future it grows, so xPos
is a decoder method). Frequencies are RoPE's, unchanged: xPos changes magnitudes, which
an ``(inv_freq, attention_factor)`` function cannot express, so it is an encoding of its
own rather than an entry of ``ROPE_SCALINGS``. The authors' code (torchscale) uses the
interleaved layout and centres positions on the window (a common shift of m and n, which
cancels in m - n); so do we, for the same reason: zeta_0 ~ 0.29, so zeta_0^(-n/B) would
overflow float32 from n ~ 36,000 (float16 from n ~ 4,500) and the score would be
inf * 0 = NaN, although zeta^((m-n)/B) itself is fine. Each call measures m and n from
c = (min + max) / 2 of its own positions (per row, a tensor: no host sync), so the
scales stay within zeta_0^(-+w/2B) for a window of w positions at any absolute position
(float32: windows up to ~72,000 positions; float16: ~8,000). The window itself still
has a limit: a future key's factor zeta^((m-n)/B) exceeds float32 for n - m > ~36,000,
so a fused kernel that forms the masked future scores before masking them returns NaN
past that window (the explicit path masks first). The authors keep windows short with
blockwise causal attention at inference.
"""

from __future__ import annotations

import torch

from ..registry import register
from .rope import Rotary

__all__ = ["XPos", "xpos_decay"]


def xpos_decay(d_head: int, gamma: float = 0.4) -> torch.Tensor:
    """``(d_head/2,)`` float64: zeta_i = (2i/d + gamma) / (1 + gamma), the per-pair
    decay base."""
    if d_head % 2 or d_head <= 0:
        raise ValueError(f"d_head must be a positive even int, got {d_head}")
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    # zeta_i = (2i/d + gamma) / (1 + gamma)
    return (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head + gamma) / (
        1 + gamma
    )  # (d/2,)


class XPos(Rotary):
    """RoPE whose pair i of q (k) is scaled by zeta_i^(+(m-c)/B) (zeta_i^(-(n-c)/B)): a
    per-pair decay with distance; c, the centre of the call's positions, cancels."""

    four_terms = {
        "content-content": (
            "kept, rotated and decayed: q_i . diag(zeta^((i-j)/B)) R_(j-i) k_j"
        ),
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        d_head: int,
        base: float = 10000.0,
        layout: str = "interleaved",
        scale_base: float = 512.0,
        gamma: float = 0.4,
    ):
        super().__init__(d_head, base, layout)
        if not scale_base > 0:
            raise ValueError(f"scale_base must be > 0, got {scale_base}")
        self.scale_base, self.gamma = float(scale_base), float(gamma)
        self.register_buffer(
            "zeta", xpos_decay(d_head, gamma), persistent=False
        )  # (d/2,)

    def _scale(
        self, pos: torch.Tensor, centre: torch.Tensor, sign: int, dtype: torch.dtype
    ) -> torch.Tensor:
        # zeta_i^(+-(m-c)/B), laid out like the rotation's cos/sin; m - c is exact in
        # float64 (integers and half-integers far below 2^52)
        power = (
            sign * (pos.to(torch.float64) - centre)[:, None, :, None] / self.scale_base
        )  # (b, 1, n, 1)
        s = self.zeta.to(pos.device, torch.float64) ** power  # (b, 1, n, d/2)
        s = (
            torch.cat((s, s), -1)
            if self.layout == "half"
            else s.repeat_interleave(2, -1)
        )
        return s.to(dtype)  # (b, 1, n, d)

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        q, k = super().transform_qk(q, k, q_pos, k_pos, ctx)
        q_pos, k_pos = torch.as_tensor(q_pos), torch.as_tensor(k_pos)
        q_pos = q_pos if q_pos.dim() == 2 else q_pos[None]  # (b|1, i)
        k_pos = k_pos if k_pos.dim() == 2 else k_pos[None]  # (b|1, j)
        # c = (lo + hi) / 2 over the row's query and key positions: zeta^((m-c)/B) *
        # zeta^(-(n-c)/B) = zeta^((m-n)/B) for any c, and |m - c|, |n - c| <= w / 2
        lo = torch.minimum(q_pos.amin(-1, keepdim=True), k_pos.amin(-1, keepdim=True))
        hi = torch.maximum(q_pos.amax(-1, keepdim=True), k_pos.amax(-1, keepdim=True))
        centre = (lo + hi).to(torch.float64) / 2  # (b|1, 1)
        return (
            q * self._scale(q_pos, centre, +1, q.dtype),
            k * self._scale(k_pos, centre, -1, k.dtype),
        )

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, scale_base={self.scale_base:g}, "
            f"gamma={self.gamma:g}"
        )


@register("xpos")
def _make(*, d_model: int, n_heads: int, max_len: int) -> XPos:
    return XPos(d_model // n_heads)

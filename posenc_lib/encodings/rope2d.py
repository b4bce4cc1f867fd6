"""2-D rotary position embedding: axial, and mixed with learned frequencies.

Both rotate pair ``k`` of a head (``k = 0 .. d/2 - 1``) by an angle *linear* in the
patch's coordinates (row, col) = (r, c)::

    theta_k(r, c) = r f_k^row + c f_k^col

so that ``(R(r, c) q) . (R(r', c') k) = q . R(r' - r, c' - c) k``: the score depends on
the offset (dr, dc) only. ``rotary_angles`` computes the angles for any number of axes
(a video's (t, row, col) too) and ``apply_rotary_angles`` turns the pairs, with the
layouts of ``posenc_lib.encodings.rope`` (``"interleaved"``: pairs (2k, 2k+1), as
RoPE-ViT's ``view_as_complex``; ``"half"``: pairs (k, k + d/2)).

* **Axial** (``axial_frequencies``): the pairs are split into one block per axis, and
  each block is a 1-D RoPE of its own axis: for two axes the first ``d/4`` pairs turn
  with the row, the last ``d/4`` with the column, at ``omega_k = base^(-k / (d/4))``.
  This is RoPE-ViT's ``compute_axial_cis`` (naver-ai/rope-vit, ``models/vit_rope.py``;
  base 100 for ViTs) with the axes in the course's (row, col) order: RoPE-ViT puts the
  column (``t_x``) block first.
* **Mixed** (``mixed_frequencies``, ``RotaryMixed``; Heo et al., 2024): ``f^row`` and
  ``f^col`` are learned, per head (and per layer in the paper: ``share_pe=False``), so a
  pair may turn along any direction of the image, e.g. a diagonal. RoPE-ViT's
  ``init_random_2d_freqs`` (base 10) starts pair ``k < d/4`` along a random direction
  ``alpha_h`` per head and pair ``d/4 + k`` along ``alpha_h + pi/2``, both with
  magnitude ``base^(-k / (d/4))``. With ``alpha_h = 0`` this is axial RoPE, column
  block first.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_integer, check_positive_int, check_tensor
from .rope import LAYOUTS, rotate_every_two, rotate_half
from .rope_scaling import rope_inv_freq
from .vit import check_coords, example_grid

__all__ = [
    "axial_frequencies",
    "mixed_frequencies",
    "rotary_angles",
    "apply_rotary_angles",
    "Rotary2D",
    "RotaryMixed",
]


def _check_split(d_head: int, n_axes: int) -> tuple[int, int]:
    check_positive_int(d_head, "d_head")
    check_positive_int(n_axes, "n_axes")
    if d_head % (2 * n_axes):
        raise ValueError(
            f"d_head must be divisible by 2 * n_axes = {2 * n_axes} (one block of "
            f"rotated pairs per axis), got d_head={d_head}"
        )
    return d_head, n_axes


def axial_frequencies(
    d_head: int, n_axes: int = 2, base: float = 100.0
) -> torch.Tensor:
    """``(n_axes, d_head/2)`` float64: axis ``a`` turns pairs ``a m .. (a+1) m - 1``
    (``m = d_head / (2 n_axes)``) at ``base^(-k/m)``, ``k = 0 .. m-1``; 0 elsewhere."""
    d_head, n_axes = _check_split(d_head, n_axes)
    m = d_head // (2 * n_axes)
    # omega_k = base^(-k/m): a 1-D RoPE of head size 2m
    omega, _ = rope_inv_freq(2 * m, base)  # (m,)
    freqs = torch.zeros(n_axes, d_head // 2, dtype=torch.float64)
    for a in range(n_axes):
        freqs[a, a * m : (a + 1) * m] = omega
    return freqs  # (a, d/2)


def mixed_frequencies(
    d_head: int,
    n_heads: int,
    base: float = 10.0,
    generator: torch.Generator | None = None,
    rotate: bool = True,
) -> torch.Tensor:
    """``(2, n_heads, d_head/2)`` float64 (row, col) frequencies, RoPE-ViT's
    ``init_random_2d_freqs``: pair ``k < d/4`` along direction ``alpha_h`` (uniform in
    ``[0, 2 pi)`` per head; 0 unless ``rotate``), pair ``d/4 + k`` along ``alpha_h +
    pi/2``, magnitude ``base^(-k/(d/4))``. Direction ``alpha`` means ``(f^col, f^row)
    = |f| (cos alpha, sin alpha)``, as RoPE-ViT's ``(x, y)``."""
    d_head, _ = _check_split(d_head, 2)
    n_heads = check_positive_int(n_heads, "n_heads")
    mag, _ = rope_inv_freq(d_head // 2, base)  # (d/4,): base^(-k/(d/4))
    alpha = (
        torch.rand(n_heads, 1, generator=generator, dtype=torch.float64) * 2 * math.pi
    )
    alpha = alpha if rotate else torch.zeros_like(alpha)  # (h, 1)
    # two blocks of pairs, perpendicular: alpha_h and alpha_h + pi/2
    angle = torch.cat(
        (alpha.expand(-1, d_head // 4), alpha.expand(-1, d_head // 4) + math.pi / 2), -1
    )
    mag = torch.cat((mag, mag))  # (d/2,)
    return torch.stack((mag * angle.sin(), mag * angle.cos()))  # (2, h, d/2): row, col


def rotary_angles(coords: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """``(b, n, a)`` integer coordinates and ``(a, d/2)`` or ``(a, h, d/2)`` frequencies
    -> ``(b, 1|h, n, d/2)`` float64 angles ``theta_k = sum_a coords_a f_k^a``."""
    if not isinstance(coords, torch.Tensor) or coords.dim() != 3:
        raise ValueError(
            "coords must be (b, n, a) coordinates, got shape "
            f"{tuple(getattr(coords, 'shape', ()))}"
        )
    check_integer(coords, "coords", "coordinates")
    check_tensor(freqs, "freqs", "(a, d/2) or (a, h, d/2)")
    if freqs.dim() == 2:
        freqs = freqs[:, None]  # (a, 1, d/2): the same for every head
    if freqs.dim() != 3 or freqs.shape[0] != coords.shape[-1]:
        raise ValueError(
            f"freqs must be (a, d/2) or (a, h, d/2) with a = {coords.shape[-1]} axes "
            f"to match coords {tuple(coords.shape)}, got {tuple(freqs.shape)}"
        )
    # theta_{b h n k} = sum_a coords_{b n a} f_{a h k}
    return torch.einsum(
        "bna,ahk->bhnk",
        coords.to(torch.float64),
        freqs.to(coords.device, torch.float64),
    )  # (b, 1|h, n, d/2)


def apply_rotary_angles(
    x: torch.Tensor, angles: torch.Tensor, layout: str = "interleaved"
) -> torch.Tensor:
    """Rotate pair ``k`` of ``x`` ``(b, h, n, d)`` by ``angles`` ``(b|1, h|1, n,
    d/2)``; same shape and dtype. ``x cos + rot(x) sin`` with ``rot`` =
    ``rotate_every_two`` (``"interleaved"``) or ``rotate_half`` (``"half"``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_tensor(x, "x", "(b, h, n, d)")
    check_tensor(angles, "angles", "(b|1, h|1, n, d/2)")
    if x.dim() != 4 or x.shape[-1] % 2 or angles.shape[-1] != x.shape[-1] // 2:
        raise ValueError(
            f"x must be (b, h, n, d) with d even and angles (.., n, d/2), got "
            f"{tuple(x.shape)} and {tuple(angles.shape)}"
        )
    if layout == "half":
        angles, rot = (
            torch.cat((angles, angles), -1),
            rotate_half(x),
        )  # th_0..th_{d/2-1} twice
    else:
        angles, rot = (
            angles.repeat_interleave(2, -1),
            rotate_every_two(x),
        )  # th_0, th_0, ..
    # x_m cos(theta) + rot(x_m) sin(theta)
    return x * angles.cos().to(x.dtype) + rot * angles.sin().to(x.dtype)  # (b, h, n, d)


class _Rotary2DBase(PositionalEncoding):
    coord_axes = 2
    four_terms = {
        "content-content": "kept, rotated: q_i . R(dr, dc) k_j (position multiplies "
        "content)",
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def _freqs(self) -> torch.Tensor:
        raise NotImplementedError

    def transform_qk(self, q, k, q_pos, k_pos):
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q has head dimension {q.shape[-1]}, but this {type(self).__name__} "
                f"was built for d_head={self.d_head}"
            )
        who = type(self).__name__
        freqs = self._freqs()
        q_angles = rotary_angles(check_coords(q_pos, who), freqs)  # (b, 1|h, i, d/2)
        k_angles = rotary_angles(check_coords(k_pos, who), freqs)  # (b, 1|h, j, d/2)
        return (
            apply_rotary_angles(q, q_angles, self.layout),
            apply_rotary_angles(k, k_angles, self.layout),
        )

    def example_positions(self, b, n, generator=None):
        return example_grid(b, n)


class Rotary2D(_Rotary2DBase):
    """Axial 2-D RoPE: the first ``d/4`` pairs of every head turn with the row, the
    last ``d/4`` with the column, at ``base^(-k/(d/4))``; no parameters.
    Paper: Heo et al., 2024 (RoPE-Axial)."""

    def __init__(self, d_head: int, base: float = 100.0, layout: str = "interleaved"):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.d_head, self.base, self.layout = d_head, float(base), layout
        freqs = axial_frequencies(d_head, 2, base)  # (2, d/2)
        self.register_buffer("freqs", freqs, persistent=False)

    def _freqs(self):
        return self.freqs

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base:g}, layout={self.layout!r}"


class RotaryMixed(_Rotary2DBase):
    """RoPE-Mixed: learned (row, col) frequencies ``(2, n_heads, d_head/2)`` per head,
    initialised by ``mixed_frequencies`` (a random direction per head).
    Paper: Heo et al., 2024."""

    def __init__(
        self,
        d_head: int,
        n_heads: int,
        base: float = 10.0,
        layout: str = "interleaved",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.d_head, self.n_heads, self.base, self.layout = (
            d_head,
            n_heads,
            float(base),
            layout,
        )
        freqs = mixed_frequencies(d_head, n_heads, base, generator)  # (2, h, d/2)
        self.freqs = nn.Parameter(freqs.to(torch.get_default_dtype()))

    def _freqs(self):
        return self.freqs

    def transform_qk(self, q, k, q_pos, k_pos):
        check_heads(q, self, self.n_heads)
        return super().transform_qk(q, k, q_pos, k_pos)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, n_heads={self.n_heads}, base={self.base:g}, "
            f"layout={self.layout!r}"
        )


@register("rope_2d")
def _make(*, d_model: int, n_heads: int, max_len: int) -> Rotary2D:
    return Rotary2D(d_model // n_heads)


@register("rope_mixed")
def _make_mixed(*, d_model: int, n_heads: int, max_len: int) -> RotaryMixed:
    return RotaryMixed(d_model // n_heads, n_heads)

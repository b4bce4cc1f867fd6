"""Rotary position embedding (RoPE, Su et al. 2021).

A query or key at integer position m is rotated, pair by pair, by the angles
m * theta_i:

    theta_i = base^(-2i/d),   i = 0 .. d/2 - 1
              (0-based; RoFormer writes i = 1 .. d/2 with 2(i-1))

so that (R_m q) . (R_n k) = q . R_(n-m) k depends on the offset n - m only. Two layouts
pair the d coordinates differently (both rotate pair i by theta_i):

* ``"interleaved"``: pairs (2i, 2i+1): RoFormer, GPT-J
  (``rotate_every_two``), torchscale.
* ``"half"``: pairs (i, i + d/2): GPT-NeoX, LLaMA, Hugging Face ``rotate_half``.

They are the same map up to a fixed permutation of the coordinates, so a model can be
trained with either, but weights trained with one are NOT valid with the other.

The frequency scalings (``rope_inv_freq``, ``ROPE_SCALINGS``) live in
``posenc_lib.encodings.rope_scaling``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import PositionalEncoding
from ..positions import position_facts
from ..registry import register
from ..utils import check_integer, check_positive_int, check_tensor
from .rope_scaling import _check_d_head, _check_factor, rope_inv_freq

__all__ = [
    "Rotary",
    "RoPE",
    "DynamicRotary",
    "rotate_half",
    "rotate_every_two",
    "apply_rope",
    "rope_cos_sin",
]

LAYOUTS = ("half", "interleaved")


def _check_pairs(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            "x must be a floating-point tensor (an integer one would be rotated to "
            f"zeros), got {getattr(x, 'dtype', type(x).__name__)}"
        )
    if x.shape[-1] % 2:
        raise ValueError(
            f"x's last dimension must be even (it is rotated in pairs), got {x.shape}"
        )


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x_1 .. x_{d/2}, x_{d/2+1} .. x_d) -> (-x_{d/2+1} .. -x_d, x_1 .. x_{d/2})``:
    pairs (i, i + d/2)."""
    _check_pairs(x)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """``(x_1, x_2, x_3, x_4, ...) -> (-x_2, x_1, -x_4, x_3, ...)``: pairs (2i, 2i+1)
    (GPT-J's name)."""
    _check_pairs(x)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class KeepsFrequencies(nn.Module):
    """Keeps the ``inv_freq`` buffer in its own precision through ``.half()``,
    ``.to(torch.bfloat16)`` and the like (it still follows ``.to(device)``): angles
    ``m * theta`` at m = 2000 in float16 frequencies are wrong by up to ~0.7 rad.
    The large libraries do the same (Hugging Face computes the angles in float32)."""

    def _apply(self, fn, recurse=True):
        kept = self._buffers.get("inv_freq")
        out = super()._apply(fn, recurse)
        if kept is not None:  # the device fn chose, the dtype we had
            self._buffers["inv_freq"] = kept.to(self._buffers["inv_freq"].device)
        return out


def _check_rotary_dim(rotary_dim: object, d: int) -> int:
    """``rotary_dim`` if it is an even int in (0, d], else a clear error."""
    if (
        isinstance(rotary_dim, bool)
        or not isinstance(rotary_dim, int)
        or not 0 < rotary_dim <= d
        or rotary_dim % 2
    ):
        raise ValueError(
            f"rotary_dim must be an even integer in (0, d = {d}] (the first "
            f"rotary_dim coordinates are rotated in pairs), got {rotary_dim!r}"
        )
    return rotary_dim


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    layout: str = "half",
    attention_factor: float = 1.0,
    cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None,
    checked: bool = False,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Rotate ``x`` ``(..., n, d)`` at integer ``positions`` ``(n,)``, or ``(b|1, n)``
    for ``x`` ``(b, n, d)`` or ``(b, h, n, d)``; same shape and dtype (positions on
    dim -2: Hugging Face's ``(b, n, h, d)`` projections are transposed first, or
    their heads are rotated as positions). ``cos_sin``:
    the ``rope_cos_sin`` of these positions, when the caller has them already
    (``checked``: and has checked the arguments, as ``Rotary`` does once per forward).

    x_m -> x_m * cos(m theta) + rot(x_m) * sin(m theta), with rot = ``rotate_half`` for
    ``layout="half"`` and ``rotate_every_two`` for ``"interleaved"``; the result is
    multiplied by ``attention_factor``. Angles are computed in float64, then cast to
    ``x.dtype``.

    ``rotary_dim`` r (partial rotary: GPT-NeoX ``rotary_pct``, Phi-3 and GLM
    ``partial_rotary_factor``): rotate the first r coordinates with ``inv_freq`` of
    shape ``(r/2,)`` in ``layout`` and pass the last d - r through unchanged; ``None``
    is r = d.
    """
    if not checked:
        positions = _check_rope_args(x, positions, inv_freq, layout, rotary_dim)
    if rotary_dim is not None and rotary_dim != x.shape[-1]:
        # (x_rot, x_pass) -> (R_m x_rot, x_pass)
        rot = apply_rope(
            x[..., :rotary_dim],
            positions,
            inv_freq,
            layout,
            attention_factor,
            cos_sin,
            checked=True,
        )  # (..., n, r)
        return torch.cat((rot, x[..., rotary_dim:]), dim=-1)  # (..., n, d)
    d = x.shape[-1]
    if cos_sin is None:
        cos_sin = rope_cos_sin(positions, inv_freq, layout, attention_factor, x.dtype)
    cos, sin = cos_sin  # (b|1, 1, n, d)
    if positions.dim() == 1 or x.dim() < 4:  # to x's rank: (n, d) or (b|1, n, d)
        cos, sin = (t[0, 0] if positions.dim() == 1 else t[:, 0] for t in (cos, sin))
    # x cos + rot(x) sin, rot(x) = (-x2, x1) for each pair (x1, x2), whose two
    # coordinates share one angle: written into one new tensor, no intermediates
    out = x * cos  # (b, h, n, d)
    if layout == "half":  # pairs (i, i + d/2)
        half = d // 2
        x1, x2, s = x[..., :half], x[..., half:], sin[..., :half]
        o1, o2 = out[..., :half], out[..., half:]  # views that autograd may write
    else:  # pairs (2i, 2i + 1)
        x1, x2, s = x[..., 0::2], x[..., 1::2], sin[..., 0::2]
        o1, o2 = out[..., 0::2], out[..., 1::2]
    o1.addcmul_(x2, s, value=-1)  # x1 cos - x2 sin
    o2.addcmul_(x1, s)  # x2 cos + x1 sin
    return out


def _check_rope_args(x, positions, inv_freq, layout, rotary_dim=None) -> torch.Tensor:
    """``apply_rope``'s checks; returns the positions as an int64 tensor."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(
            "x must be a tensor (..., n, d), got shape "
            f"{tuple(getattr(x, 'shape', ()))}"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"x must be a floating-point tensor, got {x.dtype}: cos and sin cast to an "
            "integer dtype are 0 and +-1, a silently wrong rotation"
        )
    n, d = x.shape[-2:]
    if rotary_dim is not None:
        d = _check_rotary_dim(
            rotary_dim, d
        )  # the checks below concern the rotated part
    if d % 2:
        raise ValueError(
            f"the last dimension of x (d = {d}) must be even for RoPE (coordinates are "
            "rotated in pairs)"
        )
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    positions = torch.as_tensor(positions, device=x.device)
    check_integer(positions, "positions")
    b = x.shape[0] if x.dim() >= 3 else 1
    if (
        positions.dim() not in (1, 2)
        or positions.shape[-1] != n
        or (positions.dim() == 2 and positions.shape[0] not in (1, b))
    ):
        layout_hint = ""
        if (
            x.dim() == 4
            and positions.dim() in (1, 2)
            and positions.shape[-1] == x.shape[1]
        ):
            layout_hint = (
                ": their length is x's dim 1, so x looks like (b, n, h, d), heads "
                "after positions (Hugging Face's projections before .transpose(1, "
                "2)); apply_rope takes (b, h, n, d): pass x.transpose(1, 2)"
            )
        raise ValueError(
            f"positions must have shape ({n},) or ({b}, {n}) to match x "
            f"{tuple(x.shape)}, got {tuple(positions.shape)}{layout_hint}"
        )
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.shape != (d // 2,):
        what = "d" if rotary_dim is None else "rotary_dim"
        raise ValueError(
            f"inv_freq must have shape ({d // 2},) for {what} = {d}, got "
            f"{tuple(getattr(inv_freq, 'shape', ()))}"
        )
    return positions.long()


def rope_cos_sin(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    layout: str = "half",
    attention_factor: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` ``(b|1, 1, n, d)`` for integer ``positions`` ``(b|1, n)``, in the
    coordinate order of ``layout``, scaled by ``attention_factor``; angles in float64,
    results in ``dtype``. ``apply_rope`` computes them unless given them (``Rotary``
    computes them once per forward pass and every layer shares them)."""
    check_tensor(positions, "positions", "(b|1, n) or (n,)")
    check_tensor(inv_freq, "inv_freq", "frequencies (d/2,)")
    if positions.dim() not in (1, 2):
        raise ValueError(
            "positions must have at least one axis and at most two, (n,) or "
            f"(b|1, n), got shape {tuple(positions.shape)}"
        )
    if positions.dim() == 1:
        positions = positions[None]
    # angle_{m,i} = m * theta_i
    angles = positions.to(torch.float64)[:, None, :, None] * inv_freq.to(
        positions.device, torch.float64
    )  # (b|1, 1, n, d/2)
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)  # th_0..th_{d/2-1} twice
    else:
        angles = angles.repeat_interleave(2, dim=-1)  # th_0, th_0, th_1, th_1, ..
    return (
        (attention_factor * angles.cos()).to(dtype),
        (attention_factor * angles.sin()).to(dtype),
    )


class Rotary(KeepsFrequencies, PositionalEncoding):
    """Rotates queries and keys by their positions (``transform_qk``); no parameters, no
    length limit.

    ``scaling`` and ``params`` select a frequency scaling from ``ROPE_SCALINGS`` (fixed
    at build time). ``rotary_dim`` r < d_head rotates only the first r coordinates of
    each head (partial rotary, frequencies ``rope_inv_freq(r, base, ...)``).
    """

    four_terms = {
        "content-content": (
            "kept, rotated: q_i . R_(j-i) k_j (position multiplies content)"
        ),
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        d_head: int,
        base: float = 10000.0,
        layout: str = "half",
        scaling: str | None = None,
        rotary_dim: int | None = None,
        **params,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.d_head, self.base, self.layout, self.scaling = (
            _check_d_head(d_head),
            float(base),
            layout,
            scaling,
        )
        if rotary_dim is not None:
            _check_rotary_dim(rotary_dim, d_head)
        self.rotary_dim = rotary_dim
        inv_freq, self.attention_factor = rope_inv_freq(
            rotary_dim or d_head, base, scaling, **params
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (d/2,) float64

    def _check(self, q: torch.Tensor, k: torch.Tensor | None = None) -> None:
        for name, t in (("q", q), ("k", k)):
            if t is not None and t.shape[-1] != self.d_head:
                raise ValueError(
                    f"{name} has head dimension {t.shape[-1]}, but this "
                    f"{type(self).__name__} was built for d_head={self.d_head} "
                    "(q and k must both have it)"
                )

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        self._check(q, k)
        return self._rotate(q, q_pos, "q", ctx), self._rotate(k, k_pos, "k", ctx)

    def _rotate(self, x: torch.Tensor, pos: torch.Tensor, which: str, ctx=None):
        args = (self.inv_freq, self.layout, self.attention_factor)
        r = self.rotary_dim
        if ctx is None or ctx.positions is None:
            return apply_rope(x, pos, *args, rotary_dim=r)  # checks pos
        # cos and sin depend on the positions only: once per forward pass, shared by
        # every layer (Hugging Face's rotary_emb(x, position_ids) does the same)
        cos_sin = ctx.positions.reuse(
            (self, which, x.dtype), lambda: rope_cos_sin(pos, *args, dtype=x.dtype)
        )
        return apply_rope(x, pos, *args, cos_sin=cos_sin, checked=True, rotary_dim=r)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, base={self.base:g}, layout={self.layout!r}, "
            f"scaling={self.scaling!r}"
            + ("" if self.rotary_dim is None else f", rotary_dim={self.rotary_dim}")
        )


class DynamicRotary(Rotary):
    """Dynamic NTK: the base grows with the current length ``max(positions) + 1`` past
    ``original_max_position_embeddings``.

    Stateless (a function of the positions handed in), unlike Hugging Face's cache,
    which keeps the largest length seen until the length drops below L0 again.
    ``factor=2`` is Hugging Face's documented example; on the course's toy model it beat
    ``factor=1`` at 2x-8x L0 (seeds 0 and 1).
    """

    def __init__(
        self,
        d_head: int,
        original_max_position_embeddings: int,
        factor: float = 2.0,
        base: float = 10000.0,
        layout: str = "half",
    ):
        super().__init__(d_head, base, layout)
        self.original_max_position_embeddings = check_positive_int(
            original_max_position_embeddings, "original_max_position_embeddings"
        )
        self.factor = _check_factor(factor)

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        self._check(q, k)
        seq_len = position_facts(q_pos, k_pos, ctx).top + 1  # known once per forward
        inv_freq, _ = rope_inv_freq(
            self.d_head,
            self.base,
            "dynamic",
            factor=self.factor,
            seq_len=seq_len,
            original_max_position_embeddings=self.original_max_position_embeddings,
        )
        checked = ctx is not None and ctx.positions is not None  # checked once
        return (
            apply_rope(q, q_pos, inv_freq, self.layout, checked=checked),
            apply_rope(k, k_pos, inv_freq, self.layout, checked=checked),
        )

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, base={self.base:g}, layout={self.layout!r}, "
            f"scaling='dynamic', factor={self.factor:g}, "
            f"original_max_position_embeddings={self.original_max_position_embeddings}"
        )


RoPE = Rotary  # the name readers look for; REGISTRY["rope"] builds it


@register("rope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> Rotary:
    return Rotary(d_model // n_heads)


@register("rope_dynamic", needs_max_len=True)
def _make_dynamic(*, d_model: int, n_heads: int, max_len: int) -> DynamicRotary:
    return DynamicRotary(d_model // n_heads, original_max_position_embeddings=max_len)

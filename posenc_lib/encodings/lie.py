"""Rotations from learned generators: LieRE, ComRoPE, and DINOv3's 2-D RoPE.

A rotation per position, the exponential of a sum of *generators* (skew-symmetric
``d x d`` matrices, one per axis ``a``)::

    R(p) = exp(sum_a p_a G_a),     G_a^T = -G_a,     so R(p)^T R(p) = I

rotates query and key, ``q -> R(p) q``, ``k -> R(p') k``; the score is
``q^T R(p)^T R(p') k``. If the generators commute, ``R(p)^T R(p') = R(p' - p)``: the
score depends on the offset only. 2-D RoPE, axial or mixed, is the case where every
``G_a`` is block-diagonal in the same ``2 x 2`` blocks ``f_k^a J``, ``J = [[0, -1],
[1, 0]]``; ``lie_rotation`` is the general form.

* **LieRE** (Ostmeier et al., 2025; StanfordMIMI/LieRE, ``models/rope_vit.py``,
  ``LierePositionEncoder``): free generators ``G_a = P_a - P_a^T``, block-diagonal in
  blocks of ``block_size`` (``generator_dim`` there; ``block_size = d`` is dense), per
  head. They need not commute, so the score may depend on more than the offset.
* **ComRoPE** (Yu et al., 2025; Longin-Yu/ComRoPE, ``model.py``): generators that
  commute by construction, block-diagonal in blocks of ``block_size``. ``"ld"``
  (``ComRoPELDAttention``): block ``j`` of axis ``a`` is ``theta_{a j} (P_j -
  P_j^T)``, multiples of one matrix per block. ``"ap"`` (``ComRoPEAPAttention``):
  block ``j`` belongs to axis ``j mod a`` only, ``P_j - P_j^T`` there and 0 elsewhere.
* **DINOv3** (Simeoni et al., 2025; timm ``RotaryEmbeddingDinoV3``): axial 2-D RoPE,
  half layout, on patch centres rescaled to ``[-1, 1]``, angle ``2 pi x / period_k``
  with ``period_k = base^(k / (d/4))``; in training the coordinates may be shifted,
  jittered per axis and rescaled (``augment_coords``).

The encodings take integer (row, col) coordinates, like ``posenc_lib.Rotary2D``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_finite, check_positive_int, check_tensor, exact_dtypes
from .vit import check_coords, example_grid

__all__ = [
    "skew_symmetric",
    "lie_rotation",
    "commutator",
    "LieRE",
    "ComRoPE",
    "dinov3_coords",
    "dinov3_frequencies",
    "augment_coords",
]


def skew_symmetric(params: torch.Tensor) -> torch.Tensor:
    """``(..., d, d) -> (..., d, d)``: ``P - P^T``, skew-symmetric for any ``P``."""
    if not isinstance(params, torch.Tensor) or params.dim() < 2:
        raise ValueError(f"params must be (..., d, d), got {type(params).__name__}")
    if params.shape[-1] != params.shape[-2]:
        raise ValueError(
            f"params must be square (..., d, d), got {tuple(params.shape)}"
        )
    return params - params.transpose(-1, -2)


def commutator(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[A, B] = A B - B A`` for ``(..., d, d)`` matrices (batch dimensions
    broadcast). Errors: ``TypeError`` for non-floating tensors, ``ValueError`` for
    matrices that are not square and of one size, or that hold NaN or infinity."""
    for name, t in (("a", a), ("b", b)):
        check_finite(t, name, "tensor of (..., d, d) matrices")
        if t.dim() < 2 or t.shape[-1] != t.shape[-2]:
            raise ValueError(
                f"{name} must hold square matrices (..., d, d), got {tuple(t.shape)}"
            )
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"a and b must be matrices of one size, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )
    return a @ b - b @ a


def lie_rotation(
    coords: torch.Tensor, generators: torch.Tensor, atol: float = 1e-6
) -> torch.Tensor:
    """``R(p) = matrix_exp(sum_a p_a G_a)``, an orthogonal matrix per position.

    ``coords`` ``(b, n, a)`` (integers or floats); ``generators`` ``(a, d, d)`` ->
    ``(b, n, d, d)``, or per head ``(a, h, d, d)`` -> ``(b, h, n, d, d)``, in the
    generators' floating dtype. The exponential is taken in float32 at least:
    ``torch.matrix_exp`` returns NaN in float16 and bfloat16, so half-precision
    generators are exponentiated in float32 and the rotation cast back to their dtype.
    The generators must be skew-symmetric (``G^T = -G``, to ``atol``): a
    ``ValueError`` says so otherwise (build them with ``skew_symmetric(P)``), since the
    exponential of anything else is not a rotation.
    """
    if not isinstance(coords, torch.Tensor) or coords.dim() != 3:
        raise ValueError(
            f"coords must be (b, n, a), got shape {tuple(getattr(coords, 'shape', ()))}"
        )
    if not isinstance(generators, torch.Tensor) or generators.dim() not in (3, 4):
        raise ValueError(
            "generators must be (a, d, d) or (a, h, d, d), got shape "
            f"{tuple(getattr(generators, 'shape', ()))}"
        )
    if generators.shape[-1] != generators.shape[-2]:
        raise ValueError(f"generators must be square, got {tuple(generators.shape)}")
    if generators.shape[0] != coords.shape[-1]:
        raise ValueError(
            f"coords have a = {coords.shape[-1]} axes but generators hold "
            f"{generators.shape[0]} (one per axis), shapes {tuple(coords.shape)} and "
            f"{tuple(generators.shape)}"
        )
    if not generators.is_floating_point():
        raise TypeError(f"generators must be floating point, got {generators.dtype}")
    gap = (generators + generators.transpose(-1, -2)).abs().max()
    if gap > atol:
        raise ValueError(
            "generators must be skew-symmetric (G^T = -G), got max |G + G^T| = "
            f"{float(gap):.3g}: build them with skew_symmetric(P) = P - P^T"
        )
    work = torch.promote_types(generators.dtype, torch.float32)  # matrix_exp's
    p, gens = coords.to(work), generators.to(work)
    with exact_dtypes(gens):  # autocast would take A(p) in bfloat16: exp is NaN
        # A(p) = sum_a p_a G_a
        if generators.dim() == 3:
            lie = torch.einsum("bna,ade->bnde", p, gens)  # (b, n, d, d)
        else:
            lie = torch.einsum("bna,ahde->bhnde", p, gens)  # (b, h, n, d, d)
        return torch.matrix_exp(lie.contiguous()).to(generators.dtype)


def _block_rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """``x`` ``(b, h, n, d)``, ``rot`` ``(b, h|1, n, m, s, s)`` with ``m s = d`` ->
    ``R x`` block by block, ``(b, h, n, d)`` in ``x``'s dtype; computed in the wider
    of the two dtypes (a float32 ``rot`` rotates a bfloat16 ``x`` in float32)."""
    work = torch.promote_types(rot.dtype, x.dtype)
    blocks = x.unflatten(-1, (rot.shape[-3], rot.shape[-1]))  # (b, h, n, m, s)
    # (R x)_ms = sum_t R_mst x_mt
    with exact_dtypes(x):
        out = torch.einsum("bhnmst,bhnmt->bhnms", rot.to(work), blocks.to(work))
    return out.flatten(-2).to(x.dtype)  # (b, h, n, d)


class _LieBase(PositionalEncoding):
    """Shared by LieRE and ComRoPE: ``q -> R(p) q`` with ``R`` block-diagonal, its
    blocks ``exp(sum_a p_a G_{a j})``; a subclass says what the blocks are."""

    coord_axes = 2
    four_terms = {
        "content-content": "kept, rotated: q_i . R(p_i)^T R(p_j) k_j (position "
        "multiplies content)",
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(self, d_head: int, n_heads: int, block_size: int):
        super().__init__()
        n_axes = self.coord_axes  # (row, col): lie_rotation itself takes any number
        self.d_head = check_positive_int(d_head, "d_head")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.block_size = check_positive_int(block_size, "block_size")
        self.n_axes = n_axes
        if d_head % block_size:
            raise ValueError(
                f"d_head must be divisible by block_size, got d_head={d_head}, "
                f"block_size={block_size}"
            )

    def blocks(self) -> torch.Tensor:
        """``(a, h, m, s, s)`` skew-symmetric generator blocks, ``m s = d_head``."""
        raise NotImplementedError

    def rotations(self, pos: torch.Tensor) -> torch.Tensor:
        """``(b, n, a)`` integer coordinates -> ``(b, h, n, m, s, s)`` blocks of R, in
        float32 at least: ``torch.matrix_exp`` returns NaN in float16 and bfloat16, so
        a half-precision module exponentiates (and rotates q, k) in float32."""
        gens = self.blocks()
        work = torch.promote_types(gens.dtype, torch.float32)
        with exact_dtypes(gens):  # autocast would take A(p) in bfloat16
            # A(p) = sum_a p_a G_a, block by block
            lie = torch.einsum("bna,ahmst->bhnmst", pos.to(work), gens.to(work))
            return torch.matrix_exp(lie.contiguous())  # (b, h, n, m, s, s)

    def transform_qk(self, q, k, q_pos, k_pos):
        who = type(self).__name__
        if q.shape[1] != self.n_heads or q.shape[-1] != self.d_head:
            raise ValueError(
                f"q is {tuple(q.shape)}, but this {who} was built for "
                f"n_heads={self.n_heads}, d_head={self.d_head}"
            )
        q_pos, k_pos = check_coords(q_pos, who), check_coords(k_pos, who)
        return (
            _block_rotate(q, self.rotations(q_pos)),
            _block_rotate(k, self.rotations(k_pos)),
        )

    def example_positions(self, b, n, generator=None):
        return example_grid(b, n)

    def generators(self) -> torch.Tensor:
        """``(a, h, d, d)``: the full block-diagonal generators (for inspection)."""
        gens = self.blocks()  # (a, h, m, s, s)
        return torch.stack(
            [torch.stack([torch.block_diag(*g) for g in axis]) for axis in gens]
        )

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, n_heads={self.n_heads}, "
            f"block_size={self.block_size}, n_axes={self.n_axes}"
        )


class LieRE(_LieBase):
    """LieRE: learned generators ``G_a = P_a - P_a^T`` per axis and head,
    block-diagonal in blocks of ``block_size`` (default dense, ``d_head``). ``P``
    starts ``N(0, init_std^2)``: the authors draw it uniform in ``[0, 2 pi)`` for
    coordinates in ``[0, 1]``; these coordinates are patch indices.
    Paper: Ostmeier et al., 2025."""

    def __init__(
        self,
        d_head: int,
        n_heads: int,
        block_size: int | None = None,
        init_std: float = 0.3,
        generator: torch.Generator | None = None,
    ):
        block_size = d_head if block_size is None else block_size
        super().__init__(d_head, n_heads, block_size)
        m = d_head // block_size
        shape = (self.n_axes, n_heads, m, block_size, block_size)
        self.params = nn.Parameter(torch.randn(shape, generator=generator) * init_std)

    def blocks(self):
        # G = P - P^T
        return skew_symmetric(self.params)  # (a, h, m, s, s)


class ComRoPE(_LieBase):
    """ComRoPE: commuting generators, block-diagonal in blocks of ``block_size``.
    ``"ld"``: block ``j`` of axis ``a`` is ``theta_{a j} (P_j - P_j^T)``; ``"ap"``:
    ``P_j - P_j^T`` on axis ``j mod n_axes``, 0 on the others. ``P`` starts
    ``N(0, init_std^2)``, ``theta`` ``N(0, 1)``, as in the authors' ``reset_pe``
    (their default ``init_std`` is 1, for coordinates in ``[0, 1]``).
    Paper: Yu et al., 2025 (ComRoPE)."""

    VARIANTS = ("ld", "ap")

    def __init__(
        self,
        d_head: int,
        n_heads: int,
        block_size: int = 4,
        variant: str = "ld",
        init_std: float = 0.3,
        generator: torch.Generator | None = None,
    ):
        super().__init__(d_head, n_heads, block_size)
        n_axes = self.n_axes
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {self.VARIANTS}, got {variant!r}")
        m = d_head // block_size
        if variant == "ap" and m % n_axes:
            raise ValueError(
                f"variant 'ap' gives each axis d_head / block_size / n_axes blocks: "
                f"d_head={d_head} must be divisible by block_size * n_axes = "
                f"{block_size * n_axes}"
            )
        self.variant = variant
        shape = (n_heads, m, block_size, block_size)
        self.params = nn.Parameter(torch.randn(shape, generator=generator) * init_std)
        if variant == "ld":
            self.theta = nn.Parameter(torch.randn(n_axes, m, generator=generator))
        else:
            # mask[a, j] = 1 if j = a (mod n_axes)
            mask = torch.arange(m)[None] % n_axes == torch.arange(n_axes)[:, None]
            self.register_buffer("mask", mask.float(), persistent=False)  # (a, m)

    def blocks(self):
        base = skew_symmetric(self.params)  # (h, m, s, s)
        scale = self.theta if self.variant == "ld" else self.mask.to(base.dtype)
        # G_{a j} = theta_{a j} (P_j - P_j^T), or mask_{a j} (P_j - P_j^T)
        return scale[:, None, :, None, None] * base  # (a, h, m, s, s)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"


def dinov3_coords(
    height: int, width: int, normalize: str = "separate", dtype=torch.float32
) -> torch.Tensor:
    """``(H W, 2)`` (row, col) patch centres in raster order, rescaled to ``[-1, 1]``:
    ``2 (r + 1/2) / H - 1`` (``normalize="separate"``; ``"max"`` / ``"min"`` divide
    both axes by ``max(H, W)`` / ``min(H, W)``), timm's ``make_coords_dinov3``."""
    height = check_positive_int(height, "height")
    width = check_positive_int(width, "width")
    sizes = {"separate": (height, width), "max": (max(height, width),) * 2,
             "min": (min(height, width),) * 2}  # fmt: skip
    if normalize not in sizes:
        raise ValueError(f"normalize must be one of {tuple(sizes)}, got {normalize!r}")
    work = torch.promote_types(dtype, torch.float32)  # timm: float32, then cast
    axes = [
        (torch.arange(s, dtype=work) + 0.5) / float(den)
        for s, den in zip((height, width), sizes[normalize])
    ]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).flatten(0, 1)
    # [0, 1] -> [-1, 1]
    return (2.0 * grid.to(dtype) - 1.0).to(dtype)  # (H W, 2)


def dinov3_frequencies(d_head: int, base: float = 100.0) -> torch.Tensor:
    """``(2, d_head/2)`` float64 axial frequencies, row block first: pair ``k <
    d/4`` turns with the row, pair ``d/4 + k`` with the column, at ``2 pi /
    period_k``, ``period_k = base^(k / (d/4))``."""
    d_head = check_positive_int(d_head, "d_head")
    if d_head % 4:
        raise ValueError(f"d_head must be divisible by 4, got {d_head}")
    m = d_head // 4
    # period_k = base^(2k / (d/2)),  omega_k = 2 pi / period_k
    periods = float(base) ** (2 * torch.arange(m, dtype=torch.float64) / (d_head // 2))
    omega = 2 * math.pi / periods
    freqs = torch.zeros(2, d_head // 2, dtype=torch.float64)
    freqs[0, :m], freqs[1, m:] = omega, omega
    return freqs  # (2, d/2)


def augment_coords(
    coords: torch.Tensor,
    shift: float | None = None,
    jitter: float | None = None,
    rescale: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """DINOv3's training-time change of ``coords`` ``(n, a)``, one draw for all
    positions, in this order: ``+ U(-shift, shift)`` per axis; ``* exp(U(-log J,
    log J))`` per axis (``jitter = J >= 1``); ``* exp(U(-log R, log R))`` shared
    (``rescale = R >= 1``). ``None`` skips a step."""
    check_tensor(coords, "coords", "float coordinates (n, a)")
    if not coords.is_floating_point() or coords.dim() != 2:
        raise ValueError(f"coords must be float (n, a), got {coords.dtype} "
                         f"{tuple(coords.shape)}")  # fmt: skip
    a = coords.shape[-1]
    for name, value, low in (("shift", shift, 0.0), ("jitter", jitter, 1.0),
                             ("rescale", rescale, 1.0)):  # fmt: skip
        if value is not None and not (math.isfinite(value) and value >= low):
            raise ValueError(f"{name} must be finite and >= {low:g}, got {value}")
    out = coords
    if shift is not None:
        out = out + torch.empty(a, dtype=out.dtype).uniform_(
            -shift, shift, generator=generator
        )
    if jitter is not None:
        lim = math.log(jitter)
        out = (
            out
            * torch.empty(a, dtype=out.dtype)
            .uniform_(-lim, lim, generator=generator)
            .exp()
        )
    if rescale is not None:
        lim = math.log(rescale)
        out = (
            out
            * torch.empty(1, dtype=out.dtype)
            .uniform_(-lim, lim, generator=generator)
            .exp()
        )
    return out


@register("liere")
def _make_liere(*, d_model: int, n_heads: int, max_len: int) -> LieRE:
    return LieRE(d_model // n_heads, n_heads)


@register("comrope")
def _make_comrope(*, d_model: int, n_heads: int, max_len: int) -> ComRoPE:
    d_head = d_model // n_heads
    return ComRoPE(d_head, n_heads, block_size=4 if d_head % 4 == 0 else 2)

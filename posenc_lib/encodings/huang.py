"""Huang et al. (2020), methods 1-4: four ways to let a relative-position table a_ij
interact with q and k.

All four index a table by the offset ``j - i`` (key - query), clipped to ``[-K, K]``
(method 1 uses ``|j - i|`` clipped to ``[0, K]``). ``K = max_len - 1`` by default, so
inside the training length nothing is clipped, which is the paper's unclipped table
``w_{1-k} .. w_{k-1}`` for sequences of length ``k``; past it we clip, as Shaw et al.
do, rather than fail. One table is shared by all heads (as in Hugging Face's
``relative_key_query``, its port of method 4) and, in ``TinyTransformer``, by all
layers. ``s = 1/sqrt(d)`` multiplies every term, as in the paper.

    method 1:  omega_ij = s (q_i . k_j) w_{|j-i|}                  w_r scalar
    method 2:  omega_ij = s (q_i . k_j) w_{j-i}                    w_r scalar
    method 3:  omega_ij = s sum_c q_ic k_jc w_{j-i,c}              w_r in R^d
    method 4:  omega_ij = s (q_i . k_j + q_i . a_ij + k_j . a_ij)  a_ij = w_{j-i}

Methods 1-2 use the hook ``transform_scores``, methods 3-4 ``score_bias``. Why these
hooks: methods 1-2 multiply the whole score by a number that depends only on positions,
which is exactly what ``transform_scores`` sees. Method 3 weights each dimension of the
product separately, so it needs q and k themselves; it is written as the exact additive
correction ``score_bias = s sum_c q_ic k_jc (w_{j-i,c} - 1)``, which turns ``s q.k``
into the method-3 score (and keeps the fused fast path). Method 4 is additive already.
Scalars and the method-3 vectors start at 1 (plain attention); method 4's table starts
near 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..positions import relative_offsets
from ..registry import register
from ..utils import check_integer, check_nonnegative_int, check_positive_int

__all__ = [
    "HuangMethod1",
    "HuangMethod2",
    "HuangMethod3",
    "HuangMethod4",
    "huang_relative_index",
    "huang_method",
]


def huang_relative_index(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    max_distance: int,
    directional: bool = True,
) -> torch.Tensor:
    """Positions ``(b, i)``, ``(b, j)`` -> table rows ``(b, i, j)``.

    Directional: ``clip(j - i, -K, K) + K`` in ``[0, 2K]``; otherwise
    ``min(|j - i|, K)`` in ``[0, K]``.
    """
    check_nonnegative_int(max_distance, "max_distance")
    for name, t in (("q_pos", q_pos), ("k_pos", k_pos)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(
                f"{name} must be an integer tensor of shape (b, n), got "
                f"{getattr(t, 'shape', t)}"
            )
        check_integer(t, name)
    rel = k_pos[:, None, :] - q_pos[:, :, None]  # (b, i, j): key - query
    if directional:
        return rel.clamp(-max_distance, max_distance) + max_distance
    return rel.abs().clamp(max=max_distance)


class _HuangTable(PositionalEncoding):
    """A table ``w`` of ``width``-vectors indexed by the (clipped) offset; the methods
    differ in its use."""

    method: int = 0

    def __init__(self, max_distance: int, width: int, directional: bool, init: str):
        super().__init__()
        check_nonnegative_int(max_distance, "max_distance")
        self.max_distance, self.width, self.directional = (
            max_distance,
            check_positive_int(width, "width"),
            directional,
        )
        rows = 2 * max_distance + 1 if directional else max_distance + 1
        start = (
            torch.ones(rows, width)
            if init == "ones"
            else 0.02 * torch.randn(rows, width)
        )
        self.w = nn.Parameter(start)  # (R, width)

    def _index(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b|1, i, j)`` table rows."""
        return huang_relative_index(q_pos, k_pos, self.max_distance, self.directional)

    def _scale(self, d: int) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(d)

    def _check_width(self, q: torch.Tensor) -> None:
        if q.dim() != 4:
            raise ValueError(f"q must have shape (b, h, i, d), got {tuple(q.shape)}")
        if q.shape[-1] != self.width:
            raise ValueError(
                f"q has head dimension {q.shape[-1]}, but this {type(self).__name__} "
                f"was built for d_head={self.width}"
            )

    def extra_repr(self) -> str:
        return (
            f"method={self.method}, max_distance={self.max_distance}, "
            f"width={self.width}"
        )


class _HuangScalar(_HuangTable):
    """Methods 1 and 2: the (scaled) score times a learned scalar that depends on
    the offset."""

    directional: bool = True

    def __init__(self, max_distance: int):
        super().__init__(max_distance, 1, self.directional, init="ones")

    def transform_scores(
        self, scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        # omega_ij = (s q_i . k_j) * w_r
        a = self.w[self._index(q_pos, k_pos), 0]  # (b|1, i, j)
        return scores * a[:, None].to(scores.dtype)  # (b, h, i, j)

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor):
        """FlexAttention form: ``score * w_r``, read from a table over this call's
        offsets ``lo .. hi`` (one scalar per offset)."""
        off, lo, hi = relative_offsets(q_pos, k_pos)  # j - i
        offsets = torch.arange(lo, hi + 1, device=self.w.device)  # (L,)
        rows = huang_relative_index(
            torch.zeros(1, 1, dtype=torch.long, device=self.w.device),
            offsets[None],
            self.max_distance,
            self.directional,
        )[0, 0]  # (L,): the table row of offset r = lo .. hi
        per_offset = self.w[rows, 0].contiguous()  # (L,): w_r

        def mod(score, b, h, q_idx, kv_idx):
            # omega_ij = (s q_i . k_j) * w_(j - i)
            return score * per_offset[off(b, q_idx, kv_idx) - lo]

        return mod


class HuangMethod1(_HuangScalar):
    """Method 1: ``s (q_i . k_j) w_{|j-i|}``, one learned scalar per distance
    (no direction)."""

    method, directional = 1, False
    four_terms = {
        "content-content": "kept, multiplied by a learned scalar w(|j-i|)",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (position acts only through the factor w(|j-i|))",
    }


class HuangMethod2(_HuangScalar):
    """Method 2: ``s (q_i . k_j) w_{j-i}``, one learned scalar per signed offset."""

    method, directional = 2, True
    four_terms = {
        "content-content": "kept, multiplied by a learned scalar w(j-i)",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (position acts only through the factor w(j-i))",
    }


class HuangMethod3(_HuangTable):
    """Method 3: ``s sum_c q_ic k_jc w_{j-i,c}``, each dimension of ``q_i * k_j``
    weighted by offset."""

    method = 3
    four_terms = {
        "content-content": "kept, each dimension weighted by a learned vector w(j-i)",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (position acts only through the weights w(j-i))",
    }

    def __init__(self, max_distance: int, d_head: int):
        check_positive_int(d_head, "d_head")  # named as the caller wrote it
        super().__init__(max_distance, d_head, True, init="ones")

    def score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        self._check_width(q)
        a = (
            self.w[self._index(q_pos, k_pos)].to(q.dtype).expand(q.shape[0], -1, -1, -1)
        )  # (b, i, j, d)
        # s sum_c q_ic k_jc (a_ijc - 1): added to s q.k it gives the method-3 score.
        # O(n^2 d) memory.
        return self._scale(q.shape[-1]) * torch.einsum(
            "bhic,bhjc,bijc->bhij", q, k, a - 1
        )


class HuangMethod4(_HuangTable):
    """Method 4: ``s (q_i . a_ij + k_j . a_ij)`` added to ``s q_i . k_j``, with
    ``a_ij = w_{j-i}``."""

    method = 4
    four_terms = {
        "content-content": "kept",
        "content-position": "replaced by q_i . a(j-i) (learned vectors)",
        "position-content": "replaced by k_j . a(j-i) (the same vectors)",
        "position-position": "dropped (the a . a term of (q+a).(k+a) is left out)",
    }

    def __init__(self, max_distance: int, d_head: int):
        check_positive_int(d_head, "d_head")  # named as the caller wrote it
        super().__init__(max_distance, d_head, True, init="normal")

    def score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        self._check_width(q)
        b, h, i, _ = q.shape
        j = k.shape[2]
        idx = self._index(q_pos, k_pos)  # (b|1, i, j)
        w = self.w.to(q.dtype)
        # q_i . w_r for every row r, then pick r = idx(i, j): no (i, j, d) tensor
        # is built
        qa = torch.gather(q @ w.T, -1, idx[:, None].expand(b, h, i, j))  # (b, h, i, j)
        ka = torch.gather(
            k @ w.T, -1, idx.transpose(1, 2)[:, None].expand(b, h, j, i)
        )  # (b, h, j, i)
        return self._scale(q.shape[-1]) * (qa + ka.transpose(-1, -2))


def huang_method(method: int, *, d_head: int, max_distance: int) -> _HuangTable:
    """Build method 1, 2, 3 or 4 of Huang et al. (2020)."""
    if method not in (1, 2, 3, 4):
        raise ValueError(f"method must be 1, 2, 3 or 4, got {method!r}")
    check_positive_int(d_head, "d_head")
    if method == 1:
        return HuangMethod1(max_distance)
    if method == 2:
        return HuangMethod2(max_distance)
    return (HuangMethod3 if method == 3 else HuangMethod4)(max_distance, d_head)


def _factory(method: int):
    def make(*, d_model: int, n_heads: int, max_len: int) -> _HuangTable:
        return huang_method(method, d_head=d_model // n_heads, max_distance=max_len - 1)

    return make


for _m in (1, 2, 3, 4):
    register(f"huang_m{_m}", needs_max_len=True)(_factory(_m))

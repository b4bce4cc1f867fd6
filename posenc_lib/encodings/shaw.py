"""Relative position representations of Shaw, Uszkoreit and Vaswani (2018).

For query position i and key position j the pair gets two learned vectors, picked by the
clipped offset key - query (the paper's convention, as in tensor2tensor)::

    r_ij  = clip(j - i, -k, k)                       one of 2k+1 offsets
    e_ij  = (q_i . k_j + q_i . a^K[r_ij]) / sqrt(d)  the key term  (Shaw eq. 4)
    z_i   = sum_j alpha_ij (v_j + a^V[r_ij])         the value term (Shaw eq. 3)

a^K and a^V are (2k+1, d) tables (d = head dimension), shared by all heads, as in the
paper. The attention adds ``score_bias`` *after* scaling q.k by 1/sqrt(d), so the bias
is scaled here.

Two forms give the same numbers:

* efficient (default): q . a^K[r] for the 2k+1 offsets, ``(b, h, i, 2k+1)``, then a
  gather to ``(b, h, i, j)``; the value term sums the weights per offset, then
  multiplies by a^V. Nothing of size i x j x d is built.
* direct (``direct=True``, for teaching): materialise a^K[r_ij] as an ``(i, j, d)``
  tensor and contract it with q (Shaw's own implementation, shared over batch
  and heads).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_nonnegative_int, check_positive_int

__all__ = ["Shaw", "shaw_relative_index"]


def shaw_relative_index(n_q: int, n_k: int, max_distance: int) -> torch.Tensor:
    """``(n_q, n_k)`` int64 table: entry (i, j) is clip(j - i, -k, k) + k, in
    ``0 .. 2k``.

    Query i and key j sit at positions 0..n_q-1 and 0..n_k-1 (tensor2tensor's
    ``_generate_relative_positions_matrix``). Row i, column j picks a^K and a^V.
    """
    check_positive_int(n_q, "n_q")
    check_positive_int(n_k, "n_k")
    k = check_nonnegative_int(max_distance, "max_distance")
    # r_ij = clip(j - i, -k, k) + k
    return (torch.arange(n_k)[None, :] - torch.arange(n_q)[:, None]).clamp(
        -k, k
    ) + k  # (i, j)


def _index_from_positions(
    q_pos: torch.Tensor, k_pos: torch.Tensor, k: int
) -> torch.Tensor:
    """``(b, i), (b, j) -> (b, i, j)``: clip(k_pos - q_pos, -k, k) + k."""
    return (k_pos[:, None, :] - q_pos[:, :, None]).clamp(-k, k) + k


class Shaw(PositionalEncoding):
    """Clipped relative key (and value) embeddings, shared across heads; efficient
    by default.

    ``d_head``: size of each relative vector (the head dimension). ``max_distance``: the
    clip distance k (2k+1 vectors per table). ``value=False`` drops the value term
    (a^V). ``direct=True`` builds the ``(i, j, d)`` tensors instead (same numbers,
    more memory).
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "replaced by q_i . a^K[clip(j-i)] (learned, 2k+1 vectors)",
        "position-content": "dropped",
        "position-position": (
            "dropped (no absolute positions; "
            "a^V adds a_ij-weighted vectors to the values)"
        ),
    }

    def __init__(
        self,
        d_head: int,
        max_distance: int = 16,
        value: bool = True,
        direct: bool = False,
    ):
        super().__init__()
        self.d_head = check_positive_int(d_head, "d_head")
        self.max_distance = check_nonnegative_int(max_distance, "max_distance")
        self.direct = bool(direct)
        n = 2 * self.max_distance + 1
        self.rel_k = nn.Parameter(
            nn.init.xavier_uniform_(torch.empty(n, d_head))
        )  # (2k+1, d)
        self.rel_v = (
            nn.Parameter(nn.init.xavier_uniform_(torch.empty(n, d_head)))
            if value
            else None
        )

    def _index(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b|1, i, j)`` table rows (both terms use them)."""
        return _index_from_positions(q_pos, k_pos, self.max_distance)  # (b|1, i, j)

    def score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        if q.dim() != 4:
            raise ValueError(f"q must have shape (b, h, i, d), got {tuple(q.shape)}")
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q has head dimension {q.shape[-1]}, but this Shaw encoding was built "
                f"for d_head={self.d_head}"
            )
        idx = self._index(q_pos, k_pos)  # (b, i, j)
        scale = 1.0 / math.sqrt(q.shape[-1])
        if self.direct:
            a = self.rel_k[idx]  # (b, i, j, d): the N x N x d tensor
            # (q_i . a^K_ij) / sqrt(d)
            return torch.einsum("bhid,bijd->bhij", q, a) * scale
        # q_i . a^K_r for the 2k+1 offsets r, then pick r = r_ij
        qa = torch.einsum("bhid,rd->bhir", q, self.rel_k)  # (b, h, i, 2k+1)
        b, h, i, _ = qa.shape
        return (
            qa.gather(-1, idx[:, None].expand(b, h, i, idx.shape[-1])) * scale
        )  # (b, h, i, j)

    def value_bias(
        self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        if self.rel_v is None:
            return None
        idx = self._index(q_pos, k_pos)  # (b, i, j)
        # in the weights' dtype: float32 for a half-precision table, as the
        # attention's weights @ v (a float16 table would not meet float32 weights)
        rel_v = self.rel_v.to(weights.dtype)  # (2k+1, d)
        if self.direct:
            a = rel_v[idx]  # (b, i, j, d)
            # sum_j alpha_ij a^V_ij
            return torch.einsum("bhij,bijd->bhid", weights, a)
        # sum the weights that share an offset r, then sum_r w_ir a^V_r
        b, h, i, j = weights.shape
        per_offset = weights.new_zeros(b, h, i, rel_v.shape[0])  # (b, h, i, 2k+1)
        per_offset = per_offset.scatter_add(
            -1, idx[:, None].expand(b, h, i, j), weights
        )
        return torch.einsum("bhir,rd->bhid", per_offset, rel_v)  # (b, h, i, d)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, max_distance={self.max_distance}, "
            f"value={self.rel_v is not None}, direct={self.direct}"
        )


@register("shaw")
def _make(*, d_model: int, n_heads: int, max_len: int) -> Shaw:
    return Shaw(d_model // n_heads, max_distance=16)

"""The relative attention of Transformer-XL (Dai et al., 2019), without the
segment recurrence.

For query position i and key position j (offset i - j, query minus key, the paper's and
the authors' convention), with head-wise projections q_i = W_q x_i, k_j = W_k x_j::

    A_ij = q_i . k_j                  (a) content-content
         + q_i . W_R R_{i-j}          (b) content-position
         + u   . k_j                  (c) global content bias
         + v   . W_R R_{i-j}          (d) global position bias

R is the fixed sinusoid of Vaswani et al. (no parameters); W_R (``d_model -> d_model``,
split into heads) and u, v (one vector per head) are learned. Like the authors' code,
the four terms are scaled together by 1/sqrt(d); the attention scales (a), so
``score_bias`` scales (b) + (c) + (d) itself.

(b) + (d) = (q_i + v) . W_R R_{i-j} is computed once per *distinct* offset,
``(b, h, i, L)``, and then moved into place: with consecutive positions by the relative
shift ``rel_shift`` (the authors' trick), otherwise by a gather. ``direct=True`` builds
W_R R_{i-j} for every pair, an ``(b, i, j, h, d)`` tensor, for teaching.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..positions import position_facts
from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_head_split, check_heads
from .sinusoidal import sinusoidal_encoding

__all__ = ["TransformerXL", "rel_shift"]


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """The Transformer-XL relative shift on the last two axes:
    ``(..., n, L) -> (..., n, L)``.

    Pad one zero column on the left, read the ``n x (L+1)`` block as ``(L+1) x n``, drop
    its first row and read the rest back as ``n x L``. Entry (i, j) of the result is
    ``x[..., i, j + n - 1 - i]`` whenever ``j + n - 1 - i < L``; the entries above that
    (``j > i + L - n``) are filler. So if column c of x holds offset ``r_max - c``
    (offsets in decreasing order) and row i is the query, column j of the result holds
    offset ``r_max - (n - 1 - i) - j``: the offset between query i and key j.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2 or x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(
            "x must have at least 2 non-empty axes (..., n, L), got shape "
            f"{tuple(x.shape)}"
        )
    *lead, n, length = x.shape
    padded = torch.cat([x.new_zeros(*lead, n, 1), x], dim=-1)  # (..., n, L+1)
    padded = padded.reshape(*lead, length + 1, n)  # same memory, read as (L+1) x n
    return padded[..., 1:, :].reshape(*lead, n, length)  # drop the first n entries


class TransformerXL(PositionalEncoding):
    """Terms (a)-(d) of Transformer-XL through ``score_bias``; no memory
    (recurrence)."""

    four_terms = {
        "content-content": "kept: (a) q_i . k_j",
        "content-position": (
            "replaced by (b) q_i . W_R R_{i-j} (fixed sinusoid, learned W_R)"
        ),
        "position-content": "replaced by (c) u . k_j (learned global content bias)",
        "position-position": (
            "replaced by (d) v . W_R R_{i-j} (learned global position bias)"
        ),
    }

    def __init__(
        self, d_model: int, n_heads: int, base: float = 10000.0, direct: bool = False
    ):
        super().__init__()
        self.d_head = check_head_split(d_model, n_heads)
        self.d_model, self.n_heads = d_model, n_heads
        if d_model % 2:
            raise ValueError(
                "d_model must be even for the sinusoid R (sin/cos pairs), got "
                f"{d_model}"
            )
        self.base = float(base)
        self.direct = bool(direct)
        self.w_r = nn.Linear(d_model, d_model, bias=False)  # W_{k,R}
        self.u = nn.Parameter(torch.randn(n_heads, self.d_head) * 0.02)  # (h, d)
        self.v = nn.Parameter(torch.randn(n_heads, self.d_head) * 0.02)  # (h, d)

    def projected_r(self, offsets: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(...)`` integer offsets i - j -> ``(..., h, d)``: W_R R_{i-j}, split
        into heads."""
        r = sinusoidal_encoding(
            offsets, self.d_model, self.base, dtype=dtype
        )  # (..., D)
        return self.w_r(r).unflatten(-1, (self.n_heads, self.d_head))  # (..., h, d)

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx=None,
    ) -> torch.Tensor:
        check_heads(q, self, self.n_heads, self.d_head)
        b, h, n_q, d = q.shape
        n_k = k.shape[2]
        # (c) u . k_j, the same for every query
        c = torch.einsum("hd,bhjd->bhj", self.u, k)[:, :, None, :]  # (b, h, 1, j)
        qv = q + self.v[None, :, None, :]  # (b, h, i, d): (b) + (d) together
        offsets = q_pos[:, :, None] - k_pos[:, None, :]  # (b|1, i, j): i - j
        facts = position_facts(q_pos, k_pos, ctx)  # offsets i - j in -hi .. -lo
        # positions far apart (more offsets in the span than keys per head
        # dimension: four tokens at 0, 1, 2, 10^9): W_R R of each pair instead
        wide = not facts.run and facts.hi - facts.lo + 1 > n_k * d
        if self.direct or wide:
            r = self.projected_r(offsets, q.dtype)  # (b, i, j, h, d)
            bd = torch.einsum("bhid,bijhd->bhij", qv, r)
        elif facts.run:
            # keys a run, queries the last of them: every row has the same offsets,
            # from r_max = last query - first key = n_k - 1 down, L = n_q + n_k - 1
            # (whatever each row starts at: not -lo, which spans the whole batch)
            r_max = n_k - 1
            r = self.projected_r(
                torch.arange(r_max, r_max - (n_q + n_k - 1), -1, device=q.device),
                q.dtype,
            )  # (L, h, d)
            bd = rel_shift(torch.einsum("bhid,lhd->bhil", qv, r))[
                ..., :n_k
            ]  # (b, h, i, j)
        else:
            r_max = -facts.lo
            r = self.projected_r(
                torch.arange(r_max, -facts.hi - 1, -1, device=q.device),
                q.dtype,
            )  # (L, h, d)
            table = torch.einsum("bhid,lhd->bhil", qv, r)  # (b, h, i, L)
            index = (r_max - offsets)[:, None].expand(b, h, n_q, n_k)
            bd = table.gather(-1, index)
        return (bd + c) / math.sqrt(d)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, base={self.base:g}, "
            f"direct={self.direct}"
        )


@register("transformer_xl")
def _make(*, d_model: int, n_heads: int, max_len: int) -> TransformerXL:
    return TransformerXL(d_model, n_heads)

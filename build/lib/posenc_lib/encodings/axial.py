"""Axial position embeddings (Kitaev et al., 2020; the Reformer's code): two small
learned tables.

Position ``n`` is split into a place inside a segment of length ``n1`` and a
segment index (a bijection onto [0, n1) x [0, n2)):

    r = n mod n1,     s = floor(n / n1),     n = r + n1 * s

    concat (Reformer):  P[n] = [ P1[r] | P2[s] ]    P1: (n1, d1),  P2: (n2, d2)
    sum:                P[n] =   P1[r] + P2[s]      P1: (n1, D),   P2: (n2, D)

with d1 + d2 = D for concat, so ``n1 * n2`` positions cost ``n1 d1 + n2 d2`` (concat)
or ``(n1 + n2) D`` (sum) parameters instead of ``n1 n2 D``. Positions ``>= n1 * n2``
have no embedding (a clear ``ValueError``).

Convention map to Hugging Face's ``ReformerConfig`` / trax:
``axial_pos_shape = (n2, n1)`` (the first axis varies slowest) and
``axial_pos_embds_dim = (d2, d1)``: their output is ``[P2[s] | P1[r]]``, ours is
``[P1[r] | P2[s]]`` (Dufter et al. 2022's order), a column permutation.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_integer, check_positive_int, compiling

__all__ = ["AxialPositionalEncoding", "axial_indices", "axial_shape"]

MODES = ("concat", "sum")


def axial_indices(
    pos: torch.Tensor, n1: int, checked: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer positions ``(...)`` -> ``(r, s)`` with ``r = pos mod n1`` and
    ``s = pos // n1`` (``checked``: the caller has checked ``pos``)."""
    check_positive_int(n1, "n1")
    pos = torch.as_tensor(pos)
    check_integer(pos, "pos")
    if not checked and pos.numel() and not compiling() and bool(pos.min() < 0):
        raise ValueError(f"pos must be >= 0, got a minimum of {int(pos.min())}")
    # r = n mod n1,  s = floor(n / n1)
    return pos % n1, torch.div(pos, n1, rounding_mode="floor")


class AxialPositionalEncoding(PositionalEncoding):
    """Adds ``[P1[r] | P2[s]]`` (``mode="concat"``) or ``P1[r] + P2[s]``
    (``mode="sum"``) to each embedding.

    ``n1`` is the segment length (the fast axis), ``n2`` the number of segments;
    positions must lie in ``[0, n1 * n2)``. The model dimension is ``d1 + d2`` (concat)
    or ``d1 == d2`` (sum). Tables are initialised from ``N(0, init_std^2)``, 1.0 as in
    trax and Hugging Face.
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "kept (learned absolute P = [P1[r] | P2[s]] through W_k)",
        "position-content": "kept (learned absolute P through W_q)",
        "position-position": (
            "kept (P1/P2 cross terms in r_i, s_i, r_j, s_j; not a function of i - j)"
        ),
    }

    def __init__(
        self,
        n1: int,
        n2: int,
        d1: int,
        d2: int,
        mode: str = "concat",
        init_std: float = 1.0,
        max_len: int | None = None,
    ):
        super().__init__()
        self.n1, self.n2 = check_positive_int(n1, "n1"), check_positive_int(n2, "n2")
        self.d1, self.d2 = check_positive_int(d1, "d1"), check_positive_int(d2, "d2")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "sum" and d1 != d2:
            raise ValueError(
                "mode='sum' adds P1[r] + P2[s], so d1 must equal d2 (= d_model), got "
                f"d1={d1}, d2={d2}"
            )
        if not init_std >= 0:
            raise ValueError(f"init_std must be >= 0, got {init_std}")
        self.mode = mode
        self.d_model = d1 + d2 if mode == "concat" else d1
        # the grid holds n1 * n2 rows; a smaller max_len (the length asked for) is the
        # limit, as for a learned table: rows past it exist but were never meant to be
        # used, and would be trained by nothing
        self.max_len = (
            n1 * n2 if max_len is None else check_positive_int(max_len, "max_len")
        )
        if self.max_len > n1 * n2:
            raise ValueError(
                f"max_len ({self.max_len}) must be <= n1 * n2 = {n1 * n2}, the rows "
                "the grid holds"
            )
        self.p1 = nn.Parameter(
            torch.randn(n1, d1) * init_std
        )  # (n1, d1): position inside a segment
        self.p2 = nn.Parameter(
            torch.randn(n2, d2) * init_std
        )  # (n2, d2): which segment

    def check_positions(self, pos: torch.Tensor) -> None:
        """Raise ``ValueError`` unless every position lies in ``[0, max_len)``."""
        if not pos.numel() or compiling():  # inside a compiled graph: no data checks
            return
        lo, hi = torch.stack([pos.min(), pos.max()]).tolist()  # one sync
        if lo < 0:
            raise ValueError(f"pos must be >= 0, got a minimum of {lo}")
        if hi >= self.max_len:
            raise ValueError(
                f"pos must lie in [0, max_len) = [0, {self.max_len}) for this axial "
                f"table (n1={self.n1}, n2={self.n2}), got values in "
                f"[{lo}, {hi}]"
            )

    def embed(self, pos: torch.Tensor) -> torch.Tensor:
        """Integer positions ``(...)`` -> their axial embeddings ``(..., D)``."""
        pos = torch.as_tensor(pos, device=self.p1.device)
        self.check_positions(pos)
        r, s = axial_indices(pos, self.n1, checked=True)
        if self.mode == "concat":
            # P[n] = [P1[r] | P2[s]]
            return torch.cat((self.p1[r], self.p2[s]), dim=-1)  # (..., d1 + d2)
        # P[n] = P1[r] + P2[s]
        return self.p1[r] + self.p2[s]  # (..., D)

    def table(self) -> torch.Tensor:
        """The full ``(n1 * n2, D)`` table, row ``n`` = ``P[n]`` (for plots
        and tests)."""
        return self.embed(torch.arange(self.max_len, device=self.p1.device))

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x has model dimension {x.shape[-1]}, but this axial encoding gives "
                f"d_model={self.d_model} "
                f"(mode={self.mode!r}, d1={self.d1}, d2={self.d2})"
            )
        return x + self.embed(pos).to(x.dtype)  # (b, n, D)

    def n_params(self) -> int:
        return self.n1 * self.d1 + self.n2 * self.d2

    def extra_repr(self) -> str:
        return (
            f"n1={self.n1}, n2={self.n2}, d1={self.d1}, d2={self.d2}, "
            f"mode={self.mode!r}"
        )


def axial_shape(max_len: int) -> tuple[int, int]:
    """A near-square factorisation covering ``max_len``: ``n1 = ceil(sqrt(max_len))``,
    ``n2 = ceil(max_len / n1)``."""
    check_positive_int(max_len, "max_len")
    n1 = math.isqrt(max_len - 1) + 1  # ceil(sqrt(max_len))
    return n1, -(-max_len // n1)


@register("axial", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> AxialPositionalEncoding:
    if d_model < 2:
        raise ValueError(
            "the concatenated axial encoding needs d_model >= 2 (d1 + d2 = d_model, "
            f"both > 0), got {d_model}"
        )
    n1, n2 = axial_shape(max_len)
    # half the dimensions for the place inside a segment, half for the segment index
    return AxialPositionalEncoding(
        n1, n2, d_model // 2, d_model - d_model // 2, mode="concat", max_len=max_len
    )

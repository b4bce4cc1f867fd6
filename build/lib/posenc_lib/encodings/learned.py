"""A learned absolute position table (BERT, GPT-2): row ``p`` of a trainable matrix is
added to token ``p``.

    x_p  <-  x_p + P[p],        P in R^{max_len x D} (trainable),   p = 0 .. max_len - 1

The table has exactly ``max_len`` rows, so a position ``p >= max_len`` has no embedding
at all: this is the hard length limit of BERT (512) and GPT-2 (1024). Here such a
position is a clear ``ValueError`` (a bare ``nn.Embedding`` raises an ``IndexError`` on
the CPU and a device-side assert on CUDA). Rows that training never reaches get
no gradient.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int, compiling

__all__ = ["LearnedAbsolute"]


class LearnedAbsolute(PositionalEncoding):
    """Adds the trainable row ``P[pos]`` to each embedding; positions must lie in
    ``[0, max_len)``.
    Paper: Devlin et al., 2019 (BERT; GPT-2 likewise).

    ``init_std`` is the standard deviation of the normal initialisation. The default 1.0
    puts the table on the same scale as ``nn.Embedding``'s default, which
    ``TinyTransformer`` uses for its tokens; BERT and GPT-2 initialise both of their
    tables with 0.02 (again the same scale).
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "kept (learned absolute P through W_k)",
        "position-content": "kept (learned absolute P through W_q)",
        "position-position": (
            "kept (P W_q W_k^T P^T; any function of (i, j), nothing ties it to i - j)"
        ),
    }

    def __init__(self, max_len: int, d_model: int, init_std: float = 1.0):
        super().__init__()
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_model = check_positive_int(d_model, "d_model")
        if not init_std >= 0:
            raise ValueError(f"init_std must be >= 0, got {init_std}")
        self.table = nn.Parameter(
            torch.randn(max_len, d_model) * init_std
        )  # (max_len, D)

    def check_positions(self, pos: torch.Tensor) -> None:
        """Raise ``ValueError`` unless every position lies in ``[0, max_len)``."""
        if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
            raise TypeError(f"pos must hold integer positions, got dtype {pos.dtype}")
        if not pos.numel() or compiling():  # inside a compiled graph: no data checks
            return
        lo, hi = torch.stack([pos.min(), pos.max()]).tolist()  # one sync
        if lo < 0 or hi >= self.max_len:
            raise ValueError(
                f"pos must lie in [0, max_len) = [0, {self.max_len}) for a learned "
                f"table of {self.max_len} rows, got positions in "
                f"[{lo}, {hi}]: the table has no row for them"
            )

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x has model dimension {x.shape[-1]}, but this LearnedAbsolute table "
                f"was built for d_model={self.d_model}"
            )
        self.check_positions(pos)
        # x_p + P[p]
        return x + self.table[pos].to(x.dtype)  # (b, n, D)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


@register("learned", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> LearnedAbsolute:
    return LearnedAbsolute(max_len, d_model)

"""Checks for the exercises of book/part6/cost.ipynb."""

from __future__ import annotations

import functools

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, exercise, expect, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part6/cost"

HEADS_STUB = """\
# measured: peak memory of the "alibi, float mask" run with 8 heads / with 1 head
heads_ratio = ...  # your answer
"""


class _FloatMaskALiBi(pl.ALiBi):
    """The chapter's ``FloatMaskALiBi``: ALiBi without its key form, so that the fused
    path takes its bias as an (h, n, n) float mask."""

    key_bias = pl.PositionalEncoding.key_bias


@functools.lru_cache(maxsize=None)
def _peak(heads: int, n: int = 1024, d: int = 32) -> int:
    """Peak tensor memory (bytes) of one forward and backward pass of the chapter's
    "alibi, float mask" run (fused path, causal) with ``heads`` heads of width
    ``d``."""
    pe = _FloatMaskALiBi(heads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, heads, n, d, generator=g).requires_grad_() for _ in range(3)
    )

    def step():
        pl.attention(q, k, v, pe, causal=True).sum().backward()

    return pl.tensor_memory(step)[1]


@exercise("ex-cost-heads", chapter=CHAPTER, stub=HEADS_STUB)
def _(answer):
    got = number(answer, "heads_ratio")
    want = _peak(8) / _peak(1)
    if abs(got - 8) < 0.05 and abs(want - 8) > 0.4:
        raise Wrong(
            "`heads_ratio` is 8, the prediction if every n x n tensor had one copy per "
            "head: measure it; the offsets i - j the biases are made from are built "
            "once for all heads"
        )
    if abs(got - 64) < 0.5:
        raise Wrong("`heads_ratio` is 64: memory grows with h, not with h^2")
    expect(
        abs(got - want) <= 0.05 * want,
        f"`heads_ratio` is {got:.3g}, but the peak grows by {want:.2f} from 1 to 8 "
        "heads (pl.tensor_memory, n = 1024)",
    )
    return (
        f"the peak tensor memory grows by {want:.2f} from 1 to 8 heads "
        "(pl.tensor_memory of the alibi, float mask run at n = 1024, to 5 %)."
    )


plant("ex-cost-heads", 8, says="one copy per head")
plant("ex-cost-heads", 64, says="not with h^2")
plant("ex-cost-heads", 1.0, says="but the peak grows by")
plant("ex-cost-heads", "x8", says="should be a number")

"""Checks for the exercises of book/part3/alibi.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import (
    Wrong,
    call,
    exercise,
    expect,
    expect_close,
    plant,
)
from posenc_lib.course.exercises._values import as_float

SLOPES_STUB = '''\
def slopes_by_hand(n_heads):
    """The ALiBi slopes (n_heads,) of head 1 .. n_heads, by the authors' rule,
    as a list or a tensor of floats."""
    ...  # your code
'''

HEADS = (8, 24, 12, 6)


def _as_slopes(got, n: int, desc: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(got, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        raise Wrong(
            f"on {desc}, expected a list or tensor of numbers, got {type(got).__name__}"
        ) from None
    expect(t.numel() == n, f"on {desc}, your function gave {t.numel()} slopes, not {n}")
    return t


@exercise("ex-alibi-slopes-24", chapter="part3/alibi", stub=SLOPES_STUB)
def _(answer):
    for n in HEADS:
        desc = f"n_heads = {n}"
        got = _as_slopes(call(answer, n, desc=desc), n, desc)
        want = pl.alibi_slopes(n, dtype=torch.float64)
        if torch.allclose(got, want):
            continue
        geometric = torch.tensor([2.0 ** (-8 * h / n) for h in range(1, n + 1)])
        if torch.allclose(got, geometric.double()):
            raise Wrong(
                f"on {desc} (not a power of 2), your slopes are 2^(-8h/n) for every "
                "head: the authors' rule starts from the nearest power of 2 below n"
            )
        if torch.allclose(got, want.flip(0)):
            raise Wrong(
                f"on {desc}, your slopes are in reverse order: head 1 is the steepest"
            )
        if torch.allclose(torch.sort(got).values, torch.sort(want).values):
            raise Wrong(
                f"on {desc}, your slopes are the right set in the wrong order: the "
                "extra heads come after the first ones"
            )
        expect_close(
            got.log2(),
            want.log2(),
            desc=desc,
            what="log2 of your slopes",
            atol=1e-9,
            rtol=0,
        )
    return (
        "equals pl.alibi_slopes(n) for n_heads = "
        + ", ".join(map(str, HEADS))
        + ", powers of 2 or not."
    )


def _geometric(n):
    return [2.0 ** (-8 * h / n) for h in range(1, n + 1)]


def _even_extra(n):
    c = 1 << (n.bit_length() - 1)
    return _geometric(c) + _geometric(2 * c)[1::2][: n - c]


plant("ex-alibi-slopes-24", _geometric, says="not a power of 2")
plant("ex-alibi-slopes-24", lambda n: pl.alibi_slopes(n).flip(0), says="reverse order")
plant("ex-alibi-slopes-24", _even_extra, says="log2 of your slopes differs")
plant("ex-alibi-slopes-24", lambda n: _geometric(n)[:-1], says="slopes, not")
plant("ex-alibi-slopes-24", lambda n: None, says="returned None")


WINDOW_STUB = '''\
def half_window(m):
    """How many of the most recent keys hold half of the content-free attention
    weight of a head with slope m (a float), for a query that sees very many
    keys: a real number."""
    ...  # your code
'''

SLOPES = (0.5, 1 / 16, 1 / 256)


def _numeric_half(slope: float, n_keys: int = 4096) -> float:
    """Count, with pl.alibi_bias, the recent keys a content-free query needs for
    half its weight (the last of n_keys queries, all scores 0)."""
    slopes = torch.tensor([slope], dtype=torch.float64)
    k_pos = torch.arange(n_keys)[None]  # (1, j)
    bias = pl.alibi_bias(slopes, k_pos[:, -1:], k_pos)  # (1, 1, 1, j)
    by_distance = bias[0, 0, 0].softmax(-1).flip(0).cumsum(0)  # the k+1 nearest
    return float((by_distance < 0.5).sum() + 1)


@exercise("ex-alibi-window", chapter="part3/alibi", stub=WINDOW_STUB)
def _(answer):
    for m in SLOPES:
        desc = f"slope m = {m:g}"
        got = call(answer, m, desc=desc)
        got = as_float(got, desc)
        want = math.log(2) / m
        if abs(got - want) <= 1.0:  # the real K or the whole number of keys
            continue
        if abs(got - 1 / m) < 1e-6 * (1 / m) + 1e-9:
            raise Wrong(
                f"on {desc}, your answer is 1/m = {got:g}: that is the mean distance "
                "of the weights, not the count that holds half of them"
            )
        if abs(got - math.log(2) * m) < 1e-9 or abs(got - m / math.log(2)) < 1e-9:
            raise Wrong(
                f"on {desc}, your answer grows with m: a steeper slope "
                "should give fewer keys"
            )
        counted = _numeric_half(m)
        raise Wrong(
            f"on {desc}, your answer is {got:.6g} keys; with pl.alibi_bias, a query "
            f"with zero scores over 4096 keys needs {counted:.0f} of the nearest keys "
            "to reach half the weight"
        )
    counted = _numeric_half(SLOPES[-1])
    expect(
        abs(counted - math.log(2) / SLOPES[-1]) <= 1.0,
        "the numerical count disagrees with the closed form (a bug in the check)",
    )
    return (
        "within one key of the count for m = "
        + ", ".join(f"{m:g}" for m in SLOPES)
        + f"; pl.alibi_bias counts {counted:.0f} keys for m = 1/256."
    )


plant("ex-alibi-window", lambda m: 1 / m, says="mean distance")
plant("ex-alibi-window", lambda m: math.log(2) * m, says="grows with m")
plant("ex-alibi-window", lambda m: math.log(2) / m / 2, says="needs")
plant("ex-alibi-window", lambda m: [1, 2], says="expected a number")
plant("ex-alibi-window", lambda m: None, says="returned None")

"""Checks for the exercises of book/part3/nope.ipynb."""

from __future__ import annotations

import math

from posenc_lib.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.exercises._values import as_float

BOUND_STUB = '''\
def constant_bound(N):
    """The mean absolute error of the best constant guess c (an integer in
    0 .. N-1) of the position of a token at positions 1 .. N-1 (a float)."""
    ...  # your code
'''

NS = (24, 9, 10, 2)


def _mad(positions: list[int], guesses) -> float:
    return min(sum(abs(p - c) for p in positions) for c in guesses) / len(positions)


@exercise("ex-nope-bound", chapter="part3/nope", stub=BOUND_STUB)
def _(answer):
    for N in NS:
        desc = f"N = {N}"
        got = call(answer, N, desc=desc)
        value = as_float(got, desc)
        positions = list(range(1, N))
        want = _mad(positions, range(N))  # the search the chapter prints
        if math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        if math.isclose(value, _mad(list(range(N)), range(N)), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your bound includes position 0: the anchor is "
                "recognisable, the bound is over positions 1 .. N-1"
            )
        if math.isclose(value, want * (N - 1) / N, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your bound divides by N; there are N - 1 positions "
                "from 1 to N-1"
            )
        mean = sum(positions) / len(positions)
        variance = sum((p - mean) ** 2 for p in positions) / len(positions)
        if math.isclose(value, variance, rel_tol=1e-9) or math.isclose(
            value, math.sqrt(variance), rel_tol=1e-9
        ):
            raise Wrong(
                f"on {desc}, your bound is a squared-error measure; the chapter "
                "measures the mean absolute error"
            )
        expect_close(value, want, desc=desc, what="your bound", atol=1e-9, rtol=1e-9)
    return (
        "equals the smallest mean absolute error over every constant guess, for N = "
        + ", ".join(map(str, NS))
        + f" (N = 24: {_mad(list(range(1, 24)), range(24)):.2f})."
    )


def _with_zero(N):
    return _mad(list(range(N)), range(N))


def _over_n(N):
    return _mad(list(range(1, N)), range(N)) * (N - 1) / N


def _std(N):
    ps = range(1, N)
    m = sum(ps) / (N - 1)
    return math.sqrt(sum((p - m) ** 2 for p in ps) / (N - 1))


plant("ex-nope-bound", _with_zero, says="includes position 0")
plant("ex-nope-bound", _over_n, says="divides by N")
plant("ex-nope-bound", _std, says="squared-error")
plant("ex-nope-bound", lambda N: N / 3, says="your bound is")
plant("ex-nope-bound", lambda N: None, says="returned None")

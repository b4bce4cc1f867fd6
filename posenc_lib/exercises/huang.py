"""Checks for the exercises of book/part2/huang.ipynb."""

from __future__ import annotations

import posenc_lib as pl
from posenc_lib.exercises import Wrong, call, exercise, plant
from posenc_lib.exercises._values import number

CHAPTER = "part2/huang"

PARAMS_STUB = '''\
def huang_params(method, d_head, max_distance):
    """The number of learned scalars in the table of Huang's method 1, 2, 3 or 4,
    for heads of size d_head and offsets clipped at max_distance."""
    ...  # your code
'''


@exercise("ex-huang-params", chapter=CHAPTER, stub=PARAMS_STUB)
def _(answer):
    settings = [(64, 511), (16, 7), (8, 100)]
    for d, k in settings:
        for method in (1, 2, 3, 4):
            desc = f"method {method}, d_head = {d}, max_distance = {k}"
            got = number(call(answer, method, d, k, desc=desc), "your count")
            table = pl.huang_method(method, d_head=d, max_distance=k)
            want = sum(p.numel() for p in table.parameters())
            if got == want:
                continue
            hint = ""
            if method == 1 and got == 2 * k + 1:
                hint = ": method 1 is symmetric, one scalar per distance |j - i|"
            elif method == 1 and got == k:
                hint = ": distance 0 has its scalar too"
            elif method > 1 and got == want // (2 * k + 1) * (2 * k):
                hint = ": offsets -k .. k are 2k + 1 of them"
            elif method in (3, 4) and got == 2 * k + 1:
                hint = ": methods 3 and 4 learn a vector of size d_head per offset"
            elif method == 2 and got == k + 1:
                hint = ": method 2 is directional, offsets -k .. k"
            raise Wrong(f"on {desc}, your count is {got:g}, expected {want}{hint}")
    return "equals the size of pl.huang_method's table for every method on " + (
        "(d_head, max_distance) = " + ", ".join(f"({d}, {k})" for d, k in settings)
    )


def _right(method, d, k):
    return [k + 1, 2 * k + 1, (2 * k + 1) * d, (2 * k + 1) * d][method - 1]


plant(
    "ex-huang-params",
    lambda m, d, k: 2 * k + 1 if m == 1 else _right(m, d, k),
    "method 1 is symmetric",
)
plant(
    "ex-huang-params",
    lambda m, d, k: 2 * k + 1 if m > 1 else k + 1,
    "vector of size d_head",
)
plant(
    "ex-huang-params",
    lambda m, d, k: [k + 1, 2 * k, 2 * k * d, 2 * k * d][m - 1],
    "2k + 1 of them",
)
plant(
    "ex-huang-params",
    lambda m, d, k: [k, 2 * k + 1, 0, 0][m - 1],
    "distance 0 has its scalar",
)
plant("ex-huang-params", lambda m, d, k: None, "returned None")

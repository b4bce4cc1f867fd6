"""Checks for the exercises of book/part1/learned_axial.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, plant
from posenc_lib.course.exercises._values import number, numbers

CHAPTER = "part1/learned_axial"

DESIGN_STUB = '''\
def axial_design(n_max, dim):
    """The concat axial encoding (d1 = d2 = dim / 2) for n_max = n1 * n2 positions
    with the fewest parameters: return (n1, n2, number of parameters)."""
    ...  # your code
'''


def _best(n_max: int, dim: int) -> int:
    half = dim // 2
    return min(half * (a + n_max // a) for a in range(1, n_max + 1) if n_max % a == 0)


@exercise("ex-learned-axial-design", chapter=CHAPTER, stub=DESIGN_STUB)
def _(answer):
    cases = [(4096, 512), (2048, 256), (1000, 64), (12, 8)]
    for n_max, dim in cases:
        desc = f"n_max = {n_max}, dim = {dim}"
        n1, n2, count = numbers(
            call(answer, n_max, dim, desc=desc), 3, f"axial_design({n_max}, {dim})"
        )
        if n1 != int(n1) or n2 != int(n2) or n1 < 1 or n2 < 1:
            raise Wrong(f"on {desc}, n1 = {n1:g} and n2 = {n2:g} must be whole, >= 1")
        n1, n2 = int(n1), int(n2)
        if n1 * n2 != n_max:
            raise Wrong(
                f"on {desc}, your grid {n1} x {n2} has {n1 * n2} cells, not n_max"
            )
        half = dim // 2
        real = pl.AxialPositionalEncoding(n1, n2, half, half).n_params()
        if count != real:
            hint = ""
            if count == dim * (n1 + n2):
                hint = ": each factor table is dim / 2 wide (concat, d1 = d2)"
            elif count == n_max * dim:
                hint = ": that is a full table's count"
            raise Wrong(
                f"on {desc}, your grid {n1} x {n2} has {real} parameters, you "
                f"said {count:g}{hint}"
            )
        best = _best(n_max, dim)
        if real != best:
            raise Wrong(
                f"on {desc}, your grid {n1} x {n2} needs {real} parameters; "
                f"another factorisation of {n_max} needs only {best}"
            )
    return (
        "the fewest parameters, counted as pl.AxialPositionalEncoding(...).n_params() "
        "does, for (n_max, dim) = " + ", ".join(str(c) for c in cases) + "."
    )


plant(
    "ex-learned-axial-design", lambda n, dim: (n, 1, dim // 2 * (n + 1)), "needs only"
)
plant("ex-learned-axial-design", lambda n, dim: (64, 64, 32768), "cells, not n_max")
plant(
    "ex-learned-axial-design",
    lambda n, dim: (_sq(n)[0], _sq(n)[1], dim * sum(_sq(n))),
    "dim / 2 wide",
)
plant("ex-learned-axial-design", lambda n, dim: None, "returned None")


def _sq(n: int) -> tuple[int, int]:
    a = max(a for a in range(1, int(n**0.5) + 1) if n % a == 0)
    return a, n // a


# ---- ex-learned-axial-rank ----------------------------------------------------------

RANK_STUB = '''\
def max_sum_rank(n1, n2, d):
    """The largest rank the (n1 * n2, d) table of a summed axial encoding
    (P1 of shape (n1, d), P2 of shape (n2, d)) can have."""
    ...  # your code
'''


def _table_rank(n1: int, n2: int, d: int, seed: int) -> int:
    with torch.random.fork_rng(devices=[]):  # the reader's random state untouched
        torch.manual_seed(seed)
        pe = pl.AxialPositionalEncoding(n1, n2, d, d, mode="sum").double()
    return int(torch.linalg.matrix_rank(pe.table().detach()))


@exercise("ex-learned-axial-rank", chapter=CHAPTER, stub=RANK_STUB)
def _(answer):
    cases = [(8, 8, 100), (4, 6, 30), (3, 5, 4), (1, 5, 10)]
    for n1, n2, d in cases:
        desc = f"n1 = {n1}, n2 = {n2}, d = {d}"
        got = number(call(answer, n1, n2, d, desc=desc), "your rank")
        rank = max(_table_rank(n1, n2, d, seed) for seed in range(3))
        if got == rank:
            continue
        if got == n1 + n2 and rank == n1 + n2 - 1:
            raise Wrong(
                f"on {desc}, random summed tables reach rank {rank} only, one less "
                "than n1 + n2: the indicator vectors [e_r | e_s] of the rows are "
                "linearly dependent"
            )
        if got > d:
            raise Wrong(f"on {desc}, a table with d = {d} columns has rank <= {d}")
        raise Wrong(
            f"on {desc}, your rank is {got:g}; random summed tables reach {rank}"
        )
    return "equals the rank random summed tables reach, for (n1, n2, d) = " + (
        ", ".join(str(c) for c in cases)
    )


plant("ex-learned-axial-rank", lambda n1, n2, d: min(n1 + n2, d), "one less")
plant("ex-learned-axial-rank", lambda n1, n2, d: n1 + n2 - 1, "has rank <=")
plant("ex-learned-axial-rank", lambda n1, n2, d: min(n1 * n2, d), "random summed")
plant("ex-learned-axial-rank", lambda n1, n2, d: None, "returned None")

"""Checks for the exercises of book/part2/t5.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import numbers

CHAPTER = "part2/t5"

# ---- ex-t5-buckets-64 ---------------------------------------------------------------

EDGES_STUB = '''\
def bucket_edges(num_buckets, max_distance):
    """One direction of T5's bidirectional table (offsets j - i <= 0): return
    (the number of exact distances, the first distance in the last bucket)."""
    ...  # your code
'''


def _edges(num_buckets: int, max_distance: int) -> tuple[int, int]:
    d = torch.arange(8 * max_distance)
    bk = pl.t5_relative_bucket(-d, True, num_buckets, max_distance)
    n_exact = int((bk[1:] == bk[:-1]).nonzero()[0])  # the first shared bucket
    return n_exact, int(d[bk == bk.max()][0])


@exercise("ex-t5-buckets-64", chapter=CHAPTER, stub=EDGES_STUB)
def _(answer):
    cases = [(64, 256), (32, 128), (32, 32), (16, 100)]
    for nb, md in cases:
        desc = f"num_buckets={nb}, max_distance={md}"
        got = numbers(call(answer, nb, md, desc=desc), 2, f"bucket_edges({nb}, {md})")
        n_exact, last = _edges(nb, md)
        if got[0] != n_exact:
            hint = ""
            if got[0] == nb // 2:
                hint = (
                    ": that is half of num_buckets, but the bidirectional table "
                    "first halves the buckets between past and future"
                )
            elif got[0] == n_exact - 1 or got[0] == n_exact + 1:
                hint = ": off by one (distance 0 has an exact bucket too)"
            raise Wrong(
                f"on {desc}, your number of exact distances is {got[0]:g}, "
                f"expected {n_exact}{hint}"
            )
        if got[1] != last:
            hint = ""
            if got[1] == last - 1:
                hint = (
                    ": that is the last distance *before* the last bucket "
                    "(the bucket is the floor of the log-scale value)"
                )
            elif got[1] == md:
                hint = ": the last bucket starts before max_distance"
            raise Wrong(
                f"on {desc}, your first distance of the last bucket is {got[1]:g}, "
                f"expected {last}{hint}"
            )
    return (
        "matches pl.t5_relative_bucket on (num_buckets, max_distance) = "
        + ", ".join(f"({nb}, {md})" for nb, md in cases)
        + "."
    )


plant("ex-t5-buckets-64", lambda nb, md: (nb // 2, _edges(nb, md)[1]), "halves")
plant("ex-t5-buckets-64", lambda nb, md: (_edges(nb, md)[0], md), "before max_dist")
plant(
    "ex-t5-buckets-64",
    lambda nb, md: (_edges(nb, md)[0], _edges(nb, md)[1] - 1),
    "*before* the last bucket",
)
plant("ex-t5-buckets-64", lambda nb, md: None, "returned None")

# ---- ex-t5-long ---------------------------------------------------------------------

LONG_STUB = """\
# the causal buckets (num_buckets=32, max_distance=128) of the keys 3000 and 200
# tokens back
far_buckets = ...  # your answer: (bucket of the key 3000 back, of the key 200 back)
"""


@exercise("ex-t5-long", chapter=CHAPTER, stub=LONG_STUB)
def _(answer):
    got = numbers(answer, 2, "far_buckets")
    offsets = torch.tensor([-3000, -200])
    want = pl.t5_relative_bucket(offsets, bidirectional=False).tolist()
    if list(got) == pl.t5_relative_bucket(offsets, True).tolist():
        raise Wrong(
            f"far_buckets = {got}: those are the bidirectional (encoder) buckets; "
            "a decoder uses the causal table"
        )
    if list(got) == pl.t5_relative_bucket(-offsets, False).tolist():
        raise Wrong(
            f"far_buckets = {got}: those are the buckets of keys 3000 and 200 "
            "tokens *ahead*; the offset is key - query, negative for the past"
        )
    expect_close(
        torch.tensor(got), torch.tensor(want), desc="far_buckets", what="far_buckets"
    )
    return "the two keys fall in the same (last) causal bucket: the same bias."


plant("ex-t5-long", (15, 15), "bidirectional")
plant("ex-t5-long", (0, 0), "*ahead*")
plant("ex-t5-long", (31, 30), "differs at entry")
plant("ex-t5-long", "31", "tuple of 2 numbers")

# ---- ex-t5-query-minus-key ----------------------------------------------------------

QMK_STUB = '''\
def bucket_from_query_minus_key(i_minus_j, bidirectional=True):
    """T5's bucket (num_buckets=32, max_distance=128) of every offset in
    i_minus_j (a tensor of query - key offsets); return a tensor of buckets."""
    ...  # your code
'''


@exercise("ex-t5-query-minus-key", chapter=CHAPTER, stub=QMK_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    i = torch.randint(0, 300, (40,), generator=gen)
    j = torch.randint(0, 300, (40,), generator=gen)
    rel = i - j
    for bidirectional in (False, True):
        desc = (
            f"query - key offsets {rel[:6].tolist()}... (bidirectional={bidirectional})"
        )
        got = call(answer, rel.clone(), bidirectional, desc=desc)
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"on {desc}, expected a tensor, got {type(got).__name__}")
        want = pl.t5_relative_bucket(j - i, bidirectional)
        same = pl.t5_relative_bucket(i - j, bidirectional)
        if got.shape == want.shape and torch.equal(got.long(), same):
            raise Wrong(
                f"on {desc}, your buckets are those of the offsets as given: "
                "T5's function expects key - query"
                + (
                    ", and in the causal mode every visible key then lands in bucket 0"
                    if not bidirectional
                    else " (yours swaps the past and future halves)"
                )
            )
        expect_close(got, want, desc=desc, what="the buckets")
    return "equals T5's buckets of key - query, in both modes, on 40 random offsets."


plant(
    "ex-t5-query-minus-key",
    lambda r, bi: pl.t5_relative_bucket(r, bi),
    "expects key - query",
)
plant(
    "ex-t5-query-minus-key",
    lambda r, bi: pl.t5_relative_bucket(-r.abs(), bi),
    "differs at entry",
)
plant(
    "ex-t5-query-minus-key",
    lambda r, bi: pl.t5_relative_bucket(-r, bi, num_buckets=bi),
    "your function raised",
)

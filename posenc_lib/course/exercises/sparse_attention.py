"""Checks for the exercises of book/part7/sparse_attention.ipynb.

* ``ex-sparse-attention-rows``: the rows of a half-split indexer projection, reordered
  for code that rotates interleaved (the permutation of the chapter, written by hand),
  compared with ``convert_indexer_layout``; the wrong answers named: the inverse
  permutation, the pass rows moved too.
* ``ex-sparse-attention-slice``: the permutation of a head's coordinates that lets
  code rotating the first r coordinates run a checkpoint trained rotating the last r
  (HY-V4's order), checked on the scores it gives in both layouts.
"""

from __future__ import annotations

import torch

from posenc_lib.course.exercises import (
    Wrong,
    call,
    exercise,
    expect,
    expect_close,
    plant,
)
from posenc_lib.encodings.rope_scaling import rope_inv_freq
from posenc_lib.encodings.sparse_indexer import convert_indexer_layout, rope_slice
from posenc_lib.layouts import half_to_interleaved

ROWS_STUB = '''\
def rows_for_interleaved(W, n_heads, r):
    """W (n_heads * d, D): an indexer projection trained with half-split RoPE on the
    first r coordinates of each head. Return its rows reordered so that code that
    rotates those r coordinates interleaved gives the same scores (a new tensor)."""
    ...  # your code
'''


@exercise("ex-sparse-attention-rows", chapter="part7/sparse_attention", stub=ROWS_STUB)
def _(answer):
    g = torch.Generator().manual_seed(0)
    for heads, d, r in [(1, 8, 8), (2, 8, 4), (3, 12, 8)]:
        desc = f"n_heads = {heads}, d = {d}, r = {r}"
        W = torch.randn(heads * d, 5, generator=g, dtype=torch.float64)
        got = call(answer, W.clone(), heads, r, desc=desc)
        want = convert_indexer_layout(W, heads, r, "rot_first", "half", "interleaved")
        expect(
            isinstance(got, torch.Tensor) and got.shape == W.shape,
            f"on {desc}, return a tensor of W's shape {tuple(W.shape)}",
        )
        if torch.equal(got, want):
            continue
        inverse = convert_indexer_layout(
            W, heads, r, "rot_first", "interleaved", "half"
        )
        if torch.equal(got, inverse):
            raise Wrong(
                f"on {desc}, your rows are the inverse permutation: they turn an "
                "interleaved checkpoint into a half-split one"
            )
        if r < d and torch.equal(got, half_to_interleaved(W, heads)):
            raise Wrong(f"on {desc}, you moved the pass rows too: only r are rotated")
        expect_close(got, want, desc=desc)
    return "reorders the rotated rows of every head for interleaved code"


plant(
    "ex-sparse-attention-rows",
    lambda W, h, r: convert_indexer_layout(W, h, r, "rot_first", "interleaved", "half"),
    "inverse permutation",
)
plant(
    "ex-sparse-attention-rows",
    lambda W, h, r: half_to_interleaved(W, h),
    "pass rows",
)

SLICE_STUB = '''\
def rot_last_to_first(d, r):
    """A permutation perm (d,) of a head's coordinates: with the rows of W_q and W_k
    of every head (and the key norm's gain and bias) reordered as W[perm], code that
    rotates the FIRST r coordinates gives the scores of a checkpoint trained
    rotating the LAST r, in the same layout."""
    ...  # your code
'''


def _scores(q, k, pos, layout, r, order):
    inv_freq = rope_inv_freq(r, 10000.0)[0]
    rq, rk = (rope_slice(t, pos, inv_freq, layout, r, order) for t in (q, k))
    return rq @ rk.T  # (i, j)


@exercise(
    "ex-sparse-attention-slice", chapter="part7/sparse_attention", stub=SLICE_STUB
)
def _(answer):
    g = torch.Generator().manual_seed(1)
    for d, r in [(8, 4), (16, 8), (12, 4), (6, 6)]:
        desc = f"d = {d}, r = {r}"
        perm = call(answer, d, r, desc=desc)
        perm = torch.as_tensor(perm)
        expect(
            perm.dtype in (torch.int64, torch.int32) and perm.shape == (d,)
            and sorted(perm.tolist()) == list(range(d)),
            f"on {desc}, return a permutation of the {d} coordinates (integers)",
        )  # fmt: skip
        q, k = torch.randn(2, 9, d, generator=g, dtype=torch.float64)
        pos = torch.randint(0, 500, (9,), generator=g)
        for layout in ("half", "interleaved"):
            want = _scores(q, k, pos, layout, r, "rot_last")
            got = _scores(q[:, perm], k[:, perm], pos, layout, r, "rot_first")
            if torch.allclose(got, want):
                continue
            if not set(perm[:r].tolist()) == set(range(d - r, d)):
                raise Wrong(
                    f"on {desc}, the first r coordinates after your permutation are "
                    "not the r that were trained to rotate"
                )
            raise Wrong(
                f"on {desc} ({layout} layout), the rotated coordinates are right but "
                "not in their trained order: the pairs are broken"
            )
    return "gives the trained scores in both layouts, for every d and r tried"


plant("ex-sparse-attention-slice", lambda d, r: torch.arange(d), "not the r")
plant(
    "ex-sparse-attention-slice",
    lambda d, r: torch.cat((torch.arange(d - 1, d - r - 1, -1), torch.arange(d - r))),
    "trained order",
)

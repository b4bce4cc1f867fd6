"""Checks for the exercises of book/part2/shaw.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part2/shaw"

# ---- ex-shaw-two-layers -------------------------------------------------------------

TWO_STUB = """\
k_min = ...  # your answer: the smallest clip distance k for two layers
"""


@exercise("ex-shaw-two-layers", chapter=CHAPTER, stub=TWO_STUB)
def _(answer):
    k = number(answer, "k_min")
    expect_int = k == int(k) and k >= 0
    if not expect_int:
        raise Wrong(f"k_min = {k:g}: a clip distance is a whole number >= 0")
    if k < 3:
        # offsets a layer can single out: -k+1 .. k-1 (offset -k is the clipped row)
        reach = 2 * max(int(k) - 1, 0)
        raise Wrong(
            f"k_min = {k:g} is too small: with clip distance {k:g} a layer can single "
            f"out offsets down to {-max(int(k) - 1, 0)} only (offset {-int(k)} shares "
            f"its row with every offset below), so two hops reach {-reach}, not -3"
        )
    if k > 3:
        raise Wrong(
            f"k_min = {k:g} works, but a smaller k does too: two layers can add "
            "their offsets"
        )
    return (
        "two hops (-1 then -2) need the offsets down to -2 to have rows of their own."
    )


plant("ex-shaw-two-layers", 2, "too small")
plant("ex-shaw-two-layers", 4, "smaller k does too")
plant("ex-shaw-two-layers", 2.5, "whole number")
plant("ex-shaw-two-layers", "3", "should be a number")

# ---- ex-shaw-per-head ---------------------------------------------------------------

HEAD_STUB = '''\
def shaw_key_term_per_head(q, w, max_distance):
    """Shaw's key term with one table per head, in the efficient form.
    q (b, h, n, d), w (h, 2k+1, d) with k = max_distance; returns
    (b, h, n, n): q_i . w[h, clip(j - i, -k, k) + k] / sqrt(d)."""
    ...  # your code
'''


def _loop(q: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    """The reference: pl.Shaw with rel_k = w[h], head by head."""
    b, h, n, d = q.shape
    pos = torch.arange(n)[None]
    out = []
    for head in range(h):
        pe = pl.Shaw(d, k).to(q.dtype)
        with torch.no_grad():
            pe.rel_k.copy_(w[head])
        qh = q[:, head : head + 1]
        out.append(pe.score_bias(qh, qh, pos, pos).detach())
    return torch.cat(out, 1)


@exercise("ex-shaw-per-head", chapter=CHAPTER, stub=HEAD_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    cases = [(2, 3, 7, 8, 2), (1, 4, 12, 16, 4)]
    for b, h, n, d, k in cases:
        q = torch.randn(b, h, n, d, generator=gen, dtype=torch.float64)
        w = torch.randn(h, 2 * k + 1, d, generator=gen, dtype=torch.float64)
        desc = f"q of shape {(b, h, n, d)}, w of shape {(h, 2 * k + 1, d)}, k = {k}"
        got = call(answer, q.clone(), w.clone(), k, desc=desc)
        want = _loop(q, w, k)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            got = got.double()
            if torch.allclose(got, want * math.sqrt(d)):
                raise Wrong(f"on {desc}, your key term is not divided by sqrt(d)")
            if torch.allclose(
                got, want.transpose(-1, -2).contiguous()
            ) or torch.allclose(got, _loop(q, w.flip(1), k)):
                raise Wrong(
                    f"on {desc}, your key term uses the offset i - j (query - key); "
                    "Shaw's offset is key - query"
                )
            if torch.allclose(got, _loop(q, w[:1].expand_as(w), k)):
                raise Wrong(f"on {desc}, every head of yours uses head 0's table")
        expect_close(got, want, desc=desc, what="the key term")
    return (
        "equals pl.Shaw head by head (rel_k = w[h]) on (b, h, n, d, k) = "
        + " and ".join(str(c) for c in cases)
        + "."
    )


def _per_head(q, w, k, scale=True, sign=1):
    n = q.shape[-2]
    idx = pl.shaw_relative_index(n, n, k)
    if sign < 0:
        idx = idx.T
    qa = torch.einsum("bhid,hrd->bhir", q, w)
    out = qa.gather(-1, idx[None, None].expand(*qa.shape[:3], n))
    return out / math.sqrt(q.shape[-1]) if scale else out


plant("ex-shaw-per-head", lambda q, w, k: _per_head(q, w, k, scale=False), "sqrt(d)")
plant("ex-shaw-per-head", lambda q, w, k: _per_head(q, w, k, sign=-1), "key - query")
plant(
    "ex-shaw-per-head",
    lambda q, w, k: _per_head(q, w[:1].expand_as(w), k),
    "head 0's table",
)
plant(
    "ex-shaw-per-head",
    lambda q, w, k: torch.einsum("bhid,hrd->bhir", q, w),
    "has shape",
)
plant("ex-shaw-per-head", lambda q, w, k: None, "returned None")

# ---- ex-shaw-memory-d ---------------------------------------------------------------

MEM_STUB = '''\
def equal_head_dim(n, n_heads, max_distance):
    """The head dimension d at which the direct form's position tensors hold as
    many numbers as the efficient form's (the gathered bias both return left out)."""
    ...  # your code
'''


@exercise("ex-shaw-memory-d", chapter=CHAPTER, stub=MEM_STUB)
def _(answer):
    cases = [(1024, 4, 16), (512, 8, 64), (96, 12, 4)]
    for n, h, k in cases:
        desc = f"N = {n}, {h} heads, k = {k}"
        got = number(call(answer, n, h, k, desc=desc), "your d")
        want = h * (2 * k + 1) / n
        if math.isclose(got, h * 2 * k / n, rel_tol=1e-6):
            raise Wrong(f"on {desc}, your d counts 2k rows per table; there are 2k + 1")
        if math.isclose(got, h / 2, rel_tol=1e-6) or math.isclose(
            got, want + h / 2, rel_tol=1e-6
        ):
            raise Wrong(
                f"on {desc}, your d counts the gathered N x N bias, which both forms "
                "return: leave it out"
            )
        if math.isclose(got, (2 * k + 1) / n, rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your d leaves out the heads: the efficient form keeps "
                "a table per head, the direct form's tensors are shared"
            )
        expect_close(got, want, desc=desc, what="your d", rtol=1e-6)
    return "equals h (2k + 1) / N for (N, h, k) = " + ", ".join(str(c) for c in cases)


plant("ex-shaw-memory-d", lambda n, h, k: h * 2 * k / n, "2k + 1")
plant("ex-shaw-memory-d", lambda n, h, k: h / 2, "gathered N x N bias")
plant("ex-shaw-memory-d", lambda n, h, k: (2 * k + 1) / n, "leaves out the heads")
plant("ex-shaw-memory-d", lambda n, h, k: n / (h * (2 * k + 1)), "expected")

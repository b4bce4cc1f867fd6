"""Checks for the exercises of book/part6/comparison.ipynb."""

from __future__ import annotations

import functools

import torch

import posenc_lib as pl
from posenc_lib.exercises import Wrong, exercise, expect, plant
from posenc_lib.exercises._values import number

CHAPTER = "part6/comparison"

DYNAMIC_STUB = """\
largest_shift = ...  # your answer: the largest s for which rope_dynamic passes
"""


@functools.lru_cache(maxsize=None)
def _gap(s: int, n: int = 16) -> float:
    """The shift test of the chapter on a small model: max |change| of the logits."""
    pe = pl.make_encoding("rope_dynamic", d_model=16, n_heads=2, max_len=64)
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, d_model=16, n_heads=2, pe=pe).eval()
    tokens = torch.randint(0, 11, (2, n))
    pos = torch.arange(n).expand(2, n)
    with torch.no_grad():
        out = model(tokens, pos, causal=True)
        moved = model(tokens, pos + s, causal=True)
    return (out - moved).abs().max().item()


@exercise("ex-cmp-dynamic", chapter=CHAPTER, stub=DYNAMIC_STUB)
def _(answer):
    s = number(answer, "largest_shift")
    passes = {t: _gap(t) < 1e-4 for t in range(46, 51)}
    want = max(t for t, ok in passes.items() if ok)
    assert all(passes[t] for t in range(46, want + 1)), "the test must be monotone"
    if s == want + 1:
        raise Wrong(
            f"`largest_shift` is {s:g}: at that shift the positions run to "
            f"{s + 15:g}, a length of {s + 16:g}, past max_len = 64"
        )
    if s == 64:
        raise Wrong(
            "`largest_shift` is 64: the length dynamic NTK compares with max_len is "
            "the largest position plus one, and the shifted positions reach s + 15"
        )
    expect(
        s == want,
        f"`largest_shift` is {s:g}; the test passes up to s = {want}"
        if s < want
        else f"`largest_shift` is {s:g}: the test fails there",
    )
    return (
        f"the shift test of a small rope_dynamic model passes at s = {want} and "
        f"fails at s = {want + 1} (n = 16, max_len = 64)."
    )


plant("ex-cmp-dynamic", 49, says="a length of 65")
plant("ex-cmp-dynamic", 64, says="largest position plus one")
plant("ex-cmp-dynamic", 40, says="passes up to")
plant("ex-cmp-dynamic", "48", says="should be a number")

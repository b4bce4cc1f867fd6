"""Checks for the exercises of book/part2/tener.ipynb."""

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
from posenc_lib.course.exercises._values import number

CHAPTER = "part2/tener"

# ---- ex-tener-wk --------------------------------------------------------------------

WK_STUB = '''\
def unproject_keys(mha):
    """Make mha (a pl.MultiHeadAttention) use TENER's unprojected keys, k = x split
    into heads, exactly and for good (training must not change it); return mha."""
    ...  # your code
'''


@exercise("ex-tener-wk", chapter=CHAPTER, stub=WK_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for h, d, n in [(2, 8, 6), (4, 4, 9)]:
        with torch.random.fork_rng(devices=[]):  # the reader's random state kept
            torch.manual_seed(0)
            mha = pl.MultiHeadAttention(h * d, h, pe=pl.TENER(d, h)).double()
        x = torch.randn(1, n, h * d, generator=gen, dtype=torch.float64)
        desc = f"a MultiHeadAttention with {h} heads of size {d}"
        got = call(answer, mha, desc=desc)
        expect(
            isinstance(got, pl.MultiHeadAttention),
            f"on {desc}, your function returned {type(got).__name__}; return the "
            "layer (a pl.MultiHeadAttention)",
        )
        trainable = [p for p in got.w_k.parameters() if p.requires_grad]
        with torch.no_grad():
            keys = got.w_k(x)
        if not torch.allclose(keys, x):
            raise Wrong(
                f"on {desc}, the layer's keys are not x itself: w_k(x) differs from x "
                f"by up to {float((keys - x).abs().max()):.3g}"
            )
        if trainable:
            raise Wrong(
                f"on {desc}, the keys are x now, but w_k still has parameters that "
                "train: the first optimiser step would project the keys again"
            )
        split = got._split
        q, k, v = split(got.w_q(x)), split(x), split(got.w_v(x))
        _, want = pl.attention(q, k, v, got.pe, return_weights=True)
        _, weights = got(x, return_weights=True)
        expect_close(
            weights.detach(), want.detach(), desc=desc, what="the attention weights"
        )
    return "the layer's keys are x, frozen, and its weights equal TENER's scores."


def _identity_trainable(mha):
    with torch.no_grad():
        mha.w_k.weight.copy_(torch.eye(mha.d_model))
    return mha


def _frozen_random(mha):
    mha.w_k.weight.requires_grad_(False)
    return mha


def _in_place(mha):
    _identity_trainable(mha).w_k.weight.requires_grad_(False)


plant("ex-tener-wk", _identity_trainable, "still has parameters that train")
plant("ex-tener-wk", _frozen_random, "not x itself")
plant("ex-tener-wk", _in_place, "returned None")
plant("ex-tener-wk", lambda mha: mha.w_k.weight.eye_(), "your function raised")

# ---- ex-tener-temperature -----------------------------------------------------------

TEMP_STUB = '''\
def growth_factor(d):
    """The factor by which q and k (both) must grow so that a scaled model
    (q . k / sqrt(d)) gives the unscaled model's attention."""
    ...  # your code
'''


@exercise("ex-tener-temperature", chapter=CHAPTER, stub=TEMP_STUB)
def _(answer):
    for d in (64, 16, 128):
        desc = f"d = {d}"
        f = number(call(answer, d, desc=desc), f"growth_factor({d})")
        grows = f * f  # both q and k grow: q . k grows by f^2
        if math.isclose(grows, d, rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your factor multiplies q . k by {grows:g} = d: the scale "
                "divides by sqrt(d), not by d"
            )
        if math.isclose(f, d**-0.25, rel_tol=1e-6):
            raise Wrong(f"on {desc}, your factor shrinks q and k; they must grow")
        if math.isclose(grows, d**0.25, rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your factor multiplies q . k by only {grows:.4g}: "
                "q and k both grow, so the product grows by the factor squared"
            )
        expect_close(f, d**0.25, desc=desc, what="your factor", rtol=1e-6)
    return "your factor grows q . k by sqrt(d), undoing the scale, for d = 64, 16, 128."


plant("ex-tener-temperature", lambda d: math.sqrt(d), "not by d")
plant("ex-tener-temperature", lambda d: d**-0.25, "shrinks")
plant("ex-tener-temperature", lambda d: d**0.125, "factor squared")
plant("ex-tener-temperature", lambda d: None, "returned None")

# ---- ex-tener-mirror ----------------------------------------------------------------

MIRROR_STUB = '''\
def mirror(q):
    """q (..., d) -> q' (..., d) with q' . R_{t-j} = q . R_{j-t} for every offset,
    R the paper's sinusoid (pl.tener_relative_sinusoid(x, d))."""
    ...  # your code
'''


@exercise("ex-tener-mirror", chapter=CHAPTER, stub=MIRROR_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    x = torch.arange(-12, 13)
    for n, d in [(5, 8), (3, 16)]:
        q = torch.randn(n, d, generator=gen, dtype=torch.float64)
        desc = f"q of shape ({n}, {d})"
        got = call(answer, q.clone(), desc=desc)
        if not isinstance(got, torch.Tensor) or got.shape != q.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else None
            raise Wrong(
                f"on {desc}, expected a tensor of shape {tuple(q.shape)}, got "
                + (f"shape {shape}" if shape else type(got).__name__)
            )
        R = pl.tener_relative_sinusoid(x, d, dtype=torch.float64)  # (offsets, d)
        lhs = got.double() @ R.T  # q' . R_x
        rhs = q @ R.flip(0).T  # q . R_{-x}
        if torch.allclose(got.double(), -q):
            raise Wrong(
                f"on {desc}, you negated every entry; negating the offset changes "
                "the sign of some entries of R only"
            )
        cos_flip = q.clone()
        cos_flip[..., 1::2] *= -1
        if torch.allclose(got.double(), cos_flip):
            raise Wrong(
                f"on {desc}, you flipped the cosine slots (odd entries); cosine "
                "is even, so those entries of R keep their sign"
            )
        expect_close(lhs, rhs, desc=f"{desc}, offsets -12 .. 12", what="q' . R_(t-j)")
    return "your q' gives q' . R_x = q . R_(-x) for offsets -12 .. 12, d = 8 and 16."


def _flip(q, sl):
    q = q.clone()
    q[..., sl] *= -1
    return q


plant("ex-tener-mirror", lambda q: -q, "negated every entry")
plant("ex-tener-mirror", lambda q: _flip(q, slice(1, None, 2)), "cosine slots")
plant(
    "ex-tener-mirror",
    lambda q: _flip(q, slice(0, q.shape[-1] // 2)),
    "differs at entry",
)
plant("ex-tener-mirror", lambda q: q[..., ::2], "expected a tensor of shape")

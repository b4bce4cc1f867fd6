"""Checks for the exercises of book/part3/context_length.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import as_float

COVER_STUB = '''\
def smallest_full_turn(d_head, base):
    """The smallest training length L (an int) at which every pair of a RoPE
    with head size d_head and base `base` completes a full turn over the
    offsets 0 .. L-1 seen in training."""
    ...  # your code
'''

COVER_CASES = [(128, 10_000.0), (128, 500_000.0), (16, 10_000.0), (64, 500.0)]


def _covered(d_head: int, L: int, base: float) -> bool:
    """Does every pair sweep a full turn over offsets 0 .. L-1 (float64)?"""
    inv_freq, _ = pl.rope_inv_freq(d_head, base)
    return bool(((L - 1) * inv_freq.double() >= 2 * math.pi).all())


def _as_int(got, desc: str) -> int:
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise Wrong(f"on {desc}, expected a number, got {type(got).__name__}") from None
    if not math.isfinite(value) or value != round(value):
        raise Wrong(f"on {desc}, your length is {value:g}: a length is a whole number")
    return int(round(value))


@exercise("ex-ctxlen-cover", chapter="part3/context_length", stub=COVER_STUB)
def _(answer):
    for d, base in COVER_CASES:
        desc = f"d_head = {d}, base {base:g}"
        L = _as_int(call(answer, d, base, desc=desc), desc)
        inv_freq, _ = pl.rope_inv_freq(d, base)
        slowest = 2 * math.pi / float(inv_freq.double().min())
        fastest = 2 * math.pi / float(inv_freq.double().max())
        if _covered(d, L, base) and not _covered(d, L - 1, base):
            continue
        if abs(L - fastest) <= 2:
            raise Wrong(
                f"on {desc}, your length {L} is the wavelength of the fastest pair; "
                "every pair must turn, the slowest last"
            )
        if abs(L - slowest / (2 * math.pi)) <= 2:
            raise Wrong(
                f"on {desc}, your length {L} is 1/theta of the slowest pair: a full "
                "turn is 2 pi radians"
            )
        if _covered(d, L + 1, base) and not _covered(d, L, base):
            raise Wrong(
                f"on {desc}, your length {L} is one short: over offsets 0 .. L-1 the "
                f"slowest pair sweeps (L-1) theta, and at L = {L} that is "
                f"{(L - 1) / slowest:.6f} of a turn"
            )
        if _covered(d, L - 1, base):
            raise Wrong(
                f"on {desc}, every pair already turns fully at length {L - 1}, "
                f"shorter than your {L}"
            )
        raise Wrong(
            f"on {desc}, at your length {L} the slowest pair sweeps only "
            f"{(L - 1) / slowest:.4g} of a turn"
        )
    return (
        "the smallest length with every pair turning fully, for (d, base) = "
        + ", ".join(f"({d}, {b:g})" for d, b in COVER_CASES)
        + "."
    )


def _slowest_wavelength(d, base):
    return math.ceil(2 * math.pi * base ** ((d - 2) / d))


plant("ex-ctxlen-cover", _slowest_wavelength, says="one short")
plant(
    "ex-ctxlen-cover",
    lambda d, base: math.ceil(base ** ((d - 2) / d)) + 1,
    says="2 pi radians",
)
plant("ex-ctxlen-cover", lambda d, base: math.ceil(2 * math.pi) + 1, says="fastest")
plant("ex-ctxlen-cover", lambda d, base: 2 * math.pi * base, says="whole number")
plant("ex-ctxlen-cover", lambda d, base: None, says="returned None")


PAST_STUB = '''\
def loss_past(L, N, loss_whole, loss_first):
    """The mean loss of the N - L positions past L of a window of length N, from
    the loss loss_whole over all N positions and the mean loss loss_first of its
    first L positions (floats)."""
    ...  # your code
'''


@exercise("ex-ctxlen-past", chapter="part3/context_length", stub=PAST_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(2)
    cases = [(16, 128), (16, 48), (64, 100)]
    for L, N in cases:
        # per-position losses of one window: in distribution, then degraded
        losses = torch.cat(
            (
                1.0 + 0.1 * torch.rand(L, generator=gen, dtype=torch.float64),
                3.0 + torch.rand(N - L, generator=gen, dtype=torch.float64),
            )
        )
        whole, first = float(losses.mean()), float(losses[:L].mean())
        desc = f"L = {L}, N = {N}, loss_whole = {whole:.4f}, loss_first = {first:.4f}"
        got = call(answer, L, N, whole, first, desc=desc)
        want = float(losses[L:].mean())
        value = as_float(got, desc)
        if math.isclose(value, 2 * whole - first, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, you treat L(N) as the plain mean of the two parts; they "
                "cover L and N - L positions"
            )
        if math.isclose(value, (N * whole - (N - L) * first) / L, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your weights are swapped: the first part covers L of "
                "the N positions"
            )
        if math.isclose(value, N * whole / (N - L), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, you rescale the whole loss but leave the first L "
                "positions' share of it in"
            )
        expect_close(value, want, desc=desc, what="your loss past L", atol=1e-9)
    return (
        "recovers the mean loss past L from the loss over the whole window for "
        + ", ".join(f"(L, N) = ({L}, {N})" for L, N in cases)
        + "."
    )


plant(
    "ex-ctxlen-past",
    lambda L, N, whole, first: 2 * whole - first,
    says="plain mean",
)
plant(
    "ex-ctxlen-past",
    lambda L, N, whole, first: (N * whole - (N - L) * first) / L,
    says="swapped",
)
plant(
    "ex-ctxlen-past",
    lambda L, N, whole, first: N * whole / (N - L),
    says="share of it in",
)
plant(
    "ex-ctxlen-past",
    lambda L, N, whole, first: whole - first,
    says="your loss past L",
)
plant("ex-ctxlen-past", lambda L, N, whole, first: None, says="returned None")

"""Checks for the exercises of book/part3/rope.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import as_float

STUB = '''\
def rope_complex(x, pos, theta):
    """Rotate x (n, d) at positions pos (n,) with frequencies theta (d/2,),
    using torch.view_as_complex; return a real tensor (n, d)."""
    ...  # your code
'''


@exercise("ex-rope-complex", chapter="part3/rope", stub=STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    cases = [(5, 8, 10_000.0), (9, 16, 500.0)]
    for n, d, base in cases:
        x = torch.randn(n, d, generator=gen, dtype=torch.float64)
        pos = torch.randperm(3 * n, generator=gen)[:n]
        theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        desc = f"x of shape ({n}, {d}), positions {pos.tolist()}, base {base:g}"
        got = call(answer, x.clone(), pos, theta, desc=desc)
        if not isinstance(got, torch.Tensor) or got.is_complex():
            kind = "a complex tensor" if isinstance(got, torch.Tensor) else type(got)
            raise Wrong(
                f"on {desc}, your function returned {kind}: turn the rotated complex "
                "numbers back into d real coordinates (n, d)"
            )
        half = pl.apply_rope(x, pos, theta, "half")
        if got.shape == half.shape and torch.allclose(got.double(), half, atol=1e-6):
            raise Wrong(
                f"on {desc}, your answer is RoPE in the half-split layout; "
                "view_as_complex pairs neighbouring coordinates (2i, 2i+1)"
            )
        want = pl.apply_rope(x, pos, theta, "interleaved")
        expect_close(got, want, desc=desc, what="the rotated x")
    return (
        "equals pl.apply_rope(x, pos, theta, 'interleaved') on "
        + ", ".join(f"(n, d) = ({n}, {d})" for n, d, _ in cases)
        + ": view_as_complex gives the interleaved layout."
    )


def _half_split(x, pos, theta):
    return pl.apply_rope(x, pos, theta, "half")


def _complex_left(x, pos, theta):
    z = torch.view_as_complex(x.reshape(x.shape[0], -1, 2).contiguous())
    return z * torch.polar(torch.ones_like(theta), pos[:, None] * theta)


def _wrong_sign(x, pos, theta):
    return pl.apply_rope(x, -pos, theta, "interleaved")


def _crashes(x, pos, theta):
    return torch.view_as_complex(x)  # needs a last dimension of size 2


plant("ex-rope-complex", _half_split, says="half-split layout")
plant("ex-rope-complex", _complex_left, says="complex tensor")
plant("ex-rope-complex", _wrong_sign, says="differs at entry")
plant("ex-rope-complex", _crashes, says="your function raised RuntimeError")
plant("ex-rope-complex", lambda x, pos, theta: None, says="returned None")


DECAY_STUB = '''\
def half_distance(d, base):
    """The smallest distance r >= 1 (an int) at which RoFormer's relative upper
    bound, for head size d and RoPE base `base`, is below half its value at r = 0."""
    ...  # your code
'''


def _bound(d: int, base: float, distances: torch.Tensor) -> torch.Tensor:
    """(1/(d/2)) sum_j |S_j|, S_j = sum_{l<j} e^{i r theta_l}, at each distance r."""
    theta, _ = pl.rope_inv_freq(d, base)
    r = distances.double()[:, None]
    S = torch.polar(torch.ones_like(r * theta.double()), r * theta.double()).cumsum(-1)
    return S.abs().sum(-1) / (d // 2)


def _first_below(bound: torch.Tensor, level: float) -> int:
    return int((bound[1:] < level).nonzero()[0]) + 1


@exercise("ex-rope-decay", chapter="part3/rope", stub=DECAY_STUB)
def _(answer):
    cases = [(64, 10_000.0), (256, 10_000.0), (64, 500_000.0), (16, 500.0)]
    found = []
    for d, base in cases:
        desc = f"d = {d}, base {base:g}"
        got = call(answer, d, base, desc=desc)
        value = as_float(got, desc)
        bound = _bound(d, base, torch.arange(0, 1001))
        want = _first_below(bound, bound[0].item() / 2)
        found.append(want)
        if value == want:
            continue
        if value == want - 1:
            raise Wrong(
                f"on {desc}, your distance is one short: at r = {value:g} the bound "
                f"is {bound[want - 1]:.3f}, not yet below half of {bound[0]:.3f}"
            )
        if value == want + 1:
            raise Wrong(
                f"on {desc}, your distance is one too far: at r = {want} the bound is "
                f"already {bound[want]:.3f}, below half of {bound[0]:.3f} (its value "
                "at r = 0)"
            )
        at = int(value) if value == int(value) and 0 <= value <= 1000 else None
        there = f" (the bound there is {bound[at]:.3f})" if at is not None else ""
        raise Wrong(
            f"on {desc}, your distance is {value:g}{there}; the bound starts at "
            f"{bound[0]:.3f} and first falls below half of it at another distance"
        )
    return (
        "the first distance where the bound falls below half its value at r = 0, for "
        + ", ".join(f"(d, base) = ({d}, {b:g})" for d, b in cases)
        + ": "
        + ", ".join(map(str, found))
        + " tokens."
    )


def _one_short(d, base):
    bound = _bound(d, base, torch.arange(0, 1001))
    return _first_below(bound, bound[0].item() / 2) - 1


def _from_r1(d, base):
    bound = _bound(d, base, torch.arange(0, 1001))
    return _first_below(bound, bound[1].item() / 2)


plant("ex-rope-decay", _one_short, says="one short")
plant("ex-rope-decay", _from_r1, says="one too far")
plant("ex-rope-decay", lambda d, base: 1000, says="first falls below half")
plant("ex-rope-decay", lambda d, base: [15], says="a number")
plant("ex-rope-decay", lambda d, base: None, says="returned None")

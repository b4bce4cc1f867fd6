"""Checks for the exercises of book/part3/rope.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant

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
def decay_bound(d, base, distances):
    """RoFormer's relative upper bound (1/(d/2)) sum_{j=1}^{d/2} |S_j| for head
    size d and RoPE base `base`, at each distance r of `distances` (m,) (integer
    tensor); returns a real tensor (m,)."""
    ...  # your code
'''


def _bound(d: int, base: float, distances: torch.Tensor, lo: int = 0) -> torch.Tensor:
    """(1/(d/2)) sum_j |S_j|, S_j = sum_{i=lo}^{j-1} e^{i r theta_i} (lo = 0: the
    chapter's S_j)."""
    theta, _ = pl.rope_inv_freq(d, base)
    theta = theta.double()[lo:]
    r = distances.double()[:, None]
    S = torch.polar(torch.ones_like(r * theta), r * theta).cumsum(-1)  # (m, d/2)
    return S.abs().sum(-1) / (d // 2)


@exercise("ex-rope-decay", chapter="part3/rope", stub=DECAY_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(1)
    cases = [(64, 10_000.0), (256, 10_000.0), (16, 500.0)]
    for d, base in cases:
        distances = torch.cat(
            (torch.tensor([0, 1]), torch.randint(2, 2000, (4,), generator=gen))
        )
        desc = f"d = {d}, base {base:g}, distances {distances.tolist()}"
        got = call(answer, d, base, distances.clone(), desc=desc)
        want = _bound(d, base, distances)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            expect_close(got, want, desc=desc, what="the bound")  # says the shape
        got = torch.as_tensor(got).detach().double()
        mean = want * (d // 2)
        if torch.allclose(got, mean, rtol=1e-4):
            raise Wrong(
                f"on {desc}, your bound is the sum over j; RoFormer's bound is the "
                "mean, divided by d/2"
            )
        if torch.allclose(got, want / 2, rtol=1e-4):
            raise Wrong(
                f"on {desc}, your bound is half the expected one: divide the "
                "sum by d/2, not by d"
            )
        shifted = _bound(d, base, distances, lo=1) * (d // 2 - 1) / (d // 2)
        if torch.allclose(got, shifted, rtol=1e-4) or torch.allclose(
            got, _bound(d, base, distances, lo=1), rtol=1e-4
        ):
            raise Wrong(
                f"on {desc}, your partial sums start at the second frequency: "
                "S_j sums e^{i r theta_i} from i = 0"
            )
        expect_close(got, want, desc=desc, what="the bound", rtol=1e-4)
    return (
        "equals (1/(d/2)) sum_j |S_j| for (d, base) = "
        + ", ".join(f"({d}, {b:g})" for d, b in cases)
        + ", at r = 0, 1 and four random distances; at r = 0 it is (d/2 + 1)/2."
    )


def _sum_not_mean(d, base, distances):
    return _bound(d, base, distances) * (d // 2)


def _over_d(d, base, distances):
    return _bound(d, base, distances) / 2


def _base_squared(d, base, distances):
    return _bound(d, base**2, distances)


plant("ex-rope-decay", _sum_not_mean, says="the sum over j")
plant("ex-rope-decay", _over_d, says="not by d")
plant("ex-rope-decay", _base_squared, says="the bound differs at entry")
plant("ex-rope-decay", lambda d, base, distances: float(d), says="the bound")
plant("ex-rope-decay", lambda d, base, distances: None, says="returned None")

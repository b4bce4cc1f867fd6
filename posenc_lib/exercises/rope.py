"""Checks for the exercises of book/part3/rope.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.exercises import Wrong, call, exercise, expect_close, plant

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

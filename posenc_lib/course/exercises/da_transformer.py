"""Checks for the exercises of book/part2/da_transformer.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part2/da_transformer"

# ---- ex-da-halfway ------------------------------------------------------------------

HALF_STUB = '''\
def halfway_distance(w, v):
    """The distance |i - j| at which a local head's coefficient f(w |i - j|; v)
    is 1/2 (w < 0)."""
    ...  # your code
'''


@exercise("ex-da-halfway", chapter=CHAPTER, stub=HALF_STUB)
def _(answer):
    cases = [(-1.0, 1.0), (-0.5, 0.0), (-2.0, -1.0), (-0.3, 2.5)]
    for w, v in cases:
        desc = f"w = {w:g}, v = {v:g}"
        dist = number(call(answer, w, v, desc=desc), f"halfway_distance({w:g}, {v:g})")
        if math.isclose(dist * w, v, rel_tol=1e-6) and v != 0:
            raise Wrong(
                f"on {desc}, at your distance f is (1 + e^v)/2, the midpoint of the "
                "sigmoid's range; the coefficient itself must be 1/2"
            )
        if dist < 0:
            raise Wrong(
                f"on {desc}, your distance {dist:.4g} is negative: a distance "
                "|i - j| is >= 0 (the argument of f is w |i - j|)"
            )
        f = pl.da_sigmoid(torch.tensor(w * dist, dtype=torch.float64), v)
        expect_close(f, 0.5, desc=desc, what="f at your distance", rtol=1e-6)
    return "the coefficient f(w d; v) is 1/2 at your d for (w, v) = " + ", ".join(
        f"({w:g}, {v:g})" for w, v in cases
    )


def _x(w, v):
    return v - math.log(1 + 2 * math.exp(v))


plant("ex-da-halfway", lambda w, v: _x(w, v), "is negative")
plant("ex-da-halfway", lambda w, v: v / w, "midpoint of the sigmoid")
plant("ex-da-halfway", lambda w, v: math.log(2) / -w, "f at your distance is")
plant("ex-da-halfway", lambda w, v: None, "returned None")

# ---- ex-da-params -------------------------------------------------------------------

PARAMS_STUB = '''\
def da_position_params(n_layers, n_heads, shared=True):
    """The positional parameters of a DA-Transformer: one encoding shared by all
    layers (shared=True) or one per layer (shared=False)."""
    ...  # your code
'''


@exercise("ex-da-params", chapter=CHAPTER, stub=PARAMS_STUB)
def _(answer):
    cases = [(12, 12), (4, 2), (6, 8)]
    for layers, heads in cases:
        one = sum(p.numel() for p in pl.DATransformer(heads).parameters())
        for shared, want in ((True, one), (False, one * layers)):
            desc = f"{layers} layers, {heads} heads, shared={shared}"
            got = number(call(answer, layers, heads, shared, desc=desc), "your count")
            if got == want:
                continue
            hint = ""
            if got == want // 2:
                hint = ": each head learns two scalars, w and v"
            elif shared and got == one * layers:
                hint = ": a shared encoding is counted once, not once per layer"
            elif not shared and got == one:
                hint = ": with one encoding per layer, every layer has its own"
            raise Wrong(f"on {desc}, your count is {got:g}, expected {want}{hint}")
    return "equals the parameters of pl.DATransformer, once or once per layer, on " + (
        ", ".join(f"{layers} layers x {heads} heads" for layers, heads in cases)
    )


plant("ex-da-params", lambda L, h, shared: h if shared else h * L, "two scalars")
plant("ex-da-params", lambda L, h, shared: 2 * h * L, "counted once")
plant("ex-da-params", lambda L, h, shared: 2 * h, "every layer has its own")
plant("ex-da-params", lambda L, h: 2 * h, "your function raised TypeError")

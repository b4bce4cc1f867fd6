"""Checks for the exercises of book/part1/sinusoidal.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part1/sinusoidal"

# ---- ex-sin-only --------------------------------------------------------------------

ONLY_STUB = """\
# best_linear_shift_residual on the sine columns of pl.sinusoidal_table(200, 16),
# shift 5
sine_only_residual = ...  # your answer
"""


def _residual(table: torch.Tensor, delta: int = 5) -> float:
    src, dst = table[:-delta], table[delta:]
    M = torch.linalg.lstsq(src, dst).solution
    return float((src @ M - dst).norm() / dst.norm())


@exercise("ex-sin-only", chapter=CHAPTER, stub=ONLY_STUB)
def _(answer):
    got = number(answer, "sine_only_residual")
    table = pl.sinusoidal_table(200, 16).double()
    want = _residual(table[:, 0::2])
    if got < 1e-6:
        raise Wrong(
            f"sine_only_residual = {got:.2g}: your columns still hold sines and "
            "their cosines (pl.sinusoidal_table interleaves them); keep only the sines"
        )
    if math.isclose(got, _residual(table[:, 1::2]), rel_tol=1e-3):
        raise Wrong(
            f"sine_only_residual = {got:.4g} is the residual of the cosine columns; "
            "pl.sinusoidal_table puts the sines in the even columns"
        )
    if not math.isclose(got, want, rel_tol=1e-3):
        raise Wrong(
            f"sine_only_residual = {got:.4g}, expected {want:.4g} (the sine columns "
            "of pl.sinusoidal_table(200, 16), shift 5)"
        )
    return (
        f"the residual {want:.3f} is far from zero: the sines alone do not shift "
        "linearly."
    )


_T = pl.sinusoidal_table(200, 16).double()
plant("ex-sin-only", _residual(_T), "still hold sines")
plant("ex-sin-only", _residual(_T[:, 1::2]), "cosine columns")
plant("ex-sin-only", 0.5, "expected")
plant("ex-sin-only", [0.5], "should be a number")

# ---- ex-sin-wavelength --------------------------------------------------------------

WAVE_STUB = '''\
def full_period_pairs(d_model, n_tokens, base=10000.0):
    """How many of the d_model / 2 sin/cos pairs complete at least one full
    period within n_tokens positions."""
    ...  # your code
'''


def _count(D: int, n: int, base: float, two_pi: bool = True, k_over: int = 2) -> int:
    k = torch.arange(D // 2, dtype=torch.float64)
    wavelength = (2 * math.pi if two_pi else 1.0) * base ** (k_over * k / D)
    return int((wavelength <= n).sum())


@exercise("ex-sin-wavelength", chapter=CHAPTER, stub=WAVE_STUB)
def _(answer):
    cases = [(128, 100_000, 1e4), (128, 1000, 1e4), (64, 5000, 1e4), (256, 300, 500.0)]
    for D, n, base in cases:
        desc = f"d_model = {D}, n_tokens = {n}, base = {base:g}"
        got = number(call(answer, D, n, base, desc=desc), "your count")
        want = _count(D, n, base)
        if got == want:
            continue
        hint = ""
        if got == _count(D, n, base, two_pi=False):
            hint = ": a pair of angular frequency w repeats every 2 pi / w positions"
        elif got == _count(D, n, base, k_over=1):
            hint = ": pair k has frequency base^(-2k / d_model)"
        elif got == D:
            hint = ": there are d_model / 2 pairs"
        raise Wrong(f"on {desc}, your count is {got:g}, expected {want}{hint}")
    return (
        "matches the wavelengths 2 pi base^(2k/D) on "
        + ", ".join(f"(D, N, base) = ({D}, {n}, {base:g})" for D, n, base in cases[1:])
        + ", and every pair of D = 128 fits in 100 000."
    )


plant("ex-sin-wavelength", lambda D, n, base=1e4: _count(D, n, base, False), "2 pi")
plant("ex-sin-wavelength", lambda D, n, base=1e4: _count(D, n, base, True, 1), "-2k")
plant("ex-sin-wavelength", lambda D, n, base=1e4: D, "d_model / 2 pairs")
plant("ex-sin-wavelength", lambda D, n: D // 2, "your function raised TypeError")

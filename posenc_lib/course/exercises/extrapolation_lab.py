"""Checks for the exercises of book/part3/extrapolation_lab.ipynb."""

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
from posenc_lib.course.exercises._values import as_float

NEW_STUB = '''\
def make_alibi_half(*, d_model, n_heads, max_len):
    """A registry factory: ALiBi with n_heads heads and every slope halved
    (a pl.PositionalEncoding)."""
    ...  # your code
'''


def _reference(n_heads: int, factor: float = 0.5) -> pl.ALiBi:
    pe = pl.ALiBi(n_heads)
    pe.slopes.mul_(factor)
    return pe


@exercise("ex-lab-new-encoding", chapter="part3/extrapolation_lab", stub=NEW_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(3)
    cases = [(32, 4, 16, 12), (48, 6, 16, 20)]  # d_model, heads, max_len, n tokens
    for d_model, h, max_len, n in cases:
        desc = f"d_model = {d_model}, n_heads = {h}, max_len = {max_len}"
        pe = call(answer, d_model=d_model, n_heads=h, max_len=max_len, desc=desc)
        expect(
            isinstance(pe, pl.PositionalEncoding),
            f"on {desc}, your factory returned {type(pe).__name__}, not a "
            "pl.PositionalEncoding",
        )
        q, k, v = torch.randn(3, 2, h, n, d_model // h, generator=gen).unbind(0)
        desc_in = f"{desc}, q, k, v of shape (2, {h}, {n}, {d_model // h}), causal"
        try:
            _, got = pl.attention(q, k, v, pe, causal=True, return_weights=True)
        except Exception as error:  # the reader's encoding failed inside attention
            raise Wrong(
                f"on {desc_in}, attention with your encoding raised "
                f"{type(error).__name__}: {error}"
            ) from None
        want = pl.attention(q, k, v, _reference(h), causal=True, return_weights=True)[1]
        for factor, says in [
            (1.0, "ALiBi's own slopes: nothing was halved"),
            (2.0, "doubled slopes, not halved ones"),
            (0.25, "slopes divided by 4: were they halved twice?"),
        ]:
            other = pl.attention(
                q, k, v, _reference(h, factor), causal=True, return_weights=True
            )[1]
            if torch.allclose(got, other, atol=1e-6):
                raise Wrong(f"on {desc_in}, your encoding gives the weights of {says}")
        expect_close(got, want, desc=desc_in, what="the weight matrix", atol=1e-6)
    return (
        "its attention weights equal ALiBi's with halved slopes, for 4 and 6 heads "
        "(6 is not a power of 2)."
    )


class _Doubled(pl.ALiBi):
    def __init__(self, n_heads):
        super().__init__(n_heads)
        self.slopes.mul_(2.0)


class _HalvedCopy(pl.ALiBi):
    def __init__(self, n_heads):
        super().__init__(n_heads)
        self.slopes.clone().mul_(0.5)  # halves a copy: the encoding is unchanged


def _geometric_halved(*, d_model, n_heads, max_len):
    pe = pl.ALiBi(n_heads)
    pe.slopes.copy_(
        torch.tensor([0.5 * 2 ** (-8 * i / n_heads) for i in range(1, n_heads + 1)])
    )
    return pe


plant("ex-lab-new-encoding", lambda **kw: _Doubled(kw["n_heads"]), says="doubled")
plant(
    "ex-lab-new-encoding",
    lambda **kw: _HalvedCopy(kw["n_heads"]),
    says="nothing was halved",
)
plant("ex-lab-new-encoding", _geometric_halved, says="the weight matrix differs")
plant("ex-lab-new-encoding", lambda **kw: pl.ALiBi, says="not a pl.Positional")
plant("ex-lab-new-encoding", lambda **kw: None, says="returned None")


MEAN_STUB = '''\
def mean_rise(rise_past, L, n):
    """How much the plain mean loss over all n positions of a window grows when
    the loss of every position past L rises by rise_past and the first L
    positions keep their loss."""
    ...  # your code
'''


@exercise("ex-lab-mean-vs-past", chapter="part3/extrapolation_lab", stub=MEAN_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(4)
    cases = [(16, 32), (16, 128), (24, 40)]
    for L, n in cases:
        before = 1.0 + 0.2 * torch.rand(n, generator=gen, dtype=torch.float64)
        rise = 0.5 + float(torch.rand((), generator=gen))
        after = before.clone()
        after[L:] += rise
        want = float(after.mean() - before.mean())
        desc = f"rise_past = {rise:.4f}, L = {L}, n = {n}"
        got = call(answer, rise, L, n, desc=desc)
        value = as_float(got, desc)
        if math.isclose(value, rise * L / n, rel_tol=1e-9) and L * 2 != n:
            raise Wrong(
                f"on {desc}, your growth weights the rise by L / n: the rise applies "
                "to the n - L positions past L"
            )
        if math.isclose(value, rise, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your growth equals the rise itself: the mean also "
                "covers the L positions that did not rise"
            )
        expect_close(value, want, desc=desc, what="the growth", atol=1e-9, rtol=1e-9)
    return (
        "equals the growth of the mean over every position for (L, n) = "
        + ", ".join(f"({L}, {n})" for L, n in cases)
        + "."
    )


plant("ex-lab-mean-vs-past", lambda rise, L, n: rise * L / n, says="L / n")
plant("ex-lab-mean-vs-past", lambda rise, L, n: rise, says="the rise itself")
plant("ex-lab-mean-vs-past", lambda rise, L, n: rise / 2, says="the growth is")
plant("ex-lab-mean-vs-past", lambda rise, L, n: None, says="returned None")


# ---- ex-lab-train-len: the reader's lab run at L = 32 -------------------------------

TRAIN_LEN_STUB = """\
# the lab on the Markov chain for alibi, rope and sinusoidal, trained at L = 32
lab32 = ...  # your answer: the list of LabResult that lab.run_lab returns
"""

_NAMES32 = ("alibi", "rope", "sinusoidal")


@exercise("ex-lab-train-len", chapter="part3/extrapolation_lab", stub=TRAIN_LEN_STUB)
def _(answer):
    from posenc_lib.course import lab

    if not isinstance(answer, (list, tuple)) or not all(
        isinstance(r, lab.LabResult) for r in answer
    ):
        raise Wrong("lab32 must be the list of LabResult that lab.run_lab returns")
    runs = {r.encoding: r for r in answer}
    missing = [n for n in _NAMES32 if n not in runs]
    if missing:
        raise Wrong(f"lab32 has no run of {', '.join(missing)}")
    for name in _NAMES32:
        r = runs[name]
        if r.train_len != 32:
            raise Wrong(
                f"{name} was trained at L = {r.train_len}; the exercise asks 32"
            )
        if tuple(r.lengths) != (32, 64, 128, 256):
            raise Wrong(
                f"{name} was evaluated at {r.lengths}; LabConfig(train_len=32) "
                "evaluates at 32, 64, 128, 256"
            )
        values = [r.loss_in, *r.loss_past.values()]
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise Wrong(f"{name}'s losses are not all finite and positive: {values}")
    rise = {n: (runs[n].rise(64), runs[n].rise(256)) for n in _NAMES32}
    if abs(rise["alibi"][0]) > 0.15:
        raise Wrong(
            f"ALiBi's loss rises by {rise['alibi'][0]:+.2f} at 2L = 64; in our runs at "
            "L = 32 (seeds 0-4) it stays within 0.06 of its loss at L: is this the "
            "Markov chain of LabConfig's defaults?"
        )
    if rise["sinusoidal"][0] < rise["alibi"][0] + 0.2:
        raise Wrong(
            f"the sinusoidal encoding rises by only {rise['sinusoidal'][0]:+.2f} at "
            f"2L (ALiBi {rise['alibi'][0]:+.2f}); in our runs (seeds 0-4) it rises by "
            "0.52 to 0.68 more: is this the lab's default configuration with L = 32?"
        )
    rope = rise["rope"]
    return (
        "three runs trained at L = 32 and evaluated at 32 to 256. Past L, ALiBi's loss "
        f"changes by {rise['alibi'][0]:+.2f} (2L) and {rise['alibi'][1]:+.2f} (8L), "
        f"the sinusoidal one's by {rise['sinusoidal'][0]:+.2f} and "
        f"{rise['sinusoidal'][1]:+.2f}, RoPE's by {rope[0]:+.2f} and {rope[1]:+.2f} "
        "(in our runs at L = 32, seeds 0-4: 0.21 to 0.78 at 2L; compare its rise at "
        "L = 16 in the chapter's table)."
    )


def _lab_result(name, L=32, rise=0.0):
    from posenc_lib.course import lab

    lengths = tuple(f * L for f in (1, 2, 4, 8))
    past = {n: 0.8 + rise for n in lengths[1:]}
    return lab.LabResult(
        name,
        0,
        lengths,
        0.8,
        past,
        {n: 0.8 for n in lengths},
        [0.8] * (8 * L),
        0.8,
        1.0,
        train_len=L,
    )


_TL = "ex-lab-train-len"
plant(_TL, [_lab_result(n, L=16) for n in _NAMES32], "trained at L = 16")
plant(
    _TL, [_lab_result("alibi"), _lab_result("sinusoidal", rise=0.6)], "no run of rope"
)
plant(_TL, [_lab_result(n, rise=0.6) for n in _NAMES32], "ALiBi's loss rises")
plant(
    _TL,
    [_lab_result("alibi"), _lab_result("rope", rise=0.4), _lab_result("sinusoidal")],
    "sinusoidal encoding rises by only",
)
plant(_TL, {"alibi": -0.04, "rope": 0.41, "sinusoidal": 0.62}, "list of LabResult")

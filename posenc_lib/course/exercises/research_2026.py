"""Checks for the exercises of book/part7/research_2026.ipynb."""

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

CHAPTER = "part7/research_2026"

# ---------------------------------------------------- ex-research-2026-alpha

ALPHA_STUB = '''\
def alpha_for_period(theta, period):
    """The alpha with theta * exp(alpha) = 2 pi / period (tensors of one shape)."""
    ...  # your code
'''


@exercise("ex-research-2026-alpha", chapter=CHAPTER, stub=ALPHA_STUB)
def _(answer):
    theta, _ = pl.rope_inv_freq(16, 10000.0)  # (8,)
    cases = [
        (
            theta[1],
            torch.tensor(10.5, dtype=torch.float64),
            "pair 1 of d = 16, P = 10.5",
        ),
        (theta, torch.full_like(theta, 100.0), "all 8 pairs of d = 16, P = 100"),
        (theta[:3], torch.tensor([5.0, 50.0, 500.0], dtype=torch.float64), "3 pairs"),
    ]
    for th, period, desc in cases:
        got = call(answer, th.clone(), period.clone(), desc=desc)
        want = torch.log(2 * math.pi / (period * th))
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if torch.allclose(got.double(), -want, atol=1e-6) and want.abs().max() > 0:
                raise Wrong(
                    f"on {desc}, your alpha has the wrong sign: theta * exp(alpha) "
                    "must be the frequency 2 pi / period"
                )
            if torch.allclose(got.double(), want.exp(), rtol=1e-6):
                raise Wrong(
                    f"on {desc}, you returned the factor exp(alpha) that multiplies "
                    "theta, not alpha itself"
                )
        expect_close(got, want, desc=desc)
    return (
        "theta * exp(alpha) turns once per period for one pair, for a ladder of 8 "
        "and for 3 pairs with 3 periods."
    )


plant(
    "ex-research-2026-alpha",
    lambda theta, period: torch.log(period * theta / (2 * math.pi)),
    says="wrong sign",
)
plant(
    "ex-research-2026-alpha",
    lambda theta, period: 2 * math.pi / (period * theta),
    says="not alpha itself",
)
plant(
    "ex-research-2026-alpha",
    lambda theta, period: torch.log(period / (2 * math.pi * theta)),
    says="expected",
)

# ---------------------------------------------------- ex-research-2026-inkling

INKLING_STUB = '''\
def inkling_bias(r, bank):
    """(n, n): (r_i P)[i - j] for 0 <= i - j < E, else 0 (r: (n, d_rel), bank:
    (d_rel, E), query i in the rows)."""
    ...  # your code
'''


@exercise("ex-research-2026-inkling", chapter=CHAPTER, stub=INKLING_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for n, d_rel, extent in ((6, 3, 4), (5, 2, 8), (1, 4, 2)):
        desc = f"n = {n}, d_rel = {d_rel}, E = {extent}"
        r = torch.randn(n, d_rel, generator=gen, dtype=torch.float64)
        bank = torch.randn(d_rel, extent, generator=gen, dtype=torch.float64)
        got = call(answer, r, bank, desc=desc)
        pos = torch.arange(n)[None]
        want = pl.relative_logits(r[None, None], bank, pos, pos)[0, 0]  # (n, n)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and n > 1:
            if torch.allclose(got.double(), want.T, atol=1e-6):
                raise Wrong(
                    f"on {desc}, your bias is transposed: query i is the row, and "
                    "the distance back to key j is i - j"
                )
            future = torch.ones(n, n, dtype=torch.bool).triu(1)
            if got.double()[future].abs().max() > 1e-9:
                raise Wrong(
                    f"on {desc}, your bias is not 0 for keys after the query "
                    "(i - j < 0): only backward distances 0 .. E - 1 get a profile"
                )
            distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
            beyond = distance >= extent
            if beyond.any() and got.double()[beyond].abs().max() > 1e-9:
                raise Wrong(
                    f"on {desc}, your bias is not 0 at distances >= E: the bank "
                    "ends there (Inkling sets the bias to 0 beyond it)"
                )
        expect_close(got, want, desc=desc)
    return (
        "equals pl.relative_logits for three sizes, with distances beyond E and "
        "after the query set to 0."
    )


def _clamped(r, bank):
    n, extent = r.shape[0], bank.shape[1]
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    picked = (r @ bank).gather(1, distance.clamp(0, extent - 1))
    return torch.where(distance >= 0, picked, torch.zeros_like(picked))


def _unmasked(r, bank):
    n, extent = r.shape[0], bank.shape[1]
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    inside = distance < extent
    picked = (r @ bank).gather(1, distance.abs().clamp(0, extent - 1))
    return torch.where(inside, picked, torch.zeros_like(picked))


plant("ex-research-2026-inkling", _clamped, says="distances >= E")
plant("ex-research-2026-inkling", _unmasked, says="keys after the query")
plant(
    "ex-research-2026-inkling",
    lambda r, bank: torch.zeros(r.shape[0], r.shape[0] + 1),
    says="has shape",
)

# ---------------------------------------------------- ex-research-2026-far

FAR_STUB = '''\
def far_share(near, n_far):
    """The softmax weight of n_far keys of score 0 beside the scores `near`."""
    ...  # your code
'''


@exercise("ex-research-2026-far", chapter=CHAPTER, stub=FAR_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(1)
    for count, n_far in ((3, 100), (32, 224), (1, 1)):
        near = torch.randn(count, generator=gen, dtype=torch.float64) * 2
        desc = f"{count} near scores and {n_far} far keys"
        got = as_float(call(answer, near.clone(), n_far, desc=desc), desc)
        # the softmax of the near scores beside n_far zeros, summed over the zeros
        weights = torch.cat([near, torch.zeros(n_far, dtype=torch.float64)]).softmax(0)
        want = weights[count:].sum().item()
        if abs(got) < 1e-9:
            raise Wrong(
                f"on {desc}, you gave the far keys no weight: that is FoX, whose "
                "decay adds -inf to their scores; Wall's decay sends them to 0"
            )
        if abs(got - n_far / (n_far + count)) < 1e-9 and abs(want - got) > 1e-6:
            raise Wrong(
                f"on {desc}, your share counts every near key as e^0: the near keys "
                "keep their scores"
            )
        expect(
            abs(got - want) < 1e-6,
            f"on {desc}, your share is {got:.6g}; the softmax gives the far keys "
            f"{want:.6g}",
        )
    return "the far keys' share of the softmax for three mixes of near and far keys."


plant("ex-research-2026-far", lambda near, n_far: 0.0, says="that is FoX")
plant(
    "ex-research-2026-far",
    lambda near, n_far: n_far / (n_far + len(near)),
    says="keep their scores",
)
plant(
    "ex-research-2026-far",
    lambda near, n_far: 1 / (1 + near.exp().sum().item()),
    says="the softmax gives",
)

# ---------------------------------------------------- ex-research-2026-turn

TURN_STUB = '''\
def turn(theta, t, s):
    """phi_t - phi_s for angles theta (n, p) said by the tokens, s <= t: (p,)."""
    ...  # your code
'''


@exercise("ex-research-2026-turn", chapter=CHAPTER, stub=TURN_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(2)
    theta = torch.randn(10, 3, generator=gen, dtype=torch.float64)
    phi = theta.cumsum(0)  # phi_t = sum_{l <= t} theta_l
    for t, s in ((7, 2), (5, 5), (9, 0)):
        desc = f"t = {t}, s = {s}"
        got = call(answer, theta.clone(), t, s, desc=desc)
        want = phi[t] - phi[s]
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            if torch.allclose(got.double(), theta[s : t + 1].sum(0)):
                raise Wrong(
                    f"on {desc}, your turn includes the key's own angle theta_s: it "
                    "cancels in phi_t - phi_s"
                )
            if s > 0 and torch.allclose(got.double(), phi[t]):
                raise Wrong(
                    f"on {desc}, you returned phi_t, the query's absolute angle: "
                    "the score sees the difference phi_t - phi_s"
                )
            if t > s and torch.allclose(got.double(), (t - s) * theta[t]):
                raise Wrong(
                    f"on {desc}, (t - s) theta_t is RoPE's turn with the query's "
                    "angle: here every token between says its own angle"
                )
        expect_close(got, want, desc=desc)
    return "phi_t - phi_s from the running sums, for t > s, t = s and s = 0."


plant("ex-research-2026-turn", lambda th, t, s: th[s : t + 1].sum(0), says="own angle")
plant("ex-research-2026-turn", lambda th, t, s: th[: t + 1].sum(0), says="absolute")
plant("ex-research-2026-turn", lambda th, t, s: (t - s) * th[t], says="RoPE's turn")

# ---------------------------------------------------- ex-research-2026-pi-limit

PI_STUB = '''\
def pi_gap(model, tokens, f):
    """max |logits under PI with factor f - logits with RoPE dropped| (a float)."""
    ...  # your code
'''


def _gap(model, tokens, f) -> float:
    from posenc_lib.course import lab

    with torch.no_grad():
        pi = lab.rope_rescaled(model, "linear", factor=f)(tokens)
        dropped = lab.drop_rope(model)(tokens)
    return (pi - dropped).abs().max().item()


@exercise("ex-research-2026-pi-limit", chapter=CHAPTER, stub=PI_STUB)
def _(answer):
    torch.manual_seed(3)
    model = pl.TinyTransformer(8, 32, 4, 2, pe=pl.Rotary(8)).eval()
    tokens = torch.randint(0, 8, (2, 48), generator=torch.Generator().manual_seed(3))
    got = []
    for f in (2, 32, 512):
        desc = f"a 2-layer RoPE model, 48 tokens, f = {f}"
        value = as_float(call(answer, model, tokens.clone(), f, desc=desc), desc)
        want = _gap(model, tokens, f)
        expect(
            abs(value - want) <= 1e-5 + 1e-3 * want,
            f"on {desc}, your gap is {value:.6g}; PI against the dropped model "
            f"differs by {want:.6g} at most",
        )
        got.append(value)
    expect(
        got[-1] < got[0] / 10,
        f"your gaps {got} do not shrink as f grows",
    )
    return (
        f"the largest logit difference between PI and dropped RoPE for f = 2, 32, "
        f"512 ({got[0]:.3g}, {got[1]:.3g}, {got[2]:.3g}): PI tends to no rotation."
    )


def _against_rope(model, tokens, f):
    from posenc_lib.course import lab

    with torch.no_grad():
        return (
            (lab.rope_rescaled(model, "linear", factor=f)(tokens) - model(tokens))
            .abs()
            .max()
            .item()
        )


def _mean_gap(model, tokens, f):
    from posenc_lib.course import lab

    with torch.no_grad():
        pi = lab.rope_rescaled(model, "linear", factor=f)(tokens)
        return (pi - lab.drop_rope(model)(tokens)).abs().mean().item()


plant("ex-research-2026-pi-limit", _against_rope, says="differs by")
plant("ex-research-2026-pi-limit", _mean_gap, says="differs by")
plant("ex-research-2026-pi-limit", lambda model, tokens, f: None, says="returned None")

"""Checks for the exercises of book/part0/self_attention.ipynb."""

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
from posenc_lib.course.exercises._values import integers, number

CHAPTER = "part0/self_attention"

# ---- ex-sa-causal-first -------------------------------------------------------------

FIRST_STUB = """\
# the positions (0 .. N-1) whose output of the two-layer causal NoPE model is the
# same for every permutation of the tokens 1 .. N-1
unchanged_positions = ...  # your answer: a list of positions
"""


def _unchanged(n: int = 7, seed: int = 0) -> list[int]:
    """Run a two-layer causal NoPE model on tokens and on a derangement of 1 .. n-1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # the reader's random state untouched
        torch.manual_seed(seed)
        model = pl.TinyTransformer(20, d_model=16, n_heads=2, n_layers=2, pe=pl.NoPE())
    model = model.double()
    tokens = torch.randperm(20, generator=gen)[:n][None]  # distinct tokens
    perm = torch.cat(
        [torch.zeros(1, dtype=torch.long), torch.roll(torch.arange(1, n), 1)]
    )
    with torch.no_grad():
        a = model(tokens, causal=True)[0]
        b = model(tokens[:, perm], causal=True)[0]
    same = (a - b).abs().amax(-1) < 1e-9
    return [i for i in range(n) if same[i]]


@exercise("ex-sa-causal-first", chapter=CHAPTER, stub=FIRST_STUB)
def _(answer):
    got = integers(answer, "unchanged_positions")
    want = _unchanged()  # [0]
    if not got:
        raise Wrong(
            "unchanged_positions is empty: one position sees the same inputs "
            "whatever the order of tokens 1 .. N-1"
        )
    if any(i < 0 for i in got):
        raise Wrong(
            "write the positions as 0 .. N-1 (N-1 for the last one), not as "
            "negative indices"
        )
    extra = [i for i in got if i not in want]
    if extra and got == sorted(set(want) | {got[-1]}) and got[-1] >= 1:
        raise Wrong(
            f"position {got[-1]} changes in the two-layer model: its inputs to the "
            "second layer are earlier outputs, which the permutation changed "
            "(compare model(..., causal=True) for two orders)"
        )
    if extra:
        raise Wrong(
            f"the outputs at positions {extra} change when tokens 1 .. N-1 are "
            "permuted (try model(..., causal=True) on two orders)"
        )
    if got != want:
        raise Wrong(f"positions {sorted(set(want) - set(got))} are unchanged too")
    return "only position 0's output is unchanged (checked on a two-layer model)."


plant("ex-sa-causal-first", [0, 6], "second layer")
plant("ex-sa-causal-first", [0, 1, 2], "change when tokens")
plant("ex-sa-causal-first", [], "is empty")
plant("ex-sa-causal-first", [0, -1], "negative indices")
plant("ex-sa-causal-first", "0", "should be a list")

# ---- ex-sa-variance -----------------------------------------------------------------

VAR_STUB = '''\
def scale(sigma, d):
    """The s that keeps Var(q . k / s) = 1 when the d entries of q and k are
    independent, zero-mean, of variance sigma**2."""
    ...  # your code
'''


@exercise("ex-sa-variance", chapter=CHAPTER, stub=VAR_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for sigma, d in [(2.0, 64), (0.5, 36), (3.0, 8)]:
        desc = f"sigma = {sigma:g}, d = {d}"
        s = number(call(answer, sigma, d, desc=desc), f"scale({sigma:g}, {d})")
        want = sigma**2 * math.sqrt(d)
        if math.isclose(s, math.sqrt(d), rel_tol=1e-6):
            raise Wrong(f"on {desc}, your scale is sqrt(d): it ignores sigma")
        if math.isclose(s, sigma * math.sqrt(d), rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your scale grows as sigma, but q . k is a sum of "
                "products of two entries: each product's variance is sigma^2 "
                "times sigma^2"
            )
        if math.isclose(s, sigma**2 * d, rel_tol=1e-6) or math.isclose(
            s, sigma**4 * d, rel_tol=1e-6
        ):
            raise Wrong(
                f"on {desc}, your scale is the variance of q . k; dividing by s "
                "divides the variance by s^2"
            )
        q = sigma * torch.randn(20000, d, generator=gen, dtype=torch.float64)
        k = sigma * torch.randn(20000, d, generator=gen, dtype=torch.float64)
        var = float(((q * k).sum(-1) / s).var())
        if abs(var - 1) > 0.1:
            raise Wrong(
                f"on {desc}, Var(q . k / s) with your s = {s:.4g} is {var:.3g}, "
                "not 1 (measured on 20000 random pairs)"
            )
        expect_close(s, want, desc=desc, what="your scale", rtol=1e-6)
    return "Var(q . k / s) = 1 in closed form and by simulation, for 3 (sigma, d)."


plant("ex-sa-variance", lambda sigma, d: math.sqrt(d), "ignores sigma")
plant("ex-sa-variance", lambda sigma, d: sigma * math.sqrt(d), "grows as sigma")
plant("ex-sa-variance", lambda sigma, d: sigma**4 * d, "is the variance")
plant("ex-sa-variance", lambda sigma, d: 1.2 * sigma**2 * math.sqrt(d), "not 1")
plant("ex-sa-variance", lambda sigma, d: None, "returned None")


MEAN_POOL_STUB = '''\
def at_chased(model, sentence):
    """The output of `model` (bidirectional: causal=False) at the word "chased",
    position 2 of `sentence` (1, 5): a (1, D) tensor, no pooling."""
    ...  # your code
'''


def _tensor(value, desc):
    if not isinstance(value, torch.Tensor):
        raise Wrong(f"on {desc}, your answer is a {type(value).__name__}, not a tensor")
    return value.detach().to(torch.float64)


def _sentences():
    s1 = torch.tensor([[0, 1, 2, 0, 3]])  # the cat chased the dog
    s2 = torch.tensor([[0, 3, 2, 0, 1]])  # the dog chased the cat
    return s1, s2


@exercise("ex-sa-mean-pool", chapter=CHAPTER, stub=MEAN_POOL_STUB)
def _(answer):
    s1, s2 = _sentences()
    gaps = {}
    for name in ("NoPE", "sinusoidal"):
        torch.manual_seed(1)
        pe = pl.NoPE() if name == "NoPE" else pl.Sinusoidal(16)
        model = pl.TinyTransformer(4, d_model=16, n_heads=2, n_layers=2, pe=pe)
        with torch.no_grad():
            out = [
                call(answer, model, s, desc=f"a 2-layer {name} model") for s in (s1, s2)
            ]
            hidden = model.hidden(s1, causal=False).double()
        desc = f"a 2-layer {name} model and 'the cat chased the dog'"
        got = _tensor(out[0], desc)
        if tuple(got.shape) != (1, 16):
            raise Wrong(
                f"on {desc}, your vector has shape {tuple(got.shape)}, not (1, D)"
            )
        if torch.allclose(got, hidden.mean(1), atol=1e-6):
            raise Wrong(
                f"on {desc}, your vector is the mean over the tokens: no pooling"
            )
        for p in range(5):
            if p != 2 and torch.allclose(got, hidden[:, p], atol=1e-6):
                raise Wrong(f"on {desc}, your vector is the output at position {p}")
        if not torch.allclose(got, hidden[:, 2], atol=1e-5):
            causal = model.hidden(s1, causal=True)[:, 2].double()
            if torch.allclose(got, causal, atol=1e-5):
                raise Wrong(f"on {desc}, your vector uses the causal mask")
            expect_close(got, hidden[:, 2], desc=desc, what="your vector", atol=1e-5)
        gaps[name] = (_tensor(out[0], desc) - _tensor(out[1], desc)).abs().max().item()
    expect(gaps["NoPE"] < 1e-5, "the NoPE vectors of the two sentences differ")
    return (
        "your vector is the output at 'chased' (position 2); on a fresh NoPE model the "
        f"two sentences give the same vector (largest difference {gaps['NoPE']:.0e}), "
        f"on a sinusoidal one they differ by {gaps['sinusoidal']:.3f}."
    )


plant(
    "ex-sa-mean-pool",
    lambda m, s: m.hidden(s, causal=False).mean(1),
    "mean over the tokens",
)
plant("ex-sa-mean-pool", lambda m, s: m.hidden(s, causal=False)[:, 1], "position 1")
plant("ex-sa-mean-pool", lambda m, s: m.hidden(s)[:, 2], "causal mask")
plant("ex-sa-mean-pool", lambda m, s: None, "returned None")

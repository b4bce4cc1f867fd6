"""Checks for the exercises of book/part4/stick_breaking.ipynb."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

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

CHAPTER = "part4/stick_breaking"

UNIFORM_STUB = '''\
def uniform_logits(n):
    """Break-point logits (n,) of a query's n keys, oldest first (key j = 0 .. n-1
    is n - j tokens back), that give each key 1/(n+1) of the stick."""
    ...  # your code
'''

SIZES = (3, 8, 17)


def _last_row(z: torch.Tensor) -> torch.Tensor:
    """Stick-breaking weights (n,) of a query after n keys with logits z (n,)."""
    n = z.shape[0]
    scores = torch.zeros(1, 1, n + 1, n + 1, dtype=torch.float64)
    scores[0, 0, -1, :n] = z
    return pl.stick_breaking_weights(scores)[0, 0, -1, :n]


@exercise("ex-sb-uniform", chapter=CHAPTER, stub=UNIFORM_STUB)
def _(answer):
    for n in SIZES:
        desc = f"n = {n} keys"
        got = call(answer, n, desc=desc)
        try:
            z = torch.as_tensor(got).detach().to(torch.float64).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise Wrong(
                f"on {desc}, expected a tensor of logits, got {type(got).__name__}"
            ) from None
        expect(z.numel() == n, f"on {desc}, your function gave {z.numel()} logits")
        expect(not bool(z.isnan().any()), f"on {desc}, your logits hold NaN")
        want = -torch.log(torch.arange(1, n + 1, dtype=torch.float64))
        if torch.allclose(z, want.flip(0)) and n > 1:
            raise Wrong(
                f"on {desc}, your logits are newest first; the keys are given oldest "
                "first (key j is n - j tokens back)"
            )
        beta = torch.sigmoid(want)
        if torch.allclose(z, beta):
            raise Wrong(
                f"on {desc}, you returned the break points beta; the logit is "
                "log(beta / (1 - beta))"
            )
        if torch.allclose(z, beta.log()):
            raise Wrong(
                f"on {desc}, your logits are log(beta); the logit is "
                "log(beta / (1 - beta))"
            )
        weights = _last_row(z)
        expect_close(
            weights,
            torch.full((n,), 1 / (n + 1), dtype=torch.float64),
            desc=desc,
            what="the weights pl.stick_breaking_weights gives your logits",
        )
    return (
        "each key gets 1/(n+1) from pl.stick_breaking_weights, for n = "
        + ", ".join(map(str, SIZES))
        + ": logit -log(n + 1 - r) for the key r tokens back."
    )


def _betas(n):
    return torch.sigmoid(-torch.log(torch.arange(1, n + 1, dtype=torch.float64)))


plant("ex-sb-uniform", lambda n: -torch.log(torch.arange(n, 0, -1.0)), says="newest")
plant("ex-sb-uniform", _betas, says="break points beta")
plant("ex-sb-uniform", lambda n: _betas(n).log(), says="log(beta)")
plant("ex-sb-uniform", lambda n: torch.zeros(n), says="the weights pl.stick")
plant("ex-sb-uniform", lambda n: None, says="returned None")


SLOPE_STUB = '''\
def logit_for_slope(m):
    """The constant break-point logit z whose stick-breaking head decays like an
    ALiBi head of slope m > 0 (a float)."""
    ...  # your code
'''

SLOPES = (0.5, 1 / 256, 2.0)


@exercise("ex-sb-alibi-slope", chapter=CHAPTER, stub=SLOPE_STUB)
def _(answer):
    for m in SLOPES:
        desc = f"slope m = {m:g}"
        got = call(answer, m, desc=desc)
        z = as_float(got, desc)
        want = math.log(math.expm1(m))
        if math.isclose(z, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        if math.isclose(z, math.log(m), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your logit is log m; softplus(z) = log(1 + e^z) = m "
                "gives z = log(e^m - 1)"
            )
        if math.isclose(z, -want, rel_tol=1e-9):
            raise Wrong(f"on {desc}, your logit has the wrong sign")
        if math.isclose(z, 1 - math.exp(-m), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, you returned the break point beta = 1 - e^-m, not its "
                "logit"
            )
        # what a head with this constant logit does: weights decay by e^-slope per key
        n = 12
        w = _last_row(torch.full((n,), z, dtype=torch.float64))
        slope = float(torch.log(w[1:] / w[:-1]).mean())
        raise Wrong(
            f"on {desc}, a head with your constant logit {z:.6g} decays with slope "
            f"{slope:.6g} per key (pl.stick_breaking_weights), not {m:g}"
        )
    z = torch.full((12,), math.log(math.expm1(SLOPES[0])), dtype=torch.float64)
    w = _last_row(z)
    assert torch.allclose(torch.log(w[1:] / w[:-1]), torch.tensor(SLOPES[0]).double())
    return (
        "softplus of your logit is m for m = "
        + ", ".join(f"{m:g}" for m in SLOPES)
        + "; pl.stick_breaking_weights with that logit decays by e^-m per key."
    )


plant("ex-sb-alibi-slope", lambda m: math.log(m), says="log m")
plant("ex-sb-alibi-slope", lambda m: -math.log(math.expm1(m)), says="wrong sign")
plant("ex-sb-alibi-slope", lambda m: 1 - math.exp(-m), says="break point beta")
plant("ex-sb-alibi-slope", lambda m: math.log(math.exp(m) + 1), says="decays with")
plant("ex-sb-alibi-slope", lambda m: None, says="returned None")


SHIFT_STUB = '''\
def subtracting_weights(z):
    """Stick-breaking weights (b, h, n, n) from logits z (b, h, n, n), the query
    not attending to itself, with fla's naive sum: the inclusive reversed
    cumulative sum of log(1 - beta) minus key j's own term."""
    ...  # your code
'''


@exercise("ex-sb-shift", chapter=CHAPTER, stub=SHIFT_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(10)
    z = torch.randn(2, 2, 9, 9, generator=gen)
    desc = "ordinary logits of shape (2, 2, 9, 9) in float64"
    got = call(answer, z.double(), desc=desc)
    want = pl.stick_breaking_weights(z.double())
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        g = got.detach().double()
        if torch.allclose(g, pl.stick_breaking_weights(z.double(), True)):
            raise Wrong(
                f"on {desc}, your query attends to itself; here it sees the keys "
                "j < i only"
            )
    expect_close(got, want, desc=desc, what="your weights", atol=1e-9, rtol=1e-7)
    big = z.clone()
    big[..., -1, 2] = 1e5
    desc = "the same logits in float32 with logit 1e5 at key 2 of the last query"
    got = call(answer, big.clone(), desc=desc)
    exact = pl.stick_breaking_weights(big.double())
    if not isinstance(got, torch.Tensor) or got.shape != exact.shape:
        expect_close(got, exact, desc=desc, what="your weights")  # names the shape
    err = (got.detach().double() - exact).abs().max().item()
    lib = (pl.stick_breaking_weights(big).double() - exact).abs().max().item()
    expect(
        err > 1e-6,
        f"on {desc}, your weights are within {err:.1e} of float64, as accurate as "
        f"the library's shifted sum ({lib:.1e}): do you subtract key j's own term "
        "from the inclusive sum?",
    )
    return (
        f"equals pl.stick_breaking_weights in float64, and in float32 with a logit "
        f"of 1e5 it is off by {err:.1e} where the library's shifted sum is off by "
        f"{lib:.1e}."
    )


def _inclusive(z):
    n = z.shape[-1]
    visible = torch.ones(n, n, dtype=torch.bool).tril(-1)
    log_keep = F.logsigmoid(-z).masked_fill(~visible, 0)
    after = log_keep.flip(-1).cumsum(-1).flip(-1)  # forgets to subtract key j
    return (F.logsigmoid(z) + after).masked_fill(~visible, -math.inf).exp()


plant("ex-sb-shift", lambda z: pl.stick_breaking_weights(z), says="as accurate")
plant("ex-sb-shift", lambda z: pl.stick_breaking_weights(z, True), says="itself")
plant("ex-sb-shift", _inclusive, says="your weights differ")
plant("ex-sb-shift", lambda z: None, says="returned None")


HIDDEN_STUB = '''\
def hide_key_mask(n, t):
    """The bool mask (n, n) (True = may attend) for n tokens with causal attention
    in which key t is hidden from every query."""
    ...  # your code
'''


@exercise("ex-sb-hidden", chapter=CHAPTER, stub=HIDDEN_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(11)
    for n, t in [(9, 3), (6, 0), (7, 5)]:
        desc = f"n = {n}, hidden key t = {t}"
        mask = call(answer, n, t, desc=desc)
        expect(
            isinstance(mask, torch.Tensor) and mask.dtype == torch.bool,
            f"on {desc}, expected a bool tensor, got "
            f"{getattr(mask, 'dtype', type(mask).__name__)}",
        )
        expect(
            mask.shape == (n, n),
            f"on {desc}, your mask has shape {tuple(mask.shape)}, expected ({n}, {n})",
        )
        upper = torch.ones(n, n, dtype=torch.bool).triu(1)
        expect(
            not bool(mask[upper].any()),
            f"on {desc}, your mask lets queries see later keys: it must keep the "
            "causal mask",
        )
        z = torch.randn(1, 1, n, n, generator=gen, dtype=torch.float64)
        keep = [s for s in range(n) if s != t]
        got = pl.stick_breaking_weights(z, mask=mask)
        if bool(mask[:, t].any()):
            rows = [i for i in range(n) if bool(mask[i, t]) and i > t]
            if rows:
                raise Wrong(
                    f"on {desc}, query {rows[0]} still sees key {t}; hide the key "
                    "from every query (a column of the mask)"
                )
        removed = pl.stick_breaking_weights(z[..., keep, :][..., keep])
        expect_close(
            got[..., keep, :][..., keep],
            removed,
            desc=desc,
            what="the weights of the other tokens",
        )
    return (
        "with your mask, pl.stick_breaking_weights gives the weights of the "
        "sequence with token t removed, for (n, t) = (9, 3), (6, 0), (7, 5)."
    )


def _row_hidden(n, t):
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    mask[t] = False
    return mask


def _not_causal(n, t):
    mask = torch.ones(n, n, dtype=torch.bool)
    mask[:, t] = False
    return mask


def _others_hidden(n, t):
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    mask[:, t] = False
    mask[:, (t + 1) % n] = False
    return mask


plant("ex-sb-hidden", _row_hidden, says="still sees key")
plant("ex-sb-hidden", _not_causal, says="later keys")
plant("ex-sb-hidden", _others_hidden, says="the weights of the other tokens")
plant("ex-sb-hidden", lambda n, t: torch.ones(n, n).tril(), says="bool tensor")
plant("ex-sb-hidden", lambda n, t: None, says="returned None")


# ---------------------------------------------------------------- ex-sb-budget

BUDGET_STUB = """\
# the steps you trained for, the trained RoPE model and its accuracies
# {32: ..., 128: ...}, as run("softmax, RoPE", seed, steps=...) returns them
rope_budget = ...  # your answer: (steps, model, acc)
"""

_VOCAB, _N_VALUES, _N_KEYS = 36, 8, 4


def _latest_value_batch(b: int, n: int, generator: torch.Generator):
    """The chapter's task (its ``latest_value_batch``, copied here so that the check
    builds its own evaluation batch without the notebook's state)."""
    write = torch.rand(b, n, generator=generator) < 0.5
    key = torch.randint(_N_KEYS, (b, n), generator=generator)
    value = torch.randint(_N_VALUES, (b, n), generator=generator)
    tokens = torch.where(write, key * _N_VALUES + value, _N_KEYS * _N_VALUES + key)
    targets = torch.full((b, n), -100)
    latest = torch.full((b, _N_KEYS), -100)
    rows = torch.arange(b)
    for t in range(n):
        targets[~write[:, t], t] = latest[rows, key[:, t]][~write[:, t]]
        w = write[:, t]
        latest[rows[w], key[w, t]] = value[w, t]
    return tokens, targets, None


@exercise("ex-sb-budget", chapter=CHAPTER, stub=BUDGET_STUB)
def _(answer):
    from posenc_lib.encodings.rope import Rotary

    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 3,
        "`rope_budget` should be a triple (steps, model, acc), acc the dict "
        "{32: ..., 128: ...} that run returns",
    )
    steps, model, acc = answer
    expect(
        isinstance(steps, int) and steps == 600,
        f"you trained for {steps!r} steps: the exercise asks for STEPS = 600",
    )
    expect(
        isinstance(model, pl.TinyTransformer),
        f"the model should be the trained pl.TinyTransformer, got "
        f"{type(model).__name__}",
    )
    pe = model.blocks[0].attn.pe
    expect(
        isinstance(pe, Rotary),
        f"your model's attention uses {type(pe).__name__}: the exercise re-runs "
        "softmax with RoPE alone",
    )
    expect(
        len(model.blocks) == 1 and model.vocab_size == _VOCAB,
        f"your model has {len(model.blocks)} layers and {model.vocab_size} tokens; "
        f"the experiment's has 1 layer and {_VOCAB} tokens",
    )
    expect(
        isinstance(acc, dict) and {32, 128} <= set(acc),
        "acc should be a dict with the accuracies at 32 and 128 tokens, "
        f"got {acc!r:.60}",
    )
    # drawn on the CPU; pl.accuracy moves them to the model's device, which is left
    # as it is (a reader's GPU model is judged on the GPU, a CPU model on the CPU)
    gen = torch.Generator().manual_seed(12)
    measured = {
        n: pl.accuracy(model, _latest_value_batch(256, n, gen)) for n in (32, 128)
    }
    # the seed sweep: 600 steps of RoPE reach 0.87-0.98 at 32 tokens, 0.64-0.73 at
    # 128, at least 0.17 lower (posenc_lib/data/sweeps/stick_breaking.csv)
    expect(
        measured[32] > 0.75,
        f"your model gets {measured[32]:.3f} at 32 tokens on the check's 256 "
        "sequences; after 600 steps the chapter's RoPE models reach 0.87 or more: "
        "was it trained for 600 steps?",
    )
    for n in (32, 128):
        got = as_float(acc[n], f"acc[{n}]")
        expect(
            abs(got - measured[n]) < 0.04,
            f"you report acc[{n}] = {got:.3f}, but your model gets "
            f"{measured[n]:.3f} on the check's own 256 sequences of {n} tokens",
        )
    drop = measured[32] - measured[128]
    expect(
        drop > 0.05,
        f"your model keeps its accuracy at 128 tokens ({measured[128]:.3f} against "
        f"{measured[32]:.3f} at 32): over the seed sweep RoPE lost at least 0.17; "
        "was it trained at 32 tokens?",
    )
    return (
        f"RoPE trained 600 steps: {measured[32]:.3f} at 32 tokens and "
        f"{measured[128]:.3f} at 128 on the check's sequences, as you report. It "
        f"catches up at the training length and loses {drop:.2f} at 4 times it, "
        "where stick-breaking, with 200 steps, stayed at 0.89 or more in the sweep."
    )


def _planted_model(method: str):
    """An untrained model of the experiment (the global RNG left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        pe = pl.make_encoding(method, d_model=32, n_heads=2, max_len=128)
        return pl.TinyTransformer(_VOCAB, d_model=32, n_heads=2, n_layers=1, pe=pe)


_ACC = {32: 0.9, 128: 0.7}
plant("ex-sb-budget", (200, _planted_model("rope"), _ACC), says="STEPS = 600")
plant("ex-sb-budget", (600, _planted_model("alibi"), _ACC), says="RoPE alone")
plant("ex-sb-budget", (600, _planted_model("rope"), _ACC), says="trained for 600")
plant("ex-sb-budget", (600, _planted_model("rope"), [0.9, 0.7]), says="should be a")
plant("ex-sb-budget", (600, _planted_model("rope")), says="triple")

"""Checks for the exercises of book/part3/nope.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl

from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import as_float, number
from posenc_lib.utils import module_device

BOUND_STUB = '''\
def constant_bound(N):
    """The mean absolute error of the best constant guess c (an integer in
    0 .. N-1) of the position of a token at positions 1 .. N-1 (a float)."""
    ...  # your code
'''

NS = (24, 9, 10, 2)


def _mad(positions: list[int], guesses) -> float:
    return min(sum(abs(p - c) for p in positions) for c in guesses) / len(positions)


@exercise("ex-nope-bound", chapter="part3/nope", stub=BOUND_STUB)
def _(answer):
    for N in NS:
        desc = f"N = {N}"
        got = call(answer, N, desc=desc)
        value = as_float(got, desc)
        positions = list(range(1, N))
        want = _mad(positions, range(N))  # the search the chapter prints
        if math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        if math.isclose(value, _mad(list(range(N)), range(N)), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your bound includes position 0: the anchor is "
                "recognisable, the bound is over positions 1 .. N-1"
            )
        if math.isclose(value, want * (N - 1) / N, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your bound divides by N; there are N - 1 positions "
                "from 1 to N-1"
            )
        mean = sum(positions) / len(positions)
        variance = sum((p - mean) ** 2 for p in positions) / len(positions)
        if math.isclose(value, variance, rel_tol=1e-9) or math.isclose(
            value, math.sqrt(variance), rel_tol=1e-9
        ):
            raise Wrong(
                f"on {desc}, your bound is a squared-error measure; the chapter "
                "measures the mean absolute error"
            )
        expect_close(value, want, desc=desc, what="your bound", atol=1e-9, rtol=1e-9)
    return (
        "equals the smallest mean absolute error over every constant guess, for N = "
        + ", ".join(map(str, NS))
        + f" (N = 24: {_mad(list(range(1, 24)), range(24)):.2f})."
    )


def _with_zero(N):
    return _mad(list(range(N)), range(N))


def _over_n(N):
    return _mad(list(range(1, N)), range(N)) * (N - 1) / N


def _std(N):
    ps = range(1, N)
    m = sum(ps) / (N - 1)
    return math.sqrt(sum((p - m) ** 2 for p in ps) / (N - 1))


plant("ex-nope-bound", _with_zero, says="includes position 0")
plant("ex-nope-bound", _over_n, says="divides by N")
plant("ex-nope-bound", _std, says="squared-error")
plant("ex-nope-bound", lambda N: N / 3, says="your bound is")
plant("ex-nope-bound", lambda N: None, says="returned None")


# ---- the probe experiments: the reader hands over the trained model and its numbers --

N_POS, V_POS, ANCHOR = 24, 8, 0  # the chapter's position probe

NO_ANCHOR_STUB = """\
# the causal position probe (2 layers, NoPE) trained on sequences without the anchor,
# and its exact accuracy and mean error (in positions) on anchor-free sequences
no_anchor = {"model": ..., "exact": ..., "mean_error": ...}  # your answer
"""

LAYERS_STUB = """\
# the causal position probe (NoPE, anchor kept) trained with n_layers=1, and its
# exact accuracy and mean error (in positions)
one_layer = {"model": ..., "exact": ..., "mean_error": ...}  # your answer
"""


def _probe_eval(model, anchor: bool) -> tuple[float, float, float]:
    """(exact, exact in the first 8, mean error) of ``model`` on 500 fixed sequences."""
    g = torch.Generator().manual_seed(1000)  # the chapter's evaluation batch
    tokens = torch.randint(1, V_POS + 1, (500, N_POS), generator=g)
    if anchor:
        tokens[:, 0] = ANCHOR
    device = module_device(model)  # judge the model where it is
    with torch.no_grad():
        pred = model(tokens.to(device), causal=True).argmax(-1).cpu()
    err = (pred - torch.arange(N_POS)).abs().float()
    exact = (err == 0).float()
    return exact.mean().item(), exact[:, :8].mean().item(), err.mean().item()


def _probe_answer(answer, name: str, n_layers: int):
    if not isinstance(answer, dict) or not {"model", "exact", "mean_error"} <= set(
        answer
    ):
        raise Wrong(f'{name} must be a dict with keys "model", "exact", "mean_error"')
    model = answer["model"]
    if not isinstance(model, pl.TinyTransformer):
        raise Wrong(f"the model is a {type(model).__name__}, not a pl.TinyTransformer")
    if not isinstance(model.pe, pl.NoPE):
        raise Wrong(f"the model's encoding is {type(model.pe).__name__}, not NoPE")
    if len(model.blocks) != n_layers:
        raise Wrong(
            f"the model has {len(model.blocks)} layer(s); this probe has {n_layers}"
        )
    exact = number(answer["exact"], "the exact accuracy")
    error = number(answer["mean_error"], "the mean error")
    return model, exact, error


def _matches(exact, error, measured) -> bool:
    return abs(exact - measured[0]) <= 0.05 and abs(error - measured[2]) <= 0.25


@exercise("ex-nope-no-anchor", chapter="part3/nope", stub=NO_ANCHOR_STUB)
def _(answer):
    model, exact, error = _probe_answer(answer, "no_anchor", n_layers=2)
    free, anchored = _probe_eval(model, anchor=False), _probe_eval(model, anchor=True)
    if not _matches(exact, error, free):
        if _matches(exact, error, anchored):
            raise Wrong(
                f"your numbers (exact {exact:.2f}, mean error {error:.2f}) are the "
                "model's on sequences that still start with the anchor; evaluate it "
                f"without: exact {free[0]:.2f}, mean error {free[2]:.2f}"
            )
        raise Wrong(
            f"you report exact {exact:.2f} and mean error {error:.2f}, but on 500 "
            f"fresh anchor-free sequences the model gets {free[0]:.2f} and "
            f"{free[2]:.2f}: is this the model you trained?"
        )
    if free[0] > 0.5:
        raise Wrong(
            f"the model still finds {free[0]:.2f} of the positions exactly without the "
            "anchor (in our runs at most 0.23): was position 0 really drawn at random "
            "during training?"
        )
    return (
        f"a 2-layer causal NoPE probe; on 500 anchor-free sequences it is exact on "
        f"{free[0]:.2f} of the positions ({free[1]:.2f} of the first 8), mean error "
        f"{free[2]:.2f} positions, as you report: without the anchor the clock is gone."
    )


@exercise("ex-nope-layers", chapter="part3/nope", stub=LAYERS_STUB)
def _(answer):
    model, exact, error = _probe_answer(answer, "one_layer", n_layers=1)
    measured = _probe_eval(model, anchor=True)
    if not _matches(exact, error, measured):
        raise Wrong(
            f"you report exact {exact:.2f} and mean error {error:.2f}, but on 500 "
            f"fresh sequences the model gets {measured[0]:.2f} and {measured[2]:.2f} "
            "(causal mask on): is this the model you trained?"
        )
    if measured[1] < 0.8 or measured[2] > 1.0:
        raise Wrong(
            f"the model is exact on only {measured[1]:.2f} of the first 8 positions "
            f"(mean error {measured[2]:.2f}); in our runs one layer gets at least 0.88 "
            "there: was it trained with the anchor and causal=True?"
        )
    return (
        f"a 1-layer causal NoPE probe; on 500 sequences it is exact on "
        f"{measured[0]:.2f} of the positions ({measured[1]:.2f} of the first 8), mean "
        f"error {measured[2]:.2f}: one layer suffices to read the clock."
    )


def _untrained(n_layers):
    torch.manual_seed(0)
    return pl.TinyTransformer(N_POS, 32, 4, n_layers=n_layers, pe=pl.NoPE())


def _untrained_alibi():
    torch.manual_seed(0)
    pe = pl.make_encoding("alibi", d_model=32, n_heads=4, max_len=N_POS)
    return pl.TinyTransformer(N_POS, 32, 4, n_layers=2, pe=pe)


_NO_ANCHOR = "ex-nope-no-anchor"
plant(
    _NO_ANCHOR, {"model": _untrained(1), "exact": 0.22, "mean_error": 2.3}, "layer(s)"
)
plant(_NO_ANCHOR, {"model": _untrained(2), "exact": 0.22, "mean_error": 2.3}, "fresh")
plant(
    _NO_ANCHOR,
    {"model": _untrained_alibi(), "exact": 0.22, "mean_error": 2.3},
    "not NoPE",
)
plant(_NO_ANCHOR, (0.22, 2.3), "must be a dict")
plant(
    "ex-nope-layers",
    {"model": _untrained(2), "exact": 0.74, "mean_error": 0.34},
    "has 2 layer(s)",
)
plant(
    "ex-nope-layers",
    {"model": _untrained(1), "exact": 0.74, "mean_error": 0.34},
    "is this the model",
)
plant("ex-nope-layers", [0.74, 0.34], "must be a dict")

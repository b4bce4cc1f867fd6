"""Checks for the exercises of book/part2/huang.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part2/huang"

PARAMS_STUB = '''\
def huang_params(method, d_head, max_distance):
    """The number of learned scalars in the table of Huang's method 1, 2, 3 or 4,
    for heads of size d_head and offsets clipped at max_distance."""
    ...  # your code
'''


@exercise("ex-huang-params", chapter=CHAPTER, stub=PARAMS_STUB)
def _(answer):
    settings = [(64, 511), (16, 7), (8, 100)]
    for d, k in settings:
        for method in (1, 2, 3, 4):
            desc = f"method {method}, d_head = {d}, max_distance = {k}"
            got = number(call(answer, method, d, k, desc=desc), "your count")
            table = pl.huang_method(method, d_head=d, max_distance=k)
            want = sum(p.numel() for p in table.parameters())
            if got == want:
                continue
            hint = ""
            if method == 1 and got == 2 * k + 1:
                hint = ": method 1 is symmetric, one scalar per distance |j - i|"
            elif method == 1 and got == k:
                hint = ": distance 0 has its scalar too"
            elif method > 1 and got == want // (2 * k + 1) * (2 * k):
                hint = ": offsets -k .. k are 2k + 1 of them"
            elif method in (3, 4) and got == 2 * k + 1:
                hint = ": methods 3 and 4 learn a vector of size d_head per offset"
            elif method == 2 and got == k + 1:
                hint = ": method 2 is directional, offsets -k .. k"
            raise Wrong(f"on {desc}, your count is {got:g}, expected {want}{hint}")
    return "equals the size of pl.huang_method's table for every method on " + (
        "(d_head, max_distance) = " + ", ".join(f"({d}, {k})" for d, k in settings)
    )


def _right(method, d, k):
    return [k + 1, 2 * k + 1, (2 * k + 1) * d, (2 * k + 1) * d][method - 1]


plant(
    "ex-huang-params",
    lambda m, d, k: 2 * k + 1 if m == 1 else _right(m, d, k),
    "method 1 is symmetric",
)
plant(
    "ex-huang-params",
    lambda m, d, k: 2 * k + 1 if m > 1 else k + 1,
    "vector of size d_head",
)
plant(
    "ex-huang-params",
    lambda m, d, k: [k + 1, 2 * k, 2 * k * d, 2 * k * d][m - 1],
    "2k + 1 of them",
)
plant(
    "ex-huang-params",
    lambda m, d, k: [k, 2 * k + 1, 0, 0][m - 1],
    "distance 0 has its scalar",
)
plant("ex-huang-params", lambda m, d, k: None, "returned None")


CAUSAL_STUB = """\
# copy_accuracy with causal=True in pl.train and pl.accuracy, for method 1 and one
# seed, returning the trained model too
causal_run = ...  # your answer: (model, accuracy)
"""

_VOCAB, _LENGTH = 16, 24


def _copy_eval(model, causal: bool) -> float:
    g = torch.Generator().manual_seed(2024)
    batch = pl.copy_offset_batch(256, _LENGTH, 3, _VOCAB, g)  # drawn on the CPU
    return pl.accuracy(model, batch, causal=causal)  # on the model's device


@exercise("ex-huang-causal", chapter=CHAPTER, stub=CAUSAL_STUB)
def _(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong("causal_run must be a pair (model, accuracy)")
    model, reported = answer
    if not isinstance(model, pl.TinyTransformer):
        raise Wrong(f"the model is a {type(model).__name__}, not a pl.TinyTransformer")
    reported = number(reported, "the accuracy")
    method = getattr(model.pe, "method", None)
    if not isinstance(model.pe, pl.HuangMethod1):
        raise Wrong(
            f"the model's encoding is {type(model.pe).__name__} (method {method}); "
            "the exercise is about Huang's method 1"
        )
    if len(model.blocks) != 1:
        raise Wrong(f"the model has {len(model.blocks)} layers; the chapter's has 1")
    with torch.no_grad():
        causal, both = _copy_eval(model, True), _copy_eval(model, False)
    if abs(reported - causal) > 0.05:
        if abs(reported - both) <= 0.05:
            raise Wrong(
                f"you report {reported:.2f}, which is what the model copies without "
                f"the causal mask ({both:.2f}); with it, it copies {causal:.2f}: "
                "change the call to pl.accuracy too"
            )
        raise Wrong(
            f"you report accuracy {reported:.2f}, but the model copies {causal:.2f} "
            "of 256 x 24 fresh tokens (causal mask on): is this the model you trained?"
        )
    if causal < 0.9:
        raise Wrong(
            f"the model copies {causal:.2f} of the tokens with the causal mask: was it "
            "trained with causal=True? (in our runs it copies more than 0.99)"
        )
    return (
        f"a 1-layer method-1 model; on a fresh batch it copies {causal:.3f} of the "
        f"tokens with the causal mask (you report {reported:.3f}) and {both:.2f} "
        "without: the mask supplies the direction."
    )


def _model(method, n_layers=1):
    torch.manual_seed(0)
    pe = pl.make_encoding(f"huang_m{method}", d_model=32, n_heads=4, max_len=_LENGTH)
    return pl.TinyTransformer(_VOCAB, 32, 4, n_layers=n_layers, pe=pe)


plant("ex-huang-causal", (_model(2), 1.0), "method 2")
plant("ex-huang-causal", (_model(1, n_layers=2), 1.0), "has 2 layers")
plant("ex-huang-causal", (_model(1), 1.0), "is this the model you trained")
plant("ex-huang-causal", 0.99, "pair (model, accuracy)")

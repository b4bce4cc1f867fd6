"""Checks for the exercises of book/part0/tensors_embeddings.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant
from posenc_lib.course.exercises._values import numbers

CHAPTER = "part0/tensors_embeddings"

# ---- ex-te-einsum -------------------------------------------------------------------

EINSUM_STUB = '''\
def attend(alpha, v):
    """alpha (b, h, i, j), v (b, h, j, c) -> z (b, h, i, c), z_ic = sum_j alpha_ij v_jc,
    as one torch.einsum."""
    ...  # your code
'''


@exercise("ex-te-einsum", chapter=CHAPTER, stub=EINSUM_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    cases = [((2, 3, 5, 5), (2, 3, 5, 4)), ((1, 2, 3, 6), (1, 2, 6, 5))]
    for a_shape, v_shape in cases:
        alpha = torch.rand(*a_shape, generator=gen, dtype=torch.float64).softmax(-1)
        v = torch.randn(*v_shape, generator=gen, dtype=torch.float64)
        desc = f"alpha of shape {a_shape}, v of shape {v_shape}"
        got = call(answer, alpha.clone(), v.clone(), desc=desc)
        if (
            isinstance(got, torch.Tensor)
            and a_shape[-1] == a_shape[-2]
            and got.shape == v.shape
            and torch.allclose(got.double(), alpha.transpose(-1, -2) @ v)
        ):
            raise Wrong(
                f"on {desc}, your einsum sums over the query axis i: alpha's last "
                "axis is the key axis j, the one that meets v"
            )
        expect_close(got, alpha @ v, desc=desc, what="z")
    return "equals alpha @ v, also when there are fewer queries than keys."


plant("ex-te-einsum", lambda a, v: torch.einsum("bhji,bhjc->bhic", a, v), "query axis")
plant("ex-te-einsum", lambda a, v: torch.einsum("bhij,bhjc->bhij", a, v), "has shape")
plant(
    "ex-te-einsum",
    lambda a, v: torch.einsum("bhij,bhjc->bhic", a, v.transpose(-1, -2)),
    "your function raised",
)
plant("ex-te-einsum", lambda a, v: None, "returned None")

# ---- ex-te-params -------------------------------------------------------------------

PARAMS_STUB = """\
# (token table parameters, position table parameters, fraction of 124 M both hold)
gpt2_counts = ...  # your answer: a tuple of three numbers
"""

V, D, POS, TOTAL = 50257, 768, 1024, 124e6


@exercise("ex-te-params", chapter=CHAPTER, stub=PARAMS_STUB)
def _(answer):
    tokens, positions, fraction = numbers(answer, 3, "gpt2_counts")
    if tokens != V * D:
        raise Wrong(
            f"your token table count is {tokens:g}, expected {V * D}"
            + (": V x D, with V = 50257" if tokens == 50000 * D else "")
        )
    if positions != POS * D:
        hint = ""
        if positions == (POS - 1) * D:
            hint = ": positions 0 .. 1023 are 1024 rows"
        raise Wrong(
            f"your position table count is {positions:g}, expected {POS * D}{hint}"
        )
    want = (V * D + POS * D) / TOTAL
    if fraction > 1:
        raise Wrong(
            f"your fraction is {fraction:g}: give it between 0 and 1, not in percent"
        )
    if math.isclose(fraction, V * D / TOTAL, rel_tol=2e-3):
        raise Wrong(
            f"your fraction {fraction:.4g} counts the token table only; the question "
            "asks for both tables together"
        )
    if abs(fraction - want) > 2e-3:
        raise Wrong(f"your fraction is {fraction:.4g}, expected about {want:.3f}")
    return "the two tables hold 38.6 M and 0.79 M parameters, about 32 % of 124 M."


plant("ex-te-params", (V * D, (POS - 1) * D, 0.317), "1024 rows")
plant("ex-te-params", (V * D, POS * D, 31.8), "not in percent")
plant("ex-te-params", (V * D, POS * D, 0.311), "token table only")
plant("ex-te-params", (50000 * D, POS * D, 0.317), "V = 50257")
plant("ex-te-params", V * D, "tuple of 3 numbers")

# ---- ex-te-bag ----------------------------------------------------------------------

BAG_STUB = '''\
def mean_hidden(model, tokens):
    """tokens (b, n) -> (b, D): the mean over positions of the model's final
    hidden states, computed without a causal mask."""
    ...  # your code
'''


@exercise("ex-te-bag", chapter=CHAPTER, stub=BAG_STUB)
def _(answer):
    for name, pe in (("no encoding", None), ("pl.Sinusoidal(8)", pl.Sinusoidal(8))):
        with torch.random.fork_rng(devices=[]):  # the reader's random state kept
            torch.manual_seed(0)
            model = pl.TinyTransformer(5, 8, 2, pe=pe).double()
        for seq in ([[1, 2, 3]], [[3, 1, 2], [4, 0, 1]]):
            tokens = torch.tensor(seq)
            desc = f"a TinyTransformer(5, 8, 2) with {name}, tokens {seq}"
            with torch.no_grad():
                got = call(answer, model, tokens, desc=desc)
                want = model.hidden(tokens, causal=False).mean(1)
                causal = model.hidden(tokens, causal=True).mean(1)
            if isinstance(got, torch.Tensor):
                got = got.detach()
                if got.shape == want.shape and torch.allclose(got.double(), causal):
                    raise Wrong(
                        f"on {desc}, your mean is over causally masked states: "
                        "model.hidden masks causally unless told otherwise"
                    )
                if got.shape == (tokens.shape[0], tokens.shape[1]):
                    raise Wrong(
                        f"on {desc}, your result has shape {tuple(got.shape)}: you "
                        "averaged over the features, not over the positions"
                    )
            expect_close(got, want, desc=desc, what="the mean hidden state")
    return (
        "equals model.hidden(tokens, causal=False).mean(1), with and without an "
        "encoding."
    )


plant("ex-te-bag", lambda m, t: m.hidden(t).mean(1), "causally masked")
plant("ex-te-bag", lambda m, t: m.hidden(t, causal=False).mean(-1), "over the features")
plant("ex-te-bag", lambda m, t: m(t, causal=False).mean(1), "has shape")
plant("ex-te-bag", lambda m, t: m.hidden(t, causal=False).sum(1), "differs at entry")

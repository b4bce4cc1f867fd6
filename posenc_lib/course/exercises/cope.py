"""Checks for the exercises of book/part4/cope.ipynb."""

from __future__ import annotations

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

TABLE_STUB = '''\
def sentence_table(n_positions):
    """CoPE's table e (n_positions, 1) such that, with gates 1 at full stops and
    q = 1, q e[p] is 0 for p in [1, 2) and very negative (<= -10) at every other
    integer position."""
    ...  # your code
'''

TEXTS = ["we sat. the tub was hot. we left", "a b. c d e. f. g h i"]


def _full_stop_logits(text: str) -> torch.Tensor:
    """(1, 1, n, n): +inf (gate 1) at full stops, -inf elsewhere and above the
    diagonal."""
    n = len(text)
    hit = torch.tensor([ch == "." for ch in text])
    inf = float("inf")
    logits = torch.where(hit, inf, -inf).to(torch.float64).expand(1, 1, n, n)
    return logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -inf)


def _previous_sentence(text: str, i: int, j: int) -> bool:
    """Is key j in the sentence before query i's (its closing full stop
    included)?"""
    return text[j : i + 1].count(".") == 1


@exercise("ex-cope-sentences", chapter="part4/cope", stub=TABLE_STUB)
def _(answer):
    for text in TEXTS:
        n = len(text)
        desc = f"the text {text!r} (n_positions = {n + 1})"
        got = call(answer, n + 1, desc=desc)
        try:
            e = torch.as_tensor(got).detach().to(torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise Wrong(
                f"on {desc}, expected a tensor, got {type(got).__name__}"
            ) from None
        expect(
            e.shape == (n + 1, 1),
            f"on {desc}, your table has shape {tuple(e.shape)}, expected "
            f"({n + 1}, 1): one row per integer position, one column (d = 1)",
        )
        q = torch.ones(1, 1, n, 1, dtype=torch.float64)
        bias = pl.cope_bias(q, _full_stop_logits(text), e)[0, 0]  # (i, j)
        for i in range(n):
            if text[i] == ".":
                continue  # a query on a full stop is the exercise's boundary case
            for j in range(i + 1):
                count = text[j : i + 1].count(".")
                where = f"query {i} ({text[i]!r}), key {j} ({text[j]!r})"
                if _previous_sentence(text, i, j):
                    expect(
                        abs(float(bias[i, j])) <= 1e-6,
                        f"on {desc}, {where} is in the previous sentence (p = 1) "
                        f"but gets q e[p] = {float(bias[i, j]):.4g}, not 0",
                    )
                elif float(bias[i, j]) > -10:
                    which = {
                        0: "the current sentence (p = 0)",
                        2: "the sentence before the previous one (p = 2)",
                    }.get(count, f"p = {count}")
                    raise Wrong(
                        f"on {desc}, {where} is in {which} and gets q e[p] = "
                        f"{float(bias[i, j]):.4g}: it should be very negative "
                        "(<= -10)"
                    )
    return (
        "with gates 1 at full stops and q = 1, q e[p] is 0 on the previous sentence "
        "and <= -10 elsewhere, for every query not on a full stop, on two texts."
    )


def _zero_at(k: int, low: float = -30.0):
    def table(n_positions):
        e = torch.full((n_positions, 1), low)
        e[k] = 0.0
        return e

    return table


plant("ex-cope-sentences", _zero_at(0), says="the current sentence (p = 0)")
plant("ex-cope-sentences", _zero_at(1, low=-1.0), says="very negative")
plant(
    "ex-cope-sentences",
    lambda P: torch.where(torch.arange(P) >= 1, 0.0, -30.0)[:, None],
    says="before the previous one",
)
plant("ex-cope-sentences", lambda P: _zero_at(1)(P)[:, 0], says="one column")
plant("ex-cope-sentences", lambda P: None, says="returned None")


BIDIR_STUB = '''\
def bidirectional_positions(gates):
    """Gates g_it (b, h, i, j) in [0, 1], no key masked -> positions (b, h, i, j):
    p_ij = sum_{t=j..i} g_it for j <= i and sum_{t=i..j} g_it for j > i,
    computed with cumulative sums (no loop over i or j)."""
    ...  # your code
'''


def _loops(g: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(g)
    n = g.shape[-1]
    for i in range(g.shape[-2]):
        for j in range(n):
            lo, hi = min(i, j), max(i, j)
            out[..., i, j] = g[..., i, lo : hi + 1].sum(-1)
    return out


@exercise("ex-cope-bidirectional", chapter="part4/cope", stub=BIDIR_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(5)
    shapes = [(1, 1, 5, 5), (2, 3, 9, 9)]
    for shape in shapes:
        gates = torch.rand(shape, generator=gen, dtype=torch.float64)
        desc = f"random gates of shape {shape}"
        got = call(answer, gates.clone(), desc=desc)
        want = _loops(gates)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().double()
            whole = gates.flip(-1).cumsum(-1).flip(-1)  # the causal formula, unmasked
            if torch.allclose(g, whole):
                raise Wrong(
                    f"on {desc}, your positions sum from j to the end of the row: for "
                    "j < i that counts the tokens after the query too"
                )
            if torch.allclose(g.tril(), want.tril()) and not torch.allclose(g, want):
                raise Wrong(
                    f"on {desc}, your positions are right for keys j <= i but not for "
                    "keys after the query (j > i)"
                )
            if torch.allclose(g, want - gates.diagonal(0, -2, -1)[..., None]):
                raise Wrong(
                    f"on {desc}, your positions leave out the query's own gate g_ii; "
                    "both ends are counted"
                )
        expect_close(got, want, desc=desc, what="your position tensor", rtol=1e-9)
    return (
        "equals the count sum_{t between i and j} g_it, both ends included, "
        "for gates of shapes " + ", ".join(map(str, shapes)) + "."
    )


def _forward_only(g):
    c = g.cumsum(-1)
    return (c.diagonal(0, -2, -1)[..., None] - c + g).tril() + (c - c + 1).triu(1)


plant(
    "ex-cope-bidirectional",
    lambda g: g.flip(-1).cumsum(-1).flip(-1),
    says="to the end of the row",
)
plant("ex-cope-bidirectional", _forward_only, says="keys after the query")
plant(
    "ex-cope-bidirectional",
    lambda g: _loops(g) - g.diagonal(0, -2, -1)[..., None],
    says="own gate",
)
plant("ex-cope-bidirectional", lambda g: _loops(g)[0], says="has shape")
plant("ex-cope-bidirectional", lambda g: None, says="returned None")


GRAD_STUB = '''\
def gate_gradient(q, logits, table):
    """The gradient (b, h, i, j) of pl.cope_bias(q, logits, table).sum() with
    respect to the gate logits (b, h, i, j), by autograd; q (b, h, i, d),
    table (P, d)."""
    ...  # your code
'''


def _causal_logits(gen: torch.Generator, b: int, h: int, n: int) -> torch.Tensor:
    logits = torch.randn(b, h, n, n, generator=gen, dtype=torch.float64)
    return logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)


def _grad(q, logits, table):
    s = logits.clone().requires_grad_()
    (g,) = torch.autograd.grad(pl.cope_bias(q, s, table).sum(), s)
    return g


@exercise("ex-cope-zero-grad", chapter="part4/cope", stub=GRAD_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(12)
    b, h, n, d, P = 2, 2, 6, 4, 7
    q = torch.randn(b, h, n, d, generator=gen, dtype=torch.float64)
    logits = _causal_logits(gen, b, h, n)
    tables = [
        ("a random table e", torch.randn(P, d, generator=gen, dtype=torch.float64)),
        ("the zero table e", torch.zeros(P, d, dtype=torch.float64)),
    ]
    for name, table in tables:
        desc = f"q of shape {(b, h, n, d)}, causal logits, {name} ({P}, {d})"
        got = call(answer, q.clone(), logits.clone(), table.clone(), desc=desc)
        want = _grad(q, logits, table)
        if isinstance(got, torch.Tensor) and got.shape == (P, d):
            raise Wrong(
                f"on {desc}, your gradient has the table's shape (P, d): take it "
                "with respect to the logits"
            )
        expect_close(got, want, desc=desc, what="your gradient", atol=1e-9)
    return (
        "equals autograd's gradient with respect to the logits for a random table "
        "(non-zero) and for the zero table (exactly zero)."
    )


def _table_grad(q, logits, table):
    t = table.clone().requires_grad_()
    (g,) = torch.autograd.grad(pl.cope_bias(q, logits, t).sum(), t)
    return g


plant("ex-cope-zero-grad", lambda q, s, e: torch.zeros_like(s), says="differs at")
plant("ex-cope-zero-grad", _table_grad, says="the table's shape")
plant("ex-cope-zero-grad", lambda q, s, e: s, says="non-finite entry")
plant(
    "ex-cope-zero-grad",
    lambda q, s, e: torch.autograd.grad(pl.cope_bias(q, s, e).sum(), s)[0],
    says="your function raised RuntimeError",
)
plant("ex-cope-zero-grad", lambda q, s, e: None, says="returned None")

"""Checks for the exercises of book/part2/transformer_xl.ipynb."""

from __future__ import annotations

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, plant
from posenc_lib.course.exercises._values import numbers

CHAPTER = "part2/transformer_xl"

# ---- ex-transformer_xl-row-term -----------------------------------------------------

ROW_STUB = """\
vanishing_terms = ...  # your answer: a set of letters among "a", "b", "c", "d"
"""

_WHY = {
    "a": "(a) q_i . k_j varies with j through the key's content",
    "b": "(b) q_i . W_kR R would no longer vary with j",
    "c": "(c) u . k_j varies with j through the key's content",
    "d": "(d) v . W_kR R would no longer vary with j (nor with i)",
}


@exercise("ex-transformer_xl-row-term", chapter=CHAPTER, stub=ROW_STUB)
def _(answer):
    if isinstance(answer, str):
        answer = [c for c in answer if c.isalpha()]
    if not isinstance(answer, (set, frozenset, list, tuple)) or not all(
        isinstance(t, str) for t in answer
    ):
        raise Wrong(
            'vanishing_terms should be a set of letters such as {"a"}, got '
            f"{type(answer).__name__}"
        )
    got = {t.strip("() ").lower() for t in answer}
    unknown = sorted(got - set("abcd"))
    if unknown:
        raise Wrong(f"vanishing_terms holds {unknown}: the terms are a, b, c and d")
    for t in sorted(got - {"b", "d"}):
        raise Wrong(f"term ({t}) would not vanish: {_WHY[t]}")
    missing = sorted({"b", "d"} - got)
    if missing:
        raise Wrong(
            f"{len(missing)} more term(s) would become a constant along each row: "
            "look for every term in which j enters only through R"
        )
    return "(b) and (d) become row constants, (a) and (c) keep k_j."


plant("ex-transformer_xl-row-term", {"b", "c", "d"}, "term (c) would not vanish")
plant("ex-transformer_xl-row-term", {"b"}, "more term(s)")
plant("ex-transformer_xl-row-term", {"e"}, "the terms are a, b, c and d")
plant("ex-transformer_xl-row-term", 2, "should be a set of letters")

# ---- ex-transformer_xl-params -------------------------------------------------------

PARAMS_STUB = '''\
def position_params(d_model, n_heads, max_distance):
    """(the position parameters of one Transformer-XL encoding, those of Shaw's
    with clip distance max_distance and the same head size, key and value
    tables)."""
    ...  # your code
'''


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@exercise("ex-transformer_xl-params", chapter=CHAPTER, stub=PARAMS_STUB)
def _(answer):
    cases = [(512, 8, 16), (256, 4, 8), (96, 12, 3)]
    for D, h, k in cases:
        desc = f"d_model = {D}, {h} heads, k = {k}"
        got = numbers(
            call(answer, D, h, k, desc=desc), 2, f"position_params({D}, {h}, {k})"
        )
        xl, shaw = _count(pl.TransformerXL(D, h)), _count(pl.Shaw(D // h, k))
        if got[0] != xl:
            hint = ""
            if got[0] == D * D:
                hint = ": you counted W_kR only; u and v are learned too"
            elif got[0] == 2 * D:
                hint = ": you counted u and v only; W_kR is learned too"
            raise Wrong(
                f"on {desc}, your Transformer-XL count is {got[0]:g}, "
                f"expected {xl}{hint}"
            )
        if got[1] != shaw:
            hint = ""
            if got[1] == shaw // 2:
                hint = ": Shaw has a key table and a value table"
            elif got[1] == 2 * 2 * k * (D // h):
                hint = ": a clipped table has 2k + 1 rows"
            elif got[1] == shaw * h:
                hint = ": Shaw's tables are shared by the heads"
            raise Wrong(
                f"on {desc}, your Shaw count is {got[1]:g}, expected {shaw}{hint}"
            )
    return (
        "equals the parameter counts of pl.TransformerXL and pl.Shaw for "
        "(D, h, k) = " + ", ".join(str(c) for c in cases) + "."
    )


plant(
    "ex-transformer_xl-params",
    lambda D, h, k: (D * D, 2 * (2 * k + 1) * (D // h)),
    "W_kR only",
)
plant(
    "ex-transformer_xl-params",
    lambda D, h, k: (D * D + 2 * D, (2 * k + 1) * (D // h)),
    "key table and a value table",
)
plant(
    "ex-transformer_xl-params",
    lambda D, h, k: (D * D + 2 * D, 4 * k * (D // h)),
    "2k + 1 rows",
)
plant("ex-transformer_xl-params", lambda D, h, k: None, "returned None")

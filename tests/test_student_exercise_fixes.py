"""Exercise checks that speak to a student working alone (issue 49): an answer left
blank is "not attempted yet", and an answer off by a known factor or rounding is
named as such. Each case here got a vaguer verdict before its fix."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.exercises import verify


def test_a_blank_fine_tune_answer_is_not_attempted_yet():
    """15.2 left as its stub said "the model is a ellipsis, not a pl.TinyTransformer"
    (the answer cell untouched)."""
    blank = {"model": ..., "loss_128": ..., "yarn_128": ...}
    result = verify("ex-extrope-finetune", blank)
    assert not result.passed
    assert "not attempted yet" in result.message
    assert "ellipsis" not in result.message
    half = {"model": ..., "loss_128": 1.3, "yarn_128": 1.31}
    result = verify("ex-extrope-finetune", half)
    assert not result.passed and '"model" still holds' in result.message


def test_path_scores_off_by_the_softmax_scale_are_named():
    """21.1: scores divided by sqrt(d) (the old display's s_ij) got only 'differs at
    entry (0, 0)'."""

    def scaled(q, k, w):
        n, d = q.shape
        beta = torch.full((1, 1, n), 2.0, dtype=q.dtype)
        s = pl.path_scores(q[None, None], k[None, None], w.expand(1, 1, n, d), beta)
        return s[0, 0] / math.sqrt(d)

    result = verify("ex-path-flip", scaled)
    assert not result.passed and "divided by sqrt(d)" in result.message


def test_fox_half_window_rounded_down_is_named():
    """20.1: floor(K) keys hold less than half of the weight (0.469 for f = 0.9);
    the real K and the whole number of keys that reach half (ceil) are right."""
    K = lambda f: math.log(2) / -math.log(f)  # noqa: E731
    down = verify("ex-fox-window", lambda f: float(math.floor(K(f))))
    assert not down.passed and "less than half" in down.message
    assert verify("ex-fox-window", lambda f: float(math.ceil(K(f)))).passed
    assert verify("ex-fox-window", K).passed


def test_fox_half_window_is_rounded_up_and_the_solution_says_why():
    """20.1 ("the check accepts ceil where floor is right"): re-derived. Over very
    many keys the key k tokens back (the query's own key is k = 0) has weight
    (1 - f) f^k, so the K nearest hold 1 - f^K: half at K = ln 2 / (-ln f), and the
    whole number of keys that reach half is ceil(K), counted here on the library's
    own weights. floor(K) is the distance back of the farthest key needed. The check
    accepts the real K and ceil(K), nothing else near them; the chapter's solution
    says so."""
    import json
    import pathlib

    for f in (0.9, 0.99, 0.8, 0.95):
        K = math.log(2) / -math.log(f)
        log_f = torch.full((1, 1, 3000), math.log(f), dtype=torch.float64)
        share = pl.forgetting_bias(log_f)[0, 0, -1].softmax(-1).flip(0).cumsum(0)
        keys = int((share < 0.5).sum()) + 1  # the first count of keys reaching half
        assert keys == math.ceil(K) and share[math.floor(K) - 1] < 0.5
    assert math.isclose(1 - 0.9**6, 0.469, abs_tol=5e-4)  # the solution's number

    real = lambda f: math.log(2) / -math.log(f)  # noqa: E731
    assert verify("ex-fox-window", real).passed
    assert verify("ex-fox-window", lambda f: float(math.ceil(real(f)))).passed
    for wrong in (
        lambda f: float(math.floor(real(f))),
        lambda f: float(math.ceil(real(f)) + 1),
        lambda f: real(f) * 1.01,
    ):
        assert not verify("ex-fox-window", wrong).passed

    nb = json.loads(
        (
            pathlib.Path(__file__).resolve().parents[1]
            / "book/part4/forgetting_transformer.ipynb"
        ).read_text()
    )
    solution = next(
        "".join(c["source"])
        for c in nb["cells"]
        if "solution-start} ex-fox-window" in "".join(c["source"])
    )
    for words in ("round **up**", "0.469", "the query's own key", "\\lceil K \\rceil"):
        assert words in solution, words


def test_stubs_do_not_give_the_formula_away():
    """15.3 and 21.2: the stub's docstring stated the formula to implement."""
    from posenc_lib.course.exercises import all_checks

    llama3 = all_checks()["ex-extrope-llama3"].stub
    assert "gamma(r) = " not in llama3 and "(1 - gamma_i)" not in llama3
    cache = all_checks()["ex-path-cache"].stub
    assert "I - beta_t w_t w_t^T" not in cache


def test_exercises_13_3_and_14_3_ask_for_more_than_the_chapter_computes():
    """13.3 asked for the weighted mean the chapter's first code cell computes, and
    14.3 for the bound the decay section's `relative_upper_bound` computes: pasting
    the chapter's code was a right answer. Now each asks for what the chapter's
    code gives only when used (the loss past L recovered from the whole-window
    loss; the distance at which the bound halves)."""

    def chapter_mix(L, N, first, past):  # the chapter's first code cell
        return (L * first + (N - L) * past) / N

    assert not verify("ex-ctxlen-past", chapter_mix).passed

    def relative_upper_bound(d, base, distances):  # the chapter's decay section
        theta, _ = pl.rope_inv_freq(d, base)
        S = torch.exp(1j * distances[:, None] * theta).cumsum(-1)
        return S.abs().mean(-1)

    assert not verify("ex-rope-decay", relative_upper_bound).passed

    def loss_past(L, N, loss_whole, loss_first):
        return (N * loss_whole - L * loss_first) / (N - L)

    def half_distance(d, base):
        bound = relative_upper_bound(d, base, torch.arange(0, 1001))
        return int((bound[1:] < bound[0] / 2).nonzero()[0]) + 1

    assert verify("ex-ctxlen-past", loss_past).passed
    assert verify("ex-rope-decay", half_distance).passed


def test_an_answer_off_by_a_known_factor_or_order_is_named():
    """Every check that compares arrays (expect_close) says when a wrong answer is
    the right one with its sign flipped, times a constant such as 1/sqrt(d), or in
    another order along the last axis; before, it said only where it differs."""

    def right(x, pos, theta):
        return pl.apply_rope(x, pos, theta, "interleaved")

    flipped = verify("ex-rope-complex", lambda *a: -right(*a))
    assert not flipped.passed and "sign flipped" in flipped.message
    scaled = verify("ex-rope-complex", lambda *a: right(*a) / math.sqrt(8))
    assert not scaled.passed and "times 1/sqrt(8)" in scaled.message
    reordered = verify("ex-rope-complex", lambda *a: right(*a).flip(-1))
    assert not reordered.passed and "another order" in reordered.message

"""Checks for the exercises of book/part6/comparison.ipynb."""

from __future__ import annotations

import functools

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, exercise, expect, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part6/comparison"

DYNAMIC_STUB = """\
largest_shift = ...  # your answer: the largest s for which rope_dynamic passes
"""


@functools.lru_cache(maxsize=None)
def _gap(s: int, n: int = 16) -> float:
    """The shift test of the chapter on a small model: max |change| of the logits."""
    pe = pl.make_encoding("rope_dynamic", d_model=16, n_heads=2, max_len=64)
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, d_model=16, n_heads=2, pe=pe).eval()
    tokens = torch.randint(0, 11, (2, n))
    pos = torch.arange(n).expand(2, n)
    with torch.no_grad():
        out = model(tokens, pos, causal=True)
        moved = model(tokens, pos + s, causal=True)
    return (out - moved).abs().max().item()


@exercise("ex-cmp-dynamic", chapter=CHAPTER, stub=DYNAMIC_STUB)
def _(answer):
    s = number(answer, "largest_shift")
    passes = {t: _gap(t) < 1e-4 for t in range(46, 51)}
    want = max(t for t, ok in passes.items() if ok)
    assert all(passes[t] for t in range(46, want + 1)), "the test must be monotone"
    if s == want + 1:
        raise Wrong(
            f"`largest_shift` is {s:g}: at that shift the positions run to "
            f"{s + 15:g}, a length of {s + 16:g}, past max_len = 64"
        )
    if s == 64:
        raise Wrong(
            "`largest_shift` is 64: the length dynamic NTK compares with max_len is "
            "the largest position plus one, and the shifted positions reach s + 15"
        )
    expect(
        s == want,
        f"`largest_shift` is {s:g}; the test passes up to s = {want}"
        if s < want
        else f"`largest_shift` is {s:g}: the test fails there",
    )
    return (
        f"the shift test of a small rope_dynamic model passes at s = {want} and "
        f"fails at s = {want + 1} (n = 16, max_len = 64)."
    )


plant("ex-cmp-dynamic", 49, says="a length of 65")
plant("ex-cmp-dynamic", 64, says="largest position plus one")
plant("ex-cmp-dynamic", 40, says="passes up to")
plant("ex-cmp-dynamic", "48", says="should be a number")


# ---------------------------------------------------------------- ex-cmp-seed

SEED_STUB = """\
# the list of results lab.run_lab returns for two seeds other than the chapter's
# (at least "rope" and "alibi"), with the chapter's LabConfig
other_seeds = ...  # your answer: lab.run_lab([...], cfg, seeds=(..., ...))
"""


@exercise("ex-cmp-seed", chapter=CHAPTER, stub=SEED_STUB)
def _(answer):
    from posenc_lib.course import lab

    expect(
        isinstance(answer, (list, tuple))
        and answer
        and all(isinstance(r, lab.LabResult) for r in answer),
        "`other_seeds` should be the list of lab.LabResult that lab.run_lab "
        f"returns, got {type(answer).__name__}",
    )
    cfg = lab.LabConfig()
    chapter_seed = pl.book.chapter_seeds(0)[0]
    seeds = sorted({r.seed for r in answer})
    expect(
        len(seeds) >= 2,
        f"your results hold {len(seeds)} seed ({seeds}): run the lab with two seeds",
    )
    expect(
        chapter_seed not in seeds,
        f"seed {chapter_seed} is the chapter's own: run two other seeds",
    )
    long = max(cfg.lengths)
    for r in answer:
        expect(
            r.train_len == cfg.train_len and long in r.lengths,
            f"{r.encoding}, seed {r.seed}: trained at {r.train_len} tokens and "
            f"evaluated at {r.lengths}; the chapter's LabConfig trains at "
            f"{cfg.train_len} and evaluates up to {long}",
        )
    rise = {(r.encoding, r.seed): r.rise(long) for r in answer}
    for seed in seeds:
        for name in ("rope", "alibi"):
            expect(
                (name, seed) in rise,
                f"seed {seed} has no result for {name!r}: the chapter's claims "
                "compare rope and alibi, run at least those two",
            )
    # the chapter's claims, which held in every run of its seed sweep (RoPE's rise
    # 0.50-0.76 nats, ALiBi's -0.02-0.02: posenc_lib/data/sweeps/comparison.csv)
    for seed in seeds:
        rope, alibi = rise["rope", seed], rise["alibi", seed]
        expect(
            rope > alibi + 0.2 and abs(alibi) < 0.15,
            f"seed {seed}: RoPE's rise is {rope:+.3f} and ALiBi's {alibi:+.3f} "
            f"nats at {long} tokens; over the chapter's seed sweep RoPE rose at "
            "least 0.2 more than ALiBi, which stayed within 0.15 of 0: were both "
            "trained with the chapter's LabConfig?",
        )
    names = sorted(
        {r.encoding for r in answer if all((r.encoding, s) in rise for s in seeds)}
    )
    ranks = {
        s: {n: k for k, n in enumerate(sorted(names, key=lambda n: rise[n, s]))}
        for s in seeds
    }
    moved = [n for n in names if len({ranks[s][n] for s in seeds}) > 1]
    shown = ", ".join(
        f"seed {s}: " + " < ".join(sorted(names, key=lambda n: rise[n, s]))
        for s in seeds
    )
    return (
        f"{len(names)} encodings on seeds {seeds}, the chapter's LabConfig; RoPE rises "
        "more than ALiBi by over 0.2 nats and ALiBi stays near 0 on every seed, as "
        f"the chapter claims. Rise order: {shown}. "
        + (
            f"Changed rank: {', '.join(moved)}."
            if moved
            else "No encoding changed rank."
        )
    )


def _lab_result(name: str, seed: int, rise: float, train_len: int = 16):
    from posenc_lib.course import lab

    lengths = tuple(train_len * f for f in (1, 2, 4, 8))
    return lab.LabResult(
        encoding=name,
        seed=seed,
        lengths=lengths,
        loss_in=1.0,
        loss_past={n: 1.0 + rise for n in lengths[1:]},
        loss_mean={n: 1.0 for n in lengths},
        per_position=[1.0] * lengths[-1],
        train_loss=1.0,
        seconds=1.0,
        train_len=train_len,
    )


def _planted_seeds(seeds, rope=0.6, train_len=16):
    return [
        _lab_result(name, s, rise, train_len)
        for s in seeds
        for name, rise in (("rope", rope), ("alibi", 0.0))
    ]


plant("ex-cmp-seed", _planted_seeds((101,)), says="run the lab with two seeds")
plant(
    "ex-cmp-seed",
    _planted_seeds((pl.book.chapter_seeds(0)[0], 7)),
    says="the chapter's own",
)
plant("ex-cmp-seed", _planted_seeds((5, 7), rope=0.05), says="at least 0.2 more")
plant("ex-cmp-seed", _planted_seeds((5, 7), train_len=32), says="trains at 16")
plant(
    "ex-cmp-seed",
    [_lab_result("rope", 5, 0.6), _lab_result("rope", 7, 0.6)],
    says="no result for 'alibi'",
)
plant("ex-cmp-seed", {"rope": 0.6, "alibi": 0.0}, says="list of lab.LabResult")

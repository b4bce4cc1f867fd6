"""Checks for the exercises of book/part7/future.ipynb."""

from __future__ import annotations

import functools
import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, exercise, expect, plant
from posenc_lib.course.exercises._values import close, numbers
from posenc_lib.course.frontier import dca_offsets, ssmax_weights

CHAPTER = "part7/future"

# ---------------------------------------------------------------- ex-future-period

PERIOD_STUB = """\
# the pair (counted from 0) whose period is closest to 10 tokens, the base that puts
# pair 1's period at exactly 10.5 tokens, and the repeat's period in 3-mer tokens
dna = ...  # your answer: (closest_pair, base_for_pair_1, period_3mer)
"""


@exercise("ex-future-period", chapter=CHAPTER, stub=PERIOD_STUB)
def _(answer):
    pair, base, period = numbers(
        answer, ["closest_pair", "base_for_pair_1", "period_3mer"], "dna"
    )
    theta, _ = pl.rope_inv_freq(16, 10000.0)
    periods = 2 * math.pi / theta.double()  # (8,) in tokens
    want_pair = int((periods - 10).abs().argmin())
    if pair == want_pair + 1:
        raise Wrong(
            f"`closest_pair` is {pair:.0f}: count the pairs from 0 (pair 0 is the "
            "fastest, period 2 pi)"
        )
    expect(
        pair == want_pair,
        f"`closest_pair` is {pair:.0f}, whose period is "
        f"{float(periods[int(pair)]) if 0 <= pair < 8 else float('nan'):.1f} tokens",
    )
    # pair 1's period with base b: 2 pi b^(2/16)
    got_period = 2 * math.pi * base ** (2 / 16) if base > 0 else float("nan")
    if base > 0 and close(2 * math.pi * base ** (1 / 16), 10.5, rel=2e-2):
        raise Wrong(
            f"`base_for_pair_1` is {base:.4g}: pair k has frequency b^(-2k/d), so "
            "pair 1 of d = 16 turns at b^(-2/16)"
        )
    expect(
        close(got_period, 10.5, rel=2e-2),
        f"`base_for_pair_1` is {base:.4g}: with it pair 1's period is "
        f"{got_period:.3g} tokens, not 10.5",
    )
    if close(period, 10.5 * 3, rel=2e-2):
        raise Wrong(
            f"`period_3mer` is {period:.4g}: a 3-mer token covers 3 base pairs, so "
            "the repeat spans fewer tokens, not more"
        )
    expect(
        close(period, 10.5 / 3, rel=2e-2),
        f"`period_3mer` is {period:.4g} tokens, not the 10.5-base-pair repeat in "
        "3-mer tokens",
    )
    return (
        f"pair {want_pair} (period {float(periods[want_pair]):.1f} tokens), a base "
        f"whose pair 1 turns every 10.5 tokens, and 3.5 tokens per repeat, to 2 %."
    )


plant("ex-future-period", (1, 60.8, 3.5), says="count the pairs from 0")
plant("ex-future-period", (0, 10.5 / (2 * math.pi), 3.5), says="not 10.5")
plant("ex-future-period", (0, (10.5 / (2 * math.pi)) ** 16, 3.5), says="b^(-2/16)")
plant("ex-future-period", (0, 60.8, 31.5), says="fewer tokens")
plant("ex-future-period", (0, 60.8), says="should be a tuple")

# ---------------------------------------------------------------- ex-future-ssmax

SSMAX_STUB = """\
# the scale s that gives the key half the weight at n = 4096, and that key's weight
# at n = 64 with the same s
ssmax_half = ...  # your answer: (s, weight_at_64)
"""


def _weight(n: int, s: float, delta: float = 2.0) -> float:
    """SSMax weight of the one key that is delta above n - 1 equal others."""
    scores = torch.zeros(1, n, dtype=torch.float64)
    scores[0, 0] = delta
    return float(ssmax_weights(scores, s, causal=False)[0, 0])


@exercise("ex-future-ssmax", chapter=CHAPTER, stub=SSMAX_STUB)
def _(answer):
    s, w64 = numbers(answer, ["s", "weight_at_64"], "ssmax_half")
    expect(s > 0, f"`s` is {s:.4g}: SSMax's scale is positive")
    if close(s, math.log(4095) / 2, rel=1e-3):
        raise Wrong(
            f"`s` is {s:.4g}, the factor plain softmax scores would need: SSMax "
            "multiplies the scores by s log n"
        )
    w4096 = _weight(4096, s)
    expect(
        abs(w4096 - 0.5) < 1e-3,
        f"`s` is {s:.6g}: with it the key gets {w4096:.4g} of the weight at n = "
        "4096 (pl.frontier.ssmax_weights), not a half",
    )
    want = _weight(64, s)
    if close(w64, math.exp(2) / (math.exp(2) + 63), rel=1e-2):
        raise Wrong(
            f"`weight_at_64` is {w64:.4g}, plain softmax's: with SSMax the scores are "
            "scaled by s log 64 first"
        )
    expect(
        abs(w64 - want) < 2e-3,
        f"`weight_at_64` is {w64:.4g}; with your s, SSMax gives {want:.4g} at n = 64",
    )
    return (
        f"the scale s = {s:.5f} gives the key {w4096:.4f} of the weight at "
        f"n = 4096 and "
        f"{want:.4f} at n = 64 (pl.frontier.ssmax_weights)."
    )


plant("ex-future-ssmax", (math.log(4095) / 2, 0.5), says="multiplies the scores")
plant("ex-future-ssmax", (0.25, 0.5), says="not a half")
plant("ex-future-ssmax", (0.49998, 0.105), says="plain softmax's")
plant("ex-future-ssmax", (0.49998, 0.9), says="SSMax gives")
plant("ex-future-ssmax", "0.5", says="should be a tuple")

# ---------------------------------------------------------------- ex-future-dca

DCA_STUB = """\
# DCA's relative position (training length 4096) for the query at 10 000 and the
# keys at 100 and at 9 900
dca_answer = ...  # your answer: (offset_to_100, offset_to_9900)
"""


def _dca(i: int, j: int, pretrain_len: int) -> int:
    """One entry of pl.frontier.dca_offsets, without building the n x n array."""
    chunk = pretrain_len * 3 // 4
    s = chunk - pretrain_len // 16
    if i // s == j // s:
        q = i % s
    elif i // s == j // s + 1:
        q = min(i % s + s, chunk)
    else:
        q = chunk
    return q - j % s


@functools.cache
def _rule_matches_library() -> None:
    """The one-entry rule equals pl.frontier.dca_offsets' whole array, small case."""
    small = dca_offsets(300, 64)
    ii, jj = torch.tril_indices(300, 300)
    rule = torch.tensor([_dca(i, j, 64) for i, j in zip(ii.tolist(), jj.tolist())])
    assert torch.equal(small[ii, jj], rule)


@exercise("ex-future-dca", chapter=CHAPTER, stub=DCA_STUB)
def _(answer):
    far, near = (
        int(v)
        for v in numbers(answer, ["offset_to_100", "offset_to_9900"], "dca_answer")
    )
    _rule_matches_library()
    want_far, want_near = _dca(10_000, 100, 4096), _dca(10_000, 9_900, 4096)
    if far == 10_000 - 100:
        raise Wrong(
            f"`offset_to_100` is {far}, the true distance: DCA never shows a query "
            "an offset beyond its chunk size"
        )
    if far == 10_000 % 2816 - 100:
        raise Wrong(
            f"`offset_to_100` is {far}: the key is in an earlier chunk, where the "
            "query is not at its position inside its own chunk"
        )
    expect(far == want_far, f"`offset_to_100` is {far}")
    expect(
        near == want_near,
        f"`offset_to_9900` is {near}: in which chunk is the key at 9 900?",
    )
    return (
        f"offsets {want_far} and {want_near}, as pl.frontier.dca_offsets gives them "
        "(its rule checked on a 300-token case)."
    )


plant("ex-future-dca", (9900, 100), says="the true distance")
plant("ex-future-dca", (1452, 100), says="an earlier chunk")
plant("ex-future-dca", (2972, 1452), says="in which chunk")
plant("ex-future-dca", None, says="No answer yet")


# ---------------------------------------------------------------- ex-future-table

TABLE_STUB = """\
# your transcription row, in the form of posenc_lib.frontier.MODEL_POSITION's rows
my_row = dict(
    module=...,  # the folder under transformers/models, e.g. "llama"
    cls=...,  # the attention class, e.g. "LlamaAttention"
    calls=[...],  # (function, guard) pairs: the `if` verbatim, or None
    per_layer=...,  # True when the guard reads an attribute set from the layer index
    block=...,  # the hook of pl.PositionalEncoding it corresponds to (or "none")
)
"""

ROW_KEYS = ("module", "cls", "calls", "per_layer", "block")


def _block_of(function: str) -> str | None:
    """The hook a transformers position function corresponds to, from its name."""
    name = function.lower()
    if "rotary" in name or "rope" in name:
        return "transform_qk"
    if "alibi" in name:
        return "score_bias"
    return None


@exercise("ex-future-table", chapter=CHAPTER, stub=TABLE_STUB)
def _(answer):
    from posenc_lib.base import HOOKS
    from posenc_lib.course.frontier import MODEL_POSITION

    expect(
        isinstance(answer, dict),
        f"`my_row` should be a dict with keys {', '.join(ROW_KEYS)}, got "
        f"{type(answer).__name__}",
    )
    missing = [k for k in ROW_KEYS if k not in answer or answer[k] is Ellipsis]
    expect(not missing, f"`my_row` has no value yet for {', '.join(missing)}")
    module, cls, calls = answer["module"], answer["cls"], answer["calls"]
    expect(
        isinstance(module, str) and module.isidentifier() and module == module.lower(),
        f"`module` should be the folder name under transformers/models, lower case "
        f"(as in 'llama', 'qwen3_moe'), got {module!r}",
    )
    expect(
        isinstance(cls, str) and cls.isidentifier() and cls[:1].isupper(),
        f"`cls` should be a class name such as 'LlamaAttention', got {cls!r}",
    )
    expect(
        isinstance(calls, (list, tuple))
        and all(
            isinstance(c, (list, tuple))
            and len(c) == 2
            and isinstance(c[0], str)
            and (c[1] is None or isinstance(c[1], str))
            for c in calls
        ),
        "`calls` should be a list of (function name, guard) pairs, the guard a "
        f"string or None, got {calls!r:.80}",
    )
    expect(
        isinstance(answer["per_layer"], bool),
        f"`per_layer` should be True or False, got {answer['per_layer']!r}",
    )
    block = answer["block"]
    expect(
        block in HOOKS or block == "none",
        f"`block` should name a hook of pl.PositionalEncoding ({', '.join(HOOKS)}) "
        f"or 'none', got {block!r}",
    )
    for function, guard in calls:
        want = _block_of(function)
        if want is not None and block != want:
            raise Wrong(
                f"your row calls {function}, which corresponds to the hook {want}, "
                f"but `block` says {block!r}"
            )
    if not calls and block != "none":
        raise Wrong(
            f"your row calls no position function, so its building block is 'none' "
            f"(no positional encoding), not {block!r}"
        )
    if answer["per_layer"] and all(guard is None for _, guard in calls):
        raise Wrong(
            "`per_layer` is True but no call has a guard: a call without an `if` "
            "runs in every layer"
        )
    known = {(r["module"], r["cls"]): (m, r) for m, r in MODEL_POSITION.items()}
    if (module, cls) in known:
        model, row = known[module, cls]
        theirs = [tuple(c) for c in row["calls"]]
        if [tuple(c) for c in calls] != theirs or answer["per_layer"] != row[
            "per_layer"
        ]:
            raise Wrong(
                f"the transcription already has {model}, with calls {theirs} and "
                f"per_layer={row['per_layer']}: your row differs"
            )
    functions = ", ".join(f for f, _ in calls) or "no position function"
    return (
        f"a well-formed row for {module}.{cls} ({functions}); its building block "
        f"{block} agrees with the functions it calls. The check reads names, not "
        "transformers' source: tests/golden/make_frontier_golden.py does that."
    )


_MISTRAL = dict(
    module="mistral",
    cls="MistralAttention",
    calls=[("apply_rotary_pos_emb", None)],
    per_layer=False,
    block="transform_qk",
)
plant("ex-future-table", {**_MISTRAL, "block": "score_bias"}, says="corresponds to")
plant("ex-future-table", {**_MISTRAL, "block": "rotation"}, says="name a hook")
plant("ex-future-table", {**_MISTRAL, "per_layer": True}, says="no call has a guard")
plant(
    "ex-future-table",
    {
        **_MISTRAL,
        "module": "gpt_oss",
        "cls": "GptOssAttention",
        "calls": [("apply_rotary_pos_emb", "self.use_rope")],
    },
    says="the transcription already has",
)
plant("ex-future-table", {**_MISTRAL, "calls": "apply_rotary_pos_emb"}, says="pairs")
plant("ex-future-table", ["mistral", "MistralAttention"], says="should be a dict")

"""Checks for the exercises of book/part2/relative_vs_absolute.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, exercise, plant
from posenc_lib.course.exercises._values import integers, number

CHAPTER = "part2/relative_vs_absolute"

# ---- ex-rva-offset20 ----------------------------------------------------------------

SHARE_STUB = """\
# the offsets j - i in -31 .. 0 (positions 0-31) that share the table entry of
# offset -20: Shaw clipped at 16, T5 with its default (bidirectional) buckets
shares_minus_20 = {"shaw": ..., "t5": ...}  # your answer: two lists of offsets
"""

_OFFSETS = torch.arange(-31, 1)  # key - query for query 31 and keys 0 .. 31


def _sharing(entries: torch.Tensor) -> list[int]:
    return _OFFSETS[entries == entries[_OFFSETS == -20]].tolist()


def _shaw() -> list[int]:
    return _sharing(pl.shaw_relative_index(32, 32, 16)[31])


def _t5(bidirectional: bool = True) -> list[int]:
    return _sharing(pl.t5_relative_bucket(_OFFSETS, bidirectional))


@exercise("ex-rva-offset20", chapter=CHAPTER, stub=SHARE_STUB)
def _(answer):
    if not isinstance(answer, dict) or set(answer) != {"shaw", "t5"}:
        raise Wrong(
            'shares_minus_20 should be a dict with the keys "shaw" and "t5", got '
            + (f"the keys {sorted(answer)}" if isinstance(answer, dict) else "")
            + ("" if isinstance(answer, dict) else type(answer).__name__)
        )
    for name, want in (("shaw", _shaw()), ("t5", _t5())):
        got = sorted(set(integers(answer[name], f'shares_minus_20["{name}"]')) | {-20})
        if got == want:
            continue
        what = f'shares_minus_20["{name}"] = {got[:4]}...'
        if all(r > 0 for r in got if r != -20):
            raise Wrong(
                f"{what} holds offsets in the future: the offset j - i of a key "
                "before the query is negative"
            )
        if name == "t5" and got == _t5(False):
            raise Wrong(
                f"{what}: those are the causal (decoder) buckets; the chapter's T5 "
                "uses the default bidirectional table"
            )
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if name == "shaw" and missing == [-16] and not extra:
            raise Wrong(
                f"{what} misses offset -16: clipping at 16 maps -16 itself to the "
                "same row as every offset below it"
            )
        raise Wrong(
            f'shares_minus_20["{name}"]: '
            + (f"offsets {missing} share the entry too" if missing else "")
            + ("; " if missing and extra else "")
            + (f"offsets {extra} do not" if extra else "")
        )
    return (
        "matches pl.shaw_relative_index (clip 16) and pl.t5_relative_bucket on the "
        "offsets -31 .. 0."
    )


plant(
    "ex-rva-offset20",
    {"shaw": list(range(-31, -16)), "t5": list(range(-22, -15))},
    "misses offset -16",
)
plant(
    "ex-rva-offset20",
    {"shaw": list(range(-31, -15)), "t5": [-20, -19]},
    "causal (decoder) buckets",
)
plant(
    "ex-rva-offset20",
    {"shaw": list(range(16, 32)), "t5": list(range(16, 23))},
    "in the future",
)
plant(
    "ex-rva-offset20",
    {"shaw": list(range(-31, -15)), "t5": list(range(-20, -15))},
    "share the entry too",
)
plant("ex-rva-offset20", [-20], "a dict")

# ---- ex-rva-t5-fix ------------------------------------------------------------------

FIX_STUB = """\
# the largest max_distance (32 buckets, bidirectional) for which every bucket met at
# length 64 is already met at length 32
largest_max_distance = ...  # your answer
"""


def _unseen(max_distance: int) -> list[int]:
    """Distances 32 .. 63 whose bucket no distance 0 .. 31 has."""
    d = torch.arange(64)
    bk = pl.t5_relative_bucket(-d, True, 32, max_distance)
    seen = set(bk[:32].tolist())
    return [int(n) for n, b in zip(d, bk) if b.item() not in seen]


def _largest() -> int:
    return max(md for md in range(9, 256) if not _unseen(md))


@exercise("ex-rva-t5-fix", chapter=CHAPTER, stub=FIX_STUB)
def _(answer):
    got = number(answer, "largest_max_distance")
    expect_int = got == int(got) and got >= 1
    if not expect_int:
        raise Wrong(f"largest_max_distance is {got:g}, not a positive integer")
    md = int(got)
    if md <= 8:
        raise Wrong(
            f"largest_max_distance = {md}: T5 needs max_distance above its 8 exact "
            "buckets, and a larger value also works"
        )
    unseen = _unseen(md)
    if unseen:
        raise Wrong(
            f"with max_distance={md}, distances {unseen[0]} .. {unseen[-1]} at "
            "length 64 fall in buckets that no distance below 32 uses, so they "
            "stay untrained"
        )
    if md < _largest():
        raise Wrong(
            f"max_distance={md} works (every bucket at length 64 is trained), but a "
            "larger value works too: find the largest"
        )
    return "every bucket met at length 64 is met at length 32, and not for one more."


plant("ex-rva-t5-fix", 32, "larger value works too")
plant("ex-rva-t5-fix", 64, "stay untrained")
plant("ex-rva-t5-fix", 128, "stay untrained")
plant("ex-rva-t5-fix", "37", "should be a number")

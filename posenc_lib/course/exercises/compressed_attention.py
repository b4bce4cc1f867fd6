"""Checks for the exercises of book/part7/compressed_attention.ipynb."""

from __future__ import annotations

import math

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

CHAPTER = "part7/compressed_attention"

# ------------------------------------------------------------ ex-compressed-threshold

THRESHOLD_STUB = '''\
def closed_blocks(t, m):
    """How many compressed entries the query at position t sees (tokens at positions
    0, 1, ..., blocks of m): the blocks whose last token is at most t. t: an integer
    tensor of positions; returns an integer tensor of the same shape."""
    ...  # your code
'''


@exercise("ex-compressed-threshold", chapter=CHAPTER, stub=THRESHOLD_STUB)
def _(answer):
    for m in (1, 4, 128):
        t = torch.arange(3 * m + 3)
        desc = f"t = 0 .. {3 * m + 2}, m = {m}"
        got = call(answer, t, m, desc=desc)
        expect(
            isinstance(got, torch.Tensor) and got.shape == t.shape,
            f"on {desc}, `closed_blocks` should return a tensor of shape "
            f"{tuple(t.shape)}, got {type(got).__name__} "
            f"{tuple(getattr(got, 'shape', ()))}",
        )
        expect(
            not got.is_floating_point(),
            f"on {desc}, `closed_blocks` returned {got.dtype}: a count of blocks is "
            "an integer (divide with //)",
        )
        last = pl.block_positions(t, m, "last")[0]  # each block's last token
        want = (last[None, :] <= t[:, None]).sum(-1)  # closed blocks
        diff = got.long() - want
        if (diff != 0).any():
            at = int(torch.nonzero(diff)[0, 0])
            more = "one block too many" if diff[at] > 0 else "one block too few"
            if diff.abs().max() == 1:
                raise Wrong(
                    f"on {desc}, at t = {at} your count is {int(got[at])}: "
                    f"{more} (which token closes a block?)"
                )
            expect_close(got.long(), want, desc=desc, what="`closed_blocks`")
    return (
        "equals the number of blocks whose last token is at most t (V4's "
        "causal_threshold) for m = 1, 4 and 128."
    )


plant("ex-compressed-threshold", lambda t, m: t // m, says="one block too few")
plant("ex-compressed-threshold", lambda t, m: t // m + 1, says="one block too many")
plant("ex-compressed-threshold", lambda t, m: (t + 1) / m, says="an integer")
plant("ex-compressed-threshold", lambda t, m: 2 * (t // m), says="differs at entry")


# -------------------------------------------------------------- ex-compressed-offsets

OFFSETS_STUB = """\
# for HCA (m = 128), the smallest offset p_query - p_entry that a query ever has to
# an entry it sees (V4's rule: the block is closed), for each placement
min_offset = {"first": ..., "middle": ..., "last": ...}  # your answer
"""


@exercise("ex-compressed-offsets", chapter=CHAPTER, stub=OFFSETS_STUB)
def _(answer):
    m = 128
    expect(
        isinstance(answer, dict) and set(answer) == set(pl.PLACES),
        f"`min_offset` should be a dict with the keys {list(pl.PLACES)}",
    )
    t = torch.arange(4 * m)
    want = {}
    for place in pl.PLACES:
        where = pl.block_positions(t, m, place)[0]  # (w,)
        seen = pl.block_visible(t[None], pl.block_positions(t, m, "last"))[0, 0]
        offsets = (t[:, None] - where[None, :])[seen]
        want[place] = int(offsets.min())
    got = {}
    for place in pl.PLACES:
        value = answer[place]
        expect(
            isinstance(value, (int, float)) and not isinstance(value, bool),
            f"`min_offset[{place!r}]` should be a number, got {value!r}",
        )
        got[place] = value
    if got == {"first": 0, "middle": m // 2, "last": m - 1}:
        raise Wrong(
            "your offsets are measured from the block's first token: the query sees "
            "a block only once its last token has arrived"
        )
    for place in pl.PLACES:
        if not math.isclose(got[place], want[place]):
            raise Wrong(
                f"`min_offset[{place!r}]` is {got[place]}; a query at the block's "
                "last token is the earliest one that sees it"
            )
    return (
        f"{want}: the entry of a closed block is at least that far behind any "
        "query that sees it (first placement: m - 1)."
    )


plant(
    "ex-compressed-offsets",
    {"first": 0, "middle": 64, "last": 127},
    says="measured from the block's first token",
)
plant("ex-compressed-offsets", {"first": 128, "middle": 64, "last": 0}, says="is 128")
plant("ex-compressed-offsets", [127, 63, 0], says="a dict")


# ------------------------------------------------------------------ ex-compressed-mix

MIX_STUB = '''\
def relative_mix(weights, v, q_pos, k_pos, inv_freq):
    """out_i = sum_j a_ij R_{p_j - p_i} v_j, pairs (2c, 2c + 1) rotated by
    (p_j - p_i) * inv_freq[c]: weights (b, h, i, j), v (b, h, j, d), positions
    (b, i) and (b, j), inv_freq (d/2,) -> (b, h, i, d)."""
    ...  # your code
'''


def _mix(weights, v, q_pos, k_pos, inv_freq, sign=1, layout="interleaved"):
    """sum_j a_ij R_{sign (p_j - p_i)} v_j, written with explicit angles."""
    offset = (k_pos[:, None, :] - q_pos[:, :, None]).to(v.dtype)  # (b, i, j)
    angle = sign * offset[..., None] * inv_freq.to(v.dtype)  # (b, i, j, d/2)
    c, s = angle.cos()[:, None], angle.sin()[:, None]  # (b, 1, i, j, d/2)
    if layout == "interleaved":
        x1, x2 = v[..., 0::2][:, :, None], v[..., 1::2][:, :, None]  # (b, h, 1, j, .)
    else:
        half = v.shape[-1] // 2
        x1, x2 = v[..., :half][:, :, None], v[..., half:][:, :, None]
    r1 = torch.einsum("bhij,bhijc->bhic", weights, x1 * c - x2 * s)
    r2 = torch.einsum("bhij,bhijc->bhic", weights, x2 * c + x1 * s)
    if layout == "interleaved":
        return torch.stack((r1, r2), dim=-1).flatten(-2)
    return torch.cat((r1, r2), dim=-1)


@exercise("ex-compressed-mix", chapter=CHAPTER, stub=MIX_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for b, h, n, d in ((1, 1, 5, 4), (2, 3, 7, 8)):
        q, k, v = (
            torch.randn(b, h, n, d, generator=gen, dtype=torch.float64)
            for _ in range(3)
        )
        pos = torch.randint(0, 40, (b, n), generator=gen).sort(-1).values
        pe = pl.ValueRotary(d).double()
        want, weights = pl.attention(
            q, k, v, pe, pos, pos, causal=True, return_weights=True
        )
        desc = f"(b, h, n, d) = {(b, h, n, d)}, positions {pos[0].tolist()}"
        got = call(answer, weights, v, pos, pos, pe.inv_freq, desc=desc)
        for wrong, says in (
            (
                _mix(weights, v, pos, pos, pe.inv_freq, -1),
                "by p_i - p_j, not p_j - p_i",
            ),
            (weights @ v, "not rotated: the values need R_{p_j - p_i}"),
            (
                _mix(weights, v, pos, pos, pe.inv_freq, layout="half"),
                "rotated in pairs (c, c + d/2): V4 pairs (2c, 2c + 1)",
            ),
        ):
            if isinstance(got, torch.Tensor) and got.shape == want.shape:
                if torch.allclose(got, wrong, atol=1e-8) and not torch.allclose(
                    got, want, atol=1e-8
                ):
                    raise Wrong(f"on {desc}, your values are {says}")
        expect_close(got, want, desc=desc, what="`relative_mix`")
    return (
        "equals pl.attention with pl.ValueRotary (values rotated by their key's "
        "position, the output rotated back by the query's) on two sizes, positions "
        "with gaps."
    )


plant(
    "ex-compressed-mix",
    lambda w, v, qp, kp, f: _mix(w, v, qp, kp, f, -1),
    says="by p_i - p_j",
)
plant("ex-compressed-mix", lambda w, v, qp, kp, f: w @ v, says="not rotated")
plant(
    "ex-compressed-mix",
    lambda w, v, qp, kp, f: _mix(w, v, qp, kp, f, layout="half"),
    says="pairs (c, c + d/2)",
)
plant("ex-compressed-mix", lambda w, v, qp, kp, f: 2 * w @ v, says="differs at entry")

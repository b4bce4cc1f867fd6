"""Checks for the exercises of book/part6/toolkit.ipynb."""

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

CHAPTER = "part6/toolkit"

# ---------------------------------------------------------------- ex-toolkit-ladder

LADDER_STUB = '''\
def ladder_bias(n):
    """(n, n) float64 bias b_ij = sum_k cos(w_k (j - i)) over the sinusoidal ladder
    of width 16 (w_k = 10000^(-2k/16), k = 0 .. 7), for positions 0 .. n-1."""
    ...  # your code
'''


@exercise("ex-toolkit-ladder", chapter=CHAPTER, stub=LADDER_STUB)
def _(answer):
    for n in (5, 12):
        desc = f"n = {n}"
        got = call(answer, n, desc=desc)
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got, dtype=torch.float64)
        expect(
            tuple(got.shape) == (n, n),
            f"on {desc}, your bias has shape {tuple(got.shape)}, expected ({n}, {n})",
        )
        got = got.double()
        # PE(i) . PE(j) of the sinusoidal table = sum_k cos(w_k (i - j))
        table = pl.sinusoidal_table(n, 16).double()
        want = table @ table.T
        if torch.allclose(got, -got.T, atol=1e-6) and got.abs().max() > 1e-6:
            raise Wrong(
                f"on {desc}, your bias is antisymmetric (b_ij = -b_ji): a sine of the "
                "offset depends on its sign; the exercise sums cosines"
            )
        if math.isclose(float(got[0, 0]), 16.0, rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, b_00 is 16: the ladder of width 16 has 8 frequencies, "
                "one per pair of coordinates"
            )
        expect_close(got, want, desc=desc, what="your bias", atol=1e-8)
    return (
        "equals PE(i) . PE(j) of pl.sinusoidal_table(n, 16), a function of |i - j| "
        "(symmetric, constant along diagonals), for n = 5 and 12."
    )


def _sines(n):
    theta, _ = pl.rope_inv_freq(16)
    off = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).double()
    return torch.sin(off[..., None] * theta).sum(-1)


def _width_32(n):
    theta, _ = pl.rope_inv_freq(32)
    off = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).double()
    return torch.cos(off[..., None] * theta).sum(-1)


def _sum_of_positions(n):
    theta, _ = pl.rope_inv_freq(16)
    tot = (torch.arange(n)[None, :] + torch.arange(n)[:, None]).double()
    return torch.cos(tot[..., None] * theta).sum(-1)


plant("ex-toolkit-ladder", _sines, says="antisymmetric")
plant("ex-toolkit-ladder", _width_32, says="8 frequencies")
plant("ex-toolkit-ladder", _sum_of_positions, says="differs at entry")
plant("ex-toolkit-ladder", lambda n: None, says="returned None")

# ---------------------------------------------------------------- ex-toolkit-new-row

ROW_STUB = '''\
class DistanceBias(pl.PositionalEncoding):
    """Adds -|i - j| / 4 to every head's scaled scores (score_bias only); built with
    no arguments."""

    ...  # your code
'''


def _reference(q, k, v, q_pos, k_pos):
    rel = (q_pos[:, :, None] - k_pos[:, None, :]).abs().to(q.dtype)  # (b, i, j)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) - rel[:, None] / 4
    return torch.softmax(scores, dim=-1) @ v


@exercise("ex-toolkit-new-row", chapter=CHAPTER, stub=ROW_STUB)
def _(answer):
    expect(
        isinstance(answer, type) and issubclass(answer, pl.PositionalEncoding),
        "`DistanceBias` should be a class, a subclass of pl.PositionalEncoding",
    )
    pe = call(answer, desc="DistanceBias() (no arguments)")
    hooks = [
        h
        for h in pl.HOOKS
        if getattr(answer, h) is not getattr(pl.PositionalEncoding, h)
    ]
    expect(
        hooks == ["score_bias"],
        f"your class overrides {hooks or 'no hook'}: override score_bias only",
    )
    n_params = sum(p.numel() for p in pe.parameters())
    expect(n_params == 0, f"your encoding has {n_params} parameters, expected none")
    gen = torch.Generator().manual_seed(0)
    for b, h, n in ((1, 2, 5), (2, 3, 7)):
        q, k, v = (
            torch.randn(b, h, n, 8, generator=gen, dtype=torch.float64)
            for _ in range(3)
        )
        pos = torch.stack(
            [torch.randperm(3 * n, generator=gen)[:n].sort().values for _ in range(b)]
        )
        desc = f"b, h, n = {b}, {h}, {n} with positions {pos[0].tolist()}"
        got = call(pl.attention, q, k, v, pe, pos, pos, desc=desc)
        want = _reference(q, k, v, pos, pos)
        plus = (
            torch.softmax(
                q @ k.transpose(-1, -2) / math.sqrt(8)
                + (pos[:, :, None] - pos[:, None, :]).abs()[:, None].double() / 4,
                dim=-1,
            )
            @ v
        )
        if torch.allclose(got, plus, atol=1e-8):
            raise Wrong(
                f"on {desc}, your bias raises the scores of far keys: wrong sign"
            )
        idx = torch.arange(n).expand(b, n)
        if not torch.allclose(want, _reference(q, k, v, idx, idx)) and torch.allclose(
            got, _reference(q, k, v, idx, idx), atol=1e-8
        ):
            raise Wrong(
                f"on {desc}, your bias uses the token indices 0 .. n-1, not the "
                "positions q_pos, k_pos passed to score_bias"
            )
        expect_close(
            got, want, desc=desc, what="pl.attention with your encoding", atol=1e-8
        )
    return (
        "overrides score_bias only, has no parameters, and pl.attention with it equals "
        "softmax(q k^T / sqrt(d) - |i - j| / 4) v on two batches with gaps in the "
        "positions."
    )


class _WrongSign(pl.PositionalEncoding):
    def score_bias(self, q, k, q_pos, k_pos):
        return (q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(q.dtype) / 4


class _Indices(pl.PositionalEncoding):
    def score_bias(self, q, k, q_pos, k_pos):
        i = torch.arange(q.shape[-2])
        return -(i[:, None] - i[None, :]).abs().to(q.dtype) / 4


class _TwoHooks(pl.PositionalEncoding):
    def score_bias(self, q, k, q_pos, k_pos):
        return (
            -(q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(q.dtype) / 4
        )

    def transform_scores(self, scores, q_pos, k_pos):
        return scores


class _NeedsArgs(pl.PositionalEncoding):
    def __init__(self, n_heads):
        super().__init__()


plant("ex-toolkit-new-row", _WrongSign, says="wrong sign")
plant("ex-toolkit-new-row", _Indices, says="token indices")
plant("ex-toolkit-new-row", _TwoHooks, says="override score_bias only")
plant("ex-toolkit-new-row", _NeedsArgs, says="your function raised TypeError")
plant("ex-toolkit-new-row", "distance", says="should be a class")

# ---------------------------------------------------------------- ex-toolkit-swin-sign

SIGN_STUB = '''\
def swin_index_key_minus_query(wh, ww):
    """(wh ww, wh ww) int64 rows of Swin's (2 wh - 1)(2 ww - 1)-row table, for the
    patches of a wh x ww window in raster order, with offsets taken as key minus
    query."""
    ...  # your code
'''


@exercise("ex-toolkit-swin-sign", chapter=CHAPTER, stub=SIGN_STUB)
def _(answer):
    for wh, ww in ((2, 3), (3, 2), (7, 7)):
        desc = f"a {wh} x {ww} window"
        got = call(answer, wh, ww, desc=desc)
        got = torch.as_tensor(got)
        swin = pl.swin_relative_position_index(wh, ww)
        expect(
            tuple(got.shape) == tuple(swin.shape),
            f"on {desc}, your index has shape {tuple(got.shape)}, expected "
            f"{tuple(swin.shape)}",
        )
        rows = (2 * wh - 1) * (2 * ww - 1)
        expect(
            int(got.min()) >= 0 and int(got.max()) < rows,
            f"on {desc}, your index runs from {int(got.min())} to {int(got.max())}: "
            f"a table of {rows} rows is read at 0 .. {rows - 1} (shift the offsets)",
        )
        if torch.equal(got, swin) and wh * ww > 1:
            raise Wrong(
                f"on {desc}, your index is Swin's own (query minus key): swap the sign"
            )
        expect_close(got, swin.T, desc=desc, what="your index", atol=0)
    return (
        "equals the transpose of pl.swin_relative_position_index for windows 2 x 3, "
        "3 x 2 and 7 x 7: the same table, read with offsets negated."
    )


def _key_minus_query_unshifted(wh, ww):
    c = pl.grid_positions(wh, ww)
    rel = c[None, :, :] - c[:, None, :]
    return rel[..., 0] * (2 * ww - 1) + rel[..., 1]


def _wrong_stride(wh, ww):
    c = pl.grid_positions(wh, ww)
    rel = c[None, :, :] - c[:, None, :]
    return (rel[..., 0] + wh - 1) * (2 * wh - 1) + rel[..., 1] + ww - 1


plant("ex-toolkit-swin-sign", pl.swin_relative_position_index, says="swap the sign")
plant("ex-toolkit-swin-sign", _key_minus_query_unshifted, says="shift the offsets")
plant("ex-toolkit-swin-sign", _wrong_stride, says="differs at entry")
plant("ex-toolkit-swin-sign", lambda wh, ww: None, says="returned None")

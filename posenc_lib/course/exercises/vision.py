"""Checks for the exercises of book/part5/vision.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect, plant
from posenc_lib.course.exercises._values import close, numbers

CHAPTER = "part5/vision"

# ---------------------------------------------------------------- ex-vision-raster

RASTER_STUB = '''\
def virtual_raster(rows, cols):
    """1-D integer positions (rows * cols,) of a rows x cols patch grid, in raster
    order, such that a 1-D relative encoding on them works on every grid up to
    32 x 32."""
    ...  # your code
'''

GRIDS = [(3, 4), (6, 6), (6, 9), (8, 8), (5, 32), (32, 32)]


@exercise("ex-vision-raster", chapter=CHAPTER, stub=RASTER_STUB)
def _(answer):
    up, left = {}, {}
    for rows, cols in GRIDS:
        desc = f"the {rows} x {cols} grid"
        p = call(answer, rows, cols, desc=desc)
        if not isinstance(p, torch.Tensor):
            p = torch.as_tensor(p)
        expect(
            tuple(p.shape) == (rows * cols,),
            f"on {desc}, your positions have shape {tuple(p.shape)}, "
            f"expected ({rows * cols},): one position per patch, in raster order",
        )
        expect(
            not p.is_floating_point() or torch.equal(p, p.round()),
            f"on {desc}, your positions are not whole numbers",
        )
        p = p.long()
        expect(
            p.unique().numel() == p.numel(),
            f"on {desc}, two patches get the same position "
            f"({p.numel() - p.unique().numel()} collisions): the rows overlap",
        )
        g = p.reshape(rows, cols)
        du, dl = g[1:] - g[:-1], g[:, 1:] - g[:, :-1]
        expect(
            du.unique().numel() == 1 and dl.unique().numel() == 1,
            f"on {desc}, the offset to the patch above (or to the left) is not the "
            "same for every patch",
        )
        up[(rows, cols)], left[(rows, cols)] = int(du[0, 0]), int(dl[0, 0])
    for side, offsets in (("above", up), ("to the left", left)):
        (g0, o0), *rest = offsets.items()
        for g1, o1 in rest:
            expect(
                o1 == o0,
                f"the patch {side} is at offset {o0} on the {g0[0]} x {g0[1]} grid "
                f"but {o1} on the {g1[0]} x {g1[1]} grid: the offset a relative "
                "encoding learns must not depend on the grid's width",
            )
    return (
        "on grids " + ", ".join(f"{r} x {c}" for r, c in GRIDS) + " no two patches "
        f"share a position and the patch above is always at offset {up[(3, 4)]}."
    )


def _plain_raster(rows, cols):
    return torch.arange(rows * cols)


def _too_narrow(rows, cols):
    r, c = pl.grid_positions(rows, cols).unbind(-1)
    return r * 16 + c


plant("ex-vision-raster", _plain_raster, says="must not depend on the grid's width")
plant("ex-vision-raster", _too_narrow, says="same position")
plant("ex-vision-raster", lambda rows, cols: None, says="returned None")

# ---------------------------------------------------------------- ex-vision-swin-size

SWIN_STUB = """\
swin_size = ...  # your answer: (swin_params, absolute_params), two whole numbers
"""


@exercise("ex-vision-swin-size", chapter=CHAPTER, stub=SWIN_STUB)
def _(answer):
    swin, absolute = numbers(answer, ["swin_params", "absolute_params"], "swin_size")
    heads, window, d_model = 12, 7, 768
    want_swin = sum(p.numel() for p in pl.SwinRelativeBias(heads, (7, 7)).parameters())
    want_abs = window * window * d_model
    if swin == (2 * window) ** 2 * heads:
        raise Wrong(
            f"`swin_params` is {swin:.0f}: a window of 7 patches has offsets -6..6 "
            "along each axis, how many is that?"
        )
    if swin == (2 * window - 1) ** 2:
        raise Wrong(
            f"`swin_params` is {swin:.0f}, the size of one head's table: each of the "
            "12 heads has its own"
        )
    expect(
        swin == want_swin,
        f"`swin_params` is {swin:.0f}, not the number of scalars of a 7 x 7 window's "
        "relative table for 12 heads",
    )
    if absolute == want_abs * heads:
        raise Wrong(
            f"`absolute_params` is {absolute:.0f}: an absolute table adds one D-vector "
            "per patch to the input, before the heads split it"
        )
    if absolute == window * window:
        raise Wrong(
            f"`absolute_params` is {absolute:.0f}: each patch's row holds D = 768"
        )
    expect(
        absolute == want_abs,
        f"`absolute_params` is {absolute:.0f}, not the size of one learned D = 768 "
        "vector per patch of a 7 x 7 window",
    )
    return (
        f"{want_swin} relative-bias scalars (pl.SwinRelativeBias(12, (7, 7)) holds "
        f"as many) and {want_abs} absolute ones."
    )


plant("ex-vision-swin-size", (14 * 14 * 12, 49 * 768), says="offsets -6..6")
plant("ex-vision-swin-size", (169, 49 * 768), says="each of the 12 heads")
plant("ex-vision-swin-size", (2028, 49 * 768 * 12), says="before the heads split")
plant("ex-vision-swin-size", 2028, says="should be a tuple")

# ---------------------------------------------------------------- ex-vision-riflex

RIFLEX_STUB = """\
riflex = ...  # your answer: (k, N_k, theta_before, theta_after), theta in radians/frame
"""


@exercise("ex-vision-riflex", chapter=CHAPTER, stub=RIFLEX_STUB)
def _(answer):
    k, n_k, before, after = numbers(
        answer, ["k", "N_k", "theta_before", "theta_after"], "riflex"
    )
    base, dim, repeat, frames = 10000, 16, 20, 25
    want_k, want_n = pl.riflex_intrinsic_index(base, dim, repeat)
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    want_before = float(freqs[want_k - 1])
    want_after = float(pl.riflex_frequencies(dim, base, want_k, frames)[want_k - 1])
    if k == want_k - 1:
        raise Wrong(f"`k` is {k:.0f}: RIFLEx counts the frequencies from 1, not 0")
    expect(k == want_k, f"`k` is {k:.0f}: which period 2 pi / theta_j is nearest 20?")
    expect(n_k == want_n, f"`N_k` is {n_k:.0f}, not the rounded period of frequency k")
    for name, got, want in (
        ("theta_before", before, want_before),
        ("theta_after", after, want_after),
    ):
        if close(got, 2 * math.pi / want, rel=1e-2):
            raise Wrong(
                f"`{name}` is {got:.4g}, a period in frames: give the frequency "
                "theta in radians per frame"
            )
        if close(got, math.degrees(want), rel=1e-2):
            raise Wrong(f"`{name}` is {got:.4g}, in degrees: give it in radians")
    expect(
        close(before, want_before, rel=1e-2),
        f"`theta_before` is {before:.4g}: frequency k of base 10000 over 16 dimensions",
    )
    if close(after, 2 * math.pi / frames, rel=1e-3):
        raise Wrong(
            f"`theta_after` is {after:.4g}: RIFLEx keeps the frames within 0.9 of a "
            "period, not a whole one"
        )
    if close(after, 0.9 * 2 * math.pi / want_n, rel=1e-3):
        raise Wrong(
            f"`theta_after` is {after:.4g}: the period must cover the 25 latent frames "
            "to generate, not N_k"
        )
    expect(
        close(after, want_after, rel=1e-2),
        f"`theta_after` is {after:.4g}, expected the lowered frequency of RIFLEx",
    )
    return (
        f"the index k = {want_k}, N_k = {want_n} "
        "(pl.riflex_intrinsic_index(10000, 16, 20)), "
        f"theta_k from {want_before:.4f} to {want_after:.4f} "
        "(pl.riflex_frequencies(16, 10000, 2, 25)), to 1 %."
    )


plant("ex-vision-riflex", (1, 20, 0.316, 0.226), says="counts the frequencies from 1")
plant("ex-vision-riflex", (2, 20, 0.316, 2 * math.pi / 25), says="within 0.9")
plant("ex-vision-riflex", (2, 20, 19.87, 27.8), says="a period in frames")
plant("ex-vision-riflex", (2, 20, 0.316, 0.9 * 2 * math.pi / 20), says="not N_k")
plant("ex-vision-riflex", "2, 20", says="should be a tuple")

"""Checks for the exercises of book/part5/learned_rotations.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, exercise, expect, plant
from posenc_lib.course.exercises._values import number

CHAPTER = "part5/learned_rotations"

# ---------------------------------------------------------------- ex-lie-converse

CONVERSE_STUB = """\
# the power p in max |R(tx)^T R(ty) - R(t(y - x))| ~ C t^p as t -> 0, for random
# non-commuting generators
defect_order = ...  # your answer
"""


def _measured_order() -> float:
    """The slope of log(defect) against log(t) for random skew generators."""
    g = torch.Generator().manual_seed(0)
    G = pl.skew_symmetric(torch.randn(2, 6, 6, generator=g, dtype=torch.float64))
    defects = []
    for t in (1e-2, 1e-3):
        pts = torch.tensor([[[t, 0.0], [0.0, t], [-t, t]]], dtype=torch.float64)
        Rx, Ry, Rd = pl.lie_rotation(pts, G)[0]
        defects.append(float((Rx.T @ Ry - Rd).abs().max()))
    return math.log(defects[0] / defects[1]) / math.log(10)


@exercise("ex-lie-converse", chapter=CHAPTER, stub=CONVERSE_STUB)
def _(answer):
    p = number(answer, "defect_order")
    slope = _measured_order()
    want = round(slope)
    if abs(p - 1) < 0.1:
        raise Wrong(
            "`defect_order` is 1: the first-order terms of exp(-tX) exp(tY) and "
            "exp(t(Y - X)) are the same, -tX + tY"
        )
    if abs(p - 3) < 0.1:
        raise Wrong(
            "`defect_order` is 3: the degree-2 terms already differ, by a commutator"
        )
    expect(abs(p - want) < 0.1, f"`defect_order` is {p:g}, not the measured power")
    return (
        f"the defect of random skew generators shrinks like t^{want} "
        f"(measured slope {slope:.3f} between t = 1e-2 and 1e-3)."
    )


plant("ex-lie-converse", 1, says="first-order terms")
plant("ex-lie-converse", 3, says="degree-2 terms")
plant("ex-lie-converse", 0.5, says="not the measured power")
plant("ex-lie-converse", "t^2", says="should be a number")

# ---------------------------------------------------------------- ex-lie-video

VIDEO_STUB = """\
# the largest number of axes an N-D RoPE can encode in d = 8 keeping relativity and
# reversibility, and three commuting generators for (t, r, c), a tensor (3, 8, 8)
lie_video = ...  # your answer: (max_axes, generators)
"""


@exercise("ex-lie-video", chapter=CHAPTER, stub=VIDEO_STUB)
def _(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong("`lie_video` should be a tuple (max_axes, generators)")
    axes = number(answer[0], "max_axes")
    if axes == 8:
        raise Wrong(
            "`max_axes` is 8 = d: commuting rotations of R^8 share 2-D planes, and "
            "there are only d/2 of them"
        )
    expect(axes == 4, f"`max_axes` is {axes:g}")
    G = answer[1]
    expect(
        isinstance(G, torch.Tensor) and tuple(G.shape) == (3, 8, 8),
        "`generators` should be a tensor of shape (3, 8, 8), one per axis (t, r, c), "
        f"got {tuple(G.shape) if isinstance(G, torch.Tensor) else type(G).__name__}",
    )
    G = G.detach().double()
    expect(
        torch.allclose(G, -G.transpose(-1, -2), atol=1e-12),
        "your generators are not skew-symmetric (G^T = -G): their exponentials "
        "are not rotations",
    )
    for a in range(3):
        for b in range(a + 1, 3):
            gap = float(pl.commutator(G[a], G[b]).abs().max())
            expect(
                gap < 1e-9,
                f"generators {a} and {b} do not commute (max |[G_a, G_b]| = "
                f"{gap:.3g}): R(x)^T R(y) would not be R(y - x)",
            )
    rank = int(torch.linalg.matrix_rank(G.reshape(3, -1)))
    expect(
        rank == 3,
        f"your generators span only {rank} dimensions: two different positions "
        "would get the same rotation",
    )
    g = torch.Generator().manual_seed(0)
    pts = torch.randn(1, 2, 3, generator=g, dtype=torch.float64) * 5
    pts = torch.cat([pts, pts[:, 1:] - pts[:, :1]], dim=1)  # x, y, y - x
    Rx, Ry, Rd = pl.lie_rotation(pts, G)[0]
    defect = float((Rx.T @ Ry - Rd).abs().max())
    expect(defect < 1e-9, f"R(x)^T R(y) - R(y - x) is {defect:.3g}")
    return (
        "at most d/2 = 4 axes; your three generators are skew-symmetric, commute, "
        f"are independent, and R(x)^T R(y) = R(y - x) to {defect:.1e}."
    )


def _blocks(freqs):
    J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    return torch.stack([torch.block_diag(*(f * J for f in row)) for row in freqs])


_GOOD = _blocks(torch.tensor([[1.0, 0.1, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]]))
_DEPENDENT = _blocks(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [2.0, 0, 0, 0]]))
_RANDOM = pl.skew_symmetric(
    torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(0))
).double()
plant("ex-lie-video", (8, _GOOD), says="only d/2 of them")
plant("ex-lie-video", (4, _DEPENDENT), says="span only 2 dimensions")
plant("ex-lie-video", (4, _RANDOM), says="do not commute")
plant("ex-lie-video", (4, _GOOD.abs()), says="not skew-symmetric")
plant("ex-lie-video", 4, says="should be a tuple")

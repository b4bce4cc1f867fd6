"""Checks for the exercises of book/part1/four_term_expansion.ipynb."""

from __future__ import annotations

import torch

from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant

CHAPTER = "part1/four_term_expansion"

# ---- ex-fourterm-concat -------------------------------------------------------------

CONCAT_STUB = '''\
def concat_terms(U, P, W):
    """U, P (N, D), W (2D, 2D) = [[A, B], [C, E]] -> the four (N, N) terms of
    X W X^T for X = [U | P], as a tuple (content-content, content-position,
    position-content, position-position)."""
    ...  # your code
'''

_NAMES = (
    "content-content",
    "content-position",
    "position-content",
    "position-position",
)


def _blocks(W: torch.Tensor, D: int):
    return W[:D, :D], W[:D, D:], W[D:, :D], W[D:, D:]


@exercise("ex-fourterm-concat", chapter=CHAPTER, stub=CONCAT_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for N, D in [(5, 3), (4, 6)]:
        U, P = (torch.randn(N, D, generator=gen, dtype=torch.float64) for _ in "UP")
        W = torch.randn(2 * D, 2 * D, generator=gen, dtype=torch.float64)
        desc = f"U, P of shape ({N}, {D}), W of shape ({2 * D}, {2 * D})"
        got = call(answer, U.clone(), P.clone(), W.clone(), desc=desc)
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            raise Wrong(
                f"on {desc}, return a tuple of the four terms, got {type(got).__name__}"
            )
        A, B, C, E = _blocks(W, D)
        want = (U @ A @ U.T, U @ B @ P.T, P @ C @ U.T, P @ E @ P.T)
        X = torch.cat([U, P], 1)
        total = sum(t.double() for t in got if isinstance(t, torch.Tensor))
        sums_right = isinstance(total, torch.Tensor) and torch.allclose(
            total, X @ W @ X.T
        )
        swapped = (U @ C.T @ P.T, P @ B.T @ U.T)
        if all(isinstance(t, torch.Tensor) for t in got) and got[1].shape == (N, N):
            if torch.allclose(got[1].double(), swapped[0]) or torch.allclose(
                got[1].double(), U @ C @ P.T
            ):
                raise Wrong(
                    f"on {desc}, your content-position term uses block C; U's rows "
                    "of W meet P's columns in block B (rows 0..D-1, columns D..2D-1)"
                )
        for name, g, w in zip(_NAMES, got, want):
            expect_close(g, w, desc=desc, what=f"your {name} term")
        if not sums_right:  # pragma: no cover - implied by the four terms
            raise Wrong(f"on {desc}, your four terms do not add up to X W X^T")
    return "each term equals its block's product, and the four add up to X W X^T."


def _shared(U, P, W):
    D = U.shape[1]
    A = W[:D, :D]  # one block for all four, as if position were added
    return U @ A @ U.T, U @ A @ P.T, P @ A @ U.T, P @ A @ P.T


def _swapped(U, P, W):
    A, B, C, E = _blocks(W, U.shape[1])
    return U @ A @ U.T, U @ C @ P.T, P @ B @ U.T, P @ E @ P.T


plant("ex-fourterm-concat", _swapped, "uses block C")
plant("ex-fourterm-concat", _shared, "differs at entry")
plant("ex-fourterm-concat", lambda U, P, W: torch.cat([U, P], 1) @ W, "a tuple")
plant("ex-fourterm-concat", lambda U, P, W: (U @ W,) * 4, "your function raised")

# ---- ex-fourterm-rank ---------------------------------------------------------------

RANK_STUB = '''\
def max_position_rank(D, d, N):
    """The largest possible rank of one head's position-position term P W P^T,
    P (N, D), W = W_q W_k^T with W_q, W_k of shape (D, d)."""
    ...  # your code
'''


@exercise("ex-fourterm-rank", chapter=CHAPTER, stub=RANK_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for D, d, N in [(32, 16, 35), (64, 8, 100), (24, 16, 5), (12, 20, 30)]:
        desc = f"D = {D}, d = {d}, N = {N}"
        got = call(answer, D, d, N, desc=desc)
        P = torch.randn(N, D, generator=gen, dtype=torch.float64)
        Wq, Wk = (torch.randn(D, d, generator=gen, dtype=torch.float64) for _ in "qk")
        rank = int(torch.linalg.matrix_rank(P @ Wq @ Wk.T @ P.T))  # a random example
        if got == N and N > rank:
            raise Wrong(
                f"on {desc}, your rank is N = {N}, but P W P^T with random P, W_q, "
                f"W_k has rank {rank} only: W passes through the head's d dimensions"
            )
        if got == d and d > rank:
            raise Wrong(
                f"on {desc}, your rank is d = {d}, but "
                + (
                    f"an N x N matrix with N = {N} has rank at most {N}"
                    if N < d
                    else f"W = W_q W_k^T is {D} x {D}, so its rank is at most {D}"
                )
            )
        if got == D and D > rank:
            raise Wrong(
                f"on {desc}, your rank is D = {D}; a random example has rank {rank}: "
                "what limits the rank of W = W_q W_k^T?"
            )
        expect_close(got, rank, desc=desc, what="your rank")
    return "equals the rank of P W_q W_k^T P^T for random matrices, for 4 (D, d, N)."


plant("ex-fourterm-rank", lambda D, d, N: N, "your rank is N")
plant("ex-fourterm-rank", lambda D, d, N: D, "your rank is D")
plant("ex-fourterm-rank", lambda D, d, N: d, "has rank at most")
plant("ex-fourterm-rank", lambda D, d, N: "16", "should be a number")

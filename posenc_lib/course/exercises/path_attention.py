"""Checks for the exercises of book/part4/path_attention.ipynb."""

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

CHAPTER = "part4/path_attention"


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


FLIP_STUB = '''\
def flip_scores(q, k, w):
    """PaTH scores s_ij (n, n), before the softmax's 1/sqrt(d), of a head with
    beta_t = 2 and the same unit direction w (d,) for every token; q, k (n, d).
    -inf above the diagonal."""
    ...  # your code
'''


def _flip_reference(q, k, w):
    n, d = q.shape
    beta = torch.full((1, 1, n), 2.0, dtype=q.dtype)
    w_all = w.expand(1, 1, n, d)
    return pl.path_scores(q[None, None], k[None, None], w_all, beta)[0, 0]


@exercise("ex-path-flip", chapter=CHAPTER, stub=FLIP_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(8)
    for n, d in [(5, 3), (8, 6)]:
        q, k = torch.randn(2, n, d, generator=gen, dtype=torch.float64)
        w = _unit(torch.randn(d, generator=gen, dtype=torch.float64))
        desc = f"q, k of shape ({n}, {d}) and a unit w"
        got = call(answer, q.clone(), k.clone(), w.clone(), desc=desc)
        want = _flip_reference(q, k, w)
        lower = torch.ones(n, n, dtype=torch.bool).tril()
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().double()
            expect(
                bool(torch.isneginf(g[~lower]).all()),
                f"on {desc}, your scores are not -inf above the diagonal: PaTH is "
                "causal",
            )
            reflect = q @ (torch.eye(d, dtype=q.dtype) - 2 * torch.outer(w, w)) @ k.T
            plain = q @ k.T
            if torch.allclose(g[lower], reflect[lower]):
                raise Wrong(
                    f"on {desc}, your scores reflect the key for every distance: two "
                    "reflections cancel"
                )
            if torch.allclose(g[lower], plain[lower]):
                raise Wrong(
                    f"on {desc}, your scores are plain q.k: odd distances reflect "
                    "the key"
                )
            for factor, how in (
                (1 / math.sqrt(d), "divided by"),
                (math.sqrt(d), "times"),
            ):
                if torch.allclose(g[lower], factor * want[lower]):
                    raise Wrong(
                        f"on {desc}, your scores are the right ones {how} sqrt(d): "
                        "s_ij is the score before the softmax's 1/sqrt(d) (the "
                        "chapter applies the scale inside the softmax)"
                    )
            parity = (torch.arange(n)[:, None] - torch.arange(n)) % 2 == 0
            swapped = torch.where(parity, reflect, plain)
            if torch.allclose(g[lower], swapped[lower]):
                raise Wrong(
                    f"on {desc}, your parity is the wrong way round: at distance 0 "
                    "the product is empty, the identity"
                )
            got, want = g.masked_fill(~lower, 0.0), want.masked_fill(~lower, 0.0)
        expect_close(got, want, desc=desc, what="your scores")
    return (
        "equals pl.path_scores with beta = 2 and one direction w, for (n, d) = (5, 3) "
        "and (8, 6): the key is reflected at odd distances only."
    )


def _parity(q, k, w, odd_reflects=True):
    n, d = q.shape
    reflect = q @ (torch.eye(d, dtype=q.dtype) - 2 * torch.outer(w, w)) @ k.T
    odd = (torch.arange(n)[:, None] - torch.arange(n)) % 2 == 1
    s = torch.where(odd if odd_reflects else ~odd, reflect, q @ k.T)
    return s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))


def _always(q, k, w):
    n, d = q.shape
    s = q @ (torch.eye(d, dtype=q.dtype) - 2 * torch.outer(w, w)) @ k.T
    return s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))


plant("ex-path-flip", _always, says="every distance")
plant("ex-path-flip", lambda q, k, w: _parity(q, k, w, False), says="wrong way round")
plant("ex-path-flip", lambda q, k, w: _parity(q, k, w).tril(), says="not -inf")
plant("ex-path-flip", lambda q, k, w: None, says="returned None")
plant(
    "ex-path-flip",
    lambda q, k, w: _flip_reference(q, k, w) / math.sqrt(q.shape[-1]),
    says="divided by sqrt(d)",
)


CACHE_STUB = '''\
def update_cache(keys, w_t, beta_t):
    """PaTH decoding: when token t arrives, replace every cached key k (b, h, t, d)
    by H_t k, token t's transform (made from w_t (b, h, d), a unit vector, and
    beta_t (b, h)). Returns the updated keys (b, h, t, d)."""
    ...  # your code
'''


def _decode(update, q, k, w, beta, desc):
    """The scores of every query from a cache updated by ``update``, then appended
    with the new key: (b, h, n, n), -inf above the diagonal."""
    b, h, n, d = q.shape
    scores = q.new_full((b, h, n, n), float("-inf"))
    cache = k[..., :0, :]
    for t in range(n):
        if t > 0:
            cache = call(
                update,
                cache.clone(),
                w[..., t, :].clone(),
                beta[..., t].clone(),
                desc=f"{desc}, when token {t} arrives (a cache of {t} keys)",
            )
            if not isinstance(cache, torch.Tensor) or cache.shape != (b, h, t, d):
                shape = tuple(getattr(cache, "shape", ()))
                raise Wrong(
                    f"on {desc}, when token {t} arrives your function returned "
                    f"shape {shape} for a cache of shape {(b, h, t, d)}"
                )
        cache = torch.cat((cache.to(k.dtype), k[..., t : t + 1, :]), -2)
        scores[..., t, : t + 1] = (cache @ q[..., t, :, None])[..., 0]
    return scores


@exercise("ex-path-cache", chapter=CHAPTER, stub=CACHE_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(9)
    for b, h, n, d in [(1, 1, 5, 4), (2, 2, 7, 3)]:
        q, k, w = torch.randn(3, b, h, n, d, generator=gen, dtype=torch.float64)
        w = _unit(w)
        beta = 2 * torch.rand(b, h, n, generator=gen, dtype=torch.float64)
        desc = f"{n} tokens, q, k, w of shape {(b, h, n, d)}, beta in (0, 2)"
        got = _decode(answer, q, k, w, beta, desc)
        want = pl.path_scores(q, k, w, beta)
        lower = torch.ones(n, n, dtype=torch.bool).tril()
        wrong_sign = _decode(_plus, q, k, w, beta, desc)
        if torch.allclose(got[..., lower], wrong_sign[..., lower]):
            raise Wrong(f"on {desc}, your transform is I + beta w w^T: H subtracts")
        no_beta = _decode(_reflect, q, k, w, beta, desc)
        if torch.allclose(got[..., lower], no_beta[..., lower]):
            raise Wrong(f"on {desc}, your transform ignores beta_t (a reflection)")
        expect_close(
            got.masked_fill(~lower, 0.0),
            want.masked_fill(~lower, 0.0),
            desc=desc,
            what="the scores read from your cache",
        )
    return (
        "decoding token by token with your cache gives pl.path_scores, for 5 and 7 "
        "tokens with random directions and beta in (0, 2)."
    )


def _plus(keys, w, beta):
    return (
        keys
        + (beta[..., None] * (keys @ w[..., :, None])[..., 0])[..., None]
        * w[..., None, :]
    )


def _reflect(keys, w, beta):
    return keys - 2 * (keys @ w[..., :, None]) * w[..., None, :]


def _transposed(keys, w, beta):
    # (k . w) summed over the cached keys instead of per key
    coef = (keys @ w[..., :, None]).sum(-2, keepdim=True)
    return keys - beta[..., None, None] * coef * w[..., None, :]


plant("ex-path-cache", _plus, says="I + beta")
plant("ex-path-cache", _reflect, says="ignores beta")
plant("ex-path-cache", _transposed, says="the scores read from your cache differ")
plant("ex-path-cache", lambda keys, w, beta: keys[..., :1, :], says="returned shape")
plant("ex-path-cache", lambda keys, w, beta: None, says="returned None")

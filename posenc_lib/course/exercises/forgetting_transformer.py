"""Checks for the exercises of book/part4/forgetting_transformer.ipynb."""

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
from posenc_lib.course.exercises._values import as_float
from posenc_lib.utils import module_device

CHAPTER = "part4/forgetting_transformer"

WINDOW_STUB = '''\
def fox_half_window(f):
    """How many of the most recent keys hold half of the attention weight of a
    head with a constant forget gate f (a float in (0, 1)) and content-free
    scores, for a query that sees very many keys: a real number."""
    ...  # your code
'''

GATES = (0.9, 0.99, 0.5)


def _numeric_half(f: float, n: int = 1000) -> int:
    """The recent keys needed for half the weight, counted with pl.forgetting_bias."""
    log_f = torch.full((1, 1, n), math.log(f), dtype=torch.float64)
    weights = pl.forgetting_bias(log_f)[0, 0, -1].softmax(-1)
    return int((weights.flip(0).cumsum(0) < 0.5).sum()) + 1


@exercise("ex-fox-window", chapter=CHAPTER, stub=WINDOW_STUB)
def _(answer):
    for f in GATES:
        desc = f"gate f = {f:g}"
        got = call(answer, f, desc=desc)
        value = as_float(got, desc)
        want = math.log(2) / -math.log(f)
        if math.isclose(value, want, rel_tol=1e-3) or value == math.ceil(want):
            continue  # the real K, or the whole number of keys that reach half
        if value == math.floor(want):
            held = 1 - f ** math.floor(want)
            raise Wrong(
                f"on {desc}, your answer is {value:g} keys, K rounded down: those "
                f"keys hold {held:.3f} of the weight, less than half: count the keys "
                "that reach half, or give K as a real number"
            )
        if math.isclose(value, 1 / (1 - f), rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your answer is 1/(1 - f) = {value:.4g}, the mean number "
                "of keys back, not the count that holds half of the weight"
            )
        if math.isclose(value, math.log(2) / (1 - f), rel_tol=1e-6):
            raise Wrong(
                f"on {desc}, your answer uses 1 - f where the slope is -ln f: close "
                f"for f near 1, not equal ({value:.4g} instead of {want:.4g})"
            )
        counted = _numeric_half(f)
        raise Wrong(
            f"on {desc}, your answer is {value:.6g} keys; with pl.forgetting_bias "
            f"over 1000 keys, {counted} of the nearest keys reach half the weight"
        )
    counted = _numeric_half(0.99)
    expect(
        counted == math.ceil(math.log(2) / -math.log(0.99)),
        "the numerical count disagrees with the closed form (a bug in the check)",
    )
    return (
        "equals the half-weight count for f = "
        + ", ".join(f"{f:g}" for f in GATES)
        + f"; pl.forgetting_bias counts {counted} keys for f = 0.99."
    )


plant("ex-fox-window", lambda f: 1 / (1 - f), says="mean number of keys")
plant("ex-fox-window", lambda f: math.log(2) / (1 - f), says="1 - f where")
plant("ex-fox-window", lambda f: math.log10(2) / -math.log10(f) / 2, says="1000 keys")
plant("ex-fox-window", lambda f: [69.0], says="expected a number")
plant("ex-fox-window", lambda f: None, says="returned None")
plant(
    "ex-fox-window",
    lambda f: float(math.floor(math.log(2) / -math.log(f))),
    says="less than half",
)


OWN_STUB = '''\
def bias_from_j(log_f):
    """Log gates (b, h, n) -> the bias (b, h, n, n) of an implementation that sums
    the gates from l = j instead of l = j + 1 (-inf above the diagonal)."""
    ...  # your code
'''


def _log_gates(gen: torch.Generator, shape) -> torch.Tensor:
    return torch.nn.functional.logsigmoid(
        2 * torch.randn(shape, generator=gen, dtype=torch.float64)
    )


def _causal(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    return x.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)


@exercise("ex-fox-own-gate", chapter=CHAPTER, stub=OWN_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(6)
    for shape in [(1, 1, 5), (2, 3, 8)]:
        log_f = _log_gates(gen, shape)
        desc = f"random log gates of shape {shape}"
        got = call(answer, log_f.clone(), desc=desc)
        D = pl.forgetting_bias(log_f)
        want = _causal(D + log_f[..., None, :])
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().double()
            upper = torch.ones(shape[-1], shape[-1], dtype=torch.bool).triu(1)
            expect(
                bool(torch.isneginf(g[..., upper]).all()),
                f"on {desc}, your bias is not -inf above the diagonal: FoX is causal",
            )
            expect(
                not bool(g.isnan().any()),
                f"on {desc}, your bias holds NaN below the diagonal",
            )
            if torch.allclose(g, D):
                raise Wrong(f"on {desc}, your bias is FoX's own, summed from j + 1")
            if torch.allclose(g, _causal(D + log_f[..., :, None])):
                raise Wrong(
                    f"on {desc}, your extra term is the query's gate log f_i, not the "
                    "key's log f_j"
                )
            if torch.allclose(g, _causal(D - log_f[..., None, :])):
                raise Wrong(
                    f"on {desc}, your extra term has the wrong sign: summing "
                    "one more log gate adds log f_j"
                )
            # the -inf above the diagonal checked, compare the rest
            got, want = g.masked_fill(upper, 0.0), want.masked_fill(upper, 0.0)
        expect_close(got, want, desc=desc, what="your bias")
    return (
        "equals pl.forgetting_bias(log_f) + log f_j below and on the diagonal, -inf "
        "above it, for gates of shapes (1, 1, 5) and (2, 3, 8)."
    )


plant("ex-fox-own-gate", lambda lf: pl.forgetting_bias(lf), says="FoX's own")
plant(
    "ex-fox-own-gate",
    lambda lf: _causal(pl.forgetting_bias(lf) + lf[..., :, None]),
    says="the query's gate",
)
plant(
    "ex-fox-own-gate",
    lambda lf: _causal(pl.forgetting_bias(lf) - lf[..., None, :]),
    says="wrong sign",
)
plant(
    "ex-fox-own-gate",
    lambda lf: pl.forgetting_bias(lf).nan_to_num(neginf=0.0) + lf[..., None, :],
    says="not -inf above the diagonal",
)
plant("ex-fox-own-gate", lambda lf: None, says="returned None")


CACHE_STUB = '''\
def next_bias_row(c_cache, log_f_t):
    """Decoding with a cache: c_cache (b, h, t-1) holds the running sums
    c_1 .. c_{t-1} of the log gates of the cached tokens, log_f_t (b, h) is the new
    token's log gate. Return the new query's bias row D_t (b, h, t) over the t-1
    cached keys and the new token itself."""
    ...  # your code
'''


@exercise("ex-fox-cache", chapter=CHAPTER, stub=CACHE_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(7)
    for shape in [(1, 1, 6), (2, 4, 11)]:
        log_f = _log_gates(gen, shape)
        c = log_f.cumsum(-1)  # c_t = sum_{l <= t} log f_l
        t = shape[-1]
        desc = f"a cache of {t - 1} tokens, gates of shape {shape[:2]}"
        got = call(answer, c[..., :-1].clone(), log_f[..., -1].clone(), desc=desc)
        want = pl.forgetting_bias(log_f)[..., -1, :]  # the last query's row
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().double()
            if torch.allclose(g, -want):
                raise Wrong(
                    f"on {desc}, your row has the wrong sign: c_t - c_j <= 0, the "
                    "older the key the more negative"
                )
            if torch.allclose(g, _stale(c[..., :-1], log_f[..., -1])):
                raise Wrong(
                    f"on {desc}, your row leaves out the new token's own gate: "
                    "c_t = c_(t-1) + log f_t"
                )
        expect_close(got, want, desc=desc, what="your bias row")
    return (
        "equals the last row of pl.forgetting_bias over the whole sequence, for "
        "caches of 5 and 10 tokens."
    )


def _stale(c, lf):
    return torch.cat((c[..., -1:] - c, torch.zeros_like(c[..., :1])), -1)


def _flipped(c, lf):
    ct = c[..., -1:] + lf[..., None]
    return torch.cat((c - ct, torch.zeros_like(c[..., :1])), -1)


def _no_self(c, lf):
    return c[..., -1:] + lf[..., None] - c


plant("ex-fox-cache", _stale, says="own gate")
plant("ex-fox-cache", _flipped, says="wrong sign")
plant("ex-fox-cache", _no_self, says="has shape")
plant("ex-fox-cache", lambda c, lf: None, says="returned None")


# ---------------------------------------------------------------- ex-fox-2-layers

TWO_LAYERS_STUB = """\
# the trained 2-layer FoX model and its accuracy at 64 tokens (pl.accuracy on
# segment_batch(400, N_TRAIN, ...), as in the experiment)
fox2 = ...  # your answer: (model, acc_64)
"""


def _segment_batch(batch: int, n: int, generator: torch.Generator):
    """The chapter's majority-in-segment task (its ``segment_batch``, copied here so
    that the check builds its own evaluation batch without the notebook's state)."""
    gaps = torch.randint(3, 18, (batch, n), generator=generator)
    starts = (gaps.cumsum(1) - gaps).clamp(max=n)
    is_sep = torch.zeros(batch, n + 1, dtype=torch.bool).scatter_(1, starts, True)
    is_sep = is_sep[:, :n]
    symbols = torch.randint(2, (batch, n), generator=generator)
    tokens = torch.where(is_sep, 2, symbols)
    run = ((tokens == 0).long() - (tokens == 1).long()).cumsum(1)
    last_sep = torch.where(is_sep, torch.arange(n), 0).cummax(1).values
    count = run - run.gather(1, last_sep)
    targets = torch.where(count > 0, 0, 1).masked_fill(count == 0, -100)
    return tokens, targets, None


@exercise("ex-fox-2-layers", chapter=CHAPTER, stub=TWO_LAYERS_STUB)
def _(answer):
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 2,
        "`fox2` should be a pair (model, acc_64): the trained model and its accuracy",
    )
    model, reported = answer
    expect(
        isinstance(model, pl.TinyTransformer),
        f"the first entry should be the trained pl.TinyTransformer, got "
        f"{type(model).__name__}",
    )
    reported = as_float(reported, "acc_64")
    blocks = model.blocks
    expect(
        len(blocks) == 2,
        f"your model has n_layers={len(blocks)}: the exercise asks for n_layers=2",
    )
    pes = [b.attn.pe for b in blocks]
    expect(
        all(isinstance(pe, pl.ForgettingAttention) for pe in pes),
        "your model's layers use "
        + ", ".join(type(pe).__name__ for pe in pes)
        + ": the exercise trains pl.ForgettingAttention (FoX) in both",
    )
    expect(
        pes[0] is not pes[1],
        "both layers share one gate projection (share_pe=True): give each layer its "
        "own with share_pe=False",
    )
    expect(
        model.vocab_size == 3,
        f"your model's vocabulary has {model.vocab_size} tokens; the task has 3",
    )
    # the check's data are drawn on the CPU and moved to the model's device, which is
    # left as it is: a reader's GPU model is judged on the GPU, a CPU model on the CPU
    tokens, targets, _ = _segment_batch(400, 64, torch.Generator().manual_seed(11))
    tokens = tokens.to(module_device(model))
    measured = pl.accuracy(model, (tokens, targets, None))
    expect(
        measured > 0.75,
        f"your model gets {measured:.3f} on the check's 400 sequences of 64 tokens; "
        "one FoX layer alone reaches 0.99 in every run of the chapter's seed sweep: "
        "was it trained?",
    )
    expect(
        abs(reported - measured) < 0.03,
        f"you report acc_64 = {reported:.3f}, but your model gets {measured:.3f} on "
        "the check's own 400 sequences of 64 tokens: report the model's accuracy",
    )
    # what the second layer's gates read: their spread over positions of one token
    with torch.no_grad():
        gates = pes[1].log_forget_gates(model.attention_input(tokens[:50], 1)).exp()
    tok = tokens[:50, None, :].expand_as(gates)
    spread = max(
        float(gates[tok == t].view(-1).max() - gates[tok == t].view(-1).min())
        for t in range(3)
    )
    verdict = (
        "so its gates read context, not the token alone"
        if spread > 0.05
        else "so they hardly depend on more than the token"
    )
    return (
        f"a 2-layer FoX model with a gate projection per layer; it gets "
        f"{measured:.3f} on the check's 400 sequences of 64 tokens (you report "
        f"{reported:.3f}). In layer 2 the gate of one token type varies by up to "
        f"{spread:.2f} across positions, {verdict}."
    )


def _fox_model(n_layers: int, share_pe: bool, pe=None):
    """An untrained model for a planted answer (the global RNG left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        pe = pe if pe is not None else pl.ForgettingAttention(32, 4)
        return pl.TinyTransformer(
            3, d_model=32, n_heads=4, n_layers=n_layers, pe=pe, share_pe=share_pe
        )


plant("ex-fox-2-layers", (_fox_model(1, False), 0.9), says="n_layers=1")
plant("ex-fox-2-layers", (_fox_model(2, True), 0.9), says="share_pe=False")
plant("ex-fox-2-layers", (_fox_model(2, False, pl.ALiBi(4)), 0.9), says="ALiBi")
plant("ex-fox-2-layers", (_fox_model(2, False), 0.0), says="was it trained")
plant("ex-fox-2-layers", 0.99, says="should be a pair")

"""Checks for the exercises of book/part7/nope_sinks.ipynb."""

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
from posenc_lib.course import hybrids
from posenc_lib.course.exercises._values import integers, number
from posenc_lib.utils import module_device

CHAPTER = "part7/nope_sinks"

WINDOW_STUB = '''\
class SlidingRotary(pl.Rotary):
    """RoPE with a sliding window: a query at position p sees the keys at positions
    p - window + 1 .. p (window keys), through score_bias (0 or -inf)."""

    def __init__(self, d_head, window, base=10000.0, **kw):
        super().__init__(d_head, base, **kw)
        self.window = window

    ...  # your code
'''


def _reference(q, k, v, pos, window):
    rq, rk = pl.Rotary(q.shape[-1]).transform_qk(q, k, pos, pos)
    rel = pos[:, None, :, None] - pos[:, None, None, :]  # (b, 1, i, j): i - j
    keep = (rel >= 0) & (rel < window)
    scores = rq @ rk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v


@exercise("ex-sinks-window", chapter=CHAPTER, stub=WINDOW_STUB)
def _(answer):
    expect(
        isinstance(answer, type) and issubclass(answer, pl.Rotary),
        "`SlidingRotary` should be a class, a subclass of pl.Rotary (it keeps the "
        "rotation)",
    )
    gen = torch.Generator().manual_seed(0)
    for b, n, w in ((1, 9, 3), (2, 12, 5)):
        pe = call(answer, 8, w, desc=f"SlidingRotary(8, {w})")
        q, k, v = (
            torch.randn(b, 2, n, 8, generator=gen, dtype=torch.float64)
            for _ in range(3)
        )
        pos = torch.stack(
            [torch.randperm(3 * n, generator=gen)[:n].sort().values for _ in range(b)]
        )
        desc = f"window {w}, positions {pos[0].tolist()}"
        got = call(pl.attention, q, k, v, pe, pos, pos, causal=True, desc=desc)
        want = _reference(q, k, v, pos, w)
        for wrong, says in (
            (_reference(q, k, v, pos, w + 1), f"{w + 1} keys, one too many"),
            (_reference(q, k, v, pos, w - 1), f"{w - 1} keys, one too few"),
        ):
            if torch.allclose(got, wrong, atol=1e-8) and not torch.allclose(
                got, want, atol=1e-8
            ):
                raise Wrong(f"on {desc}, a query sees {says}")
        by_index = _idx_window(q, k, v, pos, w)
        if torch.allclose(got, by_index, atol=1e-8) and not torch.allclose(
            got, want, atol=1e-8
        ):
            raise Wrong(
                f"on {desc}, your window counts tokens, not positions: use q_pos "
                "and k_pos"
            )
        expect_close(got, want, desc=desc, what="pl.attention with your encoding")
    return (
        "`pl.attention` with SlidingRotary equals RoPE with a band of `window` keys "
        "(offsets 0 .. window - 1) for windows 3 and 5, positions with gaps."
    )


def _idx_window(q, k, v, pos, window):
    """RoPE by positions, but the band by token index."""
    rq, rk = pl.Rotary(q.shape[-1]).transform_qk(q, k, pos, pos)
    i = torch.arange(q.shape[-2])
    rel = i[:, None] - i[None, :]
    keep = (rel >= 0) & (rel < window)
    scores = rq @ rk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v


class _OneTooMany(pl.Rotary):
    def __init__(self, d_head, window, base=10000.0, **kw):
        super().__init__(d_head, base, **kw)
        self.window = window

    def score_bias(self, q, k, q_pos, k_pos):
        rel = q_pos[:, None, :, None] - k_pos[:, None, None, :]
        zero = torch.zeros((), dtype=q.dtype)
        return zero.masked_fill(rel > self.window, float("-inf"))


class _Indices(_OneTooMany):
    def score_bias(self, q, k, q_pos, k_pos):
        i = torch.arange(q.shape[-2])
        rel = i[:, None] - i[None, :]
        zero = torch.zeros((), dtype=q.dtype)
        return zero.masked_fill(rel >= self.window, float("-inf"))


class _Chunks(pl.ChunkedRotary):
    def __init__(self, d_head, window, base=10000.0, **kw):
        super().__init__(d_head, window, base, **kw)


class _NoRotation(pl.PositionalEncoding):
    def __init__(self, d_head, window):
        super().__init__()


plant("ex-sinks-window", _OneTooMany, says="one too many")
plant("ex-sinks-window", _Indices, says="counts tokens, not positions")
plant("ex-sinks-window", _Chunks, says="differs at entry")
plant("ex-sinks-window", _NoRotation, says="subclass of pl.Rotary")

# ---------------------------------------------------------------- ex-sinks-temperature

TEMPERATURE_STUB = """\
# the factor TemperedNoPE(floor_scale=L) multiplies the query by at the last
# position of the retrieval test at 16 L (L = 16)
factor_last = ...  # your answer
"""


@exercise("ex-sinks-temperature", chapter=CHAPTER, stub=TEMPERATURE_STUB)
def _(answer):
    got = number(answer, "factor_last")
    L, last = 16, 16 * 16 - 1
    want = float(pl.llama4_attn_scale(torch.tensor([last]), floor_scale=L)[0])
    if math.isclose(got, 1 + 0.1 * math.log1p(last // L), rel_tol=1e-4):
        raise Wrong(
            f"`factor_last` is {got:.4g}: the step counts floor((p + 1) / L), so the "
            f"last position {last} has made {(last + 1) // L} steps"
        )
    if math.isclose(got, 1 + 0.1 * math.log10(1 + (last + 1) // L), rel_tol=1e-4):
        raise Wrong(f"`factor_last` is {got:.4g}: Llama 4 uses the natural logarithm")
    if math.isclose(got, want - 1, rel_tol=1e-4):
        raise Wrong(f"`factor_last` is {got:.4g}: the factor is 1 plus the increment")
    expect(math.isclose(got, want, rel_tol=1e-4), f"`factor_last` is {got:.4g}")
    return (
        f"{want:.4f} = pl.llama4_attn_scale(255, floor_scale=16), the query scale at "
        "the last position."
    )


plant("ex-sinks-temperature", 1 + 0.1 * math.log(16), says="made 16 steps")
plant("ex-sinks-temperature", 1 + 0.1 * math.log10(17), says="natural logarithm")
plant("ex-sinks-temperature", 0.1 * math.log(17), says="1 plus the increment")
plant("ex-sinks-temperature", [1.28], says="should be a number")


# ---------------------------------------------------------------- ex-sinks-first-token

SINK_STUB = """\
# the two trained models and, for each, the mean weight that every head of layer 1
# (model.blocks[1]) puts on the first token, over queries 1 .. L-1 of
# data.eval[:, :L]: (h,) tensors
sinks = ...  # your answer: (model_nope, model_sink, first_nope, first_sink)
"""


def _sink_eval_tokens() -> tuple[torch.Tensor, int]:
    """The experiment's evaluation windows ``(B, L)`` (its LabConfig, first seed)."""
    from posenc_lib.course import lab

    cfg = lab.LabConfig(train_len=16, factors=(1, 4), steps=150, n_layers=2)
    data = lab.make_lab_data(cfg, pl.book.chapter_seeds(0)[0])
    return data.eval[:, :16], data.vocab_size


@exercise("ex-sinks-first-token", chapter=CHAPTER, stub=SINK_STUB)
def _(answer):
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 4,
        "`sinks` should be (model_nope, model_sink, first_nope, first_sink)",
    )
    models, reported = answer[:2], answer[2:]
    tokens, vocab = _sink_eval_tokens()
    for name, model, kind in zip(
        ("model_nope", "model_sink"), models, (pl.NoPE, pl.LearnedSink)
    ):
        expect(
            isinstance(model, pl.TinyTransformer),
            f"`{name}` should be a trained pl.TinyTransformer, got "
            f"{type(model).__name__}",
        )
        expect(
            len(model.blocks) == 2 and model.vocab_size == vocab,
            f"`{name}` has {len(model.blocks)} layers and {model.vocab_size} tokens; "
            f"the experiment's language model has 2 and {vocab}",
        )
        pes = [type(b.attn.pe).__name__ for b in model.blocks]
        expect(
            all(type(b.attn.pe) is kind for b in model.blocks),
            f"`{name}`'s layers use {', '.join(pes)}: it should use "
            f"pl.{kind.__name__} in both layers",
        )
    # the evaluation windows (on the CPU) are moved to each model's device, and the
    # model is left where it is: a GPU model is judged on the GPU, a CPU one on the CPU
    for name, model in zip(("model_nope", "model_sink"), models):
        x = tokens.to(module_device(model))
        with torch.no_grad():
            logits = model.eval()(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:])
        expect(
            loss.item() < math.log(vocab) - 0.2,
            f"`{name}` has a loss of {loss.item():.2f} nats per token on the "
            f"evaluation windows, close to ln {vocab} = {math.log(vocab):.2f} "
            "(guessing): was it trained?",
        )
    firsts, sums = [], []
    for name, model, got in zip(("first_nope", "first_sink"), models, reported):
        w = model.eval().attention_map(tokens.to(module_device(model)), 1)  # (b h i j)
        first = w[:, :, 1:, 0].mean((0, 2))  # (h,): queries 1 .. L-1
        desc = "the experiment's evaluation windows data.eval[:, :L]"
        expect_close(got, first, desc=desc, what=f"`{name}`", atol=0.02, rtol=0)
        firsts.append(first)
        sums.append(w[:, :, 1:].sum(-1).mean().item())
    # no key preferred: query i spreads 1/(i + 1) on key 0
    uniform = (1 / torch.arange(2, 17, dtype=torch.float64)).mean().item()
    nope_max, sink_max = (float(f.max()) for f in firsts)
    finding = (
        "a first-token sink (a head well above the uniform share)"
        if nope_max > 2 * uniform
        else "no clear first-token sink in this run"
    )
    return (
        f"both models as asked; your weights on key 0 are what they give on the "
        f"evaluation windows. Layer 1 of the NoPE model puts up to {nope_max:.2f} "
        f"on the first token (uniform would be {uniform:.2f}): {finding}. With "
        f"learned sinks the largest is {sink_max:.2f} and the rows sum to "
        f"{sums[1]:.2f} on average (the rest goes to the sink), against "
        f"{sums[0]:.2f} without."
    )


def _sink_model(pe_kind):
    """An untrained language model for a planted answer (global RNG unchanged)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return pl.TinyTransformer(8, 32, 4, 2, [pe_kind(), pe_kind()])


_H4 = torch.full((4,), 0.25)
plant(
    "ex-sinks-first-token",
    (
        _sink_model(lambda: pl.Rotary(8)),
        _sink_model(lambda: pl.LearnedSink(4)),
        _H4,
        _H4,
    ),
    says="should use pl.NoPE",
)
plant(
    "ex-sinks-first-token",
    (_sink_model(pl.NoPE), _sink_model(pl.NoPE), _H4, _H4),
    says="pl.LearnedSink in both",
)
plant(
    "ex-sinks-first-token",
    (_sink_model(pl.NoPE), _sink_model(lambda: pl.LearnedSink(4)), _H4 * 4, _H4),
    says="was it trained",
)
plant("ex-sinks-first-token", (_sink_model(pl.NoPE), _H4), says="should be (model")


# ---------------------------------------------------------------- ex-sinks-muse-layers

MUSE_STUB = """\
# the layers without RoPE of a 30-layer model built with Muse Spark's rule (every
# fourth layer counted from the last), as a list of 0-based layer indices
nope_layers = ...  # your answer
"""


@exercise("ex-sinks-muse-layers", chapter=CHAPTER, stub=MUSE_STUB)
def _(answer):
    got = integers(answer, "`nope_layers`")
    n = 30
    want = hybrids.without_rope(hybrids.muse(n))
    wrong = {
        "Llama 4's rule, counted from the first layer, (l + 1) % 4 == 0: count back "
        "from the last layer instead": hybrids.without_rope(hybrids.llama4(n)),
        "counted from 1: the book numbers layers from 0": [l + 1 for l in want],
        "the layers that keep RoPE (the sliding-window ones)": [
            l for l in range(n) if l not in want
        ],
        "one off: the last of 30 layers is layer 29": [
            l for l in range(n) if (n - l) % 4 == 0
        ],
    }
    for says, layers in wrong.items():
        if got == layers and got != want:
            raise Wrong(f"`nope_layers` is {got}: {says}")
    expect(
        got == want,
        f"`nope_layers` is {got}: layer 29, the last, should be among them, and every "
        "fourth layer before it",
    )
    llama = hybrids.without_rope(hybrids.llama4(n))
    return (
        f"{want}: {len(want)} layers counted back from layer {n - 1}, where Llama 4's "
        f"rule gives {len(llama)} ({llama[0]}, {llama[1]}, ..., {llama[-1]}) and a "
        "last layer with RoPE."
    )


plant("ex-sinks-muse-layers", list(range(3, 30, 4)), says="counted from the first")
plant("ex-sinks-muse-layers", list(range(2, 31, 4)), says="counted from 1")
plant("ex-sinks-muse-layers", list(range(2, 30, 4)), says="one off")
plant("ex-sinks-muse-layers", [1, 5, 9], says="layer 29, the last")
plant("ex-sinks-muse-layers", "1, 5, 9", says="should be a list")

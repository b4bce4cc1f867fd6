"""Checks for the exercises of book/part5/video_audio.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect, plant
from posenc_lib.course.exercises._values import number, numbers

CHAPTER = "part5/video_audio"


def _ints(value, name: str) -> list[int]:
    """A list or 1-D tensor of whole numbers, as a list of ints."""
    if isinstance(value, torch.Tensor):
        value = value.flatten().tolist()
    if not isinstance(value, (list, tuple, range)):
        raise Wrong(f"`{name}` should be a list of ids, got {type(value).__name__}")
    return [int(number(v, f"an entry of `{name}`")) for v in value]


# ---------------------------------------------------------------- ex-va-seconds

SECONDS_STUB = """\
# the temporal id of each of the 16 temporal patches, and where text after starts
seconds_ids = ...  # your answer: (qwen2_t, qwen2_next, qwen25_t, qwen25_next)
"""


@exercise("ex-va-seconds", chapter=CHAPTER, stub=SECONDS_STUB)
def _(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 4:
        raise Wrong(
            "`seconds_ids` should be a tuple (qwen2_t, qwen2_next, qwen25_t, "
            "qwen25_next)"
        )
    segs = [("video", (16, 8, 8)), ("text", 1)]  # 32 frames, 2 per temporal patch
    per_frame = (8 // 2) * (8 // 2)  # merged tokens of one temporal patch
    for rule, t_name, next_name, interval, (t_ids, nxt) in (
        ("Qwen2-VL", "qwen2_t", "qwen2_next", 1, answer[:2]),
        ("Qwen2.5-VL", "qwen25_t", "qwen25_next", 2, answer[2:]),
    ):
        ids = pl.mrope_position_ids(segs, spatial_merge_size=2, time_interval=interval)
        want_t, want_next = ids[:-1:per_frame, 0].tolist(), int(ids[-1, 0])
        got_t = _ints(t_ids, t_name)
        if len(got_t) == 32:
            raise Wrong(
                f"`{t_name}` has 32 ids, one per frame: a temporal patch of 2 frames "
                "gets one temporal id"
            )
        expect(
            len(got_t) == 16,
            f"`{t_name}` has {len(got_t)} ids, expected one per temporal patch",
        )
        if rule == "Qwen2.5-VL" and got_t == list(range(16)):
            raise Wrong(
                "`qwen25_t` counts patches as Qwen2-VL does: Qwen2.5-VL spaces them "
                "by second_per_grid_t * tokens_per_second"
            )
        expect(
            got_t == want_t,
            f"`{t_name}` is {got_t}, not {rule}'s temporal ids for this video",
        )
        got_next = int(number(nxt, next_name))
        if got_next == want_t[-1] + interval and interval > 1:
            raise Wrong(
                f"`{next_name}` is {got_next}: text resumes one past the largest id "
                "used so far, not one interval past it"
            )
        expect(
            got_next == want_next,
            f"`{next_name}` is {got_next}: where does the text after the video start "
            f"under {rule}'s rule?",
        )
    return (
        "temporal ids and text starts equal pl.mrope_position_ids with "
        "time_interval 1 (Qwen2-VL) and 2 (Qwen2.5-VL)."
    )


plant(
    "ex-va-seconds",
    (list(range(32)), 32, list(range(0, 64, 2)), 63),
    says="one per frame",
)
plant(
    "ex-va-seconds",
    (list(range(16)), 16, list(range(16)), 16),
    says="counts patches as Qwen2-VL",
)
plant(
    "ex-va-seconds",
    (list(range(16)), 16, list(range(0, 32, 2)), 32),
    says="not one interval past",
)
plant("ex-va-seconds", (list(range(16)), 16), says="should be a tuple")

# ---------------------------------------------------------------- ex-va-vivit

VIVIT_STUB = """\
vivit_counts = ...  # your answer: (joint_params, sum_params)
"""


@exercise("ex-va-vivit", chapter=CHAPTER, stub=VIVIT_STUB)
def _(answer):
    joint, summed = numbers(answer, ["joint_params", "sum_params"], "vivit_counts")
    tubelets, side, dim = 16, 14, 768
    st = pl.SpaceTimeEmbedding(dim, tubelets, side, side)
    want_sum = sum(p.numel() for p in st.parameters())
    want_joint = st.spacetime_table().numel()  # one D-vector per (t, h, w)
    if joint == 32 * side**2 * dim or summed == (32 + side**2) * dim:
        raise Wrong(
            "your counts use 32 frames: the positions index the 16 tubelets of "
            "2 frames each"
        )
    expect(
        joint == want_joint,
        f"`joint_params` is {joint:.0f}: one learned D-vector per (time, row, "
        "column) token",
    )
    if summed == (tubelets + 2 * side) * dim:
        raise Wrong(
            f"`sum_params` is {summed:.0f}: TimeSformer's spatial table has one row "
            "per patch of the 14 x 14 grid, not one per row and per column"
        )
    expect(
        summed == want_sum,
        f"`sum_params` is {summed:.0f}: a time table plus a space table",
    )
    return (
        f"joint {want_joint:,} and summed {want_sum:,} (the parameters of "
        "pl.SpaceTimeEmbedding(768, 16, 14, 14))."
    )


plant("ex-va-vivit", (32 * 196 * 768, (32 + 196) * 768), says="use 32 frames")
plant("ex-va-vivit", (16 * 196 * 768, (16 + 28) * 768), says="one row per patch")
plant("ex-va-vivit", ((16 + 196) * 768, 16 * 196 * 768), says="`joint_params` is")
plant("ex-va-vivit", None, says="No answer yet")

# ---------------------------------------------------------------- ex-va-causal

CAUSAL_STUB = '''\
def future_leak(pe, x, t):
    """The positions p < t (a sorted list of ints) whose feature pe.features(x)
    (b, n, D) changes when token t of x (b, n, D) is replaced by another."""
    ...  # your code
'''


def _leak(pe, x, t):
    y = x.clone()
    y[:, t] = y[:, t] + 1.0
    diff = (pe.features(x) - pe.features(y)).abs().amax(dim=(0, 2))  # (n,)
    return [p for p in range(t) if diff[p] > 1e-9]


@exercise("ex-va-causal", chapter=CHAPTER, stub=CAUSAL_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    cases = [(16, False, 10, 24), (8, False, 5, 12), (16, True, 10, 24)]
    for k, causal, t, n in cases:
        torch.manual_seed(int(torch.randint(1000, (1,), generator=gen)))
        pe = pl.ConvPositionalEmbedding(8, k, 2, causal=causal).double()
        x = torch.randn(2, n, 8, generator=gen, dtype=torch.float64)
        desc = f"K = {k}{', causal' if causal else ''}, n = {n}, t = {t}"
        got = _ints(call(answer, pe, x.clone(), t, desc=desc), "future_leak(...)")
        want = _leak(pe, x, t)
        expect(
            not [p for p in got if p >= t],
            f"on {desc}, your list holds positions at or after t ({t}): the leak is "
            "what reaches earlier positions, which a causal mask should protect",
        )
        expect(
            len(set(got)) == len(got),
            f"on {desc}, your list repeats positions: give each position once",
        )
        expect(
            sorted(got) == want,
            f"on {desc}, you found {sorted(got)}, expected "
            f"{len(want)} positions{' (none)' if not want else ''}",
        )
    return (
        "the leaked positions match pl.ConvPositionalEmbedding's features for "
        "K = 16 and 8, and are none with causal=True."
    )


def _with_t(pe, x, t):
    y = x.clone()
    y[:, t] += 1.0
    diff = (pe.features(x) - pe.features(y)).abs().amax(dim=(0, 2))
    return [p for p in range(t + 1) if diff[p] > 1e-9]


def _half_window(pe, x, t):
    return list(range(max(t - pe.kernel_size // 4, 0), t))


plant("ex-va-causal", _with_t, says="at or after t")
plant("ex-va-causal", _half_window, says="you found")
plant(
    "ex-va-causal", lambda pe, x, t: pe.features(x[:, t]), says="your function raised"
)

# ---------------------------------------------------------------- ex-va-kernel

KERNEL_STUB = '''\
def shaded(N, K):
    """Boolean tensor (N,): True at the positions p whose window (wav2vec 2.0's
    convolution, even kernel K, N tokens) reaches the zero padding."""
    ...  # your code
'''


def _padded(n: int, k: int) -> torch.Tensor:
    """Where the features of x alone differ from those of x inside a longer input."""
    torch.manual_seed(0)
    pe = pl.ConvPositionalEmbedding(4, k, 2).double()
    long = torch.randn(1, n + 2 * k, 4, dtype=torch.float64)
    inside = pe.features(long)[:, k : k + n]
    alone = pe.features(long[:, k : k + n])
    return (inside - alone).abs().amax(dim=(0, 2)) > 1e-9  # (n,)


@exercise("ex-va-kernel", chapter=CHAPTER, stub=KERNEL_STUB)
def _(answer):
    cases = [(32, 16), (32, 8), (32, 32), (16, 32), (20, 4)]
    for n, k in cases:
        desc = f"N = {n}, K = {k}"
        got = call(answer, n, k, desc=desc)
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise Wrong(
                f"on {desc}, your answer has dtype {got.dtype}: return a boolean "
                "mask of shape (N,), not a list of positions"
            )
        expect(
            tuple(got.shape) == (n,),
            f"on {desc}, your mask has shape {tuple(got.shape)}, expected ({n},)",
        )
        want = _padded(n, k)
        wrong = (got != want).nonzero().flatten().tolist()
        if wrong:
            p = wrong[0]
            window = f"{p - k // 2} .. {p + k // 2 - 1}"
            raise Wrong(
                f"on {desc}, position {p} is {'' if got[p] else 'not '}shaded in your "
                f"mask, but its window {window} "
                f"{'reaches' if want[p] else 'stays inside 0 .. ' + str(n - 1)}"
                f"{' the padding' if want[p] else ''}"
            )
    return (
        "your mask equals the positions where pl.ConvPositionalEmbedding's features "
        "change when the padding is replaced by real tokens, for (N, K) = "
        + ", ".join(f"({n}, {k})" for n, k in cases)
        + "."
    )


def _one_too_many(N, K):
    p = torch.arange(N)
    return (p < K // 2) | (p > N - 1 - K // 2)


def _whole_kernel(N, K):
    p = torch.arange(N)
    return (p < K) | (p > N - K)


plant("ex-va-kernel", _one_too_many, says="stays inside")
plant("ex-va-kernel", _whole_kernel, says="is shaded in your mask")
plant("ex-va-kernel", lambda N, K: [0, 1, 2], says="boolean mask")

# ---------------------------------------------------------------- ex-va-videorope

VIDEOROPE_STUB = """\
# for each rule: (where the text after the video starts, lowest h of the last frame,
# highest h of the last frame)
text_after = {
    "qwen2": ...,  # your answer: (start, h_min, h_max)
    "qwen2.5": ...,
    "videorope": ...,
}
"""


@exercise("ex-va-videorope", chapter=CHAPTER, stub=VIDEOROPE_STUB)
def _(answer):
    expect(
        isinstance(answer, dict) and set(answer) == {"qwen2", "qwen2.5", "videorope"},
        "`text_after` should be a dict with the keys 'qwen2', 'qwen2.5', 'videorope'",
    )
    segs = [("text", 5), ("video", (8, 4, 4)), ("text", 1)]
    last = slice(5 + 7 * 16, 5 + 8 * 16)  # the last frame's 16 tokens
    refs = {
        "qwen2": pl.mrope_position_ids(segs),
        "qwen2.5": pl.mrope_position_ids(segs, time_interval=2),
        "videorope": pl.videorope_position_ids(segs),
    }
    for rule, ids in refs.items():
        start, h_min, h_max = (
            int(v) for v in numbers(answer[rule], ["start", "h_min", "h_max"], rule)
        )
        t_last = int(ids[last, 0].max())
        want = (int(ids[-1, 0]), int(ids[last, 1].min()), int(ids[last, 1].max()))
        if rule != "qwen2" and start == t_last + 2:
            raise Wrong(
                f"under {rule}, your text starts at {start}: text resumes one past "
                "the largest t, not one interval past it"
            )
        if rule == "videorope" and start == want[2] + 1:
            raise Wrong(
                f"under videorope, your text starts at {start}, past the largest h: "
                "VideoRoPE starts the next segment one past the largest t"
            )
        expect(start == want[0], f"under {rule}, your text starts at {start}")
        if rule == "videorope" and (h_min, h_max) == (5, 8):
            raise Wrong(
                "under videorope, your last frame covers h = 5..8: VideoRoPE's h "
                "follows the frame's t (diagonal layout)"
            )
        expect(
            (h_min, h_max) == want[1:],
            f"under {rule}, your last frame covers h = {h_min}..{h_max}",
        )
    return (
        "starts and h ranges equal pl.mrope_position_ids (interval 1 and 2) and "
        "pl.videorope_position_ids on text 5, video (8, 4, 4), text."
    )


plant(
    "ex-va-videorope",
    {"qwen2": (13, 5, 8), "qwen2.5": (21, 5, 8), "videorope": (21, 18, 21)},
    says="not one interval past",
)
plant(
    "ex-va-videorope",
    {"qwen2": (13, 5, 8), "qwen2.5": (20, 5, 8), "videorope": (22, 18, 21)},
    says="past the largest h",
)
plant(
    "ex-va-videorope",
    {"qwen2": (13, 5, 8), "qwen2.5": (20, 5, 8), "videorope": (20, 5, 8)},
    says="follows the frame's t",
)
plant("ex-va-videorope", [13, 20, 20], says="should be a dict")

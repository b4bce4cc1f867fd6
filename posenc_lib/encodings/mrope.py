"""Multimodal rotary position embedding (M-RoPE; Qwen2-VL, Wang et al. 2024).

Every token carries three integer coordinates (t, h, w): a frame index and a row and
column in a patch grid. RoPE's d/2 frequency pairs are split into three sections, and
pair i is rotated by the coordinate of the axis its section belongs to::

    theta_i = base^(-2i/d),   i = 0 .. d/2 - 1        (one set of frequencies, as RoPE)
    angle_i = c_{a(i)} * theta_i,   c = (t, h, w),  a(i) in {0, 1, 2}

so (R_c q) . (R_c' k) depends on (t' - t, h' - h, w' - w) only. A text token has
t = h = w = p, every angle is p * theta_i, and M-RoPE *is* 1-D RoPE (same layout).

**Sections** (``mrope_section``, in frequency pairs, summing to d/2): Qwen2-VL's 7B
and 72B configurations use ``[16, 24, 24]`` for d = 128. Hugging Face's
``apply_multimodal_rotary_pos_emb`` (transformers 4.45 to 4.57; in 5.x
``Qwen2VLRotaryEmbedding.recomposition_frequencies``) builds cos/sin over all d for each
axis, splits the last dimension into ``mrope_section * 2`` = [16, 24, 24, 16, 24, 24]
and takes chunk k from axis k % 3. In the ``rotate_half`` layout (pairs (i, i + d/2))
these are **contiguous** sections of pair indices: t on the highest frequencies
i = 0..15, h on 16..39, w on the lowest 40..63 (``mrope_axes``). Qwen3-VL interleaves
them instead (``interleaved=True``: pair i goes to h if i % 3 == 1 and i < 3 s_h, to w
if i % 3 == 2 and i < 3 s_w, else to t; Hugging Face's
``Qwen3VLTextRotaryEmbedding.recomposition_frequencies`` with ``[24, 20, 20]``), so
every axis sees high and low frequencies.

**Position ids** (``mrope_position_ids``) follow Qwen2-VL's ``get_rope_index`` as the
Qwen team contributed it to Hugging Face (transformers 4.45): text tokens count 1, 2,
3, ... on all three axes; a visual segment starts at ``s`` = one past the largest id
so far and takes ``(s + t, s + h, s + w)`` over its (merged) grid; the next segment
starts one past the largest of those ids, i.e. after ``s + max(T, H, W) - 1``.
Qwen2.5-VL multiplies a video's frame index by ``second_per_grid_t *
tokens_per_second`` (``time_interval`` here) and truncates it to an integer, so t
follows seconds rather than frames.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_integer, check_positive_int, check_tensor
from .rope import KeepsFrequencies, rotate_half
from .rope_scaling import rope_inv_freq

__all__ = [
    "MultimodalRotary",
    "default_mrope_section",
    "mrope_axes",
    "apply_mrope",
    "mrope_position_ids",
]

AXES = ("t", "h", "w")
KINDS = ("text", "image", "video")


def default_mrope_section(d_head: int) -> list[int]:
    """Qwen2-VL's proportions for any even ``d_head >= 4``: ``[s_t, s_h, s_w]`` pairs
    with ``s_h = s_w = max(1, floor(3/8 * d/2))`` and ``s_t`` the rest ([16, 24, 24] for
    d = 128, [2, 3, 3] for d = 16, [2, 1, 1] for d = 8). d = 4 has two pairs only, so
    t gets none: [0, 1, 1]."""
    check_positive_int(d_head, "d_head")
    if d_head % 2 or d_head < 4:
        raise ValueError(
            f"d_head must be even and >= 4 for M-RoPE (a frequency pair for h and for "
            f"w), got {d_head}"
        )
    half = d_head // 2
    s_hw = max(1, (3 * half) // 8)
    return [half - 2 * s_hw, s_hw, s_hw]


def mrope_axes(mrope_section: Sequence[int], interleaved: bool = False) -> torch.Tensor:
    """``(d/2,)`` int64: the axis (0 = t, 1 = h, 2 = w) whose coordinate rotates each
    frequency pair i, for sections ``[s_t, s_h, s_w]`` (d/2 = their sum).

    Contiguous (Qwen2-VL, Qwen2.5-VL): ``[0] * s_t + [1] * s_h + [2] * s_w``.
    Interleaved (Qwen3-VL): t everywhere, then h at i = 1, 4, 7, ... < 3 s_h and w at
    i = 2, 5, 8, ... < 3 s_w.
    """
    section = _check_section(mrope_section)
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    half = sum(section)
    if not interleaved:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(section))
    axes = torch.zeros(half, dtype=torch.long)
    for axis, offset in ((1, 1), (2, 2)):
        axes[offset : 3 * section[axis] : 3] = axis
    counts = torch.bincount(axes, minlength=3).tolist()
    if counts != section:
        raise ValueError(
            f"mrope_section {section} cannot be interleaved: pairs i = 1, 4, ... < "
            f"3*s_h and i = 2, 5, ... < 3*s_w must fit in the d/2 = {half} pairs "
            f"(they give {counts})"
        )
    return axes


def _check_section(mrope_section) -> list[int]:
    if (
        not isinstance(mrope_section, (list, tuple))
        or len(mrope_section) != 3
        or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0
            for s in mrope_section
        )
        or not sum(mrope_section)
    ):
        raise ValueError(
            "mrope_section must be three ints >= 0 [s_t, s_h, s_w] (frequency pairs "
            f"per axis; an axis with 0 is not encoded), got {mrope_section!r}"
        )
    return list(mrope_section)


def _check_coords(coords, name: str) -> torch.Tensor:
    if not isinstance(coords, torch.Tensor):
        coords = torch.as_tensor(coords)
    check_integer(coords, name, "coordinates")
    if coords.dim() == 2:
        coords = coords[None]
    if coords.dim() != 3 or coords.shape[-1] != 3:
        raise ValueError(
            f"{name} must have shape (n, 3) or (b, n, 3) = (t, h, w) per token, got "
            f"{tuple(coords.shape)}"
        )
    return coords


def apply_mrope(
    x: torch.Tensor, coords: torch.Tensor, inv_freq: torch.Tensor, axes: torch.Tensor
) -> torch.Tensor:
    """Rotate ``x`` ``(b, h, n, d)`` at integer coordinates ``coords`` ``(n, 3)`` or
    ``(b|1, n, 3)``; same shape and dtype. ``rotate_half`` layout (pairs (i, i + d/2)),
    angles in float64.

    x -> x * cos(angle) + rotate_half(x) * sin(angle), angle_i = c_{axes[i]} theta_i.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(
            "x must be a 4-D tensor (b, h, n, d), got shape "
            f"{tuple(getattr(x, 'shape', ()))}"
        )
    b, _, n, d = x.shape
    coords = _check_coords(coords, "coords").to(x.device)
    check_tensor(inv_freq, "inv_freq", "frequencies (d/2,)")
    check_integer(check_tensor(axes, "axes", "(d/2,)"), "axes", "axis indices")
    if coords.shape[1] != n or coords.shape[0] not in (1, b):
        raise ValueError(
            f"coords must have shape ({n}, 3) or ({b}, {n}, 3) to match x "
            f"{tuple(x.shape)}, got {tuple(coords.shape)}"
        )
    if d % 2 or inv_freq.shape != (d // 2,) or axes.shape != (d // 2,):
        raise ValueError(
            f"inv_freq and axes must have shape (d/2,) = ({d // 2},) for x with d = "
            f"{d} (even), got {tuple(inv_freq.shape)} and {tuple(axes.shape)}"
        )
    # c_{a(i)}: the coordinate that rotates pair i
    pos = coords[..., axes.to(coords.device)].to(torch.float64)  # (b|1, n, d/2)
    # angle_{n,i} = c_{n, a(i)} * theta_i
    angles = pos * inv_freq.to(x.device, torch.float64)  # (b|1, n, d/2)
    angles = torch.cat((angles, angles), dim=-1)[:, None]  # (b|1, 1, n, d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + rotate_half(x) * sin  # (b, h, n, d)


class MultimodalRotary(KeepsFrequencies, PositionalEncoding):
    """M-RoPE: rotates queries and keys by their (t, h, w) coordinates
    (``transform_qk``); positions are ``(b, n, 3)``, no parameters, no length limit.

    ``mrope_section`` defaults to Qwen2-VL's proportions (``default_mrope_section``);
    ``interleaved=True`` assigns the pairs as Qwen3-VL does.
    """

    coord_axes = 3
    four_terms = {
        "content-content": "kept, rotated per axis: depends on (dt, dh, dw)",
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        d_head: int,
        mrope_section: Sequence[int] | None = None,
        base: float = 10000.0,
        interleaved: bool = False,
    ):
        super().__init__()
        section = (
            default_mrope_section(d_head)
            if mrope_section is None
            else _check_section(mrope_section)
        )
        if check_positive_int(d_head, "d_head") != 2 * sum(section):
            raise ValueError(
                f"mrope_section {section} must sum to d_head/2 = {d_head / 2:g} "
                "(frequency pairs)"
            )
        self.d_head, self.base, self.interleaved = d_head, float(base), interleaved
        self.mrope_section = section
        inv_freq, _ = rope_inv_freq(d_head, base)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (d/2,) float64
        self.register_buffer(
            "axes", mrope_axes(section, interleaved), persistent=False
        )  # (d/2,)

    def transform_qk(self, q, k, q_pos, k_pos):
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q has head dimension {q.shape[-1]}, but this MultimodalRotary was "
                f"built for d_head={self.d_head}"
            )
        return (
            apply_mrope(q, q_pos, self.inv_freq, self.axes),
            apply_mrope(k, k_pos, self.inv_freq, self.axes),
        )

    def example_positions(self, b, n, generator=None):
        """Text, an image and a video, as ``mrope_position_ids`` lays them out,
        cut or continued with text to ``n`` tokens: ``(b, n, 3)``."""
        segments = [
            ("text", 2),
            ("image", (1, 2, 3)),
            ("text", 2),
            ("video", (2, 2, 2)),
        ]
        ids = mrope_position_ids(segments)
        if len(ids) < n:
            tail = torch.arange(n - len(ids)) + int(ids.max()) + 1  # text
            ids = torch.cat([ids, tail[:, None].expand(-1, 3)])
        return ids[:n].expand(b, n, 3)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, mrope_section={self.mrope_section}, "
            f"base={self.base:g}, interleaved={self.interleaved}"
        )


def check_segments(segments, example: str) -> list[tuple[int, str, object]]:
    """``(index, kind, size)`` of every segment of a mixed sequence, after checking
    that ``segments`` is a non-empty list of (kind, size) pairs with kinds in
    ``KINDS`` and a positive int count for text (the grids are checked by the caller,
    which knows its kinds' shapes)."""
    if not isinstance(segments, (list, tuple)) or not segments:
        raise ValueError(
            "segments must be a non-empty list of (kind, size) pairs, e.g. "
            f"{example}, got {segments!r}"
        )
    checked = []
    for index, segment in enumerate(segments):
        if not isinstance(segment, (list, tuple)) or len(segment) != 2:
            raise ValueError(
                f"segments[{index}] must be a (kind, size) pair, got {segment!r}"
            )
        kind, size = segment
        if kind not in KINDS:
            raise ValueError(f"segments[{index}] has kind {kind!r}; kinds are {KINDS}")
        if kind == "text" and (
            isinstance(size, bool) or not isinstance(size, int) or size <= 0
        ):
            raise ValueError(
                f"segments[{index}] ('text') needs a positive int count, got {size!r}"
            )
        checked.append((index, kind, size))
    return checked


def _grid(kind: str, size, index: int, merge: int = 1) -> tuple[int, int, int]:
    """(T, H/merge, W/merge) of a visual segment, checked (H and W divisible by the
    spatial merge)."""
    where = f"segments[{index}] ({kind!r})"
    if not isinstance(size, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size
    ):
        raise ValueError(
            f"{where} needs a grid of positive ints, (T, H, W) for a video and "
            f"(H, W) or (1, H, W) for an image, got {size!r}"
        )
    if kind == "image" and len(size) == 2:
        size = (1, *size)
    if len(size) != 3 or (kind == "image" and size[0] != 1):
        raise ValueError(
            f"{where} needs (T, H, W) for a video or (H, W) / (1, H, W) for an "
            f"image, got {tuple(size)}"
        )
    t, h, w = size
    if h % merge or w % merge:
        raise ValueError(
            f"segments[{index}] has H, W = {h}, {w}, which must be divisible "
            f"by spatial_merge_size = {merge}"
        )
    return t, h // merge, w // merge


def mrope_position_ids(
    segments: Sequence[tuple[str, object]],
    spatial_merge_size: int = 1,
    time_interval: float = 1.0,
) -> torch.Tensor:
    """``(n, 3)`` int64 (t, h, w) coordinates for a sequence of text, image and video
    segments, laid out as Qwen2-VL's ``get_rope_index``.

    ``segments``: ``("text", n)`` for n text tokens (in Qwen's chat format the
    ``<|vision_start|>`` / ``<|vision_end|>`` tokens around a visual segment are text);
    ``("image", (H, W))`` or ``("image", (1, H, W))``; ``("video", (T, H, W))``. Grids
    count patches as in Qwen's ``image_grid_thw`` / ``video_grid_thw``: with
    ``spatial_merge_size`` m (2 in Qwen2-VL, whose merger fuses 2 x 2 patches into one
    token) the segment has T * (H/m) * (W/m) tokens, on the merged grid, frames outer,
    rows, then columns. ``time_interval`` (Qwen2.5-VL's ``second_per_grid_t *
    tokens_per_second``) spaces a video's frames: t = floor(k * time_interval).

    >>> mrope_position_ids([("video", (3, 2, 2)), ("text", 5)])[-5:, 0].tolist()
    [3, 4, 5, 6, 7]
    """
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    if (
        isinstance(time_interval, bool)
        or not isinstance(time_interval, (int, float))
        or not (math.isfinite(time_interval) and time_interval > 0)
    ):
        raise ValueError(
            f"time_interval must be a finite number > 0, got {time_interval!r}"
        )
    out, start = [], 0
    for index, kind, size in check_segments(
        segments, "[('text', 5), ('image', (4, 6))]"
    ):
        if kind == "text":
            # text: (s + k, s + k, s + k), k = 0 .. n-1
            ids = (start + torch.arange(size))[:, None].expand(size, 3)  # (n, 3)
        else:
            t, h, w = _grid(kind, size, index, merge)
            interval = time_interval if kind == "video" else 1.0
            # t_k = floor(k * interval) (exact for integers: float64)
            frames = torch.floor(torch.arange(t, dtype=torch.float64) * interval).long()
            grid = torch.meshgrid(
                frames, torch.arange(h), torch.arange(w), indexing="ij"
            )
            # vision: (s + t, s + h, s + w), frames outer, then rows, then columns
            ids = start + torch.stack(grid, dim=-1).reshape(-1, 3)  # (T*H*W, 3)
        out.append(ids)
        start = int(ids.max()) + 1  # the next segment starts past every id so far
    return torch.cat(out).long()  # (n, 3)


@register("mrope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> MultimodalRotary:
    return MultimodalRotary(d_model // n_heads)

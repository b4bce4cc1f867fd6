"""Rotary layouts for video: VideoRoPE, per-axis RoPE (FLUX, Wan), RIFLEx, SD3's crop.

Shape letters: b batch, h heads, i/j query/key positions, n tokens, d head dim, a axes.

* **VideoRoPE** (Wei et al. 2025; ``Wiselnn570/VideoRoPE``,
  ``videorope-transformer/modeling_videorope.py``). Two changes to Qwen2-VL's M-RoPE.
  Frequencies (``apply_m_modify_multimodal_rotary_pos_emb``): with sections
  ``[s_t, s_h, s_w]`` the first ``s_h + s_w`` pairs (the fast ones) alternate h, w, h,
  w, ... and the last ``s_t`` pairs (the slowest) turn with t (``videorope_axes``).
  Positions (``get_t_scale_rope_index``): a visual segment starting at ``s`` puts its
  token (tau, eta, omega) of a T x H x W grid at::

      t = s + delta tau,  h = t + eta - floor((H-1)/2),  w = t + omega - floor((W-1)/2)

  (the "diagonal layout": the grid's centre moves along t = h = w, as text does), with
  temporal spacing ``delta`` = 2 in the released code; the next segment starts one past
  the largest *t* (``videorope_position_ids``).
* **Per-axis RoPE** (``axes_rope_frequencies``, ``AxesRotary``): the head is cut into
  one block per axis, block ``a`` of ``axes_dim[a]`` dimensions being a 1-D RoPE of its
  own size, ``theta_k = base^(-2k / axes_dim[a])``, pairs (2k, 2k+1). FLUX: ``axes_dim =
  (16, 56, 56)``, base 10000 (diffusers ``FluxPosEmbed``); Wan: ``wan_rope_split(d)`` =
  ``(d - 4 floor(d/6), 2 floor(d/6), 2 floor(d/6))`` for (t, h, w), (44, 42, 42) at
  d = 128 (diffusers ``WanRotaryPosEmbed``).
* **RIFLEx** (Zhao et al. 2025; ``thu-ml/RIFLEx``, ``riflex_utils.py``): the temporal
  frequency whose period ``N_k = round(2 pi / theta_k)`` is nearest the frame where a
  generated video starts to repeat is the *intrinsic* one (``riflex_intrinsic_index``);
  to generate ``L`` latent frames it is lowered to ``0.9 * 2 pi / L`` so that ``L``
  frames stay inside one period (``riflex_frequencies``).
* **SD3** (diffusers ``PatchEmbed``, ``pos_embed_max_size``): a fixed 2-D sin-cos table
  over a ``max x max`` grid at coordinates ``k / (max / base_size)``, from which an
  ``H x W`` image takes the centred crop (``sd3_cropped_sincos``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int
from .mrope import MultimodalRotary, _check_section, _grid, check_segments
from .rope import LAYOUTS
from .rope2d import apply_rotary_angles, rotary_angles
from .sincos2d import sinusoidal_2d_at

__all__ = [
    "videorope_axes",
    "videorope_position_ids",
    "VideoRotary",
    "axes_rope_frequencies",
    "flux_rope_frequencies",
    "wan_rope_split",
    "pixtral_frequencies",
    "AxesRotary",
    "riflex_intrinsic_index",
    "riflex_frequencies",
    "sd3_patch_coordinates",
    "sd3_cropped_sincos",
    "qwen3vl_timestamps",
]


def _check_number(value, name: str, low: float = 0.0) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > low)
    ):
        raise ValueError(f"{name} must be a finite number > {low:g}, got {value!r}")
    return float(value)


# ---------------------------------------------------------------- VideoRoPE


def videorope_axes(mrope_section: Sequence[int]) -> torch.Tensor:
    """``(d/2,)`` int64 axis (0 = t, 1 = h, 2 = w) of each pair, VideoRoPE's layout:
    ``[1, 2, 1, 2, ...]`` over the first ``s_h + s_w`` pairs, then ``[0] * s_t``.

    Only ``s_h + s_w`` matters: VideoRoPE merges the spatial sections and alternates.
    """
    s_t, s_h, s_w = _check_section(mrope_section)
    # pair j < s_h + s_w: h if j even, w if odd; then t on the slowest s_t pairs
    hw = 1 + torch.arange(s_h + s_w) % 2  # (s_h + s_w,)
    return torch.cat([hw, torch.zeros(s_t, dtype=torch.long)])  # (d/2,)


def videorope_position_ids(
    segments: Sequence[tuple[str, object]],
    spatial_merge_size: int = 1,
    temporal_spacing: float = 2.0,
) -> torch.Tensor:
    """``(n, 3)`` (t, h, w) ids laid out as VideoRoPE's ``get_t_scale_rope_index``.

    ``segments`` as ``mrope_position_ids``: ``("text", n)``, ``("image", (H, W))``,
    ``("video", (T, H, W))`` in patches. A text token counts on from ``s``; a visual
    segment starting at ``s`` puts (tau, eta, omega) at ``t = s + delta tau``, ``h = t +
    eta - (H'-1)//2``, ``w = t + omega - (W'-1)//2`` on the merged grid (H' = H/m); the
    next segment starts at one past the largest t. int64 when every id is an integer
    (``delta`` integral), float64 otherwise (the reference computes in float).

    A sequence that starts with a video or an image has h, w below 0 there (``s =
    0``, ``eta < (H'-1)//2``), which the authors' RoPE rotates by negative angles and
    this library's positions (>= 0) refuse: every id is then shifted by the same
    constant on all three axes, so that the smallest is 0. RoPE depends only on the
    offsets, which the shift keeps, so every attention score is the authors'.
    """
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    delta = _check_number(temporal_spacing, "temporal_spacing")
    out, start = [], 0.0
    example = "[('text', 5), ('video', (4, 6, 6))]"
    for index, kind, size in check_segments(segments, example):
        if kind == "text":
            # text: (s + k, s + k, s + k)
            t = start + torch.arange(size, dtype=torch.float64)
            ids = torch.stack([t, t, t], dim=-1)  # (n, 3)
        else:
            frames, hh, ww = _grid(kind, size, index, merge)
            tau, eta, omega = torch.meshgrid(
                *(torch.arange(s, dtype=torch.float64) for s in (frames, hh, ww)),
                indexing="ij",
            )
            # t = s + delta tau;  h = t + eta - (H'-1)//2;  w = t + omega - (W'-1)//2
            t = start + delta * tau
            ids = torch.stack(
                [t, t + eta - (hh - 1) // 2, t + omega - (ww - 1) // 2], dim=-1
            ).reshape(-1, 3)  # (T H' W', 3)
        out.append(ids)
        start = float(ids[:, 0].max()) + 1  # one past the largest t
    ids = torch.cat(out)  # (n, 3)
    # a visual segment first: h, w < 0; one shift on every axis keeps every offset
    ids = ids - min(float(ids.min()), 0.0)
    return ids.long() if torch.equal(ids, ids.round()) else ids


class VideoRotary(MultimodalRotary):
    """VideoRoPE: M-RoPE's rotation with VideoRoPE's assignment of pairs to axes
    (``videorope_axes``: h, w alternating on the fast pairs, t on the slowest).
    Positions ``(b, n, 3)`` integers, as ``videorope_position_ids`` lays them out.
    Paper: Wei et al., 2025."""

    def __init__(
        self,
        d_head: int,
        mrope_section: Sequence[int] | None = None,
        base: float = 10000.0,
    ):
        super().__init__(d_head, mrope_section, base)
        self.register_buffer(
            "axes", videorope_axes(self.mrope_section), persistent=False
        )  # (d/2,)

    def example_positions(self, b, n, generator=None):
        """Text, then a 2 x 3 x 3 video, cut or continued with text to ``n``."""
        ids = videorope_position_ids([("text", 2), ("video", (2, 3, 3)), ("text", 2)])
        if len(ids) < n:
            tail = torch.arange(n - len(ids)) + int(ids[:, 0].max()) + 1  # text
            ids = torch.cat([ids, tail[:, None].expand(-1, 3)])
        return ids[:n].expand(b, n, 3)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, mrope_section={self.mrope_section}, "
            f"base={self.base:g}"
        )


# ---------------------------------------------------------------- per-axis RoPE


def _check_axes_dim(axes_dim) -> list[int]:
    if (
        not isinstance(axes_dim, (list, tuple))
        or not axes_dim
        or not all(
            isinstance(a, int) and not isinstance(a, bool) and a > 0 and a % 2 == 0
            for a in axes_dim
        )
    ):
        raise ValueError(
            "axes_dim must be a non-empty list of even ints > 0 (head dimensions per "
            f"axis, summing to d_head), got {axes_dim!r}"
        )
    return list(axes_dim)


def axes_rope_frequencies(
    axes_dim: Sequence[int], base: float = 10000.0
) -> torch.Tensor:
    """``(a, d/2)`` float64 (``d = sum(axes_dim)``): axis ``a`` turns its own block of
    ``axes_dim[a] / 2`` pairs at ``base^(-2k / axes_dim[a])``, 0 elsewhere (a 1-D RoPE
    per block, as diffusers' ``get_1d_rotary_pos_embed`` per axis)."""
    dims = _check_axes_dim(axes_dim)
    base = _check_number(base, "base", 1.0)
    freqs = torch.zeros(len(dims), sum(dims) // 2, dtype=torch.float64)
    start = 0
    for a, dim in enumerate(dims):
        # theta_k = base^(-2k / dim_a),  k = 0 .. dim_a/2 - 1
        k = torch.arange(0, dim, 2, dtype=torch.float64)
        freqs[a, start : start + dim // 2] = base ** (-k / dim)
        start += dim // 2
    return freqs  # (a, d/2)


def flux_rope_frequencies(
    axes_dim: Sequence[int] = (16, 56, 56), base: float = 10000.0
) -> torch.Tensor:
    """FLUX's ``(3, 64)`` frequencies: ``axes_rope_frequencies((16, 56, 56), 10000)``
    (diffusers ``FluxTransformer2DModel``: ``FluxPosEmbed(theta=10000,
    axes_dim=axes_dims_rope)``)."""
    return axes_rope_frequencies(axes_dim, base)


def wan_rope_split(d_head: int) -> tuple[int, int, int]:
    """Wan's (t, h, w) head dimensions: ``h = w = 2 floor(d/6)``, ``t = d - h - w``
    (diffusers ``WanRotaryPosEmbed``; (44, 42, 42) for d = 128)."""
    check_positive_int(d_head, "d_head")
    if d_head % 2 or d_head < 6:
        raise ValueError(f"d_head must be even and >= 6 for Wan's split, got {d_head}")
    # h = w = 2 * (d // 6),  t = d - 4 * (d // 6)
    hw = 2 * (d_head // 6)
    return d_head - 2 * hw, hw, hw


def pixtral_frequencies(d_head: int, base: float = 10000.0) -> torch.Tensor:
    """``(2, d/2)`` (row, col) frequencies of Pixtral's vision encoder (transformers
    ``PixtralVisionRotaryEmbedding``): with ``theta_i = base^(-2i/d)``, the row turns
    pairs ``k < d/4`` at ``theta_{2k}``, the column pairs ``d/4 + k`` at
    ``theta_{2k+1}`` (``rotate_half`` layout)."""
    check_positive_int(d_head, "d_head")
    if d_head % 4:
        raise ValueError(f"d_head must be divisible by 4, got {d_head}")
    # theta_i = base^(-2i/d)
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    freqs = torch.zeros(2, d_head // 2, dtype=torch.float64)
    freqs[0, : d_head // 4], freqs[1, d_head // 4 :] = theta[0::2], theta[1::2]
    return freqs  # (2, d/2)


class AxesRotary(PositionalEncoding):
    """RoPE with one block per axis (``axes_rope_frequencies``): positions ``(b, n,
    a)`` integers, ``a = len(axes_dim)``; no parameters. FLUX: ``AxesRotary((16, 56,
    56))`` with ids (0, row, col) for image tokens and (0, 0, 0) for text; Wan:
    ``AxesRotary(wan_rope_split(128))`` with (frame, row, col).
    Paper: Team Wan, 2025 (Wan; FLUX likewise)."""

    four_terms = {
        "content-content": "kept, rotated per axis block: depends on the offsets",
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        axes_dim: Sequence[int],
        base: float = 10000.0,
        layout: str = "interleaved",
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.axes_dim, self.base, self.layout = _check_axes_dim(axes_dim), base, layout
        self.coord_axes = len(self.axes_dim)
        self.d_head = sum(self.axes_dim)
        freqs = axes_rope_frequencies(self.axes_dim, base)  # (a, d/2)
        self.register_buffer("freqs", freqs, persistent=False)

    def _coords(self, pos):
        if not isinstance(pos, torch.Tensor) or pos.dim() != 3:
            raise ValueError(
                f"AxesRotary takes coordinates (b, n, {self.coord_axes}), got shape "
                f"{tuple(getattr(pos, 'shape', ()))}"
            )
        if pos.shape[-1] != self.coord_axes:
            raise ValueError(
                f"AxesRotary was built for {self.coord_axes} axes (axes_dim "
                f"{self.axes_dim}); pos has {pos.shape[-1]}"
            )
        return pos

    def transform_qk(self, q, k, q_pos, k_pos):
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q has head dimension {q.shape[-1]}, but this AxesRotary was built "
                f"for sum(axes_dim) = {self.d_head}"
            )
        qa = rotary_angles(self._coords(q_pos), self.freqs)  # (b, 1, i, d/2)
        ka = rotary_angles(self._coords(k_pos), self.freqs)  # (b, 1, j, d/2)
        return (
            apply_rotary_angles(q, qa, self.layout),
            apply_rotary_angles(k, ka, self.layout),
        )

    def extra_repr(self) -> str:
        return f"axes_dim={self.axes_dim}, base={self.base:g}, layout={self.layout!r}"


# ---------------------------------------------------------------- RIFLEx


def riflex_intrinsic_index(base: float, dim: int, first_repeat: int) -> tuple[int, int]:
    """``(k, N_k)``: the 1-based index of the frequency whose period ``N_j =
    round(2 pi / theta_j)``, ``theta_j = base^(-2(j-1)/dim)``, is nearest the frame
    ``first_repeat`` where generation repeats (RIFLEx's ``identify_k``; first on
    ties)."""
    base = _check_number(base, "base", 1.0)
    check_positive_int(dim, "dim")
    check_positive_int(first_repeat, "first_repeat")
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    # N_j = round(2 pi / theta_j),  theta_j = base^(-2(j-1)/dim)
    periods = [round(2 * math.pi * base ** (2 * j / dim)) for j in range(dim // 2)]
    gaps = [abs(p - first_repeat) for p in periods]
    k = gaps.index(min(gaps)) + 1
    return k, periods[k - 1]


def riflex_frequencies(
    dim: int, base: float, k: int, frames: int, margin: float = 0.9
) -> torch.Tensor:
    """``(dim/2,)`` float64 RoPE frequencies with the ``k``-th (1-based) lowered so
    that ``frames`` positions stay within ``margin`` of one period:
    ``theta'_k = margin * 2 pi / frames`` (RIFLEx's ``get_1d_rotary_pos_embed_riflex``;
    margin 0.9 there)."""
    check_positive_int(dim, "dim")
    check_positive_int(frames, "frames")
    check_positive_int(k, "k")
    if dim % 2 or k > dim // 2:
        raise ValueError(f"need an even dim and 1 <= k <= dim/2, got {dim=} and {k=}")
    margin = _check_number(margin, "margin")
    # theta_j = base^(-2j/dim),  j = 0 .. dim/2 - 1
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    # theta'_k = margin * 2 pi / L
    freqs[k - 1] = margin * 2 * math.pi / frames
    return freqs  # (dim/2,)


# ---------------------------------------------------------------- SD3


def sd3_patch_coordinates(
    height: int, width: int, pos_embed_max_size: int = 96, base_size: int = 64
) -> torch.Tensor:
    """``(height * width, 2)`` float64 (row, col) coordinates SD3 gives an ``height x
    width`` patch grid: the centred crop of the ``max x max`` grid at coordinates
    ``k * base_size / max`` (diffusers ``get_2d_sincos_pos_embed`` with ``base_size =
    sample_size / patch_size``, then ``PatchEmbed.cropped_pos_embed``)."""
    size = check_positive_int(pos_embed_max_size, "pos_embed_max_size")
    check_positive_int(base_size, "base_size")
    for name, value in (("height", height), ("width", width)):
        if check_positive_int(value, name) > size:
            raise ValueError(
                f"{name} = {value} patches exceeds pos_embed_max_size = {size}"
            )
    # crop offsets: top = (max - H) // 2, left = (max - W) // 2
    top, left = (size - height) // 2, (size - width) // 2
    # grid coordinate k / (max / base_size)
    rows = (top + torch.arange(height, dtype=torch.float64)) / (size / base_size)
    cols = (left + torch.arange(width, dtype=torch.float64)) / (size / base_size)
    r, c = torch.meshgrid(rows, cols, indexing="ij")
    return torch.stack([r, c], dim=-1).reshape(-1, 2)  # (H W, 2)


def sd3_cropped_sincos(
    dim: int,
    height: int,
    width: int,
    pos_embed_max_size: int = 96,
    base_size: int = 64,
) -> torch.Tensor:
    """``(height * width, dim)`` float64: SD3's table for an ``height x width`` patch
    grid, ``[sin c w | cos c w | sin r w | cos r w]`` (columns first, as MAE) at
    ``sd3_patch_coordinates``."""
    rc = sd3_patch_coordinates(height, width, pos_embed_max_size, base_size)
    return sinusoidal_2d_at(rc.flip(-1), dim)  # (H W, D): the column block first


# ---------------------------------------------------------------- Qwen3-VL


def qwen3vl_timestamps(
    frame_indices: Sequence[int], fps: float, temporal_patch_size: int = 2
) -> list[float]:
    """Seconds that Qwen3-VL writes before each temporal patch (``<t seconds>``, one
    decimal): the mean time of its first and last frame, ``frame / fps``, the last
    frame repeated to fill the last patch (``Qwen3VLProcessor._calculate_timestamps``).
    """
    fps = _check_number(fps, "fps")
    m = check_positive_int(temporal_patch_size, "temporal_patch_size")
    idx = list(frame_indices)
    if not idx:
        raise ValueError("frame_indices must not be empty")
    idx += [idx[-1]] * (-len(idx) % m)
    # (t_first + t_last) / 2 over each patch of m frames
    return [(idx[i] / fps + idx[i + m - 1] / fps) / 2 for i in range(0, len(idx), m)]


@register("videorope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> VideoRotary:
    return VideoRotary(d_model // n_heads)


@register("rope_axes")
def _make_axes(*, d_model: int, n_heads: int, max_len: int) -> AxesRotary:
    return AxesRotary(wan_rope_split(d_model // n_heads))

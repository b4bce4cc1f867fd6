"""The band-bias form: ``score_bias`` restated as a function of the distance alone,
constant beyond a band (``pe.band_bias``: T5's buckets), run as a mask that is a
view of one band.

The identity that makes it exact: on every key j that query i sees,
``score_bias_ij = u_i + c[:, min(i - j, W)]``, and the softmax of a row drops a
constant, so the kernel may see::

    bias_ij = c[:, i - j] - c[:, W]  (i - j < W),   0  (i - j >= W)

which is 0 beyond the band. The queries go in blocks, each against the keys it sees,
its mask a view of one Toeplitz band (``distance_band``):

* on a CPU, one autograd step (``FlashBlocks`` with ``BandBiasOnCpu``) runs the
  blocks through the flash kernel and sums the bias's gradient over the W diagonals
  nearest the queries only (``band_gradient``);
* elsewhere, each block is one ``scaled_dot_product_attention`` call whose mask
  needs a gradient (the memory-efficient kernel differentiates it on a GPU),
  recomputed in the backward pass, so that no block's mask is kept.

Nothing ``n x n`` is built or kept. Causal calls in token order with no other mask,
outside ``torch.compile`` (which traces the float mask of ``score_bias``).

Proved equal to the reference (outputs, gradients, every dtype and device) by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..utils import compiling
from .band_gradient import BAND_ROWS, band_gradient
from .blocks import FlashBlocks, block_of, query_blocks, recomputed_blocks
from .kernel import as_wide, cpu_flash

NAME, HOOK = "band_bias", "band_bias"
BLOCK = 128  # queries per kernel call (measured: 256 is slower)


def why_not(pe, call) -> str | None:
    """Why this form does not run ``call`` (a ``forms.Call``) of ``pe``, or None."""
    if call.compiling:
        return "under torch.compile, which traces score_bias's float mask"
    return None


def attend(q, k, v, pe, pos, ctx, scale) -> torch.Tensor | None:
    """The call through this form, or None where ``pe.band_bias`` returns None."""
    c = pe.call_hook("band_bias", q, k, pos.q, pos.k, ctx=ctx)
    return None if c is None else band_bias_blocks(q, k, v, c, scale)


def band_bias_blocks(q, k, v, c, scale) -> torch.Tensor:
    """Causal attention in token order over a run of positions, with the bias ``c``
    ``(h|1, W + 1)``: ``c[:, r]`` for distance ``r < W``, ``c[:, W]`` beyond.
    ``(b, h, i, e)``."""
    i, j = q.shape[2], k.shape[2]
    # c[:, r] - c[:, W] for the distances this call holds (at most j - 1); a head
    # whose c[:, W] is -inf (no attention beyond the band) keeps c as it is and
    # -inf beyond the band, where c - (-inf) would be inf or NaN
    far = c[:, -1:]  # (h|1, 1)
    finite = torch.isfinite(far)
    near = torch.where(finite, c[:, :-1] - far, c[:, :-1])[:, :j].to(q.dtype)
    beyond = torch.zeros_like(far).masked_fill(~finite, float("-inf")).to(q.dtype)
    if cpu_flash(q):
        return FlashBlocks.apply(BandBiasOnCpu, q, k, v, near, scale, beyond)
    band = distance_band(near, min(BLOCK, i), j, beyond)  # (1, h|1, rows, j + rows)
    return recomputed_blocks(_band_block, BLOCK, q, k, v, band, scale)


def _band_block(q, k, v, band, start: int, stop: int, scale) -> torch.Tensor:
    """Queries ``start .. stop - 1`` against the keys they see, the band's bias as
    their mask: ``(b, h, stop - start, e)``."""
    block = block_of(q.shape[2], k.shape[2], start, stop)
    return F.scaled_dot_product_attention(
        q[:, :, start:stop], k[:, :, : block.seen], v[:, :, : block.seen],
        attn_mask=block.of_band(band), scale=scale,
    )  # fmt: skip


def distance_band(near, rows: int, j: int, beyond=None) -> torch.Tensor:
    """``(1, h|1, rows, j + rows)``: for a query ``r`` of a block and column ``c``
    (key ``c - j + offset`` of a block at key offset ``offset``), the bias at
    distance ``r + j - c``: ``near[:, r + j - c]`` within the band, ``beyond``
    ``(h|1, 1)`` beyond it (0 unless given: -inf for a head that attends to
    nothing there), ``-inf`` for a later key. A Toeplitz matrix: windows of one
    line of values."""
    hh, width = near.shape
    # line[x] = the bias at distance j + rows - 1 - x, for x = 0 .. j + 2 rows - 2
    far = near.new_zeros(hh, max(j + rows - width, 0))  # distances from W on: 0
    if beyond is not None:
        far = far + beyond  # or -inf
    future = near.new_full((hh, rows - 1), float("-inf"))  # distances -1 .. 1 - rows
    line = torch.cat([far, near.flip(-1)[:, -(j + rows) :], future], dim=-1)
    # band[r, c] = line[c - r + rows - 1]: window rows - 1 - r of the line
    windows = line.unfold(1, j + rows, 1)  # windows[:, w, c] = line[:, w + c]
    # the rows in reverse, copied row by row (flip would copy column by column)
    reverse = torch.arange(rows - 1, -1, -1, device=near.device)
    return windows.index_select(1, reverse)[None]  # (1, h|1, rows, j + rows)


class BandBiasOnCpu:
    """The band-bias form for ``FlashBlocks``: q, k and v equally wide, every
    block's mask a view of one band (rows for the kernel's blocks and the
    gradient's), and the bias's gradient from the W diagonals only."""

    @staticmethod
    def prepare(q, k, v, near, scale, beyond):
        rows = max(min(BLOCK, q.shape[2]), BAND_ROWS)
        return (*as_wide(q, k, v), distance_band(near, rows, k.shape[2], beyond))

    @staticmethod
    def calls(state, q, k, v, near, scale):
        q_, k_, values, band = state
        for block in query_blocks(q.shape[2], k.shape[2], BLOCK):
            keys = slice(0, block.seen)
            yield (
                block, q_[:, :, block.start : block.stop], k_[:, :, keys],
                values[:, :, keys], block.of_band(band),
            )  # fmt: skip

    @staticmethod
    def grad_block(d_near, block, dk1, d, scale):
        """Nothing per block: the gradient is summed on the diagonals after."""

    @staticmethod
    def grad_rest(d_near, state, q, k, v, grad, out, lse, scale):
        e, band = v.shape[-1], state[-1]
        return band_gradient(q, k, v, grad, out[..., :e], lse, band, scale, d_near)

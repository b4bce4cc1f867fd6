"""The key-bias form: ``score_bias`` restated as a term of the key alone
(``pe.key_bias``: FoX's ``c_i - c_j``, ALiBi's ``-m (i - j)``), run as one more
dimension of q and k.

The identity that makes it exact: on every key j that query i sees,
``score_bias_ij = u_i + w_j``, the softmax of a row drops ``u_i``, and for a block
of queries whose middle query's key is m::

    q_i . k_j * scale + w_j - w_m = (q_i, 1/scale) . (k_j, w_j - w_m) * scale

(``w_m`` is one constant per row, which the softmax drops too). The kernel computes
it and its gradient; nothing ``n x n`` is built, forward or backward. ``w`` is
recentred per block (in its own precision, then rounded), so that the keys near the
block, where the softmax's mass is, keep their digits. In half precision the term is
two columns (``bias_columns``). Causal calls in token order with no other mask.

Proved equal to the reference (outputs, gradients, every dtype and device) by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..utils import compiling
from .blocks import FlashBlocks, block_of, query_blocks, recomputed_blocks
from .kernel import aligned, as_wide_as, cpu_flash, triangle

NAME, HOOK = "key_bias", "key_bias"
BLOCK = 128  # queries per call: the term is recentred per block, so its rounding
# grows with the block's span (float32: 5e-6 at 128, 1e-5 at 256 for FoX's gates at
# initialisation, n = 1024)
# the dtypes in which a key_bias runs as columns of q and k: float32's range (8 bits
# of exponent). In float16 (largest 65504) the key term of a long sequence does not
# fit (FoX's w_j - w_m, far keys of ALiBi), so its score_bias stays a float mask there
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def why_not(pe, call) -> str | None:
    """Why this form does not run ``call`` (a ``forms.Call``) of ``pe``, or None."""
    if call.dtype not in DTYPES:
        return f"q, k, v are {call.dtype}: the key term needs float32's range"
    return None


def attend(q, k, v, pe, pos, ctx, scale) -> torch.Tensor | None:
    """The call through this form, or None where ``pe.key_bias`` returns None."""
    w = pe.call_hook("key_bias", q, k, pos.q, pos.k, ctx=ctx)
    return None if w is None else key_bias_blocks(q, k, v, w, scale)


def key_bias_blocks(q, k, v, w, scale) -> torch.Tensor:
    """Causal attention in token order with the bias ``u_i + w_j`` (``w`` ``(b|1,
    h|1, j)``): on a CPU through the flash kernel (``FlashBlocks``); elsewhere each
    block one ``scaled_dot_product_attention`` call on q, k and v padded to a width
    the fused kernels take (``aligned``), recomputed in the backward pass.
    ``(b, h, i, e)``."""
    b, h, i, d = q.shape
    w = w.expand(b, h, k.shape[2])
    if cpu_flash(q) and not compiling():  # torch.compile traces the plain blocks
        return FlashBlocks.apply(KeyBiasOnCpu, q, k, v, w, scale)
    return recomputed_blocks(_attend_block, BLOCK, q, k, v, w, scale)


def bias_columns(rel: torch.Tensor, dtype: torch.dtype, scale: float):
    """``(one, columns)``: the value of the queries' constant columns and the keys'
    columns ``(..., parts)`` in ``dtype`` whose products, scaled, give the bias
    ``rel``: ``scale * sum_p one * columns[..., p] = rel``.

    float32 and float64: one column, ``rel`` against ``1/scale``. Half precision
    keeps 8 (bfloat16) or 11 bits, too few for a bias: two columns, ``hi`` = ``rel /
    scale`` rounded to ``dtype`` and ``lo`` = what ``hi`` missed, rounded, against
    queries of exactly 1, so that the kernel, which accumulates in float32, sees the
    bias to about 16 bits. Where ``hi`` overflows (a far key's bias below the dtype's
    range: weight 0 either way) ``lo`` is 0, not ``inf - inf``."""
    if bias_parts(dtype) == 1:
        return bias_one(dtype, scale), rel.to(dtype)[..., None]
    exact = rel / scale
    hi = exact.to(dtype)
    lo = torch.where(torch.isfinite(hi), exact - hi.to(exact.dtype), 0.0).to(dtype)
    return bias_one(dtype, scale), torch.stack([hi, lo], dim=-1)


def bias_parts(dtype: torch.dtype) -> int:
    """How many columns ``bias_columns`` gives a bias in ``dtype``."""
    return 1 if dtype in (torch.float32, torch.float64) else 2


def bias_one(dtype: torch.dtype, scale: float) -> float:
    """The value of the queries' columns against ``bias_columns``' in ``dtype``."""
    return 1.0 / scale if bias_parts(dtype) == 1 else 1.0


def key_columns(w, block, dtype, scale) -> torch.Tensor:
    """The keys' columns ``(b, h, seen, parts)`` for ``block``: ``w_j - w_middle``,
    exact where it matters, near the block's own keys (in ``w``'s precision)."""
    rel = w[..., : block.seen] - w[..., block.middle : block.middle + 1]
    return bias_columns(rel, dtype, scale)[1]


def _attend_block(q, k, v, w, start: int, stop: int, scale) -> torch.Tensor:
    """Queries ``start .. stop - 1`` through ``scaled_dot_product_attention``:
    ``(b, h, stop - start, e)``."""
    q1, k1, v1 = aligned(*block_inputs(q, k, v, w, start, stop, scale))
    # the block's queries are the last of the keys it sees: token order
    out = F.scaled_dot_product_attention(
        q1, k1, v1, attn_mask=triangle(q1, k1), scale=scale
    )
    return out[..., : v.shape[-1]]  # the padded columns dropped


def block_inputs(q, k, v, w, start: int, stop: int, scale):
    """Queries ``start .. stop - 1``: ``(q1, k1, v1)``, q and k with the key-bias
    columns, v the values of the keys the block sees."""
    block = block_of(q.shape[2], k.shape[2], start, stop)
    columns = key_columns(w, block, q.dtype, scale)  # (b, h, seen, parts)
    k1 = torch.cat([k[:, :, : block.seen], columns], dim=-1)  # (b, h, seen, d + p)
    rows = q[:, :, start:stop]
    one = torch.full(
        (*rows.shape[:3], columns.shape[-1]), bias_one(q.dtype, scale),
        dtype=q.dtype, device=q.device,
    )  # fmt: skip
    q1 = torch.cat([rows, one], dim=-1)  # (b, h, stop - start, d + parts)
    return q1, k1, v[:, :, : block.seen]


class KeyBiasOnCpu:
    """The key-bias form for ``FlashBlocks``: the keys get their extra columns in
    one buffer, which each block rewrites (so a block's views are valid until the
    next one is made), and every block's mask is a view of one band, 0 where query
    t sees key s: nothing is copied per block."""

    @staticmethod
    def prepare(q, k, v, w, scale):
        b, h, i, d = q.shape
        j, e, dtype = k.shape[2], v.shape[-1], q.dtype
        parts = bias_parts(dtype)
        width = max(d + parts, e)  # the kernel wants q, k, v equally wide
        keys = as_wide_as(k, width)  # (b, h, j, width): columns d .. per block
        values = as_wide_as(v, width)
        rows = min(BLOCK, i)
        # band[r, c] = 0 where c <= r + j, else -inf (Block.of_band)
        r = torch.arange(rows, device=q.device)[:, None]
        c = torch.arange(j + rows, device=q.device)[None, :]
        band = torch.zeros((), dtype=dtype, device=q.device).masked_fill(
            c > r + j, float("-inf")
        )  # (rows, j + rows)
        one = q.new_zeros(b, h, rows, width - d)  # the queries' extra columns
        one[..., :parts] = bias_one(dtype, scale)  # against the bias's columns
        return keys, values, band, one

    @staticmethod
    def calls(state, q, k, v, w, scale):
        keys, values, band, one = state
        d, parts = q.shape[-1], bias_parts(q.dtype)
        for block in query_blocks(q.shape[2], k.shape[2], BLOCK):
            seen, n_rows = block.seen, block.stop - block.start
            keys[..., :seen, d : d + parts] = key_columns(w, block, q.dtype, scale)
            q1 = torch.cat([q[:, :, block.start : block.stop], one[:, :, :n_rows]], -1)
            yield block, q1, keys[:, :, :seen], values[:, :, :seen], block.of_band(band)

    @staticmethod
    def grad_block(dw, block, dk1, d, scale):
        """Back through k1's column ``(w - w_middle) / (one * scale)``."""
        column = dk1[..., d].to(dw.dtype) / (bias_one(dk1.dtype, scale) * scale)
        dw[..., : block.seen] += column
        dw[..., block.middle] -= column.sum(-1)

    @staticmethod
    def grad_rest(dw, state, q, k, v, grad, out, lse, scale):
        return dw

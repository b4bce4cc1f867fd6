"""The fused backend: PyTorch's ``scaled_dot_product_attention``.

It computes ``softmax(q k^T * scale + mask) v`` in one kernel, so it runs every
encoding that overrides nothing past ``score_bias``: the bias and the mask go in as
one float mask. It costs what the maths costs:

* causal attention in token order (``Positions.ordered``) builds nothing ``n x n``
  without a bias: the kernel's own causal mode (or a small triangle for a KV cache);
* with a bias, the queries go in blocks, each against only the keys it can see (on
  a CPU, a bias that needs a gradient too: the same maths, explicitly, since its
  kernels do not differentiate a mask);
* a bias in the encoding's ``reuse`` is built once per forward pass, merged with its
  mask, and shared by every layer;
* a bias that is a term of the key alone up to a term of the query (``key_bias``:
  FoX's ``c_i - c_j``) is one more dimension of q and k (two in bfloat16:
  ``bias_columns``), so the kernel differentiates it and nothing ``n x n`` is
  built; attention sinks (``sink_logits``) are one more key, of value 0, that every
  query sees, first, in the same blocks (every dtype). In float16 a key term keeps
  the float mask: its range cannot hold the term of a long sequence;
* q, k and v widened by such columns (d + 1, d + 2) are padded to a width the GPU's
  fused kernels take (``aligned``: a multiple of 8, exact), else the math kernel
  would run them;
* a bias of the distance alone, constant beyond a band (``band_bias``: T5's
  buckets) is 0 beyond the band once the constant is dropped: the kernel reads it
  as a mask, in blocks of queries, and on a CPU its gradient is summed over the
  band's diagonals only;
* an encoding's own algorithm (``causal_attention``: stick-breaking, CoPE) runs the
  causal calls in token order that it serves;
* values transformed by their key's position and outputs by their query's
  (``transform_v``, ``transform_out``: DeepSeek-V4's rotated values) need nothing
  here: both act per token, so ``sum_j a_ij (T_j v_j)`` is the kernel's output for
  the values ``T_j v_j``, and ``U_i`` is applied to it. ``posenc_lib.attention``
  calls them around every backend (``tests/test_registry.py`` holds outputs and
  gradients equal to the reference).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..base import Context, PositionalEncoding, overrides
from ..positions import Positions
from ..utils import compiling

BLOCK = 256  # queries per kernel call on the causal path with a bias (measured)
BAND_BLOCK = 128  # queries per kernel call with a band_bias (measured: 256 is slower)
KEY_BIAS_BLOCK = 128  # queries per call with a key_bias: the term is recentred per
# block, so its rounding grows with the block's span (float32: 5e-6 at 128, 1e-5 at
# 256 for FoX's gates at initialisation, n = 1024)
# the dtypes in which a key_bias runs as columns of q and k: float32's range (8 bits
# of exponent). In float16 (largest 65504) the key term of a long sequence does not
# fit (FoX's w_j - w_m, far keys of ALiBi), so its score_bias stays a float mask there
KEY_BIAS_DTYPES = (torch.float32, torch.float64, torch.bfloat16)
ALIGN = 8  # head widths the fused GPU kernels take: flash attention and cuDNN's a
# multiple of 8 (q, k and v alike, for flash), the memory-efficient kernel a multiple
# of 16 bytes (8 in half precision, 4 in float32); otherwise the math kernel runs


def aligned(q, k, v):
    """q, k and v padded with zero columns to one width, the multiple of ``ALIGN``
    at or above the widest, which every fused kernel takes: zeros in q and k add
    nothing to any ``q_i . k_j``, and v's zero columns give output columns that the
    caller drops (``out[..., :e]``). Exact, forward and backward (the gradient of a
    padded column is dropped with it)."""
    width = -(-max(q.shape[-1], k.shape[-1], v.shape[-1]) // ALIGN) * ALIGN
    return _as_wide_as(q, width), _as_wide_as(k, width), _as_wide_as(v, width)


def bias_columns(rel: torch.Tensor, dtype: torch.dtype, scale: float):
    """``(one, columns)``: the value of the queries' constant columns and the keys'
    columns ``(..., parts)`` in ``dtype`` whose products, scaled, give the bias
    ``rel``: ``scale * sum_p one * columns[..., p] = rel``.

    float32 and float64: one column, ``rel`` against ``1/scale`` (the identity
    ``key_bias_blocks`` states). Half precision keeps 8 (bfloat16) or 11 bits, too
    few for a bias: two columns, ``hi`` = ``rel / scale`` rounded to ``dtype`` and
    ``lo`` = what ``hi`` missed, rounded, against queries of exactly 1, so that the
    kernel, which accumulates in float32, sees the bias to about 16 bits. Where
    ``hi`` overflows (a far key's bias below the dtype's range: weight 0 either way)
    ``lo`` is 0, not ``inf - inf``."""
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


def refuses(pe: PositionalEncoding, return_weights: bool, pos=None) -> str | None:
    """Why this backend cannot run ``pe`` (on the call of ``pos``), or None."""
    if return_weights:
        return "path='fast' cannot be used with return_weights"
    if pe.needs_score_path and (pos is None or not pe.runs_fused(pos)):
        own = overrides(pe, "causal_attention")
        return (
            f"path='fast' cannot be used with {type(pe).__name__}, which overrides a "
            "hook past score_bias"
            + (
                " (its causal_attention serves causal calls in token order over a "
                "run of positions, with no other mask)"
                if own
                else ""
            )
        )
    return None


def attend(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context, scale):
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``"""
    keep = None if pos.ordered and pos.user_mask is None else pos.mask
    if pe.needs_score_path:  # refuses() let it through: the encoding's own algorithm
        return pe.call_hook("causal_attention", q, k, v, scale, ctx=ctx)
    if keep is None and pos.ordered:
        if q.dtype in KEY_BIAS_DTYPES:
            w = pe.call_hook("key_bias", q, k, pos.q, pos.k, ctx=ctx)
            if w is not None:
                return key_bias_blocks(q, k, v, w, scale)
        if band_bias_runs(pe):
            c = pe.call_hook("band_bias", q, k, pos.q, pos.k, ctx=ctx)
            if c is not None:
                return band_bias_blocks(q, k, v, c, scale)

    def float_mask():  # bias with -inf where no attention: (b|1, h|1, i, j)
        bias = pe.call_hook("score_bias", q, k, pos.q, pos.k, ctx=ctx)
        if bias is None:
            return keep
        seen = keep if keep is not None or not pos.ordered else triangle(q, k)
        bias = bias.to(q.dtype)
        return bias if seen is None else bias.masked_fill(~seen, float("-inf"))

    if "score_bias" in pe.reuse:
        attn_mask = pos.reuse((pe, "fused mask", q.dtype), float_mask)
    else:
        attn_mask = float_mask()
    sinks = pe.sink_logits() if overrides(pe, "sink_logits") else None
    if sinks is not None:
        if sinks.shape != (q.shape[1],):
            raise ValueError(
                f"q must have {sinks.numel()} heads, one per sink logit of this "
                f"{type(pe).__name__}; got {tuple(q.shape)}"
            )
        return with_sinks(q, k, v, attn_mask, sinks, scale, pos.ordered)
    return run(q, k, v, attn_mask, scale, pos.ordered)


def with_sinks(q, k, v, attn_mask, sinks, scale, ordered: bool) -> torch.Tensor:
    """Attention with one sink logit ``s_h`` per head (``sinks`` ``(h,)``) joined to
    every row's softmax: ``sum_j exp(z_ij) v_j / (exp(s_h) + sum_j exp(z_ij))``.

    The sink is one more key, first in the sequence, that every query sees, with a
    zero value and the score ``s_h``: q and k get one more dimension, ``1 / scale``
    for every query and ``s_h`` for the sink key (0 for the others), so its scaled
    score is exactly ``s_h``. The kernel then differentiates the sinks like any key.
    (The same result is the plain attention rescaled by its log-sum-exp ``L_i``:
    ``o_i * sigmoid(L_i - s_h)``.) ``(b, h, i, e)``.

    Causal in token order with no other mask (every dtype: the sink logits are the
    bias's only values), the sink key goes first into the key-bias blocks
    (``key_bias_blocks``), with the bias ``w = (s_h, 0, ..., 0)``: the call of ``i``
    queries against ``1 + j`` keys is then in token order too, and nothing ``n x n``
    is built, forward or backward (an ``(i, 1 + j)`` mask would be, since the
    kernel's causal mode wants ``i == j``). Otherwise q, k and v are padded to a
    width the kernels take (``aligned``)."""
    b, h, i, d = q.shape
    dtype = q.dtype
    if attn_mask is None and ordered:
        w = F.pad(sinks.double().view(1, h, 1), (0, k.shape[2]))  # (1, h, 1 + j)
        k0 = F.pad(k, (0, 0, 1, 0))  # the sink key first: zeros (b, h, 1 + j, d)
        v0 = F.pad(v, (0, 0, 1, 0))  # and its value
        return key_bias_blocks(q, k0, v0, w, scale)
    one = torch.full((b, h, i, 1), 1.0 / scale, dtype=dtype, device=q.device)
    column = sinks.to(dtype).view(1, h, 1, 1).expand(b, h, 1, 1)  # (b, h, 1, 1)
    sink_key = torch.cat([k.new_zeros(b, h, 1, d), column], dim=-1)  # (b, h, 1, d+1)
    q1 = torch.cat([q, one], dim=-1)  # (b, h, i, d + 1)
    k1 = torch.cat([sink_key, torch.cat([k, k.new_zeros(*k.shape[:3], 1)], -1)], 2)
    v1 = torch.cat([v.new_zeros(b, h, 1, v.shape[-1]), v], dim=2)  # (b, h, 1 + j, e)
    q1, k1, v1 = aligned(q1, k1, v1)  # one width, which the kernels take
    if attn_mask is not None:  # every query sees the sink: 0 (float) or True (bool)
        first = torch.ones_like(attn_mask[..., :1])
        first = first if attn_mask.dtype == torch.bool else first.zero_()
        attn_mask = torch.cat([first.expand(*attn_mask.shape[:-1], 1), attn_mask], -1)
    out = run(q1, k1, v1, attn_mask, scale, ordered)  # ordered: i queries, 1 + j keys
    return out[..., : v.shape[-1]]  # (b, h, i, e)


def band_bias_blocks(q, k, v, c, scale) -> torch.Tensor:
    """Causal attention in token order over a run of positions, with a bias of the
    distance alone that is constant beyond a band (``band_bias``: ``c`` ``(h|1,
    W + 1)``, ``c[:, r]`` for distance ``r < W`` and ``c[:, W]`` beyond).

    The softmax of a row ignores a constant, so the bias is ``c[:, r] - c[:, W]``: 0
    from distance W on. The queries go in blocks, each against the keys it sees,
    with that bias as a mask that is a view of one band (``_distance_band``):

    * on a CPU, one autograd step (``_BandBiasFlash``) runs the blocks through the
      flash kernel and sums the bias's gradient over the W diagonals nearest the
      queries only, recomputing there the weights from the kernel's log-sum-exps;
    * elsewhere, each block is one ``scaled_dot_product_attention`` call whose mask
      needs a gradient (the memory-efficient kernel differentiates it on a GPU),
      recomputed in the backward pass, so that no block's mask is kept.

    Nothing ``n x n`` is built or kept. ``(b, h, i, e)``."""
    i, j = q.shape[2], k.shape[2]
    # c[:, r] - c[:, W] for the distances this call holds (at most j - 1); a head
    # whose c[:, W] is -inf (no attention beyond the band) keeps c as it is and
    # -inf beyond the band, where c - (-inf) would be inf or NaN
    far = c[:, -1:]  # (h|1, 1)
    finite = torch.isfinite(far)
    near = torch.where(finite, c[:, :-1] - far, c[:, :-1])[:, :j].to(q.dtype)
    beyond = torch.zeros_like(far).masked_fill(~finite, float("-inf")).to(q.dtype)
    if q.device.type == "cpu" and hasattr(torch.ops.aten, _CPU_FLASH):
        return _BandBiasFlash.apply(q, k, v, near, scale, beyond)
    rows = min(BAND_BLOCK, i)
    band = _distance_band(near, rows, j, beyond)  # (1, h|1, rows, j + rows)
    return recomputed_blocks(_band_block, BAND_BLOCK, q, k, v, band, scale)


def recomputed_blocks(block, size: int, q, k, v, extra, scale) -> torch.Tensor:
    """``block(q, k, v, extra, start, stop, scale)`` for every ``size`` queries,
    joined: ``(b, h, i, e)``. In training each block is recomputed in the backward
    pass (non-reentrant checkpoint), so that what it builds (its mask, its keys) is
    not kept: memory O(n) plus one block. Under ``torch.compile``, plain calls."""
    keep_nothing = torch.is_grad_enabled() and not compiling()
    out = []
    for start in range(0, q.shape[2], size):
        args = (q, k, v, extra, start, min(start + size, q.shape[2]), scale)
        if keep_nothing:
            out.append(checkpoint(block, *args, use_reentrant=False))
        else:
            out.append(block(*args))
    return torch.cat(out, dim=2)  # (b, h, i, e)


def _band_block(q, k, v, band, start: int, stop: int, scale) -> torch.Tensor:
    """Queries ``start .. stop - 1`` against the keys they see, the band's bias as
    their mask: ``(b, h, stop - start, e)``."""
    i, j = q.shape[2], k.shape[2]
    seen, offset = stop + j - i, start + j - i
    mask = band[..., : stop - start, j - offset : j - offset + seen]
    return F.scaled_dot_product_attention(
        q[:, :, start:stop], k[:, :, :seen], v[:, :, :seen], attn_mask=mask,
        scale=scale,
    )  # fmt: skip


def band_bias_runs(pe: PositionalEncoding) -> bool:
    """Whether ``band_bias_blocks`` runs a call of ``pe``: a ``band_bias``, outside
    ``torch.compile`` (which traces the float mask of ``score_bias``)."""
    return overrides(pe, "band_bias") and not compiling()


class _BandBiasFlash(torch.autograd.Function):
    """``band_bias_blocks`` on a CPU: q ``(b, h, i, d)``, k ``(b, h, j, d)``, v
    ``(b, h, j, e)``, ``near`` ``(h|1, W)``, the bias at distances ``0 .. W - 1``
    (0 beyond) -> ``(b, h, i, e)``.

    Forward: blocks of ``BAND_BLOCK`` queries through the CPU flash kernel, the mask
    a view of one band (``_distance_band``). Backward: the kernel's own backward
    gives dq, dk, dv; the bias's gradient ``sum over r = t - s of dS_ts`` needs dS
    only on the W diagonals nearest the queries: there the weights are recomputed
    from the saved log-sum-exps, ``P = exp(S - L)``, ``dS = P (dO v^T - rowsum(dO
    o))``, and the diagonals summed through a strided view."""

    @staticmethod
    def forward(ctx, q, k, v, near, scale, beyond=None):
        kernel = getattr(torch.ops.aten, _CPU_FLASH)
        i, j, e = q.shape[2], k.shape[2], v.shape[-1]
        q_, k_, values = _as_wide(q, k, v)  # the kernel wants them equally wide
        # (1, h|1, rows, j + rows): rows for the kernel's blocks and the gradient's
        band = _distance_band(near, max(min(BAND_BLOCK, i), BAND_ROWS), j, beyond)
        outs, lses = [], []
        with _flushed():
            for start in range(0, i, BAND_BLOCK):
                stop = min(start + BAND_BLOCK, i)
                seen, offset = stop + j - i, start + j - i
                mask = band[..., : stop - start, j - offset : j - offset + seen]
                out, lse = kernel(
                    q_[:, :, start:stop], k_[:, :, :seen], values[:, :, :seen], 0.0,
                    False, attn_mask=mask, scale=scale,
                )  # fmt: skip
                outs.append(out)
                lses.append(lse)
        out = torch.cat(outs, dim=2)  # (b, h, i, max(d, e))
        ctx.save_for_backward(q, k, v, out, torch.cat(lses, dim=2), band)
        ctx.scale, ctx.width = scale, near.shape[-1]
        return out[..., :e]

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, band = ctx.saved_tensors
        kernel = getattr(torch.ops.aten, _CPU_FLASH + "_backward")
        i, d, j, e = q.shape[2], q.shape[3], k.shape[2], v.shape[-1]
        q_, k_, values = _as_wide(q, k, v)
        grad1 = _as_wide_as(grad, out.shape[-1]).contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for start in range(0, i, BAND_BLOCK):
            stop = min(start + BAND_BLOCK, i)
            seen, offset = stop + j - i, start + j - i
            mask = band[..., : stop - start, j - offset : j - offset + seen]
            with _flushed():
                dq1, dk1, dv1 = kernel(
                    grad1[:, :, start:stop], q_[:, :, start:stop], k_[:, :, :seen],
                    values[:, :, :seen], out[:, :, start:stop], lse[:, :, start:stop],
                    0.0, False, attn_mask=mask, scale=ctx.scale,
                )  # fmt: skip
            dq[:, :, start:stop] = dq1[..., :d]
            dk[:, :, :seen] += dk1[..., :d]
            dv[:, :, :seen] += dv1[..., :e]
        d_near = None
        if ctx.needs_input_grad[3]:
            d_near = _band_gradient(q, k, v, grad, out[..., :e], lse, band, ctx)
        return dq, dk, dv, d_near, None, None


BAND_ROWS = 32  # queries per row of the band gradient's batch (measured)


def _band_gradient(q, k, v, grad, out, lse, band, ctx) -> torch.Tensor:
    """The gradient of ``near`` ``(h|1, W)``: ``sum over t - s = r of dS_ts`` for
    the distances ``r < W``, with ``dS = P (dO v^T - rowsum(dO o))`` and ``P =
    exp(S + bias - L)`` recomputed on those diagonals only. All queries at once, in
    rows of ``BAND_ROWS``: row m's queries ``mC .. mC + C - 1`` against the
    ``C + W - 1`` keys within distance W of one of them (windows of the keys)."""
    dtype = band.dtype
    work = torch.promote_types(dtype, torch.float32)  # half precision: float32 sums
    q, k, v, grad, out, lse, band = (
        t.to(work) for t in (q, k, v, grad, out, lse, band)
    )
    b, h, i, d = q.shape
    j, e, width, rows = k.shape[2], v.shape[-1], ctx.width, BAND_ROWS
    n_rows = -(-i // rows) * rows  # queries padded to whole rows of the batch
    m, n_cols, extra = n_rows // rows, rows + width - 1, n_rows - i

    # key windows: row m reads keys mC + j - i - W + 1 ... (zeros outside 0 .. j - 1)
    def windows(t):  # (b, h, j, x) -> (b, h, m, x, C + W - 1)
        t = F.pad(t, (0, 0, width - 1, extra))[:, :, j - i :]
        return t.unfold(2, n_cols, rows)

    def by_rows(t, fill=0.0):  # (b, h, i, x) -> (b, h, m, C, x)
        return F.pad(t, (0, 0, 0, extra), value=fill).view(b, h, m, rows, -1)

    real = F.pad(k.new_ones(j), (width - 1, extra))[j - i :].unfold(0, n_cols, rows)
    # bias[t, u]: key u of a row's window for its query t, distance t + W - 1 - u
    bias = band[0, :, :rows, j - width + 1 : j + rows]  # (h|1, C, C + W - 1)
    bias = bias[:, None] + real[:, None, :].log()  # -inf for keys outside the call
    # P_tu = exp(q_t . k_u * scale + bias_tu - L_t); padded queries: L = +inf, P = 0
    p = torch.einsum("bhmtd,bhmdu->bhmtu", by_rows(q * ctx.scale), windows(k))
    p = p.add_(bias).sub_(by_rows(lse[..., None], float("inf"))).exp_()
    # dS_tu = P_tu (dO_t . v_u - dO_t . o_t)
    d_out = by_rows(grad)  # (b, h, m, C, e)
    row = (d_out * by_rows(out)).sum(-1, keepdim=True)  # (b, h, m, C, 1)
    ds = torch.einsum("bhmte,bhmeu->bhmtu", d_out, windows(v)).sub_(row).mul_(p)
    # diagonal x of a row (u = t + x) is distance W - 1 - x
    diag = ds.as_strided(
        (b, h, m, rows, width), (*ds.stride()[:3], n_cols + 1, 1)
    )  # diag[..., t, x] = ds[..., t, t + x]
    d_near = diag.sum((0, 2, 3)).flip(-1)  # (h, W)
    d_near = d_near if band.shape[1] != 1 else d_near.sum(0, keepdim=True)
    return d_near.to(dtype)


def _distance_band(near, rows: int, j: int, beyond=None) -> torch.Tensor:
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


def _as_wide(q, k, v):
    """q, k, v padded with zeros on their last dimension to the widest of them: the
    CPU flash kernel wants them equally wide (zeros change no dot product)."""
    width = max(q.shape[-1], v.shape[-1])
    return _as_wide_as(q, width), _as_wide_as(k, width), _as_wide_as(v, width)


def _as_wide_as(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` padded with zeros on its last dimension to ``width`` (the CPU flash
    kernel wants v as wide as q and k)."""
    if t.shape[-1] >= width:
        return t
    return torch.cat([t, t.new_zeros(*t.shape[:-1], width - t.shape[-1])], dim=-1)


def key_bias_blocks(q, k, v, w, scale) -> torch.Tensor:
    """Causal attention in token order with a bias ``u_i + w_j`` (``w`` ``(b|1, h|1,
    j)``, ``key_bias``): the softmax drops ``u_i``, and ``w_j`` is one more dimension
    of the keys. For a block of queries, key j gets ``w_j - w_m`` (m: the key at the
    block's middle query) against a constant ``1/scale`` of the queries, so the
    kernel computes ``(q_i, 1/scale) . (k_j, w_j - w_m) * scale = q_i . k_j * scale
    + w_j - w_m`` and its gradient; ``w_m`` is the same for every key of the block's
    rows, so the softmax drops it as it drops ``u_i``.

    In blocks of queries, each against the keys it sees, with ``w`` recentred on the
    block's middle query (computed in ``w``'s precision, then rounded): the keys
    near the block, where the softmax's mass is, get the digits a value of ``w`` at
    the end of a long sequence would have lost. On a CPU the blocks run in one
    autograd step (``_KeyBiasFlash``) that keeps only q, k, v, w and each row's
    log-sum-exp for the backward pass, with subnormal numbers flushed to zero.
    In half precision the term is two columns (``bias_columns``), and elsewhere
    than on a CPU q, k and v are padded to a width the fused kernels take
    (``aligned``). ``(b, h, i, e)``."""
    b, h, i, d = q.shape
    w = w.expand(b, h, k.shape[2])
    if q.device.type == "cpu" and hasattr(torch.ops.aten, _CPU_FLASH):
        if not compiling():  # torch.compile traces the plain blocks below
            return _KeyBiasFlash.apply(q, k, v, w, scale)
    # elsewhere each block is recomputed in the backward pass, as on the CPU
    return recomputed_blocks(_attend_block, KEY_BIAS_BLOCK, q, k, v, w, scale)


_CPU_FLASH = "_scaled_dot_product_flash_attention_for_cpu"


def _attend_block(q, k, v, w, start: int, stop: int, scale) -> torch.Tensor:
    """Queries ``start .. stop - 1`` through ``scaled_dot_product_attention``:
    ``(b, h, stop - start, e)``."""
    q1, k1, v1 = aligned(*_key_bias_block(q, k, v, w, start, stop, scale))
    # the block's queries are the last of the keys it sees: token order
    sees = triangle(q1, k1)
    out = F.scaled_dot_product_attention(q1, k1, v1, attn_mask=sees, scale=scale)
    return out[..., : v.shape[-1]]  # the padded columns dropped


def _key_bias_block(q, k, v, w, start: int, stop: int, scale):
    """Queries ``start .. stop - 1``: ``(q1, k1, v1)``, q and k with the key-bias
    dimension, v the values of the keys the block sees (its queries are the last of
    them)."""
    i, j, dtype = q.shape[2], k.shape[2], q.dtype
    seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
    middle = (start + stop) // 2 + j - i  # the key at the block's middle query
    # w_j - w_middle: exact where it matters, near the block's own keys
    rel = w[..., :seen] - w[..., middle : middle + 1]  # (b, h, seen), w's precision
    value, columns = bias_columns(rel, dtype, scale)  # (b, h, seen, parts)
    k1 = torch.cat([k[:, :, :seen], columns], dim=-1)  # (b, h, seen, d + parts)
    rows = q[:, :, start:stop]
    one = torch.full(
        (*rows.shape[:3], columns.shape[-1]), value, dtype=dtype, device=q.device
    )
    q1 = torch.cat([rows, one], dim=-1)  # (b, h, stop - start, d + parts)
    return q1, k1, v[:, :, :seen]


class _KeyBiasFlash(torch.autograd.Function):
    """``key_bias_blocks`` on a CPU: each block through
    ``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward, under
    ``torch.set_flush_denormal(True)`` (the caller's setting restored): a decaying
    bias puts some weights of every row between 1e-45 and 1e-38, where x86
    arithmetic is about a hundred times slower (FoX's fwd + bwd: 2 to 3 times in all);
    flushing changes a weight by less than 1e-38 of the row's largest. The keys get
    their extra dimension in one buffer, whose last column each block rewrites, and
    every block's mask is a view of one band: nothing is copied per block, and the
    backward pass keeps only q, k, v, w and the log-sum-exps (memory O(n))."""

    @staticmethod
    def forward(ctx, q, k, v, w, scale):
        kernel = getattr(torch.ops.aten, _CPU_FLASH)
        outs, lses = [], []
        with _flushed():
            for q1, k1, v1, mask in _flash_blocks(q, k, v, w, scale):
                out, lse = kernel(q1, k1, v1, 0.0, False, attn_mask=mask, scale=scale)
                outs.append(out)
                lses.append(lse)
        out = torch.cat(outs, dim=2)  # (b, h, i, d + parts or e)
        ctx.save_for_backward(q, k, v, w, out, *lses)
        ctx.scale, ctx.one = scale, bias_one(q.dtype, scale)
        return out[..., : v.shape[-1]]

    @staticmethod
    def backward(ctx, grad):
        q, k, v, w, out, *lses = ctx.saved_tensors
        kernel = getattr(torch.ops.aten, _CPU_FLASH + "_backward")
        b, h, i, d = q.shape
        j, e = k.shape[2], v.shape[-1]
        grad1 = torch.cat(
            [grad, grad.new_zeros(*grad.shape[:3], out.shape[-1] - e)], -1
        )
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dw = torch.zeros(w.shape, dtype=w.dtype, device=w.device)
        blocks = _flash_blocks(q, k, v, w, ctx.scale)
        for start, lse, (q1, k1, v1, mask) in zip(
            range(0, i, KEY_BIAS_BLOCK), lses, blocks
        ):
            stop = start + q1.shape[2]
            seen, middle = k1.shape[2], (start + stop) // 2 + j - i
            with _flushed():
                dq1, dk1, dv1 = kernel(
                    grad1[:, :, start:stop].contiguous(), q1, k1, v1,
                    out[:, :, start:stop].contiguous(), lse, 0.0, False,
                    attn_mask=mask, scale=ctx.scale,
                )  # fmt: skip
            # back through q1 = [q, one] and k1 = [k, columns of w - w_middle]: the
            # first column is (w - w_middle) / (one * scale) (bias_columns)
            dq[:, :, start:stop] += dq1[..., :d]
            dk[:, :, :seen] += dk1[..., :d]
            dv[:, :, :seen] += dv1[..., :e]
            # d/d(w_j - w_middle), (b, h, seen)
            column = dk1[..., d].to(dw.dtype) / (ctx.one * ctx.scale)
            dw[..., :seen] += column
            dw[..., middle] -= column.sum(-1)
        return dq, dk, dv, dw, None


def _flash_blocks(q, k, v, w, scale):
    """For the CPU kernel, per block of queries: ``(q1, k1, v1, mask)``. k1 and v1 are
    views of one buffer each (the block's keys), k1's last column ``w - w_middle``
    written for the block (so a block's views are valid until the next one is
    made); mask a view of one band, 0 where query t sees key s (s <= t + offset)."""
    b, h, i, d = q.shape
    j, e, dtype = k.shape[2], v.shape[-1], q.dtype
    # the kernel wants q, k and v equally wide: zeros after the bias's columns
    parts = bias_parts(dtype)
    width = max(d + parts, e)
    keys = _as_wide_as(k, width)  # (b, h, j, width): columns d .. rewritten per block
    values = _as_wide_as(v, width)
    rows = min(KEY_BIAS_BLOCK, i)
    # band[r, c] = 0 where c <= r + j, else -inf: the block at offset o reads columns
    # j - o ..., so that key s of query r is allowed where s <= r + o
    r = torch.arange(rows, device=q.device)[:, None]
    c = torch.arange(j + rows, device=q.device)[None, :]
    band = torch.zeros((), dtype=dtype, device=q.device).masked_fill(
        c > r + j, float("-inf")
    )  # (rows, j + rows)
    one = q.new_zeros(b, h, rows, width - d)  # the queries' extra columns
    one[..., :parts] = bias_one(dtype, scale)  # against the bias's columns
    for start in range(0, i, KEY_BIAS_BLOCK):
        stop = min(start + KEY_BIAS_BLOCK, i)
        n_rows, offset = stop - start, start + j - i
        seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
        middle = (start + stop) // 2 + j - i  # the key at the block's middle query
        # w_j - w_middle: exact where it matters, near the block's own keys
        rel = w[..., :seen] - w[..., middle : middle + 1]
        keys[..., :seen, d : d + parts] = bias_columns(rel, dtype, scale)[1]
        q1 = torch.cat([q[:, :, start:stop], one[:, :, :n_rows]], dim=-1)
        mask = band[:n_rows, j - offset : j - offset + seen]  # (n_rows, seen)
        yield q1, keys[:, :, :seen], values[:, :, :seen], mask


class _flushed:
    """Subnormal results flushed to zero in this thread, the caller's setting
    restored on exit."""

    def __enter__(self):
        self.was = _flushing()
        torch.set_flush_denormal(True)

    def __exit__(self, *exc):
        torch.set_flush_denormal(self.was)


def _flushing(half: float = 0.5) -> bool:
    """Whether this thread flushes subnormal results to zero now (torch has a setter,
    no getter): Python's float product runs on the same unit, under the same flag,
    and reads no tensor (no host sync on a GPU)."""
    return sys.float_info.min * half == 0.0


def triangle(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``(i, j)`` bool: query t sees keys ``0 .. t + j - i`` (token order)."""
    i, j = q.shape[2], k.shape[2]
    return torch.ones(i, j, dtype=torch.bool, device=q.device).tril(j - i)


def run(q, k, v, attn_mask, scale, ordered: bool) -> torch.Tensor:
    """The kernel; in token order (``ordered``), blocks of queries skip the keys
    that none of them sees."""
    i, j = q.shape[2], k.shape[2]
    learned = attn_mask is not None and attn_mask.requires_grad
    if ordered and learned and q.device.type == "cpu":
        return explicit_blocks(q, k, v, attn_mask, scale)
    # on a GPU a mask that needs a gradient (a learned bias, in training) goes to
    # the memory-efficient kernel, which differentiates it: one call beats blocks
    if not ordered or learned:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    if attn_mask is None:
        if i == j:  # the kernel's causal mode is top-left aligned: right when i == j
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        attn_mask = triangle(q, k)
    out = []
    for start in range(0, i, BLOCK):
        stop = min(start + BLOCK, i)
        seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
        out.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop],
                k[:, :, :seen],
                v[:, :, :seen],
                attn_mask=attn_mask[..., start:stop, :seen],
                scale=scale,
            )
        )
    return torch.cat(out, dim=2)  # (b, h, i, e)


def explicit_blocks(q, k, v, attn_mask, scale) -> torch.Tensor:
    """Token order, a mask that needs a gradient, on a CPU: PyTorch's CPU kernels do
    not differentiate a mask, so the kernel would take its math route over every
    ``(i, j)``, with a softmax guarded against rows without a key (which the
    boundary has refused). The same maths here, in blocks of queries, each against
    only the keys it sees (about half of them): ``(b, h, i, e)``."""
    i, j, dtype = q.shape[2], k.shape[2], v.dtype
    work = torch.promote_types(q.dtype, torch.float32)  # half precision: as SDPA
    q, k, v = q.to(work) * scale, k.to(work), v.to(work)  # scale (i, d), not (i, j)
    out = []
    # split, not slices: its backward is one concatenation, not a zero-filled
    # (i, j) gradient per block
    for start, rows in zip(range(0, i, BLOCK), attn_mask.split(BLOCK, dim=-2)):
        stop = start + rows.shape[-2]
        seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
        # omega = (q * scale) k^T + mask,  alpha = softmax_j(omega),  z = alpha v
        scores = torch.einsum("bhid,bhjd->bhij", q[:, :, start:stop], k[:, :, :seen])
        weights = (scores + rows[..., :seen]).softmax(-1)
        out.append(torch.einsum("bhij,bhje->bhie", weights, v[:, :, :seen]))
    return torch.cat(out, dim=2).to(dtype)  # (b, h, i, e)

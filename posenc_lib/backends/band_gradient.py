"""The band-bias form's gradient on a CPU: the bias's gradient summed over the W
diagonals nearest the queries, with the weights recomputed there from the kernel's
log-sum-exps (``band_bias.BandBiasOnCpu``).

The identity: the bias at distance r enters every score ``S_ts`` with ``t - s = r``,
so its gradient is ``sum over t - s = r of dS_ts``, and beyond the band (where the
bias the kernel sees is 0) nothing is summed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BAND_ROWS = 32  # queries per row of the band gradient's batch (measured)


def band_gradient(q, k, v, grad, out, lse, band, scale, near) -> torch.Tensor:
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
    j, e, width, rows = k.shape[2], v.shape[-1], near.shape[-1], BAND_ROWS
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
    p = torch.einsum("bhmtd,bhmdu->bhmtu", by_rows(q * scale), windows(k))
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

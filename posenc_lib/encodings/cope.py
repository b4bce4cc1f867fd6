"""CoPE, contextual position encoding (Golovneva et al., 2024): positions that count
only the tokens a query cares about.

An integer position counts every token. CoPE lets each query decide, token by token,
what counts. Query i gives every key t it may attend to a gate from the scaled logit::

    g_it = sigmoid(s_it),   s_it = q_i . k_t / sqrt(d)   (-inf where masked: g = 0)

and the position of key j *as seen from query i* is the number of counted tokens from
j to i, both included::

    p_ij = sum_{t=j..i} g_it            in (0, i - j + 1], clamped to n_positions - 1

With every gate 1, p_ij = i - j + 1: an ordinary relative position. A fractional
p_ij lies between two rows of a learned table ``e`` ``(n_positions, d)``, shared by
the heads of a layer, and is read by linear interpolation::

    e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]

The term added to the scores is q_i . e[p_ij]. The interpolation is linear, so it
commutes with the dot product: with z_i[k] = q_i . e[k] for the integer k,
``q_i . e[p] = (p - floor p) z_i[ceil p] + (1 - p + floor p) z_i[floor p]``. One
product ``(b, h, i, n_positions)`` and two gathers replace a d-vector per (i, j).

**Where the term sits** (the paper writes no 1/sqrt(d) anywhere): the scores become
``q_i . k_j / sqrt(d) + q_i . e[p_ij]``, the CoPE term *not* divided by sqrt(d), as in
the paper's appendix code (``SelfAttn.forward``: ``attn_logits / sqrt(head_dim)``,
``+= mask.log()``, ``+= self.cope(query, attn_logits)``) and in x-transformers
(``Attend.forward``: ``sim * scale``, masked, then ``sim + self.cope(q, sim)``). The
authors' training code (github.com/facebookresearch/RAM, ``projects/cope/src/cope/
context_position.py``, ``ContextPosSelfAttn``) by default divides the sum
``q.k + q.e[p]`` by sqrt(d) and keeps the appendix form behind ``--cope-nodiv``; the
two differ only in the scale of the learned table (e versus e / sqrt(d)).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ..backends.blocks import query_blocks
from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_finite, check_positive_int, exact_dtypes

__all__ = ["CoPE", "cope_positions", "cope_bias"]

# queries per block of ``CoPE.causal_attention``. Measured on a CPU (one thread, h = 4,
# d = 32, n = 1024, fwd + bwd, the compiled scan; best of 15): 48 to 96 within 4%, 32
# and 128 slower; the peak grows with it: 6.3, 9.4, 15.5 MiB at 32, 64, 128 (one (h,
# n, n) float32: 16)
BLOCK = 64
# elsewhere (a GPU), where each elementwise step of a block is a kernel, a call with
# b h n >= LARGE (a model's training step) takes n / 8 queries, 64 to 256: it
# launches up to a quarter of 64's kernels, and a block's tensors stay an eighth of
# the (b, h, n, n) scores at most; a smaller call (one layer of a chapter) is
# launch-bound with any block: it keeps 64, and its memory grows as n. Chosen, not
# measured on a card: the GPU run (make test-gpu) times it
BLOCK_OFF_CPU = 256
LARGE = 2**17


def block_size(device: torch.device, n: int, rows: int = 1) -> int:
    """Queries per block of ``CoPE.causal_attention`` for ``n`` queries of ``rows``
    (b h) rows on ``device``: ``BLOCK`` on a CPU (measured) and for a small call;
    for ``rows * n >= LARGE`` elsewhere, ``n // 8`` between ``BLOCK`` and
    ``BLOCK_OFF_CPU``."""
    if device.type == "cpu" or rows * n < LARGE:
        return BLOCK
    return min(BLOCK_OFF_CPU, max(BLOCK, n // 8))


# the CPU's blocks run their elementwise steps in numba's compiled scan when numba
# is installed (``_cope_scan``); False: torch's operations everywhere
COMPILED_SCAN = True


def _check_float(t: object, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got "
            f"{getattr(t, 'dtype', type(t).__name__)}"
        )
    return t


def cope_positions(logits: torch.Tensor, n_positions: int) -> torch.Tensor:
    """Masked scaled logits ``(b, h, i, j)`` -> contextual positions ``(b, h, i, j)``.

    ``p_ij = min(sum_{t >= j} sigmoid(logits_it), n_positions - 1)``: with ``-inf``
    where query i may not attend (its gates are 0), that is ``sum_{t=j..i} g_it`` for
    causal attention. The sum runs along the key axis as given, which must be position
    order (``CoPE.transform_scores`` sorts the keys by position before calling it).
    ``logits`` must not hold NaN (``ValueError``).
    """
    _check_float(logits, "logits")
    n_positions = check_positive_int(n_positions, "n_positions")
    if logits.dim() != 4:
        raise ValueError(
            f"logits must have shape (b, h, i, j), got {tuple(logits.shape)}"
        )
    # g_it = sigmoid(s_it): 0 where masked (s = -inf), so masked keys count nothing
    gates = torch.sigmoid(logits)  # (b, h, i, j)
    # p_ij = sum_{t >= j} g_it: a cumulative sum from the last key backwards
    pos = gates.flip(-1).cumsum(-1).flip(-1)  # (b, h, i, j)
    if torch.isnan(pos[..., 0]).any():  # p_i0 sums the whole row: NaN if any is
        raise ValueError(
            "logits hold NaN; CoPE's gates need real logits (-inf where masked)"
        )
    return pos.clamp(max=n_positions - 1)


def cope_bias(
    q: torch.Tensor, logits: torch.Tensor, pos_emb: torch.Tensor
) -> torch.Tensor:
    """CoPE's term ``q_i . e[p_ij]`` ``(b, h, i, j)``, to add to the scaled scores.

    ``q`` ``(b, h, i, d)``: the queries. ``logits`` ``(b, h, i, j)``: the scaled
    scores ``q.k / sqrt(d)``, with ``-inf`` where a query may not attend (the authors
    add ``mask.log()``). ``pos_emb`` ``(n_positions, d)``: the table e of integer
    positions 0 .. n_positions - 1, one for all heads. Positions come from
    ``cope_positions``; the fractional ones interpolate the scalars z_i[k] = q_i . e[k]
    (equal to interpolating the vectors, and n_positions / j times the work).
    Positions beyond ``n_positions - 1`` are clamped to it.
    """
    _check_float(q, "q")
    _check_float(logits, "logits")
    _check_float(pos_emb, "pos_emb")
    if q.dim() != 4:
        raise ValueError(f"q must have shape (b, h, i, d), got {tuple(q.shape)}")
    if pos_emb.dim() != 2:
        raise ValueError(
            f"pos_emb must have shape (n_positions, d), got {tuple(pos_emb.shape)}"
        )
    n_positions, d = pos_emb.shape
    if n_positions == 0:
        raise ValueError(
            "pos_emb must hold at least one position (n_positions > 0), got shape "
            f"{tuple(pos_emb.shape)}"
        )
    if d != q.shape[-1]:
        raise ValueError(
            f"pos_emb must have shape (n_positions, {q.shape[-1]}) to match q "
            f"{tuple(q.shape)}, got {tuple(pos_emb.shape)}"
        )
    if pos_emb.dtype != q.dtype:
        raise TypeError(f"pos_emb must have q's dtype {q.dtype}, got {pos_emb.dtype}")
    if logits.dim() != 4 or logits.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"logits must have shape ({', '.join(map(str, q.shape[:3]))}, j) to "
            f"match q {tuple(q.shape)}, got {tuple(getattr(logits, 'shape', ()))}"
        )
    check_finite(q, "q")
    check_finite(pos_emb, "pos_emb")
    return _cope_bias(q, logits, pos_emb)


def _cope_bias(q, logits, pos_emb) -> torch.Tensor:
    """``cope_bias`` after its checks (CoPE's own call: q checked finite with k and v
    at the attention's boundary, the table its own parameter)."""
    pos = cope_positions(logits, pos_emb.shape[0])  # (b, h, i, j), in [0, P-1]
    # z_i[k] = q_i . e[k] for every integer position k
    z = torch.einsum("bhid,kd->bhik", q, pos_emb)  # (b, h, i, P)
    # no gradient through floor and ceil; it flows through the weight w = p - floor p
    floor = pos.detach().floor()  # (b, h, i, j)
    ceil = pos.detach().ceil().long()
    w = (pos - floor).to(z.dtype)  # the weight of the ceiling
    # q_i . e[p_ij] = w z_i[ceil p_ij] + (1 - w) z_i[floor p_ij]
    return torch.lerp(z.gather(-1, floor.long()), z.gather(-1, ceil), w)


def _gates(q_blk, k_seen, future, scale):
    """``(s, g)``, each ``(B, i, j)``: the scaled scores of a block of queries ``(B,
    i, d)`` against the keys it sees ``(B, j, d)``, newest key first, with -inf on
    the future (``future`` ``(i, i)``: -inf where query r may not see column c, ``r
    + c < i - 1``), and their gates."""
    i = q_blk.shape[1]
    # s = scale q k^T, -inf on the future (the first i columns: the newest keys)
    s = torch.matmul(q_blk * scale, k_seen.transpose(1, 2))  # (B, i, j)
    s[:, :, :i] += future
    # g_it = sigmoid(s_it): 0 on the future
    return s, torch.sigmoid(s)


def _table_scores(q_blk, padded, j, n_positions):
    """``(z, rows)``: ``z`` ``(B i, rows + 1)``, ``z_r[k] = q_r . e[k]`` for the
    ``rows = min(P, j + 1)`` table rows a block over j keys can read (``floor p <=
    min(P - 1, j)``) and one more (the padded table's zero row where rows = P)."""
    rows = min(n_positions, j + 1)
    q_flat = q_blk.reshape(-1, q_blk.shape[-1])  # (B i, d)
    return torch.mm(q_flat, padded[: rows + 1].T), rows  # (B i, rows + 1)


def _cope_block(q_blk, k_seen, padded, future, scale, n_positions):
    """One block of queries against the keys they see, newest key first, CoPE's
    forward maths in torch's operations (the path off the CPU, or without numba).

    ``q_blk`` ``(B, i, d)`` (B = b h, i the block's queries, the last of which sees
    every key), ``k_seen`` ``(B, j, d)`` in reverse token order (column c is the
    c-th newest key the block sees), ``padded`` ``(n_positions + 1, d)`` (the table
    and a row of zeros), all in the working dtype; ``future`` as in ``_gates``.
    Returns ``(omega, g, w, index, z_step, rows)``, each ``(B, i, j)`` with the keys
    newest first: the scores with CoPE's term (-inf on the future), the gates, the
    lerp weights ``w = p - floor p``, the flat index of ``floor p`` in ``(B i, rows
    + 1)`` (``_flat_index``), ``z[floor + 1] - z[floor]`` (the reference's
    ``z[ceil] - z[floor]`` wherever ``w > 0``; finite where ``w = 0``), and the
    number of table rows read."""
    j = k_seen.shape[1]
    s, g = _gates(q_blk, k_seen, future, scale)  # (B, i, j) each
    # p_ij = sum_{t >= j} g_it: newest key first, a cumulative sum (the reference's
    # order: cope_positions sums from the last key backwards)
    p = torch.cumsum(g, -1)  # (B, i, j)
    if j > n_positions - 1:  # p_ij <= j: clamped only if the table is shorter
        p.clamp_(max=n_positions - 1)
    z, rows = _table_scores(q_blk, padded, j, n_positions)  # (B i, rows + 1)
    # z[k + 1] - z[k], laid out as z (the last column is never read)
    step = torch.empty_like(z)  # (B i, rows + 1)
    torch.sub(z[:, 1:], z[:, :-1], out=step[:, :-1])
    step[:, -1] = 0
    # the flat index of z[floor p]: row (B i) of z, column floor p (p >= 0:
    # truncation is the floor), for an index_select (about twice a gather's speed)
    index = _flat_index(p, rows + 1)  # (B, i, j)
    w = p.frac_()  # (B, i, j), p - floor p, the weight of the ceiling
    # q_i . e[p_ij] = z[floor] + w (z[floor + 1] - z[floor]) (the reference's lerp,
    # which reads z[floor] alone at an integer p: w = 0);  omega = s + q_i . e[p_ij]
    omega = s.add_(z.view(-1).index_select(0, index.view(-1)).view_as(w))  # (B, i, j)
    del z
    z_step = step.view(-1).index_select(0, index.view(-1)).view_as(w)  # (B, i, j)
    del step
    omega.addcmul_(w, z_step)
    return omega, g, w, index, z_step, rows


def _padded(table: torch.Tensor) -> torch.Tensor:
    """``(P + 1, d)``: the table and a row of zeros."""
    return torch.cat((table, table.new_zeros(1, table.shape[1])))


def _flat_index(p: torch.Tensor, width: int) -> torch.Tensor:
    """Positions ``p`` ``(B, i, j)`` (>= 0) -> the flat index ``(B, i, j)`` of
    element ``floor p`` of row (b, t) in a ``(B i, width)`` table: int32 while it
    fits."""
    rows = p.shape[0] * p.shape[1]
    dtype = torch.int32 if rows * width < 2**31 else torch.int64
    starts = torch.arange(0, rows * width, width, dtype=dtype, device=p.device)
    return p.to(dtype).add_(starts.view(*p.shape[:2], 1))


def _future(size: int, like: torch.Tensor) -> torch.Tensor:
    """``(size, size)``: -inf where ``r + c < size - 1`` (query r of a block, column c
    of its keys newest first: a key after the query), 0 elsewhere. The last ``m``
    rows and first ``m`` columns are the mask of a block of ``m`` queries."""
    ones = torch.ones(size, size, dtype=torch.bool, device=like.device)
    return torch.zeros(size, size, dtype=like.dtype, device=like.device).masked_fill(
        ones.triu(1).flip(-1), float("-inf")
    )


def _scan(like: torch.Tensor):
    """The compiled position scan (``_cope_scan``) for a block like ``like``, or
    None: off the CPU, with ``COMPILED_SCAN`` off, without numba, or where numba
    failed to compile it (said once, in a warning)."""
    if not COMPILED_SCAN or like.device.type != "cpu":
        return None
    if like.dtype not in _COMPILED:
        try:
            from . import _cope_scan

            _cope_scan.warm(_numpy_dtype(like))  # compile, or load
            _COMPILED[like.dtype] = _cope_scan
        except ImportError:  # numba is optional: torch's operations do the same
            _COMPILED[like.dtype] = None
        except Exception as error:  # an older numba, say: not silently
            warnings.warn(
                f"CoPE's compiled scan failed for {like.dtype} ({error!r}); its "
                "blocks use torch's operations instead",
                RuntimeWarning,
                stacklevel=2,
            )
            _COMPILED[like.dtype] = None
    return _COMPILED[like.dtype]


_COMPILED: dict = {}  # dtype -> the compiled scan, or None


def _numpy_dtype(like: torch.Tensor):
    """numpy's dtype for ``like``'s (a CPU tensor)."""
    return like.new_empty(()).numpy().dtype


def _last_row(like: torch.Tensor, n_positions: int):
    """``P - 1`` as a numpy scalar of ``like``'s dtype (the scan's clamp)."""
    return _numpy_dtype(like).type(n_positions - 1)


def _rows(t: torch.Tensor):
    """``(B, i, j)`` -> a numpy view ``(B i, j)`` (no copy)."""
    return t.detach().view(-1, t.shape[-1]).numpy()


class _CoPEBlocks(torch.autograd.Function):
    """CoPE's causal attention in token order, blocks of ``block_size`` queries,
    each against the keys it sees, recomputed in the backward pass: memory O(n
    block).

    Inputs ``(B, i, d)``, ``(B, j, d)``, ``(B, j, e)``, ``(P, d)`` in the working
    dtype (B = b h, i <= j: query t sees keys 0 .. t + j - i). The keys and values
    are reversed once, so that every block reads its keys newest first and the
    positions are a cumulative sum. On a CPU with numba, the elementwise steps of a
    block are one compiled scan (``_cope_scan``); otherwise torch's operations
    (``_cope_block``). The backward pass keeps q, the reversed k and v, the table,
    the output and each row's log-sum-exp, and per block:

    dA = dO v^T;  domega = A (dA - D_i), D_i = dO_i . out_i;  dz[floor] += domega
    (1 - w), dz[ceil] += domega w;  dp = domega (z[ceil] - z[floor]);  dg_it =
    sum_{j <= t} dp_ij;  ds = domega + dg g (1 - g);  dq = scale ds k + dz e;
    dk = scale ds^T q;  dv = A^T dO;  de = dz^T q.
    """

    @staticmethod
    def forward(ctx, q, k, v, table, scale):
        n_positions, i = table.shape[0], q.shape[1]
        k, v = k.flip(1), v.flip(1)  # (B, j, d), (B, j, e): newest key first
        out = q.new_empty(*q.shape[:2], v.shape[-1])  # (B, i, e)
        lse = q.new_empty(q.shape[:2])  # (B, i)
        size = block_size(q.device, i, q.shape[0])
        future = _future(min(size, i), q)
        padded = _padded(table)  # (P + 1, d)
        scan = _scan(q)
        for start, stop, *_ in query_blocks(i, k.shape[1], size):
            old = i - stop  # the block sees the reversed keys old .. j - 1
            mask = future[start - stop :, : stop - start]
            omega = _block(
                scan, q[:, start:stop], k[:, old:], padded, mask, scale, n_positions
            )[0]  # the rest freed now: memory is one block's
            # out = sum_j exp(omega_ij - m) v_j / sum_j exp(omega_ij - m), m = max_j
            # omega_ij (the division on (i, e), not on the weights (i, j))
            top = omega.amax(-1, keepdim=True)  # (B, i, 1)
            unnormed = omega.sub_(top).exp_()  # (B, i, j)
            total = unnormed.sum(-1, keepdim=True)  # (B, i, 1)
            torch.bmm(unnormed, v[:, old:], out=out[:, start:stop]).div_(total)
            # L_i = log sum_j exp(omega_ij) = m + log sum_j exp(omega_ij - m)
            torch.add(top.squeeze(-1), total.log_().squeeze(-1), out=lse[:, start:stop])
            del omega, unnormed  # before the next block is built
        ctx.save_for_backward(q, k, v, table, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        with exact_dtypes(d_out):  # in the forward's dtypes, under autocast too
            return _CoPEBlocks._backward(ctx, d_out)

    @staticmethod
    def _backward(ctx, d_out):
        q, k, v, table, out, lse = ctx.saved_tensors  # k, v newest first
        scale, n_positions = ctx.scale, table.shape[0]
        i = q.shape[1]
        d_out = d_out.to(out.dtype)
        # D_i = dO_i . out_i
        dot = (d_out * out).sum(-1)  # (B, i)
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        d_table = torch.zeros_like(table)
        size = block_size(q.device, i, q.shape[0])
        future = _future(min(size, i), q)
        padded = _padded(table)  # (P + 1, d)
        scan = _scan(q)
        for start, stop, *_ in query_blocks(i, k.shape[1], size):
            old = i - stop
            q_blk, d_blk, k_seen = q[:, start:stop], d_out[:, start:stop], k[:, old:]
            mask = future[start - stop :, : stop - start]
            omega, g, *parts = _block(
                scan, q_blk, k_seen, padded, mask, scale, n_positions
            )  # parts: w, index, z_step, rows (torch's operations) or z, rows (scan)
            # A = exp(omega - L)
            weights = omega.sub_(lse[:, start:stop, None]).exp_()  # (B, i, j)
            # dv = A^T dO
            dv[:, old:].baddbmm_(weights.transpose(1, 2), d_blk)
            # domega = A (dO v^T - D_i)
            d_omega = torch.matmul(d_blk, v[:, old:].transpose(1, 2))  # (B, i, j)
            d_omega.sub_(dot[:, start:stop, None]).mul_(weights)
            del omega, weights
            rows = parts[-1]
            if scan is None:
                d_z, d_s = _eager_backward(d_omega, g, parts)
            else:
                z = parts.pop(0)  # (B i, rows + 1)
                d_z = torch.zeros_like(z)  # (B i, rows + 1)
                d_s = torch.empty_like(d_omega)  # (B, i, j)
                scan.scan_backward(
                    _rows(g), _rows(d_omega), z.numpy(), _last_row(z, n_positions),
                    d_z.numpy(), _rows(d_s),
                )  # fmt: skip
                d_z = d_z[:, :rows]  # (B i, rows)
                del z
            del g, d_omega
            # dq = scale ds k + dz e
            d_q = torch.mm(d_z, table[:rows]).view(*q_blk.shape)  # (B, i, d)
            dq[:, start:stop] = d_q.baddbmm_(d_s, k_seen, alpha=scale)
            # dk = scale ds^T q;  de = dz^T q
            dk[:, old:].baddbmm_(d_s.transpose(1, 2), q_blk, alpha=scale)
            q_flat = q_blk.reshape(-1, q_blk.shape[-1])  # (B i, d)
            d_table[:rows].addmm_(d_z.T, q_flat)
            del d_s, d_z  # before the next block is built
        return dq, dk.flip(1), dv.flip(1), d_table, None


def _block(scan, q_blk, k_seen, padded, mask, scale, n_positions):
    """A block's forward maths, ``(omega, g, ...)``: ``_cope_block`` in torch's
    operations (``scan`` None), or the scores and gates in torch and the rest in the
    compiled scan, which returns ``(omega, g, z, rows)`` (``z`` as in
    ``_table_scores``, kept for the backward scan)."""
    if scan is None:
        return _cope_block(q_blk, k_seen, padded, mask, scale, n_positions)
    omega, g = _gates(q_blk, k_seen, mask, scale)  # (B, i, j) each
    z, rows = _table_scores(q_blk, padded, k_seen.shape[1], n_positions)
    s = _rows(omega)  # omega is written over s
    scan.scan_forward(s, _rows(g), z.numpy(), _last_row(z, n_positions), s)
    return omega, g, z, rows


def _eager_backward(d_omega, g, parts):
    """``(dz, ds)``, ``(B i, rows)`` and ``(B, i, j)``: the gradients of a block's
    table scores and scaled scores from ``domega`` ``(B, i, j)`` (overwritten with
    ds), in torch's operations. ``parts``: the list ``[w, index, z_step, rows]`` of
    ``_cope_block``'s outputs (keys newest first), emptied here so that each is freed
    as soon as it has been used."""
    w, index, z_step, rows = parts
    parts.clear()
    # z[ceil] - z[floor]: 0 at an integer p (w = 0), where the reference's lerp
    # reads one row (the clamp leaves an integer)
    z_step.mul_(w.sign())  # (B, i, j)
    # dz[floor] += domega (1 - w), dz[floor + 1] += domega w
    d_w = w.mul_(d_omega)  # (B, i, j), in w's memory
    index = index.view(-1).long()  # (B i j,), into (B i, rows + 1) flattened
    d_z = d_omega.new_zeros(d_omega.shape[0] * d_omega.shape[1] * (rows + 1))
    d_z.scatter_add_(0, index, d_omega.view(-1))
    d_ceil = torch.zeros_like(d_z).scatter_add_(0, index, d_w.view(-1))
    del index
    d_z, d_ceil = d_z.view(-1, rows + 1), d_ceil.view(-1, rows + 1)
    d_z.sub_(d_ceil)
    d_z[:, 1:] += d_ceil[:, :-1]  # (B i, rows + 1)
    del d_ceil
    # dp = domega (z[ceil] - z[floor]);  dg_it = sum_{j <= t} dp_ij: over the older
    # keys, a cumulative sum backwards
    d_g = z_step.mul_(d_omega).flip(-1).cumsum_(-1).flip(-1)  # (B, i, j)
    # ds = domega + dg g (1 - g)
    d_s = d_omega.add_(torch.ops.aten.sigmoid_backward(d_g, g))  # (B, i, j)
    return d_z[:, :rows], d_s


class CoPE(PositionalEncoding):
    """CoPE: adds ``q_i . e[p_ij]`` to the scaled scores, ``p_ij`` counted by gates.

    It overrides ``transform_scores`` because the gates read the scaled scores and the
    mask: it takes ``q`` and the combined mask from the call's context, sets the
    masked scores to ``-inf`` (the authors add ``mask.log()``) for the gates, and
    returns ``scores + cope_bias(q, masked, pos_emb)``; the attention function then
    masks and normalises as usual. Every explicit-score path, not the fused one.

    **No integer positions, only their order.** Contextual positions are sums of gates
    over the keys between j and i *in position order* (the tokens whose position lies
    between key j's and query i's), so ``k_pos`` is read only to sort the keys, and
    shifting the positions changes nothing. With positions that increase along the
    sequence that is the key (token) axis, on which ``cope_positions`` sums; otherwise
    ``transform_scores`` sorts the keys by position first (stable: equal positions keep
    token order), so the count agrees with the causal mask built from the same
    positions, and the tokens give what they give in position order. CoPE is defined
    for causal attention (``p_ij`` sums from key j up to query i; x-transformers asserts
    ``causal`` too), so ``causal_only`` refuses ``causal=False``. A KV cache (fewer
    queries than keys) is fine: every key is in ``k``.

    **One table per layer, shared by its heads**, ``pos_emb`` ``(n_positions, d)``,
    initialised to zeros, as in the paper's appendix (``torch.zeros(1, head_dim,
    npos_max)`` with the heads folded into the batch), the authors' training code and
    x-transformers (``torch.zeros(max_pos, dim_head)``). ``TinyTransformer`` shares one
    encoding across blocks unless ``share_pe=False``; the authors give each layer its
    own table (``--cope-shared`` is off by default).
    """

    causal_only = True
    four_terms = {
        "content-content": "kept",
        "content-position": "replaced by q_i . e[p_ij], p_ij a count of gated tokens",
        "position-content": "dropped",
        "position-position": "dropped",
    }

    def __init__(self, d_head: int, n_positions: int):
        super().__init__()
        self.d_head = check_positive_int(d_head, "d_head")
        self.n_positions = check_positive_int(n_positions, "n_positions")
        # e[k] for k = 0 .. n_positions - 1 (p_ij > 0, but floor(p) may be 0)
        self.pos_emb = nn.Parameter(torch.zeros(n_positions, d_head))

    def transform_scores(
        self,
        scores: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
    ) -> torch.Tensor:
        q = ctx.need("q", "CoPE")  # (b, h, i, d)
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q must have head dimension {self.d_head} for this CoPE "
                f"(d_head={self.d_head}), got {tuple(q.shape)}"
            )
        mask = ctx.mask  # (b|1, 1|h, i, j) bool, True = may attend; None: all
        logits = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
        # count in position order: p_ij sums the gates of the keys t with n_t >= n_j
        # (the mask removes n_t > m_i), so sort the keys by position, count, and put
        # the terms back (an identity permutation when positions increase)
        order = k_pos.argsort(dim=-1, stable=True)  # (b|1, j): token by rank
        rank = order.argsort(-1)  # (b|1, j): rank of each token
        b, h, i, j = logits.shape
        by_pos = logits.gather(-1, order[:, None, None, :].expand(b, h, i, j))
        bias = _cope_bias(q, by_pos, self.pos_emb)  # (b, h, i, j), keys by position
        return scores + bias.gather(-1, rank[:, None, None, :].expand(b, h, i, j))

    def causal_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        ctx: Context | None = None,
    ) -> torch.Tensor:
        """The attention ``(b, h, i, e)`` of a causal call in token order (query t sees
        keys ``0 .. t + j - i``): ``_CoPEBlocks``, blocks of ``block_size``
        queries, each against the keys it sees and recomputed in the backward pass.
        q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)``; half precision is
        computed in float32 and returned in v's dtype."""
        if q.shape[-1] != self.d_head:
            raise ValueError(
                f"q must have head dimension {self.d_head} for this CoPE "
                f"(d_head={self.d_head}), got {tuple(q.shape)}"
            )
        b, h, i, d = q.shape
        j, e = k.shape[2], v.shape[-1]
        work = torch.promote_types(
            torch.promote_types(q.dtype, self.pos_emb.dtype), torch.float32
        )
        with exact_dtypes(q):  # the blocks compute in work, whatever autocast says
            out = _CoPEBlocks.apply(
                q.reshape(b * h, i, d).to(work),  # (B, i, d), B = b h
                k.reshape(b * h, j, d).to(work),  # (B, j, d)
                v.reshape(b * h, j, e).to(work),  # (B, j, e)
                self.pos_emb.to(work),  # (P, d)
                scale,
            )  # (B, i, e)
        return out.view(b, h, i, e).to(v.dtype)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, n_positions={self.n_positions}"


@register("cope", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> CoPE:
    # p_ij <= i - j + 1 <= max_len: max_len + 1 rows (0 .. max_len) never clamp within
    # the training length, the authors' default (``cope_npos = block_size + 1``)
    return CoPE(d_model // n_heads, max_len + 1)

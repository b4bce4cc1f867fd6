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

import torch
from torch import nn

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_finite, check_positive_int

__all__ = ["CoPE", "cope_positions", "cope_bias"]

# queries per block of ``CoPE.causal_attention``. Measured on a CPU (one thread, h = 4,
# d = 32, n = 1024, fwd + bwd): 48 to 64 fastest, 16 and 128 about 20% slower; the
# peak grows with it: 4.7, 6.7, 10.7 MiB at 16, 32, 64 (one (h, n, n) float32: 16)
BLOCK = 64


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


def _cope_block(q_blk, k_seen, padded, future, scale, n_positions):
    """One block of queries against the keys they see, CoPE's forward maths.

    ``q_blk`` ``(B, i, d)`` (B = b h, i the block's queries, the last of which sees
    every key), ``k_seen`` ``(B, j, d)``, ``padded`` ``(n_positions + 1, d)`` (the
    table and a row of zeros), all in the working dtype; ``future`` ``(>= i, >= i)``:
    -inf above the diagonal, else 0. Returns ``(omega, g, w, floor, z_step, rows)``:
    the scores with CoPE's term ``(B, i, j)`` (-inf on the future), the gates ``(B,
    i, j)``, the lerp weights ``w = p - floor p`` ``(B, i, j)``, ``floor p`` ``(B, i,
    j)`` int64, ``z[floor + 1] - z[floor]`` ``(B, i, j)`` (the reference's ``z[ceil]
    - z[floor]`` wherever ``w > 0``; finite where ``w = 0``), and the number of table
    rows read."""
    i, j = q_blk.shape[1], k_seen.shape[1]
    # s = scale q k^T, -inf on the future (the last i keys: query t sees key t)
    s = torch.matmul(q_blk * scale, k_seen.transpose(1, 2))  # (B, i, j)
    s[:, :, j - i :] += future[:i, :i]
    # g_it = sigmoid(s_it): 0 on the future
    g = torch.sigmoid(s)  # (B, i, j)
    # p_ij = sum_{t >= j} g_it: the reference's order (cope_positions)
    p = g.flip(-1).cumsum(-1).flip(-1)  # (B, i, j)
    if j > n_positions - 1:  # p_ij <= j: clamped only if the table is shorter
        p.clamp_(max=n_positions - 1)
    rows = min(n_positions, j + 1)  # floor p, ceil p <= min(P - 1, j)
    q_flat = q_blk.reshape(-1, q_blk.shape[-1])  # (B i, d), one copy for both
    # z_i[k] = q_i . e[k] for the rows the block can read and one more (the padded
    # table's last row, 0, where rows = P)
    z = torch.mm(q_flat, padded[: rows + 1].T)  # (B i, rows + 1)
    z = z.view(*q_blk.shape[:2], rows + 1)  # (B, i, rows + 1)
    floor = p.long()  # p >= 0: truncation is the floor
    w = p.frac_()  # (B, i, j), p - floor p, the weight of the ceiling
    # q_i . e[p_ij] = z[floor] + w (z[floor + 1] - z[floor]) (the reference's lerp,
    # which reads z[floor] alone at an integer p: w = 0);  omega = s + q_i . e[p_ij]
    omega = s.add_(z.gather(-1, floor))  # (B, i, j)
    # z[k + 1] - z[k], any finite value past the table (read only where w = 0)
    step = z[..., 1:] - z[..., :-1]  # (B, i, rows)
    del z
    z_step = step.gather(-1, floor)  # (B, i, j)
    del step
    omega.addcmul_(w, z_step)
    return omega, g, w, floor, z_step, rows


def _padded(table: torch.Tensor) -> torch.Tensor:
    """``(P + 1, d)``: the table and a row of zeros."""
    return torch.cat((table, table.new_zeros(1, table.shape[1])))


def _future(size: int, like: torch.Tensor) -> torch.Tensor:
    """``(size, size)``: -inf above the diagonal, 0 on and below it."""
    ones = torch.ones(size, size, dtype=torch.bool, device=like.device)
    return torch.zeros(size, size, dtype=like.dtype, device=like.device).masked_fill(
        ones.triu(1), float("-inf")
    )


class _CoPEBlocks(torch.autograd.Function):
    """CoPE's causal attention in token order, blocks of ``BLOCK`` queries, each
    against the keys it sees, recomputed in the backward pass: memory O(n BLOCK).

    Inputs ``(B, i, d)``, ``(B, j, d)``, ``(B, j, e)``, ``(P, d)`` in the working
    dtype (B = b h, i <= j: query t sees keys 0 .. t + j - i). The backward pass keeps
    q, k, v, the table, the output and each row's log-sum-exp, and per block:

    dA = dO v^T;  domega = A (dA - D_i), D_i = dO_i . out_i;  dz[floor] += domega
    (1 - w), dz[ceil] += domega w;  dp = domega (z[ceil] - z[floor]);  dg_it =
    sum_{j <= t} dp_ij;  ds = domega + dg g (1 - g);  dq = scale ds k + dz e;
    dk = scale ds^T q;  dv = A^T dO;  de = dz^T q.
    """

    @staticmethod
    def forward(ctx, q, k, v, table, scale):
        n_positions = table.shape[0]
        i, j = q.shape[1], k.shape[1]
        out = q.new_empty(*q.shape[:2], v.shape[-1])  # (B, i, e)
        lse = q.new_empty(q.shape[:2])  # (B, i)
        future = _future(min(BLOCK, i), q)
        padded = _padded(table)  # (P + 1, d)
        for start in range(0, i, BLOCK):
            stop = min(start + BLOCK, i)
            seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
            omega = _cope_block(
                q[:, start:stop], k[:, :seen], padded, future, scale, n_positions
            )[0]  # the rest freed now: memory is one block's
            # out = sum_j exp(omega_ij - m) v_j / sum_j exp(omega_ij - m), m = max_j
            # omega_ij (the division on (i, e), not on the weights (i, j))
            top = omega.amax(-1, keepdim=True)  # (B, i, 1)
            unnormed = omega.sub_(top).exp_()  # (B, i, j)
            total = unnormed.sum(-1, keepdim=True)  # (B, i, 1)
            torch.bmm(unnormed, v[:, :seen], out=out[:, start:stop]).div_(total)
            # L_i = log sum_j exp(omega_ij) = m + log sum_j exp(omega_ij - m)
            torch.add(top.squeeze(-1), total.log_().squeeze(-1), out=lse[:, start:stop])
            del omega, unnormed  # before the next block is built
        ctx.save_for_backward(q, k, v, table, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, table, out, lse = ctx.saved_tensors
        scale, n_positions = ctx.scale, table.shape[0]
        i, j = q.shape[1], k.shape[1]
        d_out = d_out.to(out.dtype)
        # D_i = dO_i . out_i
        dot = (d_out * out).sum(-1)  # (B, i)
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        d_table = torch.zeros_like(table)
        future = _future(min(BLOCK, i), q)
        padded = _padded(table)  # (P + 1, d)
        for start in range(0, i, BLOCK):
            stop = min(start + BLOCK, i)
            seen = stop + j - i
            q_blk, d_blk = q[:, start:stop], d_out[:, start:stop]
            omega, g, w, floor, z_step, rows = _cope_block(
                q_blk, k[:, :seen], padded, future, scale, n_positions
            )
            # A = exp(omega - L)
            weights = omega.sub_(lse[:, start:stop, None]).exp_()  # (B, i, j)
            # dv = A^T dO
            dv[:, :seen].baddbmm_(weights.transpose(1, 2), d_blk)
            # domega = A (dO v^T - D_i)
            d_omega = torch.matmul(d_blk, v[:, :seen].transpose(1, 2))  # (B, i, j)
            d_omega.sub_(dot[:, start:stop, None]).mul_(weights)
            del omega, weights
            # z[ceil] - z[floor]: 0 at an integer p (w = 0), where the reference's
            # lerp reads one row (the clamp leaves an integer)
            z_step.mul_(w.sign())  # (B, i, j)
            # dz[floor] += domega (1 - w), dz[floor + 1] += domega w
            d_w = w.mul_(d_omega)  # (B, i, j), in w's memory
            d_z = q.new_zeros(*q_blk.shape[:2], rows).scatter_add_(-1, floor, d_omega)
            d_ceil = torch.zeros_like(d_z).scatter_add_(-1, floor, d_w)
            del floor
            d_z.sub_(d_ceil)
            d_z[..., 1:] += d_ceil[..., :-1]  # (B, i, rows)
            del d_ceil
            # dp = domega (z[ceil] - z[floor]);  dg_it = sum_{j <= t} dp_ij
            d_g = torch.cumsum(z_step.mul_(d_omega), -1, out=d_w)  # in w's memory
            # ds = domega + dg g (1 - g)
            d_s = d_omega.add_(torch.ops.aten.sigmoid_backward(d_g, g))  # (B, i, j)
            del z_step, d_g, d_w, w, g
            # dq = scale ds k + dz e
            d_z = d_z.view(-1, rows)  # (B i, rows)
            d_q = torch.mm(d_z, table[:rows]).view(*q_blk.shape)  # (B, i, d)
            dq[:, start:stop] = d_q.baddbmm_(d_s, k[:, :seen], alpha=scale)
            # dk = scale ds^T q;  de = dz^T q
            dk[:, :seen].baddbmm_(d_s.transpose(1, 2), q_blk, alpha=scale)
            q_flat = q_blk.reshape(-1, q_blk.shape[-1])  # (B i, d)
            d_table[:rows].addmm_(d_z.T, q_flat)
            del d_s, d_omega, d_z  # before the next block is built
        return dq, dk, dv, d_table, None


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
        keys ``0 .. t + j - i``): ``_CoPEBlocks``, blocks of ``BLOCK`` queries, each
        against the keys it sees and recomputed in the backward pass. q ``(b, h, i,
        d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)``; half precision is computed in
        float32 and returned in v's dtype."""
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

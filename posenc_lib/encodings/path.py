"""PaTH attention (Yang et al., 2025): position as a product of data-dependent
Householder-like transforms.

No position enters the embeddings. Every token t writes, per head, a direction w_t
and a strength beta_t, both computed from the layer input x_t, which make the matrix::

    H_t = I - beta_t w_t w_t^T                           (d, d), beta_t in [0, 2]

and query i scores key j <= i through the transforms of the tokens after j, up to i::

    s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(d)      (q_i^T k_j when i = j)
    o_i  = sum_j softmax_j(s_ij + D_ij) v_j

D is FoX's forget-gate bias (``forgetting_bias``) for PaTH-FoX, 0 for plain PaTH.
With unit w_t, H_t has eigenvalue 1 - beta_t along w_t and 1 elsewhere, so
||H_t|| <= 1 exactly for beta_t in [0, 2]: 0 is the identity (NoPE), 2 a reflection
(two reflections make a rotation: RoPE is the data-independent special case).

Reference: ``naive_path_attn`` in ``fla/ops/path_attn/naive.py`` and the layer
``PaTHAttention`` in ``fla/layers/path_attn.py`` of
github.com/fla-org/flash-linear-attention (read at commit bc3b101d).
``path_attention`` equals ``naive_path_attn`` with ``g = 0`` (tests/test_path.py).

**How the scores are computed.** ``_diagonal_scores`` is the definition: n - 1
steps, one transform per step for every query; the layer's ``score_bias`` (the
reference) and ``path_attention`` use it. ``path_scores`` and the layer's
``fast_score_bias`` (the fused backend's form) use ``_chunked_scores``, the paper's
and fla's algorithm: chunks of 64 tokens, the product of each chunk's transforms in
compact WY form ``I - W^T T W`` (T from one triangular solve, the UT transform), and
one step per chunk across chunks.

**The gate convention.** fla adds the log gates *before* the softmax scale, in the
reference and in the Triton kernel (``(s + g_i - g_j) * scale``): its gate is
ours multiplied by 1/scale. The library keeps FoX's convention (the gate added after
the scale, ``softmax(q.k/sqrt(d) + D)``), so that PaTH-FoX with beta = 0 is exactly
``pl.ForgettingAttention``; fla's ``g`` is our ``log_f = scale * g``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int, exact_dtypes
from .fox import _bias as _forgetting_bias
from .fox import _position_order

__all__ = ["PaTHAttention", "path_attention", "path_scores"]


def _check(q, k, w, beta) -> None:
    """Shapes and values of a PaTH call: clear errors naming the argument."""
    for name, t in (("q", q), ("k", k), ("w", w), ("beta", beta)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(
                f"{name} must be a floating-point tensor, got "
                f"{getattr(t, 'dtype', type(t).__name__)}"
            )
    if q.dim() != 4 or k.shape != q.shape or w.shape != q.shape:
        raise ValueError(
            "q, k and w must have the same shape (b, h, n, d), got "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(w.shape)}"
        )
    if beta.shape != q.shape[:3]:
        raise ValueError(
            f"beta must have shape (b, h, n) = {tuple(q.shape[:3])}, "
            f"got {tuple(beta.shape)}"
        )
    if not torch.isfinite(beta).all() or (beta < 0).any() or (beta > 2).any():
        raise ValueError(
            "beta must lie in [0, 2] (H = I - beta w w^T has norm <= 1 for a unit w; "
            "the layer makes beta = 2 sigmoid(.) in (0, 2)), got values in "
            f"[{beta.min().item():.4g}, {beta.max().item():.4g}]"
        )


def _diagonal_scores(q, k, w, beta) -> torch.Tensor:
    """The readable definition of ``path_scores`` (no checks, token order),
    ``(b, h, i, j)``: one diagonal per step, n - 1 steps (``_chunked_scores`` is
    the fast form, tested equal)."""
    b, h, n, _ = q.shape
    s = q.new_full((b, h, n, n), float("-inf"))
    # r = 0: s_ii = q_i . k_i
    s.diagonal(0, -2, -1).copy_((q * k).sum(-1))
    u = q  # u_i = H_{i-r+1} ... H_i q_i, for the queries i = r .. n-1
    for r in range(1, n):
        u, ws, bs = u[..., 1:, :], w[..., 1 : n - r + 1, :], beta[..., 1 : n - r + 1]
        # u_i <- H_{i-r+1} u_i = u_i - beta (w . u_i) w
        u = u - (bs * (u * ws).sum(-1))[..., None] * ws  # (b, h, n-r, d)
        # s_{i, i-r} = u_i . k_{i-r}: the r-th diagonal below the main one
        s.diagonal(-r, -2, -1).copy_((u * k[..., : n - r, :]).sum(-1))
    return s


CHUNK = 64  # tokens per chunk of ``_chunked_scores``, as fla's ``chunk_size``


def _chunked_scores(
    q, k, w, beta, chunk_size: int = CHUNK, plain: bool = True
) -> torch.Tensor:
    """``_diagonal_scores`` chunk by chunk (the paper's and fla's algorithm): equal
    values, ``(b, h, i, j)``, in n / C sequential steps instead of n - 1. With
    ``plain=False``, only what PaTH adds to the plain logit: ``s_ij - q_i . k_j``.

    Within a chunk of C tokens, rows ``w_t`` of W ``(C, d)``, B = diag(beta): the
    product ``P_t = H_t ... H_1 = I - sum_{s<=t} w_s u_s^T`` has, from
    ``P_t = H_t P_{t-1}``, ``u_t = beta_t (w_t - sum_{s<t} (w_t . w_s) u_s)``, i.e.
    ``(I + L) U = B W`` with ``L_ts = beta_t w_t . w_s`` (s < t): U = T W, with
    ``T = (I + L)^{-1} B`` by one triangular solve (the UT transform), and the chunk's
    product is ``P = I - W^T T W`` (the compact WY form). Any run ``H_b ... H_a`` of
    the chunk is the same with W, T cut to rows a..b (a diagonal block of a
    triangular inverse is the inverse of the block). So, for tokens i, j of a chunk:

    * ``s_ij = q_i . k_j - sum_{s<=i} (q_i . w_s) (T M)_sj``, with
      ``M_sj = w_s . k_j`` for s > j (j <= i);
    * ``q~_i = H_1 ... H_i q_i = q_i - sum_{s<=i} (q_i . w_s) u_s`` (back to the
      chunk's start) and ``k~_j = H_C ... H_{j+1} k_j = k_j - sum_t (T M)_tj w_t``
      (on to its end); a key row passes the whole chunk as ``k P^T``,
      ``P^T = I - U^T W`` (d, d).

    Across chunks, ``s_ij = q~_i^T P_{c(i)-1} ... P_{c(j)+1} k~_j``: one step per
    chunk reads its rows of scores against every earlier key, then carries those
    keys through its P and appends its own k~. O(n^2 d + n (C + d) d) work. The
    backward (``_ChunkedScores``) recomputes the chunks' factors and carried keys
    rather than keep them: the scores are the only n x n tensor, and nothing of
    size n C or n^2 d / C is held between forward and backward.
    """
    b, h, n, d = q.shape
    if n == 0:
        return q.new_zeros(b, h, 0, 0)
    out_dtype = q.dtype
    # solve_triangular wants float32 or float64
    work = torch.promote_types(q.dtype, torch.float32)
    c = min(chunk_size, n)
    m = -(-n // c)  # chunks
    q, k, w, beta = (t.to(work) for t in (q, k, w, beta))
    if m * c > n:  # padding with beta = 0 (H = I) tokens, dropped at the end
        q, k, w = (F.pad(t, (0, 0, 0, m * c - n)) for t in (q, k, w))
        beta = F.pad(beta, (0, m * c - n))
    q, k, w, beta = (t.flatten(0, 1) for t in (q, k, w, beta))  # (b h) as one batch
    with exact_dtypes(q):  # autocast would run the products in bfloat16
        s = _ChunkedScores.apply(q, k, w, beta, c, plain).view(b, h, m * c, m * c)
    return s[:, :, :n, :n].to(out_dtype)  # (b, h, i, j)


def _chunk_factors(q, k, w, beta, c: int, plain: bool):
    """The within-chunk half of ``_chunked_scores``, for q, k, w ``(B, m c, d)``,
    beta ``(B, m c)``: q~, k~ ``(B, m, c, d)``, P^T ``(B, m, d, d)`` and the scores
    within each chunk ``(B, m, c, c)`` (-inf above the diagonal)."""
    big, n, d = q.shape
    m = n // c
    # one batch of (B m) chunks, 3-d so that every product is a bmm that reads its
    # transposed operand in place (a 4-d matmul copies it, and keeps the copy)
    qc, kc, wc = (t.reshape(big * m, c, d) for t in (q, k, w))
    bw = beta.reshape(big * m, c, 1) * wc  # rows beta_t w_t
    ones = torch.ones(c, c, dtype=torch.bool, device=q.device)
    below, on_or_below = ones.tril(-1), ones.tril()
    # I + L,  L_ts = beta_t w_t . w_s  (s < t)
    eye_l = torch.eye(c, dtype=q.dtype, device=q.device) + (bw @ wc.mT) * below
    # U = T W = (I + L)^{-1} B W,  T M = (I + L)^{-1} B M,  M_sj = w_s . k_j (s > j)
    u = torch.linalg.solve_triangular(eye_l, bw, upper=False, unitriangular=True)
    tm = torch.linalg.solve_triangular(
        eye_l, (bw @ kc.mT) * below, upper=False, unitriangular=True
    )  # ((B m), c, c)
    qw = (qc @ wc.mT) * on_or_below  # q_i . w_s for s <= i
    # s_ij - q_i . k_j = - sum_{s<=i} (q_i . w_s) (T M)_sj, within a chunk
    intra = -(qw @ tm) + (qc @ kc.mT if plain else 0.0)
    intra = intra.masked_fill(~on_or_below, float("-inf"))  # ((B m), c, c)
    # q~_i = q_i - sum_{s<=i} (q_i . w_s) u_s,  k~_j = k_j - sum_t (T M)_tj w_t
    q_start, k_end = qc - qw @ u, kc - tm.mT @ wc  # ((B m), c, d)
    # P^T = I - U^T W, each chunk's product, acting on rows
    p_t = torch.eye(d, dtype=q.dtype, device=q.device) - u.mT @ wc  # ((B m), d, d)
    return tuple(t.view(big, m, *t.shape[1:]) for t in (q_start, k_end, p_t, intra))


def _carry_keys(k_end, p_t) -> list[torch.Tensor]:
    """keys[a] ``(B, a c, d)``: the k~ of chunks 0 .. a-1 carried to chunk a's start,
    ``keys[a+1] = [keys[a] P_a^T ; k~_a]``."""
    keys = [k_end.new_zeros(k_end.shape[0], 0, k_end.shape[-1])]
    for a in range(k_end.shape[1] - 1):
        keys.append(torch.cat([keys[a] @ p_t[:, a], k_end[:, a]], 1))
    return keys


class _ChunkedScores(torch.autograd.Function):
    """``_chunked_scores`` on q, k, w ``(B, m c, d)``, beta ``(B, m c)`` ->
    ``(B, m c, m c)``: row block a is ``[q~_a K_a^T | intra_a | -inf]``, ``K_a`` the
    earlier keys carried to chunk a (minus ``q_a k_{<a}^T`` unless ``plain``),
    written once into the output. Its backward recomputes the chunks' factors (with
    autograd) and the carried keys, and keeps nothing but the inputs."""

    @staticmethod
    def forward(ctx, q, k, w, beta, c: int, plain: bool):
        q_start, k_end, p_t, intra = _chunk_factors(q, k, w, beta, c, plain)
        big, m = q_start.shape[:2]
        out = q.new_full((big, m * c, m * c), float("-inf"))
        for a, keys in enumerate(_carry_keys(k_end, p_t)):
            rows = out[:, a * c : (a + 1) * c]  # (B, c, m c)
            rows[:, :, a * c : (a + 1) * c] = intra[:, a]
            if a:
                # s_ij = q~_i . (P_{a-1} ... P_{c(j)+1} k~_j), j in earlier chunks
                block = q_start[:, a] @ keys.mT  # (B, c, a c)
                if not plain:  # - q_i . k_j
                    q_a, k_before = q[:, a * c : (a + 1) * c], k[:, : a * c]
                    block.baddbmm_(q_a, k_before.mT, alpha=-1)
                rows[:, :, : a * c] = block
        ctx.save_for_backward(q, k, w, beta)
        ctx.c, ctx.plain = c, plain
        return out

    @staticmethod
    @once_differentiable  # no gradient of the gradient: refused, not wrong
    def backward(ctx, g):
        with exact_dtypes(g):  # in the forward's dtypes, under autocast too
            return _ChunkedScores._backward(ctx, g)

    @staticmethod
    def _backward(ctx, g):
        c, plain = ctx.c, ctx.plain
        inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
        q, k, _, _ = inputs
        with torch.enable_grad():
            factors = _chunk_factors(*inputs, c, plain)
        q_start, k_end, p_t, _ = (t.detach() for t in factors)
        m = q_start.shape[1]
        keys = _carry_keys(k_end, p_t)
        d_q_start, d_k_end, d_p_t = (torch.zeros_like(t) for t in (q_start, k_end, p_t))
        d_intra = torch.stack(
            [g[:, a * c : (a + 1) * c, a * c : (a + 1) * c] for a in range(m)], 1
        )
        d_q, d_k = torch.zeros_like(q), torch.zeros_like(k)
        d_next = None  # the gradient of keys[a + 1]
        for a in range(m - 1, -1, -1):
            d_keys = keys[a].new_zeros(keys[a].shape)
            if d_next is not None:  # keys[a+1] = [keys[a] P_a^T ; k~_a]
                d_k_end[:, a] = d_next[:, a * c :]
                d_p_t[:, a] = keys[a].mT @ d_next[:, : a * c]
                d_keys += d_next[:, : a * c] @ p_t[:, a].mT
            if a:  # row block a = q~_a keys[a]^T (- q_a k_{<a}^T)
                g_a = g[:, a * c : (a + 1) * c, : a * c]  # (B, c, a c)
                d_q_start[:, a] = g_a @ keys[a]
                d_keys += g_a.mT @ q_start[:, a]
                if not plain:
                    d_q[:, a * c : (a + 1) * c] -= g_a @ k[:, : a * c].detach()
                    d_k[:, : a * c] -= g_a.mT @ q[:, a * c : (a + 1) * c].detach()
            d_next = d_keys
        grads = torch.autograd.grad(
            factors, inputs, (d_q_start, d_k_end, d_p_t, d_intra), allow_unused=True
        )
        grads = [torch.zeros_like(t) if d is None else d for d, t in zip(grads, inputs)]
        return grads[0] + d_q, grads[1] + d_k, grads[2], grads[3], None, None


def path_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    w: torch.Tensor,
    beta: torch.Tensor,
    pos: torch.Tensor | None = None,
) -> torch.Tensor:
    """Unscaled PaTH logits ``s_ij = q_i^T H_i ... H_{j+1} k_j`` ``(b, h, i, j)``,
    -inf above the diagonal (PaTH is causal).

    q, k, w ``(b, h, n, d)``, beta ``(b, h, n)`` in [0, 2]; ``w`` is used as given
    (the layer normalises it). ``pos`` ``(b|1, n)``: the transforms are multiplied in
    position order (stable for ties), None for token order.

    Cost: O(n^2 d) in n / 64 steps, chunk by chunk (``_chunked_scores``: the
    compact WY form of the paper and fla). The definition it equals is
    ``_diagonal_scores``, n - 1 steps: step r applies one transform to every query
    (``u_i <- H_{i-r+1} u_i``, symmetric H) and reads off the r-th diagonal.
    """
    _check(q, k, w, beta)
    return _scores(q, k, w, beta, pos)


def _scores(q, k, w, beta, pos, plain: bool = True, chunked: bool = True):
    """``path_scores`` without checks (the layer's w and beta pass them by
    construction; a hook reads no tensor value into Python); ``plain=False``: only
    what PaTH adds, ``s_ij - q_i . k_j``; ``chunked=False``: by the definition, the
    loop over diagonals (in float32 at least, as the chunks)."""

    def scores(q, k, w, beta):
        if chunked:
            return _chunked_scores(q, k, w, beta, plain=plain)
        work = torch.promote_types(q.dtype, torch.float32)
        q, k, w, beta = (t.to(work) for t in (q, k, w, beta))
        s = _diagonal_scores(q, k, w, beta)  # (b, h, i, j)
        return s if plain else s - q @ k.mT  # - q_i . k_j (-inf stays -inf)

    if pos is None:
        return scores(q, k, w, beta).to(q.dtype)
    b, h, n, d = q.shape
    order, rank = _position_order(torch.as_tensor(pos, device=q.device))
    order, rank = order.expand(b, n), rank.expand(b, n)

    def by_position(t):  # (b, h, n, ...) sorted by position
        index = order[:, None, :].expand(b, h, n)
        if t.dim() == 4:
            return t.gather(2, index[..., None].expand(b, h, n, t.shape[-1]))
        return t.gather(2, index)

    s = scores(*map(by_position, (q, k, w, beta))).to(q.dtype)
    rows = rank[:, None, :, None].expand(b, h, n, n)
    cols = rank[:, None, None, :].expand(b, h, n, n)
    # back to token order: s_tok[a, c] = s_pos[rank a, rank c]
    return s.gather(2, rows).gather(3, cols)


def path_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    beta: torch.Tensor,
    log_f: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal PaTH attention, ``(b, h, n, e)``:
    ``o_i = sum_{j<=i} softmax_j(scale * q_i^T H_i ... H_{j+1} k_j + D_ij) v_j``.

    q, k, w ``(b, h, n, d)``, v ``(b, h, n, e)``, beta ``(b, h, n)`` in [0, 2],
    ``H_t = I - beta_t w_t w_t^T`` with w as given. ``log_f`` ``(b, h, n)``, log
    forget gates <= 0 (PaTH-FoX): ``D_ij = sum_{l=j+1..i} log f_l``, added *after*
    the scale, as in FoX (fla adds its ``g`` before: pass ``log_f = scale * g``).
    ``scale`` defaults to 1/sqrt(d). Tokens are in position order.

    The scores come from the loop over diagonals (``_diagonal_scores``), the
    readable definition whose cost the book's chapter measures, as the layer's
    ``score_bias``; ``path_scores`` and the layer's ``fast_score_bias`` use the
    chunked form (``_chunked_scores``), equal to it.
    """
    _check(q, k, w, beta)
    if not isinstance(v, torch.Tensor) or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v must have shape (b, h, n, e) with (b, h, n) = {tuple(q.shape[:3])}, "
            f"got {tuple(getattr(v, 'shape', ()))}"
        )
    if v.dtype != q.dtype:
        raise TypeError(f"v must have q's dtype {q.dtype}, got {v.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    # scale * q_i^T H_i ... H_{j+1} k_j, -inf above the diagonal
    scores = _diagonal_scores(q, k, w, beta) * scale  # (b, h, i, j)
    if log_f is not None:
        from .fox import forgetting_bias  # its checks: finite, <= 0, (b, h, n)

        if log_f.shape != beta.shape:
            raise ValueError(
                f"log_f must have shape (b, h, n) = {tuple(beta.shape)}, "
                f"got {tuple(log_f.shape)}"
            )
        scores = scores + forgetting_bias(log_f)  # + D_ij (FoX)
    return scores.softmax(-1) @ v  # (b, h, i, e)


class PaTHAttention(PositionalEncoding):
    """PaTH: the scaled logit of query i and key j becomes
    ``q_i^T H_i ... H_{j+1} k_j / sqrt(d)`` (+ FoX's ``D_ij`` with ``forget_gate``).

    The hook is ``score_bias``: it returns what PaTH adds to the plain logit,
    ``(q_i^T (H_i ... H_{j+1} - I) k_j) / sqrt(d) + D_ij``, by the definition (the
    loop over diagonals), so the attention stays the reference's ``softmax(q.k *
    scale + bias) v``; ``fast_score_bias`` computes it chunk by chunk, which the
    fused path runs (the bias as a float mask). FlexAttention is refused (no
    ``score_mod``): the product of transforms is not a function of one score and two
    indices.

    The layer, as fla's ``PaTHAttention`` makes it from the layer input ``x``
    (read through ``ctx``): ``w = l2_norm(x W_w)`` per head (fla's
    ``use_low_rank_w=False`` branch: one ``Linear(D, D)``, no bias; fla's default
    adds a rank-32 bottleneck and a causal short convolution over w, left out here),
    ``beta = 2 sigmoid(x W_beta + b)`` in (0, 2) (``bt_proj``, one per head), and
    with ``forget_gate`` FoX's gate ``log f = logsigmoid(x W_f + b_f)``.

    Like FoX it is causal (``causal_only``), reads the transforms of every key from
    the keys' layer inputs (the whole sequence, or what a ``KVCache`` holds: the
    queries are then the last of the keys) and multiplies them in position order.
    """

    causal_only = True
    four_terms = {
        "content-content": "kept, through a data-dependent product of transforms",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped; position enters multiplicatively, as in RoPE",
    }

    def __init__(self, d_model: int, n_heads: int, forget_gate: bool = False):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads})"
            )
        if not isinstance(forget_gate, bool):
            raise TypeError(f"forget_gate must be a bool, got {forget_gate!r}")
        self.forget_gate = forget_gate
        self.w_proj = nn.Linear(d_model, d_model, bias=False)  # w_t, every head
        self.beta_proj = nn.Linear(d_model, n_heads, bias=True)  # beta_t per head
        self.gate = nn.Linear(d_model, n_heads, bias=True) if forget_gate else None
        if forget_gate:
            nn.init.zeros_(self.gate.bias)  # as FoX: f = 1/2 before training

    def transforms(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer input ``(b, n, D)`` -> unit directions ``w`` ``(b, h, n, d)`` and
        strengths ``beta`` ``(b, h, n)`` in (0, 2)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            raise ValueError(f"x must be a tensor (b, n, D), got {type(x).__name__}")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}), got {tuple(x.shape)}"
            )
        b, n, _ = x.shape
        w = self.w_proj(x).view(b, n, self.n_heads, -1).transpose(1, 2)
        # w_t / |w_t|, per head
        w = F.normalize(w, dim=-1)  # (b, h, n, d)
        # beta_t = 2 sigmoid(u . x_t + b)
        beta = 2 * torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (b, h, n)
        return w, beta

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
        *,
        chunked: bool = False,
    ) -> torch.Tensor:
        """``(b, h, i, j)``: ``(q_i^T (H_i ... H_{j+1} - I) k_j) / sqrt(d) + D_ij``,
        by the definition, the loop over diagonals (``_diagonal_scores``, n - 1
        steps); ``chunked=True``: by the paper's algorithm (``_chunked_scores``, n /
        64 steps), which the fused backend runs (``fast_score_bias``)."""
        check_heads(q, self, self.n_heads, self.d_model // self.n_heads)
        check_heads(k, self, self.n_heads, self.d_model // self.n_heads, "k")
        x = ctx.need("x", "PaTHAttention")  # (b, j, D): the keys' layer inputs
        i, j = q.shape[2], k.shape[2]
        if x.shape[1] != j or i > j:
            raise ValueError(
                "PaTHAttention needs the transform of every key, computed from the "
                "keys' layer inputs x: call it on the whole sequence (i == j), or "
                f"through MultiHeadAttention with a KVCache; got {i} queries, {j} keys "
                f"and x of {x.shape[1]} tokens"
            )
        w, beta = self.transforms(x)
        w, beta = w.to(q.dtype), beta.to(q.dtype)
        scale = 1.0 / math.sqrt(q.shape[-1])
        # keys at s, s+1, ... (the call's Positions say so, no sync): token order is
        # position order, nothing to sort
        known = getattr(ctx, "positions", None)
        pos = None if known is not None and known.run else k_pos
        # queries are the last i keys (a KV cache): rows of earlier keys are zeros,
        # computed and dropped, so the transforms between them still count
        q_all = torch.cat([q.new_zeros(*q.shape[:2], j - i, q.shape[-1]), q], 2)
        # scale * (q_i^T H_i ... H_{j+1} k_j - q_i^T k_j), linear in q_i
        bias = _scores(q_all * scale, k, w, beta, pos, False, chunked)[:, :, j - i :]
        if self.gate is not None:
            log_f = F.logsigmoid(self.gate(x)).transpose(1, 2).to(q.dtype)  # (b, h, j)
            bias = bias + _forgetting_bias(log_f, pos)[:, :, j - i :]  # + D_ij
        return bias  # (b, h, i, j)

    def fast_score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
    ) -> torch.Tensor:
        """``score_bias`` by the paper's and fla's algorithm: chunks of 64 tokens,
        each chunk's product of transforms in compact WY form (``_chunked_scores``)."""
        return self.score_bias(q, k, q_pos, k_pos, ctx, chunked=True)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, "
            f"forget_gate={self.forget_gate}"
        )


@register("path")
def _make(*, d_model: int, n_heads: int, max_len: int) -> PaTHAttention:
    return PaTHAttention(d_model, n_heads)


@register("path_fox")
def _make_fox(*, d_model: int, n_heads: int, max_len: int) -> PaTHAttention:
    return PaTHAttention(d_model, n_heads, forget_gate=True)

"""Stick-breaking attention (Tan et al., 2025): a stick-breaking process, not softmax.

No position enters the embeddings, queries or keys. Query i turns every earlier key's
logit into a break point ``beta_ij = sigmoid(z_ij)`` and walks back from the most recent
key, each key taking the fraction ``beta`` of the stick that the keys after it left
over::

    z_ij  = q_i . k_j / sqrt(d)                       the usual scaled score
    A_ij  = beta_ij * prod_{j < l < i} (1 - beta_il)   for j < i, 0 otherwise
    o_i   = sum_j A_ij v_j  (+ (1 - sum_j A_ij) v_i, the leftover stick, optional)

The product runs over the keys *between* j and the query: the most recent key is broken
off first, so the process has a recency bias built in and needs no positional encoding.
A row sums to ``1 - prod_{l < i} (1 - beta_il) <= 1``. With ``attend_current=True`` the
query's own key joins in (``j <= i``, product over ``j < l <= i``).

Conventions checked against the authors' code
(github.com/shawntan/stickbreaking-attention, commit 3147a38):

* **Direction.** ``stickbreaking`` in ``stickbreaking_attention/sb_ref.py`` sums
  ``log(1 - beta_il)`` with ``cum_weight = tril(-1)``, i.e. over keys l > j (and < i):
  the keys between j and the query, as above.
* **attend_current=False** is the default of ``sb_attn`` (``sb_attn/__init__.py``) and
  of the training code that calls it (``SBAttention`` in IBM/dolomite-engine,
  ``sequence_mixer_blocks/stickbreaking_attention.py``, whose decoding path also drops
  the current key: ``k[..., :-1, :]``).
* **1/sqrt(d)**: ``sb_attn(inv_temp=None)`` uses ``1 / math.sqrt(q.size(-1))``, so
  ``StickBreaking.scale`` is the default.
* **The leftover stick** ``1 - sum_j A_ij`` is returned by the kernel as ``rem``. The
  authors' kernel tests add ``rem * v_i`` (``ref_fwd`` in ``tests/test_attn.py``:
  ``o = o + rem[..., None] * v``), which ``leftover="value"`` reproduces; fla's layer
  drops it (``leftover=None``); dolomite's ``SBAttention`` multiplies it by a learned
  per-head vector followed by a GroupNorm, which needs a norm after attention and is
  not offered here.

**Log space.** ``log beta = log sigmoid(z) = -softplus(-z)`` and ``log(1 - beta) =
log sigmoid(-z) = -softplus(z)`` are finite for every finite z, and the product becomes
a reversed cumulative sum, so ``A_ij = exp(log beta_ij + sum_{j<l<i} log(1 - beta_il))``
is computed without ever forming a product or a ratio of products: no overflow, no
0/0, for any logits (``stick_breaking_weights``). In that form
``log A_ij = z_ij - sum_{l=j}^{i-1} softplus(z_il)``: the score plus a non-positive,
data-dependent penalty that grows with the number of keys in between; with a constant
logit z it is ALiBi's ``-m (i - j)`` with slope ``m = softplus(z)`` (up to a constant).

**Without an (i, j) tensor.** A causal call in token order (``causal_attention``, run
by the fused backend) goes in blocks of queries (``block_size``: 64; on a GPU, for a
large call, n / 8 up to 256), each against only the keys
it sees, taken in reversed token order so that the sum over the keys after j is a
cumulative sum; the backward pass recomputes each block (``_StickBreakingBlocks``),
so memory is ``O(n * BLOCK)``, as in the authors' and flash-linear-attention's
kernels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..backends.blocks import query_blocks  # (start, stop, seen, ...) per block
from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_bool_mask

__all__ = ["StickBreaking", "stick_breaking_weights"]

LEFTOVERS = ("value", None)
BLOCK = 64  # queries per block in causal_attention: 64 and 128 ran as fast (fwd+bwd
# of TinyTransformer(256, 128, 4, 2) on 1024 tokens, one CPU thread: 2.2x NoPE), 256
# 2.6x; a block holds 3 (b, h, BLOCK, n) float tensors at most, in the backward pass
BLOCK_OFF_CPU = 256  # elsewhere (a GPU), at most, for a large call: a block is some
# 20 kernels forward and 40 backward, so 64 queries launch thousands per layer and
# step at n = 2048; a call with b h n >= LARGE (a model's training step, 4 x 16 x
# 2048) takes n / 8 queries, 64 to 256, so that its kernels, not their launches,
# take the time (4 x 16 x 256 x 2048 floats: 134 MB a pass), and a block's tensors
# stay an eighth of the (b, h, n, n) scores at most. A smaller call (one layer of a
# chapter) is launch-bound with any block: it keeps 64, and its memory grows as n.
# Chosen, not measured on a card: the GPU run (make test-gpu) times it
LARGE = 2**17


def block_size(device: torch.device, n: int, rows: int = 1) -> int:
    """Queries per block of ``causal_attention`` for ``n`` queries of ``rows`` (b
    h) rows on ``device``: ``BLOCK`` on a CPU (measured) and for a small call;
    for ``rows * n >= LARGE`` elsewhere, ``n // 8`` between ``BLOCK`` and
    ``BLOCK_OFF_CPU``."""
    if device.type == "cpu" or rows * n < LARGE:
        return BLOCK
    return min(BLOCK_OFF_CPU, max(BLOCK, n // 8))


def stick_breaking_weights(
    scores: torch.Tensor,
    attend_current: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Break-point logits ``(b, h, i, j)`` -> stick-breaking weights ``(b, h, i, j)``.

    ``A_ij = sigmoid(z_ij) * prod_l (1 - sigmoid(z_il))`` over the visible keys l
    between key j and query i: ``j < l < i``, or ``j < l <= i`` with
    ``attend_current``. Weights are exactly 0 where attention is not allowed (the
    future; the query itself unless ``attend_current``; keys that ``mask`` hides).

    * Token order: when ``i < j`` the queries are the last ``i`` of the ``j`` tokens (a
      KV cache), so query t sits at key index ``t + j - i``.
    * ``mask`` (bool, True = may attend), broadcastable to ``scores``: a hidden key is
      skipped, as if absent: it takes no weight and leaves the stick unchanged (fla's
      naive reference does the same). It may hide keys but not reveal any: a mask that
      allows a key after its query in token order is refused (``ValueError``).
    * Computed in log space in float32 or float64 (float16/bfloat16 scores are
      computed in float32, as the authors' reference does, and returned in their
      dtype): finite and in [0, 1] for any logits, including +-inf.

    Errors: ``TypeError`` unless ``scores`` is a floating-point tensor and ``mask`` a
    bool tensor; ``ValueError`` for a shape that is not ``(b, h, i, j)`` with
    ``i <= j``, NaN scores, or a mask that does not broadcast or reveals the future.
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise TypeError(
            "scores must be a floating-point tensor of break-point logits, got "
            f"{getattr(scores, 'dtype', type(scores).__name__)}"
        )
    if not isinstance(attend_current, bool):
        raise TypeError(
            f"attend_current must be a bool, got {type(attend_current).__name__}"
        )
    if scores.dim() != 4:
        raise ValueError(
            f"scores must have shape (b, h, i, j), got {tuple(scores.shape)}"
        )
    i, j = scores.shape[-2:]
    if i > j:
        raise ValueError(
            f"scores must have no more queries than keys (i <= j: the queries are the "
            f"last i tokens), got i = {i}, j = {j}"
        )
    if torch.isnan(scores).any():
        raise ValueError("scores hold NaN; stick-breaking needs a logit for every key")
    work = scores if scores.dtype in (torch.float32, torch.float64) else scores.float()
    key = torch.arange(j, device=scores.device)  # (j,)
    own = torch.arange(i, device=scores.device)[:, None] + (j - i)  # (i, 1)
    # the keys a query may break the stick on, in token order
    allowed = key <= own if attend_current else key < own  # (i, j)
    if mask is not None:
        check_bool_mask(mask, scores.shape, "scores")
        if (mask & (key > own)).any():
            raise ValueError(
                "mask allows a query a key that comes after it in token order; "
                "stick-breaking breaks the stick backwards from the query in token "
                "order, so it needs a causal mask (positions that increase along the "
                "sequence) and can only hide keys"
            )
        allowed = allowed & mask  # (b|1, h|1, i, j)
    # log beta_ij = log sigmoid(z_ij) = -softplus(-z_ij)
    log_beta = F.logsigmoid(work)  # (b, h, i, j)
    # log(1 - beta_il) = log sigmoid(-z_il) = -softplus(z_il); 0 (skip) where hidden
    log_keep = F.logsigmoid(-work).masked_fill(~allowed, 0.0)  # (b, h, i, l)
    # sum_{l > j} log(1 - beta_il): a reversed cumulative sum, shifted by one key so
    # that key j's own term is left out without subtracting it (no cancellation)
    after = log_keep.flip(-1).cumsum(-1).flip(-1)  # sum over l >= j
    after = F.pad(after[..., 1:], (0, 1))  # sum over l > j
    # log A_ij = log beta_ij + sum_{j < l} log(1 - beta_il); -inf where not allowed
    log_a = (log_beta + after).masked_fill(~allowed, float("-inf"))
    return log_a.exp().to(scores.dtype)  # (b, h, i, j)


def _hidden(rows: int, attend_current: bool, device) -> torch.Tensor:
    """``(rows, rows)`` bool, True where query r may not break the stick on the key
    ``m`` places before the block's last key (reversed order): the query's own token
    (unless ``attend_current``) and the tokens after it, ``m + r <= rows - 1``
    (``rows - 2`` with ``attend_current``). Every key further back is allowed."""
    r = torch.arange(rows, device=device)
    return r[:, None] + r[None, :] <= rows - 1 - int(attend_current)  # (r, m)


def _block_weights(
    rows: torch.Tensor, keys: torch.Tensor, scale: float, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block's queries ``rows`` ``(b, h, r, d)`` and the keys they see in reversed
    token order ``keys`` ``(b, h, s, d)`` -> ``(A, z, rest)``: the weights ``(b, h, r,
    s)`` (reversed order), the break-point logits ``(b, h, r, s)`` (``-inf`` where
    hidden) and the leftover stick ``1 - sum_j A_ij`` ``(b, h, r, 1)``. Two ``(b, h,
    r, s)`` tensors in all (no log-sigmoid buffer, the cumulative sum in place)."""
    n = rows.shape[2]
    # z = scale q k^T, -inf where no break point (then log(1 - beta) = 0, A = 0)
    z = (rows * scale) @ keys.mT  # (b, h, r, s)
    z[..., :n].masked_fill_(hidden, float("-inf"))
    # -log(1 - beta_il) = softplus(z_il), exactly z_il from where exp(-z) < eps
    # (the default threshold, 20, would be 2e-9 off in float64)
    cut = -math.log(torch.finfo(z.dtype).eps)  # float32: 15.9, float64: 36.0
    # sum_{l >= j} softplus(z_il): keys in reversed order, a cumulative sum
    after = F.softplus(z, threshold=cut).cumsum_(-1)  # (b, h, r, s)
    # 1 - sum_j A_ij = prod_l (1 - beta_il) (telescoping): exact, no cancellation
    rest = after[..., -1:].neg().exp_()  # (b, h, r, 1)
    # log A_ij = z_ij + sum_{l >= j} log(1 - beta_il) = z_ij - sum softplus(z_il)
    log_a = after.sub_(z).neg_()  # (b, h, r, s); -inf where hidden
    # A_ij = exp(log A_ij), and exactly 0 below exp(floor + 1) (hidden keys too): a
    # vectorised exp that returns a subnormal number or 0 takes a slow path (a CPU's:
    # 30 to 100 times slower), and so do matrix products of subnormal numbers
    floor = math.log(torch.finfo(rows.dtype).tiny) + 8  # float32: -79.3
    weights = F.threshold_(log_a.clamp_min_(floor).exp_(), math.exp(floor + 1), 0.0)
    return weights, z, rest


class _StickBreakingBlocks(torch.autograd.Function):
    """``StickBreaking.causal_attention``: q ``(b, h, i, d)``, k ``(b, h, j, d)``, v
    ``(b, h, j, e)`` -> ``(b, h, i, e)``, in blocks of queries, each against the keys
    it sees, in reversed token order (k and v flipped once: each block's keys are a
    view). Only q, k and v are saved; the backward pass recomputes each block's
    weights, so nothing ``(i, j)`` outlives its block (memory ``O(n * BLOCK)``).

    Backward, per block, with ``G_ij = A_ij dA_ij`` and ``beta = sigmoid(z)``:
    ``dz_ij = G_ij - beta_ij sum_{l <= j} G_il`` (the keys up to j in token order),
    ``dq = scale dz k``, ``dk = scale dz^T q``, ``dv_j = sum_i A_ij dO_i``; with the
    leftover, ``dA_ij = dO_i . (v_j - v_i)`` and ``dv_i += (1 - sum_j A_ij) dO_i``."""

    @staticmethod
    def forward(ctx, q, k, v, scale, attend_current, leftover):
        work = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
        work = torch.promote_types(work, torch.float32)  # half precision: float32
        i, j = q.shape[2], k.shape[2]
        qw, vw = q.to(work), v.to(work)
        k_back, v_back = k.to(work).flip(2), vw.flip(2)  # (b, h, j, d|e) reversed
        out = []
        for start, stop, seen, *_ in query_blocks(
            i, j, block_size(q.device, i, q.shape[0] * q.shape[1])
        ):
            hidden = _hidden(stop - start, attend_current, q.device)
            keys = k_back[:, :, j - seen :]  # (b, h, s, d): keys seen - 1 .. 0
            a, z, rest = _block_weights(qw[:, :, start:stop], keys, scale, hidden)
            # o_i = sum_j A_ij v_j
            o = a @ v_back[:, :, j - seen :]  # (b, h, r, e)
            if leftover:
                # + (1 - sum_j A_ij) v_i, v_i the value of the query's own token
                o += rest * vw[:, :, start + j - i : stop + j - i]
            out.append(o)
            del a, z  # before the next block's
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.attend_current, ctx.leftover = scale, attend_current, leftover
        if not out:  # no queries
            return v.new_zeros(*q.shape[:3], v.shape[-1])
        return torch.cat(out, dim=2).to(v.dtype)  # (b, h, i, e)

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        scale = ctx.scale
        work = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
        work = torch.promote_types(work, torch.float32)
        i, j = q.shape[2], k.shape[2]
        qw, vw, g = q.to(work), v.to(work), grad.to(work)
        k_back, v_back = k.to(work).flip(2), vw.flip(2)  # (b, h, j, d|e) reversed
        dq = torch.zeros(qw.shape, dtype=work, device=q.device)  # (b, h, i, d)
        dk_back = torch.zeros(k_back.shape, dtype=work, device=k.device)  # reversed
        dv_back = torch.zeros(v_back.shape, dtype=work, device=v.device)  # reversed
        for start, stop, seen, *_ in query_blocks(
            i, j, block_size(q.device, i, q.shape[0] * q.shape[1])
        ):
            hidden = _hidden(stop - start, ctx.attend_current, q.device)
            rows, d_out = qw[:, :, start:stop], g[:, :, start:stop]  # (b, h, r, d|e)
            keys, values = k_back[:, :, j - seen :], v_back[:, :, j - seen :]
            a, z, rest = _block_weights(rows, keys, scale, hidden)
            # dA_ij = dO_i . v_j
            grad_a = d_out @ values.mT  # (b, h, r, s)
            if ctx.leftover:
                own = vw[:, :, start + j - i : stop + j - i]  # (b, h, r, e)
                # o_i also holds (1 - sum_j A_ij) v_i: dA_ij -= dO_i . v_i
                grad_a -= (d_out * own).sum(-1, keepdim=True)
                # dv_i += (1 - sum_j A_ij) dO_i (token t + j - i, reversed: i - 1 - t)
                dv_back[:, :, i - stop : i - start] += (rest * d_out).flip(2)
            # dv_j += sum_i A_ij dO_i
            dv_back[:, :, j - seen :] += a.mT @ d_out
            # G_ij = A_ij dA_ij
            grad_a.mul_(a)  # (b, h, r, s)
            # sum_{l <= j} G_il in token order: the keys from j on in reversed order,
            # the row's total minus the cumulative sum before j
            total_to = torch.cumsum(grad_a, -1, out=a)  # (b, h, r, s), reusing a
            total = total_to[..., -1:].clone()  # (b, h, r, 1)
            total_to.neg_().add_(total).add_(grad_a)
            # beta = sigmoid(z): 0 where hidden (z = -inf)
            beta = z.sigmoid_()  # (b, h, r, s)
            # dz_ij = G_ij - beta_ij sum_{l <= j} G_il
            dz = grad_a.sub_(total_to.mul_(beta))  # (b, h, r, s)
            # dq = scale dz k,  dk = scale dz^T q
            dq[:, :, start:stop] = (dz @ keys) * scale
            dk_back[:, :, j - seen :] += dz.mT @ (rows * scale)
            del a, z, grad_a, total_to, beta, dz  # before the next block's
        dk, dv = dk_back.flip(2), dv_back.flip(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


class StickBreaking(PositionalEncoding):
    """Replaces softmax by ``stick_breaking_weights``; no positional encoding at all.

    * ``attend_current``: whether query i may break the stick on its own key (default
      False, as the authors).
    * ``leftover``: ``"value"`` (default) adds ``(1 - sum_j A_ij) v_i`` to the output,
      the authors' kernel-test reference: the stick left over goes to the query's own
      value, so every row's weights sum to 1 once it is counted and the first token,
      which has no earlier key, outputs ``v_0`` instead of 0. ``None`` drops it (fla's
      layer). ``"value"`` equals one more key with break point 1 and value ``v_i``,
      placed *before* the first token: it takes whatever the real keys left.

    **Positions say which keys come before the query; token order, in which order.**
    Only comparisons of positions are read, so shifting them changes nothing. The
    causal mask that the attention function builds from them (and any mask the caller
    adds) is honoured as "which keys exist"; a hidden key leaves the stick unchanged.
    The query's own token is the key at the query's position: without
    ``attend_current`` it is no break point (``transform_scores`` gives it z = -inf,
    beta = 0, which takes nothing and leaves the stick as it is), and the leftover goes
    to its value. So a call with only some of the queries (a KV cache, or any subset,
    ``q_pos`` naming them) gives those rows of the full call. A query whose position no
    key holds breaks the stick over every key before it and, having no own value,
    drops the leftover. The stick is broken nearest first in token order, so the keys'
    positions must increase along the sequence: a mask that would let a query see a
    later token is refused with a ``ValueError``, and so are keys whose positions do
    not increase when the queries are fewer than the keys (one host sync, only then).
    ``causal_only``: a bidirectional call is refused.
    """

    causal_only = True
    four_terms = {
        "content-content": "kept (as the break-point logit z_ij)",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": (
            "replaced by the stick-breaking process: a data-dependent penalty "
            "-sum softplus(z_il) over the keys in between (token order, no positions)"
        ),
    }

    def __init__(self, attend_current: bool = False, leftover: str | None = "value"):
        super().__init__()
        if not isinstance(attend_current, bool):
            raise TypeError(
                f"attend_current must be a bool, got {type(attend_current).__name__}"
            )
        if leftover not in LEFTOVERS:
            raise ValueError(
                f"leftover must be one of {LEFTOVERS} ('value': add the leftover stick "
                f"times the query's own value; None: drop it), got {leftover!r}"
            )
        self.attend_current = attend_current
        self.leftover = leftover

    def transform_scores(
        self, scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        """The break-point logits ``(b, h, i, j)``: ``-inf`` (beta = 0, no break
        point) for a key at or after the query's position, or only after it with
        ``attend_current``."""
        i, j = scores.shape[-2:]
        if i < j and k_pos.dim() == 2 and bool((k_pos[:, 1:] <= k_pos[:, :-1]).any()):
            raise ValueError(
                "StickBreaking breaks the stick backwards from the query in token "
                "order, so it needs key positions that increase along the sequence "
                "(a causal mask in token order); got key positions (k_pos, or the pos "
                "of a model or layer) that do not"
            )
        q_pos, k_pos = q_pos[:, None, :, None], k_pos[:, None, None, :]  # (b,1,i,j)
        after = k_pos > q_pos if self.attend_current else k_pos >= q_pos
        return scores.masked_fill(after, float("-inf"))  # (b, h, i, j)

    def attention_weights(
        self, scores: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """``(b, h, i, j)`` break-point logits (``transform_scores``: the query's own
        key already has z = -inf unless ``attend_current``) and the call's bool mask ->
        stick-breaking weights ``(b, h, i, j)``, rows summing to <= 1.

        Which keys come before the query is the positions' (the mask's and
        ``transform_scores``'s) business, so the token-order cut here keeps every key
        up to the query's token (``attend_current=True``); it still refuses a mask that
        reveals a later token."""
        return stick_breaking_weights(scores, True, mask)

    def value_bias(
        self,
        weights: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
    ) -> torch.Tensor | None:
        """``(1 - sum_j A_ij) v_i`` ``(b, h, i, e)`` with ``leftover="value"``, else
        None; ``v_i`` is the query's own value: that of the key at the query's position
        (0 if there is none), or the last ``i`` rows of ``ctx.v`` without positions."""
        if self.leftover is None:
            return None
        v = ctx.need("v", "StickBreaking(leftover='value')")  # (b, h, j, e)
        i, j = weights.shape[-2:]
        if v.shape[-2] != j:
            raise ValueError(
                f"ctx.v must hold the {j} keys' values (b, h, {j}, e), "
                f"got {tuple(v.shape)}"
            )
        # the leftover stick, 1 - sum_j A_ij, goes to the query's own value v_i
        rest = 1 - weights.sum(-1, keepdim=True)  # (b, h, i, 1)
        if q_pos is None or k_pos is None:
            return rest * v[..., j - i :, :]  # (b, h, i, e)
        # v_i = v_j for the key j at the query's position (0 if there is none)
        at = k_pos[:, None, :] == q_pos[:, :, None]  # (b, i, j)
        first = at.byte().argmax(-1)  # (b, i): the first such key
        b, h, _, e = v.shape
        own = v.gather(-2, first[:, None, :, None].expand(b, h, i, e))  # (b, h, i, e)
        return rest * (own * at.any(-1)[:, None, :, None])  # (b, h, i, e)

    def causal_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        ctx: Context | None = None,
    ) -> torch.Tensor:
        """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i,
        e)``: the whole attention of a causal call in token order (query t is token
        ``t + j - i`` and sees keys ``0 .. t + j - i``), without an ``(i, j)`` tensor.

        Blocks of ``block_size`` queries, each against the keys it sees,
        recomputed in the
        backward pass (``_StickBreakingBlocks``); half precision is computed in
        float32 and returned in v's dtype."""
        i, j = q.shape[2], k.shape[2]
        if i > j:
            raise ValueError(
                f"q must have no more queries than k has keys (the queries are the "
                f"last i tokens), got i = {i}, j = {j}"
            )
        leftover = self.leftover == "value"
        return _StickBreakingBlocks.apply(q, k, v, scale, self.attend_current, leftover)

    def extra_repr(self) -> str:
        return f"attend_current={self.attend_current}, leftover={self.leftover!r}"


@register("stick_breaking")
def _make(*, d_model: int, n_heads: int, max_len: int) -> StickBreaking:
    return StickBreaking()

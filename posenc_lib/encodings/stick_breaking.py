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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_bool_mask

__all__ = ["StickBreaking", "stick_breaking_weights"]

LEFTOVERS = ("value", None)


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

    def extra_repr(self) -> str:
        return f"attend_current={self.attend_current}, leftover={self.leftover!r}"


@register("stick_breaking")
def _make(*, d_model: int, n_heads: int, max_len: int) -> StickBreaking:
    return StickBreaking()

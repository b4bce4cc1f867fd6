"""FoX, the Forgetting Transformer (Lin et al., 2025): attention with a forget gate.

No position enters the embeddings, queries or keys. Every token t writes one scalar
forget gate per head, computed from the layer input x_t::

    f_t = sigmoid(w_h . x_t + b_h)                       in (0, 1), one per head h

and query i down-weights key j <= i by the product of the gates of the tokens after j::

    F_ij = f_{j+1} f_{j+2} ... f_i      (1 when i = j)
    D_ij = log F_ij = sum_{l=j+1..i} log f_l = c_i - c_j,   c_t = sum_{l<=t} log f_l
    o_i  = sum_j F_ij exp(s_ij) v_j / sum_j F_ij exp(s_ij) = softmax_j(s_ij + D_ij) v_j

with s_ij = q_i . k_j / sqrt(d): the authors' kernel scales by 1/sqrt(head_dim)
(``forgetting_attention(sm_scale=None)`` in ``ops/forgetting_attention.py`` of
github.com/zhixuan-lin/forgetting-transformer), so ``ForgettingAttention.scale`` is
the default. D is a bias added to the scaled scores, so FoX stays on the fused
attention path; ``score_mod`` states the same bias for FlexAttention, and
``key_bias`` states it as ``-c_j`` (the softmax of row i ignores ``c_i``), which the
fused kernel takes as one more dimension of q and k: nothing ``n x n``, forward or
backward.

With every gate equal to f, D_ij = (i - j) log f: ALiBi with slope m = -log f. FoX is a
data-dependent ALiBi, and needs no positional encoding (the paper's FoX and FoX (Pro)
both run with ``use_rope: false``; "Pro" is the block around the attention, not RoPE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..base import Context, PositionalEncoding, ScoreMod
from ..registry import register
from ..utils import check_heads, check_positive_int, compiling

__all__ = ["ForgettingAttention", "forgetting_bias"]


def _position_order(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer positions ``(b|1, n)`` -> ``(order, rank)`` ``(b|1, n)``: the tokens
    sorted by position (stable: equal positions keep token order), and each token's
    place in that order. Both are ``0 .. n-1`` when positions increase."""
    order = pos.argsort(dim=-1, stable=True)  # token by rank
    return order, order.argsort(dim=-1)  # rank by token


def _cumulative_log_gates(
    log_f: torch.Tensor, order: torch.Tensor, rank: torch.Tensor
) -> torch.Tensor:
    """``c_t = sum of log f_l over the tokens l up to t in position order`` ``(b, h,
    n)``, in float64."""
    b, h, n = log_f.shape
    by_pos = log_f.double().gather(-1, order[:, None, :].expand(b, h, n))
    return by_pos.cumsum(-1).gather(-1, rank[:, None, :].expand(b, h, n))


def forgetting_bias(
    log_f: torch.Tensor, pos: torch.Tensor | None = None
) -> torch.Tensor:
    """Log forget gates ``(b, h, n)`` -> the FoX bias ``D`` ``(b, h, n, n)``.

    ``pos`` ``(b|1, n)``, the tokens' integer positions, or None for token order: the
    gates are multiplied in position order, so that "the tokens after j, up to i" and
    "the future" are those of the positions (what the causal mask built from them
    says), whatever the order of the tokens in the sequence. Below, "token l" counts
    in position order (stable: equal positions keep token order).

    On and below the diagonal (key j <= query i), ``D_ij = sum_{l=j+1..i} log f_l``,
    computed as the difference ``c_i - c_j`` of cumulative sums ``c_t = sum_{l<=t}
    log f_l``; the diagonal is 0 and the first token's gate never matters. **Above the
    diagonal, D is -inf**: FoX is causal, so the bias itself forbids the future.
    (Taken literally there, c_i - c_j = -sum_{l=i+1..j} log f_l >= 0 would *reward*
    future keys, as ALiBi's unmasked causal form does.) ``softmax(s + D)`` is
    therefore FoX's attention with or without a separate causal mask, and every row
    keeps its finite diagonal, so it never becomes all -inf.

    Accuracy: the cumulative sums are taken in float64 and the difference is rounded
    once to ``log_f``'s dtype. In float32, ``c_i - c_j`` would lose every digit of
    ``D_ij`` below the rounding error of ``c_i`` itself, which grows with the sequence:
    for nearby i, j late in a long sequence the near-diagonal bias, the part that
    matters most, would be noise.

    ``log_f`` must be floating point (``TypeError``), 3-D, finite and <= 0 (a gate in
    (0, 1]; ``ValueError``). A gate of exactly 0 (log f = -inf) is refused: c_i - c_j
    would be -inf - (-inf) = NaN; use a large negative log gate instead.
    """
    if not isinstance(log_f, torch.Tensor) or not log_f.is_floating_point():
        raise TypeError(
            "log_f must be a floating-point tensor of log forget gates, got "
            f"{getattr(log_f, 'dtype', type(log_f).__name__)}"
        )
    if log_f.dim() != 3:
        raise ValueError(
            f"log_f must have shape (b, h, n) (one log gate per head and token), "
            f"got {tuple(log_f.shape)}"
        )
    if not torch.isfinite(log_f).all():
        raise ValueError(
            "log_f must be finite: a gate of exactly 0 (log f = -inf) or NaN makes "
            "c_i - c_j undefined; use a large negative log gate instead"
        )
    if (log_f > 0).any():
        raise ValueError(
            "log_f must be <= 0 (forget gates lie in (0, 1]), got a maximum of "
            f"{log_f.max().item():.4g}"
        )
    return _bias(log_f, pos)


def _bias(log_f: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
    """``forgetting_bias`` without its checks (the layer's gates pass them by
    construction: a log-sigmoid is finite and <= 0)."""
    n = log_f.shape[-1]
    if pos is None:
        # c_t = sum_{l<=t} log f_l, in float64 so that c_i - c_j keeps D_ij's digits
        c = log_f.double().cumsum(-1)  # (b, h, n)
        causal = torch.ones(n, n, dtype=torch.bool, device=log_f.device).tril()
    else:
        order, rank = _position_order(torch.as_tensor(pos, device=log_f.device))
        c = _cumulative_log_gates(log_f, order, rank)  # (b, h, n), float64
        causal = (rank[:, None, :] <= rank[:, :, None])[:, None]  # (b|1, 1, i, j)
    # D_ij = c_i - c_j = sum_{l=j+1..i} log f_l
    d = (c[..., :, None] - c[..., None, :]).to(log_f.dtype)  # (b, h, i, j)
    return d.masked_fill(~causal, float("-inf"))  # (b, h, i, j)


class ForgettingAttention(PositionalEncoding):
    """FoX: adds ``D_ij = sum_{l=j+1..i} log f_l`` to the scaled scores of each head.

    The gates ``f_t = sigmoid(w_h . x_t + b_h)`` come from the layer input ``x``
    ``(b, n, D)``, read through the call's context (``ctx.need("x", ...)``), by one
    ``Linear(d_model, n_heads)`` with bias, ``self.gate``. Initialisation as in the
    authors' code (``_init_weights`` in ``modeling_forgetting_transformer.py`` zeroes
    every ``nn.Linear`` bias, the gate's ``fgate_proj`` included): the bias starts at 0,
    so every gate starts near sigmoid(0) = 1/2; the weight keeps PyTorch's default, like
    every other linear layer of ``TinyTransformer`` (the authors draw all weights from
    N(0, 0.02)).

    **The order of the positions.** The gates are multiplied in position order (the
    key positions ``k_pos`` of this self-attention call, which are also the queries'),
    so the bias agrees with the causal mask that the attention function builds from
    the same positions, whatever the order of the tokens; shifting the positions
    changes nothing. When positions increase along the sequence, the usual case, that
    is the token axis. FoX is defined for causal
    self-attention only: ``causal_only`` refuses ``causal=False``, and a call whose
    queries are fewer than its keys (a KV cache) is refused, since ``x`` then holds only
    the queries' rows and the cached keys' gates are unknown.

    This is the plain FoX, with no positional encoding at all; the paper's "Pro" block
    (output gate, output norm, QK-norm, key/value shift) is not part of it.
    """

    causal_only = True
    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a learned, data-dependent decay D_ij",
    }

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.gate = nn.Linear(d_model, n_heads, bias=True)  # w_h, b_h for every head
        nn.init.zeros_(self.gate.bias)  # f_t = sigmoid(0) = 1/2 before training

    def log_forget_gates(self, x: torch.Tensor) -> torch.Tensor:
        """Layer input ``(b, n, D)`` -> log forget gates ``(b, h, n)``: the hook a
        variant overrides (its gates from x). ``x`` must be finite: ``pl.attention``
        checks it once with q, k, v, and a bias asked for on its own checks it here
        (``score_bias`` with a context of no positions), so a layer adds no host
        sync."""
        self._check_x(x)
        # log f_t = log sigmoid(w_h . x_t + b_h), stable for any logit (never -inf)
        return F.logsigmoid(self.gate(x)).transpose(1, 2)  # (b, h, n)

    def _check_x(self, x) -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(
                "x must be a floating-point tensor (b, n, D), got "
                f"{getattr(x, 'dtype', type(x).__name__)}"
            )
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}) for this "
                f"ForgettingAttention with d_model={self.d_model}, got {tuple(x.shape)}"
            )

    def _gates_of_call(self, q: torch.Tensor, k: torch.Tensor, ctx: Context):
        """The log gates ``(b, h, j)`` of every key, from the keys' layer inputs
        ``ctx.x`` ``(b, j, D)``, after checking that the call is one FoX can serve:
        this head count, and queries that are the last ``i`` of the keys (the whole
        sequence, or a ``KVCache`` call)."""
        check_heads(q, self, self.n_heads)
        x = ctx.need("x", "ForgettingAttention")  # (b, j, D)
        if x.shape[1] != k.shape[2] or q.shape[2] > k.shape[2]:
            raise ValueError(
                "ForgettingAttention needs the forget gate of every key, computed from "
                "the keys' layer inputs x: call it on the whole sequence (i == j), or "
                f"through MultiHeadAttention with a KVCache; got {q.shape[2]} queries, "
                f"{k.shape[2]} keys and x of {x.shape[1]} tokens"
            )
        if ctx.positions is None and not compiling():  # called on its own: x was
            # not checked with q, k, v
            self._check_x(x)
            if not torch.isfinite(x).all():
                raise ValueError(
                    "x holds NaN or infinite values; FoX's forget gates are defined "
                    "for a finite layer input"
                )
        return self.log_forget_gates(x)  # (b, h, j): a variant's own gates

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
    ) -> torch.Tensor:
        log_f = self._gates_of_call(q, k, ctx)  # (b, h, j)
        # every key as a query, then the rows of the queries: the last i keys
        return _bias(log_f, k_pos)[..., -q.shape[2] :, :]  # (b, h, i, j)

    def key_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context,
    ) -> torch.Tensor:
        """Fused form: ``D_ij = c_i - c_j`` is ``c_i``, the same for every key of row
        i (which the softmax ignores), plus ``w_j = -c_j``: ``(b, h, j)``, float64.
        The fused backend calls it for causal calls in token order only, where the
        position order is the token order."""
        log_f = self._gates_of_call(q, k, ctx)  # (b, h, j)
        # The kernel reads w_j - w_m (m a block's middle key) in q's dtype, times
        # 1/scale: over j keys it stays finite if every log gate is >= -G, G =
        # max / (4 j / scale). A gate below -G (about -3e35 for 100 tokens in
        # float32) is taken as -G: the keys it shuts weigh exp(-G) = 0 either way
        # (unless the scores themselves reach G), where -inf - (-inf) was NaN.
        scale = self.scale or q.shape[-1] ** -0.5
        floor = -torch.finfo(q.dtype).max * scale / (4 * k.shape[2])
        # w_j = -c_j = -sum_{l<=j} log f_l
        return -log_f.double().clamp(min=floor).cumsum(-1)  # (b, h, j)

    def score_mod(
        self, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: Context
    ) -> ScoreMod:
        """FlexAttention form: ``score + c_i - c_j`` for key j <= query i (in position
        order, as ``forgetting_bias``), else -inf.

        The kernel subtracts in the score's dtype, so the float64 cumulative sums are
        handed over as two parts, ``c = hi + lo`` (``hi`` rounded to that dtype, ``lo``
        the remainder): ``(hi_i - hi_j) + (lo_i - lo_j)`` is D_ij to within its own
        rounding (about 1e-11 absolute where D is near 0), where a plain float32
        ``c_i - c_j`` would lose D's low digits (see ``forgetting_bias``).
        """
        q = ctx.need("q", "ForgettingAttention")  # (b, h, i, d)
        k = ctx.need("k", "ForgettingAttention")  # (b, h, j, d)
        log_f = self._gates_of_call(q, k, ctx)  # (b, h, n)
        work = torch.promote_types(q.dtype, torch.float32)  # the kernel's score dtype
        b, _, n = log_f.shape
        if k_pos is None:  # token order
            k_pos = torch.arange(n, device=log_f.device)
        order, rank = _position_order(torch.as_tensor(k_pos).expand(b, n))  # (b, n)
        c = _cumulative_log_gates(log_f, order, rank)  # (b, h, n), position order
        hi = c.to(work)  # (b, h, n)
        lo = (c - hi.double()).to(work)  # (b, h, n), |lo| <= half an ulp of hi

        first = n - q.shape[2]  # query t is key first + t (the last i keys)

        def mod(score, b, h, q_idx, kv_idx):
            # D_ij = c_i - c_j = (hi_i - hi_j) + (lo_i - lo_j)
            d_hi = hi[b, h, first + q_idx] - hi[b, h, kv_idx]
            d_lo = lo[b, h, first + q_idx] - lo[b, h, kv_idx]
            before = rank[b, kv_idx] <= rank[b, first + q_idx]  # key j <= query i
            return torch.where(before, score + (d_hi + d_lo), float("-inf"))

        return mod

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}"


@register("fox")
def _make(*, d_model: int, n_heads: int, max_len: int) -> ForgettingAttention:
    return ForgettingAttention(d_model, n_heads)

"""Wall attention (Tilde Research, in flash-linear-attention, 2026): softmax attention
whose keys decay channel by channel, at a rate each token sets. No RoPE.

Every token t writes a log-decay per head and per channel of the key, from its layer
input, and query i sees channel n of key j <= i through the product of the decays of
the tokens after j::

    g_t = logsigmoid(W_g x_t + b_g)           (h, d), <= 0: a decay sigmoid(.) in (0, 1)
    G_t = sum_{l <= t} g_l                    cumulative, per head and channel
    s_ij = scale * sum_n q_in k_jn exp(G_in - G_jn)      for j <= i

and the weights are ``softmax_j(s_ij)``. With one decay per head (every channel
alike) ``exp(G_i - G_j)`` factors out of the sum: a *multiplicative* FoX. Channel by
channel it is a data-dependent xPos (a decay of ``q_i . k_j`` per pair of
coordinates, set by the tokens instead of by the distance).

Checked against flash-linear-attention (github.com/fla-org/flash-linear-attention,
commit bc3b101, 2026-08-22): ``fla/layers/wall_attn.py``, ``WallAttention.forward``:
``g = F.logsigmoid(self.g_proj(hidden_states).float())`` with ``g_proj =
Linear(hidden, hidden, bias=True)`` (one decay per query head and key channel), its
bias initialised to ``gate_init_bias = 8.0`` (``logsigmoid(8) = -3.4e-4``: nearly
plain attention at first), and ``parallel_wall_attn`` with ``scale = K ** -0.5``;
``fla/ops/wall_attn/naive.py``, ``naive_wall_attn``: ``P = cumsum(g) / ln 2`` and
``exp2(P_i - P_j)``, the softmax taken with ``exp2`` of the scores times ``scale /
ln 2``, which is ``exp(G_i - G_j)`` and the usual softmax of ``s``: base 2 is the
kernel's arithmetic, not the method. The optional FoX-style scalar gate
(``use_scalar_gate``, off by default), windows and sinks are not part of this
encoding. Golden vectors: ``tests/golden/make_wall_golden.py``.

**Hooks.** ``transform_scores`` adds the decay's correction to the scaled scores,
``scale sum_n q_in k_jn (exp(G_in - G_jn) - 1)``, and ``-inf`` for a later key: the
reference, ``O(n^2 d)`` memory. It cannot be a ``transform_qk``: ``q_i exp(G_i - c)``
and ``k_j exp(c - G_j)`` overflow float32 once ``G`` spans more than ~176 nats (88 on
either side of the best centre ``c``: a few hundred tokens that each keep half of a
channel).

**The stable form** (``causal_attention``, the fused backend's, for causal calls in
token order): blocks of ``BLOCK`` queries, re-anchored on the block's first query
``a``, ``c = G_a``. A key before the block and a query in it split the decay into
two factors that are both at most 1::

    exp(G_i - G_j) = exp(G_i - G_a) * exp(G_a - G_j),    j < a <= i  (G decreases)

so ``q_i exp(G_i - G_a)`` times ``k_j exp(G_a - G_j)`` is one matrix product that
cannot overflow (a factor that underflows makes a term below 1e-38 of ``q_in k_jn``:
what the exact decay gives too). The block's own keys take ``exp(min(G_in - G_jn,
0))`` directly, ``(BLOCK, BLOCK, d)`` at a time. Each block is recomputed in the
backward pass: memory ``O(n (d + BLOCK))``, exact for any gates
(``tests/test_wall.py`` checks 20,000 tokens whose decays span 10,000 nats).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..backends.blocks import recomputed_blocks
from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int, compiling
from .fox import _cumulative_log_gates, _position_order

__all__ = ["WallAttention", "wall_scores", "wall_attention"]

BLOCK = 32  # queries per block of causal_attention; the block's own keys take a
# (b, h, BLOCK, BLOCK, d) tensor


def _check(q, k, log_g) -> None:
    for name, t in (("q", q), ("k", k), ("log_g", log_g)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() != 4:
            raise ValueError(f"{name} must be a floating-point (b, h, n, d) tensor")
    if k.shape != log_g.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"k and log_g must share a (b, h, j, d) shape and q be (b, h, i, d): got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, log_g {tuple(log_g.shape)}"
        )
    if q.shape[2] > k.shape[2]:
        raise ValueError("q must have no more queries than k has keys (the last i)")
    if not compiling() and not bool((log_g <= 0).all()):  # NaN fails too
        raise ValueError("log_g must be <= 0 (log-decays, logsigmoid of the gates)")


def _cumulative(log_g: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
    """``G_t = sum of g_l over the tokens l up to t in position order`` ``(b, h, n,
    d)`` float64 (token order when ``pos`` is None)."""
    if pos is None:
        return log_g.double().cumsum(2)
    b, h, n, d = log_g.shape
    order, rank = _position_order(torch.as_tensor(pos, device=log_g.device))
    flat = log_g.permute(0, 1, 3, 2).reshape(b, h * d, n)  # (b, h d, n)
    c = _cumulative_log_gates(flat, order, rank)  # (b, h d, n), float64
    return c.view(b, h, d, n).permute(0, 1, 3, 2)  # (b, h, n, d)


def _decay_correction(q, k, log_g, k_pos, scale):
    """``scale sum_n q_in k_jn (exp(G_in - G_jn) - 1)`` ``(b, h, i, j)`` for key j
    not after query i in position order (``-inf`` otherwise); q are the last i keys."""
    i, j = q.shape[2], k.shape[2]
    work = torch.promote_types(q.dtype, torch.float32)
    g = _cumulative(log_g, k_pos)  # (b, h, j, d)
    # G_in - G_jn <= 0 for the keys a query sees: the future is clamped, then masked
    diff = (g[:, :, -i:, None] - g[:, :, None]).clamp_max(0)  # (b, h, i, j, d)
    fade = torch.expm1(diff.to(work))  # exp(.) - 1, exact near 0
    extra = torch.einsum("bhin,bhjn,bhijn->bhij", q.to(work), k.to(work), fade)
    if k_pos is None:
        rank = torch.arange(j, device=q.device)[None]  # (1, j)
    else:
        rank = _position_order(torch.as_tensor(k_pos, device=q.device))[1]  # (b|1, j)
    later = (rank[:, None, :] > rank[:, -i:, None])[:, None]  # (b|1, 1, i, j)
    return (extra * scale).masked_fill(later, float("-inf"))


def wall_scores(q, k, log_g, k_pos=None, scale: float | None = None) -> torch.Tensor:
    """Wall's scores ``(b, h, i, j)``: ``scale sum_n q_in k_jn exp(G_in - G_jn)``
    for key j not after query i, ``-inf`` for a later key. q ``(b, h, i, d)`` are the
    last ``i`` of the keys k ``(b, h, j, d)``; ``log_g`` ``(b, h, j, d)`` the keys'
    log-decays (<= 0); ``k_pos`` ``(b|1, j)`` their positions (None: token order);
    ``scale`` 1/sqrt(d) by default. The reference, ``O(i j d)`` memory."""
    _check(q, k, log_g)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    work = torch.promote_types(q.dtype, torch.float32)
    plain = torch.einsum("bhid,bhjd->bhij", q.to(work), k.to(work)) * scale
    return plain + _decay_correction(q, k, log_g, k_pos, scale)


def _block(q, k, v, g, start: int, stop: int, scale: float) -> torch.Tensor:
    """Queries ``start .. stop - 1`` (the last ``i`` of the ``j`` keys, token order)
    against the keys they see: ``(b, h, stop - start, e)``; ``g`` ``(b, h, j, d)`` the
    cumulative log-decays, float64."""
    i, j = q.shape[2], k.shape[2]
    a, e = start + j - i, stop + j - i  # the block's first query is key a
    work = torch.promote_types(q.dtype, torch.float32)
    rows, g_rows = q[:, :, start:stop].to(work), g[:, :, a:e]  # (b, h, r, d)
    anchor = g[:, :, a : a + 1]  # (b, h, 1, d): c = G_a
    # keys before the block: exp(G_i - G_j) = exp(G_i - c) exp(c - G_j), both <= 1
    q_far = rows * (g_rows - anchor).to(work).exp()  # (b, h, r, d)
    k_far = k[:, :, :a].to(work) * (anchor - g[:, :, :a]).to(work).exp()  # (b,h,a,d)
    far = q_far @ k_far.mT  # (b, h, r, a)
    # the block's own keys: sum_n q_in k_jn exp(min(G_in - G_jn, 0)), exactly
    fade = (g_rows[:, :, :, None] - g_rows[:, :, None]).clamp_max(0).to(work).exp()
    near = torch.einsum("bhin,bhjn,bhijn->bhij", rows, k[:, :, a:e].to(work), fade)
    later = torch.ones(e - a, e - a, dtype=torch.bool, device=q.device).triu(1)
    near = near.masked_fill(later, float("-inf"))  # (b, h, r, r)
    weights = (torch.cat([far, near], dim=-1) * scale).softmax(-1)  # (b, h, r, e)
    return weights @ v[:, :, :e].to(work)  # (b, h, r, e)


def wall_attention(q, k, v, log_g, scale: float | None = None) -> torch.Tensor:
    """Causal Wall attention in token order, the stable blocked form: q ``(b, h, i,
    d)`` the last ``i`` of the keys k ``(b, h, j, d)``, v ``(b, h, j, e)``, log-decays
    ``log_g`` ``(b, h, j, d)`` -> ``(b, h, i, e)`` in v's dtype. Memory ``O(n (d +
    BLOCK))``: each block of queries is recomputed in the backward pass."""
    _check(q, k, log_g)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _blocks(q, k, v, log_g, scale)


def _blocks(q, k, v, log_g, scale: float) -> torch.Tensor:
    """``wall_attention`` without its checks (a layer's decays pass them)."""
    g = log_g.double().cumsum(2)  # (b, h, j, d): G, float64
    if q.shape[2] == 0:
        return v.new_zeros(*q.shape[:3], v.shape[-1])
    out = recomputed_blocks(_block, BLOCK, q, k, v, g, scale)  # (b, h, i, e)
    return out.to(v.dtype)


class WallAttention(PositionalEncoding):
    """Wall attention: the decays ``g = logsigmoid(W_g x + b_g)`` ``(h, d)`` per token
    come from the keys' layer inputs ``ctx.x`` through ``self.gate``,
    ``Linear(d_model, d_model)`` with its bias at ``gate_init_bias`` (8, as fla).

    Decays multiply in position order (the keys' positions), as FoX's gates; a call
    whose queries are not the last of its keys (``x`` must hold every key's input:
    the whole sequence, or a ``KVCache``) is refused. ``causal_only``."""

    causal_only = True
    four_terms = {
        "content-content": (
            "kept, each channel decayed: sum_n q_in k_jn exp(G_in - G_jn) "
            "(rates set by the tokens in between)"
        ),
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (order enters through the decays)",
    }

    def __init__(self, d_model: int, n_heads: int, gate_init_bias: float = 8.0):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads")
        if (
            isinstance(gate_init_bias, bool)
            or not isinstance(gate_init_bias, (int, float))
            or not math.isfinite(gate_init_bias)
        ):
            raise ValueError(
                f"gate_init_bias must be a finite number, got {gate_init_bias!r}"
            )
        self.gate = nn.Linear(d_model, d_model, bias=True)  # W_g, b_g
        nn.init.constant_(self.gate.bias, float(gate_init_bias))

    def log_decays(self, x: torch.Tensor) -> torch.Tensor:
        """Layer input ``(b, n, D)`` -> log-decays ``(b, h, n, d)``, float32 or wider
        (fla takes the log-sigmoid in float32)."""
        b, n, _ = x.shape
        work = torch.promote_types(x.dtype, torch.float32)
        g = F.logsigmoid(self.gate(x).to(work))  # (b, n, h d)
        return g.view(b, n, self.n_heads, -1).transpose(1, 2)  # (b, h, n, d)

    def _decays_of_call(self, q, k, ctx: Context) -> torch.Tensor:
        check_heads(q, self, self.n_heads, self.d_model // self.n_heads)
        x = ctx.need("x", "WallAttention")  # (b, j, D)
        if x.dim() != 3 or x.shape[1] != k.shape[2] or q.shape[2] > k.shape[2]:
            raise ValueError(
                "WallAttention needs the decays of every key, computed from the keys' "
                "layer inputs x: call it on the whole sequence (i == j), or through "
                f"MultiHeadAttention with a KVCache; got {q.shape[2]} queries, "
                f"{k.shape[2]} keys and x of shape {tuple(x.shape)}"
            )
        return self.log_decays(x)  # (b, h, j, d)

    def _scale(self, q) -> float:
        return 1 / math.sqrt(q.shape[-1]) if self.scale is None else self.scale

    def transform_scores(self, scores, q_pos, k_pos, ctx: Context) -> torch.Tensor:
        """The scaled scores plus the decay's correction ``(b, h, i, j)``."""
        q, k = ctx.need("q", "WallAttention"), ctx.need("k", "WallAttention")
        log_g = self._decays_of_call(q, k, ctx)  # (b, h, j, d)
        return scores + _decay_correction(q, k, log_g, k_pos, self._scale(q))

    def causal_attention(self, q, k, v, scale: float, ctx: Context) -> torch.Tensor:
        """The stable blocked form (``wall_attention``) of a causal call in token
        order."""
        if q.shape[2] > k.shape[2]:
            raise ValueError("q must have no more queries than k has keys")
        log_g = self._decays_of_call(q, k, ctx)  # (b, h, j, d)
        return _blocks(q, k, v, log_g, scale)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}"


@register("wall")
def _make(*, d_model: int, n_heads: int, max_len: int) -> WallAttention:
    return WallAttention(d_model, n_heads)

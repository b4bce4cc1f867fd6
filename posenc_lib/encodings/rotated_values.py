"""Rotated values (DeepSeek-V4): RoPE on the queries, the keys *and the values*, and
the output rotated back by the query's position.

DeepSeek-V4 reads one tensor as both key and value (K = V), so its values are
rotated like its keys, ``v_j -> R_{p_j} v_j``. ``DeepseekV4Attention.forward``
(``models/deepseek_v4/modeling_deepseek_v4.py``, transformers 5.24) then rotates the
attention's output by ``-p_i`` (``apply_rotary_pos_emb(attn_output, cos, -sin)``), so
that every value enters the output of query i through its offset alone::

    out_i = R_{-p_i} sum_j a_ij R_{p_j} v_j = sum_j a_ij R_{p_j - p_i} v_j

(rotations of one plane commute and ``R_a R_b = R_{a+b}``). The weights ``a_ij``
are RoPE's, relative already; the sum is now relative too.

``ValueRotary`` overrides ``transform_qk`` (RoPE), ``transform_v`` (the same rotation
at the key's position) and ``transform_out`` (the inverse at the query's);
``SinkValueRotary`` adds one learned sink logit per head (``sink_softmax``, as
gpt-oss; V4's ``eager_attention_forward`` appends ``module.sinks`` to the scores and
drops its column after the softmax). V4 rotates the
*last* ``rotary_dim`` coordinates of each head, pairs interleaved
(``apply_rotary_pos_emb``: ``x[..., -rope_dim:]``, ``rotate_half`` on ``0::2`` and
``1::2``): ``rope_at="last"``, ``layout="interleaved"``.
"""

from __future__ import annotations

import torch

from ..registry import register
from .rope import Rotary, _check_rope_args, apply_rope, rope_cos_sin
from .sinks import sink_softmax

__all__ = ["ValueRotary", "SinkValueRotary"]


class ValueRotary(Rotary):
    """RoPE on q, k and v, the output rotated back: ``out_i = sum_j a_ij R_{p_j -
    p_i} v_j`` (DeepSeek-V4). Paper: DeepSeek-AI, 2026 (DeepSeek-V4).

    ``rotary_dim`` r rotates r coordinates of each head, the first r
    (``rope_at="first"``) or the last r (``"last"``, V4's). The values must be as
    wide as the queries (V4's are the keys). The rotation must be a rotation
    (``attention_factor`` 1: a YaRN temperature would scale the values and the output
    as well; V4 sets it to 1 for its compressed layers)."""

    four_terms = {
        "content-content": (
            "kept, rotated: q_i . R_(j-i) k_j; each value enters as R_(j-i) v_j"
        ),
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        d_head: int,
        base: float = 10000.0,
        layout: str = "interleaved",
        rotary_dim: int | None = None,
        rope_at: str = "last",
        scaling: str | None = None,
        **params,
    ):
        super().__init__(d_head, base, layout, scaling, rotary_dim, **params)
        if rope_at not in ("first", "last"):
            raise ValueError(f"rope_at must be 'first' or 'last', got {rope_at!r}")
        if self.attention_factor != 1.0:
            raise ValueError(
                f"rotated values need a pure rotation, but scaling {scaling!r} gives "
                f"attention_factor {self.attention_factor:g}: pass attention_factor="
                "1.0 (DeepSeek-V4's compressed layers do)"
            )
        self.rope_at = rope_at

    def _turn(self, x, pos, which: str, ctx=None, back: bool = False):
        """``x`` ``(b, h, n, d)`` with its rotated coordinates turned by ``pos`` (by
        ``-pos`` when ``back``): ``R_p x`` or ``R_{-p} x``."""
        if x.shape[-1] != self.d_head:
            raise ValueError(
                f"{which} has head dimension {x.shape[-1]}, but this ValueRotary was "
                f"built for d_head={self.d_head} (values must be as wide as keys)"
            )
        d, r = self.d_head, self.rotary_dim or self.d_head
        args = (self.inv_freq, self.layout, 1.0)
        if ctx is None or ctx.positions is None:
            pos = _check_rope_args(x[..., :r], pos, self.inv_freq, self.layout)
            cos, sin = rope_cos_sin(pos, *args, dtype=x.dtype)
        else:  # once per forward pass, shared by every layer (and by k and v)
            key = (self, "k" if which == "v" else which, x.dtype)
            cos, sin = ctx.positions.reuse(
                key, lambda: rope_cos_sin(pos, *args, dtype=x.dtype)
            )
        cos_sin = (cos, -sin) if back else (cos, sin)
        # R_p on the first or the last r coordinates; the others pass through
        cut = slice(d - r, d) if self.rope_at == "last" else slice(0, r)
        turned = apply_rope(x[..., cut], pos, *args, cos_sin=cos_sin, checked=True)
        if r == d:
            return turned
        if self.rope_at == "last":
            return torch.cat((x[..., : d - r], turned), dim=-1)  # (b, h, n, d)
        return torch.cat((turned, x[..., r:]), dim=-1)

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        """q, k ``(b, h, i|j, d)`` rotated at their positions: ``R_i q``, ``R_j k``."""
        return self._turn(q, q_pos, "q", ctx), self._turn(k, k_pos, "k", ctx)

    def transform_v(self, v, k_pos, ctx=None):
        """v ``(b, h, j, d)`` rotated at its key's position: ``R_j v``."""
        return self._turn(v, k_pos, "v", ctx)

    def transform_out(self, out, q_pos, ctx=None):
        """out ``(b, h, i, d)`` rotated back at its query's position: ``R_{-i} out``."""
        return self._turn(out, q_pos, "q", ctx, back=True)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rope_at={self.rope_at!r}"


class SinkValueRotary(ValueRotary):
    """``ValueRotary`` with one learned sink logit per head (``n_heads``), zero at
    first: DeepSeek-V4's attention. The fused backend runs the sinks as one more key
    of value 0 (``sink_logits``); FlexAttention does not take them.
    Paper: DeepSeek-AI, 2026 (DeepSeek-V4)."""

    def __init__(self, d_head: int, n_heads: int, **kw):
        super().__init__(d_head, **kw)
        if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(
                f"n_heads (one sink per head) must be a positive int, got {n_heads!r}"
            )
        self.sinks = torch.nn.Parameter(torch.zeros(n_heads))  # (h,)

    def attention_weights(self, scores, mask):
        """``sink_softmax(scores, self.sinks, mask)``: ``(b, h, i, j)``."""
        return sink_softmax(scores, self.sinks, mask)

    def sink_logits(self) -> torch.Tensor:
        """The fused form of the sinks: one more key of value 0 (``(h,)``)."""
        return self.sinks

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n_heads={self.sinks.numel()}"


@register("rope_values")
def _make(*, d_model: int, n_heads: int, max_len: int) -> ValueRotary:
    # V4's rotation at toy size: interleaved pairs, every coordinate rotated
    return ValueRotary(d_model // n_heads)

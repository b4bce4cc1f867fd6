"""LeRoPE: RoPE whose frequencies are learned, over any RoPE scaling, as Mistral Large
4 ships it.

Each inverse frequency of a RoPE table (plain, YaRN, Llama 3, ...; ``rope_inv_freq``)
is multiplied by ``exp(alpha_i)``, one learned ``alpha`` per frequency, shared by the
heads and the layers::

    theta'_i = theta_i * exp(alpha_i),   i = 0 .. d/2 - 1
    q_m -> R(m theta') q_m,   k_n -> R(n theta') k_n
    (R(m theta') q_m) . (R(n theta') k_n) = q_m . R((n - m) theta') k_n

Scores still depend on the offset only; ``alpha = 0`` (the initial value) is the
scaling it sits on. Read from transformers 5.24,
``models/mistral_large4/modeling_mistral_large4.py``,
``MistralLarge4TextRotaryEmbedding``: ``self.alpha = nn.Parameter(torch.zeros_like(
self.inv_freq))`` (lines 96-98) and ``forward``'s ``scaled_inv_freq = inv_freq *
alpha.exp()`` (lines 121-125), on YaRN by default (``MistralLarge4TextConfig``: factor
2048 over an original window of 512, ``attention_factor`` 1), applied to interleaved
pairs (``apply_rotary_pos_emb_interleave``, whose output lists the rotated even
coordinates, then the odd ones: the same scores). Golden vectors:
``tests/golden/make_lerope_golden.py``.

**The query scale.** The same attention multiplies every query (in its RoPE and NoPE
layers alike) by a learned per-head function of the query's position,
``s_h(m) = a_h log(m + 1) + b_h`` (``MistralLarge4TextSoftmaxScaling``; ``a = 0``,
``b = 1`` at initialisation): ``query_scale=True`` adds it (``learned_log_scale``).
It reads absolute positions, so it is defined for positions >= 0 (refused otherwise,
one host sync per call); it is off by default.

**Precision.** The angles ``m theta_i exp(alpha_i)`` are taken in float64. ``alpha`` is
cast with the model like every parameter; a model cast to half precision rounds it
(Mistral keeps its rotary module in float32, ``_keep_in_fp32_modules_strict``): cast
``pe.alpha`` back to float32 with the model's other parameters if that matters.
"""

from __future__ import annotations

import torch
from torch import nn

from ..registry import register
from ..utils import check_positive_int
from .rope import Rotary, apply_rope, rope_cos_sin

__all__ = ["LearnedRotary", "learned_log_scale"]


def learned_log_scale(p: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor):
    """``scale_h * log(p + 1) + bias_h``: Mistral Large 4's per-head query scale
    (``MistralLarge4TextSoftmaxScaling``); integer positions ``p >= 0`` of any shape,
    ``scale``, ``bias`` ``(h,)`` -> ``(h, *p.shape)``."""
    if not isinstance(p, torch.Tensor) or p.is_floating_point() or p.is_complex():
        raise TypeError(f"p must be a tensor of integer positions, got {p!r}")
    if p.numel() and int(p.min()) < 0:
        raise ValueError(f"p must be >= 0, got a minimum of {int(p.min())}")
    if (
        not isinstance(scale, torch.Tensor)
        or not isinstance(bias, torch.Tensor)
        or scale.shape != bias.shape
        or scale.dim() != 1
    ):
        raise ValueError(
            "scale and bias must be (h,) tensors, got "
            f"{getattr(scale, 'shape', scale)}, {getattr(bias, 'shape', bias)}"
        )
    return _log_scale(p, scale, bias)


def _log_scale(p: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor):
    """``learned_log_scale`` without its checks: ``(h, *p.shape)``."""
    extra = (1,) * p.dim()
    # s_h(p) = a_h log(p + 1) + b_h
    log_p = torch.log1p(p.to(scale.device, torch.float64)).to(scale.dtype)
    return scale.view(-1, *extra) * log_p + bias.view(-1, *extra)


class LearnedRotary(Rotary):
    """RoPE with learned frequencies ``theta_i exp(alpha_i)`` (``alpha``, ``(r/2,)``,
    zeros at first) over the table of ``scaling`` (``ROPE_SCALINGS``; its ``params``
    as for ``Rotary``), in Mistral Large 4's interleaved layout by default.

    ``query_scale``: also multiply each query by ``a_h log(m + 1) + b_h`` (``n_heads``
    learned pairs ``query_slope``, ``query_bias``: 0 and 1 at first), as Mistral
    Large 4 does."""

    four_terms = {
        "content-content": (
            "kept, rotated by learned frequencies: q_i . R((j-i) theta e^alpha) k_j"
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
        scaling: str | None = None,
        rotary_dim: int | None = None,
        query_scale: bool = False,
        n_heads: int | None = None,
        **params,
    ):
        super().__init__(d_head, base, layout, scaling, rotary_dim, **params)
        # one learned log-factor per frequency, 0 = the scaling's own table
        self.alpha = nn.Parameter(torch.zeros(self.inv_freq.shape[0]))  # (r/2,)
        if not isinstance(query_scale, bool):
            raise TypeError(f"query_scale must be a bool, got {query_scale!r}")
        self.query_scale = query_scale
        if query_scale:
            if n_heads is None:
                raise ValueError("query_scale=True needs n_heads (one scale per head)")
            self.n_heads = check_positive_int(n_heads, "n_heads")
            # a_h, b_h (Mistral's ``scale``, ``bias``; ``pe.scale`` is the score's)
            self.query_slope = nn.Parameter(torch.zeros(n_heads))  # 0: none at first
            self.query_bias = nn.Parameter(torch.ones(n_heads))

    def learned_inv_freq(self) -> torch.Tensor:
        """``theta_i exp(alpha_i)`` ``(r/2,)`` float64, differentiable in alpha."""
        # theta'_i = theta_i * exp(alpha_i)
        return self.inv_freq * self.alpha.to(torch.float64).exp()

    def _rotate(self, x: torch.Tensor, pos: torch.Tensor, which: str, ctx=None):
        inv_freq = self.learned_inv_freq()  # (r/2,)
        args = (inv_freq, self.layout, self.attention_factor)
        r = self.rotary_dim
        if ctx is None or ctx.positions is None:
            return apply_rope(x, pos, *args, rotary_dim=r)  # checks pos
        # once per forward pass and shared by every layer: alpha is the same in all
        cos_sin = ctx.positions.reuse(
            (self, which, x.dtype), lambda: rope_cos_sin(pos, *args, dtype=x.dtype)
        )
        return apply_rope(x, pos, *args, cos_sin=cos_sin, checked=True, rotary_dim=r)

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        q, k = super().transform_qk(q, k, q_pos, k_pos, ctx)
        if not self.query_scale:
            return q, k
        if q.shape[1] != self.n_heads:
            raise ValueError(
                f"q must have {self.n_heads} heads (one query scale each), got "
                f"{tuple(q.shape)}"
            )
        q_pos = torch.as_tensor(q_pos, device=q.device)
        q_pos = q_pos if q_pos.dim() == 2 else q_pos[None]  # (b|1, i)
        if bool((q_pos < 0).any()):  # log(m + 1) needs m >= 0 (one host sync)
            raise ValueError(
                "query_scale reads absolute positions, log(m + 1): the query "
                f"positions must be >= 0, got a minimum of {int(q_pos.min())}"
            )
        s = _log_scale(q_pos, self.query_slope, self.query_bias)  # (h, b|1, i)
        return q * s.transpose(0, 1)[..., None].to(q.dtype), k  # (b, h, i, d)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", query_scale=True" if self.query_scale else "")


@register("lerope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> LearnedRotary:
    return LearnedRotary(d_model // n_heads)

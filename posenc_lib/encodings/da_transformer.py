"""DA-Transformer (Wu, Wu and Huang, 2021): ReLU'd scores re-weighted by a learnable
sigmoid of distance.

For head h with learnable scalars w_h and v_h, and R_ij = |i - j| (symmetric:
no direction):

    R^_hij = f(w_h R_ij; v_h),     f(x; v) = (1 + e^v) / (1 + e^(v - x))
    omega_hij = ReLU(q_hi . k_hj) * R^_hij / sqrt(d)

f(0) = 1, f -> 0 as x -> -inf, f -> 1 + e^v as x -> +inf, and f increases with x, so
w_h < 0 favours near keys and w_h > 0 far ones, up to a factor 1 + e^(v_h). The
1/sqrt(d) is the usual one (ReLU(s x) = s ReLU(x) for s > 0, so scaling before or after
the ReLU is the same). The re-weighting needs the scores themselves, so it lives in
``transform_scores``; the causal mask is applied after it, by ``attention_weights``.
``w = v = 0`` at initialisation, where R^ = 1.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import PositionalEncoding
from ..positions import relative_offsets
from ..registry import register
from ..utils import check_heads, check_positive_int, compiling

__all__ = ["DATransformer", "da_sigmoid"]


def da_sigmoid(x: torch.Tensor, v: torch.Tensor | float) -> torch.Tensor:
    """The learnable sigmoid ``f(x; v) = (1 + e^v) / (1 + e^(v - x))``, computed stably.

    Written as ``(1 + e^v) * sigmoid(x - v)``, which is the same function
    without overflow. ``x`` and ``v`` must be real and free of NaN (``ValueError``;
    ``x`` may be +-inf: f tends to 1 + e^v and to 0).
    """
    for name, t in (("x", x), ("v", v)):
        t = torch.as_tensor(t)
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must be real numbers, got {t.dtype}")
        if t.is_floating_point() and not compiling() and bool(torch.isnan(t).any()):
            raise ValueError(f"{name} holds NaN")
    if not compiling() and bool(torch.isinf(torch.as_tensor(v)).any()):
        raise ValueError("v must be finite (e^v is the function's height)")
    return _da_sigmoid(x, v)


def _da_sigmoid(x, v) -> torch.Tensor:
    """``da_sigmoid`` without its checks (the layer's own parameters, every call)."""
    x = torch.as_tensor(x)
    v = torch.as_tensor(
        v,
        dtype=x.dtype if x.is_floating_point() else torch.get_default_dtype(),
        device=x.device,
    )
    if not x.is_floating_point():
        x = x.to(v.dtype)
    # (1 + e^v) / (1 + e^(v - x)) = (1 + e^v) * sigmoid(x - v)
    return (1 + v.exp()) * torch.sigmoid(x - v)


class DATransformer(PositionalEncoding):
    """``ReLU(q.k) / sqrt(d) * f(w_h |i - j|; v_h)``, with per-head learnable ``w``
    and ``v``."""

    four_terms = {
        "content-content": (
            "kept, ReLU'd and multiplied by a learned sigmoid of w_h |i-j|"
        ),
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": (
            "dropped (position acts only through the factor f(w_h |i-j|; v_h))"
        ),
    }

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.w = nn.Parameter(torch.zeros(n_heads))
        self.v = nn.Parameter(torch.zeros(n_heads))

    def coefficients(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b, i), (b, j) -> (b|1, h, i, j)``: the re-scaled coefficient
        matrices R^."""
        if bool((q_pos == q_pos[:1]).all() and (k_pos == k_pos[:1]).all()):
            q_pos, k_pos = q_pos[:1], k_pos[:1]
        dist = (k_pos[:, None, :] - q_pos[:, :, None]).abs()  # (b|1, i, j): |i - j|
        x = self.w[None, :, None, None] * dist[:, None].to(
            self.w.dtype
        )  # (b|1, h, i, j): w_h R
        return _da_sigmoid(x, self.v[None, :, None, None])

    def transform_scores(
        self, scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        check_heads(scores, self, self.n_heads, name="scores")
        # omega = ReLU(s q.k) * R^ = ReLU(q.k) * R^ / sqrt(d)
        return torch.relu(scores) * self.coefficients(q_pos, k_pos).to(scores.dtype)

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor):
        """FlexAttention form: ``ReLU(score) * f(w_h |j - i|; v_h)``, computed in the
        kernel from the offset (two scalars per head)."""
        off, _, _ = relative_offsets(q_pos, k_pos)  # j - i
        w, v = self.w, self.v  # (h,), (h,)
        gain = 1 + v.exp()  # (h,): 1 + e^v_h

        def mod(score, b, h, q_idx, kv_idx):
            # ReLU(s) * f(w_h R; v_h), f(x; v) = (1 + e^v) sigmoid(x - v), R = |j - i|
            dist = off(b, q_idx, kv_idx).abs()
            return torch.relu(score) * (gain[h] * torch.sigmoid(w[h] * dist - v[h]))

        return mod

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"


@register("da_transformer")
def _make(*, d_model: int, n_heads: int, max_len: int) -> DATransformer:
    return DATransformer(n_heads)

"""The one attention function, and the multi-head module built on it.

Shapes (legend in ``posenc_lib.utils``): q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEncoding
from .utils import check_positive_int

__all__ = ["attention", "MultiHeadAttention", "as_positions"]

_IDENTITY = PositionalEncoding()


def as_positions(pos: torch.Tensor | None, b: int, n: int, name: str = "pos", start: int = 0,
                 device: torch.device | None = None) -> torch.Tensor:
    """Integer positions as ``(b, n)`` int64; ``None`` means ``start, start+1, ..., start+n-1``."""
    if pos is None:
        return torch.arange(start, start + n, device=device).expand(b, n)
    if not isinstance(pos, torch.Tensor):
        pos = torch.as_tensor(pos, device=device)
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer positions, got dtype {pos.dtype}")
    if pos.dim() == 1:
        pos = pos.unsqueeze(0)
    if pos.dim() != 2 or pos.shape[-1] != n or pos.shape[0] not in (1, b):
        raise ValueError(f"{name} must have shape ({n},) or ({b}, {n}) to match the sequence, got {tuple(pos.shape)}")
    if (pos < 0).any():
        raise ValueError(f"{name} must be >= 0, got a minimum of {int(pos.min())}")
    return pos.to(dtype=torch.long).expand(b, n)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: PositionalEncoding | None = None,
              q_pos: torch.Tensor | None = None, k_pos: torch.Tensor | None = None, causal: bool = False,
              mask: torch.Tensor | None = None, path: str = "auto", return_weights: bool = False):
    """Scaled dot-product attention that calls the encoding's hooks in the fixed order.

    q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> out ``(b, h, i, e)``
    (and weights ``(b, h, i, j)`` when ``return_weights``). ``i`` may differ from ``j``:
    by default keys sit at ``0..j-1`` and queries at the last ``i`` of them (a KV cache).
    ``causal`` lets query position p see key positions <= p, using the positions themselves.
    ``mask`` (bool, True = may attend) is combined with it. ``path`` is "auto", "fast"
    (fused ``scaled_dot_product_attention``) or "slow" (explicit scores).
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (b, h, n, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, h, i, d = q.shape
    if k.shape[:2] != (b, h) or k.shape[-1] != d:
        raise ValueError(f"k must have shape ({b}, {h}, j, {d}) to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    j = k.shape[2]
    if v.shape[:3] != (b, h, j):
        raise ValueError(f"v must have shape ({b}, {h}, {j}, e) to match k {tuple(k.shape)}, got {tuple(v.shape)}")
    if q_pos is None and k_pos is None and i > j:
        raise ValueError(f"with default positions the {i} queries must not outnumber the {j} keys; pass q_pos/k_pos")
    if path not in ("auto", "fast", "slow"):
        raise ValueError(f"path must be 'auto', 'fast' or 'slow', got {path!r}")
    pe = _IDENTITY if pe is None else pe
    k_pos = as_positions(k_pos, b, j, "k_pos", device=q.device)
    q_pos = as_positions(q_pos, b, i, "q_pos", start=max(j - i, 0), device=q.device)

    allowed = None                                                           # (b|1, 1|h, i, j) bool
    if causal:
        allowed = (k_pos[:, None, None, :] <= q_pos[:, None, :, None])       # (b, 1, i, j)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None and not allowed.any(-1).all():
        raise ValueError("mask/causal leave a query with no key to attend to; every query needs at least one key")

    q, k = pe.transform_qk(q, k, q_pos, k_pos)
    bias = pe.score_bias(q, k, q_pos, k_pos)                                 # None or ~(b, h, i, j)
    scale = pe.scale if pe.scale is not None else 1.0 / math.sqrt(d)

    fast = path == "fast" or (path == "auto" and not pe.needs_score_path and not return_weights)
    if fast:
        if pe.needs_score_path or return_weights:
            raise ValueError(f"path='fast' cannot be used with return_weights or {type(pe).__name__}, which overrides a hook past score_bias")
        attn_mask = allowed
        if bias is not None:
            bias = bias.to(q.dtype)
            attn_mask = bias if allowed is None else torch.where(allowed, bias, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)

    # omega_ij = (q_i . k_j) * scale + bias_ij
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale                  # (b, h, i, j)
    if bias is not None:
        scores = scores + bias
    scores = pe.transform_scores(scores, q_pos, k_pos)
    weights = pe.attention_weights(scores, allowed)                          # (b, h, i, j)
    out = torch.einsum("bhij,bhje->bhie", weights, v)                        # (b, h, i, e)
    extra = pe.value_bias(weights, q_pos, k_pos)                             # None or (b, h, i, e)
    if extra is not None:
        out = out + extra
    return (out, weights) if return_weights else out


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention whose positional behaviour comes from ``pe``'s hooks.

    ``encode_input`` is not called here: it acts once on the embeddings (``TinyTransformer``).
    """

    def __init__(self, d_model: int, n_heads: int, pe: PositionalEncoding | None = None, bias: bool = False):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_head = d_model // n_heads
        self.pe = pe if pe is not None else PositionalEncoding()
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)     # (b, h, n, d)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None = None, causal: bool = False,
                mask: torch.Tensor | None = None, path: str = "auto", return_weights: bool = False):
        """x ``(b, n, D)``, pos ``(n,)`` or ``(b, n)`` integers -> ``(b, n, D)`` (and weights)."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (b, n, {self.d_model}), got {tuple(x.shape)}")
        b, n, _ = x.shape
        pos = as_positions(pos, b, n, "pos", device=x.device)
        q, k, v = self._split(self.w_q(x)), self._split(self.w_k(x)), self._split(self.w_v(x))
        res = attention(q, k, v, self.pe, pos, pos, causal=causal, mask=mask, path=path,
                        return_weights=return_weights)
        out, weights = res if return_weights else (res, None)
        out = self.w_o(out.transpose(1, 2).reshape(b, n, self.d_model))    # (b, n, D)
        return (out, weights) if return_weights else out

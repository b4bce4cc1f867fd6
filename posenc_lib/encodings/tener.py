"""TENER's direction-aware relative attention (Yan et al., 2019), unscaled.

For target (query) position t and context (key) position j, the paper's Eq. (17)::

    A_tj = q_t . k_j + q_t . R_{t-j} + u . k_j + v . R_{t-j}        (no 1/sqrt(d))

with R_x = [sin(c_0 x), cos(c_0 x), ..., sin(c_{d/2-1} x), cos(c_{d/2-1} x)],
c_i = base^(-2i/d), d the head dimension. R has no parameters and no projection, so
R_{-x} = [-sin, cos, ...] differs from R_x: q_t . R_{t-j} tells left from right. u, v
are learned per head. TENER also leaves the keys unprojected (K = H split into heads);
``posenc_lib``'s attention always applies W_k, which contains that case (W_k = I).

``variant="code"`` follows the authors' released code (fastNLP/TENER
``RelativeMultiHeadAttn``) instead: R in tensor2tensor's layout ([sin | cos],
c_i = base^(-i/(d/2-1))), the query terms use R_{j-t}, and a fifth term k_j . R_{t-j}
(absent from the paper's equation) is added.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..positions import position_facts
from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int
from .sinusoidal import sinusoidal_encoding

__all__ = ["TENER", "tener_relative_sinusoid"]


def tener_relative_sinusoid(
    offsets: torch.Tensor,
    d_head: int,
    base: float = 10000.0,
    variant: str = "paper",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(...)`` integer offsets -> ``(..., d_head)`` fixed relative encodings R_x.

    ``variant="paper"``: interleaved sin/cos with c_i = base^(-2i/d) (TENER Eq. 16,
    Vaswani's layout). ``variant="code"``: [sin | cos] halves with
    c_i = base^(-i/(d/2-1)) (the authors' code, tensor2tensor).
    """
    check_positive_int(d_head, "d_head")
    if d_head % 2:
        raise ValueError(f"d_head must be even for sin/cos pairs, got {d_head}")
    if variant == "paper":
        return sinusoidal_encoding(offsets, d_head, base, dtype=dtype)
    if variant != "code":
        raise ValueError(f"variant must be 'paper' or 'code', got {variant!r}")
    if d_head < 4:
        raise ValueError(
            f"variant='code' needs d_head >= 4 (it divides by d/2 - 1), got {d_head}"
        )
    offsets = torch.as_tensor(offsets)
    half = d_head // 2
    # c_i = base^(-i / (d/2 - 1)),  i = 0 .. d/2-1
    inv_freq = torch.exp(
        -math.log(base)
        * torch.arange(half, dtype=torch.float64, device=offsets.device)
        / (half - 1)
    )
    angles = offsets.to(torch.float64)[..., None] * inv_freq  # (..., d/2)
    return torch.cat((angles.sin(), angles.cos()), dim=-1).to(
        dtype or torch.get_default_dtype()
    )


class TENER(PositionalEncoding):
    """Unscaled attention with q.R, u.k and v.R terms on fixed direction-aware
    sinusoids R.

    ``scaled=True`` divides all terms by sqrt(d) instead (the ablation of the
    paper's Table 5).
    """

    scale = 1.0
    four_terms = {
        "content-content": "kept (TENER's keys are unprojected; W_k = I here)",
        "content-position": (
            "replaced by q_t . R_{t-j} (fixed direction-aware sinusoid, no projection)"
        ),
        "position-content": "replaced by u . k_j (learned global content bias)",
        "position-position": "replaced by v . R_{t-j} (learned v, fixed sinusoid)",
    }

    def __init__(
        self,
        d_head: int,
        n_heads: int,
        base: float = 10000.0,
        variant: str = "paper",
        scaled: bool = False,
    ):
        super().__init__()
        self.d_head = check_positive_int(d_head, "d_head")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if variant not in ("paper", "code"):
            raise ValueError(f"variant must be 'paper' or 'code', got {variant!r}")
        tener_relative_sinusoid(
            torch.zeros(1), d_head, base, variant
        )  # validates d_head for the variant
        self.base, self.variant = float(base), variant
        if scaled:
            self.scale = 1.0 / math.sqrt(d_head)
        self.u = nn.Parameter(
            nn.init.xavier_normal_(torch.empty(n_heads, d_head))
        )  # (h, d)
        self.v = nn.Parameter(
            nn.init.xavier_normal_(torch.empty(n_heads, d_head))
        )  # (h, d)

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx=None,
    ) -> torch.Tensor:
        check_heads(q, self, self.n_heads, self.d_head)
        b, h, n_q, d = q.shape
        n_k = k.shape[2]
        offsets = q_pos[:, :, None] - k_pos[:, None, :]  # (b, i, j): t - j
        facts = position_facts(q_pos, k_pos, ctx)  # the offsets' range, no sync
        m = max(-facts.lo, facts.hi)
        sign = (
            1 if self.variant == "paper" else -1
        )  # the code's query terms use R_{j-t}
        if (2 * m + 1) * h > n_k * d:  # positions far apart: R of each pair instead
            return self._pairwise(q, k, offsets, sign)  # of every offset in the span
        table = tener_relative_sinusoid(
            torch.arange(-m, m + 1, device=q.device),
            d,
            self.base,
            self.variant,
            q.dtype,
        )  # (2m+1, d): R_x, x = -m..m
        # q_t . R_x + v . R_x for every x, then pick x = +-(t - j)
        qr = torch.einsum(
            "bhid,xd->bhix", q + self.v[None, :, None, :], table
        )  # (b, h, i, 2m+1)
        bias = qr.gather(
            -1, (sign * offsets + m)[:, None].expand(b, h, n_q, n_k)
        )  # (b, h, i, j)
        bias = (
            bias + torch.einsum("hd,bhjd->bhj", self.u, k)[:, :, None, :]
        )  # + u . k_j
        if self.variant == "code":
            # the authors' fifth term k_j . R_{t-j}
            kr = torch.einsum("bhjd,xd->bhjx", k, table)  # (b, h, j, 2m+1)
            bias = bias + kr.gather(
                -1, (offsets + m).transpose(1, 2)[:, None].expand(b, h, n_k, n_q)
            ).transpose(-1, -2)
        return bias * self.scale

    def _pairwise(self, q, k, offsets, sign: int) -> torch.Tensor:
        """``score_bias`` from R of each pair's offset ``(b|1, i, j, d)``: for
        positions whose span holds more offsets than the call has keys per head
        dimension (four tokens at 0, 1, 2, 10^9 would want 2 * 10^9 rows)."""
        d = q.shape[-1]
        r = tener_relative_sinusoid(sign * offsets, d, self.base, self.variant, q.dtype)
        # q_t . R_x + v . R_x, x = +-(t - j);  + u . k_j
        bias = torch.einsum("bhid,bijd->bhij", q + self.v[None, :, None, :], r)
        bias = bias + torch.einsum("hd,bhjd->bhj", self.u, k)[:, :, None, :]
        if self.variant == "code":  # the authors' fifth term k_j . R_{t-j}
            r = tener_relative_sinusoid(offsets, d, self.base, self.variant, q.dtype)
            bias = bias + torch.einsum("bhjd,bijd->bhij", k, r)
        return bias * self.scale

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, n_heads={self.n_heads}, variant={self.variant!r}, "
            f"scale={self.scale:g}"
        )


@register("tener")
def _make(*, d_model: int, n_heads: int, max_len: int) -> TENER:
    return TENER(d_model // n_heads, n_heads)

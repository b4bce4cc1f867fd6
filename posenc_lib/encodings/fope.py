"""FoPE as it ships (Hua et al., 2025; Intern-S1-Pro, vLLM): RoPE that drops the
frequencies a training window cannot see whole and mixes the rest with learned
matrices.

The paper's argument: a frequency whose period exceeds the training length ``L`` is
never seen through a whole turn, so it is undertrained; FoPE sets it to zero. The
shipped form keeps RoPE's frequencies with a period shorter than ``L`` (or the first
``num_inv_freq``), ``k`` of them, and gives each key head two learned ``(k, k)``
matrices ``C`` and ``S`` that mix their cosines and sines into the ``k`` channels of
the rotation, which is then applied in the half layout::

    theta_D = base^(-2D/d),  D < k:  2 pi / theta_D < L
    cos_c(m) = sum_D C[D, c] cos(m theta_D),   sin_c(m) = sum_D S[D, c] sin(m theta_D)
    x_m -> x_m * cos(m) + rotate_half(x_m) * sin(m)      (channels c and c + d/2)

With ``C = S = I`` it is RoPE with the slow frequencies set to zero. The ``d/2 - k``
channels past the kept ones are padded, cos with 1, sin with ``pad_sin``, and the two
shipped versions disagree there:

* **vLLM** (``vllm/model_executor/layers/rotary_embedding/fope.py``,
  ``FourierRotaryEmbedding._compute_cos_sin_cache``, commit 151a2c7): sin padded with
  0, "so they pass through unrotated" (a zero frequency, the paper's meaning);
* **Intern-S1-Pro's remote code** (``modeling_interns1_pro.py``,
  ``InternS1ProMoeTextFourierEmbedding.forward``, checkpoint commit 4591d64): sin
  padded with 1, so a dropped pair ``(x, y)`` becomes ``(x - y, x + y)`` in queries and
  keys alike: ``q.k`` of those pairs doubles, still independent of position.

``pad_sin=0.0`` (the default) is vLLM's and the paper's, ``1.0`` the remote code's;
``tests/test_fope.py`` checks each against its source. The matrices are initialised
as both sources do: ``xavier_normal_(gain=init_factor)`` (0.5) plus the identity,
one pair per head (``sep_head``, Intern-S1-Pro's setting) or one for all.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_positive_int
from .rope import KeepsFrequencies, rotate_half

__all__ = ["FourierRotary", "fope_inv_freq", "fope_cos_sin"]

PAD_SIN = (0.0, 1.0)  # vLLM (and the paper: a zero frequency), the remote code


def fope_inv_freq(
    d_head: int, base: float, max_len: int, num_inv_freq: int | None = None
) -> torch.Tensor:
    """The frequencies FoPE keeps (``_compute_fope_parameters`` in Intern-S1-Pro's
    ``modeling_rope_utils.py``; vLLM's ``_compute_inv_freq``): RoPE's
    ``base^(-2i/d)``, cut to the first ``num_inv_freq``, or (None) to those whose
    period ``2 pi / theta`` is shorter than ``max_len``. ``(k,)`` float64, k <= d/2."""
    if not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be a positive even int, got {d_head!r}")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    # theta_i = base^(-2i/d)
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    if num_inv_freq is not None:
        if not isinstance(num_inv_freq, int) or not 1 <= num_inv_freq <= d_head // 2:
            raise ValueError(
                f"num_inv_freq must be an int in [1, {d_head // 2}], got "
                f"{num_inv_freq!r}"
            )
        return theta[:num_inv_freq]
    # keep theta_i > 2 pi / L: a period shorter than L
    return theta[theta > 2 * math.pi / max_len]


def fope_cos_sin(
    pos: torch.Tensor,
    inv_freq: torch.Tensor,
    cos_coef: torch.Tensor,
    sin_coef: torch.Tensor,
    d_head: int,
    pad_sin: float = 1.0,
):
    """FoPE's cos and sin: each output channel mixes the kept frequencies with the
    learned matrices, per key head; the channels past the kept ones are padded (cos
    with 1, sin with ``pad_sin``: 1 in Intern-S1-Pro's remote code, 0 in vLLM's
    ``fope.py``) and the result is laid out as RoPE's half layout.

    ``pos`` ``(n,)`` or ``(b, n)``, ``inv_freq`` ``(k,)``, ``cos_coef``, ``sin_coef``
    ``(h, k, k)`` -> ``cos``, ``sin`` ``(h, n, d)`` (or ``(b, h, n, d)``), in the
    dtype of ``inv_freq``: ``cos[h, p, c] = sum_D C[h, D, c] cos(p theta_D)`` for
    ``c < k``."""
    k = inv_freq.numel()
    if cos_coef.shape != sin_coef.shape or cos_coef.shape[-2:] != (k, k):
        raise ValueError(
            f"cos_coef and sin_coef must be (h, {k}, {k}), got "
            f"{tuple(cos_coef.shape)}, {tuple(sin_coef.shape)}"
        )
    if not isinstance(d_head, int) or d_head < 2 * k or d_head % 2:
        raise ValueError(f"d_head must be an even int >= {2 * k}, got {d_head!r}")
    angles = pos.to(inv_freq.dtype)[..., None] * inv_freq  # (b?, n, k)
    # cos_c(p) = sum_D C[h, D, c] cos(p theta_D), likewise sin with S
    cos = torch.einsum("...nD,hDc->...hnc", angles.cos(), cos_coef.to(angles.dtype))
    sin = torch.einsum("...nD,hDc->...hnc", angles.sin(), sin_coef.to(angles.dtype))
    pad = d_head // 2 - k
    cos = torch.nn.functional.pad(cos, (0, pad), value=1.0)
    sin = torch.nn.functional.pad(sin, (0, pad), value=pad_sin)
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (b?, h, n, d)


class FourierRotary(KeepsFrequencies, PositionalEncoding):
    """FoPE: RoPE's frequencies with a period shorter than ``max_len`` (or the first
    ``num_inv_freq``), mixed per head by the learned ``cos_coef`` and ``sin_coef``
    ``(h, k, k)`` (``(1, k, k)`` without ``sep_head``), in the half layout; the dropped
    channels padded with sin = ``pad_sin`` (0: vLLM, 1: Intern-S1-Pro's remote code).
    No attention factor (Intern-S1-Pro's ``rope_type`` is ``"default"``)."""

    four_terms = {
        "content-content": (
            "kept, rotated by a learned mixture of the frequencies that the window "
            "sees whole"
        ),
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (no position vector is added)",
    }

    def __init__(
        self,
        d_head: int,
        n_heads: int,
        max_len: int,
        base: float = 10000.0,
        num_inv_freq: int | None = None,
        sep_head: bool = True,
        init_factor: float = 0.5,
        pad_sin: float = 0.0,
    ):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        if pad_sin not in PAD_SIN:
            raise ValueError(
                f"pad_sin must be 0.0 (vLLM: the dropped pairs unrotated) or 1.0 "
                f"(Intern-S1-Pro's remote code), got {pad_sin!r}"
            )
        if not isinstance(init_factor, (int, float)) or not init_factor >= 0:
            raise ValueError(f"init_factor must be a number >= 0, got {init_factor!r}")
        # max_len <= 2 pi keeps no frequency: every channel is padded (pad_sin 0:
        # no rotation at all: what the sources' formulas give for an empty table)
        inv_freq = fope_inv_freq(d_head, float(base), max_len, num_inv_freq)
        self.d_head, self.max_len, self.base = d_head, max_len, float(base)
        self.sep_head, self.pad_sin = bool(sep_head), float(pad_sin)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (k,) float64
        k = inv_freq.numel()
        shape = (n_heads, k, k) if sep_head else (k, k)
        coef = []
        for _ in range(2):  # sin, then cos, as both sources
            c = torch.zeros(shape)
            if k:  # the sources' fans (a tensor of no element has none)
                nn.init.xavier_normal_(c, gain=init_factor)
            coef.append((c + torch.eye(k)).reshape(shape[0] if sep_head else 1, k, k))
        self.sin_coef, self.cos_coef = (nn.Parameter(c) for c in coef)

    def cos_sin(self, pos: torch.Tensor, dtype: torch.dtype):
        """``(cos, sin)`` ``(b|1, h|1, n, d)`` in ``dtype`` for integer ``pos``
        ``(b|1, n)``, angles and mixing in float64."""
        cos, sin = fope_cos_sin(
            pos, self.inv_freq, self.cos_coef, self.sin_coef, self.d_head, self.pad_sin
        )
        return cos.to(dtype), sin.to(dtype)

    def transform_qk(self, q, k, q_pos, k_pos, ctx=None):
        for name, t in (("q", q), ("k", k)):
            if t.dim() != 4 or t.shape[-1] != self.d_head:
                raise ValueError(
                    f"{name} must be (b, h, n, {self.d_head}) for this FourierRotary, "
                    f"got {tuple(t.shape)}"
                )
            if self.sep_head and t.shape[1] != self.n_heads:
                raise ValueError(
                    f"{name} must have {self.n_heads} heads (one pair of matrices "
                    f"each), got {tuple(t.shape)}"
                )

        def rotate(x, pos, which):
            if ctx is None or ctx.positions is None:
                cos, sin = self.cos_sin(torch.as_tensor(pos, device=x.device), x.dtype)
            else:  # once per forward pass, shared by every layer
                cos, sin = ctx.positions.reuse(
                    (self, which, x.dtype), lambda: self.cos_sin(pos, x.dtype)
                )
            # x cos + rotate_half(x) sin, channel c and c + d/2 sharing one angle
            return x * cos + rotate_half(x) * sin  # (b, h, n, d)

        return rotate(q, q_pos, "q"), rotate(k, k_pos, "k")

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, n_heads={self.n_heads}, max_len={self.max_len}, "
            f"base={self.base:g}, kept={self.inv_freq.numel()}, "
            f"sep_head={self.sep_head}, pad_sin={self.pad_sin:g}"
        )


@register("fope", needs_max_len=True)
def _make(*, d_model: int, n_heads: int, max_len: int) -> FourierRotary:
    return FourierRotary(d_model // n_heads, n_heads, max_len)

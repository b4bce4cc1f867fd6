"""ALiBi, attention with linear biases (Press et al., 2022): a fixed, per-head
distance penalty.

No position enters the embeddings, queries or keys. Each head h adds a linear function
of the query-key distance to the scaled scores::

    causal:     bias[h, i, j] = -m_h * (i - j)      (used with a causal mask, so j <= i)
    symmetric:  bias[h, i, j] = -m_h * |i - j|      (a bidirectional variant)

Under a causal mask the two agree on every key a query may see. The slopes m_h form a
geometric sequence fixed before training (``alibi_slopes``): for H heads, a power of
two, m_h = 2^(-8h/H), h = 1 .. H (H = 8 gives 1/2, 1/4, ..., 1/256). For other H the
authors take the 2^floor(log2 H) slopes of the nearest smaller power of two and fill the
remaining heads with every other slope of the next larger one (``get_slopes`` in their
fairseq code, and ``build_alibi_tensor`` in Hugging Face's BLOOM).

The same term is exposed twice from one formula (``linear_bias``): ``score_bias`` builds
the ``(b, h, i, j)`` tensor, ``score_mod`` the FlexAttention form that computes each
entry inside the kernel. It reads positions and slopes only (``reuse``), so a
forward pass builds it once and every layer shares it.
"""

from __future__ import annotations

import torch

from ..base import PositionalEncoding
from ..positions import relative_offsets
from ..registry import register
from ..utils import check_finite, check_heads, check_positive_int, check_tensor

__all__ = ["ALiBi", "alibi_slopes", "alibi_bias", "linear_bias"]


def _geometric_slopes(n: int) -> list[float]:
    # m_h = 2^(-8h/n),  h = 1 .. n   (n a power of two)
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(n_heads: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The ``(n_heads,)`` head slopes m_1 > m_2 > ... of ALiBi, computed in float64.

    For ``n_heads`` a power of two: ``2^(-8h/n_heads)``, ``h = 1 .. n_heads``.
    Otherwise, with ``c = 2^floor(log2 n_heads)``: the ``c`` slopes for ``c`` heads,
    then the odd-indexed slopes ``2^(-8h/(2c))``, ``h = 1, 3, 5, ...``, of ``2c`` heads
    for the ``n_heads - c`` remaining heads.
    """
    n_heads = check_positive_int(n_heads, "n_heads")
    c = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    slopes = _geometric_slopes(c)
    # the remaining heads interleave between those: every other slope of 2c heads
    slopes += _geometric_slopes(2 * c)[0::2][: n_heads - c]
    return torch.tensor(slopes, dtype=torch.float64).to(
        dtype or torch.get_default_dtype()
    )


def linear_bias(
    slope: torch.Tensor, rel: torch.Tensor, symmetric: bool = False
) -> torch.Tensor:
    """ALiBi's term from a slope and the offset ``rel = i - j`` (broadcasting):
    ``-m (i - j)``, or ``-m |i - j|`` when ``symmetric``.

    Errors: ``TypeError`` unless ``slope`` is a floating-point tensor and ``rel`` a
    tensor; ``ValueError`` for a non-finite slope, or shapes that do not broadcast
    (a slope per head ``(h,)`` against offsets ``(i, j)`` needs ``(h, 1, 1)``)."""
    check_finite(slope, "slope")
    if not isinstance(rel, torch.Tensor):
        raise TypeError(f"rel must be a tensor of offsets, got {type(rel).__name__}")
    try:
        torch.broadcast_shapes(slope.shape, rel.shape)
    except RuntimeError:
        raise ValueError(
            f"slope {tuple(slope.shape)} and rel {tuple(rel.shape)} do not broadcast: "
            "give a slope per head the offsets' dimensions, e.g. slope[:, None, None] "
            "against rel (i, j)"
        ) from None
    return _linear_bias(slope, rel, symmetric)


def _linear_bias(slope, rel, symmetric: bool) -> torch.Tensor:
    """``linear_bias`` without its checks (inside a FlexAttention kernel, and for
    slopes checked once)."""
    # -m (i - j), or -m |i - j|
    return -slope * (rel.abs() if symmetric else rel)


def alibi_bias(
    slopes: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    symmetric: bool = False,
) -> torch.Tensor:
    """``(h,)`` slopes, ``(b, i)`` and ``(b, j)`` integer positions ->
    ``(b|1, h, i, j)`` bias.

    ``-m_h (i - j)``, or ``-m_h |i - j|`` when ``symmetric``; in the slopes' dtype.
    """
    check_finite(slopes, "slopes")
    check_tensor(q_pos, "q_pos", "integer positions (b|1, i)")
    check_tensor(k_pos, "k_pos", "integer positions (b|1, j)")
    if slopes.dim() != 1:
        raise ValueError(f"slopes must be 1-D (h,), got shape {tuple(slopes.shape)}")
    return _alibi_bias(slopes, q_pos, k_pos, symmetric)


def _alibi_bias(slopes, q_pos, k_pos, symmetric: bool = False) -> torch.Tensor:
    """``alibi_bias`` without the slopes' checks (ALiBi's own, checked when built)."""
    if q_pos.dim() != 2 or k_pos.dim() != 2 or 1 < q_pos.shape[0] != k_pos.shape[0] > 1:
        raise ValueError(
            f"q_pos and k_pos must be (b|1, i) and (b|1, j), got "
            f"{tuple(q_pos.shape)} and {tuple(k_pos.shape)}"
        )
    # i - j for every query/key pair
    rel = (q_pos[:, :, None] - k_pos[:, None, :]).to(slopes.dtype)  # (b, i, j)
    return _linear_bias(slopes[None, :, None, None], rel[:, None], symmetric)


class ALiBi(PositionalEncoding):
    """Adds ``-m_h (i - j)`` (or ``-m_h |i - j|``) to head h's scaled scores;
    no parameters.

    The causal form is meant for causal attention: unmasked, it would *reward* future
    keys in proportion to their distance. Use ``symmetric=True`` for
    bidirectional attention.
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a fixed linear bias -m_h (i-j) per head",
    }
    reuse = frozenset({"score_bias"})  # positions and slopes only: once per forward

    def __init__(self, n_heads: int, symmetric: bool = False):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if not isinstance(symmetric, bool):
            raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
        self.symmetric = symmetric
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)  # (h,)

    def score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        check_heads(q, self, self.n_heads)
        return _alibi_bias(
            self.slopes.to(q.dtype), q_pos, k_pos, self.symmetric
        )  # (b, h, i, j)

    def key_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        """``(b|1, h, j)`` float64: ``m_h k_pos_j``. On the keys a causal query sees,
        ``-m_h (i - j) = -m_h i + m_h j`` (and ``|i - j| = i - j``): a term of the
        query, which the softmax drops, plus this term of the key. The fused backend
        takes it as one more dimension of q and k: no ``(i, j)`` bias at all."""
        check_heads(q, self, self.n_heads)
        # m_h j, in float64: the backend recentres it per block before rounding
        return self.slopes.double()[None, :, None] * k_pos.double()[:, None, :]

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor):
        """FlexAttention form: ``score - m_h (i - j)`` (or ``|i - j|``) per entry."""
        slopes, symmetric = self.slopes, self.symmetric
        off, _, _ = relative_offsets(q_pos, k_pos)  # j - i

        def mod(score, b, h, q_idx, kv_idx):
            rel = -off(b, q_idx, kv_idx)  # i - j
            return score + _linear_bias(slopes[h], rel.to(slopes.dtype), symmetric)

        return mod

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, symmetric={self.symmetric}"


@register("alibi")
def _make(*, d_model: int, n_heads: int, max_len: int) -> ALiBi:
    return ALiBi(n_heads)

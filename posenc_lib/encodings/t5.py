"""The T5 relative position bias (Raffel et al., 2020): one learned scalar per head
per bucket.

Conventions (the T5 / mesh-tensorflow / Hugging Face ones, kept exactly):

* ``relative_position = key_position - query_position`` (``j - i``): negative for keys
  in the past, positive for keys in the future.
* Buckets: ``bidirectional=True`` gives half of ``num_buckets`` to each direction
  (offset 0 and the past in ``0 .. B/2-1``, the future in ``B/2 .. B-1``);
  ``bidirectional=False`` (T5's decoder) maps every future offset to bucket 0, like
  offset 0, and spends all buckets on the past. In each half, the first
  ``max_exact = half/2`` distances have a bucket each; larger distances share
  logarithmically wider buckets, and every distance ``>= max_distance`` (in fact already
  from a little before it) lands in the last one.
* The bias is added to **unscaled** scores: ``scale = 1.0``, no ``1/sqrt(d)``
  (mesh-tensorflow folds that factor into the initialisation of ``W_q``).
* One ``(num_buckets, n_heads)`` table, shared by every layer (``TinyTransformer``
  shares its ``pe`` module across blocks, as T5 shares the table across the layers of
  a stack).

    omega_hij = q_hi . k_hj + b_h[bucket(j - i)]
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ..base import Context, PositionalEncoding
from ..positions import position_facts, relative_offsets
from ..registry import register
from ..utils import check_heads, check_integer, check_positive_int, compiling

__all__ = ["T5RelativeBias", "t5_relative_bucket"]


def t5_relative_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Integer offsets ``j - i`` (any shape) -> int64 bucket ids in
    ``[0, num_buckets)``, same shape.

    The arithmetic is float32 with truncation toward zero, as in mesh-tensorflow and
    Hugging Face, so the bucket edges agree with theirs bit for bit.
    """
    relative_position = torch.as_tensor(relative_position)
    check_integer(relative_position, "relative_position", "offsets")
    if not isinstance(bidirectional, bool):
        raise TypeError(
            f"bidirectional must be a bool, got {type(bidirectional).__name__}"
        )
    check_positive_int(num_buckets, "num_buckets")
    check_positive_int(max_distance, "max_distance")
    half = (
        num_buckets // 2 if bidirectional else num_buckets
    )  # buckets for one direction
    max_exact = half // 2
    if max_exact < 1:
        raise ValueError(
            f"num_buckets must be >= {4 if bidirectional else 2} "
            f"(bidirectional={bidirectional}), got {num_buckets}"
        )
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must exceed the {max_exact} exact buckets, got "
            f"{max_distance}"
        )
    relative_position = relative_position.long()
    if bidirectional:
        offset = (relative_position > 0).long() * half  # the future uses the upper half
        n = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        n = (-relative_position).clamp(min=0)  # future offsets -> 0
    # large n: max_exact + floor(log(n / max_exact) / log(max_distance / max_exact)
    #                            * (half - max_exact))
    ratio = (
        n.clamp(min=max_exact).float() / max_exact
    )  # clamp only avoids log(0); small n use n itself
    large = (
        max_exact
        + (
            torch.log(ratio) / math.log(max_distance / max_exact) * (half - max_exact)
        ).long()
    )
    large = large.clamp(max=half - 1)
    return offset + torch.where(n < max_exact, n, large)


WHOLE_BAND = 4096  # band_bias's width up to which the band is given whole
MAX_TABLE = 2**22  # offsets of the flex path's table (a 16 MiB float32 row per head)


class _Toeplitz(torch.autograd.Function):
    """``(h, i + j - 1) -> (h, i, j)``: ``out[h, t, s] = table[h, s - t + i - 1]``.

    Forward: windows of the table (a strided view), flipped into one copy. Backward
    on a CPU: one scatter-add of the ``(i, j)`` gradient into the ``i + j - 1``
    offsets, about 0.6 of the time of autograd's flip and ``unfold_backward`` there
    (measured); elsewhere those (atomic adds into a few thousand addresses on a GPU
    were not measured)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, i: int, j: int) -> torch.Tensor:
        ctx.i, ctx.j = i, j
        # windows[h, w, s] = table[h, w + s]; row t is window i - 1 - t
        return table.unfold(1, j, 1).flip(1)  # (h, i, j)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        i, j, h = ctx.i, ctx.j, grad.shape[0]
        if grad.device.type != "cpu":  # autograd's own: flip back, sum the windows
            size = (h, i + j - 1)
            table = torch.ops.aten.unfold_backward(grad.flip(1), size, 1, j, 1)
            return table, None, None
        # d table[h, r] = sum over (t, s) with s - t + i - 1 = r of grad[h, t, s]
        t = torch.arange(i, device=grad.device)[:, None]
        s = torch.arange(j, device=grad.device)[None, :]
        offset = (s - t + (i - 1)).view(1, -1).expand(h, -1)  # (h, i * j)
        table = grad.new_zeros(h, i + j - 1)
        return table.scatter_add_(1, offset, grad.reshape(h, -1)), None, None


class T5RelativeBias(PositionalEncoding):
    """Adds ``b_h[bucket(j - i)]`` to the unscaled scores; one learned scalar per head
    and bucket."""

    scale = 1.0
    four_terms = {
        "content-content": "kept (unscaled: no 1/sqrt(d))",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a learned per-head scalar b_h(bucket(j-i))",
    }
    reuse = frozenset({"score_bias"})  # one bias per forward pass, shared by layers

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        init_std: float | None = None,
    ):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        t5_relative_bucket(
            torch.zeros(1, dtype=torch.long), bidirectional, num_buckets, max_distance
        )  # validates
        self.num_buckets, self.max_distance, self.bidirectional = (
            num_buckets,
            max_distance,
            bidirectional,
        )
        self.band = self._band(bidirectional, num_buckets, max_distance)  # W
        # Hugging Face initialises the table with N(0, d_model^-1/2); the factory
        # passes that std.
        self.bias = nn.Parameter(
            torch.randn(num_buckets, n_heads) * (0.02 if init_std is None else init_std)
        )

    def buckets(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b|1, i), (b|1, j)`` positions -> ``(b|1, i, j)`` bucket ids of
        ``j - i``."""
        rel = k_pos[:, None, :] - q_pos[:, :, None]  # (b|1, i, j): key - query
        return t5_relative_bucket(
            rel, self.bidirectional, self.num_buckets, self.max_distance
        )

    def per_offset(self, lo: int, hi: int) -> torch.Tensor:
        """``(h, L)``: ``b_h[bucket(r)]`` for the offsets ``r = lo .. hi``
        (``L = hi - lo + 1``, about ``2n``: a few KiB instead of an ``n x n`` grid)."""
        config = (self.bidirectional, self.num_buckets, self.max_distance)
        offsets = torch.arange(lo, hi + 1, device=self.bias.device)  # (L,)
        return self.bias.T[:, t5_relative_bucket(offsets, *config)]  # (h, L)

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
    ) -> torch.Tensor:
        """``(b|1, h, i, j)``: ``b_h[bucket(j - i)]``, the formula: the bucket of
        every pair, then the table's entry (``fast_score_bias`` reads the same values
        from a table per offset)."""
        check_heads(q, self, self.n_heads)
        buckets = self.buckets(q_pos, k_pos)  # (b|1, i, j)
        return self.bias[buckets].permute(0, 3, 1, 2).to(q.dtype)

    def fast_score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context | None = None,
    ) -> torch.Tensor:
        """``score_bias``, ``(b|1, h, i, j)``, read from the per-offset table
        ``(h, L)``, so that the backward pass sums the gradient into ``L`` offsets
        instead of scattering ``n^2`` of them into the bucket table: the fused
        backend's form for the calls ``band_bias`` does not take. With the call's
        ``Positions`` (``ctx``) the offset range is known; called on its own,
        finding it costs one host sync."""
        check_heads(q, self, self.n_heads)
        known = getattr(ctx, "positions", None)
        if compiling() and (known is None or known.lo is None):
            # no offset range without a data read: the grid of buckets
            return self.score_bias(q, k, q_pos, k_pos)
        facts = position_facts(q_pos, k_pos, ctx)
        i, j = q_pos.shape[1], k_pos.shape[1]
        if facts.run:  # offsets s - t - (j - i): a Toeplitz matrix, L = i + j - 1
            # (whatever each row starts at: not lo .. hi, which span the batch)
            per_offset = self.per_offset(1 - j, i - 1)  # (h, i + j - 1)
            # bias[h, t, s] = per_offset[h, s - t + i - 1]; cast last, as the grid
            # did: the gradient is summed in the table's dtype
            return _Toeplitz.apply(per_offset, i, j)[None].to(q.dtype)  # (1, h, i, j)
        # every offset beyond +-W shares its side's last bucket: the table needs
        # lo .. hi clamped to -W .. W, not the span of the positions
        lo, hi = max(facts.lo, -self.band), min(facts.hi, self.band)
        rel = (k_pos[:, None, :] - q_pos[:, :, None]).clamp(lo, hi)  # (b|1, i, j)
        rows = rel.shape[0]
        if hi - lo + 1 > rows * i * j:  # fewer pairs than offsets: the grid
            return self.score_bias(q, k, q_pos, k_pos)
        per_offset = self.per_offset(lo, hi)  # (h, L)
        # b_h[bucket(k_pos[j] - q_pos[i])] = per_offset[h, k_pos[j] - q_pos[i] - lo]
        flat = (rel - lo).reshape(1, -1).expand(self.n_heads, -1)  # (h, b|1 i j)
        bias = per_offset.gather(1, flat).view(self.n_heads, rows, i, j)
        return bias.transpose(0, 1).to(q.dtype)  # (b|1, h, i, j)

    def band_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
    ) -> torch.Tensor:
        """``(h, W + 1)``: ``b_h[bucket(-r)]`` for the distances ``r = i - j = 0 ..
        W`` (the last one stands for every distance from W on): the fused
        backend's form for causal calls in token order. A band wider than
        ``WHOLE_BAND`` and than the call's keys (a large ``max_distance``) is cut
        to them: W = j, whose bias stands for no distance of the call."""
        check_heads(q, self, self.n_heads)
        width = min(self.band, max(k.shape[2], WHOLE_BAND))
        return self.per_offset(-width, 0).flip(-1).to(q.dtype)  # (h, W + 1)

    @staticmethod
    def _band(bidirectional: bool, num_buckets: int, max_distance: int) -> int:
        """W: the first distance ``i - j`` from which every larger one shares its
        bucket (the last of the past's): beyond it the bias is one constant. The
        buckets grow with the distance, so W is found by bisection over ``0 ..
        max_distance`` (a few dozen distances, not a tensor of all of them)."""

        def bucket(r: int) -> int:
            offset = torch.tensor([-r])
            config = (bidirectional, num_buckets, max_distance)
            return int(t5_relative_bucket(offset, *config))

        last, lo, hi = bucket(max_distance), 0, max_distance
        while lo < hi:  # the first r with bucket(r) == last lies in lo .. hi
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if bucket(mid) == last else (mid + 1, hi)
        return lo

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor):
        """FlexAttention form: ``score + b_h[bucket(j - i)]``, read from a table over
        this call's offsets ``lo .. hi`` (a few KiB)."""
        off, lo, hi = relative_offsets(q_pos, k_pos)  # j - i
        # beyond +-W each side has one bucket: the table covers lo .. hi clamped
        lo, hi = max(lo, -self.band), min(hi, self.band)
        if hi - lo + 1 > MAX_TABLE:
            raise ValueError(
                f"path='flex' reads T5's bias from a table over the call's offsets, "
                f"{hi - lo + 1} of them here (more than {MAX_TABLE}: positions far "
                f"apart and max_distance={self.max_distance}); use path='reference' or "
                "'fused', which read the buckets of the pairs"
            )
        per_offset = self.per_offset(lo, hi).contiguous()  # (h, L): b_h[bucket(r)]

        def mod(score, b, h, q_idx, kv_idx):
            r = off(b, q_idx, kv_idx).clamp(lo, hi)  # j - i, within the table
            return score + per_offset[h, r - lo]

        return mod

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )


@register("t5")
def _make(*, d_model: int, n_heads: int, max_len: int) -> T5RelativeBias:
    # bidirectional=True is right for both masks: under a causal mask the future half of
    # the buckets is simply never used, whereas bidirectional=False on an encoder would
    # merge every future offset with offset 0. T5's decoder uses False to spend all 32
    # buckets on the past.
    return T5RelativeBias(n_heads, init_std=d_model**-0.5)

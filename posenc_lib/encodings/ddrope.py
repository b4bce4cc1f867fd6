"""Data-dependent RoPE, Mamba-3's rotation (Lahoti et al., 2026) in attention form:
RoPE whose positions are a running sum of what the tokens say.

Mamba-3 gives its state-space layer complex transitions and computes them as real
ones by "the RoPE trick": the complex phase accumulated up to token t rotates that
token's B and C (its key and query). Each token writes an angle per rotated pair and
the phases add up::

    theta_t = pi * tanh(W_a x_t) * Delta_t^h,    Delta_t^h = softplus(w_h . x_t + b_h)
    phi_t   = sum_{l <= t} theta_l                              (h, p), per pair
    q_t -> R(phi_t) q_t,   k_s -> R(phi_s) k_s
    (R(phi_t) q_t) . (R(phi_s) k_s) = q_t . R(phi_s - phi_t) k_s

and ``phi_t - phi_s = sum_{s < l <= t} theta_l``: the angle between a query and a key
is what the tokens between them say, as CoPE's positions count what a query cares
about (``cope.py``), and plain RoPE is the case of a constant angle per pair. The
first token's angle never matters.

Checked against the Mamba-3 reference (github.com/state-spaces/mamba, commit e9594ce,
2026-07-23; flash-linear-attention's ``fla/layers/mamba3.py``, ``Mamba3``, calls its
kernels): ``tests/ops/triton/test_mamba3_siso.py``, ``mamba3_siso_fwd_ref``:
``Angles = tanh(Angles) * pi``; ``Angles_Cumsum = cumsum(Angles * DT)`` (reduced mod
2 pi, which changes no rotation); ``_rotary`` rotates the interleaved pairs
``(2p, 2p + 1)`` by ``+phi`` (``x0 cos - x1 sin``, ``x0 sin + x1 cos``), the pairs past
the angles padded with cos 1, sin 0 (not rotated); both C (query) and B (key) are
rotated by their own token's phase. In ``Mamba3``: the angles are a slice of
``in_proj`` (no bias), ``num_rope_angles = int(d_state * rope_fraction) // 2`` shared by
the heads, ``rope_fraction`` 0.5 or 1; ``DT = softplus(dd_dt + dt_bias)`` per head, with
``dt_bias`` the inverse softplus of a log-uniform draw in [1e-3, 0.1] (floor 1e-4).
The MIMO variant rotates the pairs ``(p, p + N/2)`` instead (not offered here).
Golden vectors: ``tests/golden/make_ddrope_golden.py``.

**In attention.** The phases multiply in position order (the keys' positions), like
FoX's gates, so the encoding is causal (``causal_only``) and needs every key's layer
input ``ctx.x`` (the whole sequence, or a ``KVCache``, which keeps every token's input:
each call sums the angles again, exactly, in float64). It is a ``transform_qk``, so it
runs on every backend, with no ``(i, j)`` tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int
from .rope2d import apply_rotary_angles
from .wall import _cumulative

__all__ = ["DataDependentRotary", "mamba3_angles", "cumulative_angles"]


def mamba3_angles(angle_logits: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """Mamba-3's angle per token, head and pair: ``pi tanh(a_t) * Delta_t^h``.
    ``angle_logits`` ``(b, n, p)`` (shared by the heads), ``dt`` ``(b, h, n)`` (the
    step sizes, > 0) -> ``(b, h, n, p)``."""
    if (
        angle_logits.dim() != 3
        or dt.dim() != 3
        or dt.shape[::2] != angle_logits.shape[:2]
    ):
        raise ValueError(
            "angle_logits must be (b, n, p) and dt (b, h, n), got "
            f"{tuple(angle_logits.shape)}, {tuple(dt.shape)}"
        )
    # theta_t = pi tanh(a_t) Delta_t
    return math.pi * torch.tanh(angle_logits)[:, None] * dt[..., None]


def cumulative_angles(theta: torch.Tensor, pos: torch.Tensor | None = None):
    """``phi_t = sum_{l <= t} theta_l`` ``(b, h, n, p)`` float64, ``l`` running over
    the tokens up to t in position order (``pos`` ``(b|1, n)``; None: token order)."""
    if not isinstance(theta, torch.Tensor) or theta.dim() != 4:
        raise ValueError(f"theta must be a (b, h, n, p) tensor, got {theta!r}")
    return _cumulative(theta, pos)


class DataDependentRotary(PositionalEncoding):
    """Rotates q and k by Mamba-3's running angles: ``angle_proj`` ``Linear(d_model,
    p, bias=False)`` writes the ``p = int(d * rope_fraction) // 2`` angle logits per
    token (shared by the heads), ``dt_proj`` ``Linear(d_model, n_heads, bias=False)``
    and ``dt_bias`` the step size per head; the first ``2 p`` coordinates of a head
    are rotated in interleaved pairs, the rest are left alone."""

    causal_only = True
    four_terms = {
        "content-content": (
            "kept, rotated by what the tokens in between say: "
            "q_i . R(phi_j - phi_i) k_j"
        ),
        "content-position": "dropped (no position vector is added)",
        "position-content": "dropped (no position vector is added)",
        "position-position": "dropped (order enters through the running angles)",
    }

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        rope_fraction: float = 0.5,
        dt_min: float = 1e-3,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
    ):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads")
        if rope_fraction not in (0.5, 1.0):
            raise ValueError(f"rope_fraction must be 0.5 or 1.0, got {rope_fraction!r}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
        self.d_head = d_model // n_heads
        rotated = int(self.d_head * rope_fraction)
        self.n_angles = (rotated - rotated % 2) // 2  # pairs (2p, 2p + 1) rotated
        if self.n_angles < 1:
            raise ValueError(
                f"d_head * rope_fraction = {self.d_head} * {rope_fraction} leaves no "
                "pair to rotate"
            )
        self.angle_proj = nn.Linear(d_model, self.n_angles, bias=False)  # W_a
        self.dt_proj = nn.Linear(d_model, n_heads, bias=False)  # w_h
        # Delta log-uniform in [dt_min, dt_max], stored as its inverse softplus
        dt = torch.exp(
            torch.rand(n_heads) * (math.log(dt_max) - math.log(dt_min))
            + math.log(dt_min)
        ).clamp(min=dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # b_h

    def angles(self, x: torch.Tensor) -> torch.Tensor:
        """Layer input ``(b, n, D)`` -> each token's angles ``theta`` ``(b, h, n, p)``
        (computed in float32 or wider, as Mamba-3's kernels)."""
        work = torch.promote_types(x.dtype, torch.float32)
        # Delta_t^h = softplus(w_h . x_t + b_h)
        dt = F.softplus(self.dt_proj(x).to(work) + self.dt_bias.to(work))  # (b, n, h)
        return mamba3_angles(self.angle_proj(x).to(work), dt.transpose(1, 2))

    def transform_qk(self, q, k, q_pos, k_pos, ctx: Context):
        check_heads(q, self, self.n_heads, self.d_head)
        check_heads(k, self, self.n_heads, self.d_head, name="k")
        x = ctx.need("x", "DataDependentRotary")  # (b, j, D)
        i, j = q.shape[2], k.shape[2]
        if x.dim() != 3 or x.shape[1] != j or i > j:
            raise ValueError(
                "DataDependentRotary sums the angles of every token up to a query: "
                "x must hold every key's layer input (the whole sequence, i == j, or a "
                f"KVCache call, whose queries are the last i keys); got {i} queries, "
                f"{j} keys and x of shape {tuple(x.shape)}"
            )
        # phi_t = sum_{l <= t} theta_l, in position order
        phi = _cumulative(self.angles(x), k_pos)  # (b, h, j, p) float64
        # pairs past the angles: angle 0 (cos 1, sin 0), as Mamba-3 pads them
        phi = F.pad(phi, (0, self.d_head // 2 - self.n_angles))  # (b, h, j, d/2)
        return (
            apply_rotary_angles(q, phi[:, :, -i:], "interleaved"),
            apply_rotary_angles(k, phi, "interleaved"),
        )

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_angles={self.n_angles}"
        )


@register("ddrope")
def _make(*, d_model: int, n_heads: int, max_len: int) -> DataDependentRotary:
    return DataDependentRotary(d_model, n_heads)

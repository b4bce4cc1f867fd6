"""Inkling's relative logits: a bias of the distance that each query writes from its
own content, in Thinking Machines' Inkling models. No RoPE, no position in q or k.

A layer keeps a learned bank of ``d_rel`` bias-versus-distance profiles, ``P``
``(d_rel, E)``, shared by its heads, over the backward distances ``0 .. E - 1``. Each
query token projects its layer input to ``d_rel`` weights per head and mixes the bank
with them, linearly (no softmax, no normalisation)::

    r_i^h = (W_r x_i)^h                                  (d_rel,) per head h
    bias_ij^h = (r_i^h P)[i - j]     for 0 <= i - j < E,     0 otherwise
    scores_ij = q_i . k_j * scale + bias_ij^h

Checked against transformers 5.24, ``models/inkling/modeling_inkling.py``:

* ``InklingAttention.forward`` (lines 212-236): ``relative_states = self.r_proj(
  hidden_states)``, the layer's input projected by a ``Linear(hidden, heads *
  d_rel, bias=False)``, for the call's *new tokens only*, so with a KV cache the
  weights are the queries' (``relative_states.view(*input_shape, heads, -1)``): the
  query projects, the keys do not;
* ``InklingRelativeLogits.forward`` (lines 110-133): ``rel_logits = (relative_states
  @ self.proj)``, a plain product (no softmax); ``distance = q_pos - k_pos``; the
  bias is gathered at ``distance.clamp(0, E - 1)`` and set to 0 where ``distance < 0``
  or ``>= E`` ("causality and padding stay in the attention mask");
* ``eager_attention_forward``: ``q k^T * scaling + position_bias + mask``, then the
  softmax: the bias is added after the scale, and is not scaled;
* ``E``: ``config.rel_extent`` (1024) in full-attention layers,
  ``config.sliding_window_size`` (512) in the ``"hybrid_sliding"`` layers, whose mask
  also hides every key beyond the window (``extent`` here; the window itself is a mask
  that this encoding does not add); ``d_rel`` = 16; ``proj`` drawn from N(0, 0.02^2)
  (``_init_weights``, ``initializer_range``);
* not part of the encoding: the attention's own scale ``1/d`` (q and k are
  RMS-normalised there), and, when ``log_scaling_n_floor`` is set (``None`` by
  default), a log-length temperature that multiplies q *and the bias* in the full
  layers.

**Paths.** The bias is a ``score_bias`` read from the queries' layer inputs ``ctx.x``
(as FoX reads its gates), so Inkling runs on the fused kernel, the bias handed in as a
float mask ``(b, h, i, j)``: memory O(n^2). It fits neither of the fused backend's
second forms (``key_bias`` wants ``u_i + w_j``, ``band_bias`` a function of the
distance alone; this one is a function of the query *and* the distance), so none is
given. ``score_mod`` states it for FlexAttention, reading a ``(b, h, i, E)`` table of
profiles: memory O(n E). Golden vectors: ``tests/golden/make_inkling_golden.py``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import Context, PositionalEncoding, ScoreMod
from ..registry import register
from ..utils import check_heads, check_positive_int

__all__ = ["InklingBias", "relative_logits", "content_relative_bias"]


def relative_logits(
    relative_states: torch.Tensor,
    proj: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
) -> torch.Tensor:
    """Inkling's bias ``(b, h, i, j)``: ``(r_i^h P)[q_pos_i - k_pos_j]`` where that
    distance is in ``[0, E)``, else 0.

    ``relative_states`` ``(b, h, i, d_rel)`` (the queries' weights), ``proj`` ``(d_rel,
    E)``, integer positions ``q_pos`` ``(b|1, i)`` and ``k_pos`` ``(b|1, j)``."""
    if relative_states.dim() != 4 or proj.dim() != 2:
        raise ValueError(
            "relative_states must be (b, h, i, d_rel) and proj (d_rel, E), got "
            f"{tuple(relative_states.shape)}, {tuple(proj.shape)}"
        )
    if relative_states.shape[-1] != proj.shape[0]:
        raise ValueError(
            f"relative_states' last size {relative_states.shape[-1]} must equal "
            f"proj's first {proj.shape[0]} (d_rel)"
        )
    for name, p in (("q_pos", q_pos), ("k_pos", k_pos)):
        if not isinstance(p, torch.Tensor) or p.dim() != 2 or p.is_floating_point():
            raise ValueError(f"{name} must be (b|1, n) integer positions, got {p!r}")
    b, h, i, _ = relative_states.shape
    extent = proj.shape[1]
    # profile^h_i[delta] = sum_r r_i^h[r] P[r, delta]
    profile = torch.einsum("bhir,re->bhie", relative_states, proj)  # (b, h, i, E)
    distance = q_pos[:, :, None] - k_pos[:, None, :]  # (b|1, i, j): i - j
    inside = (distance >= 0) & (distance < extent)  # (b|1, i, j)
    index = distance.clamp(0, extent - 1)[:, None].expand(b, h, i, -1)
    bias = profile.gather(-1, index)  # (b, h, i, j)
    return bias.masked_fill(~inside[:, None], 0.0)  # (b, h, i, j)


def content_relative_bias(relative_states: torch.Tensor, proj: torch.Tensor):
    """``relative_logits`` for one sequence in token order: ``relative_states``
    ``(n, h, d_rel)`` (Inkling's layout, the queries' ``r_proj``), ``proj`` ``(d_rel,
    E)`` -> ``(h, n, n)``, ``bias[h, i, j] = (r_i^h P)[i - j]`` for ``0 <= i - j <
    E``, else 0."""
    if relative_states.dim() != 3 or proj.dim() != 2:
        raise ValueError(
            "relative_states must be (n, h, d_rel) and proj (d_rel, E), got "
            f"{tuple(relative_states.shape)}, {tuple(proj.shape)}"
        )
    pos = torch.arange(relative_states.shape[0], device=relative_states.device)[None]
    states = relative_states.permute(1, 0, 2)[None]  # (1, h, n, d_rel)
    return relative_logits(states, proj, pos, pos)[0]  # (h, n, n)


class InklingBias(PositionalEncoding):
    """Adds Inkling's content-conditioned relative logits to the scaled scores.

    ``r_proj`` ``Linear(d_model, n_heads * d_rel, bias=False)`` (PyTorch's default
    initialisation, like every projection of ``TinyTransformer``) and the bank ``proj``
    ``(d_rel, extent)`` (N(0, 0.02^2), as Inkling). ``extent`` 1024 for a
    full-attention layer, 512 for a sliding one.

    ``ctx.x`` holds the queries' layer inputs ``(b, i, D)``, or every key's ``(b, j,
    D)`` (a ``KVCache`` call, whose queries are the last ``i`` keys); the bias depends
    on the queries' content and the distance only, so a call with any subset of the
    queries gives those rows of the full call."""

    four_terms = {
        "content-content": "kept",
        "content-position": (
            "replaced by a bias of the distance that the query's content writes: "
            "(r_i P)[i - j]"
        ),
        "position-content": "dropped",
        "position-position": "dropped (the bank of profiles alone is never used)",
    }

    def __init__(self, d_model: int, n_heads: int, d_rel: int = 16, extent: int = 1024):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.d_rel = check_positive_int(d_rel, "d_rel")
        self.extent = check_positive_int(extent, "extent")
        self.r_proj = nn.Linear(d_model, n_heads * d_rel, bias=False)  # W_r
        self.proj = nn.Parameter(torch.empty(d_rel, extent))  # P, the bank
        nn.init.normal_(self.proj, std=0.02)

    def relative_states(self, q: torch.Tensor, k: torch.Tensor, ctx: Context):
        """``r_i^h`` ``(b, h, i, d_rel)`` from the queries' rows of ``ctx.x``."""
        check_heads(q, self, self.n_heads)
        x = ctx.need("x", "InklingBias")  # (b, i|j, D)
        i, j = q.shape[2], k.shape[2]
        if x.dim() != 3 or x.shape[-1] != self.d_model or x.shape[1] not in (i, j):
            raise ValueError(
                f"InklingBias reads the queries' layer inputs: x must be (b, {i}, "
                f"{self.d_model}) (the queries) or (b, {j}, {self.d_model}) (every "
                f"key, the queries being the last {i}), got {tuple(x.shape)}"
            )
        b = x.shape[0]
        r = self.r_proj(x[:, -i:])  # (b, i, h * d_rel): the queries are the last i
        return r.view(b, i, self.n_heads, self.d_rel).transpose(1, 2)  # (b, h, i, r)

    def score_bias(self, q, k, q_pos, k_pos, ctx: Context) -> torch.Tensor:
        r = self.relative_states(q, k, ctx)  # (b, h, i, d_rel)
        return relative_logits(r, self.proj.to(r.dtype), q_pos, k_pos)  # (b, h, i, j)

    def score_mod(self, q_pos, k_pos, ctx: Context) -> ScoreMod:
        """FlexAttention form: ``score + profile[b, h, i, q_pos_i - k_pos_j]`` inside
        the extent, read from the ``(b, h, i, E)`` profiles."""
        q = ctx.need("q", "InklingBias")
        r = self.relative_states(q, ctx.need("k", "InklingBias"), ctx)
        work = torch.promote_types(q.dtype, torch.float32)  # the kernel's score dtype
        profile = torch.einsum("bhir,re->bhie", r, self.proj.to(r.dtype)).to(work)
        b, extent = r.shape[0], self.extent
        q_pos, k_pos = (torch.as_tensor(p).expand(b, -1) for p in (q_pos, k_pos))

        def mod(score, b, h, q_idx, kv_idx):
            distance = q_pos[b, q_idx] - k_pos[b, kv_idx]  # i - j
            inside = (distance >= 0) & (distance < extent)
            term = profile[b, h, q_idx, distance.clamp(0, extent - 1)]
            return score + torch.where(inside, term, 0.0)

        return mod

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_rel={self.d_rel}, "
            f"extent={self.extent}"
        )


@register("inkling_bias")
def _make(*, d_model: int, n_heads: int, max_len: int) -> InklingBias:
    return InklingBias(d_model, n_heads)

"""Attention with a positional encoding: the reference that teaches it, and the entry
points that check a call once and hand it to the reference or a fast backend.

Shapes: q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)``; positions
``(1|b, n)`` or coordinates ``(1|b, n, a)`` (``posenc_lib.positions``).

* ``reference_attention``: explicit scores and every hook, in the fixed order. It is
  the definition; ``path="reference"`` runs it.
* ``posenc_lib.backends``: the same result, fast, each held equal to the reference
  by the registry contract test. The layer is ``posenc_lib.layer``.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from .backends import BACKENDS, PATHS, SAME_PATH
from .base import Context, PositionalEncoding
from .positions import Positions, as_positions, check_prepared, prepare, prepare_step
from .registry import as_encoding
from .utils import check_layout, check_qkv, is_4d

__all__ = [
    "attention",
    "reference_attention",
    "prepare",
    "prepare_step",
    "as_positions",
    "PATHS",
]

_NO_PE = PositionalEncoding()


def reference_attention(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context):
    """Attention as the course defines it: ``(out (b, h, i, e), weights (b, h, i, j))``.

    Half-precision q, k, v are scored in float32, as the fused kernels do."""
    q, k = pe.call_hook("transform_qk", q, k, pos.q, pos.k, ctx=ctx)  # RoPE
    v = pe.call_hook("transform_v", v, pos.k, ctx=ctx)  # DeepSeek-V4: v rotated
    ctx = ctx.replace(q=q, k=k, v=v)  # later hooks see the transformed q, k, v
    work = torch.promote_types(q.dtype, torch.float32)
    # omega_ij = (q_i . k_j) * scale + bias_ij
    scores = torch.einsum("bhid,bhjd->bhij", q.to(work), k.to(work)) * scale_of(pe, q)
    bias = pe.call_hook("score_bias", q, k, pos.q, pos.k, ctx=ctx)  # ALiBi, T5, FoX
    if bias is not None:
        scores = scores + bias  # (b, h, i, j)
    scores = pe.call_hook("transform_scores", scores, pos.q, pos.k, ctx=ctx)  # CoPE
    # alpha_ij = softmax_j(omega_ij) over the keys the mask allows
    weights = pe.call_hook("attention_weights", scores, pos.mask, ctx=ctx)
    # z_i = sum_j alpha_ij v_j (+ a value term: Shaw)
    out = torch.einsum("bhij,bhje->bhie", weights, v.to(work))  # (b, h, i, e)
    extra = pe.call_hook("value_bias", weights, pos.q, pos.k, ctx=ctx)
    if extra is not None:
        out = out + extra
    out = pe.call_hook("transform_out", out, pos.q, ctx=ctx)  # V4: rotated back
    return out.to(v.dtype), weights.to(q.dtype)


def scale_of(pe: PositionalEncoding, q: torch.Tensor) -> float:
    """``pe.scale``, or ``1/sqrt(d)``."""
    return pe.scale if pe.scale is not None else 1.0 / math.sqrt(q.shape[-1])


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pe: PositionalEncoding | None = None,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    path: str = "auto",
    return_weights: bool = False,
    x: torch.Tensor | None = None,
    inputs: Mapping[str, torch.Tensor] | None = None,
    positions: Positions | None = None,
):
    """Scaled dot-product attention with ``pe``'s hooks, checked at the boundary.

    q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> out ``(b, h, i, e)``
    (and weights ``(b, h, i, j)`` when ``return_weights``). q, k, v must be finite,
    and q.k must not overflow (refused, where a kernel would return zeros or NaN).
    Heads come before positions: dim 2 is the sequence. Hugging Face's projections
    are ``(b, n, h, d)`` until ``.transpose(1, 2)``, and such a tensor reads as n
    heads of h positions (RoPE would rotate by the head index, a causal mask would
    mask heads); explicit positions whose length is dim 1, not dim 2, are refused
    with this reason. Without positions nothing tells the two layouts apart: check
    that ``q.shape[2]`` is your sequence length.

    * ``pe``: an encoding, None (none), or the registered name of one without
      learned parameters (``"rope"``, ``"alibi"``), built for q's ``h`` heads of
      ``d``.
    * ``q_pos``/``k_pos``: ``(i,)``/``(b|1, i)`` integers (coordinates ``(b|1, i, a)``
      when ``pe.coord_axes == a``); by default keys sit at ``0..j-1`` and queries at
      the last ``i`` of them (a KV cache).
    * ``causal``: query position p sees key positions <= p (coordinates: token order,
      KV-cache aligned); ``mask`` (bool, True = may attend), broadcastable to
      ``(b, h, i, j)``, is combined with it.
    * ``x`` ``(b, i, D)``: the layer input (FoX reads it); ``inputs``: named side
      inputs (graph distances, ...).
    * ``positions``: a ``Positions`` from ``prepare`` instead of ``q_pos``, ``k_pos``,
      ``causal``, ``mask``, ``inputs``: calls that share it share what depends only
      on positions (a model's layers; a benchmark's repeats).
    * ``path``: "auto" ("fused" when the encoding allows it, else "reference"),
      "reference" (``reference_attention``), "fused" (the fused backend's table of
      forms), "flex" (``posenc_lib.backends``; ``pl.explain_path`` says which runs
      a call, and why); "slow" and "fast", the previous release's names, are
      aliases of "reference" and "fused".
    """
    if isinstance(pe, str) and is_4d(q):  # a name: built with q's h heads of d
        name, pe = pe, as_encoding(pe, q.shape[1] * q.shape[-1], q.shape[1])
        if any(True for _ in pe.parameters()):
            raise TypeError(
                f"pe={name!r} has learned parameters: by name, attention() would "
                "build a new, random one at every call; build it once "
                f"(pl.make_encoding({name!r}, d_model, n_heads)) and pass it"
            )
    elif pe is not None and not isinstance(pe, (str, PositionalEncoding)):
        as_encoding(pe, 1, 1)  # refuses it, naming what pe may be
    pe = _NO_PE if pe is None else pe
    check_prepared(positions, "q_pos=/k_pos=")
    for t, t_pos, t_name in ((q, q_pos, "q"), (k, k_pos, "k")):
        check_layout(t, t_pos, t_name, pe)
    b, h, i, j = check_qkv(q, k, v, scale_of(pe, q) if is_4d(q) else 1.0, x)
    if positions is None:
        args = (q_pos, k_pos, causal, mask, inputs, q.device)
        positions = prepare(pe, b, h, i, j, *args)
    elif any(a is not None for a in (q_pos, k_pos, mask, inputs)) or causal:
        raise ValueError("pass either positions= or q_pos/k_pos/causal/mask/inputs")
    elif (positions.q.shape[1], positions.k.shape[1]) != (i, j):
        raise ValueError(f"positions were prepared for other lengths than ({i}, {j})")
    return _attend(q, k, v, pe, positions, x, path, return_weights)


def _attend(q, k, v, pe, pos: Positions, x, path: str, return_weights: bool):
    """Run a checked call on the reference or a backend."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    path = SAME_PATH.get(path, path)
    if path == "auto":
        path = "fused" if pe.runs_fused(pos) and not return_weights else "reference"
    ctx = Context(x, q, k, v, causal=pos.causal, inputs=pos.inputs, positions=pos)
    if path == "reference":
        out, weights = reference_attention(q, k, v, pe, pos, ctx)
        return (out, weights) if return_weights else out
    backend = BACKENDS[path]
    why = backend.refuses(pe, return_weights, pos)
    if why is not None:
        raise ValueError(why)
    q, k = pe.call_hook("transform_qk", q, k, pos.q, pos.k, ctx=ctx)
    v = pe.call_hook("transform_v", v, pos.k, ctx=ctx)  # per key: before the kernel
    ctx = ctx.replace(q=q, k=k, v=v)
    out = backend.attend(q, k, v, pe, pos, ctx, scale_of(pe, q))
    return pe.call_hook("transform_out", out, pos.q, ctx=ctx)  # per query: after it

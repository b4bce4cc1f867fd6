"""The one attention function, and the multi-head module built on it.

Shapes (legend in ``posenc_lib.utils``): q ``(b, h, i, d)``, k ``(b, h, j, d)``,
v ``(b, h, j, e)``; positions ``(b, n)`` or coordinates ``(b, n, a)``.

Three paths give the same result (the registry contract test holds them equal):

* ``"slow"``, the reference: explicit scores, every hook, a boolean mask.
* ``"fast"``: PyTorch's fused ``scaled_dot_product_attention``, the bias (if any) and
  the mask as one float mask. It costs what the maths costs: causal attention in token
  order (positions a run ``s, s+1, ...`` with the queries the last ``i`` keys, or
  coordinates) builds nothing ``n x n``: without a bias the kernel's own causal mode,
  with one the queries in blocks, each against only the keys it can see. A bias that
  depends on positions, parameters and side inputs only (an encoding whose
  ``score_mod`` takes no ``ctx``, or reads only ``ctx.inputs`` and says so in
  ``ctx_reads``) is built once with its mask and reused while they stay the same
  (``PositionalEncoding.cached``): across layers, and across steps without gradients.
* ``"flex"``: FlexAttention, compiled, with the encoding's ``score_mod`` and a block
  mask (the causal triangle in token order, so unseen blocks are skipped; forward only
  on CPU; see ``attention``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .base import Context, PositionalEncoding
from .utils import check_bool_mask, check_positive_int

__all__ = ["attention", "MultiHeadAttention", "as_positions", "PATHS"]

PATHS = ("auto", "fast", "slow", "flex")
_BLOCK = 256  # queries per fused call on the causal fast path with a bias (measured)
_IDENTITY = PositionalEncoding()


def as_positions(
    pos: torch.Tensor | None,
    b: int,
    n: int,
    name: str = "pos",
    start: int = 0,
    device: torch.device | None = None,
    axes: int | None = None,
) -> torch.Tensor:
    """Integer positions as int64 ``(b, n)``, or coordinates ``(b, n, axes)``.

    Accepted: ``(n,)`` or ``(b|1, n)`` when ``axes`` is None; ``(n, axes)`` or
    ``(b|1, n, axes)`` otherwise. ``None`` means ``start, ..., start+n-1`` (sequences
    only: coordinates have no default).
    """
    what = (
        f"({n},) or ({b}, {n})"
        if axes is None
        else f"({n}, {axes}) or ({b}, {n}, {axes})"
    )
    if pos is None:
        if axes is not None:
            raise ValueError(
                f"{name} is required: this encoding reads {axes} integer coordinates "
                f"per token, shape {what}"
            )
        return torch.arange(start, start + n, device=device).expand(b, n)
    if not isinstance(pos, torch.Tensor):
        pos = torch.as_tensor(pos, device=device)
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer positions, got dtype {pos.dtype}")
    rank = 1 if axes is None else 2  # dims of one sequence's positions
    if pos.dim() == rank:
        pos = pos.unsqueeze(0)
    if (
        pos.dim() != rank + 1
        or pos.shape[1] != n
        or pos.shape[0] not in (1, b)
        or (axes is not None and pos.shape[2] != axes)
    ):
        raise ValueError(
            f"{name} must have shape {what} to match the sequence, "
            f"got {tuple(pos.shape)}"
        )
    if (pos < 0).any():
        raise ValueError(f"{name} must be >= 0, got a minimum of {int(pos.min())}")
    return pos.to(dtype=torch.long).expand(b, *pos.shape[1:])


def _check_inputs(pe: PositionalEncoding, inputs: Mapping | None) -> dict:
    inputs = dict(inputs or {})
    missing = [name for name in pe.side_inputs if name not in inputs]
    if missing:
        wanted = "; ".join(f"{m}: {pe.side_inputs[m]}" for m in missing)
        raise ValueError(
            f"{type(pe).__name__} needs the side input(s) {missing} in inputs= "
            f"({wanted})"
        )
    return inputs


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
):
    """Scaled dot-product attention that calls the encoding's hooks in the fixed order.

    q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> out ``(b, h, i, e)``
    (and weights ``(b, h, i, j)`` when ``return_weights``). ``i`` may differ from
    ``j``: by default keys sit at ``0..j-1`` and queries at the last ``i`` of them (a
    KV cache). q, k and v must be finite: a NaN or infinity is refused (ValueError)
    rather than passed on, since the fused kernel would turn it into zeros where the
    explicit path gives NaN.

    * ``q_pos``/``k_pos``: ``(b, i)``/``(b, j)`` integers, or coordinates
      ``(b, i, a)``/``(b, j, a)`` when ``pe.coord_axes == a``.
    * ``causal``: with sequence positions, query position p sees key positions <= p
      (the positions themselves decide); with coordinates, which have no order, query
      number t sees keys 0 .. t + (j - i) (token order, KV-cache aligned).
    * ``mask`` (bool, True = may attend), broadcastable to ``(b, h, i, j)``, is combined
      with it.
    * ``x`` ``(b, i, D)``: the layer input, for encodings whose hooks read it (FoX).
    * ``inputs``: named side inputs (graph distances, degrees, ...), see ``Context``.
    * ``path``: "auto" ("fast" when the encoding allows it, else "slow"), "fast"
      (fused ``scaled_dot_product_attention``), "slow" (explicit scores) or "flex"
      (compiled FlexAttention with ``pe.score_mod``; float32/16 only, and forward only
      on CPU, where FlexAttention has no backward; the first call per shape compiles).

    Hooks that take ``ctx`` receive a ``Context`` with x, q, k, v, the combined mask,
    ``causal`` and ``inputs``.
    """
    _check_qkv(q, k, v)
    b, h, i, d = q.shape
    j = k.shape[2]
    if q_pos is None and k_pos is None and i > j:
        raise ValueError(
            f"with default positions the {i} queries must not outnumber the {j} keys; "
            "pass q_pos/k_pos"
        )
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    pe = _IDENTITY if pe is None else pe
    if pe.causal_only and not causal:
        raise ValueError(
            f"{type(pe).__name__} is defined for causal attention only: "
            "pass causal=True"
        )
    if x is not None and (x.dim() != 3 or x.shape[:2] != (b, i)):
        raise ValueError(
            f"x must have shape ({b}, {i}, D) to match the {i} queries, "
            f"got {tuple(x.shape)}"
        )
    inputs = _check_inputs(pe, inputs)
    axes = pe.coord_axes
    k_pos = as_positions(k_pos, b, j, "k_pos", device=q.device, axes=axes)
    q_pos = as_positions(
        q_pos, b, i, "q_pos", start=max(j - i, 0), device=q.device, axes=axes
    )
    if path == "auto":
        path = "slow" if pe.needs_score_path or return_weights else "fast"
    if path != "slow":
        _check_path(path, pe, return_weights)

    # causal in token order: query t sees keys 0 .. t + j - i, in every row and head
    ordered = causal and i <= j and (axes is not None or _is_run(q_pos, k_pos))
    reads_mask = bool(pe._ctx_hooks) and _reads(pe, "mask")
    dense = (
        path == "slow" or mask is not None or reads_mask or not ordered
    )  # the boolean mask is built only where someone reads it
    allowed = _allowed(q_pos, k_pos, causal, mask, (b, h, i, j)) if dense else None

    ctx = Context(x=x, q=q, k=k, v=v, mask=allowed, causal=causal, inputs=inputs)
    q, k = pe.call_hook("transform_qk", q, k, q_pos, k_pos, ctx=ctx)
    ctx = dataclasses.replace(ctx, q=q, k=k)  # later hooks see the transformed q, k
    scale = pe.scale if pe.scale is not None else 1.0 / math.sqrt(d)

    def float_mask():  # the bias with -inf where no attention: (b|1, h|1, i, j)
        bias = pe.call_hook("score_bias", q, k, q_pos, k_pos, ctx=ctx)
        if bias is None:
            return allowed
        keep = allowed if allowed is not None or not ordered else _tril(i, j, q.device)
        bias = bias.to(q.dtype)
        return bias if keep is None else bias.masked_fill(~keep, float("-inf"))

    if path == "fast":
        if _cacheable_mod(pe) and allowed is None:  # reused across layers and steps
            side = tuple(inputs[name] for name in pe.side_inputs)
            key = (q_pos, k_pos, causal, h, q.dtype, q.device, *side)
            attn_mask = pe.cached("fast path mask", key, float_mask)
        else:
            attn_mask = float_mask()
        return _fused(q, k, v, attn_mask, scale, ordered)
    if path == "flex":
        # in token order with no caller mask, `allowed` (if built) is the causal
        # triangle: the block mask states it and lets the kernel skip unseen blocks
        if ordered and mask is None:
            allowed = None
        return _flex(q, k, v, pe, q_pos, k_pos, ctx, allowed, ordered, scale)

    # omega_ij = (q_i . k_j) * scale + bias_ij
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale  # (b, h, i, j)
    bias = pe.call_hook("score_bias", q, k, q_pos, k_pos, ctx=ctx)  # ~(b, h, i, j)
    if bias is not None:
        scores = scores + bias
    scores = pe.call_hook("transform_scores", scores, q_pos, k_pos, ctx=ctx)
    weights = pe.call_hook("attention_weights", scores, allowed, ctx=ctx)  # (b,h,i,j)
    out = torch.einsum("bhij,bhje->bhie", weights, v)  # (b, h, i, e)
    extra = pe.call_hook("value_bias", weights, q_pos, k_pos, ctx=ctx)  # (b,h,i,e)
    if extra is not None:
        out = out + extra
    return (out, weights) if return_weights else out


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(
                f"{name} must be a floating-point tensor, got "
                f"{getattr(t, 'dtype', type(t).__name__)}"
            )
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            "q, k, v must be 4-D (b, h, n, d); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    b, h, _, d = q.shape
    if k.shape[:2] != (b, h) or k.shape[-1] != d:
        raise ValueError(
            f"k must have shape ({b}, {h}, j, {d}) to match q {tuple(q.shape)}, "
            f"got {tuple(k.shape)}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v must have shape ({b}, {h}, {k.shape[2]}, e) to match k "
            f"{tuple(k.shape)}, got {tuple(v.shape)}"
        )
    # one sum per tensor is finite unless an element is not (or the sum overflows,
    # which the exact check below then clears)
    with torch.no_grad():
        if torch.isfinite(q.sum() + k.sum() + v.sum()):
            return
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not torch.isfinite(t).all():
            raise ValueError(
                f"{name} holds NaN or infinite values; attention is defined for "
                "finite q, k, v (the fused kernel would return zeros, the explicit "
                "path NaN)"
            )


def _check_path(path: str, pe: PositionalEncoding, return_weights: bool) -> None:
    """Refuse a fused path that cannot compute what the slow path computes."""
    name = type(pe).__name__
    if return_weights:
        raise ValueError(f"path={path!r} cannot be used with return_weights")
    if path == "fast" and pe.needs_score_path:
        raise ValueError(
            f"path='fast' cannot be used with {name}, which overrides a hook past "
            "score_bias"
        )
    cls, base = type(pe), PositionalEncoding
    late = [h for h in ("attention_weights", "value_bias") if getattr(cls, h) is not
            getattr(base, h)]  # fmt: skip
    if path == "flex" and late:
        raise ValueError(
            f"path='flex' cannot be used with {name}, which overrides {late}: "
            "FlexAttention computes softmax(score_mod(scores)) . v only"
        )
    plain = [h for h in ("score_bias", "transform_scores") if getattr(cls, h) is not
             getattr(base, h)]  # fmt: skip
    if path == "flex" and plain and not _has_mod(pe):
        raise ValueError(
            f"path='flex' cannot be used with {name}, which overrides {plain} but "
            "defines no score_mod (see PositionalEncoding.score_mod)"
        )


def _has_mod(pe: PositionalEncoding) -> bool:
    return type(pe).score_mod is not PositionalEncoding.score_mod


def _reads(pe: PositionalEncoding, field: str) -> bool:
    """Whether the encoding's hooks may read ``ctx.<field>`` (``ctx_reads``)."""
    return pe.ctx_reads is None or field in pe.ctx_reads


def _cacheable_mod(pe: PositionalEncoding) -> bool:
    """The encoding declares its term a function of positions, parameters and side
    inputs only: a ``score_mod`` without ``ctx``, or one whose ``ctx_reads`` is
    within ``inputs`` and ``causal``."""
    if not _has_mod(pe):
        return False
    if not pe._mod_reads_ctx:
        return True
    return pe.ctx_reads is not None and set(pe.ctx_reads) <= {"inputs", "causal"}


def _is_run(q_pos: torch.Tensor, k_pos: torch.Tensor) -> bool:
    """Every row's keys are a run ``s .. s+j-1`` and its queries the last ``i``."""
    i, j = q_pos.shape[1], k_pos.shape[1]
    run = k_pos[:, :1] + torch.arange(j, device=k_pos.device)  # (b, j)
    return bool((k_pos == run).all() and (q_pos == run[:, j - i :]).all())


def _tril(i: int, j: int, device: torch.device) -> torch.Tensor:
    """``(i, j)`` bool: query t sees keys 0 .. t + j - i (token order)."""
    return torch.ones(i, j, dtype=torch.bool, device=device).tril(j - i)


def _allowed(q_pos, k_pos, causal, mask, shape) -> torch.Tensor | None:
    """The boolean mask ``(b|1, 1|h, i, j)`` (True = may attend), or None."""
    b, h, i, j = shape
    allowed = None
    if causal and k_pos.dim() == 2:
        allowed = k_pos[:, None, None, :] <= q_pos[:, None, :, None]  # (b, 1, i, j)
    elif causal:  # coordinates: token order
        allowed = _tril(i, j, q_pos.device)
    if mask is not None:
        check_bool_mask(mask, shape, "(b, h, i, j) =")
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None and not allowed.any(-1).all():
        raise ValueError(
            "mask/causal leave a query with no key to attend to; every query needs "
            "at least one key"
        )
    return allowed


def _fused(q, k, v, attn_mask, scale, ordered) -> torch.Tensor:
    """``scaled_dot_product_attention``; in token order (``ordered``), blocks of
    queries skip the keys that none of them sees."""
    i, j = q.shape[2], k.shape[2]
    # a mask that needs a gradient (a learned or data-dependent bias, in training)
    # sends the kernel down its explicit route: one call then beats blocks of it
    if not ordered or (attn_mask is not None and attn_mask.requires_grad):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    if attn_mask is None:
        if i == j:  # the kernel's causal mode is top-left aligned: right when i == j
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        attn_mask = _tril(i, j, q.device)
    out = []
    for start in range(0, i, _BLOCK):
        stop = min(start + _BLOCK, i)
        seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
        out.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop],
                k[:, :, :seen],
                v[:, :, :seen],
                attn_mask=attn_mask[..., start:stop, :seen],
                scale=scale,
            )
        )
    return torch.cat(out, dim=2)  # (b, h, i, e)


def _flex(q, k, v, pe, q_pos, k_pos, ctx, allowed, ordered, scale) -> torch.Tensor:
    """FlexAttention with ``pe.score_mod`` and a block mask (causal, mask)."""
    if q.device.type == "cpu" and q.dtype == torch.float64:
        raise TypeError(
            "path='flex' on CPU takes float32, float16 or bfloat16 q, k, v "
            "(FlexAttention's CPU kernel), got float64"
        )
    if q.device.type == "cpu" and torch.is_grad_enabled():
        tensors = (q, k, v, *pe.parameters())
        if any(t.requires_grad for t in tensors):
            raise ValueError(
                "path='flex' runs forward only on CPU (FlexAttention has no CPU "
                "backward): call it under torch.no_grad(), or use path='fast'"
            )
    b, h, i, _ = q.shape
    j = k.shape[2]
    mod = None
    if _has_mod(pe):
        if not pe._mod_reads_ctx:  # it cannot see q: the hooks check the call
            pe.call_hook("score_bias", q[:, :, :1], k[:, :, :1], q_pos[:, :1],
                         k_pos[:, :1], ctx=ctx)  # fmt: skip
            corner = q.new_zeros(b, h, 1, 1)
            pe.call_hook("transform_scores", corner, q_pos[:, :1], k_pos[:, :1],
                         ctx=ctx)  # fmt: skip
        mod = pe.call_score_mod(q_pos, k_pos, ctx)
        _check_mod_fits(pe, mod, q, k)
    block_mask = None  # every key visible
    if allowed is None and ordered:
        block_mask = _token_order_blocks(i, j, str(q.device))
    elif allowed is not None:
        # a mask from positions or the caller: -inf in the score_mod (a mask_mod
        # that reads a tensor hits an inductor bug on CPU in torch 2.13)
        mod = _masked_mod(mod, allowed.expand(b, h, i, j).contiguous())
    return _compiled_flex()(q, k, v, score_mod=mod, block_mask=block_mask, scale=scale)


def _check_mod_fits(pe, mod, q: torch.Tensor, k: torch.Tensor) -> None:
    """Evaluate ``mod`` eagerly at the corners of ``(b, h, i, j)``: an index past a
    table is an error here, where inside the compiled kernel it would read garbage."""
    if mod is None:
        return
    (b, h, i, _), j = q.shape, k.shape[2]
    grid = [
        torch.tensor(values, device=q.device).view(shape)
        for values, shape in (
            (range(b), (-1, 1, 1, 1)),
            (range(h), (1, -1, 1, 1)),
            ((0, i - 1), (1, 1, -1, 1)),
            ((0, j - 1), (1, 1, 1, -1)),
        )
    ]
    try:
        mod(q.new_zeros(()), *grid)
    except (IndexError, RuntimeError) as error:
        raise ValueError(
            f"{type(pe).__name__}.score_mod does not fit this call, "
            f"(b, h, i, j) = {(b, h, i, j)}: {str(error).splitlines()[0]}"
        ) from None


def _masked_mod(mod, allowed: torch.Tensor):
    """``mod`` followed by -inf wherever ``allowed`` ``(b, h, i, j)`` is False."""

    def masked(score, b, h, q_idx, kv_idx):
        if mod is not None:
            score = mod(score, b, h, q_idx, kv_idx)
        return torch.where(allowed[b, h, q_idx, kv_idx], score, float("-inf"))

    return masked


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    """``torch.compile(flex_attention)``, or a RuntimeError saying why there is none."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError:
        raise RuntimeError(
            f"path='flex' needs FlexAttention (torch >= 2.5); this is torch "
            f"{torch.__version__}. Use path='fast' or 'slow'."
        ) from None
    # static shapes: torch 2.13's CPU template miscompiles some dynamic-shape graphs
    # (undeclared cur_qSplitSize); one graph per shape, mod and mask kind, so allow
    # more recompiles than dynamo's default of 8 before it falls back to eager
    compiled = torch.compile(flex_attention, dynamic=False)
    config = torch._dynamo.config
    name = (
        "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    )
    setattr(config, name, max(getattr(config, name), 64))

    def run(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except Exception as error:  # inductor, a missing C++ compiler, ...
            if isinstance(error, (TypeError, ValueError)):
                raise
            first = str(error).strip().splitlines()[0] if str(error) else ""
            raise RuntimeError(
                "path='flex' could not compile FlexAttention "
                f"({type(error).__name__}: {first}). On CPU, torch.compile needs a "
                "working C++ compiler; use path='fast' or 'slow'."
            ) from error

    return run


@functools.lru_cache(maxsize=16)
def _token_order_blocks(i: int, j: int, device: str):
    """The block mask of "query t sees keys 0 .. t + j - i", once per shape."""

    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + (j - i)

    return create_block_mask(causal, None, None, i, j, device=device)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention whose positional behaviour comes from ``pe``'s hooks.

    ``encode_input`` is not called here: it acts once on the embeddings
    (``TinyTransformer``). The layer input ``x`` and the side ``inputs`` are handed to
    ``attention``, so data-dependent (FoX) and structural (graph) encodings see them.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        pe: PositionalEncoding | None = None,
        bias: bool = False,
    ):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads})"
            )
        self.d_head = d_model // n_heads
        self.pe = pe if pe is not None else PositionalEncoding()
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)  # (b, h, n, d)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor | None = None,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        path: str = "auto",
        return_weights: bool = False,
        inputs: Mapping[str, torch.Tensor] | None = None,
    ):
        """x ``(b, n, D)``, pos ``(n,)``/``(b, n)`` integers (or ``(b, n, a)``
        coordinates) -> ``(b, n, D)`` (and weights)."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (b, n, {self.d_model}), got {tuple(x.shape)}"
            )
        b, n, _ = x.shape
        pos = as_positions(pos, b, n, "pos", device=x.device, axes=self.pe.coord_axes)
        q, k, v = (
            self._split(self.w_q(x)),
            self._split(self.w_k(x)),
            self._split(self.w_v(x)),
        )
        res = attention(
            q, k, v, self.pe, pos, pos, causal=causal, mask=mask, path=path,
            return_weights=return_weights, x=x, inputs=inputs,
        )  # fmt: skip
        out, weights = res if return_weights else (res, None)
        out = self.w_o(out.transpose(1, 2).reshape(b, n, self.d_model))  # (b, n, D)
        return (out, weights) if return_weights else out

"""The flex backend: FlexAttention, compiled, with the encoding's ``score_mod``.

FlexAttention computes ``softmax(score_mod(q k^T * scale)) v`` with the term
evaluated inside the kernel, so nothing ``n x n`` is built for it. What it cannot
run, it refuses with the reason: hooks past the scores (stick-breaking's weights,
Shaw's value term), terms with no ``score_mod``, float64 and backward on CPU.
Causal attention in token order uses a block mask, so blocks no query sees are
skipped. Per-token transforms of the values and the output (``transform_v``,
``transform_out``: DeepSeek-V4's rotated values) are supported: they act outside the
kernel, which ``posenc_lib.attention`` calls between them, as for the fused backend.
"""

from __future__ import annotations

import functools

import torch

from ..base import Context, PositionalEncoding, overrides
from ..positions import Positions


def refuses(pe: PositionalEncoding, return_weights: bool, pos=None) -> str | None:
    """Why this backend cannot run ``pe`` (on the call of ``pos``), or None."""
    name = type(pe).__name__
    if return_weights:
        return "path='flex' cannot be used with return_weights"
    late = [h for h in ("attention_weights", "value_bias") if overrides(pe, h)]
    if late:
        return (
            f"path='flex' cannot be used with {name}, which overrides {late}: "
            "FlexAttention computes softmax(score_mod(scores)) . v only"
        )
    plain = [h for h in ("score_bias", "transform_scores") if overrides(pe, h)]
    if plain and not overrides(pe, "score_mod"):
        return (
            f"path='flex' cannot be used with {name}, which overrides {plain} but "
            "defines no score_mod (see PositionalEncoding.score_mod)"
        )
    return None


def attend(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context, scale):
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``"""
    if q.device.type == "cpu" and q.dtype == torch.float64:
        raise TypeError(
            "path='flex' on CPU takes float32, float16 or bfloat16 q, k, v "
            "(FlexAttention's CPU kernel), got float64"
        )
    if q.device.type == "cpu" and torch.is_grad_enabled():
        if any(t.requires_grad for t in (q, k, v, *pe.parameters())):
            raise ValueError(
                "path='flex' runs forward only on CPU (FlexAttention has no CPU "
                "backward): call it under torch.no_grad(), or use path='fused'"
            )
    b, h, i, _ = q.shape
    j = k.shape[2]
    mod = None
    if overrides(pe, "score_mod"):
        if "score_mod" not in pe._ctx_hooks:  # it cannot see q: the hooks check
            qc, kc, qp, kp = q[:, :, :1], k[:, :, :1], pos.q[:, :1], pos.k[:, :1]
            pe.score_bias(qc, kc, qp, kp)  # head counts, tables: on one corner
            pe.transform_scores(q.new_zeros(b, h, 1, 1), qp, kp)
        q_pos, k_pos = (p.expand(b, *p.shape[1:]) for p in (pos.q, pos.k))
        mod = pe.call_hook("score_mod", q_pos, k_pos, ctx=ctx)  # indexed by batch row
        check_fits(pe, mod, (b, h, i, j), q)
    block_mask = None  # every key visible
    if pos.ordered and pos.user_mask is None:
        block_mask = token_order_blocks(i, j, str(q.device))
    elif pos.mask is not None:
        # a mask from positions or the caller: -inf in the score_mod (a mask_mod
        # that reads a tensor hits an inductor bug on CPU in torch 2.13)
        mod = masked(mod, pos.mask.expand(b, h, i, j).contiguous())
    return compiled()(q, k, v, score_mod=mod, block_mask=block_mask, scale=scale)


def evaluate(mod, shape: tuple[int, int, int, int], score: torch.Tensor):
    """``mod`` evaluated eagerly on the broadcast grid of ``shape`` = (b, h, i, j)
    (``score`` 0-d or broadcastable): the term it states, as a tensor."""
    grid = [
        torch.arange(size, device=score.device).view(
            [-1 if axis == n else 1 for n in range(4)]
        )
        for axis, size in enumerate(shape)
    ]
    return mod(score, *grid)


def check_fits(pe, mod, shape, q: torch.Tensor) -> None:
    """Evaluate ``mod`` eagerly at the corners of ``shape``: an index past a table is
    an error here, where inside the compiled kernel it would read garbage."""
    if mod is None:
        return
    b, h, i, j = shape
    grid = [
        torch.tensor(values, device=q.device).view(
            [-1 if a == n else 1 for n in range(4)]
        )
        for a, values in enumerate((range(b), range(h), (0, i - 1), (0, j - 1)))
    ]
    try:
        mod(q.new_zeros(()), *grid)
    except (IndexError, RuntimeError) as error:
        raise ValueError(
            f"{type(pe).__name__}.score_mod does not fit this call, "
            f"(b, h, i, j) = {shape}: {str(error).splitlines()[0]}"
        ) from None


def masked(mod, allowed: torch.Tensor):
    """``mod`` followed by -inf wherever ``allowed`` ``(b, h, i, j)`` is False."""

    def masked_mod(score, b, h, q_idx, kv_idx):
        if mod is not None:
            score = mod(score, b, h, q_idx, kv_idx)
        return torch.where(allowed[b, h, q_idx, kv_idx], score, float("-inf"))

    return masked_mod


RECOMPILE_LIMIT = 64  # graphs of FlexAttention (shapes x mods) in one process
_FAIL_AT_LIMIT = ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit")


def _at_limit(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) is dynamo's recompile limit."""
    while error is not None:
        if type(error).__name__ in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit"):
            return True
        error = error.__cause__ or error.__context__
    return False


@functools.lru_cache(maxsize=1)
def compiled():
    """``torch.compile(flex_attention)``, or a RuntimeError saying why there is none."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError:
        raise RuntimeError(
            f"path='flex' needs FlexAttention (torch >= 2.5); this is torch "
            f"{torch.__version__}. Use path='fused' or 'reference'."
        ) from None
    # static shapes: torch 2.13's CPU template miscompiles some dynamic-shape graphs;
    # one graph per shape, mod and mask kind
    kernel = torch.compile(flex_attention, dynamic=False)

    config = torch._dynamo.config
    limit = (
        "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    )
    fail = next(
        (f for f in _FAIL_AT_LIMIT if hasattr(config, f)), None
    )  # torch >= 2.5: raise at the limit

    def run(*args, **kwargs):
        # one graph per shape and mod: more than dynamo's default 8, for this call
        # only (the process's setting is left as it is); past the limit dynamo would
        # run flex_attention eagerly, unfused (n x n scores) with one log line: raise
        settings = {limit: max(getattr(config, limit), RECOMPILE_LIMIT)}
        if fail is not None:
            settings[fail] = True
        try:
            with config.patch(**settings):
                return kernel(*args, **kwargs)
        except Exception as error:  # inductor, a missing C++ compiler, ...
            if isinstance(error, (TypeError, ValueError)):
                raise
            if _at_limit(error):
                raise RuntimeError(
                    f"path='flex': torch.compile's recompile limit "
                    f"({settings[limit]} graphs of FlexAttention in this process) is "
                    "reached; past it FlexAttention would run unfused, building the "
                    "n x n scores. Call torch._dynamo.reset() to start again, or use "
                    "path='fused'."
                ) from error
            first = str(error).strip().splitlines()[0] if str(error) else ""
            raise RuntimeError(
                "path='flex' could not compile FlexAttention "
                f"({type(error).__name__}: {first}). On CPU, torch.compile needs a "
                "working C++ compiler; use path='fused' or 'reference'."
            ) from error

    return run


@functools.lru_cache(maxsize=16)
def token_order_blocks(i: int, j: int, device: str):
    """The block mask of "query t sees keys 0 .. t + j - i", once per shape."""
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + (j - i)

    return create_block_mask(causal, None, None, i, j, device=device)

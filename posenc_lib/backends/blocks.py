"""Blocks of queries: the one loop every blocked form runs, forward, backward and
recomputed.

Causal attention in token order: query t of i sees keys ``0 .. t + j - i``. In blocks
of queries ``start .. stop - 1``, each block sees keys ``0 .. seen - 1`` only, with
``seen = stop + j - i``: a kernel call per block skips the keys that none of its
queries sees (about half of them), and whatever a block builds (its mask, its
widened keys) is the size of one block, not ``n x n``.

* ``query_blocks``: the blocks, with the indices every form reads;
* ``recomputed_blocks``: one function per block, joined; in training each block is
  recomputed in the backward pass, so that nothing it builds is kept;
* ``FlashBlocks``: aten's CPU flash kernel and its backward over the blocks, for a
  form that says what each block's call takes (``KeyBiasOnCpu``, ``BandBiasOnCpu``).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from ..utils import compiling
from .kernel import CPU_FLASH, as_wide_as, flushed


class Block(NamedTuple):
    """Queries ``start .. stop - 1`` of ``i``, against keys ``0 .. seen - 1`` of
    ``j``, in token order."""

    start: int
    stop: int
    seen: int  # the block's last query sees keys 0 .. seen - 1
    offset: int  # the first query's last key: start + j - i
    middle: int  # the key at the block's middle query
    j: int

    def of_band(self, band: torch.Tensor) -> torch.Tensor:
        """The block's ``(.., stop - start, seen)`` view of a band ``(.., rows, j +
        rows)`` whose column ``c`` of row ``r`` holds the term at key ``c - j + r``
        minus the row's query, relative: a Toeplitz matrix, one for every block."""
        first = self.j - self.offset
        return band[..., : self.stop - self.start, first : first + self.seen]


def query_blocks(i: int, j: int, size: int) -> Iterator[Block]:
    """The blocks of ``size`` queries (the last one shorter) of a causal call in token
    order with ``i`` queries and ``j`` keys."""
    for start in range(0, i, size):
        yield block_of(i, j, start, min(start + size, i))


def block_of(i: int, j: int, start: int, stop: int) -> Block:
    """Queries ``start .. stop - 1`` of ``i`` against the ``j`` keys, as a ``Block``."""
    middle = (start + stop) // 2 + j - i  # the key at the block's middle query
    return Block(start, stop, stop + j - i, start + j - i, middle, j)


def recomputed_blocks(block, size: int, q, k, v, extra, scale) -> torch.Tensor:
    """``block(q, k, v, extra, start, stop, scale)`` for every ``size`` queries,
    joined: ``(b, h, i, e)``. In training each block is recomputed in the backward
    pass (non-reentrant checkpoint), so that what it builds (its mask, its keys) is
    not kept: memory O(n) plus one block. Under ``torch.compile``, plain calls."""
    keep_nothing = torch.is_grad_enabled() and not compiling()
    out = []
    for b in query_blocks(q.shape[2], k.shape[2], size):
        args = (q, k, v, extra, b.start, b.stop, scale)
        if keep_nothing:
            out.append(checkpoint(block, *args, use_reentrant=False))
        else:
            out.append(block(*args))
    return torch.cat(out, dim=2)  # (b, h, i, e)


class FlashBlocks(torch.autograd.Function):
    """``form``'s attention on a CPU: q ``(b, h, i, d)``, k ``(b, h, j, d)``, v
    ``(b, h, j, e)`` and the form's ``term`` -> ``(b, h, i, e)``, each block of
    queries through ``aten._scaled_dot_product_flash_attention_for_cpu`` and its
    backward, under a subnormal flush (``flushed``). The backward pass keeps only
    q, k, v, the term, the output and each row's log-sum-exp (memory O(n)).

    ``form`` says what each call takes: ``prepare(q, k, v, term, scale, *fixed)``
    (what every block shares), ``calls(state, q, k, v, term, scale)`` (per block:
    ``(block, q1, k1, v1, mask)``), ``grad_block(d_term, block, dk1, d, scale)``
    (what a block adds to the term's gradient) and ``grad_rest(d_term, state, q, k,
    v, grad, out, lse, scale)`` (the term's gradient, once every block has run)."""

    @staticmethod
    def forward(ctx, form, q, k, v, term, scale, *fixed):
        kernel = getattr(torch.ops.aten, CPU_FLASH)
        state = form.prepare(q, k, v, term, scale, *fixed)
        outs, lses = [], []
        with flushed():
            for _, q1, k1, v1, mask in form.calls(state, q, k, v, term, scale):
                out, lse = kernel(q1, k1, v1, 0.0, False, attn_mask=mask, scale=scale)
                outs.append(out)
                lses.append(lse)
        out = torch.cat(outs, dim=2)  # (b, h, i, widest)
        ctx.save_for_backward(q, k, v, term, out, *lses)
        ctx.form, ctx.scale, ctx.fixed = form, scale, fixed
        return out[..., : v.shape[-1]]

    @staticmethod
    def backward(ctx, grad):
        q, k, v, term, out, *lses = ctx.saved_tensors
        form, scale = ctx.form, ctx.scale
        kernel = getattr(torch.ops.aten, CPU_FLASH + "_backward")
        d, e = q.shape[-1], v.shape[-1]
        grad1 = as_wide_as(grad, out.shape[-1])  # zeros against the padded columns
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        wanted = ctx.needs_input_grad[4]
        d_term = torch.zeros(term.shape, dtype=term.dtype, device=term.device)
        state = form.prepare(q, k, v, term, scale, *ctx.fixed)
        calls = form.calls(state, q, k, v, term, scale)
        for lse, (block, q1, k1, v1, mask) in zip(lses, calls):
            rows, keys = slice(block.start, block.stop), slice(0, block.seen)
            with flushed():
                dq1, dk1, dv1 = kernel(
                    grad1[:, :, rows].contiguous(), q1, k1, v1,
                    out[:, :, rows].contiguous(), lse, 0.0, False, attn_mask=mask,
                    scale=scale,
                )  # fmt: skip
            dq[:, :, rows] += dq1[..., :d]
            dk[:, :, keys] += dk1[..., :d]
            dv[:, :, keys] += dv1[..., :e]
            if wanted:
                form.grad_block(d_term, block, dk1, d, scale)
        if wanted:
            lse = torch.cat(lses, dim=2)  # (b, h, i)
            d_term = form.grad_rest(d_term, state, q, k, v, grad, out, lse, scale)
        d_term = d_term if wanted else None
        return None, dq, dk, dv, d_term, None, *(None for _ in ctx.fixed)

"""What PyTorch's fused kernels take, shared by every fast form: the causal triangle,
widths (padding with zero columns, exact), the CPU flash kernel and the subnormal
flush it runs under.
"""

from __future__ import annotations

import sys

import torch

ALIGN = 8  # head widths the fused GPU kernels take: flash attention and cuDNN's a
# multiple of 8 (q, k and v alike, for flash), the memory-efficient kernel a multiple
# of 16 bytes (8 in half precision, 4 in float32); otherwise the math kernel runs
CPU_FLASH = "_scaled_dot_product_flash_attention_for_cpu"  # aten's, and "_backward"


def cpu_flash(q: torch.Tensor) -> bool:
    """Whether q's call can run aten's CPU flash kernel (forward and backward)."""
    return q.device.type == "cpu" and hasattr(torch.ops.aten, CPU_FLASH)


def triangle(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``(i, j)`` bool: query t sees keys ``0 .. t + j - i`` (token order)."""
    i, j = q.shape[2], k.shape[2]
    return torch.ones(i, j, dtype=torch.bool, device=q.device).tril(j - i)


def aligned(q, k, v):
    """q, k and v padded with zero columns to one width, the multiple of ``ALIGN``
    at or above the widest, which every fused kernel takes: zeros in q and k add
    nothing to any ``q_i . k_j``, and v's zero columns give output columns that the
    caller drops (``out[..., :e]``). Exact, forward and backward (the gradient of a
    padded column is dropped with it)."""
    width = -(-max(q.shape[-1], k.shape[-1], v.shape[-1]) // ALIGN) * ALIGN
    return as_wide_as(q, width), as_wide_as(k, width), as_wide_as(v, width)


def as_wide(q, k, v):
    """q, k, v padded with zeros on their last dimension to the widest of them: the
    CPU flash kernel wants them equally wide (zeros change no dot product)."""
    width = max(q.shape[-1], v.shape[-1])
    return as_wide_as(q, width), as_wide_as(k, width), as_wide_as(v, width)


def as_wide_as(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` padded with zeros on its last dimension to ``width`` (the CPU flash
    kernel wants v as wide as q and k)."""
    if t.shape[-1] >= width:
        return t
    return torch.cat([t, t.new_zeros(*t.shape[:-1], width - t.shape[-1])], dim=-1)


class flushed:
    """Subnormal results flushed to zero in this thread, the caller's setting
    restored on exit. A decaying bias puts some weights of every row between 1e-45
    and 1e-38, where x86 arithmetic is about a hundred times slower (FoX's fwd + bwd:
    2 to 3 times in all); flushing changes a weight by less than 1e-38 of the row's
    largest."""

    def __enter__(self):
        self.was = flushing()
        torch.set_flush_denormal(True)

    def __exit__(self, *exc):
        torch.set_flush_denormal(self.was)


def flushing(half: float = 0.5) -> bool:
    """Whether this thread flushes subnormal results to zero now (torch has a setter,
    no getter): Python's float product runs on the same unit, under the same flag,
    and reads no tensor (no host sync on a GPU)."""
    return sys.float_info.min * half == 0.0

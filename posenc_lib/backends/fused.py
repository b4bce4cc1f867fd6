"""The fused backend: PyTorch's ``scaled_dot_product_attention``.

It computes ``softmax(q k^T * scale + mask) v`` in one kernel, so it runs every
encoding that overrides nothing past ``score_bias``: the bias and the mask go in as
one float mask. It costs what the maths costs:

* causal attention in token order (``Positions.ordered``) builds nothing ``n x n``
  without a bias: the kernel's own causal mode (or a small triangle for a KV cache);
* with a bias, the queries go in blocks, each against only the keys it can see (on
  a CPU, a bias that needs a gradient too: the same maths, explicitly, since its
  kernels do not differentiate a mask);
* a bias in the encoding's ``reuse`` is built once per forward pass, merged with its
  mask, and shared by every layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..base import Context, PositionalEncoding
from ..positions import Positions

BLOCK = 256  # queries per kernel call on the causal path with a bias (measured)


def refuses(pe: PositionalEncoding, return_weights: bool) -> str | None:
    """Why this backend cannot run ``pe``, or None."""
    if return_weights:
        return "path='fast' cannot be used with return_weights"
    if pe.needs_score_path:
        return (
            f"path='fast' cannot be used with {type(pe).__name__}, which overrides a "
            "hook past score_bias"
        )
    return None


def attend(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context, scale):
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``"""
    keep = None if pos.ordered and pos.user_mask is None else pos.mask

    def float_mask():  # bias with -inf where no attention: (b|1, h|1, i, j)
        bias = pe.call_hook("score_bias", q, k, pos.q, pos.k, ctx=ctx)
        if bias is None:
            return keep
        seen = keep if keep is not None or not pos.ordered else triangle(q, k)
        bias = bias.to(q.dtype)
        return bias if seen is None else bias.masked_fill(~seen, float("-inf"))

    if "score_bias" in pe.reuse:
        attn_mask = pos.reuse((pe, "fused mask", q.dtype), float_mask)
    else:
        attn_mask = float_mask()
    return run(q, k, v, attn_mask, scale, pos.ordered)


def triangle(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``(i, j)`` bool: query t sees keys ``0 .. t + j - i`` (token order)."""
    i, j = q.shape[2], k.shape[2]
    return torch.ones(i, j, dtype=torch.bool, device=q.device).tril(j - i)


def run(q, k, v, attn_mask, scale, ordered: bool) -> torch.Tensor:
    """The kernel; in token order (``ordered``), blocks of queries skip the keys
    that none of them sees."""
    i, j = q.shape[2], k.shape[2]
    learned = attn_mask is not None and attn_mask.requires_grad
    if ordered and learned and q.device.type == "cpu":
        return explicit_blocks(q, k, v, attn_mask, scale)
    # on a GPU a mask that needs a gradient (a learned bias, in training) goes to
    # the memory-efficient kernel, which differentiates it: one call beats blocks
    if not ordered or learned:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    if attn_mask is None:
        if i == j:  # the kernel's causal mode is top-left aligned: right when i == j
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        attn_mask = triangle(q, k)
    out = []
    for start in range(0, i, BLOCK):
        stop = min(start + BLOCK, i)
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


def explicit_blocks(q, k, v, attn_mask, scale) -> torch.Tensor:
    """Token order, a mask that needs a gradient, on a CPU: PyTorch's CPU kernels do
    not differentiate a mask, so the kernel would take its math route over every
    ``(i, j)``, with a softmax guarded against rows without a key (which the
    boundary has refused). The same maths here, in blocks of queries, each against
    only the keys it sees (about half of them): ``(b, h, i, e)``."""
    i, j, dtype = q.shape[2], k.shape[2], v.dtype
    work = torch.promote_types(q.dtype, torch.float32)  # half precision: as SDPA
    q, k, v = q.to(work) * scale, k.to(work), v.to(work)  # scale (i, d), not (i, j)
    out = []
    # split, not slices: its backward is one concatenation, not a zero-filled
    # (i, j) gradient per block
    for start, rows in zip(range(0, i, BLOCK), attn_mask.split(BLOCK, dim=-2)):
        stop = start + rows.shape[-2]
        seen = stop + j - i  # the block's last query sees keys 0 .. seen - 1
        # omega = (q * scale) k^T + mask,  alpha = softmax_j(omega),  z = alpha v
        scores = torch.einsum("bhid,bhjd->bhij", q[:, :, start:stop], k[:, :, :seen])
        weights = (scores + rows[..., :seen]).softmax(-1)
        out.append(torch.einsum("bhij,bhje->bhie", weights, v[:, :, :seen]))
    return torch.cat(out, dim=2).to(dtype)  # (b, h, i, e)

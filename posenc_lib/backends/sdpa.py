"""The plain form: PyTorch's ``scaled_dot_product_attention`` with the bias and the
mask as one float mask, the last row of the table, which runs every call of an
encoding whose hooks end at ``score_bias``.

The identity that makes it exact: the kernel computes ``softmax(q k^T * scale +
mask) v``, so ``mask = score_bias`` with ``-inf`` where no attention is the
reference's scores. It costs what the maths costs:

* causal attention in token order builds nothing ``n x n`` without a bias: the
  kernel's own causal mode (or a small triangle for a KV cache);
* with a bias, the queries go in blocks (``blocks.query_blocks``), each against only
  the keys it can see (on a CPU, a bias that needs a gradient too: the same maths,
  explicitly, since its kernels do not differentiate a mask);
* a bias in the encoding's ``reuse`` is built once per forward pass, merged with its
  mask, and shared by every layer.

Proved equal to the reference for every encoding by
``tests/test_registry.py::test_fast_path_equals_slow_path``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .blocks import query_blocks
from .kernel import triangle

NAME, HOOK = "sdpa", None
BLOCK = 256  # queries per kernel call on the causal path with a bias (measured)


def why_not(pe, call) -> str | None:
    """Every call whose hooks end at ``score_bias`` runs here."""
    return None


def attend(q, k, v, pe, pos, ctx, scale) -> torch.Tensor:
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``"""
    return run(q, k, v, float_mask(q, k, pe, pos, ctx), scale, pos.ordered)


def float_mask(q, k, pe, pos, ctx, hook: str = "score_bias") -> torch.Tensor | None:
    """The bias (of ``hook``: ``score_bias`` or a form of it) with -inf where no
    attention ``(b|1, h|1, i, j)``, the bool mask, or None (token order, no bias);
    once per forward pass for a bias in ``pe.reuse``."""
    keep = None if pos.ordered and pos.user_mask is None else pos.mask

    def build():
        bias = pe.call_hook(hook, q, k, pos.q, pos.k, ctx=ctx)
        if bias is None:
            return keep
        seen = keep if keep is not None or not pos.ordered else triangle(q, k)
        bias = bias.to(q.dtype)
        return bias if seen is None else bias.masked_fill(~seen, float("-inf"))

    if "score_bias" in pe.reuse:
        return pos.reuse((pe, "fused mask", hook, q.dtype), build)
    return build()


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
    out = [
        F.scaled_dot_product_attention(
            q[:, :, b.start : b.stop],
            k[:, :, : b.seen],
            v[:, :, : b.seen],
            attn_mask=attn_mask[..., b.start : b.stop, : b.seen],
            scale=scale,
        )  # fmt: skip
        for b in query_blocks(i, j, BLOCK)
    ]
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
    for b, rows in zip(query_blocks(i, j, BLOCK), attn_mask.split(BLOCK, dim=-2)):
        # omega = (q * scale) k^T + mask,  alpha = softmax_j(omega),  z = alpha v
        scores = torch.einsum(
            "bhid,bhjd->bhij", q[:, :, b.start : b.stop], k[:, :, : b.seen]
        )
        weights = (scores + rows[..., : b.seen]).softmax(-1)
        out.append(torch.einsum("bhij,bhje->bhie", weights, v[:, :, : b.seen]))
    return torch.cat(out, dim=2).to(dtype)  # (b, h, i, e)

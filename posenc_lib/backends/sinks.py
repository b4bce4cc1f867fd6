"""The sinks form: attention sinks (``pe.sink_logits``: gpt-oss's), one logit
``s_h`` per head joined to every row's softmax, run as one more key.

The identity that makes it exact: the sink is a key of value 0, first, that every
query sees, whose scaled score is ``s_h``::

    sum_j exp(z_ij) v_j / (exp(s_h) + sum_j exp(z_ij))
        = softmax over (sink, keys) of (s_h, z_i.) applied to (0, v.)

Causal in token order with no other mask (every dtype: the sink logits are the
bias's only values), the sink key goes first into the key-bias form's blocks
(``key_bias.key_bias_blocks``) with the term ``w = (s_h, 0, ..., 0)``: the call of
``i`` queries against ``1 + j`` keys is in token order too, and nothing ``n x n``
is built, forward or backward. Otherwise q and k get one more dimension (``1 /
scale`` for every query, ``s_h`` for the sink key, 0 for the others) and the float
mask one more column, and q, k and v are padded to a width the kernels take
(``aligned``). The kernel differentiates the sinks like any key.

Proved equal to the reference (outputs, gradients, every dtype and device) by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import sdpa
from .kernel import aligned
from .key_bias import key_bias_blocks

NAME, HOOK = "sink_logits", "sink_logits"


def why_not(pe, call) -> str | None:
    """Every call of an encoding with sink logits runs here."""
    return None


def attend(q, k, v, pe, pos, ctx, scale) -> torch.Tensor | None:
    """The call through this form, or None where ``pe.sink_logits`` returns None."""
    sinks = pe.sink_logits()
    if sinks is None:
        return None
    attn_mask = sdpa.float_mask(q, k, pe, pos, ctx)
    if sinks.shape != (q.shape[1],):
        raise ValueError(
            f"q must have {sinks.numel()} heads, one per sink logit of this "
            f"{type(pe).__name__}; got {tuple(q.shape)}"
        )
    return with_sinks(q, k, v, attn_mask, sinks, scale, pos.ordered)


def with_sinks(q, k, v, attn_mask, sinks, scale, ordered: bool) -> torch.Tensor:
    """Attention with the sink logits ``sinks`` ``(h,)``: ``(b, h, i, e)``."""
    b, h, i, d = q.shape
    dtype = q.dtype
    if attn_mask is None and ordered:
        w = F.pad(sinks.double().view(1, h, 1), (0, k.shape[2]))  # (1, h, 1 + j)
        k0 = F.pad(k, (0, 0, 1, 0))  # the sink key first: zeros (b, h, 1 + j, d)
        v0 = F.pad(v, (0, 0, 1, 0))  # and its value
        return key_bias_blocks(q, k0, v0, w, scale)
    one = torch.full((b, h, i, 1), 1.0 / scale, dtype=dtype, device=q.device)
    column = sinks.to(dtype).view(1, h, 1, 1).expand(b, h, 1, 1)  # (b, h, 1, 1)
    sink_key = torch.cat([k.new_zeros(b, h, 1, d), column], dim=-1)  # (b, h, 1, d+1)
    q1 = torch.cat([q, one], dim=-1)  # (b, h, i, d + 1)
    k1 = torch.cat([sink_key, torch.cat([k, k.new_zeros(*k.shape[:3], 1)], -1)], 2)
    v1 = torch.cat([v.new_zeros(b, h, 1, v.shape[-1]), v], dim=2)  # (b, h, 1 + j, e)
    q1, k1, v1 = aligned(q1, k1, v1)  # one width, which the kernels take
    if attn_mask is not None:  # every query sees the sink: 0 (float) or True (bool)
        first = torch.ones_like(attn_mask[..., :1])
        first = first if attn_mask.dtype == torch.bool else first.zero_()
        attn_mask = torch.cat([first.expand(*attn_mask.shape[:-1], 1), attn_mask], -1)
    out = sdpa.run(q1, k1, v1, attn_mask, scale, ordered)  # i queries, 1 + j keys
    return out[..., : v.shape[-1]]  # (b, h, i, e)

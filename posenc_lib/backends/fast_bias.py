"""The fast-bias form: ``score_bias``'s values computed by a faster algorithm of the
encoding's own (``pe.fast_score_bias``: PaTH's chunks in compact WY form, T5's table
per offset), handed to the kernel as the plain form hands ``score_bias``. The
encoding's ``score_bias`` stays the formula on the page (PaTH's loop over diagonals,
T5's bucket of every pair), which the reference runs.

The identity that makes it exact is the encoding's own (its module states it)::

    fast_score_bias(q, k, q_pos, k_pos) = score_bias(q, k, q_pos, k_pos)

so the kernel's ``softmax(q k^T * scale + mask) v`` is the reference's, as in
``sdpa``. A bias in ``pe.reuse`` (T5's) is built once per forward pass.

Proved equal to the reference (the bias, outputs and gradients, float64: PaTH,
PaTH-FoX, T5 bidirectional and causal) by
``tests/test_fast_forms.py::test_fast_score_bias_equals_the_formula_forward_and_backward``,
and in every dtype and on each device by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from __future__ import annotations

import torch

from . import sdpa

NAME, HOOK = "fast_score_bias", "fast_score_bias"


def why_not(pe, call) -> str | None:
    """Every call whose hooks end at ``score_bias`` runs here."""
    return None


def attend(q, k, v, pe, pos, ctx, scale) -> torch.Tensor | None:
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``,
    or None when the hook returns None for the call (the plain form then runs it)."""
    mask = sdpa.float_mask(q, k, pe, pos, ctx, HOOK)  # the bias, -inf where unseen
    if mask is None or mask.dtype == torch.bool:  # no bias from the hook
        return None
    return sdpa.run(q, k, v, mask, scale, pos.ordered)

"""The fused backend (``path="fused"``): PyTorch's ``scaled_dot_product_attention``,
in the form that the table of fast forms (``forms.FORMS``) chooses for the call.

The forms, each a module of this package that states its identity and names the test
that proves it equal to the reference:

* ``own``: the encoding's own algorithm (``causal_attention``: stick-breaking, CoPE);
* ``key_bias``: a bias of the key alone (FoX, ALiBi), one more dimension of q and k;
* ``band_bias``: a bias of the distance, constant beyond a band (T5), as a band mask;
* ``sinks``: attention sinks (``sink_logits``), one more key;
* ``fast_bias``: ``score_bias`` by the encoding's faster algorithm
  (``fast_score_bias``: PaTH's chunks, T5's table per offset), as a float mask;
* ``sdpa``: the bias and the mask as one float mask, in blocks of queries.

Values transformed by their key's position and outputs by their query's
(``transform_v``, ``transform_out``: DeepSeek-V4's rotated values) need nothing
here: both act per token, so ``sum_j a_ij (T_j v_j)`` is the kernel's output for the
values ``T_j v_j``, and ``U_i`` is applied to it. ``posenc_lib.attention`` calls them
around every backend (``tests/test_registry.py`` holds outputs and gradients equal to
the reference).
"""

from __future__ import annotations

from ..base import Context, PositionalEncoding, overrides
from ..positions import Positions
from .forms import Call, choose


def refuses(pe: PositionalEncoding, return_weights: bool, pos=None) -> str | None:
    """Why this backend cannot run ``pe`` (on the call of ``pos``), or None."""
    if return_weights:
        return "path='fused' cannot be used with return_weights"
    if choose(pe, Call.of(pos, None))[0]:
        return None
    own = overrides(pe, "causal_attention")
    return (
        f"path='fused' cannot be used with {type(pe).__name__}, which overrides a "
        "hook past score_bias"
        + (
            " (its causal_attention serves causal calls in token order over a "
            "run of positions, with no other mask)"
            if own
            else ""
        )
    )


def attend(q, k, v, pe: PositionalEncoding, pos: Positions, ctx: Context, scale):
    """q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` -> ``(b, h, i, e)``:
    the first form of the table that takes the call (and whose hook, where it has
    one, returns a tensor for it)."""
    for row in choose(pe, Call.of(pos, q.dtype))[0]:
        out = row.form.attend(q, k, v, pe, pos, ctx, scale)
        if out is not None:
            return out
    raise RuntimeError(
        f"{type(pe).__name__}.causal_attention returned None for a causal call in "
        "token order, which it serves"
    )

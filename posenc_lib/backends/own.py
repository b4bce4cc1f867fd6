"""The encoding's own algorithm: ``pe.causal_attention`` (stick-breaking's, CoPE's,
Wall's), the whole attention of a causal call in token order over a run of positions
with no other mask, for an encoding whose hooks go past ``score_bias`` (so that the
kernel cannot run them).

The identity that makes it exact is the encoding's own (its module says it; the
blocks of queries are recomputed in the backward pass, memory ``O(n * block)``).

Proved equal to the reference (outputs, gradients, every dtype and device) by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from __future__ import annotations

NAME, HOOK = "causal_attention", "causal_attention"


def why_not(pe, call) -> str | None:
    """Why the encoding's own algorithm does not run ``call``, or None."""
    if not pe.needs_score_path:
        return "its hooks end at score_bias, which the kernel runs"
    return None


def attend(q, k, v, pe, pos, ctx, scale):
    """The call through the encoding's own algorithm."""
    return pe.call_hook("causal_attention", q, k, v, scale, ctx=ctx)

"""The table of fast forms: which one runs a call of the fused backend, and why each
other does not.

Each row is a module of this package that restates the reference attention, exactly,
for some calls (its docstring states the identity and names the test that proves
it): ``NAME`` (what runs, as ``explain_path`` says it), ``HOOK`` (the encoding's
method that states the form; None for the plain kernel), ``why_not(pe, call)`` (its
own condition) and ``attend(q, k, v, pe, pos, ctx, scale)`` (the call, or None when
the hook returns None for it: the next row runs it). ``Row`` adds the conditions the
rows share (``ORDERED``: causal in token order over a run, with no other mask;
``KERNEL``: hooks that end at ``score_bias``). The first row that takes a call runs
it. Adding a form: one module, one row here, one entry in ``base.FAST_FORMS`` (the
encoding's hook, the registry contract checks it).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..base import overrides
from ..utils import compiling
from . import band_bias, fast_bias, key_bias, own, sdpa, sinks


class Row(NamedTuple):
    form: object  # the module
    ordered: bool  # only causal calls in token order over a run, no other mask
    kernel: bool  # only encodings whose hooks end at score_bias


FORMS: tuple[Row, ...] = (
    Row(own, ordered=True, kernel=False),
    Row(key_bias, ordered=True, kernel=True),
    Row(band_bias, ordered=True, kernel=True),
    Row(sinks, ordered=False, kernel=True),
    Row(fast_bias, ordered=False, kernel=True),
    Row(sdpa, ordered=False, kernel=True),
)
NAMES = tuple(row.form.NAME for row in FORMS)


class Call(NamedTuple):
    """What the rows' conditions read of a call."""

    ordered: bool  # causal in token order over a run, no other mask
    dtype: torch.dtype
    compiling: bool

    @classmethod
    def of(cls, pos, dtype: torch.dtype) -> "Call":
        ordered = pos is not None and pos.ordered and pos.user_mask is None
        return cls(ordered, dtype, compiling())


def why_not(row: Row, pe, call: Call) -> str | None:
    """Why ``row`` does not run ``call`` of ``pe``, or None."""
    name, hook = type(pe).__name__, row.form.HOOK
    if hook is not None and not overrides(pe, hook):
        return f"{name} defines no {hook}"
    if row.kernel and pe.needs_score_path:
        return f"{name} overrides a hook past score_bias, which the kernel does not run"
    if row.ordered and not call.ordered:
        return "the call is not causal in token order over a run with no other mask"
    return row.form.why_not(pe, call)


def choose(pe, call: Call) -> tuple[list[Row], dict[str, str]]:
    """The rows that may run ``call``, in order, and why each other does not."""
    taken, reasons = [], {}
    for row in FORMS:
        why = why_not(row, pe, call)
        if why is None:
            taken.append(row)
        else:
            reasons[row.form.NAME] = why
    return taken, reasons

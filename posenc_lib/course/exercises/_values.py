"""Small tools for checks whose answer is a number, a tuple of numbers or a set of
integers.

Kept private (a leading underscore: ``posenc_lib.exercises`` does not load it as a
chapter) and hand-written because the contract's ``expect_close`` compares one
value; these name which entry of a tuple is wrong and reject booleans and strings
with a message that says what was expected.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from posenc_lib.course.exercises import Wrong


def as_float(got: Any, desc: str) -> float:
    """``float(got)`` (a number, a one-element tensor or array), or Wrong: "on
    {desc}, expected a number, got list"."""
    try:
        return float(got)
    except (TypeError, ValueError):
        raise Wrong(f"on {desc}, expected a number, got {type(got).__name__}") from None


def number(value: Any, name: str) -> float:
    """``value`` as a float, or Wrong naming ``name`` and what it got."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, np.generic) and not isinstance(value, np.bool_):
                return float(value)
        except ImportError:  # pragma: no cover
            pass
        raise Wrong(
            f"`{name}` should be a number, got {type(value).__name__} ({value!r:.60})"
        )
    if not math.isfinite(float(value)):
        raise Wrong(f"`{name}` is {value}, not a finite number")
    return float(value)


def numbers(answer: Any, names: Sequence[str] | int, what: str) -> Sequence[float]:
    """Unpack ``answer``, a tuple of ``len(names)`` numbers, naming each entry (or of
    ``names`` numbers, when it is a count, naming them by their index)."""
    if isinstance(names, int):
        if isinstance(answer, torch.Tensor):
            answer = answer.tolist()
        if not isinstance(answer, (tuple, list)) or len(answer) != names:
            got = f"{type(answer).__name__}" + (
                f" of length {len(answer)}" if isinstance(answer, (tuple, list)) else ""
            )
            raise Wrong(f"{what} should be a tuple of {names} numbers, got a {got}")
        return tuple(number(v, f"entry {k} of {what}") for k, v in enumerate(answer))
    if len(names) == 1 and not isinstance(answer, (tuple, list)):
        return [number(answer, names[0])]
    if not isinstance(answer, (tuple, list)) or len(answer) != len(names):
        shape = ", ".join(names)
        got = (
            f"{len(answer)} entries"
            if isinstance(answer, (tuple, list))
            else type(answer).__name__
        )
        raise Wrong(f"`{what}` should be a tuple ({shape}), got {got}")
    return [number(v, n) for v, n in zip(answer, names)]


def close(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-9) -> bool:
    """``a`` equals ``b`` to a relative ``rel`` (answers may be rounded a little)."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def integers(value: Any, what: str) -> list[int]:
    """A collection of integers (list, tuple, set, 1-D tensor) as a sorted list."""
    if isinstance(value, torch.Tensor):
        value = value.flatten().tolist()
    if isinstance(value, range):
        value = list(value)
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise Wrong(
            f"{what} should be a list (or set) of integers, got {type(value).__name__}"
        )
    out = []
    for v in value:
        f = number(v, f"an entry of {what}")
        if f != int(f):
            raise Wrong(f"{what} should hold integers, it holds {v}")
        out.append(int(f))
    return sorted(set(out))

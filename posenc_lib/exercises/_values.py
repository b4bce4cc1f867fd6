"""Private tools for checks whose answer is a value (a number, a tuple, a set), shared
by the checks of Parts 0 to 2; not a chapter (the loader skips names starting with _).

Written by hand because :func:`posenc_lib.exercises.expect_close` compares tensors,
while these answers are small Python values whose type is part of what is checked.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posenc_lib.exercises import Wrong


def number(value: Any, what: str) -> float:
    """``value`` as a float, or a verdict saying it is not a number."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, np.number):
                return float(value)
        except ImportError:  # pragma: no cover
            pass
        raise Wrong(f"{what} should be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise Wrong(f"{what} is {value}, not a finite number")
    return float(value)


def numbers(value: Any, n: int, what: str) -> tuple[float, ...]:
    """``value`` as a tuple of ``n`` floats, or a verdict saying what it is instead."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if not isinstance(value, (tuple, list)) or len(value) != n:
        got = f"{type(value).__name__}" + (
            f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
        )
        raise Wrong(f"{what} should be a tuple of {n} numbers, got a {got}")
    return tuple(number(v, f"entry {k} of {what}") for k, v in enumerate(value))


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

"""``explain_path``: which implementation runs a call, and why each other does not.

It reads the same rules the dispatch runs (``attention._attend``: ``refuses`` of
each backend; ``forms.choose`` for the fused backend's forms), so what it says is
what runs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..positions import Positions, prepare
from . import flex, fused
from .forms import Call, choose

# attention's path=: the names say what runs; "slow" and "fast", the names of the
# previous release, are kept as aliases of "reference" and "fused" for this one
PATHS = ("auto", "reference", "fused", "flex", "slow", "fast")
SAME_PATH = {"slow": "reference", "fast": "fused"}


class PathChoice(NamedTuple):
    """``path``: "reference", "fused" (the fused backend) or "flex";
    ``form``: what runs ("reference", "flex", or the fused backend's first form that
    takes the call, which runs it when its hook returns a tensor for it);
    ``not_taken``: for every other path and form, why not."""

    path: str
    form: str
    not_taken: dict[str, str]

    def __str__(self) -> str:
        lines = [f"runs: path={self.path!r}, form {self.form!r}"]
        lines += [f"  not {name}: {why}" for name, why in self.not_taken.items()]
        return "\n".join(lines)


def explain_path(
    model,
    positions: Positions | None = None,
    *,
    n: int = 8,
    causal: bool = True,
    mask: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    path: str = "auto",
    return_weights: bool = False,
) -> PathChoice:
    """What ``attention`` runs for a call of ``model`` (an encoding, a
    ``MultiHeadAttention`` or a ``TinyTransformer``: its ``pe``), on ``positions``
    (from ``pl.prepare``) or on ``n`` tokens at ``0 .. n - 1`` (``causal``, ``mask``;
    on the model's device), with q, k, v of ``dtype``, on ``path``, and why no other
    path or form runs it."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    path = SAME_PATH.get(path, path)
    pe = getattr(model, "pe", model)
    if positions is None:  # on the model's device
        held = [*model.parameters(), *model.buffers()]
        device = held[0].device if held else None
        inputs = pe.example_inputs(1, n) or None
        positions = prepare(pe, 1, 1, n, n, None, None, causal, mask, inputs, device)
    not_taken: dict[str, str] = {}
    for name, backend in (("fused", fused), ("flex", flex)):
        why = backend.refuses(pe, return_weights, positions)
        if why is not None:
            not_taken[name] = why
    if path == "auto":
        path = "reference" if "fused" in not_taken else "fused"
        not_taken.setdefault("flex", "path='auto' never chooses it: pass path='flex'")
    if path == "reference":
        not_taken.setdefault("fused", "path='reference' asks for the reference")
        return PathChoice("reference", "reference", not_taken)
    if path in not_taken:
        raise ValueError(not_taken[path])
    not_taken["reference"] = f"path={path!r} runs a backend, not the reference"
    if path == "flex":
        not_taken.setdefault("fused", "path='flex' asks for FlexAttention")
        return PathChoice("flex", "flex", not_taken)
    rows, reasons = choose(pe, Call.of(positions, dtype))
    first = rows[0].form.NAME
    later = {
        row.form.NAME: f"runs where {first}'s hook returns None" for row in rows[1:]
    }
    return PathChoice("fused", first, {**not_taken, **reasons, **later})

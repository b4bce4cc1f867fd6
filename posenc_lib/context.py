"""What one attention call knows beyond the hooks' positional arguments: the
``Context`` a hook receives when it declares ``ctx`` (``posenc_lib.base``)."""

from __future__ import annotations

from typing import Mapping

import torch


class Context:
    """What one attention call knows beyond the hooks' positional arguments; any
    field may be ``None`` where the caller does not have it.

    ``x`` ``(b, i, D)`` the layer input; ``q`` ``(b, h, i, d)`` and ``k``
    ``(b, h, j, d)`` after ``transform_qk``; ``v`` ``(b, h, j, e)`` after
    ``transform_v``; ``mask``
    ``(b|1, 1|h, i, j)`` bool, True = may attend (``None``: every key visible);
    ``causal``; ``inputs``, the named side inputs; ``positions``, the forward pass's
    ``Positions`` (shared by every layer).
    """

    __slots__ = ("x", "q", "k", "v", "causal", "inputs", "positions", "_mask")

    def __init__(self, x=None, q=None, k=None, v=None, mask=None, causal=False,
                 inputs: Mapping | None = None, positions=None):  # fmt: skip
        self.x, self.q, self.k, self.v, self._mask = x, q, k, v, mask
        self.causal, self.inputs = causal, dict(inputs or {})
        self.positions = positions

    @property
    def mask(self) -> torch.Tensor | None:
        if self._mask is None and self.positions is not None:
            return self.positions.mask  # built on first use, once per forward
        return self._mask

    def replace(self, **fields) -> "Context":
        """A copy with ``fields`` changed (``q``, ``k``, ``v`` after the transforms)."""
        names = ("x", "q", "k", "v", "causal", "inputs", "positions")
        kept = {name: getattr(self, name) for name in names}
        return Context(mask=self._mask, **{**kept, **fields})

    def need(self, name: str, who: str) -> torch.Tensor:
        """The field ``name``, or a ``ValueError`` saying that ``who`` needs it."""
        value = getattr(self, name)
        if value is None:
            how = {"x": "pass x= to attention(), or call it through MultiHeadAttention"}
            raise ValueError(
                f"{who} reads ctx.{name}, which this call did not provide"
                + (f": {how[name]}" if name in how else "")
            )
        return value

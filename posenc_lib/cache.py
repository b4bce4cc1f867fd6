"""A KV cache for ``MultiHeadAttention`` and ``TinyTransformer``: decode token by token
with any registered causal encoding, and get what a full forward pass gives.

One ``KVCache`` per attention layer keeps, for every token seen so far:

* its key and value ``(b, h, j, d)`` **as projected**, before ``transform_qk`` and
  ``transform_v``: the encoding transforms them again at every step (a rotated
  value, DeepSeek-V4's, is rotated by its own position whatever the step, and the
  step's output by the new queries' positions). That costs one rotation per cached
  key and step for RoPE (Hugging Face caches rotated keys instead, see the Part VII
  chapter *RoPE in your own code* and ``posenc_lib.decoding``), and it is exact for
  every encoding, including those whose transform depends on the whole call (dynamic
  NTK scaling changes its frequencies with the length; xPos scales from the centre of
  the call's positions);
* its position ``(1|b, j)``;
* its layer input ``x`` ``(b, j, D)``: data-dependent encodings read the keys' inputs
  through ``ctx.x`` (FoX's forget gates, the log gates of every token between a query
  and a key).

The cache is storage: it checks nothing and calls nothing. The layer (or the model,
for all its layers at once) prepares the call's positions, joins the cached tokens
with the new ones (``joined``, which changes nothing), attends, and only then
``store``s them, so a call that is refused leaves the cache as it was. A cache
belongs to one layer (``claim``): the keys of one layer are wrong for any other.
``tests/test_cache.py`` checks every registered causal encoding against a full
forward pass.
"""

from __future__ import annotations

import weakref

import torch

__all__ = ["KVCache"]


class KVCache:
    """Keys, values, positions and layer inputs of the tokens one attention layer has
    seen. Empty at first; ``MultiHeadAttention(x, causal=True, cache=c)`` (or a
    ``TinyTransformer`` given ``model.new_cache()``) fills it once a call has passed."""

    def __init__(self):
        self.k = self.v = self.pos = self.x = None
        self._owner = None  # a weak reference to the layer it belongs to

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def claim(self, layer: object) -> None:
        """Bind the cache to ``layer`` (its first user), or refuse another layer, and
        a layer that no longer exists (a model built again: its keys are another
        model's)."""
        if self._owner is None:
            self._owner = weakref.ref(layer)
            return
        owner = self._owner()
        if owner is None:
            raise ValueError(
                "this KVCache was made for an attention layer that no longer exists "
                "(was the model built again?): it holds that layer's keys, wrong for "
                "any other; start from the new model's model.new_cache()"
            )
        if owner is not layer:
            raise ValueError(
                "this KVCache belongs to another attention layer (it holds that "
                "layer's keys and values): give each layer its own KVCache, e.g. "
                "model.new_cache() for a TinyTransformer"
            )

    def next_positions(self, n: int, device) -> torch.Tensor:
        """``(1|b, n)``: the positions after the cached ones (0.. when empty)."""
        start = 0 if self.pos is None else self.pos[:, -1:] + 1  # (1|b, 1)
        return start + torch.arange(n, device=device)[None]  # (1|b, n)

    def joined_positions(self, pos: torch.Tensor) -> torch.Tensor:
        """Every cached position followed by ``pos`` ``(1|b, n[, a])``."""
        if self.pos is None:
            return pos
        rows = max(self.pos.shape[0], pos.shape[0])
        tail = [-1] * (pos.dim() - 1)
        return torch.cat([self.pos.expand(rows, *tail), pos.expand(rows, *tail)], 1)

    def joined(self, k, v, x):
        """Everything cached followed by ``k``, ``v`` ``(b, h, n, d)`` and ``x``
        ``(b, n, D)``; the cache itself is not changed."""
        if self.k is None:
            return k, v, x
        if k.dtype != self.k.dtype or k.device != self.k.device:
            raise TypeError(
                f"this KVCache holds {self.k.dtype} keys and values on "
                f"{self.k.device}, but the layer now computes in {k.dtype} on "
                f"{k.device} (was the model cast or moved, or autocast switched, after "
                "the cache was filled?): start again from model.new_cache(), or cast "
                "the model back"
            )
        if k.shape[:2] != self.k.shape[:2] or x.shape[-1] != self.x.shape[-1]:
            raise ValueError(
                f"this cache holds batch and heads {tuple(self.k.shape[:2])} and width "
                f"{self.x.shape[-1]}; got k {tuple(k.shape)}, x {tuple(x.shape)}: use "
                "one cache per layer and sequence batch"
            )
        k = torch.cat([self.k, k], dim=2)  # (b, h, j, d)
        v = torch.cat([self.v, v], dim=2)
        return k, v, torch.cat([self.x, x], dim=1)  # (b, j, D)

    def state(self) -> tuple:
        """What the cache holds, for ``restore``: a model rolls every block's cache
        back when a later block refuses a step."""
        return self.k, self.v, self.pos, self.x

    def restore(self, state: tuple) -> None:
        self.k, self.v, self.pos, self.x = state

    def store(self, k, v, pos, x) -> None:
        """Keep every token's ``k``, ``v`` ``(b, h, j, d)``, ``pos`` ``(1|b, j)`` and
        ``x`` ``(b, j, D)``: what ``joined`` returned, after the call passed."""
        self.k, self.v, self.pos, self.x = k, v, pos, x

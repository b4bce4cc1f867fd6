"""A KV cache for ``MultiHeadAttention`` and ``TinyTransformer``: decode token by token
with any registered causal encoding, and get what a full forward pass gives.

One ``KVCache`` per attention layer keeps, for every token seen so far:

* its key and value ``(b, h, j, d)`` **as projected**, before ``transform_qk``: the
  encoding transforms them again at every step. That costs one rotation per cached
  key and step for RoPE (Hugging Face caches rotated keys instead, see the Part VII
  chapter *RoPE in your own code* and ``posenc_lib.decoding``), and it is exact for
  every encoding, including those whose transform depends on the whole call (dynamic
  NTK scaling changes its frequencies with the length; xPos scales from the centre of
  the call's positions);
* its position ``(1|b, j)``;
* its layer input ``x`` ``(b, j, D)``: data-dependent encodings read the keys' inputs
  through ``ctx.x`` (FoX's forget gates, the log gates of every token between a query
  and a key).

A cached call hands the hooks the new queries (the last ``i`` of the ``j`` keys) and
every key, causal, as ``pl.attention`` does for a KV cache by default. Encodings that
cannot serve such a call (they need every query of the sequence at once) refuse it with
their own error, as they do in ``attention``; ``tests/test_cache.py`` checks both, for
every registered causal encoding.
"""

from __future__ import annotations

import torch

__all__ = ["KVCache"]


class KVCache:
    """Keys, values, positions and layer inputs of the tokens one attention layer has
    seen. Empty at first; ``MultiHeadAttention(x, causal=True, cache=c)`` extends it in
    place (only once the call's inputs passed their checks)."""

    def __init__(self):
        self.k = self.v = self.pos = self.x = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def next_positions(self, n: int, device) -> torch.Tensor:
        """``(1, n)``: the positions after the cached ones (0.. when empty)."""
        start = 0 if self.pos is None else self.pos[:, -1:] + 1  # (1|b, 1)
        return start + torch.arange(n, device=device)[None]  # (1|b, n)

    def joined(self, k, v, pos, x):
        """Everything cached followed by ``k``, ``v`` ``(b, h, n, d)``, ``pos``
        ``(1|b, n)``, ``x`` ``(b, n, D)`` (the cache itself is not changed)."""
        if self.k is not None:
            if k.shape[:2] != self.k.shape[:2] or x.shape[-1] != self.x.shape[-1]:
                raise ValueError(
                    f"this cache holds batch and heads {tuple(self.k.shape[:2])} and "
                    f"width {self.x.shape[-1]}; got k {tuple(k.shape)}, "
                    f"x {tuple(x.shape)}: use one cache per layer and sequence batch"
                )
            k = torch.cat([self.k, k], dim=2)  # (b, h, j, d)
            v = torch.cat([self.v, v], dim=2)
            rows = max(self.pos.shape[0], pos.shape[0])  # (1|b, j[, a]) positions
            tail = [-1] * (pos.dim() - 1)
            pos = torch.cat([self.pos.expand(rows, *tail), pos.expand(rows, *tail)], 1)
            x = torch.cat([self.x, x], dim=1)  # (b, j, D)
        return k, v, pos, x

    def extend(self, pe, q, k, v, x, pos, mask):
        """One cached call of a layer: cache the new tokens' ``k``, ``v``, ``x`` (at
        ``pos``, or after the cached positions) and return every key's ``k``, ``v``,
        ``x`` with the call's ``Positions`` (new queries, every key, causal)."""
        from .attention import prepare, scale_of
        from .utils import check_qkv

        b, h, n, _ = q.shape
        pos = self.next_positions(n, q.device) if pos is None else pos
        pos = torch.as_tensor(pos, device=q.device)
        if pos.dim() == (1 if pe.coord_axes is None else 2):
            pos = pos[None]  # (1, n[, a])
        k, v, k_pos, x = self.joined(k, v, pos, x)  # every key, new ones last
        positions = prepare(
            pe, b, h, n, k.shape[2], pos, k_pos, True, mask, None, q.device
        )
        check_qkv(q, k, v, scale_of(pe, q))
        self.k, self.v, self.pos, self.x = k, v, positions.k, x  # checked: kept
        return k, v, x, positions

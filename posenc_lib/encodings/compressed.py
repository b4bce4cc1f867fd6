"""DeepSeek-V4's compressed keys: softmax-pooled blocks of m tokens, placed at one
position of their block, visible once the block is closed.

Read in Hugging Face transformers 5.24, ``models/deepseek_v4/modeling_deepseek_v4.py``
(``tests/golden/make_compressed_golden.py`` records golden values from it):

* **Pooling** (``DeepseekV4HCACompressor.forward``): block w of tokens ``wm .. wm +
  m - 1`` becomes one entry, a softmax over the m slots, channel by channel, of the
  gates plus a learned bias for the place in the block (``position_bias``, (m, d)),
  then an RMS norm::

      C_w = norm( sum_s softmax_s(Z_{wm+s} + B_s) * K_{wm+s} )      (per channel)

  ``K = x W^KV`` and ``Z = x W^Z`` are projections of the layer input. The tokens
  after the last whole block wait (an open block has no entry yet).
* **Placement**: the entry is rotated (RoPE) at the position of its block's FIRST
  token, ``positions * compress_rate + first_window_position``. ``block_positions``
  places it at the first, middle or last token.
* **Visibility** (``causal_threshold = (position_ids + 1) // compress_rate``): query t
  sees entry w when ``w < (t + 1) // m``, i.e. when the block's last token, ``wm + m
  - 1``, is at most t: the block is closed. ``block_visible`` states it with the
  positions of the blocks' last tokens. A plain causal rule on the placed position
  (``p_w <= p_t``) would let a query inside a block read the block's later tokens
  when the entry sits at the first position.
* **Their own rotation**: layers with a compressor rotate queries, keys and entries
  with ``compress_rope_theta`` (160000) and YaRN with ``attention_factor`` forced to
  1 (``configuration_deepseek_v4.py``, ``__post_init__``): ``compress_inv_freq``.

``CompressedAttention`` is one such layer at the course's scale: a query against a
window of the last ``window`` tokens and every closed block, with explicit key
positions (``pl.attention(q, k, v, pe, q_pos, k_pos, mask=...)``) and
``SinkValueRotary`` (rotated values, the output rotated back, learned sinks). It is V4's
heavily compressed attention (HCA); the sparse kind (CSA: m = 4, overlapping
windows, an indexer's top-k entries) is not built here.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import attention
from ..utils import check_head_split, check_integer, check_positive_int
from .rope_scaling import rope_inv_freq
from .rotated_values import SinkValueRotary, ValueRotary

__all__ = [
    "DEEPSEEK_V4_DEFAULTS",
    "PLACES",
    "block_positions",
    "block_visible",
    "pool_blocks",
    "compress_inv_freq",
    "Compressor",
    "CompressedAttention",
]

PLACES = ("first", "middle", "last")  # where an entry sits in its block

# DeepseekV4Config's defaults in transformers 5.24 (configuration_deepseek_v4.py; the
# golden test holds them to the class): the window of every layer, the block sizes
# of the sparse (CSA) and heavily compressed (HCA) layers, one shared key-value head
# of head_dim with RoPE on its last rope_dim coordinates, and the two rotary bases
DEEPSEEK_V4_DEFAULTS = {
    "window": 128,  # sliding_window
    "m_csa": 4,  # compress_rates["compressed_sparse_attention"]
    "m_hca": 128,  # compress_rates["heavily_compressed_attention"]
    "index_topk": 512,  # entries a CSA query keeps
    "n_heads": 64,  # num_attention_heads
    "n_kv_heads": 1,  # num_key_value_heads
    "head_dim": 512,
    "rope_dim": 64,  # qk_rope_head_dim = head_dim * partial_rotary_factor
    "rope_theta": 10000.0,  # the sliding layers' rotary ("main")
    "compress_rope_theta": 160000.0,  # the compressed layers' rotary ("compress")
    "max_position_embeddings": 1048576,
}


def _check_place(place: str, m: int) -> int:
    """The token of a block of m where an entry of ``place`` sits: 0, m // 2, m - 1."""
    if place not in PLACES:
        raise ValueError(f"place must be one of {PLACES}, got {place!r}")
    return {"first": 0, "middle": m // 2, "last": m - 1}[place]


def _check_pos(pos: torch.Tensor, name: str = "pos") -> torch.Tensor:
    if not isinstance(pos, torch.Tensor):
        raise TypeError(f"{name} must be an integer tensor, got {type(pos).__name__}")
    pos = check_integer(pos, name)
    if pos.dim() == 1:
        pos = pos[None]
    if pos.dim() != 2:
        raise ValueError(f"{name} must be (n,) or (1|b, n), got {tuple(pos.shape)}")
    return pos


def block_positions(pos: torch.Tensor, m: int, place: str = "first") -> torch.Tensor:
    """Token positions ``(n,)`` or ``(1|b, n)`` -> the positions ``(1|b, n // m)`` of
    the entries of the whole blocks of m consecutive tokens: the position of each
    block's first token (DeepSeek-V4), middle token (``m // 2``) or last token."""
    pos = _check_pos(pos)
    m = check_positive_int(m, "m")
    slot = _check_place(place, m)
    n_blocks = pos.shape[1] // m
    # p_w = pos[w m + slot]
    return pos[:, slot : n_blocks * m : m]  # (1|b, w)


def block_visible(q_pos: torch.Tensor, last_pos: torch.Tensor) -> torch.Tensor:
    """Query positions ``(1|b, i)`` and the positions of the blocks' LAST tokens
    ``(1|b, w)`` -> bool ``(1|b, 1, i, w)``: query i sees block w once the block is
    closed, ``last_w <= p_i`` (V4's ``w < (t + 1) // m`` for positions 0, 1, ...)."""
    q_pos, last_pos = _check_pos(q_pos, "q_pos"), _check_pos(last_pos, "last_pos")
    return last_pos[:, None, None, :] <= q_pos[:, None, :, None]  # (b, 1, i, w)


def pool_blocks(
    kv: torch.Tensor,
    gate: torch.Tensor,
    m: int,
    position_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax-pool each whole block of m tokens, channel by channel: ``kv``, ``gate``
    ``(b, n, d)`` and ``position_bias`` ``(m, d)`` (or None) -> ``(b, n // m, d)``::

        C_w = sum_s softmax_s(Z_{wm+s} + B_s) * K_{wm+s}

    The softmax runs in float32, as V4's does. Tokens after the last whole block are
    left out (their block is still open)."""
    for name, t in (("kv", kv), ("gate", gate)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() != 3:
            raise ValueError(
                f"{name} must be a floating-point (b, n, d) tensor, got "
                f"{getattr(t, 'dtype', type(t).__name__)} "
                f"{tuple(getattr(t, 'shape', ()))}"
            )
    if kv.shape != gate.shape:
        raise ValueError(
            f"kv and gate must have one shape, got {tuple(kv.shape)}, "
            f"{tuple(gate.shape)}"
        )
    m = check_positive_int(m, "m")
    b, n, d = kv.shape
    if position_bias is not None and position_bias.shape != (m, d):
        raise ValueError(
            f"position_bias must be (m, d) = ({m}, {d}), one bias per place in the "
            f"block and channel, got {tuple(position_bias.shape)}"
        )
    w = n // m
    blocks = kv[:, : w * m].reshape(b, w, m, d)  # (b, w, m, d)
    logits = gate[:, : w * m].reshape(b, w, m, d)
    if position_bias is not None:
        logits = logits + position_bias  # Z + B, B broadcast over blocks
    weights = logits.softmax(dim=2, dtype=torch.float32).to(kv.dtype)  # over slots
    return (blocks * weights).sum(dim=2)  # (b, w, d)


def compress_inv_freq(
    rotary_dim: int,
    theta: float = 160000.0,
    factor: float | None = None,
    original_max_position_embeddings: int | None = None,
    **params,
) -> tuple[torch.Tensor, float]:
    """``(inv_freq (rotary_dim / 2,), 1.0)``: the rotation of V4's compressed layers,
    base ``compress_rope_theta`` (160000), with YaRN when ``factor`` is given and its
    attention factor set to 1 (``__post_init__`` of ``DeepseekV4Config``)."""
    if factor is None:
        return rope_inv_freq(rotary_dim, theta)
    return rope_inv_freq(
        rotary_dim, theta, "yarn", factor=factor, attention_factor=1.0,
        original_max_position_embeddings=original_max_position_embeddings, **params,
    )  # fmt: skip


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # x / sqrt(mean(x^2) + eps) * weight, in float32 (V4's kv_norm)
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * normed).to(x.dtype)


class Compressor(nn.Module):
    """V4's compressor (``DeepseekV4HCACompressor``) without its rotation: ``x``
    ``(b, n, D)`` -> entries ``(b, n // m, d)``, normed, with their positions; the
    attention rotates them at those positions (``ValueRotary``).

    ``position_bias`` ``(m, d)`` starts at zero, as V4's ``_init_weights`` sets it."""

    def __init__(self, d_model: int, d_head: int, m: int, eps: float = 1e-6):
        super().__init__()
        self.m = check_positive_int(m, "m")
        check_positive_int(d_model, "d_model")
        check_positive_int(d_head, "d_head")
        self.kv_proj = nn.Linear(d_model, d_head, bias=False)  # K = x W^KV
        self.gate_proj = nn.Linear(d_model, d_head, bias=False)  # Z = x W^Z
        self.position_bias = nn.Parameter(torch.zeros(m, d_head))  # (m, d)
        self.norm_weight = nn.Parameter(torch.ones(d_head))  # (d,)
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, place: str = "first"):
        """x ``(b, n, D)``, pos ``(n,)`` or ``(1|b, n)`` -> ``(entries (b, w, d),
        positions (1|b, w), last (1|b, w))``: each entry, where it is placed, and
        the position of its block's last token (for ``block_visible``)."""
        pooled = pool_blocks(self.kv_proj(x), self.gate_proj(x), self.m,
                             self.position_bias)  # fmt: skip
        entries = _rms_norm(pooled, self.norm_weight, self.eps)  # (b, w, d)
        where = block_positions(pos, self.m, place)  # (1|b, w)
        return entries, where, block_positions(pos, self.m, "last")

    def extra_repr(self) -> str:
        return f"m={self.m}"


class CompressedAttention(nn.Module):
    """One attention layer of V4's heavily compressed kind, at the course's scale:
    ``n_heads`` query heads against one shared key-and-value head (K = V), over the
    last ``window`` tokens and every closed block of ``m`` tokens, whose entry sits
    at its block's ``place`` ("first" in V4). ``pe``: a ``ValueRotary`` (by default
    V4's form, a ``SinkValueRotary``: interleaved pairs, the last ``rotary_dim``
    coordinates, learned sinks).

    ``forward(x, pos)``: x ``(b, n, D)`` -> ``(b, n, D)``. The keys are the n tokens
    then the blocks, with their positions; ``block_mask`` says which blocks a query
    sees (override it to try another rule)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        window: int,
        m: int,
        d_head: int | None = None,
        place: str = "first",
        pe: ValueRotary | None = None,
        rotary_dim: int | None = None,
    ):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if d_head is None:
            d_head = check_head_split(d_model, n_heads)
        self.d_head = check_positive_int(d_head, "d_head")
        self.window = check_positive_int(window, "window")
        self.m = check_positive_int(m, "m")
        _check_place(place, m)
        self.place = place
        h, d = self.n_heads, self.d_head
        self.q_proj = nn.Linear(d_model, h * d, bias=False)
        self.kv_proj = nn.Linear(d_model, d, bias=False)  # one head: K = V
        self.kv_norm = nn.Parameter(torch.ones(d))  # (d,)
        self.compressor = Compressor(d_model, d, m)
        self.out_proj = nn.Linear(h * d, d_model, bias=False)
        if pe is None:  # V4's: the last rotary_dim coordinates, interleaved; sinks
            pe = SinkValueRotary(d, h, rotary_dim=rotary_dim)
        self.pe = pe

    def block_mask(self, q_pos, block_pos, block_last) -> torch.Tensor:
        """Which blocks each query sees, bool ``(1|b, 1, i, w)``: the closed ones."""
        return block_visible(q_pos, block_last)

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None = None, **kw):
        """x ``(b, n, D)``, pos ``(n,)`` or ``(1|b, n)`` (default ``0 .. n - 1``) ->
        ``(b, n, D)``; ``kw`` goes to ``pl.attention`` (``path``, ...)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            raise ValueError(
                f"x must be (b, n, D), got {tuple(getattr(x, 'shape', ()))}"
            )
        b, n, _ = x.shape
        pos = torch.arange(n, device=x.device) if pos is None else pos
        pos = _check_pos(pos)
        h, d = self.n_heads, self.d_head
        q = self.q_proj(x).view(b, n, h, d).transpose(1, 2)  # (b, h, i, d)
        kv = _rms_norm(self.kv_proj(x), self.kv_norm, 1e-6)  # (b, n, d)
        entries, where, last = self.compressor(x, pos, self.place)  # (b, w, d)
        keys = torch.cat([kv, entries], dim=1)[:, None].expand(b, h, -1, d)
        k_pos = torch.cat([pos, where], dim=1)  # (1|b, n + w)
        # a token key j: 0 <= p_i - p_j < window; a block: block_mask
        offset = pos[:, None, :, None] - pos[:, None, None, :]  # (1|b, 1, i, j)
        near = (offset >= 0) & (offset < self.window)
        blocks = self.block_mask(pos, where, last)  # (1|b, 1, i, w)
        rows = max(near.shape[0], blocks.shape[0])
        mask = torch.cat([near.expand(rows, -1, -1, -1),
                          blocks.expand(rows, -1, -1, -1)], dim=-1)  # fmt: skip
        out = attention(q, keys, keys, self.pe, pos, k_pos, mask=mask, **kw)
        if isinstance(out, tuple):  # return_weights
            out, weights = out
            return self.out_proj(out.transpose(1, 2).reshape(b, n, h * d)), weights
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * d))  # (b, n, D)

    def extra_repr(self) -> str:
        return f"window={self.window}, m={self.m}, place={self.place!r}"

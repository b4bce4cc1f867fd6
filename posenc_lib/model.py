"""``TinyTransformer``: a small pre-LayerNorm transformer, one encoding in every block
(or a list of them, one per block: the hybrids of Part VII).

tokens ``(b, n)`` -> embedding ``(b, n, D)`` -> ``pe.encode_input`` -> N blocks
(attention with ``pe``'s hooks, then an MLP) -> LayerNorm -> LM head -> logits
``(b, n, V)``.
"""

from __future__ import annotations

import copy
from typing import Mapping

import torch
from torch import nn

from .layer import MultiHeadAttention
from .base import Context, PositionalEncoding, overrides
from .cache import KVCache
from .positions import Positions, prepare, prepare_step
from .registry import as_encoding
from .utils import check_positive_int, check_same_device, compiling

__all__ = ["TinyTransformer", "Block"]


class Block(nn.Module):
    """x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, pe: PositionalEncoding, d_ff: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        # the model adds pe's input term (encode_input) once, to the embeddings
        self.attn = MultiHeadAttention(d_model, n_heads, pe, input_encoded=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)
        )

    def forward(
        self, x: torch.Tensor, positions: Positions, cache: KVCache | None = None
    ) -> torch.Tensor:
        """x ``(b, n, D)`` -> ``(b, n, D)``; ``positions`` prepared once per forward
        pass (or decoding step, with the block's ``KVCache``)."""
        h = self.ln1(x)
        x = x + self.attn(h, causal=cache is not None, positions=positions, cache=cache)
        return x + self.mlp(self.ln2(x))


def _check_layer_encodings(pe, n_layers: int, share_pe: bool) -> list:
    """A list of ``n_layers`` encodings, one per block, or a clear error."""
    if len(pe) != n_layers:
        raise ValueError(
            f"pe as a list must hold one encoding per layer: n_layers={n_layers}, "
            f"got {len(pe)}"
        )
    if not share_pe:
        raise ValueError(
            "share_pe=False copies one encoding per block; with a list of encodings "
            "pass distinct objects instead (the same object twice is shared)"
        )
    for layer, p in enumerate(pe):
        if not isinstance(p, PositionalEncoding):
            raise TypeError(
                f"pe[{layer}] must be a PositionalEncoding, got {type(p).__name__}"
            )
        if layer and p is not pe[0] and overrides(p, "encode_input"):
            raise ValueError(
                f"pe[{layer}] ({type(p).__name__}) overrides encode_input, but only "
                "pe[0] encodes the input; put that encoding first"
            )
        if p.coord_axes is not None:
            raise ValueError(
                f"a list of encodings takes sequence encodings (positions (b, n)); "
                f"pe[{layer}] ({type(p).__name__}) reads coordinates "
                f"(coord_axes={p.coord_axes})"
            )
    return list(pe)


class TinyTransformer(nn.Module):
    """A language model small enough to train on a laptop CPU in seconds.

    By default the same ``pe`` module is shared by the input and by every block, so an
    encoding with parameters has one copy of them, as T5 shares its bucket table across
    layers. ``share_pe=False`` gives each block its own copy instead, as Shaw et al. and
    Transformer-XL learn their relative tables per layer (block 0 keeps ``pe`` itself,
    which also serves ``encode_input``).

    ``pe`` may also be a list or tuple of ``n_layers`` encodings, block l using
    ``pe[l]``: Llama 4's three RoPE layers to one NoPE layer, SmolLM3's NoPE every
    fourth layer. The same object may appear several times (then those blocks share
    it). ``pe[0]`` encodes the input, so no other block's encoding may override
    ``encode_input``; all of them must be sequence encodings (no ``coord_axes``).
    The positions are checked once per forward pass, against every
    layer's requirements (``causal_only``, ``side_inputs``).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        pe: PositionalEncoding | list[PositionalEncoding] | None = None,
        d_ff: int | None = None,
        share_pe: bool = True,
    ):
        super().__init__()
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        check_positive_int(n_layers, "n_layers")
        check_positive_int(d_model, "d_model")
        check_positive_int(n_heads, "n_heads")
        if d_ff is not None:
            check_positive_int(d_ff, "d_ff")  # 0 would be a block without its MLP
        if isinstance(pe, (list, tuple)):
            pe = [
                as_encoding(p, d_model, n_heads) if isinstance(p, str) else p
                for p in pe
            ]
            layer_pe = _check_layer_encodings(pe, n_layers, share_pe)
            self.pe = layer_pe[0]
        else:
            self.pe = as_encoding(pe, d_model, n_heads)
            # block 0 uses self.pe itself, so no copy is left without a gradient
            layer_pe = [
                self.pe if share_pe or layer == 0 else copy.deepcopy(self.pe)
                for layer in range(n_layers)
            ]
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, pe_l, d_ff or 4 * d_model) for pe_l in layer_pe
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def hidden(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor | None = None,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
        cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """tokens ``(b, n)`` -> final hidden states ``(b, n, D)`` (before the LM head).

        ``pos``: ``(n,)``/``(b, n)`` integers, or ``(n, a)``/``(b, n, a)`` coordinates
        for an encoding with ``coord_axes = a``. ``inputs``: named side inputs (see
        ``posenc_lib.Context``), handed to ``encode_input`` and to every attention call.
        ``cache``: ``new_cache()``, to decode ``tokens`` after the ones it holds (at
        ``pos``, or the positions after them) and add them to it.
        """
        if (
            not isinstance(tokens, torch.Tensor)
            or tokens.dim() != 2
            or (
                tokens.is_floating_point()
                or tokens.is_complex()
                or tokens.dtype == torch.bool
            )
        ):
            raise ValueError(
                "tokens must be an integer tensor of shape (b, n), got "
                f"{tuple(getattr(tokens, 'shape', ()))} {getattr(tokens, 'dtype', '')}"
            )
        b, n = tokens.shape
        if b == 0 or n == 0:
            raise ValueError(f"tokens must hold at least one token, got shape {(b, n)}")
        check_same_device(tokens, "tokens", self.embed, "model")
        if not compiling():  # the model's one data check: ids in the vocabulary
            lo, hi = torch.stack([tokens.min(), tokens.max()]).tolist()
            if lo < 0 or hi >= self.vocab_size:
                raise ValueError(
                    f"tokens must lie in [0, {self.vocab_size}), got values in "
                    f"[{lo}, {hi}]"
                )
        heads = self.blocks[0].attn.n_heads
        if cache is not None:
            return self._decode(tokens, pos, causal, mask, inputs, cache)
        # positions, mask and side inputs: checked once, shared by every layer
        positions = prepare(
            self.pe, b, heads, n, n, pos, pos, causal, mask, inputs, tokens.device,
            ("pos", "pos"),
        )  # fmt: skip
        self._check_other_layers(causal, inputs, tokens.device)
        x = self.embed(tokens)  # (b, n, D)
        ctx = Context(x=x, causal=causal, inputs=positions.inputs, positions=positions)
        x = self.pe.call_hook("encode_input", x, positions.q, ctx=ctx)
        for block in self.blocks:
            x = block(x, positions)
        return self.ln_f(x)

    def forward(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor | None = None,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
        cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """tokens ``(b, n)`` -> logits ``(b, n, V)``; causal by default (an LM).
        ``pos``, ``inputs`` and ``cache`` as in ``hidden``."""
        return self.head(self.hidden(tokens, pos, causal, mask, inputs, cache))

    def _check_other_layers(self, causal, inputs, device) -> None:
        """Another layer's class requirements (``causal_only``, ``side_inputs``),
        once per class, on one default position: no data, no host sync."""
        seen = {type(self.pe)}
        heads = self.blocks[0].attn.n_heads
        for block in self.blocks:
            pe = block.attn.pe
            if type(pe) not in seen and (pe.causal_only or pe.side_inputs):
                seen.add(type(pe))
                prepare(pe, 1, heads, 1, 1, None, None, causal, None, inputs, device)

    def new_cache(self) -> list[KVCache]:
        """One empty ``KVCache`` per block, each bound to its block's attention:
        ``model(prompt, cache=c)``, then ``model(next_tokens, cache=c)`` gives the
        logits a full forward pass over the whole sequence gives at those tokens
        (``tests/test_cache.py``)."""
        caches = [KVCache() for _ in self.blocks]
        for block, c in zip(self.blocks, caches):
            c.claim(block.attn)
        return caches

    def _decode(self, tokens, pos, causal, mask, inputs, cache) -> torch.Tensor:
        """``hidden`` for the new ``tokens`` against every token ``cache`` holds: the
        step's positions are prepared once and handed to every block, as in a full
        forward pass (two host syncs per step, whatever the depth)."""
        if causal is not True or inputs is not None or mask is not None:
            raise ValueError(
                "a KV cache decodes causally: pass causal=True, and neither mask= "
                "nor inputs="
            )
        if not (
            isinstance(cache, (list, tuple))
            and len(cache) == len(self.blocks)
            and all(isinstance(c, KVCache) for c in cache)
        ):
            raise ValueError(
                f"cache must be model.new_cache() (one KVCache per block, "
                f"{len(self.blocks)}), got {type(cache).__name__}"
            )
        if len({id(c) for c in cache}) != len(cache):
            raise ValueError(
                "cache holds the same KVCache for two blocks: each block needs its "
                "own (model.new_cache())"
            )
        if len({len(c) for c in cache}) != 1:
            raise ValueError(
                "the blocks' caches hold different numbers of tokens: start again "
                "from model.new_cache()"
            )
        for block, layer_cache in zip(self.blocks, cache):
            layer_cache.claim(block.attn)  # another model's cache is refused here
        for pe in [self.pe] + [block.attn.pe for block in self.blocks]:
            why = getattr(pe, "no_cache_reason", None)
            if why is not None:
                raise ValueError(
                    f"{type(pe).__name__} cannot decode with a cache: {why}"
                )
        b, n = tokens.shape
        heads = self.blocks[0].attn.n_heads
        # the new queries against every key: the same for every block (their caches
        # hold the same tokens), prepared once
        positions = prepare_step(
            self.pe, cache[0], b, heads, n, pos, None, tokens.device
        )
        self._check_other_layers(True, None, tokens.device)
        x = self.embed(tokens)  # (b, n, D)
        ctx = Context(x=x, causal=True, positions=positions)
        x = self.pe.call_hook("encode_input", x, positions.q, ctx=ctx)
        saved = [c.state() for c in cache]
        try:
            for block, layer_cache in zip(self.blocks, cache):
                x = block(x, positions, cache=layer_cache)
        except BaseException:  # a later block refused: no cache keeps the step
            for layer_cache, state in zip(cache, saved):
                layer_cache.restore(state)
            raise
        return self.ln_f(x)

    def attention_input(
        self,
        tokens: torch.Tensor,
        layer: int,
        pos: torch.Tensor | None = None,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """What block ``layer``'s attention reads on ``tokens`` ``(b, n)``: the hidden
        state entering the block after its LayerNorm, ``(b, n, D)`` (the ``ctx.x`` an
        encoding's hooks see, e.g. FoX's gates). No gradient; arguments as in
        ``forward``."""
        args, _ = self._attention_call(tokens, layer, pos, causal, mask, inputs)
        return args[0]

    def attention_map(
        self,
        tokens: torch.Tensor,
        layer: int,
        pos: torch.Tensor | None = None,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The attention weights ``(b, h, i, j)`` of block ``layer`` on ``tokens``
        ``(b, n)``, as the forward pass computes them (the same positions, mask and
        side inputs). No gradient; arguments as in ``forward``."""
        args, kwargs = self._attention_call(tokens, layer, pos, causal, mask, inputs)
        attn = self.blocks[layer].attn
        with torch.no_grad():
            _, weights = attn(*args, **{**kwargs, "return_weights": True})
        return weights

    def _attention_call(self, tokens, layer, pos, causal, mask, inputs):
        """The arguments block ``layer``'s attention is called with in a forward pass
        over ``tokens`` (caught by a forward pre-hook): ``(args, kwargs)``."""
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(f"layer must be an int, got {type(layer).__name__}")
        if not -len(self.blocks) <= layer < len(self.blocks):
            raise ValueError(
                f"layer must index one of the {len(self.blocks)} blocks "
                f"(0 .. {len(self.blocks) - 1}), got {layer}"
            )
        calls = []
        hook = self.blocks[layer].attn.register_forward_pre_hook(
            lambda module, args, kwargs: calls.append((args, kwargs)), with_kwargs=True
        )
        try:
            with torch.no_grad():
                self.hidden(tokens, pos, causal, mask, inputs)
        finally:
            hook.remove()
        return calls[0]

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

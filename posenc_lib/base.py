"""The one interface every positional encoding implements.

An encoding is a ``PositionalEncoding`` that overrides only the hooks it needs; every
hook has an identity default, so ``PositionalEncoding()`` itself is "no positional
information".
The attention function (``posenc_lib.attention``) calls the hooks in this fixed order::

    x = encode_input(x, pos)                      # once, on the embeddings
    q, k = transform_qk(q, k, q_pos, k_pos)       # e.g. RoPE rotates q and k
    scores = q @ k^T * scale                      # scale = 1/sqrt(d) unless set
    scores = scores + score_bias(q, k, q_pos, k_pos)     # ALiBi, T5, Shaw, FoX
    scores = transform_scores(scores, q_pos, k_pos)      # DA-Transformer, CoPE
    weights = attention_weights(scores, mask)     # softmax unless replaced
    out = weights @ v + value_bias(weights, q_pos, k_pos)   # e.g. Shaw's value term

**Positions** handed to the hooks are int64 tensors: ``(b, i)`` and ``(b, j)`` for a
sequence (the default), or ``(b, i, a)`` and ``(b, j, a)`` integer coordinates for an
encoding whose ``coord_axes`` is ``a`` (an image's (row, col), a video's (t, row, col),
Qwen2-VL's (t, h, w)).

**Everything else an encoding may read** reaches it through one object, the
:class:`Context` of the call: the layer input ``x`` (FoX's gates), ``q``, ``k``, ``v``,
the combined mask (CoPE's gates read the masked logits; stick-breaking's leftover
stick reads ``v``), ``causal``, and the caller's named **side inputs** (graph
distances ``(b, n, n)``, node degrees ``(b, n)``, Laplacian eigenvectors ``(b, n, k)``,
3-D coordinates ``(b, n, 3)``...), which ``TinyTransformer`` and ``MultiHeadAttention``
pass through unchanged. A hook that wants the context says so by taking a keyword
argument named ``ctx``; hooks without it are called exactly as before. So an encoding
that needs only positions is written as if the context did not exist.

**score_mod**: an encoding whose positional term is a function of (batch, head, query
index, key index) and of the score (ALiBi, T5, Swin, Graphormer, DA-Transformer,
FoX) also states it as a FlexAttention
``score_mod`` (``score_mod(q_pos, k_pos)``), which ``attention(path="flex")`` hands to
the compiled kernel. It must agree with ``score_bias`` and ``transform_scores``: the
registry test checks ``mod(s) == transform_scores(s + score_bias)`` for every encoding
that defines one. An encoding that defines ``score_mod`` and neither ``score_bias``
nor ``transform_scores`` gets ``score_bias`` derived from it (the mod on zero
scores). A ``score_mod`` that does not
take ``ctx`` declares the term a function of positions and parameters alone; the
attention function then caches what it builds from it (``cached``). So does one that
reads only the side inputs and declares it: ``ctx_reads = frozenset({"inputs"})``
(Graphormer); the cache is then keyed on the side inputs too.
"""

from __future__ import annotations

import inspect
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Mapping

import torch
from torch import nn

__all__ = [
    "PositionalEncoding",
    "Context",
    "FOUR_TERMS",
    "HOOKS",
    "ScoreMod",
    "relative_offsets",
]

# FlexAttention's score_mod: (score, b, h, q_idx, kv_idx) -> score. The arguments are
# tensors that broadcast (0-d inside the kernel; a grid when evaluated eagerly), so a
# score_mod is written with indexing, arithmetic and torch.where only.
ScoreMod = Callable[..., torch.Tensor]

# The four terms of ((U+P) W_q)((U+P) W_k)^T (Part I's lens): content-content,
# content-position, position-content, position-position.
FOUR_TERMS: tuple[str, ...] = (
    "content-content",
    "content-position",
    "position-content",
    "position-position",
)

# The hooks, in the order the attention function calls them.
HOOKS: tuple[str, ...] = (
    "encode_input",
    "transform_qk",
    "score_bias",
    "transform_scores",
    "attention_weights",
    "value_bias",
)


@dataclass(frozen=True)
class Context:
    """What one attention call knows beyond the hooks' positional arguments.

    Every field may be ``None`` where the caller does not have it (``encode_input`` runs
    before any attention, so it sees only ``x`` and ``inputs``).

    * ``x`` ``(b, i, D)``: the layer's input (``MultiHeadAttention`` fills it in;
      ``None`` when ``attention`` is called on q, k, v directly without ``x=``).
    * ``q`` ``(b, h, i, d)``, ``k`` ``(b, h, j, d)``: after ``transform_qk``.
    * ``v`` ``(b, h, j, e)``: the values.
    * ``mask`` ``(b|1, 1|h, i, j)`` bool, True = may attend: ``causal`` and the caller's
      mask combined; ``None`` when every key is visible.
    * ``causal``: whether the call is causal.
    * ``inputs``: the caller's named side inputs, per token ``(b, n, ...)`` or pairwise
      ``(b, n, n, ...)``; an encoding lists the ones it needs in ``side_inputs``.
    """

    x: torch.Tensor | None = None
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    causal: bool = False
    inputs: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def only(self, fields: frozenset[str]) -> "Context":
        """This context with every field outside ``fields`` cleared (``None``, no
        inputs, not causal): what an encoding that declares ``ctx_reads`` receives."""
        cleared = {"x": None, "q": None, "k": None, "v": None, "mask": None,
                   "causal": False, "inputs": {}}  # fmt: skip
        return Context(**{f: getattr(self, f) if f in fields else cleared[f]
                          for f in cleared})  # fmt: skip

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


class PositionalEncoding(nn.Module):
    """Base class with six identity hooks; subclasses override only what they need.

    Class attributes a subclass may set:

    * ``scale``: multiplier of ``q.k`` (``None`` means ``1/sqrt(d)``; T5 uses ``1.0``).
    * ``four_terms``: for each of ``FOUR_TERMS``, how the method treats that term of the
      (U+P) expansion ("kept", "dropped", or "replaced by ..."). Part I's table is drawn
      from it.
    * ``coord_axes``: ``None`` for positions ``(b, n)``; ``a`` for coordinates
      ``(b, n, a)``.
    * ``side_inputs``: name -> description of each side input the encoding reads from
      ``ctx.inputs``; the attention function refuses a call that lacks one.
    * ``causal_only``: the method is defined for causal attention only (FoX,
      stick-breaking); a non-causal call is refused with a clear error.
    * ``ctx_reads``: the ``Context`` fields that its hooks and ``score_mod`` read
      (``None``, the default: any). Declared, it is enforced (they receive a context
      with only those fields, ``Context.only``) and it tells the attention function
      what it may skip or reuse: the boolean mask is not built for a term that does
      not read ``mask``, and a term that reads only ``inputs`` (and ``causal``) is
      cached like a positional one, keyed on the side inputs too (Graphormer's
      distances are the same in every layer).

    A hook that declares a keyword argument ``ctx`` receives the call's ``Context``.

    ``score_mod`` (not a hook: the flex path's form of ``score_bias`` and
    ``transform_scores``) and ``cached`` (reuse what depends only on positions) are
    described at their definitions.
    """

    scale: ClassVar[float | None] = None
    four_terms: ClassVar[dict[str, str]] = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped",
    }
    coord_axes: ClassVar[int | None] = None
    side_inputs: ClassVar[dict[str, str]] = {}
    causal_only: ClassVar[bool] = False
    ctx_reads: ClassVar[frozenset[str] | None] = None
    _ctx_hooks: ClassVar[frozenset[str]] = frozenset()
    _mod_reads_ctx: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        own_mod = cls.score_mod is not PositionalEncoding.score_mod
        cls._mod_reads_ctx = (
            own_mod and "ctx" in inspect.signature(cls.score_mod).parameters
        )
        fields = {"x", "q", "k", "v", "mask", "causal", "inputs"}
        if cls.ctx_reads is not None and not set(cls.ctx_reads) <= fields:
            raise TypeError(
                f"{cls.__name__}.ctx_reads names {sorted(set(cls.ctx_reads) - fields)}"
                f", which are not Context fields {sorted(fields)}"
            )
        derived = getattr(cls.score_bias, "_from_score_mod", False)
        plain = cls.transform_scores is PositionalEncoding.transform_scores
        if derived and not (own_mod and plain):  # a subclass changed what it came from
            cls.score_bias = PositionalEncoding.score_bias
        if own_mod and plain and (derived or not _overrides(cls, "score_bias")):
            # score_bias not written by hand: the score_mod on zero scores
            cls.score_bias = _BIAS_FROM_MOD[cls._mod_reads_ctx]
        # the hooks whose (possibly inherited) definition asks for the context
        cls._ctx_hooks = frozenset(
            hook
            for hook in HOOKS
            if getattr(cls, hook) is not getattr(PositionalEncoding, hook)
            and "ctx" in inspect.signature(getattr(cls, hook)).parameters
        )

    def call_hook(self, hook: str, *args, ctx: Context):
        """Call ``hook`` with ``args``, adding ``ctx=`` if this encoding's hook takes
        it."""
        fn = getattr(self, hook)
        if hook not in self._ctx_hooks:
            return fn(*args)
        return fn(*args, ctx=self.restrict(ctx))

    def restrict(self, ctx: Context | None) -> Context | None:
        """``ctx`` as this encoding's hooks see it: only the fields of ``ctx_reads``
        (all of them when it is ``None``)."""
        reads = self.ctx_reads
        return ctx if reads is None or ctx is None else ctx.only(reads)

    def call_score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: Context):
        """``score_mod(q_pos, k_pos)``, with ``ctx=`` (restricted) if it reads it."""
        if self._mod_reads_ctx:
            return self.score_mod(q_pos, k_pos, ctx=self.restrict(ctx))
        return self.score_mod(q_pos, k_pos)

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``(b, n, D), (b, n) -> (b, n, D)``: add (or mix in) position before the
        blocks."""
        return x

    def transform_qk(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(b, h, i, d), (b, h, j, d) -> same``: transform queries and keys (RoPE)."""
        return q, k

    def score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        """``-> None`` or a tensor broadcastable to ``(b, h, i, j)``, added to the
        scaled scores."""
        return None

    def transform_scores(
        self, scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor:
        """``(b, h, i, j) -> (b, h, i, j)``: any other function of the biased scores."""
        return scores

    def attention_weights(
        self, scores: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """``(b, h, i, j)`` and a bool mask broadcastable to it (True = may attend)
        -> weights ``(b, h, i, j)``."""
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def value_bias(
        self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        """``(b, h, i, j) -> None`` or ``(b|1, h|1, i, e)``, added to ``weights @ v``
        (Shaw's ``sum_j a_ij a^V_ij``)."""
        return None

    def score_mod(
        self, q_pos: torch.Tensor, k_pos: torch.Tensor, ctx: Context | None = None
    ) -> ScoreMod | None:
        """``None``, or this encoding's positional term as a FlexAttention score_mod.

        Returns ``mod(score, b, h, q_idx, kv_idx) -> score``: ``score`` is the scaled
        ``q . k`` of query ``q_idx`` and key ``kv_idx`` (token indices; their positions
        are ``q_pos[b, q_idx]`` and ``k_pos[b, kv_idx]``) in batch row ``b`` and head
        ``h``, and ``mod`` returns what ``score_bias`` and ``transform_scores`` make of
        it: ``transform_scores(score + score_bias)``. Tensors the term needs (slopes,
        tables, positions, cached bucket ids) are captured by the closure; the mod uses
        indexing, arithmetic and ``torch.where``, so it runs both inside the compiled
        kernel (0-d arguments) and eagerly on a broadcast grid (``score_mod_bias``).

        Override it without ``ctx`` when the term depends on positions and parameters
        only (ALiBi, T5, Swin): the attention function may then reuse what it built
        from it while the positions and parameters stay the same. Declare ``ctx`` to
        read the call's context: side inputs (Graphormer's distances, reused as
        positions are when ``ctx_reads`` says that is all it reads) or the data
        (FoX's gates, never reused). The default, ``None``, means no positional term
        in the scores.
        """
        return None

    def score_mod_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        ctx: Context | None = None,
    ) -> torch.Tensor | None:
        """The ``score_mod`` on zero scores, ``(b|1, h|1, i|1, j|1)`` in ``q``'s dtype:
        the additive bias it stands for (``None`` without a score_mod). This is
        ``score_bias`` for an encoding that defines only ``score_mod``."""
        mod = self.call_score_mod(q_pos, k_pos, ctx)
        if mod is None:
            return None
        b, h, i, _ = q.shape
        j = k.shape[2]
        same = bool((q_pos == q_pos[:1]).all() and (k_pos == k_pos[:1]).all())
        grid = [
            torch.arange(size, device=q.device).view(shape)
            for size, shape in (
                (1 if same else b, (-1, 1, 1, 1)),  # one row when the batch shares
                (h, (1, -1, 1, 1)),
                (i, (1, 1, -1, 1)),
                (j, (1, 1, 1, -1)),
            )
        ]
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        try:
            return mod(zero, *grid).to(q.dtype)  # (b|1, h|1, i|1, j|1)
        except IndexError as error:  # a table built for other heads or lengths
            raise ValueError(
                f"{type(self).__name__}.score_mod does not fit this call, "
                f"(b, h, i, j) = {(b, h, i, j)}: {str(error).splitlines()[0]}"
            ) from None

    def cached(
        self, name: str, key: tuple, build: Callable[[], object], params: bool = True
    ):
        """``build()``, reused while ``key`` (and, with ``params``, this module's
        parameters and buffers) stay the same: what depends only on positions is
        computed once per shape, not per call and per layer.

        ``key`` holds hashable values (shapes, dtypes, flags) and tensors, which are
        compared by value (positions: a call with equal positions hits, whatever tensor
        holds them). With ``params``, the key also holds every parameter's and buffer's
        storage, ``_version`` (bumped by each in-place change: optimiser steps,
        ``load_state_dict``, ``p.data.mul_``) and dtype, so a training step invalidates
        the entry; and nothing is stored while autograd would record the build (grad
        enabled and a parameter requiring grad), since the result would carry this
        call's graph. One entry per ``name`` (the latest), in a plain dict attribute:
        not in ``state_dict``, rebuilt after ``.to(...)``.
        """
        if params:
            tensors = list(itertools.chain(self.parameters(), self.buffers()))
            if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
                return build()
            key = (*key, *((t.data_ptr(), t._version, t.dtype) for t in tensors))
        plain = tuple(
            (t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else t
            for t in key
        ) + (torch.is_inference_mode_enabled(),)  # inference tensors stay there
        values = [t for t in key if isinstance(t, torch.Tensor)]
        store = self.__dict__.setdefault("_cache", {})
        hit = store.get(name)
        if (
            hit is not None
            and hit[0] == plain
            and all(_same(t, seen) for t, seen in zip(values, hit[1]))
        ):
            return hit[2]
        value = build()
        if not (isinstance(value, torch.Tensor) and value.requires_grad):
            seen = [(weakref.ref(t), _version(t), t.clone()) for t in values]
            store[name] = (plain, seen, value)
        return value

    @property
    def needs_score_path(self) -> bool:
        """True when a hook after ``score_bias`` is overridden, so the fused kernel
        cannot be used."""
        cls = type(self)
        return any(
            getattr(cls, hook) is not getattr(PositionalEncoding, hook)
            for hook in HOOKS[3:]
        )

    def example_positions(
        self, b: int, n: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Valid positions for ``n`` tokens, ``(b, n)`` or ``(b, n, a)``, for tests and
        demos. Coordinates default to a random walk that may repeat (as a grid would);
        an encoding with a fixed layout overrides this."""
        if self.coord_axes is None:
            return torch.arange(n).expand(b, n)
        steps = torch.randint(0, 2, (b, n, self.coord_axes), generator=generator)
        return steps.cumsum(1) - steps[:, :1]

    def example_inputs(
        self, b: int, n: int, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Valid side inputs for ``n`` tokens (one entry per ``side_inputs`` name)."""
        return {}

    def extra_repr(self) -> str:
        return ""


def relative_offsets(
    q_pos: torch.Tensor, k_pos: torch.Tensor
) -> tuple[Callable[..., torch.Tensor], int, int]:
    """Key-minus-query offsets for a score_mod: ``(off, lo, hi)`` with
    ``off(b, q_idx, kv_idx) = k_pos[b, kv_idx] - q_pos[b, q_idx]`` and every offset of
    the call in ``lo .. hi``.

    When every row's keys are a run ``s, s+1, ...`` and its queries the last ``i`` of
    them (any ``s``), the offset is ``kv_idx - q_idx - (j - i)`` whatever ``s`` is:
    index arithmetic with shape constants, which the compiled kernel does without a
    memory load and vectorises (a table indexed by ``off - lo`` then reads contiguous
    memory). Otherwise ``off`` reads the positions, and ``lo`` and ``hi`` come from
    their extremes.
    """
    i, j = q_pos.shape[1], k_pos.shape[1]
    run = k_pos[:, :1] + torch.arange(j, device=k_pos.device)  # (b, j)
    if i <= j and bool((k_pos == run).all() and (q_pos == run[:, j - i :]).all()):
        return (lambda b, q_idx, kv_idx: kv_idx - q_idx - (j - i)), 1 - j, i - 1
    lo, hi = int(k_pos.min() - q_pos.max()), int(k_pos.max() - q_pos.min())
    return (lambda b, q_idx, kv_idx: k_pos[b, kv_idx] - q_pos[b, q_idx]), lo, hi


def _overrides(cls: type, hook: str) -> bool:
    return getattr(cls, hook) is not getattr(PositionalEncoding, hook)


def _same(t: torch.Tensor, seen: tuple) -> bool:
    """``t`` equals the key tensor ``seen`` = (weak reference, version, copy): the very
    tensor, unchanged since (no comparison: a side input may be n x n), or equal
    values."""
    ref, version, copy = seen
    same = ref() is t and version is not None and _version(t) == version
    return same or torch.equal(t, copy)


def _version(t: torch.Tensor) -> int | None:
    """In-place changes so far (None for inference tensors, which do not count)."""
    return None if t.is_inference() else t._version


def _bias_from_mod(self, q, k, q_pos, k_pos):
    """The score_mod on zero scores (``score_bias`` derived from ``score_mod``)."""
    return self.score_mod_bias(q, k, q_pos, k_pos)


def _bias_from_mod_ctx(self, q, k, q_pos, k_pos, ctx):
    """The score_mod on zero scores (``score_bias`` derived from ``score_mod``)."""
    return self.score_mod_bias(q, k, q_pos, k_pos, ctx=ctx)


_bias_from_mod._from_score_mod = _bias_from_mod_ctx._from_score_mod = True
# indexed by "the score_mod reads ctx": the derived score_bias declares ctx exactly then
_BIAS_FROM_MOD = {False: _bias_from_mod, True: _bias_from_mod_ctx}

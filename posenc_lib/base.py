"""The one interface every positional encoding implements.

An encoding is a ``PositionalEncoding`` that overrides only the hooks it needs; every
hook has an identity default, so ``PositionalEncoding()`` itself is "no positional
information". The reference attention (``posenc_lib.attention.reference_attention``)
calls them in this fixed order::

    x = encode_input(x, pos)                      # once, on the embeddings
    q, k = transform_qk(q, k, q_pos, k_pos)       # e.g. RoPE rotates q and k
    v = transform_v(v, k_pos)                     # DeepSeek-V4 rotates v as well
    scores = q @ k^T * scale                      # scale = 1/sqrt(d) unless set
    scores = scores + score_bias(q, k, q_pos, k_pos)     # ALiBi, T5, Shaw, FoX
    scores = transform_scores(scores, q_pos, k_pos)      # DA-Transformer, CoPE
    weights = attention_weights(scores, mask)     # softmax unless replaced
    out = weights @ v + value_bias(weights, q_pos, k_pos)   # e.g. Shaw's value term
    out = transform_out(out, q_pos)               # DeepSeek-V4 rotates it back

``transform_v`` and ``transform_out`` are maps per token (a value by its key's
position, an output by its query's), so a fused kernel runs between them: every
backend calls them around its kernel, as it calls ``transform_qk`` before it.

**Positions** handed to the hooks are int64 tensors ``(1|b, i)`` and ``(1|b, j)``
(one row when the batch shares them), or ``(1|b, ., a)`` integer coordinates for an
encoding whose ``coord_axes`` is ``a``.

**Everything else** an encoding may read reaches it through the call's
:class:`Context`: the layer input ``x`` (FoX's gates), ``q``, ``k``, ``v``, the
combined ``mask``, ``causal``, the named side ``inputs`` (graph distances, 3-D
points...) and ``positions`` (the forward pass's :class:`~posenc_lib.Positions`). A
hook that wants it declares a keyword argument ``ctx``; hooks without it are called
with their positional arguments only, so an encoding that needs only positions is
written as if the context did not exist.
"""

from __future__ import annotations

import inspect
from typing import Callable, ClassVar

import torch
from torch import nn

from .context import Context

__all__ = [
    "PositionalEncoding",
    "Context",
    "FOUR_TERMS",
    "HOOKS",
    "ScoreMod",
    "overrides",
]

# FlexAttention's score_mod: (score, b, h, q_idx, kv_idx) -> score
ScoreMod = Callable[..., torch.Tensor]

# The four terms of ((U+P) W_q)((U+P) W_k)^T (Part I's lens).
FOUR_TERMS: tuple[str, ...] = (
    "content-content", "content-position", "position-content", "position-position",
)  # fmt: skip


def _autocast_on(device_type: str) -> bool:
    """Whether ``torch.autocast`` is on for this device type (any torch >= 2.2)."""
    try:
        return torch.is_autocast_enabled(device_type)  # torch >= 2.4
    except TypeError:
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return device_type == "cuda" and torch.is_autocast_enabled()


# The hooks whose first argument is what enters the encoding (x, or q): its dtype is
# checked against the encoding's parameters there (later hooks see float32 scores).
_INPUT_HOOKS = frozenset({"encode_input", "transform_qk", "score_bias"})

# Optional second forms of hooks, for the fast backends: FlexAttention's score_mod,
# and the fused backend's forms (``backends/forms.py``: its table says which runs a
# call; the registry contract holds each equal to the hooks it restates).
FAST_FORMS: tuple[str, ...] = (
    "score_mod", "key_bias", "band_bias", "fast_score_bias",
    "sink_logits", "causal_attention",
)  # fmt: skip

# The hooks, in the order the attention calls them.
HOOKS: tuple[str, ...] = (
    "encode_input",
    "transform_qk",
    "transform_v",
    "score_bias",
    "transform_scores",
    "attention_weights",
    "value_bias",
    "transform_out",
)

# The hooks between the biased scores and the output, which a fused kernel does not
# take (``transform_v`` and ``transform_out`` act per token, around the kernel).
SCORE_PATH_HOOKS: tuple[str, ...] = (
    "transform_scores", "attention_weights", "value_bias",
)  # fmt: skip


class PositionalEncoding(nn.Module):
    """Base class with eight identity hooks; subclasses override only what they need.

    Class attributes a subclass may set:

    * ``scale``: multiplier of ``q.k`` (``None`` means ``1/sqrt(d)``; T5 uses ``1.0``).
    * ``four_terms``: for each of ``FOUR_TERMS``, how the method treats that term of the
      (U+P) expansion; Part I's table is drawn from it.
    * ``coord_axes``: ``None`` for positions ``(b, n)``; ``a`` for coordinates
      ``(b, n, a)``.
    * ``side_inputs``: name -> description of each side input read from
      ``ctx.inputs``; a call without one is refused, naming it.
    * ``causal_only``: defined for causal attention only (FoX, stick-breaking).
    * ``reuse``: the hooks whose result depends only on positions, side inputs and
      parameters (ALiBi's, T5's, Graphormer's ``score_bias``): computed once per
      forward pass and shared by every layer, in training too.
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
    reuse: ClassVar[frozenset[str]] = frozenset()
    _ctx_hooks: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # which hooks (and score_mod) declare ``ctx``: read once, per class
        cls._ctx_hooks = frozenset(
            name
            for name in (*HOOKS, *FAST_FORMS)
            if "ctx" in inspect.signature(getattr(cls, name)).parameters
            and overrides(cls, name)
        )
        unknown = set(cls.reuse) - set(HOOKS)
        if unknown:
            raise TypeError(f"{cls.__name__}.reuse names {sorted(unknown)}, not hooks")

    def call_hook(self, hook: str, *args, ctx: Context | None = None):
        """``hook(*args)``, with ``ctx=`` if the hook declares it; a hook in
        ``reuse`` is computed once per forward pass (``ctx.positions``)."""
        if hook in _INPUT_HOOKS:  # every path calls transform_qk first
            self.check_dtype(args[0], "x" if hook == "encode_input" else "q")
        fn = getattr(self, hook)
        run = (
            (lambda: fn(*args, ctx=ctx))
            if hook in self._ctx_hooks
            else (lambda: fn(*args))
        )
        if hook in self.reuse and ctx is not None and ctx.positions is not None:
            return ctx.positions.reuse((self, hook, args[0].dtype), run)
        return run()

    def forward(self, *args, **kwargs):
        """An encoding is not called: attention calls its hooks (said here, where
        ``nn.Module`` would say only that ``forward`` is missing)."""
        hooks = [h for h in (*HOOKS, *FAST_FORMS) if overrides(self, h)]
        hook = f"; or call a hook: pe.call_hook({hooks[0]!r}, ...)" if hooks else ""
        raise TypeError(
            f"{type(self).__name__} is not called on its own: attention calls its "
            f"hooks ({', '.join(hooks) or 'none: no positional term'}). Pass it to a "
            "layer, a model or attention (pl.MultiHeadAttention(d_model, n_heads, "
            "pe=pe), pl.TinyTransformer(..., pe=pe), pl.attention(q, k, v, pe))" + hook
        )

    def check_dtype(self, t: torch.Tensor, name: str) -> None:
        """Raise unless ``t`` has the dtype of this encoding's learned parameters, as
        ``nn.Linear`` requires (torch's own message, "mat1 and mat2 must have the same
        dtype", came from deep inside a hook). An encoding without parameters (RoPE,
        ALiBi, the sinusoid) computes in its input's dtype; one with parameters is
        cast with its model (``model.to(dtype)``), or on its own (``pe.to(dtype)``).
        Checked once per call, where the input enters (``call_hook``); not under
        ``torch.autocast``, which runs mixed dtypes by design (float32 parameters,
        half-precision activations)."""
        if not isinstance(t, torch.Tensor) or _autocast_on(t.device.type):
            return  # under autocast, mixed dtypes are autocast's to resolve
        held = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        if held is not None and t.dtype != held:
            raise TypeError(
                f"{name} is {t.dtype} but this {type(self).__name__} holds {held} "
                f"parameters: cast one to the other (pe.to({t.dtype}), or "
                f"{name}.to({held}))"
            )

    def encode_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``(b, n, D), (1|b, n) -> (b, n, D)``: add (or mix in) position before the
        blocks."""
        return x

    def transform_qk(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(b, h, i, d), (b, h, j, d) -> same``: transform queries and keys (RoPE)."""
        return q, k

    def transform_v(self, v: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """``(b, h, j, e), (1|b, j) -> (b, h, j, e)``: transform each value by its key's
        position (DeepSeek-V4 rotates it as it rotates the key). Called after
        ``transform_qk``; later hooks see the result as ``ctx.v``."""
        return v

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

    def transform_out(self, out: torch.Tensor, q_pos: torch.Tensor) -> torch.Tensor:
        """``(b, h, i, e), (1|b, i) -> (b, h, i, e)``: transform each query's output by
        its position, last (DeepSeek-V4 rotates it back by the query's position, so
        that with ``transform_v`` a value enters by its offset ``j - i`` only)."""
        return out

    def score_mod(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> ScoreMod | None:
        """``None``, or ``score_bias`` and ``transform_scores`` as one FlexAttention
        score_mod, for ``attention(path="flex")``.

        Returns ``mod(score, b, h, q_idx, kv_idx) -> transform_scores(score +
        score_bias)`` for query ``q_idx`` and key ``kv_idx`` (token indices; their
        positions are ``q_pos[b, q_idx]``, ``k_pos[b, kv_idx]``). Tensors the term
        needs are captured by the closure; the mod uses indexing, arithmetic and
        ``torch.where``, so it runs inside the compiled kernel (0-d arguments) and
        eagerly on a broadcast grid (the registry test checks it against the hooks).
        Declare ``ctx`` to read the call's context (FoX's gates, Graphormer's
        distances).
        """
        return None

    def key_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        """``None``, or ``score_bias`` restated as a term of the key alone: ``w``
        ``(b|1, h|1, j)`` such that, on every key j that query i sees under a causal
        mask in token order, ``score_bias_ij = u_i + w_j`` for some term ``u_i`` of
        the query alone (FoX: ``c_i - c_j`` gives ``w_j = -c_j``). Return it in
        float64 where the encoding can (the form recentres it per block of queries).
        The fused backend runs it as one more dimension of q and k
        (``backends/key_bias.py``, which says for which calls and dtypes)."""
        return None

    def band_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        """``None``, or ``score_bias`` restated as a function of the distance alone,
        constant beyond a band: ``c`` ``(h|1, W + 1)`` such that, on every key j that
        query i sees under a causal mask in token order over a run of positions,
        ``score_bias_ij = u_i + c[:, min(i - j, W)]`` (T5: its last bucket holds
        every distance from W on). The fused backend runs it as a band mask
        (``backends/band_bias.py``, which says for which calls)."""
        return None

    def fast_score_bias(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> torch.Tensor | None:
        """``None``, or ``score_bias``'s values by a faster algorithm of the
        encoding's own (PaTH's chunks, T5's table per offset), so that
        ``score_bias`` stays the formula on the page: the fused backend hands it to
        the kernel as a float mask (``backends/fast_bias.py``)."""
        return None

    def causal_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        ctx: Context | None = None,
    ) -> torch.Tensor | None:
        """``None``, or the whole attention ``(b, h, i, e)`` of a causal call in token
        order (query t sees keys ``0 .. t + j - i``, positions a run, no other mask),
        by an algorithm of the encoding's own (stick-breaking's, CoPE's: blocks of
        queries recomputed in the backward pass), q and k after ``transform_qk``,
        equal to the hooks it restates (``backends/own.py``)."""
        return None

    def sink_logits(self) -> torch.Tensor | None:
        """``None``, or ``(h,)`` logits that ``attention_weights`` joins to every row's
        softmax as keys of value 0 (gpt-oss's attention sinks; ``sink_softmax``): the
        fused backend then runs the encoding, with one extra key per call. An
        encoding that defines it must override ``attention_weights`` with exactly that
        softmax, and no other hook past ``score_bias``."""
        return None

    @property
    def needs_score_path(self) -> bool:
        """True when a hook of ``SCORE_PATH_HOOKS`` (after ``score_bias``, before the
        output's ``transform_out``) is overridden, so the fused kernel cannot be
        used (an ``attention_weights`` that ``sink_logits`` restates is
        run by the kernel, with one more key)."""
        late = [hook for hook in SCORE_PATH_HOOKS if overrides(self, hook)]
        if late == ["attention_weights"] and overrides(self, "sink_logits"):
            return False
        return bool(late)

    def runs_fused(self, pos) -> bool:
        """Whether the fused backend runs this call (``pos``: its ``Positions``), as
        its table of forms decides (``pl.explain_path`` says which form, and why)."""
        from .backends import fused  # the backends build on this module

        return fused.refuses(self, False, pos) is None

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


def overrides(pe: PositionalEncoding | type, hook: str) -> bool:
    """Whether an encoding (or its class) overrides ``hook`` (or a ``FAST_FORMS``
    method)."""
    cls = pe if isinstance(pe, type) else type(pe)
    return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

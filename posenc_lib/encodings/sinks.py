"""Position in the hybrid models of 2025-26: chunked RoPE layers, NoPE layers with a
query temperature (Llama 4's iRoPE), the same kind of temperature on rotated layers
(Ministral 3, Mistral Small 4), and learned attention sinks (gpt-oss).

The pieces, each checked against the model's own code in Hugging Face transformers
(5.24; ``tests/golden/make_sinks_golden.py`` and
``tests/golden/make_hybrids_2026_golden.py``):

* **Chunked RoPE** (``ChunkedRotary``, ``chunk_mask``): RoPE, and a query sees only the
  keys of its own chunk of ``chunk_size`` positions::

      may attend(i, j)  <=>  floor(p_i / C) == floor(p_j / C)     (and causal)

  (``chunked_overlay`` in ``masking_utils.py``: ``kv_idx // chunk_size == q_idx //
  chunk_size``). Llama 4 uses it, with C = 8192, in its RoPE layers.
* **Query temperature** (``TemperedNoPE``, ``llama4_attn_scale``): no rotation; the
  query at position p is multiplied by::

      s(p) = 1 + attn_scale * log(1 + floor((p + 1) / floor_scale))

  (``Llama4TextAttention.forward`` in ``models/llama4/modeling_llama4.py``, NoPE layers
  only, when ``attn_temperature_tuning``; floor_scale = 8192, attn_scale = 0.1). s = 1
  for p < floor_scale - 1, so it changes nothing until 8K tokens; it then grows like a
  logarithm, sharpening the softmax over ever more keys.
* **Query temperature on rotated layers** (``mistral_attn_scale``): the query at
  position p, after its rotation, is multiplied by::

      s(p) = 1 + beta * log(1 + floor(p / original_max_position_embeddings))

  (``get_llama_4_attn_scale`` in ``models/ministral3/modeling_ministral3.py``, called by
  ``Ministral3Attention.forward`` and ``Mistral4Attention.forward`` in every layer, with
  p the ``position_ids``; beta = ``rope_parameters["llama_4_scaling_beta"]`` and the
  length is ``rope_parameters["original_max_position_embeddings"]``, YaRN's original
  window). Llama 4's counts ``p + 1``, this one ``p``: it steps up one position later,
  at p = L0, 2 L0, ... instead of F - 1, 2F - 1, ...
* **Learned sinks** (``LearnedSink``, ``sink_softmax``): each head h has one learned
  logit s_h, a column appended to every row of scores, softmaxed with them and then
  dropped::

      w_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il))

  (``eager_attention_forward`` in ``models/gpt_oss/modeling_gpt_oss.py``). A row
  sums to less than 1: the sink takes the rest, so a head can attend to nothing.
"""

from __future__ import annotations

import torch

from ..base import PositionalEncoding
from ..registry import register
from ..utils import check_bool_mask, check_integer, check_positive_int, compiling
from .rope import Rotary

__all__ = [
    "llama4_attn_scale",
    "mistral_attn_scale",
    "rope_layers",
    "chunk_mask",
    "sink_softmax",
    "ChunkedRotary",
    "TemperedNoPE",
    "LearnedSink",
]


def _check_positions(pos: object, name: str) -> torch.Tensor:
    if not isinstance(pos, torch.Tensor):
        raise TypeError(f"{name} must be an integer tensor, got {type(pos).__name__}")
    return check_integer(pos, name)


def llama4_attn_scale(
    pos: torch.Tensor, floor_scale: int = 8192, attn_scale: float = 0.1
) -> torch.Tensor:
    """Llama 4's per-position query temperature: integer positions (any shape) ->
    float factors of the same shape (the default dtype).

    ``s(p) = 1 + attn_scale * log1p(floor((p + 1) / floor_scale))``: exactly 1 for
    ``p < floor_scale - 1``, then a step up at every multiple of ``floor_scale``.
    Errors: ``TypeError`` unless ``pos`` holds integers; ``ValueError`` for a
    negative position (the log's argument would reach 0 or below: -inf or NaN),
    ``floor_scale`` not a positive int or ``attn_scale`` not a finite number >= 0.
    """
    pos = _check_positions(pos, "pos")
    floor_scale = check_positive_int(floor_scale, "floor_scale")
    _check_strength(attn_scale, "attn_scale")
    _check_nonnegative(pos)
    return _attn_scale(pos, floor_scale, attn_scale)


def _check_strength(value: object, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value < float("inf")
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_nonnegative(pos: torch.Tensor) -> None:
    if pos.numel() and not compiling() and int(pos.min()) < 0:
        raise ValueError(f"pos must be >= 0, got a minimum of {int(pos.min())}")


def _attn_scale(pos: torch.Tensor, floor_scale: int, attn_scale: float):
    """``llama4_attn_scale`` without its checks, for positions checked at the call's
    boundary (``TemperedNoPE`` calls it in every layer: no host sync there)."""
    # s(p) = 1 + attn_scale * log(1 + floor((p + 1) / floor_scale))
    steps = torch.div(pos + 1, floor_scale, rounding_mode="floor")
    return 1.0 + attn_scale * torch.log1p(steps.to(torch.get_default_dtype()))


def mistral_attn_scale(
    pos: torch.Tensor, original_max_position_embeddings: int, beta: float = 0.1
) -> torch.Tensor:
    """Ministral 3's and Mistral Small 4's per-position query temperature, applied in
    every (rotated) layer: integer positions (any shape) -> float factors of the same
    shape (the default dtype).

    ``s(p) = 1 + beta * log(1 + floor(p / original_max_position_embeddings))``: exactly
    1 for ``p < original_max_position_embeddings`` (YaRN's original window, where the
    model was pretrained), then a step up at every multiple of it. Llama 4's
    ``llama4_attn_scale`` counts ``p + 1`` and steps one position earlier.
    Errors: ``TypeError`` unless ``pos`` holds integers; ``ValueError`` for a negative
    position (the log's argument would reach 0: -inf),
    ``original_max_position_embeddings`` not a positive int or ``beta`` not a finite
    number >= 0.
    """
    pos = _check_positions(pos, "pos")
    original = check_positive_int(
        original_max_position_embeddings, "original_max_position_embeddings"
    )
    _check_strength(beta, "beta")
    _check_nonnegative(pos)
    # s(p) = 1 + beta * log(1 + floor(p / L0))
    steps = torch.div(pos, original, rounding_mode="floor")
    return 1.0 + beta * torch.log1p(steps.to(torch.get_default_dtype()))


def rope_layers(n_layers: int, nope_interval: int = 4) -> list[bool]:
    """Which of ``n_layers`` layers use RoPE when every ``nope_interval``-th layer is
    NoPE: ``[(l + 1) % nope_interval != 0 for l in range(n_layers)]`` (layers 3, 7,
    ... are NoPE for 4).

    The default of Llama 4's and SmolLM3's configs in transformers
    (``no_rope_layers``, where, despite the name, 1 means RoPE)."""
    n_layers = check_positive_int(n_layers, "n_layers")
    nope_interval = check_positive_int(nope_interval, "nope_interval")
    # layer l is NoPE when (l + 1) is a multiple of the interval
    return [(layer + 1) % nope_interval != 0 for layer in range(n_layers)]


def chunk_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, chunk_size: int):
    """``(b|1, i)``, ``(b|1, j)`` integer positions -> bool ``(b|1, 1, i, j)``, True
    where query and key lie in the same chunk of ``chunk_size`` positions."""
    q_pos, k_pos = _check_positions(q_pos, "q_pos"), _check_positions(k_pos, "k_pos")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    if q_pos.dim() != 2 or k_pos.dim() != 2:
        raise ValueError(
            f"q_pos and k_pos must be (b|1, i) and (b|1, j), got "
            f"{tuple(q_pos.shape)} and {tuple(k_pos.shape)}"
        )
    # floor(p_i / C) == floor(p_j / C)
    q_chunk = torch.div(q_pos, chunk_size, rounding_mode="floor")  # (b, i)
    k_chunk = torch.div(k_pos, chunk_size, rounding_mode="floor")  # (b, j)
    return q_chunk[:, None, :, None] == k_chunk[:, None, None, :]  # (b, 1, i, j)


def sink_softmax(
    scores: torch.Tensor, sinks: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Scores ``(b, h, i, j)`` and one sink logit per head ``(h,)`` -> weights
    ``(b, h, i, j)``: a softmax over the j keys and one extra column holding ``s_h``,
    whose weight is then dropped, so every row sums to ``1 - w_sink < 1``.

    ``mask`` (bool, True = may attend), broadcastable to ``scores``: hidden keys get
    weight 0; a row with every key hidden gives all its weight to the sink (zeros,
    not NaN), and a row with no sink either (``s_h = -inf``) gets zeros too.
    Errors: ``TypeError`` for non-floating scores or sinks or a non-bool mask;
    ``ValueError`` for shapes that do not match (sinks ``(h,)`` for the h heads).
    """
    for name, t in (("scores", scores), ("sinks", sinks)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(
                f"{name} must be a floating-point tensor, got "
                f"{getattr(t, 'dtype', type(t).__name__)}"
            )
    if scores.dim() != 4:
        raise ValueError(
            f"scores must have shape (b, h, i, j), got {tuple(scores.shape)}"
        )
    b, h, i, _ = scores.shape
    if sinks.shape != (h,):
        raise ValueError(
            f"sinks must have shape (h,) = ({h},), one logit per head, got "
            f"{tuple(sinks.shape)}"
        )
    if mask is not None:
        check_bool_mask(mask, scores.shape, "scores")
        scores = scores.masked_fill(~mask, float("-inf"))
    column = sinks.to(scores.dtype)[None, :, None, None].expand(b, h, i, 1)
    # w_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il)): one more column, then dropped
    logits = torch.cat([scores, column], dim=-1)  # (b, h, i, j + 1)
    weights = logits.softmax(dim=-1)[..., :-1]  # (b, h, i, j)
    # a row with no logit left (every key hidden, sink -inf): zeros, not 0/0 = NaN
    empty = (logits == float("-inf")).all(dim=-1, keepdim=True)  # (b, h, i, 1)
    return weights.masked_fill(empty, 0.0)


class ChunkedRotary(Rotary):
    """RoPE inside chunks: a query sees only the keys whose position lies in its own
    chunk of ``chunk_size`` positions (Llama 4's RoPE layers, C = 8192).
    Paper: Meta, 2025 (Llama 4).

    The chunk boundary is a 0 / -inf ``score_bias`` (it depends on positions only, so
    it is built once per forward pass and shared by every layer), so the fused kernel
    runs it as a float mask. Within a chunk every offset is below ``chunk_size``: the
    rotation never meets an angle it did not see in training, whatever the length.
    """

    reuse = frozenset({"score_bias"})
    four_terms = {
        **Rotary.four_terms,
        "position-position": (
            "dropped; keys outside the query's chunk of C positions are masked"
        ),
    }

    def __init__(self, d_head: int, chunk_size: int, base: float = 10000.0, **kw):
        super().__init__(d_head, base, **kw)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")

    def score_bias(self, q, k, q_pos, k_pos):
        """0 where query and key share a chunk, -inf elsewhere: ``(b|1, 1, i, j)``."""
        same = chunk_mask(q_pos, k_pos, self.chunk_size)
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        return zero.masked_fill(~same, float("-inf"))  # (b, 1, i, j)

    def score_mod(self, q_pos, k_pos):
        """FlexAttention form: the score where the chunks match, else -inf."""
        size = self.chunk_size
        rows = max(q_pos.shape[0], k_pos.shape[0])
        qc = torch.div(q_pos, size, rounding_mode="floor").expand(rows, -1)
        kc = torch.div(k_pos, size, rounding_mode="floor").expand(rows, -1)

        def mod(score, b, h, q_idx, kv_idx):
            same = qc[b, q_idx] == kc[b, kv_idx]
            return torch.where(same, score, float("-inf"))

        return mod

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk_size={self.chunk_size}"


class TemperedNoPE(PositionalEncoding):
    """No rotation; the query at position p is scaled by ``llama4_attn_scale(p)``
    (Llama 4's NoPE layers). Keys are left as they are.
    Paper: Meta, 2025 (Llama 4)."""

    four_terms = {
        "content-content": "kept, the query scaled by 1 + a log(1 + floor((p+1)/F))",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (a causal mask still leaks order)",
    }

    def __init__(self, floor_scale: int = 8192, attn_scale: float = 0.1):
        super().__init__()
        llama4_attn_scale(torch.zeros(1, dtype=torch.long), floor_scale, attn_scale)
        self.floor_scale, self.attn_scale = floor_scale, float(attn_scale)

    def transform_qk(self, q, k, q_pos, k_pos):
        """q ``(b, h, i, d)`` times ``s(q_pos)`` ``(b|1, 1, i, 1)``; k unchanged."""
        scale = _attn_scale(q_pos, self.floor_scale, self.attn_scale)  # (b, i)
        return q * scale.to(q.dtype)[:, None, :, None], k

    def extra_repr(self) -> str:
        return f"floor_scale={self.floor_scale}, attn_scale={self.attn_scale:g}"


class LearnedSink(PositionalEncoding):
    """No positional information; softmax with one learned sink logit per head
    (gpt-oss). ``sinks`` is a ``(h,)`` parameter, zero at start (one extra key whose
    score is 0 and whose value is 0).
    Paper: OpenAI, 2025 (gpt-oss)."""

    four_terms = {
        "content-content": "kept; a learned per-head sink column absorbs the rest",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "dropped (a causal mask still leaks order)",
    }

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.sinks = torch.nn.Parameter(torch.zeros(n_heads))  # (h,)

    def attention_weights(self, scores, mask):
        """``sink_softmax(scores, self.sinks, mask)``: ``(b, h, i, j)``."""
        return sink_softmax(scores, self.sinks, mask)

    def sink_logits(self) -> torch.Tensor:
        """The fused form: the sinks as one more key of value 0 (``(h,)``)."""
        return self.sinks

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"


@register("rope_chunked", needs_max_len=True)
def _make_chunked(*, d_model: int, n_heads: int, max_len: int) -> ChunkedRotary:
    # a quarter of the training length, so that chunks matter at toy sizes
    return ChunkedRotary(d_model // n_heads, chunk_size=max(1, max_len // 4))


@register("nope_tempered", needs_max_len=True)
def _make_tempered(*, d_model: int, n_heads: int, max_len: int) -> TemperedNoPE:
    # steps every max_len / 4 positions at toy sizes (Llama 4: every 8192)
    return TemperedNoPE(floor_scale=max(1, max_len // 4))


@register("sink")
def _make_sink(*, d_model: int, n_heads: int, max_len: int) -> LearnedSink:
    return LearnedSink(n_heads)

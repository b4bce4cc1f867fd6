"""Convert query/key projections between the two RoPE layouts.

RoPE rotates the head coordinates in pairs; two layouts pair them differently:

* ``"interleaved"``: pairs (2i, 2i+1): RoFormer, GPT-J, Meta's original Llama
  (``apply_rotary_emb`` on complex numbers), gpt-fast.
* ``"half"``: pairs (i, i + d/2): GPT-NeoX, Hugging Face Llama (``rotate_half``).

Pair i turns by the same angle m * theta_i in both. So the two are one map up to a
fixed permutation P of the d coordinates of a head, P x = (x_0, x_2, .., x_{d-2},
x_1, x_3, .., x_{d-1}) (the real parts, then the imaginary parts):

    half(P x, m) = P interleaved(x, m)

A checkpoint trained with one layout runs with the other once the rows of W_q and W_k
are permuted by P, head by head. V and the output projection are left alone, and the
scores do not change: P is orthogonal and applied to q and k alike,
(P q) . (P k) = q . P^T P k = q . k.

``interleaved_to_half`` is Hugging Face's ``permute`` in
``src/transformers/models/llama/convert_llama_weights_to_hf.py`` (inside
``write_model``); ``half_to_interleaved`` is its inverse (gpt-fast's ``permute`` in
``scripts/convert_hf_checkpoint.py``).

Shapes: W ``(h*d, D)`` for ``h = n_heads`` heads of ``d`` coordinates, model width D;
a bias ``(h*d,)`` is permuted the same way.
"""

from __future__ import annotations

import torch

from .utils import check_positive_int

__all__ = ["interleaved_to_half", "half_to_interleaved", "layout_permutation"]


def _check(W: torch.Tensor, n_heads: int, who: str) -> tuple[int, int]:
    """``(h, d)`` for a projection ``W`` ``(h*d, D)`` or a bias ``(h*d,)``."""
    check_positive_int(n_heads, "n_heads")
    if not isinstance(W, torch.Tensor) or W.dim() not in (1, 2):
        raise ValueError(
            f"{who}: W must be a 2-D projection (n_heads*d_head, D) or a 1-D bias "
            f"(n_heads*d_head,) tensor, got "
            + (
                f"shape {tuple(W.shape)}"
                if isinstance(W, torch.Tensor)
                else f"a {type(W).__name__}"
            )
        )
    rows = W.shape[0]
    if rows % n_heads:
        raise ValueError(
            f"{who}: W has {rows} rows, which n_heads={n_heads} does not divide "
            "(the rows are n_heads blocks of d_head)"
        )
    d = rows // n_heads
    if d % 2:
        raise ValueError(
            f"{who}: d_head = {rows} rows / {n_heads} heads = {d} must be even "
            "(RoPE rotates coordinates in pairs)"
        )
    return n_heads, d


def interleaved_to_half(W: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of a query/key projection ``W`` ``(h*d, D)`` (or a bias ``(h*d,)``) from
    the interleaved layout to the half layout, head by head; a new tensor.

    Within a head, new row a*d/2 + i is old row 2i + a (a = 0, 1; i < d/2):
    Hugging Face's ``permute(w, n_heads)``.
    """
    h, d = _check(W, n_heads, "interleaved_to_half")
    rest = W.shape[1:]
    # (h, d/2, 2, ...) -> (h, 2, d/2, ...): pair index outer, part (re/im) inner;
    # indexing copies, where a reshape is a view of W when d = 2 (the identity)
    perm = layout_permutation(d).to(W.device)  # (d,)
    return W.reshape(h, d, *rest)[:, perm].reshape(W.shape)


def half_to_interleaved(W: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The inverse of ``interleaved_to_half``: rows of ``W`` ``(h*d, D)`` (or a bias
    ``(h*d,)``) from the half layout to the interleaved layout; a new tensor.

    Within a head, new row 2i + a is old row a*d/2 + i.
    """
    h, d = _check(W, n_heads, "half_to_interleaved")
    rest = W.shape[1:]
    # (h, 2, d/2, ...) -> (h, d/2, 2, ...): the inverse permutation (a copy, as above)
    inverse = layout_permutation(d).argsort().to(W.device)  # (d,)
    return W.reshape(h, d, *rest)[:, inverse].reshape(W.shape)


def layout_permutation(d_head: int) -> torch.Tensor:
    """The index vector ``perm`` ``(d,)`` with ``x_half = x_interleaved[..., perm]``:
    ``(0, 2, .., d-2, 1, 3, .., d-1)``."""
    check_positive_int(d_head, "d_head")
    if d_head % 2:
        raise ValueError(f"d_head must be even (RoPE rotates pairs), got {d_head}")
    # the first halves of the pairs, then the second halves
    return torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))

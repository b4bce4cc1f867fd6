"""Position on a graph: shortest-path distances, Graphormer's spatial bias and degree
centrality (Ying et al., 2021), and Laplacian eigenvectors (Dwivedi et al., 2020).

A graph has no order, so a node's "position" is its place in the graph's structure.
Two ways of handing that structure to attention, both read from side inputs
(``ctx.inputs``):

* **Graphormer** biases the scores of every head by a learned scalar indexed by the
  shortest-path distance between query and key, and adds a learned embedding of each
  node's degree to its features::

      omega_hij = q_i . k_j / sqrt(d) + b_h(spd_ij)   spd clipped at max_dist, one
                                                      more entry for "unreachable"
      x_i <- x_i + z(deg_i)                            deg clipped at max_degree

* **Laplacian eigenvectors** give each node k coordinates, the eigenvectors of the
  normalised Laplacian ``L = I - D^(-1/2) A D^(-1/2)`` for the k smallest eigenvalues
  after the trivial one, projected into the input: ``x_i <- x_i + W u_i``.

Conventions. Graphs are undirected and simple: a dense 0/1 adjacency ``(n, n)`` or
``(b, n, n)``, symmetric, with a zero diagonal; anything else is refused with a
``ValueError``. Unreachable pairs get the hop count ``UNREACHABLE = -1`` (Graphormer's
Floyd-Warshall writes 510 and its collators then mask such pairs with -inf; here the
bias has its own learned entry for them).

The graph algorithms themselves (shortest paths, degrees, Laplacian eigenvectors,
sign conventions, random graphs) live in ``posenc_lib.encodings.graph_algorithms``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int, compiling
from .graph_algorithms import (
    UNREACHABLE,
    laplacian_eigenvectors,
    node_degrees,
    random_connected_graphs,
    shortest_path_distances,
)

__all__ = [
    "SpatialBias",
    "Graphormer",
    "LaplacianPE",
]


def _check_index_input(t, name: str, shape: tuple, minimum: int) -> torch.Tensor:
    if (
        not isinstance(t, torch.Tensor)
        or t.is_floating_point()
        or t.is_complex()
        or t.dtype == torch.bool
    ):
        raise TypeError(
            f"inputs[{name!r}] must be an integer tensor, got "
            f"{getattr(t, 'dtype', type(t).__name__)}"
        )
    if tuple(t.shape) != shape:
        what = " (one row per query, one column per key)" if len(shape) == 3 else ""
        raise ValueError(
            f"inputs[{name!r}] must have shape {shape}{what}, got {tuple(t.shape)}"
        )
    if t.numel() and t.min() < minimum:
        raise ValueError(
            f"inputs[{name!r}] must be >= {minimum}, got a minimum of {int(t.min())}"
        )
    return t.long()


class SpatialBias(PositionalEncoding):
    """Graphormer's spatial encoding alone: head h adds ``b_h(spd_ij)`` to its scaled
    scores, a learned scalar per head and hop count.

    The table ``spatial`` ``(max_dist + 2, h)`` has one row per distance 0 .. max_dist
    (longer paths share row max_dist) and a last row for ``UNREACHABLE`` pairs.
    Graphormer keeps 512 rows (distance + 1, row 0 for padding) and no clipping; its
    data collators instead mask pairs at distance >= 20, unreachable ones included,
    with -inf (``collator`` in microsoft/Graphormer ``graphormer/data/collator.py``,
    ``spatial_pos_max``). Initialised N(0, 0.02) as Graphormer's ``init_params``. The
    bias ignores the integer positions: only the graph speaks.
    """

    side_inputs = {"spd": "(b, n, n) int64 shortest-path hop counts, -1 = unreachable"}
    reuse = frozenset({"score_bias"})  # the graph's: once per forward pass
    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a learned per-head scalar b_h(spd_ij)",
    }

    def __init__(self, n_heads: int, max_dist: int = 20):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.max_dist = check_positive_int(max_dist, "max_dist")
        self.spatial = nn.Embedding(self.max_dist + 2, self.n_heads)  # (D + 2, h)
        nn.init.normal_(self.spatial.weight, std=0.02)

    def spatial_index(self, spd: torch.Tensor) -> torch.Tensor:
        """Hop counts -> rows of ``spatial``: ``min(spd, max_dist)``, and
        ``max_dist + 1`` for ``UNREACHABLE``."""
        clipped = spd.clamp(max=self.max_dist)
        return torch.where(spd == UNREACHABLE, self.max_dist + 1, clipped)

    def rows(self, spd: torch.Tensor, b: int, i: int, j: int) -> torch.Tensor:
        """The side input ``spd`` ``(b, i, j)``, checked, as rows of ``spatial``."""
        checked = _check_index_input(spd, "spd", (b, i, j), minimum=UNREACHABLE)
        return self.spatial_index(checked)  # (b, i, j)

    def score_bias(self, q, k, q_pos, k_pos, ctx: Context) -> torch.Tensor:
        check_heads(q, self, self.n_heads)
        b, _, i, _ = q.shape
        rows = self.rows(ctx.inputs["spd"], b, i, k.shape[2])  # (b, i, j)
        # b_h(spd_ij): one learned scalar per head and (clipped) distance
        bias = self.spatial(rows)  # (b, i, j, h)
        return bias.permute(0, 3, 1, 2).to(q.dtype)  # (b, h, i, j)

    def score_mod(self, q_pos, k_pos, ctx: Context):
        """FlexAttention form: ``score + b_h(spd_ij)``, one table read per pair."""
        check_heads(ctx.need("q", type(self).__name__), self, self.n_heads)
        b, i = q_pos.shape[:2]
        rows = self.rows(ctx.inputs["spd"], b, i, k_pos.shape[1])  # (b, i, j)
        table = self.spatial.weight  # (max_dist + 2, h)

        def mod(score, b, h, q_idx, kv_idx):
            # s + b_h(spd_ij)
            return score + table[rows[b, q_idx, kv_idx], h]

        return mod

    def example_inputs(self, b, n, generator=None):
        adj = random_connected_graphs(b, n, n // 3, generator)  # (b, n, n)
        return {"spd": shortest_path_distances(adj)}

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_dist={self.max_dist}"


class Graphormer(SpatialBias):
    """Graphormer's spatial bias and degree centrality (no edge encoding, no graph
    token): ``x_i <- x_i + z(deg_i)`` once on the input, then ``b_h(spd_ij)`` in every
    attention call, the same table in every layer as Graphormer computes its bias once
    (``GraphormerGraphEncoder.forward``).
    Paper: Ying et al., 2021.

    The degree table ``degree`` ``(max_degree + 1, D)`` clips larger degrees to
    ``max_degree``. For an undirected graph Graphormer adds an in-degree and an
    out-degree embedding of the same degree (``GraphNodeFeature``), i.e. one table
    holding their sum; this class keeps that one table.
    """

    side_inputs = {
        "spd": "(b, n, n) int64 shortest-path hop counts, -1 = unreachable",
        "degree": "(b, n) int64 node degrees",
    }
    four_terms = {
        "content-content": "kept",
        "content-position": "kept (degree embedding z(deg) through W_k)",
        "position-content": "kept (degree embedding z(deg) through W_q)",
        "position-position": "replaced by b_h(spd_ij), plus z(deg) terms",
    }

    def __init__(
        self, d_model: int, n_heads: int, max_dist: int = 20, max_degree: int = 32
    ):
        super().__init__(n_heads, max_dist)
        self.d_model = check_positive_int(d_model, "d_model")
        self.max_degree = check_positive_int(max_degree, "max_degree")
        self.degree = nn.Embedding(self.max_degree + 1, self.d_model)  # (deg + 1, D)
        nn.init.normal_(self.degree.weight, std=0.02)

    def encode_input(self, x, pos, ctx: Context) -> torch.Tensor:
        deg = _check_index_input(ctx.inputs["degree"], "degree", x.shape[:2], 0)
        # x_i + z(min(deg_i, max_degree))
        return x + self.degree(deg.clamp(max=self.max_degree)).to(x.dtype)

    def example_inputs(self, b, n, generator=None):
        adj = random_connected_graphs(b, n, n // 3, generator)  # (b, n, n)
        return {"spd": shortest_path_distances(adj), "degree": node_degrees(adj)}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_degree={self.max_degree}"


class LaplacianPE(PositionalEncoding):
    """Laplacian eigenvector encoding (Dwivedi et al.): ``x_i <- x_i + W u_i + c``, one
    ``Linear(k, D)`` of the k eigenvectors read from ``ctx.inputs["eigvecs"]``
    (``laplacian_eigenvectors``), as ``embedding_lap_pos_enc`` in
    graphdeeplearning/graphtransformer.
    Paper: Dwivedi and Bresson, 2021.

    Sign flips are augmentation, applied to the inputs while training
    (``random_sign_flip``), as the authors do in their training loop; the module
    itself is deterministic.
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "kept (W u_j through W_k)",
        "position-content": "kept (W u_i through W_q)",
        "position-position": "kept (u_i^T W^T W_q W_k^T W u_j)",
    }
    side_inputs = {"eigvecs": "(b, n, k) float Laplacian eigenvectors"}

    def __init__(self, d_model: int, k: int = 4):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.k = check_positive_int(k, "k")
        self.proj = nn.Linear(self.k, self.d_model)

    def encode_input(self, x, pos, ctx: Context) -> torch.Tensor:
        u = ctx.inputs["eigvecs"]
        if not isinstance(u, torch.Tensor) or not u.is_floating_point():
            raise TypeError(
                "inputs['eigvecs'] must be a floating-point tensor (b, n, k), got "
                f"{getattr(u, 'dtype', type(u).__name__)}"
            )
        if tuple(u.shape) != (*x.shape[:2], self.k):
            raise ValueError(
                f"inputs['eigvecs'] must have shape {(*x.shape[:2], self.k)} "
                f"(k = {self.k}), got {tuple(u.shape)}"
            )
        if not compiling() and not torch.isfinite(u).all():
            raise ValueError(
                "inputs['eigvecs'] must be finite (no NaN or inf): a NaN eigenvector "
                "entry would make every output NaN"
            )
        # x_i + W u_i + c
        return x + self.proj(u.to(x.dtype))

    def example_inputs(self, b, n, generator=None):
        adj = random_connected_graphs(b, n, n // 3, generator)  # (b, n, n)
        return {"eigvecs": laplacian_eigenvectors(adj, self.k)}

    def extra_repr(self) -> str:
        return f"k={self.k}"


@register("graphormer")
def _make_graphormer(*, d_model: int, n_heads: int, max_len: int) -> Graphormer:
    return Graphormer(d_model, n_heads)


@register("laplacian")
def _make_laplacian(*, d_model: int, n_heads: int, max_len: int) -> LaplacianPE:
    return LaplacianPE(d_model, k=4)

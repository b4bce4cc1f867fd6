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
"""

from __future__ import annotations

import torch
from torch import nn

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_nonnegative_int, check_positive_int

__all__ = [
    "UNREACHABLE",
    "shortest_path_distances",
    "node_degrees",
    "normalized_laplacian",
    "laplacian_eigenvectors",
    "canonical_sign",
    "random_sign_flip",
    "random_connected_graphs",
    "SpatialBias",
    "Graphormer",
    "LaplacianPE",
]

UNREACHABLE = -1  # hop count of a pair with no path between them


def _check_adjacency(
    adjacency: torch.Tensor, name: str = "adjacency", weighted: bool = False
) -> torch.Tensor:
    """A dense adjacency ``(n, n)`` or ``(b, n, n)``: symmetric, zero diagonal, with 0/1
    entries (returned as bool) or, when ``weighted``, finite entries >= 0 (returned as
    float64). Anything else gets a ``TypeError``/``ValueError`` naming the
    constraint."""
    if not isinstance(adjacency, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor (n, n) or (b, n, n), "
            f"got {type(adjacency).__name__}"
        )
    if adjacency.is_complex():
        raise TypeError(f"{name} must be real, got dtype {adjacency.dtype}")
    if adjacency.dim() not in (2, 3) or adjacency.shape[-1] != adjacency.shape[-2]:
        raise ValueError(
            f"{name} must be square, (n, n) or (b, n, n), got {tuple(adjacency.shape)}"
        )
    if adjacency.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one node, got 0")
    if weighted:
        a = adjacency.to(torch.float64)
        if not torch.isfinite(a).all() or (a < 0).any():
            raise ValueError(f"{name} must hold finite weights >= 0")
    else:
        binary = (adjacency == 0) | (adjacency == 1)
        if not binary.all():
            raise ValueError(
                f"{name} must hold only 0 and 1 (a dense, unweighted adjacency); "
                f"found {adjacency[~binary].flatten()[0].item()!r}"
            )
        a = adjacency.bool()
    if not torch.equal(a, a.transpose(-1, -2)):
        raise ValueError(
            f"{name} must be symmetric (an undirected graph); directed graphs are not "
            "supported"
        )
    if torch.diagonal(a, dim1=-2, dim2=-1).any():
        raise ValueError(f"{name} must have a zero diagonal (no self-loops)")
    return a


def shortest_path_distances(adjacency: torch.Tensor) -> torch.Tensor:
    """Hop counts of the shortest paths between every pair of nodes, by breadth-first
    search run on all sources at once.

    ``adjacency`` ``(n, n)`` or ``(b, n, n)``: 0/1, symmetric, zero diagonal (bool, int
    or float). Returns int64 of the same shape: 0 on the diagonal, the number of edges
    on a shortest path elsewhere, and ``UNREACHABLE`` (-1) where no path exists.
    """
    a = _check_adjacency(adjacency)
    n = a.shape[-1]
    step = a.to(torch.float32)  # one hop, as a matrix to multiply by
    reached = torch.eye(n, dtype=torch.bool, device=a.device).expand_as(a).clone()
    spd = torch.full(a.shape, UNREACHABLE, dtype=torch.long, device=a.device)
    spd[reached] = 0
    for hops in range(1, n):
        # nodes one edge beyond the reached set of each source, not reached before
        frontier = ((reached.to(torch.float32) @ step) > 0) & ~reached
        if not frontier.any():
            break
        spd[frontier] = hops
        reached |= frontier
    return spd


def node_degrees(adjacency: torch.Tensor) -> torch.Tensor:
    """Degrees ``(n,)`` or ``(b, n)`` int64 of a 0/1 adjacency ``(n, n)`` or
    ``(b, n, n)`` (checked as in ``shortest_path_distances``)."""
    return _check_adjacency(adjacency).sum(-1)


def canonical_sign(vectors: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    """Flip each column of ``vectors`` ``(..., n, k)`` so that its entry of largest
    magnitude is positive; near-ties (within ``rtol`` of the largest) are broken by the
    lowest node index.

    The rule depends on node values only up to ties: when a symmetry of the graph maps
    an eigenvector u to -u, its largest entries come in +/- pairs and the lowest index,
    i.e. the node order, decides. No rule can do better in that case, which is why
    Dwivedi et al. flip signs at random during training instead (``random_sign_flip``).
    """
    if not isinstance(vectors, torch.Tensor) or not vectors.is_floating_point():
        raise TypeError(
            "vectors must be a floating-point tensor (..., n, k), got "
            f"{getattr(vectors, 'dtype', type(vectors).__name__)}"
        )
    if vectors.dim() < 2:
        raise ValueError(f"vectors must be (..., n, k), got {tuple(vectors.shape)}")
    mag = vectors.abs()  # (..., n, k)
    top = mag.amax(-2, keepdim=True)  # (..., 1, k)
    near = mag >= top * (1 - rtol)  # candidates for "largest", (..., n, k)
    first = near.to(torch.uint8).argmax(-2, keepdim=True)  # lowest candidate index
    sign = torch.sign(vectors.gather(-2, first))  # (..., 1, k)
    return vectors * torch.where(sign == 0, torch.ones_like(sign), sign)


def random_sign_flip(
    vectors: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``vectors`` ``(b, n, k)`` with each of the k columns of each graph multiplied by
    +1 or -1 at random (probability 1/2 each).

    Dwivedi et al. train this way so that the model cannot rely on an eigenvector's
    arbitrary sign; their code (``train/train_molecules_graph_regression.py`` in
    graphdeeplearning/graphtransformer) draws one flip per column for a whole batch,
    this function one per graph.
    """
    if not isinstance(vectors, torch.Tensor) or not vectors.is_floating_point():
        raise TypeError(
            "vectors must be a floating-point tensor (b, n, k), got "
            f"{getattr(vectors, 'dtype', type(vectors).__name__)}"
        )
    if vectors.dim() != 3:
        raise ValueError(f"vectors must be (b, n, k), got {tuple(vectors.shape)}")
    b, _, k = vectors.shape
    coins = torch.randint(0, 2, (b, 1, k), generator=generator)  # (b, 1, k)
    return vectors * (2 * coins - 1).to(vectors)


def normalized_laplacian(
    adjacency: torch.Tensor, weighted: bool = False
) -> torch.Tensor:
    """``L = I - D^(-1/2) A D^(-1/2)`` ``(n, n)`` or ``(b, n, n)``, float64, for a 0/1
    adjacency (or, with ``weighted``, symmetric weights >= 0), zero diagonal.

    An isolated node gets ``D^(-1/2) = 0``, so its row of L is the identity's
    (``L_ii = 1``), as in PyTorch Geometric's ``get_laplacian(normalization="sym")``
    and in Dwivedi et al., who clip the degree to 1. (networkx's
    ``normalized_laplacian_matrix`` normalises ``D - A`` instead and puts 0 there.)
    """
    a = _check_adjacency(adjacency, weighted=weighted).to(torch.float64)
    n = a.shape[-1]
    deg = a.sum(-1)  # (..., n)
    # D^(-1/2), with 0 for an isolated node
    safe = torch.where(deg > 0, deg, torch.ones_like(deg))
    d_inv_sqrt = torch.where(deg > 0, safe.rsqrt(), torch.zeros_like(deg))
    # L = I - D^(-1/2) A D^(-1/2)
    return torch.eye(n, dtype=torch.float64, device=a.device) - (
        d_inv_sqrt[..., :, None] * a * d_inv_sqrt[..., None, :]
    )  # (..., n, n)


def laplacian_eigenvectors(
    adjacency: torch.Tensor,
    k: int,
    sign: str | None = "canonical",
    return_eigenvalues: bool = False,
    weighted: bool = False,
):
    """The k eigenvectors ``(n, k)`` (or ``(b, n, k)``) of the normalised Laplacian
    ``L = I - D^(-1/2) A D^(-1/2)`` for its k smallest eigenvalues after the first,
    in ascending order of eigenvalue (as Dwivedi et al.: ``EigVec[:, 1:k+1]``).

    * Eigenvectors are unit-norm, computed in float64 and returned in the default
      dtype. Their sign is arbitrary: ``sign="canonical"`` applies
      ``canonical_sign``, ``sign=None`` returns them as ``torch.linalg.eigh`` does.
      For a repeated eigenvalue even the basis of its eigenspace is arbitrary.
    * An isolated node (degree 0) gets ``D^(-1/2) = 0`` (as PyTorch Geometric's
      ``get_laplacian``; Dwivedi et al. clip the degree to 1, which gives the same L):
      its row of L is the identity's, so it contributes an eigenvalue 1.
    * Only the first eigenvalue is dropped. A graph with c components that have
      edges has c zero eigenvalues, so c - 1 of the returned vectors are (weighted)
      component indicators; an isolated node adds an eigenvalue 1, not 0.
    * ``k`` must satisfy ``1 <= k < n``: a graph with n nodes has n - 1 eigenvectors
      after the trivial one (pad with zeros yourself to batch smaller graphs).
    * ``weighted=True`` accepts any symmetric matrix of weights >= 0 with a zero
      diagonal (Tab-PET's correlation graphs); D then holds the weighted degrees.

    With ``return_eigenvalues``, returns ``(vectors, eigenvalues)``, the eigenvalues
    ``(k,)`` or ``(b, k)``.
    """
    _check_adjacency(adjacency, weighted=weighted)  # before k, whose bound is n
    k = check_positive_int(k, "k")
    n = adjacency.shape[-1]
    if k >= n:
        raise ValueError(
            f"k must be < n = {n}: a graph with {n} nodes has only {n - 1} "
            f"eigenvectors after the trivial one, got k = {k}"
        )
    if sign not in ("canonical", None):
        raise ValueError(f"sign must be 'canonical' or None, got {sign!r}")
    lap = normalized_laplacian(adjacency, weighted=weighted)  # (..., n, n)
    values, vectors = torch.linalg.eigh(lap)  # ascending eigenvalues
    values, vectors = values[..., 1 : k + 1], vectors[..., 1 : k + 1]
    if sign == "canonical":
        vectors = canonical_sign(vectors)
    dtype = torch.get_default_dtype()
    vectors = vectors.to(dtype)
    return (vectors, values.to(dtype)) if return_eigenvalues else vectors


def random_connected_graphs(
    b: int,
    n: int,
    extra_edges: int = 0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``b`` random connected simple graphs on ``n`` nodes, as a ``(b, n, n)`` bool
    adjacency: a random recursive tree (in a random order of the nodes, node number t
    joins a uniformly chosen earlier one) plus ``extra_edges`` more node pairs drawn
    uniformly (pairs that repeat an edge or a node add nothing)."""
    b = check_positive_int(b, "b")
    n = check_positive_int(n, "n")
    extra_edges = check_nonnegative_int(extra_edges, "extra_edges")
    order = torch.argsort(torch.rand(b, n, generator=generator), dim=-1)  # (b, n)
    # tree: the node at place t (t >= 1) joins the node at a place < t
    t = torch.arange(1, n)  # (n - 1,)
    place = (torch.rand(b, n - 1, generator=generator) * t).long()  # (b, n - 1)
    child, parent = order[:, 1:], order.gather(1, place)  # (b, n - 1) each
    extra = torch.randint(0, n, (b, extra_edges, 2), generator=generator)
    u = torch.cat((child, extra[..., 0]), dim=1)  # (b, e)
    v = torch.cat((parent, extra[..., 1]), dim=1)  # (b, e)
    a = torch.zeros(b, n, n, dtype=torch.bool)
    rows = torch.arange(b)[:, None].expand_as(u)
    a[rows, u, v] = True
    a[rows, v, u] = True
    a &= ~torch.eye(n, dtype=torch.bool)  # a drawn pair (u, u) is no edge
    return a


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
        b, _, i, _ = q.shape
        rows = self.rows(ctx.inputs["spd"], b, i, k.shape[2])  # (b, i, j)
        # b_h(spd_ij): one learned scalar per head and (clipped) distance
        bias = self.spatial(rows)  # (b, i, j, h)
        return bias.permute(0, 3, 1, 2).to(q.dtype)  # (b, h, i, j)

    def score_mod(self, q_pos, k_pos, ctx: Context):
        """FlexAttention form: ``score + b_h(spd_ij)``, one table read per pair."""
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

"""Graph algorithms behind the graph encodings: shortest-path distances, degrees,
the normalised Laplacian and its eigenvectors, eigenvector sign conventions, and
random connected graphs for examples and tests.

Conventions. Graphs are undirected and simple: a dense 0/1 adjacency ``(n, n)`` or
``(b, n, n)``, symmetric, with a zero diagonal; anything else is refused with a
``ValueError`` (``weighted=True``, where offered, accepts symmetric weights >= 0
instead). Unreachable pairs get the hop count ``UNREACHABLE = -1`` (Graphormer's
Floyd-Warshall writes 510 and its collators then mask such pairs with -inf). The
normalised Laplacian is ``L = I - D^(-1/2) A D^(-1/2)``, with ``D^(-1/2) = 0`` for an
isolated node.
"""

from __future__ import annotations

import torch

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
    if not torch.isfinite(vectors).all():
        raise ValueError("vectors must be finite (no NaN or inf)")
    if (
        isinstance(rtol, bool)
        or not isinstance(rtol, (int, float))
        or not 0 <= rtol < 1
    ):
        raise ValueError(f"rtol must be a number in [0, 1), got {rtol!r}")
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
    if not torch.isfinite(vectors).all():
        raise ValueError("vectors must be finite (no NaN or inf)")
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

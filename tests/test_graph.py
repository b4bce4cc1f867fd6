"""Graph encodings: shortest paths, Graphormer's bias and centrality, Laplacian
eigenvectors. Properties, then golden values, then parity with networkx (live) and with
Hugging Face's Graphormer and Dwivedi et al.'s Laplacian code (golden vectors from
tests/golden/make_graph_golden.py)."""

import json
import math
import pathlib

import networkx as nx
import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.graph import Graphormer, LaplacianPE, SpatialBias
from posenc_lib.encodings.graph_algorithms import (
    UNREACHABLE,
    canonical_sign,
    laplacian_eigenvectors,
    node_degrees,
    normalized_laplacian,
    random_connected_graphs,
    random_sign_flip,
    shortest_path_distances,
)

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "graph_references.json").read_text()
)


def adjacency(n, edges):
    a = torch.zeros(n, n, dtype=torch.long)
    for u, v in edges:
        a[u, v] = a[v, u] = 1
    return a


def random_graph(n, p, seed):
    """An Erdos-Renyi graph (may be disconnected), as a 0/1 adjacency and networkx."""
    g = nx.gnp_random_graph(n, p, seed=seed)
    a = torch.zeros(n, n, dtype=torch.long)
    for u, v in g.edges:
        a[u, v] = a[v, u] = 1
    return a, g


# ---------------------------------------------------------------- shortest paths


def test_shortest_paths_of_a_path_are_index_differences():
    n = 7
    a = adjacency(n, [(t, t + 1) for t in range(n - 1)])
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert torch.equal(shortest_path_distances(a), (i - j).abs())
    assert shortest_path_distances(a).dtype == torch.long


@pytest.mark.parametrize("seed", range(6))
def test_shortest_paths_form_a_metric_and_neighbours_are_one_hop(seed):
    a = random_connected_graphs(1, 12, 4, torch.Generator().manual_seed(seed))[0]
    spd = shortest_path_distances(a)
    assert (spd >= 0).all() and torch.equal(spd, spd.T)
    assert (torch.diagonal(spd) == 0).all()
    assert torch.equal(spd == 1, a)
    # triangle inequality: spd_ij <= spd_ik + spd_kj for every k
    assert (spd[:, None, :] <= spd[:, :, None] + spd[None, :, :]).all()


def test_unreachable_pairs_get_minus_one_and_batches_match_single_graphs():
    split = torch.tensor(GOLDEN["laplacian"][1]["adjacency"])  # 2 parts + isolated
    spd = shortest_path_distances(split)
    assert UNREACHABLE == -1
    assert (spd[:4, 4:] == -1).all() and (spd[8, :8] == -1).all()
    assert (spd[:4, :4] >= 0).all()
    batch = torch.stack([split, split.flip(0).flip(1)])
    assert torch.equal(shortest_path_distances(batch)[0], spd)
    assert torch.equal(
        shortest_path_distances(batch)[1], shortest_path_distances(batch[1])
    )


@pytest.mark.parametrize("seed", range(8))
def test_shortest_paths_match_networkx(seed):
    """Parity with networkx's BFS, including disconnected graphs."""
    a, g = random_graph(14, 0.15, seed)
    spd = shortest_path_distances(a)
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    expected = torch.tensor(
        [[lengths[i].get(j, UNREACHABLE) for j in range(14)] for i in range(14)]
    )
    assert torch.equal(spd, expected)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (torch.zeros(3, 4), ValueError, "square"),
        (torch.zeros(5), ValueError, "square"),
        (torch.tensor([[0, 2], [2, 0]]), ValueError, "only 0 and 1"),
        (torch.tensor([[0, 1], [0, 0]]), ValueError, "symmetric"),
        (torch.tensor([[1, 0], [0, 0]]), ValueError, "zero diagonal"),
        ([[0, 1], [1, 0]], TypeError, "torch.Tensor"),
        (torch.zeros(0, 0), ValueError, "at least one node"),
    ],
)
def test_bad_adjacency_is_refused_with_the_constraint_named(bad, error, match):
    with pytest.raises(error, match=match):
        shortest_path_distances(bad)
    with pytest.raises(error, match=match):
        laplacian_eigenvectors(bad, 1)


def test_degrees_count_neighbours():
    a = adjacency(4, [(0, 1), (0, 2), (0, 3)])
    assert node_degrees(a).tolist() == [3, 1, 1, 1]


def test_random_connected_graphs_are_connected_simple_and_seeded():
    a = random_connected_graphs(50, 10, 3, torch.Generator().manual_seed(0))
    assert a.shape == (50, 10, 10) and a.dtype == torch.bool
    assert (shortest_path_distances(a) >= 0).all()  # connected
    assert torch.equal(a, a.transpose(1, 2))
    assert not torch.diagonal(a, dim1=1, dim2=2).any()
    again = random_connected_graphs(50, 10, 3, torch.Generator().manual_seed(0))
    assert torch.equal(a, again)


# ---------------------------------------------------------------- Graphormer


def graph_inputs(seed, b=2, n=9):
    a = random_connected_graphs(b, n, 3, torch.Generator().manual_seed(seed))
    return {"spd": shortest_path_distances(a), "degree": node_degrees(a)}


def bias_of(pe, spd):
    b, n, _ = spd.shape
    q = torch.zeros(b, pe.n_heads, n, 4, dtype=pe.spatial.weight.dtype)
    return pe.score_bias(q, q, None, None, ctx=pl.Context(inputs={"spd": spd}))


def test_bias_depends_only_on_the_clipped_distance():
    pe = SpatialBias(n_heads=3, max_dist=3)
    spd = torch.tensor([[[0, 1, 2, 3, 4, 9, -1]]]).expand(1, 7, 7).clone()
    bias = bias_of(pe, spd)[0, :, 0]  # (h, j): one row, distances 0..4, 9, none
    w = pe.spatial.weight.T  # (h, max_dist + 2)
    assert_close(bias[:, :4], w[:, :4])
    assert_close(bias[:, 4], w[:, 3])  # 4 > max_dist: clipped to row 3
    assert_close(bias[:, 5], w[:, 3])  # so is 9
    assert_close(bias[:, 6], w[:, 4])  # unreachable: its own row
    assert pe.spatial.weight.shape == (5, 3)


def test_graphormer_is_permutation_equivariant():
    """Relabelling the nodes, together with spd and degrees, relabels the outputs."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(5, 16, 2, 2, pe=Graphormer(16, 2, max_dist=4)).double()
    inputs = graph_inputs(0)
    tokens = torch.randint(5, (2, 9))
    perm = torch.randperm(9)
    permuted = {
        "spd": inputs["spd"][:, perm][:, :, perm],
        "degree": inputs["degree"][:, perm],
    }
    out = model(tokens, causal=False, inputs=inputs)
    out_p = model(tokens[:, perm], causal=False, inputs=permuted)
    assert_close(out_p, out[:, perm])
    # and the structure matters: other graphs give other outputs
    other = model(tokens, causal=False, inputs=graph_inputs(1))
    assert (other - out).abs().max() > 1e-3


def test_graphormer_adds_the_degree_embedding_once_on_the_input():
    pe = Graphormer(8, 2, max_degree=3)
    x = torch.zeros(1, 5, 8)
    deg = torch.tensor([[0, 1, 3, 4, 10]])
    y = pe.encode_input(x, None, ctx=pl.Context(inputs={"degree": deg}))
    assert_close(y[0], pe.degree.weight[[0, 1, 3, 3, 3]])  # clipped at max_degree


@pytest.mark.parametrize(
    "spd, error, match",
    [
        (torch.zeros(1, 4, 4), TypeError, "integer"),
        (torch.zeros(1, 4, 4, dtype=torch.bool), TypeError, "integer"),
        (torch.zeros(1, 4, 5, dtype=torch.long), ValueError, r"shape \(1, 4, 4\)"),
        (torch.full((1, 4, 4), -2), ValueError, ">= -1"),
    ],
)
def test_bad_spd_is_refused(spd, error, match):
    pe = SpatialBias(2)
    q = torch.zeros(1, 2, 4, 4)
    with pytest.raises(error, match=match):
        pe.score_bias(q, q, None, None, ctx=pl.Context(inputs={"spd": spd}))


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="max_dist must be > 0"):
        SpatialBias(2, max_dist=0)
    with pytest.raises(TypeError, match="max_degree must be an int"):
        Graphormer(8, 2, max_degree=2.5)


@pytest.mark.parametrize("case", GOLDEN["graphormer"], ids=lambda c: c["name"])
def test_graphormer_matches_hugging_face(case):
    """HF shifts every index by +1 (0 = padding) and writes 510 for unreachable pairs
    (row 511 after the shift); our row d is HF's row d + 1 and our last row HF's 511.
    HF adds an in-degree and an out-degree table at index degree + 1; for an
    undirected graph both read the same index, so our one table holds their sum."""
    n = case["n"]
    a = adjacency(n, case["edges"])
    spd, deg = shortest_path_distances(a), node_degrees(a)
    hf_spatial = torch.tensor(case["spatial_pos"])
    assert torch.equal(torch.where(spd == UNREACHABLE, 511, spd + 1), hf_spatial)
    assert torch.equal(deg + 1, torch.tensor(case["in_degree"]))

    pe = Graphormer(8, 4, max_dist=24, max_degree=14).double()
    rows = {int(r): v for r, v in case["spatial_table_rows"].items()}
    in_t = torch.tensor(case["in_degree_table"], dtype=torch.float64)
    out_t = torch.tensor(case["out_degree_table"], dtype=torch.float64)
    with torch.no_grad():
        for d in range(25):
            pe.spatial.weight[d] = torch.tensor(rows[d + 1])
        pe.spatial.weight[25] = torch.tensor(rows[511])
        pe.degree.weight.copy_(in_t[1:] + out_t[1:])
    bias = bias_of(pe, spd[None])[0]  # (h, n, n)
    assert_close(bias, torch.tensor(case["bias"], dtype=torch.float64))
    x = torch.zeros(1, n, 8, dtype=torch.float64)
    feats = pe.encode_input(x, None, ctx=pl.Context(inputs={"degree": deg[None]}))
    assert_close(feats[0], torch.tensor(case["node_features"], dtype=torch.float64))


def test_hugging_face_collator_masks_pairs_19_hops_apart_and_unreachable_ones():
    """What the chapter says about Graphormer's pipeline: HF's collator compares the
    shifted index (hops + 1) with spatial_pos_max = 20, so pairs >= 19 hops apart and
    unreachable pairs get -inf (the original collator compares hops >= 20)."""
    for case in GOLDEN["graphormer"]:
        spd = shortest_path_distances(adjacency(case["n"], case["edges"]))
        expected = (spd >= 19) | (spd == UNREACHABLE)
        assert torch.equal(torch.tensor(case["collator_masked"]), expected)


# ---------------------------------------------------------------- Laplacian


def test_laplacian_eigenvectors_solve_the_eigenproblem_in_ascending_order():
    a = random_connected_graphs(3, 10, 4, torch.Generator().manual_seed(3))
    lap = normalized_laplacian(a)
    u, lam = laplacian_eigenvectors(a, 5, return_eigenvalues=True)
    u, lam = u.double(), lam.double()
    assert_close(lap @ u, u * lam[:, None, :], atol=1e-5, rtol=1e-5)
    assert (lam[:, 1:] >= lam[:, :-1] - 1e-6).all()
    assert_close(u.transpose(1, 2) @ u, torch.eye(5).expand(3, 5, 5).double())
    # the trivial eigenvector D^(1/2) 1 (eigenvalue 0) is the one left out
    triv = node_degrees(a).double().sqrt()
    assert_close(u.transpose(1, 2) @ triv[..., None], torch.zeros(3, 5, 1).double())
    assert (lam > 1e-6).all() and (lam <= 2 + 1e-6).all()


def test_cycle_graph_eigenvectors_are_sinusoids():
    """On a cycle, L = I - A/2 has eigenvalues 1 - cos(2 pi m / n): Fourier modes."""
    n = 12
    a = adjacency(n, [(t, (t + 1) % n) for t in range(n)])
    _, lam = laplacian_eigenvectors(a, n - 1, return_eigenvalues=True)
    expected = sorted(1 - math.cos(2 * math.pi * m / n) for m in range(n))[1:]
    assert_close(lam.double(), torch.tensor(expected, dtype=torch.float64))


def test_k_must_be_below_the_number_of_nodes():
    a = adjacency(4, [(0, 1), (1, 2), (2, 3)])
    laplacian_eigenvectors(a, 3)
    with pytest.raises(ValueError, match="k must be < n = 4"):
        laplacian_eigenvectors(a, 4)
    with pytest.raises(ValueError, match="k must be > 0"):
        laplacian_eigenvectors(a, 0)
    with pytest.raises(ValueError, match="sign must be"):
        laplacian_eigenvectors(a, 2, sign="positive")


def test_an_isolated_node_is_an_eigenvector_with_eigenvalue_one():
    a = adjacency(5, [(0, 1), (1, 2), (2, 3)])  # node 4 alone
    lap = normalized_laplacian(a)
    assert lap[4, 4] == 1 and (lap[4, :4] == 0).all()
    e4 = torch.zeros(5, dtype=torch.float64)
    e4[4] = 1
    assert_close(lap @ e4, e4)  # eigenvalue 1, not 0: the node adds no zero mode
    _, lam = laplacian_eigenvectors(a, 4, return_eigenvalues=True)
    assert (lam > 1e-6).all()  # one zero eigenvalue (the path), dropped
    # a second component with an edge adds a second zero, which is kept
    two = adjacency(5, [(0, 1), (1, 2), (3, 4)])
    _, lam2 = laplacian_eigenvectors(two, 4, return_eigenvalues=True)
    assert abs(lam2[0].item()) < 1e-6


def test_canonical_sign_is_idempotent_and_undoes_any_flip():
    u = laplacian_eigenvectors(
        random_connected_graphs(1, 9, 3, torch.Generator().manual_seed(1))[0],
        4,
        sign=None,
    )
    c = canonical_sign(u)
    assert_close(canonical_sign(c), c)
    flipped = u * torch.tensor([1.0, -1.0, -1.0, 1.0])
    assert_close(canonical_sign(flipped), c)
    top = c.abs().argmax(0)
    assert (c[top, torch.arange(4)] > 0).all()


def test_random_sign_flip_multiplies_whole_columns_by_plus_or_minus_one():
    u = torch.randn(6, 5, 4)
    f = random_sign_flip(u, torch.Generator().manual_seed(0))
    ratio = f / u  # (b, n, k)
    assert_close(ratio, ratio[:, :1].expand_as(ratio))  # same sign down a column
    assert set(ratio.unique().tolist()) == {-1.0, 1.0}
    with pytest.raises(ValueError, match=r"\(b, n, k\)"):
        random_sign_flip(torch.randn(5, 4))


def test_weighted_graphs_are_accepted_only_when_asked_for():
    w = torch.tensor([[0.0, 0.5, 0.2], [0.5, 0.0, 0.9], [0.2, 0.9, 0.0]])
    with pytest.raises(ValueError, match="only 0 and 1"):
        laplacian_eigenvectors(w, 1)
    u, lam = laplacian_eigenvectors(w, 2, weighted=True, return_eigenvalues=True)
    lap = normalized_laplacian(w, weighted=True)
    assert_close(lap @ u.double(), u.double() * lam.double(), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="weights >= 0"):
        normalized_laplacian(-w, weighted=True)


def test_laplacian_pe_projects_the_eigenvectors_and_is_equivariant():
    pe = LaplacianPE(8, k=3).double()
    a = random_connected_graphs(2, 7, 2, torch.Generator().manual_seed(4))
    u = laplacian_eigenvectors(a, 3).double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    y = pe.encode_input(x, None, ctx=pl.Context(inputs={"eigvecs": u}))
    assert_close(y, x + u @ pe.proj.weight.T + pe.proj.bias)
    perm = torch.randperm(7)
    y_p = pe.encode_input(
        x[:, perm], None, ctx=pl.Context(inputs={"eigvecs": u[:, perm]})
    )
    assert_close(y_p, y[:, perm])
    with pytest.raises(ValueError, match=r"shape \(2, 7, 3\)"):
        pe.encode_input(x, None, ctx=pl.Context(inputs={"eigvecs": u[..., :2]}))
    with pytest.raises(TypeError, match="floating-point"):
        pe.encode_input(x, None, ctx=pl.Context(inputs={"eigvecs": a.long()}))


def projector(vectors, values, lo, hi):
    """Orthogonal projector onto the eigenvectors whose eigenvalue lies in [lo, hi)."""
    keep = (values >= lo) & (values < hi)
    v = vectors[:, keep]
    return v @ v.T


@pytest.mark.parametrize("case", GOLDEN["laplacian"], ids=lambda c: c["name"])
def test_laplacian_matches_dwivedi_et_al(case):
    """Same L as their code (degree clipped to 1 there, D^(-1/2) = 0 here: equal), same
    eigenvalues, same eigenvectors up to sign, and for a repeated eigenvalue the same
    eigenspace (compared through its projector)."""
    a = torch.tensor(case["adjacency"])
    lap = normalized_laplacian(a)
    assert_close(lap, torch.tensor(case["laplacian"], dtype=torch.float64))
    k = len(case["eigenvectors"][0])
    torch.set_default_dtype(torch.float64)
    try:
        u, lam = laplacian_eigenvectors(a, k, sign=None, return_eigenvalues=True)
    finally:
        torch.set_default_dtype(torch.float32)
    ref_all = torch.tensor(case["eigenvalues"], dtype=torch.float64)
    assert_close(lam, ref_all[1 : k + 1], atol=1e-8, rtol=0)
    ref_u = torch.tensor(case["eigenvectors"], dtype=torch.float64)
    # compare eigenspaces: group the k columns by (nearly) equal eigenvalue; a group
    # that continues outside columns 1 .. k has no well-defined part inside, skip it
    full = ref_all[1 : k + 1]
    compared = 0
    for value in full:
        lo, hi = value.item() - 1e-6, value.item() + 1e-6
        whole = ((ref_all >= lo) & (ref_all < hi)).sum()
        if whole != ((full >= lo) & (full < hi)).sum():
            continue
        ours, theirs = projector(u, lam, lo, hi), projector(ref_u, full, lo, hi)
        assert_close(ours, theirs, atol=1e-6, rtol=0)
        compared += 1
    assert compared >= k - 2


@pytest.mark.parametrize("case", GOLDEN["laplacian"], ids=lambda c: c["name"])
def test_laplacian_matches_networkx_except_at_isolated_nodes(case):
    """networkx normalises D - A, so an isolated node's diagonal is 0 there, 1 here."""
    a = torch.tensor(case["adjacency"])
    lap = normalized_laplacian(a)
    ref = torch.tensor(case["laplacian_networkx"], dtype=torch.float64)
    isolated = node_degrees(a) == 0
    assert_close(lap - torch.diag(isolated.double()), ref)

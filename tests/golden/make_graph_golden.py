"""Produce tests/golden/graph_references.json: Graphormer (Hugging Face), the Laplacian
eigenvector encoding (Dwivedi et al.'s code, with scipy; networkx's normalised
Laplacian) and SchNet's Gaussian smearing (PyTorch Geometric).

The course depends on none of these. Install them beside the course's torch and run:

    pip install --target /tmp/ref_graph "transformers==4.46.3" scipy
    pip install --target /tmp/ref_cy "cython<3"          # HF's .pyx needs Cython 0.29
    pip install --no-deps --target /tmp/ref_pyg torch_geometric
    PYTHONPATH=/tmp/ref_cy:/tmp/ref_graph:/tmp/ref_pyg \\
        .venv/bin/python tests/golden/make_graph_golden.py

References, and how ``tests/test_graph.py`` / ``tests/test_spatial.py`` map them:

* ``graphormer``: ``preprocess_item`` and ``GraphormerDataCollator``
  (``collating_graphormer.py``: Floyd-Warshall in ``algos_graphormer.pyx``, unreachable
  = 510, every index shifted by +1 so that 0 is padding), ``GraphormerGraphAttnBias``
  and ``GraphormerGraphNodeFeature`` (``modeling_graphormer.py``), all from
  ``transformers.models.deprecated.graphormer``. The edge encoder is zeroed so the bias
  is the spatial term plus the graph token's virtual distance (which touches only row
  and column 0, dropped by the test); the atom encoder is zeroed so the node features
  are the in-degree plus out-degree embeddings.
* ``laplacian``: the lines of ``laplacian_positional_encoding`` in
  graphdeeplearning/graphtransformer ``data/molecules.py`` (``N = diags(deg.clip(1)
  ** -0.5)``, ``L = I - N A N``, ``np.linalg.eig``, ``argsort``, ``EigVec[:, 1:k+1]``),
  the DGL graph replaced by its scipy adjacency; plus networkx's
  ``normalized_laplacian_matrix``.
* ``gaussian_smearing``: ``GaussianSmearing`` of PyTorch Geometric's
  ``torch_geometric/nn/models/schnet.py``, its class source executed alone (the
  package's imports need more than torch).
"""

import ast
import importlib.metadata
import json
import pathlib
import sys

import networkx as nx
import numpy as np
import scipy
import scipy.sparse as sp
import torch
import transformers
from transformers.models.deprecated.graphormer.collating_graphormer import (
    GraphormerDataCollator,
    preprocess_item,
)
from transformers.models.deprecated.graphormer.configuration_graphormer import (
    GraphormerConfig,
)
from transformers.models.deprecated.graphormer.modeling_graphormer import (
    GraphormerGraphAttnBias,
    GraphormerGraphNodeFeature,
)

OUT = pathlib.Path(__file__).parent / "graph_references.json"

# aspirin's 13 heavy atoms: ring C0-C5, carboxyl C6(=O7)O8, ester O9-C10(=O11)C12
ASPIRIN = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 6), (6, 7), (6, 8)]
ASPIRIN += [(1, 9), (9, 10), (10, 11), (10, 12)]
GRAPHS = {
    "aspirin": (13, ASPIRIN),
    # two components and an isolated node: unreachable pairs, a zero degree
    "split": (9, [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7)]),
    "path24": (24, [(t, t + 1) for t in range(23)]),
    "random": (15, None),
}
N_HEADS, K_EIG = 4, 5


def edges_of(name, rng):
    n, edges = GRAPHS[name]
    if edges is None:  # a random tree plus a few chords
        edges = [(t, int(rng.integers(0, t))) for t in range(1, n)]
        edges += [(0, 7), (3, 11), (5, 14)]
    return n, edges


def adjacency(n, edges):
    a = np.zeros((n, n), dtype=np.int64)
    for u, v in edges:
        a[u, v] = a[v, u] = 1
    return a


def rounded(x, digits=6):
    return np.array([float(f"{v:.{digits}g}") for v in np.ravel(x)]).reshape(
        np.shape(x)
    )


def as_list(x):
    """Outputs as nested lists, 9 significant digits (the tests compare at 1e-6)."""
    return rounded(np.asarray(x, dtype=np.float64), 9).tolist()


def graphormer_case(name, n, edges, g):
    both = [(u, v) for u, v in edges] + [(v, u) for u, v in edges]
    item = {
        "edge_index": np.array(both, dtype=np.int64).T.reshape(2, -1).tolist(),
        "num_nodes": n,
        "y": [0.0],
    }
    item = preprocess_item(item)
    config = GraphormerConfig(
        num_attention_heads=N_HEADS,
        embedding_dim=8,
        num_atoms=16,
        num_edges=16,
        num_in_degree=16,
        num_out_degree=16,
        num_spatial=512,
        multi_hop_max_dist=5,
    )
    bias_mod = GraphormerGraphAttnBias(config).eval()
    feat_mod = GraphormerGraphNodeFeature(config).eval()
    with torch.no_grad():
        bias_mod.spatial_pos_encoder.weight.copy_(
            torch.tensor(rounded(torch.randn(512, N_HEADS, generator=g).numpy()))
        )
        bias_mod.edge_encoder.weight.zero_()  # no edge term
        feat_mod.atom_encoder.weight.zero_()  # node features = degree embeddings
        for table in (feat_mod.in_degree_encoder, feat_mod.out_degree_encoder):
            table.weight.copy_(
                torch.tensor(rounded(torch.randn(16, 8, generator=g).numpy()))
            )
    batch = GraphormerDataCollator(spatial_pos_max=20)([dict(item)])
    with torch.no_grad():
        bias = bias_mod(
            input_nodes=batch["input_nodes"],
            attn_bias=torch.zeros_like(batch["attn_bias"]),  # the embedding part
            spatial_pos=batch["spatial_pos"],
            input_edges=batch["input_edges"],
            attn_edge_type=batch["attn_edge_type"],
        )  # (1, h, n + 1, n + 1), row/col 0 = graph token
        feats = feat_mod(batch["input_nodes"], batch["in_degree"], batch["out_degree"])
    masked = torch.isinf(batch["attn_bias"][0, 1:, 1:])  # the collator's -inf pairs
    return {
        "name": name,
        "n": n,
        "edges": [list(e) for e in edges],
        "spatial_pos": batch["spatial_pos"][0].tolist(),  # HF: hops + 1, 511 = none
        "in_degree": batch["in_degree"][0].tolist(),  # HF: degree + 1
        # rows 0 .. 25 and 511 of the (512, h) table: every row these graphs use
        "spatial_table_rows": {
            str(r): bias_mod.spatial_pos_encoder.weight[r].tolist()
            for r in [*range(26), 511]
        },
        "in_degree_table": feat_mod.in_degree_encoder.weight.tolist(),  # (16, 8)
        "out_degree_table": feat_mod.out_degree_encoder.weight.tolist(),
        "bias": as_list(bias[0, :, 1:, 1:]),  # (h, n, n) without the graph token
        "node_features": as_list(feats[0, 1:]),  # (n, 8) without the graph token
        "collator_masked": masked.tolist(),  # pairs set to -inf, spatial_pos_max = 20
    }


def dwivedi_laplacian(a, k):
    """graphdeeplearning/graphtransformer data/molecules.py, on a scipy adjacency."""
    A = sp.csr_matrix(a.astype(float))
    N = sp.diags(np.asarray(a.sum(1)).clip(1) ** -0.5, dtype=float)
    L = sp.eye(a.shape[0]) - N * A * N
    EigVal, EigVec = np.linalg.eig(L.toarray())
    idx = EigVal.argsort()  # increasing order
    EigVal, EigVec = EigVal[idx], np.real(EigVec[:, idx])
    return L.toarray(), np.real(EigVal), EigVec[:, 1 : k + 1]


def laplacian_case(name, n, edges):
    a = adjacency(n, edges)
    L, values, vectors = dwivedi_laplacian(a, K_EIG)
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(edges)
    L_nx = nx.normalized_laplacian_matrix(G, nodelist=range(n)).toarray()
    return {
        "name": name,
        "adjacency": a.tolist(),
        "laplacian": as_list(L),
        "laplacian_networkx": as_list(L_nx),
        "eigenvalues": as_list(values),  # all n, ascending
        "eigenvectors": as_list(vectors),  # (n, k): columns 1 .. k
    }


def load_gaussian_smearing():
    candidates = [
        pathlib.Path(p) / "torch_geometric" / "nn" / "models" / "schnet.py"
        for p in sys.path
    ]
    path = next((c for c in candidates if c.exists()), None)
    assert path is not None, "torch_geometric not found on sys.path"
    tree = ast.parse(path.read_text())
    node = next(
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name == "GaussianSmearing"
    )
    namespace = {"torch": torch, "Tensor": torch.Tensor}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace["GaussianSmearing"], str(path)


def main() -> None:
    g = torch.Generator().manual_seed(2021)
    rng = np.random.default_rng(2020)
    graphormer, laplacian = [], []
    for name in GRAPHS:
        n, edges = edges_of(name, rng)
        graphormer.append(graphormer_case(name, n, edges, g))
        if name != "path24":
            laplacian.append(laplacian_case(name, n, edges))
    smearing_cls, smearing_path = load_gaussian_smearing()
    smearing = smearing_cls(start=0.0, stop=8.0, num_gaussians=16)
    dist = torch.tensor(rounded(8.5 * torch.rand(40, generator=g).numpy())).float()
    out = {
        "sources": {
            "transformers": transformers.__version__,
            "networkx": nx.__version__,
            "scipy": scipy.__version__,
            "torch_geometric": importlib.metadata.version("torch_geometric"),
            "gaussian_smearing_file": "torch_geometric/"
            + smearing_path.split("torch_geometric/")[-1],
        },
        "graphormer": graphormer,
        "laplacian": laplacian,
        "gaussian_smearing": {
            "start": 0.0,
            "stop": 8.0,
            "num_gaussians": 16,
            "dist": dist.tolist(),
            "expansion": as_list(smearing(dist)),  # (40, 16)
        },
    }
    OUT.write_text(json.dumps(out) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

"""Checks for the exercises of book/part5/graphs_space.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect, plant
from posenc_lib.course.exercises._values import as_float, number

CHAPTER = "part5/graphs_space"

# ---------------------------------------------------------- ex-graphs-adjacency-only

BOUND_STUB = '''\
def best_accuracy(targets):
    """The best accuracy a two-layer model with the adjacency-only bias can reach on
    targets (b, n): every node's hop distance to the marked node (7 = 7 or more)."""
    ...  # your code
'''


def _bound(t: torch.Tensor) -> float:
    t = t.flatten()
    far = t[t >= 3]
    guess = torch.bincount(far).max().item() if far.numel() else 0
    return ((t <= 2).sum().item() + guess) / t.numel()


def _cases():
    g = torch.Generator().manual_seed(0)
    uniform = torch.randint(0, 8, (6, 12), generator=g)
    skewed = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 3, 4, 5, 7, 7]] * 3)
    near = torch.randint(0, 3, (4, 12), generator=g)  # nothing at 3 or more
    return [
        ("with uniform distances", uniform),
        ("of one fixed graph", skewed),
        ("all within 2 hops", near),
    ]


@exercise("ex-graphs-adjacency-only", chapter=CHAPTER, stub=BOUND_STUB)
def _(answer):
    for name, t in _cases():
        desc = f"targets {name}, shape {tuple(t.shape)}"
        got = number(call(answer, t.clone(), desc=desc), "best_accuracy(targets)")
        want = _bound(t)
        tt = t.flatten()
        if abs(got - (tt <= 2).float().mean().item()) < 1e-9 and abs(got - want) > 1e-9:
            raise Wrong(
                f"on {desc}, your bound is {got:.4f}: a node at 3 or more hops cannot "
                "tell its distance, but the model can still answer the commonest one"
            )
        if abs(got - _bound_layers(tt, 1)) < 1e-9 and abs(got - want) > 1e-9:
            raise Wrong(
                f"on {desc}, your bound is {got:.4f}, that of one layer: two layers "
                "carry information two edges"
            )
        expect(
            abs(got - want) < 1e-6,
            f"on {desc}, your bound is {got:.4f}, expected {want:.4f}",
        )
    return "your bound equals the best accuracy on three sets of targets."


def _bound_layers(t: torch.Tensor, layers: int) -> float:
    far = t[t > layers]
    guess = torch.bincount(far).max().item() if far.numel() else 0
    return ((t <= layers).sum().item() + guess) / t.numel()


plant(
    "ex-graphs-adjacency-only",
    lambda t: (t <= 2).float().mean(),
    says="commonest one",
)
plant(
    "ex-graphs-adjacency-only",
    lambda t: _bound_layers(t.flatten(), 1),
    says="that of one layer",
)
plant(
    "ex-graphs-adjacency-only",
    lambda t: ((t <= 2).sum() + torch.bincount(t[t >= 3]).max()) / t.numel(),
    says="your function raised RuntimeError",
)
plant("ex-graphs-adjacency-only", lambda t: 1.0, says="expected")

# ---------------------------------------------------------------- ex-graphs-chord

CHORD_STUB = '''\
def nearest_two_ways(lat, lon):
    """For stations at lat, lon (n,) in degrees: (by_chord, by_angle), two (n,)
    int64 tensors, each station's nearest other station by the Euclidean distance
    between unit vectors and by the great-circle angle."""
    ...  # your code
'''


def _stations():
    g = torch.Generator().manual_seed(0)
    lat = torch.rand(40, generator=g, dtype=torch.float64) * 180 - 90
    lon = torch.rand(40, generator=g, dtype=torch.float64) * 360 - 180
    # neighbours across the date line and near a pole
    lat = torch.cat([lat, torch.tensor([10.0, 10.5, 89.0, 88.5, -60.0, -60.0])])
    lon = torch.cat([lon, torch.tensor([179.5, -179.8, 0.0, 170.0, 100.0, -100.0])])
    return lat.double(), lon.double()


def _nearest_by_angle(lat, lon):
    ang = pl.great_circle_angle(lat[:, None], lon[:, None], lat[None], lon[None])
    return ang.fill_diagonal_(float("inf")).argmin(-1)


@exercise("ex-graphs-chord", chapter=CHAPTER, stub=CHORD_STUB)
def _(answer):
    lat, lon = _stations()
    desc = f"{lat.numel()} stations, some across the date line and near a pole"
    out = call(answer, lat.clone(), lon.clone(), desc=desc)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"on {desc}, return a tuple (by_chord, by_angle)")
    chord, angle = (torch.as_tensor(t).long().flatten() for t in out)
    n = lat.numel()
    for name, got in (("by_chord", chord), ("by_angle", angle)):
        expect(got.numel() == n, f"on {desc}, `{name}` has {got.numel()} entries")
        if torch.equal(got, torch.arange(n)):
            raise Wrong(
                f"on {desc}, `{name}` names every station as its own nearest: "
                "leave the station itself out"
            )
    want = _nearest_by_angle(lat, lon)
    bad = (angle != want).nonzero().flatten().tolist()
    expect(
        not bad,
        f"on {desc}, `by_angle` gives station {bad[0] if bad else 0} the neighbour "
        f"{int(angle[bad[0]]) if bad else 0}, which is not the nearest by "
        "great-circle angle",
    )
    bad = (chord != want).nonzero().flatten().tolist()
    expect(
        not bad,
        f"on {desc}, `by_chord` gives station {bad[0] if bad else 0} the neighbour "
        f"{int(chord[bad[0]]) if bad else 0}, not its nearest on the sphere: measure "
        "the chord between the unit vectors of pl.latlon_to_unit_vector",
    )
    return (
        f"on {n} stations, both give the great-circle nearest neighbour: the chord "
        "2 sin(theta/2) orders them as theta does."
    )


def _raw_degrees(lat, lon):
    pts = torch.stack([lat, lon], -1)
    dist = torch.cdist(pts, pts).fill_diagonal_(float("inf"))
    return dist.argmin(-1), _nearest_by_angle(lat, lon)


def _with_self(lat, lon):
    u = pl.latlon_to_unit_vector(lat, lon)
    ang = pl.great_circle_angle(lat[:, None], lon[:, None], lat[None], lon[None])
    return torch.cdist(u, u).argmin(-1), ang.argmin(-1)


plant("ex-graphs-chord", _raw_degrees, says="`by_chord` gives station")
plant("ex-graphs-chord", _with_self, says="its own nearest")
plant("ex-graphs-chord", lambda lat, lon: lat, says="return a tuple")


# ---------------------------------------------------------------- ex-graphs-sign-flip

FLIP_STUB = """\
# the two trained Laplacian models and the accuracy of each on the test graphs
# with their eigenvector signs flipped at random
sign_flip = ...  # (model_canonical, model_flipped, {"canonical": ..., "flipped": ...})
"""

_N_NODES, _N_CLASSES, _K_EIG = 12, 8, 6


def _graph_test(count: int = 512, seed: int = 13):
    """Test graphs of the chapter's task (its ``graph_pool`` and ``distance_batch``,
    rebuilt here so that the check does not depend on the notebook's state): tokens
    (b, n) marking one node, targets (b, n) the hop counts to it (7 = 7+), and the
    eigenvectors (b, n, k) with canonical signs and flipped at random."""
    gen = torch.Generator().manual_seed(seed)
    adj = pl.random_connected_graphs(count, _N_NODES, 3, gen)
    spd = pl.shortest_path_distances(adj)
    eig = pl.laplacian_eigenvectors(adj, _K_EIG)
    mark = torch.randint(0, _N_NODES, (count,), generator=gen)
    tokens = torch.zeros(count, _N_NODES, dtype=torch.long)
    tokens[torch.arange(count), mark] = 1
    targets = spd[torch.arange(count), :, mark].clamp(max=_N_CLASSES - 1)
    return tokens, targets, eig, pl.random_sign_flip(eig, gen)


def _graph_accuracy(model, tokens, targets, eigvecs) -> float:
    """Accuracy on the model's own device (``pl.accuracy`` moves the check's data,
    drawn on the CPU, there and leaves the model where it is)."""
    batch = (tokens, targets, None, {"eigvecs": eigvecs})
    return pl.accuracy(model, batch, causal=False)


@exercise("ex-graphs-sign-flip", chapter=CHAPTER, stub=FLIP_STUB)
def _(answer):
    expect(
        isinstance(answer, (tuple, list)) and len(answer) == 3,
        "`sign_flip` should be a triple (model_canonical, model_flipped, acc), acc "
        'the dict {"canonical": ..., "flipped": ...}',
    )
    *models, acc = answer
    for name, model in zip(("canonical", "flipped"), models):
        expect(
            isinstance(model, pl.TinyTransformer),
            f"`model_{name}` should be a trained pl.TinyTransformer, got "
            f"{type(model).__name__}",
        )
        expect(
            isinstance(model.pe, pl.LaplacianPE) and model.pe.k == _K_EIG,
            f"`model_{name}` uses {type(model.pe).__name__}"
            + (f"(k={model.pe.k})" if isinstance(model.pe, pl.LaplacianPE) else "")
            + f": the exercise trains the experiment's LaplacianPE with k={_K_EIG}",
        )
        expect(
            model.vocab_size == _N_CLASSES and len(model.blocks) == 2,
            f"`model_{name}` has {len(model.blocks)} layers and {model.vocab_size} "
            f"tokens; the experiment's has 2 and {_N_CLASSES}",
        )
    expect(
        models[0] is not models[1],
        "`model_canonical` and `model_flipped` are the same model: train a second one "
        "with the flips",
    )
    expect(
        isinstance(acc, dict) and {"canonical", "flipped"} <= set(acc),
        f'acc should be a dict {{"canonical": ..., "flipped": ...}}, got {acc!r:.60}',
    )
    tokens, targets, eig, flipped = _graph_test()
    on_canon = [_graph_accuracy(m, tokens, targets, eig) for m in models]
    on_flip = [_graph_accuracy(m, tokens, targets, flipped) for m in models]
    for name, measured in zip(("canonical", "flipped"), on_canon):
        # untrained: about 0.05; the structure-blind ceiling is about 0.3
        expect(
            measured > 0.2,
            f"`model_{name}` gets {measured:.3f} on the check's 512 test graphs "
            "with canonical signs: was it trained?",
        )
    for name, measured in zip(("canonical", "flipped"), on_flip):
        got = as_float(acc[name], f'acc["{name}"]')
        expect(
            abs(got - measured) < 0.04,
            f'you report acc["{name}"] = {got:.3f}, but model_{name} gets '
            f"{measured:.3f} on the check's 512 test graphs with flipped signs",
        )
    # trained on every sign pattern, the flipped model cannot prefer one
    change = on_flip[1] - on_canon[1]
    expect(
        abs(change) < 0.03,
        f"`model_flipped` gets {on_canon[1]:.3f} with canonical signs and "
        f"{on_flip[1]:.3f} with flipped ones: a model trained on random flips does "
        "not depend on the signs; was pl.random_sign_flip in its batch function?",
    )
    drop = on_canon[0] - on_flip[0]
    finding = (
        "the canonical-sign model is the one that depends on the signs"
        if drop > 0.03
        else "in your run neither model depends much on the signs: the canonical-sign "
        "model did not come to rely on the sign pattern at this budget"
    )
    return (
        f"with canonical signs / flipped at random, on the check's 512 test graphs: "
        f"model_canonical {on_canon[0]:.3f} / {on_flip[0]:.3f} (a drop of "
        f"{drop:.3f}), model_flipped {on_canon[1]:.3f} / {on_flip[1]:.3f}, as you "
        f"report; {finding}."
    )


def _graph_model(pe):
    """An untrained model for a planted answer (the global RNG left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return pl.TinyTransformer(_N_CLASSES, 32, 4, 2, pe=pe)


_LAP = _graph_model(pl.LaplacianPE(32, k=_K_EIG))
_ACC = {"canonical": 0.5, "flipped": 0.55}
plant("ex-graphs-sign-flip", (_LAP, _graph_model(pl.NoPE()), _ACC), says="LaplacianPE")
plant("ex-graphs-sign-flip", (_LAP, _LAP, _ACC), says="the same model")
plant(
    "ex-graphs-sign-flip",
    (_LAP, _graph_model(pl.LaplacianPE(32, k=_K_EIG)), {"canonical": 0.99}),
    says="should be a dict",
)
plant(
    "ex-graphs-sign-flip",
    (_LAP, _graph_model(pl.LaplacianPE(32, k=_K_EIG)), _ACC),
    says="was it trained",
)
plant("ex-graphs-sign-flip", (_LAP, 0.5), says="should be a triple")

"""Checks for the exercises of book/part5/graphs_space.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.exercises import Wrong, call, exercise, expect, plant
from posenc_lib.exercises._values import number

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

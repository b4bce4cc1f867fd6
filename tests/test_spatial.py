"""Encodings of physical space: distance RBF bias, latitude/longitude, random Fourier
features. Properties (invariance, continuity across the date line, shift-invariant
kernels), then parity with PyTorch Geometric's Gaussian smearing (golden vectors from
tests/golden/make_graph_golden.py), Tancik et al.'s ``input_mapping`` and the haversine
formula in plain Python (both live)."""

import json
import math
import pathlib

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.spatial import (
    DistanceRBFBias,
    FourierFeaturePE,
    LatLonPE,
    fourier_features,
    gaussian_fourier_matrix,
    great_circle_angle,
    latlon_to_unit_vector,
    pairwise_distances,
    rbf_expand,
)

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "graph_references.json").read_text()
)


def random_rigid_motion(seed):
    """A random orthogonal 3x3 matrix (rotation or reflection) and a translation."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))  # a uniformly random orthogonal matrix
    return q, 5 * torch.randn(3, generator=g, dtype=torch.float64)


# ---------------------------------------------------------------- distances


def test_pairwise_distances_match_cdist_with_an_exact_zero_diagonal():
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    d = pairwise_distances(x)
    assert_close(d, torch.cdist(x, x))
    assert (torch.diagonal(d, dim1=1, dim2=2) == 0).all()


@pytest.mark.parametrize("seed", range(4))
def test_distance_bias_is_invariant_to_rotation_reflection_and_translation(seed):
    torch.manual_seed(seed)
    pe = DistanceRBFBias(n_heads=4).double()
    mha = pl.MultiHeadAttention(16, 4, pe).double()
    coords = 2 * torch.randn(2, 9, 3, dtype=torch.float64)
    rot, shift = random_rigid_motion(seed)
    moved = coords @ rot.T + shift
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    out = mha(x, inputs={"coords": coords})
    assert_close(mha(x, inputs={"coords": moved}), out)
    # a change of shape (not a rigid motion) does change the output
    bent = coords.clone()
    bent[:, 0] += 1.0
    assert (mha(x, inputs={"coords": bent}) - out).abs().max() > 1e-4


def test_distance_bias_is_a_linear_map_of_the_gaussian_expansion():
    pe = DistanceRBFBias(n_heads=2, n_rbf=5, cutoff=4.0).double()
    assert_close(pe.centers.double(), torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).double())
    assert pe.gamma == pytest.approx(0.5)  # 0.5 / spacing^2
    coords = torch.tensor(
        [[[0.0, 0, 0], [1.5, 0, 0], [0, 0, 20.0]]], dtype=torch.float64
    )
    q = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    bias = pe.score_bias(q, q, None, None, ctx=pl.Context(inputs={"coords": coords}))
    d = torch.tensor(1.5, dtype=torch.float64)
    e = torch.exp(-0.5 * (d - torch.arange(5.0, dtype=torch.float64)) ** 2)
    assert_close(bias[0, :, 0, 1], pe.proj.weight @ e + pe.proj.bias)
    assert_close(bias[0, :, 0, 1], bias[0, :, 1, 0])  # symmetric
    # far beyond the cutoff only the constant c_h is left
    assert_close(bias[0, :, 0, 2], pe.proj.bias, atol=1e-8, rtol=0)


def test_rbf_matches_pytorch_geometric_gaussian_smearing():
    ref = GOLDEN["gaussian_smearing"]
    pe = DistanceRBFBias(1, n_rbf=ref["num_gaussians"], cutoff=ref["stop"])
    dist = torch.tensor(ref["dist"], dtype=torch.float64)
    ours = rbf_expand(dist, pe.centers.double(), pe.gamma)
    # PyG computes its spacing and coefficient in float32: agreement to ~1e-6
    assert_close(ours, torch.tensor(ref["expansion"]).double(), atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: pairwise_distances(torch.zeros(3, dtype=torch.long)),
            TypeError,
            "floating",
        ),
        (lambda: pairwise_distances(torch.zeros(3)), ValueError, r"\(\.\.\., n, c\)"),
        (
            lambda: pairwise_distances(torch.tensor([[0.0, math.nan]])),
            ValueError,
            "finite",
        ),
        (lambda: DistanceRBFBias(2, n_rbf=1), ValueError, "n_rbf must be >= 2"),
        (lambda: DistanceRBFBias(2, cutoff=-1.0), ValueError, "cutoff must be"),
    ],
)
def test_bad_spatial_input_is_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_distance_bias_checks_the_coordinates_it_reads():
    pe = DistanceRBFBias(2)
    q = torch.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match=r"shape \(1, 4, 3\)"):
        pe.score_bias(
            q, q, None, None, ctx=pl.Context(inputs={"coords": torch.zeros(1, 4, 2)})
        )


# ---------------------------------------------------------------- the sphere


def test_unit_vectors_are_continuous_across_the_date_line_and_at_the_poles():
    lat = torch.tensor([12.0, 12.0, 89.9999, -90.0, -90.0], dtype=torch.float64)
    lon = torch.tensor([179.9999, -179.9999, 10.0, 0.0, 123.0], dtype=torch.float64)
    u = latlon_to_unit_vector(lat, lon)
    assert_close(u.norm(dim=-1), torch.ones(5, dtype=torch.float64))
    assert (u[0] - u[1]).norm() < 1e-5  # ~ 22 m apart on Earth
    assert abs(lon[0] - lon[1]) > 359  # the raw longitudes are 360 degrees apart
    assert_close(u[3], u[4])  # the south pole, whatever the longitude
    assert (u[2] - torch.tensor([0.0, 0, 1]).double()).norm() < 1e-5
    # periodic in longitude
    assert_close(latlon_to_unit_vector(lat, lon + 360), u)


def haversine(lat1, lon1, lat2, lon2):
    """Central angle in radians, with Python's math module only (independent)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * math.asin(min(1.0, math.sqrt(h)))


@pytest.mark.parametrize("seed", range(3))
def test_chord_between_unit_vectors_is_two_sin_half_the_central_angle(seed):
    rng = np.random.default_rng(seed)
    lat = rng.uniform(-90, 90, (20, 2))
    lon = rng.uniform(-540, 540, (20, 2))
    u = latlon_to_unit_vector(torch.tensor(lat), torch.tensor(lon))
    chord = (u[:, 0] - u[:, 1]).norm(dim=-1)
    theta = torch.tensor(
        [haversine(a[0], b[0], a[1], b[1]) for a, b in zip(lat, lon)],
        dtype=torch.float64,
    )
    assert_close(chord, 2 * torch.sin(theta / 2))
    t = torch.tensor
    assert_close(
        great_circle_angle(t(lat[:, 0]), t(lon[:, 0]), t(lat[:, 1]), t(lon[:, 1])),
        theta,
    )


def test_latitude_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"lat must lie in \[-90, 90\]"):
        latlon_to_unit_vector(torch.tensor([91.0]), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="radians"):
        latlon_to_unit_vector(torch.tensor([2.0]), torch.tensor([0.0]), degrees=False)
    with pytest.raises(TypeError, match="floating"):
        latlon_to_unit_vector(torch.tensor([1]), torch.tensor([0.0]))


def test_latlon_pe_gives_the_same_input_on_both_sides_of_the_date_line():
    pe = LatLonPE(8).double()
    x = torch.zeros(1, 2, 8, dtype=torch.float64)
    latlon = torch.tensor([[[40.0, 180.0], [40.0, -180.0]]], dtype=torch.float64)
    y = pe.encode_input(x, None, ctx=pl.Context(inputs={"latlon": latlon}))
    assert_close(y[0, 0], y[0, 1])
    with pytest.raises(ValueError, match=r"shape \(1, 2, 2\)"):
        pe.encode_input(x, None, ctx=pl.Context(inputs={"latlon": latlon[..., :1]}))


# ---------------------------------------------------------------- Fourier features


def tancik_input_mapping(x, B):
    """tancik/fourier-feature-networks, Demo.ipynb (numpy), sines first."""
    x_proj = (2.0 * np.pi * x) @ B.T
    return np.concatenate([np.sin(x_proj), np.cos(x_proj)], axis=-1)


def test_fourier_features_match_tancik_et_al_up_to_the_order_of_the_halves():
    g = torch.Generator().manual_seed(0)
    B = gaussian_fourier_matrix(8, 2, sigma=10.0, generator=g, dtype=torch.float64)
    v = torch.rand(5, 2, generator=g, dtype=torch.float64)
    ref = torch.tensor(tancik_input_mapping(v.numpy(), B.numpy()))
    ours = fourier_features(v, B)  # cosines first, as the paper writes gamma
    assert_close(ours, torch.cat((ref[:, 8:], ref[:, :8]), dim=-1))


def test_fourier_kernel_depends_only_on_the_difference_of_the_points():
    """gamma(v) . gamma(w) = sum_m cos(2 pi b_m . (v - w)): a stationary kernel."""
    B = gaussian_fourier_matrix(16, 3, sigma=2.0, dtype=torch.float64)
    v, w = torch.rand(6, 3, dtype=torch.float64), torch.rand(6, 3, dtype=torch.float64)
    shift = torch.randn(3, dtype=torch.float64)
    k = (fourier_features(v, B) * fourier_features(w, B)).sum(-1)
    k_shifted = (fourier_features(v + shift, B) * fourier_features(w + shift, B)).sum(
        -1
    )
    assert_close(k, k_shifted)
    assert_close(k, torch.cos(2 * math.pi * (v - w) @ B.T).sum(-1))


def test_fourier_matrix_has_the_asked_for_scale():
    B = gaussian_fourier_matrix(
        4000, 2, sigma=3.0, generator=torch.Generator().manual_seed(1)
    )
    assert B.shape == (4000, 2) and abs(B.std().item() - 3.0) < 0.1
    with pytest.raises(ValueError, match="sigma must be"):
        gaussian_fourier_matrix(4, 2, sigma=0.0)
    with pytest.raises(ValueError, match=r"B must have shape \(m, 2\)"):
        fourier_features(torch.rand(3, 2), torch.rand(4, 3))


def test_fourier_feature_pe_keeps_its_frequencies_in_the_state_dict():
    a, b = FourierFeaturePE(8, in_dim=2, m=4), FourierFeaturePE(8, in_dim=2, m=4)
    assert not torch.equal(a.B, b.B)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.B, b.B)
    # absolute coordinates: a translation changes the encoding (unlike distances)
    x = torch.zeros(1, 3, 8)
    v = torch.rand(1, 3, 2)
    y = a.encode_input(x, None, ctx=pl.Context(inputs={"coords": v}))
    y2 = a.encode_input(x, None, ctx=pl.Context(inputs={"coords": v + 0.3}))
    assert (y - y2).abs().max() > 1e-3

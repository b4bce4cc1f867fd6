"""Position in physical space: points in 3-D, places on the sphere, coordinates through
random Fourier features.

* **Distances, invariant by construction.** A molecule or a point cloud has no preferred
  origin or orientation, so an encoding that should not care about them may read only
  pairwise distances ``d_ij = |r_i - r_j|``, unchanged by any rotation, reflection or
  translation. ``DistanceRBFBias`` expands each distance in K Gaussian radial basis
  functions (SchNet's "Gaussian smearing") and maps them to a bias per head, as Uni-Mol
  and Transformer-M bias attention with a Gaussian expansion of pair distances::

      e_k(d) = exp(-gamma (d - mu_k)^2),   mu_k = k * cutoff / (K - 1),  k = 0 .. K-1
      omega_hij = q_i . k_j / sqrt(d) + sum_k w_hk e_k(d_ij) + c_h

* **Latitude and longitude** as raw numbers jump by 360 degrees across the date line and
  make every longitude the same point at a pole. The unit vector on the sphere,
  ``(cos phi cos lambda, cos phi sin lambda, sin phi)``, is continuous everywhere and
  its Euclidean distance is the chord of the great circle: ``|u - v| = 2 sin(theta/2)``
  for central angle theta. ``LatLonPE`` adds a linear map of it to the input.

* **Random Fourier features** (Tancik et al., 2020) map low-dimensional coordinates
  v to ``gamma(v) = [cos(2 pi B v), sin(2 pi B v)]`` with a fixed random
  ``B ~ N(0, sigma^2)`` ``(m, c)``, so that a network can fit high frequencies;
  sigma sets the bandwidth. ``FourierFeaturePE`` adds a linear map of gamma to the
  input. It encodes absolute coordinates, so it is *not* rotation-invariant.

Coordinates arrive as side inputs (``ctx.inputs``): ``"coords"`` ``(b, n, c)`` float,
``"latlon"`` ``(b, n, 2)`` degrees.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..base import Context, PositionalEncoding
from ..registry import register
from ..utils import check_heads, check_positive_int

__all__ = [
    "pairwise_distances",
    "rbf_expand",
    "latlon_to_unit_vector",
    "great_circle_angle",
    "gaussian_fourier_matrix",
    "fourier_features",
    "DistanceRBFBias",
    "LatLonPE",
    "FourierFeaturePE",
]


def _check_float(t, name: str, shape_text: str, min_dim: int = 1) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor {shape_text}, got "
            f"{getattr(t, 'dtype', type(t).__name__)}"
        )
    if t.dim() < min_dim:
        raise ValueError(f"{name} must be {shape_text}, got {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return t


def _check_positive_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return float(value)


def pairwise_distances(coords: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ``(..., n, n)`` between the points ``(..., n, c)``,
    ``d_ij = |r_i - r_j|``, exactly 0 on the diagonal."""
    coords = _check_float(coords, "coords", "(..., n, c)", min_dim=2)
    # d_ij = |r_i - r_j|
    diff = coords[..., :, None, :] - coords[..., None, :, :]  # (..., n, n, c)
    return torch.linalg.vector_norm(diff, dim=-1)  # (..., n, n)


def rbf_expand(
    dist: torch.Tensor, centers: torch.Tensor, gamma: float | torch.Tensor
) -> torch.Tensor:
    """Gaussian radial basis ``e_k(d) = exp(-gamma (d - mu_k)^2)``: distances
    ``(...)`` and centers ``(K,)`` -> ``(..., K)``."""
    dist = _check_float(dist, "dist", "(...)", min_dim=0)
    if not isinstance(centers, torch.Tensor) or centers.dim() != 1:
        raise ValueError("centers must be a 1-D tensor (K,)")
    _check_float(centers, "centers", "(K,)")
    if isinstance(gamma, torch.Tensor):
        if not bool((torch.isfinite(gamma) & (gamma > 0)).all()):
            raise ValueError(f"gamma must be a finite number > 0, got {gamma}")
    else:
        gamma = _check_positive_float(gamma, "gamma")
    # e_k(d) = exp(-gamma (d - mu_k)^2)
    return torch.exp(-gamma * (dist[..., None] - centers.to(dist)) ** 2)  # (..., K)


def latlon_to_unit_vector(
    lat: torch.Tensor, lon: torch.Tensor, degrees: bool = True
) -> torch.Tensor:
    """Latitude phi and longitude lambda ``(...)`` -> points on the unit sphere
    ``(..., 3)``: ``(cos phi cos lambda, cos phi sin lambda, sin phi)`` (x towards
    (0, 0), z towards the north pole).

    Continuous in both arguments, periodic in longitude (lambda and lambda + 360 give
    the same point), and every longitude gives the same point at a pole. ``lat`` must
    lie in [-90, 90] degrees (or [-pi/2, pi/2] with ``degrees=False``); ``lon`` may be
    any finite number.
    """
    lat = _check_float(lat, "lat", "(...)", min_dim=0)
    lon = _check_float(lon, "lon", "(...)", min_dim=0)
    limit = 90.0 if degrees else math.pi / 2
    if (lat.abs() > limit * (1 + 1e-12)).any():
        raise ValueError(
            f"lat must lie in [-{limit:g}, {limit:g}] "
            f"({'degrees' if degrees else 'radians'}), got {lat.abs().max().item():g}"
        )
    phi, lam = (torch.deg2rad(lat), torch.deg2rad(lon)) if degrees else (lat, lon)
    phi, lam = torch.broadcast_tensors(phi, lam)
    # (cos phi cos lambda, cos phi sin lambda, sin phi)
    return torch.stack(
        (phi.cos() * lam.cos(), phi.cos() * lam.sin(), phi.sin()), dim=-1
    )  # (..., 3)


def great_circle_angle(
    lat1: torch.Tensor, lon1: torch.Tensor, lat2: torch.Tensor, lon2: torch.Tensor
) -> torch.Tensor:
    """Central angle (radians) between two points given in degrees, by the haversine
    formula ``hav(theta) = hav(dphi) + cos phi1 cos phi2 hav(dlambda)``,
    ``hav(x) = sin^2(x / 2)``. Multiply by the radius for a distance. Latitudes must
    lie in [-90, 90]; every argument must be a finite floating-point tensor."""
    named = {"lat1": lat1, "lon1": lon1, "lat2": lat2, "lon2": lon2}
    for name, t in named.items():
        _check_float(t, name, "(...) in degrees", min_dim=0)
    for name in ("lat1", "lat2"):
        if (named[name].abs() > 90.0).any():
            raise ValueError(
                f"{name} must lie in [-90, 90] degrees, got "
                f"{named[name].abs().max().item():g}"
            )
    p1, l1, p2, l2 = (torch.deg2rad(t) for t in named.values())
    # hav(theta) = hav(phi2 - phi1) + cos phi1 cos phi2 hav(lambda2 - lambda1)
    h = (
        torch.sin((p2 - p1) / 2) ** 2
        + p1.cos() * p2.cos() * torch.sin((l2 - l1) / 2) ** 2
    )
    return 2 * torch.asin(h.clamp(0, 1).sqrt())


def gaussian_fourier_matrix(
    m: int,
    in_dim: int,
    sigma: float = 1.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The ``(m, in_dim)`` frequency matrix ``B`` of random Fourier features, entries
    i.i.d. ``N(0, sigma^2)`` (Tancik et al.'s ``B_gauss = randn(m, d) * scale``)."""
    m = check_positive_int(m, "m")
    in_dim = check_positive_int(in_dim, "in_dim")
    sigma = _check_positive_float(sigma, "sigma")
    b = torch.randn(m, in_dim, generator=generator, dtype=torch.float64) * sigma
    return b.to(dtype or torch.get_default_dtype())


def fourier_features(v: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``gamma(v) = [cos(2 pi B v), sin(2 pi B v)]``: coordinates ``(..., c)`` and
    ``B`` ``(m, c)`` -> ``(..., 2m)``, the m cosines first (the paper's order; the
    authors' code puts the sines first, a fixed permutation of the same features)."""
    v = _check_float(v, "v", "(..., c)", min_dim=1)
    if not isinstance(B, torch.Tensor) or B.dim() != 2 or B.shape[1] != v.shape[-1]:
        raise ValueError(
            f"B must have shape (m, {v.shape[-1]}) to match v's last axis, got "
            f"{tuple(getattr(B, 'shape', ()))}"
        )
    _check_float(B, "B", f"(m, {v.shape[-1]})")
    # 2 pi B v, for every point
    proj = 2 * math.pi * torch.einsum("...c,mc->...m", v, B.to(v))  # (..., m)
    return torch.cat((proj.cos(), proj.sin()), dim=-1)  # (..., 2m)


def _coords_input(ctx: Context, name: str, shape: tuple) -> torch.Tensor:
    t = _check_float(ctx.inputs[name], f"inputs[{name!r}]", str(shape), min_dim=0)
    if tuple(t.shape) != shape:
        raise ValueError(
            f"inputs[{name!r}] must have shape {shape}, got {tuple(t.shape)}"
        )
    return t


class DistanceRBFBias(PositionalEncoding):
    """Head h adds ``sum_k w_hk exp(-gamma (d_ij - mu_k)^2) + c_h`` to its scaled
    scores, with ``d_ij`` the distance between the 3-D points of query i and key j
    (side input ``"coords"`` ``(b, n, 3)``).
    Paper: Schütt et al., 2017 (SchNet's Gaussian smearing).

    K centers ``mu_k`` evenly spaced on ``[0, cutoff]`` (a buffer) and
    ``gamma = 0.5 / spacing^2``, as SchNet's ``GaussianSmearing`` in PyTorch Geometric;
    the ``Linear(K, h)`` is learned. Uni-Mol learns the centers and widths too and puts
    an MLP between the expansion and the heads; this is the smallest member of the
    family. Distances far beyond ``cutoff`` leave only ``c_h``. Invariant to any
    rotation, reflection and translation of the points, since it reads distances only.
    """

    side_inputs = {"coords": "(b, n, 3) float 3-D coordinates of the tokens"}
    reuse = frozenset({"score_bias"})  # the points': once per forward pass
    four_terms = {
        "content-content": "kept",
        "content-position": "dropped",
        "position-content": "dropped",
        "position-position": "replaced by a learned map of RBF(|r_i - r_j|) per head",
    }

    def __init__(self, n_heads: int, n_rbf: int = 16, cutoff: float = 8.0):
        super().__init__()
        self.n_heads = check_positive_int(n_heads, "n_heads")
        self.n_rbf = check_positive_int(n_rbf, "n_rbf")
        if self.n_rbf < 2:
            raise ValueError(
                f"n_rbf must be >= 2 (centers need a spacing), got {n_rbf}"
            )
        self.cutoff = _check_positive_float(cutoff, "cutoff")
        centers = torch.linspace(0.0, self.cutoff, self.n_rbf, dtype=torch.float64)
        self.register_buffer("centers", centers.float(), persistent=False)  # (K,)
        self.gamma = 0.5 / (self.cutoff / (self.n_rbf - 1)) ** 2
        self.proj = nn.Linear(self.n_rbf, self.n_heads)  # w_hk, c_h

    def score_bias(self, q, k, q_pos, k_pos, ctx: Context) -> torch.Tensor:
        check_heads(q, self, self.n_heads)
        b, _, i, _ = q.shape
        j = k.shape[2]
        if i != j:
            raise ValueError(
                "DistanceRBFBias needs as many queries as keys (one point per token), "
                f"got {i} queries and {j} keys"
            )
        coords = _coords_input(ctx, "coords", (b, j, 3))
        dist = pairwise_distances(coords.to(q.dtype))  # (b, i, j)
        # sum_k w_hk e_k(d_ij) + c_h
        bias = self.proj(rbf_expand(dist, self.centers, self.gamma))  # (b, i, j, h)
        return bias.permute(0, 3, 1, 2)  # (b, h, i, j)

    def score_mod(self, q_pos, k_pos, ctx: Context):
        """FlexAttention form: ``score + bias_hij``. The K-term RBF map is computed
        as ``score_bias`` (in the parameters' dtype) once per call and read per
        pair, rather than K exponentials per pair inside the kernel."""
        check_heads(ctx.need("q", type(self).__name__), self, self.n_heads)
        b, i = q_pos.shape[:2]
        w = self.proj.weight
        probe = w.new_empty(b, self.n_heads, i, 0)  # q's shape, for score_bias
        probe_k = w.new_empty(b, self.n_heads, k_pos.shape[1], 0)
        bias = self.score_bias(probe, probe_k, q_pos, k_pos, ctx=ctx)  # (b, h, i, j)

        def mod(score, b, h, q_idx, kv_idx):
            return score + bias[b, h, q_idx, kv_idx]

        return mod

    def example_inputs(self, b, n, generator=None):
        return {"coords": 2.0 * torch.randn(b, n, 3, generator=generator)}

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_rbf={self.n_rbf}, cutoff={self.cutoff:g}"


class LatLonPE(PositionalEncoding):
    """``x_i <- x_i + W u_i + c`` with ``u_i`` the unit vector of token i's latitude
    and longitude (side input ``"latlon"`` ``(b, n, 2)`` in degrees, latitude first),
    ``latlon_to_unit_vector``. Continuous across the date line and at the poles.
    Paper: none (the standard embedding of the sphere in R^3; no one paper owns it)."""

    side_inputs = {"latlon": "(b, n, 2) float latitude, longitude in degrees"}
    four_terms = {
        "content-content": "kept",
        "content-position": "kept (W u_j through W_k)",
        "position-content": "kept (W u_i through W_q)",
        "position-position": "kept (u_i^T W^T W_q W_k^T W u_j)",
    }

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.proj = nn.Linear(3, self.d_model)

    def encode_input(self, x, pos, ctx: Context) -> torch.Tensor:
        latlon = _coords_input(ctx, "latlon", (*x.shape[:2], 2))
        u = latlon_to_unit_vector(latlon[..., 0], latlon[..., 1])  # (b, n, 3)
        # x_i + W u_i + c
        return x + self.proj(u.to(x.dtype))

    def example_inputs(self, b, n, generator=None):
        u = torch.rand(b, n, 2, generator=generator)
        return {
            "latlon": torch.stack((180 * u[..., 0] - 90, 360 * u[..., 1] - 180), -1)
        }


class FourierFeaturePE(PositionalEncoding):
    """``x_i <- x_i + W gamma(v_i) + c``, ``gamma(v) = [cos 2 pi B v, sin 2 pi B v]``,
    for coordinates ``v_i`` (side input ``"coords"`` ``(b, n, in_dim)``).
    Paper: Tancik et al., 2020.

    ``B`` ``(m, in_dim)`` is drawn once, ``N(0, sigma^2)``, and never trained, as in
    Tancik et al.; it is a *persistent* buffer, so a saved model keeps the frequencies
    it was trained with.
    """

    four_terms = {
        "content-content": "kept",
        "content-position": "kept (W gamma(v_j) through W_k)",
        "position-content": "kept (W gamma(v_i) through W_q)",
        "position-position": "kept (gamma_i^T W^T W_q W_k^T W gamma_j)",
    }
    side_inputs = {"coords": "(b, n, in_dim) float coordinates of the tokens"}

    def __init__(
        self,
        d_model: int,
        in_dim: int = 3,
        m: int = 16,
        sigma: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.in_dim = check_positive_int(in_dim, "in_dim")
        self.sigma = _check_positive_float(sigma, "sigma")
        self.register_buffer("B", gaussian_fourier_matrix(m, in_dim, sigma, generator))
        self.proj = nn.Linear(2 * self.B.shape[0], self.d_model)

    def encode_input(self, x, pos, ctx: Context) -> torch.Tensor:
        v = _coords_input(ctx, "coords", (*x.shape[:2], self.in_dim))
        # the angles 2 pi B v in float32 at least: bfloat16 would round an angle
        # between 16 and 32 to a multiple of 1/8 before taking its cosine
        work = torch.promote_types(x.dtype, torch.float32)
        gamma = fourier_features(v.to(work), self.B.to(work))  # (b, n, 2m)
        # x_i + W gamma(v_i) + c
        return x + self.proj(gamma.to(x.dtype))

    def example_inputs(self, b, n, generator=None):
        return {"coords": torch.rand(b, n, self.in_dim, generator=generator)}

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, m={self.B.shape[0]}, sigma={self.sigma:g}"


@register("distance_rbf")
def _make_distance_rbf(*, d_model: int, n_heads: int, max_len: int) -> DistanceRBFBias:
    return DistanceRBFBias(n_heads)


@register("latlon")
def _make_latlon(*, d_model: int, n_heads: int, max_len: int) -> LatLonPE:
    return LatLonPE(d_model)


@register("fourier_features")
def _make_fourier(*, d_model: int, n_heads: int, max_len: int) -> FourierFeaturePE:
    return FourierFeaturePE(d_model)

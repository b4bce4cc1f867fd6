"""``REGISTRY``: every encoding by name, built with one signature.

A factory takes keyword arguments ``d_model``, ``n_heads`` and ``max_len`` (the longest
sequence the model is trained on; encodings with a table use it, the rest ignore it) and
returns a fresh ``PositionalEncoding``. Encoding modules register themselves::

    @register("sinusoidal")
    def _make(*, d_model: int, n_heads: int, max_len: int) -> Sinusoidal:
        return Sinusoidal(d_model)
"""

from __future__ import annotations

from typing import Callable

from .base import PositionalEncoding
from .utils import check_head_split, check_positive_int

__all__ = ["REGISTRY", "register", "make_encoding"]

Factory = Callable[..., PositionalEncoding]
REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator adding a factory to ``REGISTRY`` under ``name`` (names are unique)."""

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an encoding's name must be a non-empty string, got {name!r}")

    def add(factory: Factory) -> Factory:
        if name in REGISTRY:
            raise ValueError(f"an encoding named {name!r} is already registered")
        REGISTRY[name] = factory
        return factory

    return add


def make_encoding(
    name: str, *, d_model: int, n_heads: int, max_len: int
) -> PositionalEncoding:
    """Build ``REGISTRY[name]`` after checking the arguments every factory relies on."""
    if name not in REGISTRY:
        raise KeyError(
            f"unknown encoding {name!r}; registered: {', '.join(sorted(REGISTRY))}"
        )
    check_head_split(d_model, n_heads)
    check_positive_int(max_len, "max_len")
    return REGISTRY[name](d_model=d_model, n_heads=n_heads, max_len=max_len)

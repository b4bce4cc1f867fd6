"""``REGISTRY``: every encoding by name, built with one signature.

A factory takes keyword arguments ``d_model``, ``n_heads`` and ``max_len`` (the longest
sequence the model is trained on; encodings with a table declare that they use it, the
rest get ``None`` and ignore it) and returns a fresh ``PositionalEncoding``. Encoding
modules register themselves::

    @register("sinusoidal")
    def _make(*, d_model: int, n_heads: int, max_len: int | None) -> Sinusoidal:
        return Sinusoidal(d_model)

    @register("learned", needs_max_len=True)  # one row per position up to max_len
    def _make(*, d_model: int, n_heads: int, max_len: int) -> LearnedAbsolute: ...
"""

from __future__ import annotations

import difflib
from typing import Callable

from .base import PositionalEncoding
from .utils import check_head_split, check_positive_int

__all__ = ["REGISTRY", "NEEDS_MAX_LEN", "register", "make_encoding", "as_encoding"]

Factory = Callable[..., PositionalEncoding]
REGISTRY: dict[str, Factory] = {}
NEEDS_MAX_LEN: set[str] = set()  # encodings whose size depends on max_len


def register(name: str, needs_max_len: bool = False) -> Callable[[Factory], Factory]:
    """Decorator adding a factory to ``REGISTRY`` under ``name`` (names are unique);
    ``needs_max_len`` when the encoding is sized by the training length."""

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an encoding's name must be a non-empty string, got {name!r}")

    def add(factory: Factory) -> Factory:
        if name in REGISTRY:
            raise ValueError(f"an encoding named {name!r} is already registered")
        REGISTRY[name] = factory
        if needs_max_len:
            NEEDS_MAX_LEN.add(name)
        return factory

    return add


def _unknown(name: object, said: str) -> KeyError:
    """``said`` (the name refused), the closest registered names, then all of them."""
    close = []
    if isinstance(name, str):
        folded = {n.lower(): n for n in REGISTRY}
        close = [name.lower()] if name.lower() in folded else []  # the case alone
        close = close or difflib.get_close_matches(name.lower(), list(folded), 3, 0.6)
        close = [folded[n] for n in close]
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return KeyError(f"{said}{hint}; registered: {', '.join(sorted(REGISTRY))}")


def make_encoding(
    name: str, d_model: int, n_heads: int, max_len: int | None = None
) -> PositionalEncoding:
    """Build ``REGISTRY[name]`` after checking the arguments every factory relies on:
    ``make_encoding("rope", 64, 4)``; ``max_len`` (the training length) is needed only
    by the encodings in ``NEEDS_MAX_LEN`` (tables with a row per position, dynamic
    scaling) and ignored by the rest."""
    if name not in REGISTRY:
        raise _unknown(name, f"unknown encoding {name!r}")
    check_head_split(d_model, n_heads)
    if max_len is not None:
        check_positive_int(max_len, "max_len")
    elif name in NEEDS_MAX_LEN:
        raise TypeError(
            f"encoding {name!r} needs max_len (the longest training sequence): it is "
            "sized by it; pass make_encoding(name, d_model, n_heads, max_len=...)"
        )
    return REGISTRY[name](d_model=d_model, n_heads=n_heads, max_len=max_len)


def as_encoding(pe: object, d_model: int, n_heads: int) -> PositionalEncoding:
    """What a layer or a model accepts as ``pe=``: an encoding, a registered name
    (built with the layer's sizes, ``make_encoding(pe, d_model, n_heads)``), or None
    (no encoding); anything else is refused here, at construction."""
    if pe is None:
        return PositionalEncoding()
    if isinstance(pe, PositionalEncoding):
        return pe
    if isinstance(pe, str):
        if pe not in REGISTRY:
            raise _unknown(pe, f"pe={pe!r} is not a registered encoding")
        if pe in NEEDS_MAX_LEN:
            raise TypeError(
                f"pe={pe!r} is sized by the training length: build it with "
                f"pl.make_encoding({pe!r}, d_model, n_heads, max_len=...) and pass "
                "the encoding"
            )
        return make_encoding(pe, d_model, n_heads)
    raise TypeError(
        "pe must be a PositionalEncoding, a registered name (e.g. 'rope') or None, "
        f"got {type(pe).__name__}"
    )

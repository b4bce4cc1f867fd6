"""Small utilities shared by the library, the tests and the notebooks.

Shape legend used throughout ``posenc_lib`` (as in x-transformers, defined once):

    b  batch            h  heads             n  sequence length
    i  query positions  j  key positions     d  head dimension
    D  model dimension  V  vocabulary size
"""

from __future__ import annotations

import contextlib
import math
import os
import random

import numpy as np
import torch

__all__ = [
    "seed_everything",
    "get_device",
    "as_device",
    "check_shape",
    "check_positive_int",
    "check_nonnegative_int",
    "check_bool_mask",
    "compiling",
    "check_qkv",
    "module_device",
    "check_same_device",
]


def compiling() -> bool:
    """True while ``torch.compile`` traces: data-dependent checks are skipped then,
    since they would break the graph (they ran when the model was called eagerly)."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    return torch._dynamo.is_compiling()  # torch < 2.3


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a seeded
    ``torch.Generator``.

    The returned generator lives on the CPU; pass it to data sources so that a
    notebook's data does not depend on how many random numbers a model
    initialisation consumed.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """The device to compute on: ``prefer`` if given, else CUDA when present, else CPU.

    ``POSENC_DEVICE=cpu`` in the environment forces a device (useful on a shared GPU).
    """
    if prefer is not None:
        return as_device(prefer, "prefer")
    choice = os.environ.get("POSENC_DEVICE")
    if choice:
        return as_device(choice, "POSENC_DEVICE")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def as_device(value: object, name: str = "device") -> torch.device:
    """``value`` (a ``torch.device``, or a string such as ``"cpu"``, ``"cuda"``,
    ``"cuda:0"``) as a ``torch.device``; a clear error naming ``name`` for anything
    torch cannot read as one, and for CUDA where there is none (torch's own errors
    came from deep inside the helper that took it)."""
    if isinstance(value, torch.device):
        return value
    what = f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:0'"
    if not isinstance(value, str):
        raise TypeError(f"{what}, got {type(value).__name__} ({value!r})")
    try:
        device = torch.device(value)
    except RuntimeError:
        raise ValueError(f"{what}, got {value!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={value!r} was asked for but CUDA is not available")
    return device


def module_device(module: torch.nn.Module) -> torch.device:
    """Where ``module`` computes: the device of its first parameter or buffer (the CPU
    for a module that holds neither)."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


def check_same_device(
    t: torch.Tensor, name: str, module: torch.nn.Module, what: str
) -> None:
    """Raise a clear error unless ``t`` is on ``module``'s device (torch's own says
    "Expected all tensors to be on the same device" from deep inside a layer)."""
    here = module_device(module)
    if t.device.type != here.type or (
        t.device.index is not None
        and here.index is not None
        and t.device.index != here.index
    ):
        raise ValueError(
            f"{name} is a tensor on {t.device} but the {what} is on {here}: move it "
            f"with {name}.to(device) (the {what} does not move its inputs)"
        )


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{name} must be an int, got {type(value).__name__} ({value!r})"
        )
    if value < minimum:
        raise ValueError(
            f"{name} must be {'> 0' if minimum == 1 else f'>= {minimum}'}, got {value}"
        )
    return int(value)


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an int > 0, else raise a ``TypeError``/``ValueError``
    naming ``name``."""
    return _check_int(value, name, 1)


def check_nonnegative_int(value: object, name: str) -> int:
    """Return ``value`` if it is an int >= 0 (a clip distance, an offset), else raise
    naming ``name``."""
    return _check_int(value, name, 0)


def check_head_split(d_model: object, n_heads: object) -> int:
    """``d_model // n_heads`` after checking both are ints > 0 and the heads divide
    the model dimension; a clear error naming both otherwise."""
    check_positive_int(d_model, "d_model")
    check_positive_int(n_heads, "n_heads")
    if d_model % n_heads:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by n_heads ({n_heads})"
        )
    return d_model // n_heads


def check_shape(
    x: torch.Tensor, pattern: str, name: str = "tensor", **known: int
) -> dict[str, int]:
    """Check ``x`` against a space-separated shape pattern and return the named sizes.

    >>> check_shape(torch.zeros(2, 5, 8), "b n D", name="x", D=8)
    {'b': 2, 'n': 5, 'D': 8}

    Repeated letters must agree, letters given in ``known`` must match, and a mismatch
    raises ``ValueError`` that names the tensor, the pattern and the offending axis.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    axes = pattern.split()
    if x.dim() != len(axes):
        raise ValueError(
            f"{name} must have shape ({', '.join(axes)}) ({len(axes)} dims), got "
            f"{tuple(x.shape)}"
        )
    sizes: dict[str, int] = dict(known)
    for axis, size in zip(axes, x.shape):
        if axis.isdigit():
            expected = int(axis)
        elif axis in sizes:
            expected = sizes[axis]
        else:
            sizes[axis] = int(size)
            continue
        if size != expected:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}, but axis '{axis}' of "
                f"({', '.join(axes)}) must be {expected}"
            )
    return {a: sizes[a] for a in axes if not a.isdigit()}


def check_bool_mask(mask: object, shape: tuple[int, ...], what: str) -> None:
    """Raise a clear error unless ``mask`` is a bool tensor (True = may attend) that
    broadcasts to ``shape`` without enlarging it (a mask of batch 3 for a call of
    batch 1 would make the output's batch 3); ``what`` names that shape."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            "mask must be a bool tensor (True = may attend), got "
            f"{getattr(mask, 'dtype', type(mask).__name__)}"
        )
    try:
        fits = torch.broadcast_shapes(mask.shape, shape) == tuple(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask must be broadcastable to {what} {tuple(shape)} (each axis 1 or "
            f"the same size, at most {len(shape)} axes), got {tuple(mask.shape)}"
        )


def check_tensor(t: object, name: str, what: str = "") -> torch.Tensor:
    """``t`` if it is a ``torch.Tensor``; else a ``TypeError`` naming ``name`` (a
    list or a NumPy array got "'list' object has no attribute 'dim'" from inside a
    helper). ``what`` says what the tensor holds, for the message."""
    if not isinstance(t, torch.Tensor):
        hint = f" ({what})" if what else ""
        raise TypeError(
            f"{name} must be a torch.Tensor{hint}, got {type(t).__name__}: "
            f"convert it with torch.as_tensor({name})"
        )
    return t


def check_integer(x: torch.Tensor, name: str, what: str = "positions") -> torch.Tensor:
    """Raise a ``TypeError`` naming ``name`` unless ``x`` has an integer dtype (not
    bool); a float position would be truncated or rotated by a wrong angle silently."""
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer {what}, got dtype {x.dtype}")
    return x


def check_finite(t: object, name: str, what: str = "tensor") -> torch.Tensor:
    """``t`` if it is a floating-point tensor with no NaN or infinity; else a
    ``TypeError`` or ``ValueError`` naming it (one host sync)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point {what}, got "
            f"{getattr(t, 'dtype', type(t).__name__)}"
        )
    if not compiling() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} holds NaN or infinite values")
    return t


def check_heads(
    t: torch.Tensor, owner: object, n_heads: int, d_head: int | None = None, name="q"
) -> None:
    """Raise unless ``t`` is ``(b, n_heads, n, d_head)``: the heads (and head size)
    the encoding ``owner`` was built for."""
    h_ok = t.dim() == 4 and t.shape[1] == n_heads
    if not h_ok or (d_head is not None and t.shape[-1] != d_head):
        d = "d" if d_head is None else d_head
        raise ValueError(
            f"{name} must have shape (b, {n_heads}, n, {d}): this "
            f"{type(owner).__name__} was built for n_heads={n_heads}"
            + ("" if d_head is None else f", d_head={d_head}")
            + f"; got {tuple(t.shape)}"
        )


def exact_dtypes(t: torch.Tensor):
    """A context in which ``torch.autocast`` (if on for ``t``'s device) stands aside,
    so that operations run in the dtypes their inputs were given: for code that
    chose its working dtype itself (float32 for a matrix exponential, a triangular
    solve, a scan over numpy arrays), which autocast would lower to bfloat16."""
    from .base import _autocast_on

    kind = t.device.type
    if not _autocast_on(kind):
        return contextlib.nullcontext()
    return torch.autocast(kind, enabled=False)


def is_4d(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 4


def check_qkv(q, k, v, scale: float, x=None) -> tuple[int, int, int, int]:
    """Shapes and dtypes; then, in one host sync, that q, k, v (and the layer input
    ``x`` ``(b, i, D)``, when given: FoX's gates read it) are finite and that q.k
    cannot overflow the dtype the scores are computed in."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(
                f"{name} must be a floating-point tensor, got "
                f"{getattr(t, 'dtype', type(t).__name__)}"
            )
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            "q, k, v must be 4-D (b, h, n, d); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    b, h, i, d = q.shape
    if k.shape[:2] != (b, h) or k.shape[-1] != d:
        raise ValueError(
            f"k must have shape ({b}, {h}, j, {d}) to match q {tuple(q.shape)}, "
            f"got {tuple(k.shape)}"
        )
    if v.shape[:3] != k.shape[:3] or v.dtype != q.dtype or k.dtype != q.dtype:
        raise ValueError(
            f"v must have shape ({b}, {h}, {k.shape[2]}, e) and q, k, v one dtype; "
            f"got v {tuple(v.shape)}, dtypes {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if 0 in (b, h, i, d, k.shape[2]):
        raise ValueError(
            f"attention needs b, h, i, j, d > 0, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}"
        )
    named = {"q": q, "k": k, "v": v}
    if x is not None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(
                "x (the layer input) must be a floating-point tensor, got "
                f"{getattr(x, 'dtype', type(x).__name__)}"
            )
        if x.dtype != q.dtype:
            raise TypeError(f"x must have q's dtype {q.dtype}, got {x.dtype}")
        if x.dim() != 3 or x.shape[:2] != (b, i) or 0 in x.shape:
            raise ValueError(
                f"x must have shape ({b}, {i}, D) to match the {i} queries, "
                f"got {tuple(x.shape)}"
            )
        named["x"] = x
    with torch.no_grad():  # |q.k| <= max|q| max|k| d, in float64 so it cannot overflow
        big = [t.abs().amax().double() for t in named.values()]
        bound = big[0] * big[1] * d * abs(scale)
        ok, finite = torch.stack([bound, sum(big)]).tolist()  # the one sync
    if not math.isfinite(finite):
        name = next(n for n, t in named.items() if not torch.isfinite(t).all())
        raise ValueError(
            f"{name} holds NaN or infinite values; attention is defined for finite "
            f"{', '.join(named)} (the fused kernel would return zeros, the explicit "
            "path NaN)"
        )
    work = torch.promote_types(q.dtype, torch.float32)
    if ok > torch.finfo(work).max:
        raise ValueError(
            f"q.k may overflow {work}: max|q| * max|k| * d * scale = {ok:.3g} > "
            f"{torch.finfo(work).max:.3g}; scale q and k down (e.g. normalise them)"
        )
    return b, h, i, k.shape[2]


def check_layout(t, pos, name: str, pe) -> None:
    """Refuse ``t`` in Hugging Face's ``(b, n, h, d)`` layout when its positions tell:
    their length is ``t``'s dim 1, not its dim 2 (the sequence here)."""
    if not (is_4d(t) and isinstance(pos, torch.Tensor)) or pe.coord_axes is not None:
        return
    fits = pos.dim() == 1 or (pos.dim() == 2 and pos.shape[0] in (1, t.shape[0]))
    n = pos.shape[-1] if fits else None  # (n,) or (1|b, n)
    if n == t.shape[1] != t.shape[2]:
        raise ValueError(
            f"{name}_pos has {n} positions, the size of {name}'s dim 1, but "
            f"{name} {tuple(t.shape)} holds positions on dim 2: it looks like "
            "(b, n, h, d), heads after positions (Hugging Face's projections before "
            f".transpose(1, 2)); attention takes (b, h, n, d): pass "
            f"{name}.transpose(1, 2)"
        )

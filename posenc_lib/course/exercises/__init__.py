"""Exercises that check themselves.

After a coding exercise, the chapter (and the student edition) has a cell such as::

    pl.exercises.check("ex-rope-complex", rope_complex)

which runs the exercise's property tests and golden cases on the reader's answer (a
function or a value) and prints one verdict: **right** (and what was checked), or
**not yet** with what is wrong and on which input (the input, the entry, the value
found and the value expected: never the solution's code). It never raises: an answer
that crashes, returns ``None`` or the wrong type is reported like any other mistake,
so a student notebook runs top to bottom whatever is in its answer cells.

On the website a check runs on the chapter's own solution, which is hidden under
"Solution": there, what a check says it tested would give the answer away ("the key
is reflected at odd distances only"). So when the environment variable
``POSENC_BOOK_BUILD`` is ``1`` (the book's builds set it for the kernels that execute
the chapters: ``tools/build/site.py``, ``tools/build/pages.py`` and nbval's
``tools/build/nbval_cache.py``), a passing check prints only its neutral verdict
(:meth:`Result.neutral`). A reader who runs the check in a notebook of their own gets
the full message, as does every "not yet".

Each chapter's checks live in ``posenc_lib/course/exercises/<chapter>.py``, registered
with :func:`exercise`; :func:`plant` records wrong answers the tests feed to each check
(each must give its own message). The student edition (``tools/build/student_edition``)
replaces the chapter's hidden solution cell (tagged ``solution``) by an answer cell that
starts from the check's ``stub`` and keeps the check cell (tagged ``check``).

Writing a check: call the answer through :func:`call` (it turns an exception into a
verdict naming the input), compare with :func:`expect_close` or :func:`expect` and
return a short sentence of what was checked::

    @exercise("ex-rope-complex", chapter="part3/rope", stub=STUB)
    def _(answer):
        for n, d in [(5, 8), (9, 16)]:
            x, pos = ...
            got = call(answer, x, pos, theta, desc=f"x of shape ({n}, {d})")
            expect_close(got, pl.apply_rope(...), desc=...)
        return "equals pl.apply_rope(..., 'interleaved') for n, d = (5, 8), (9, 16)"
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.resources
import json
import math
import os
import pkgutil
import re
import textwrap
from typing import Any, Callable

import numpy as np
import torch

__all__ = [
    "check",
    "verify",
    "results",
    "exercise",
    "plant",
    "call",
    "expect",
    "expect_close",
    "Result",
    "Wrong",
    "CHECKS",
    "all_checks",
    "numbers",
]

BOOK_BUILD = "POSENC_BOOK_BUILD"  # "1" where the book's build executes the chapters


class Wrong(Exception):
    """A check's verdict that the answer is not right yet (its message says why)."""


@dataclasses.dataclass(frozen=True)
class Result:
    """What one check said: ``passed`` and the sentence shown to the reader."""

    label: str
    passed: bool
    message: str

    def _name(self) -> str:
        number = numbers().get(self.label)
        return f"{number} ({self.label})" if number else self.label

    def __str__(self) -> str:
        mark = "right" if self.passed else "not yet"
        text = self.message[:1].upper() + self.message[1:]
        return f"Exercise {self._name()}: {mark}. {text}"

    def neutral(self) -> str:
        """The verdict without what was checked: what the website shows under a
        hidden solution, where the message would state the answer."""
        mark = "right" if self.passed else "not yet"
        return (
            f"Exercise {self._name()}: {mark}. (Run this check on your own answer "
            "to see what it tests.)"
        )


@dataclasses.dataclass
class Check:
    """One exercise's check: ``run(answer)`` says what was checked, or raises Wrong."""

    label: str
    chapter: str  # the notebook, e.g. "part3/rope"
    stub: str  # the student edition's answer cell starts from this code
    run: Callable[[Any], str]
    planted: list[tuple[Any, str]] = dataclasses.field(default_factory=list)


CHECKS: dict[str, Check] = {}
_RESULTS: dict[str, Result] = {}


def exercise(label: str, *, chapter: str, stub: str):
    """Register ``run(answer) -> str`` as the check of exercise ``label``."""
    if not isinstance(label, str) or not label.startswith("ex-"):
        raise ValueError(f"label must be an exercise label 'ex-...', got {label!r}")
    if label in CHECKS:
        raise ValueError(f"exercise {label!r} already has a check")

    def register(run: Callable[[Any], str]) -> Callable[[Any], str]:
        CHECKS[label] = Check(label, chapter, stub, run)
        return run

    return register


def plant(label: str, answer: Any, says: str) -> None:
    """Record a wrong answer to ``label`` whose verdict must contain ``says``."""
    if label not in CHECKS:
        raise KeyError(f"plant: no check registered for {label!r}")
    CHECKS[label].planted.append((answer, says))


def _unanswered(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


def numbers() -> dict[str, str]:
    """Every exercise's number on the site, by label ("ex-rope-complex": "14.1"):
    ``posenc_lib/data/exercise_numbers.json``, written by
    ``tools/build/exercise_numbers.py`` from _toc.yml."""
    global _NUMBERS
    if _NUMBERS is None:
        path = importlib.resources.files("posenc_lib") / "data/exercise_numbers.json"
        _NUMBERS = json.loads(path.read_text()) if path.is_file() else {}
    return _NUMBERS


_NUMBERS: dict[str, str] | None = None


def _label(exercise: str) -> str:
    """``exercise`` as a label: "14.1" -> "ex-rope-complex"; a label unchanged."""
    if not isinstance(exercise, str):
        raise TypeError(
            f"exercise must be a label like 'ex-rope-complex' or a number like '14.1', "
            f"got {type(exercise).__name__}"
        )
    if re.fullmatch(r"\d+\.\d+", exercise.strip()):
        by_number = {n: label for label, n in numbers().items()}
        if exercise.strip() not in by_number:
            raise KeyError(f"there is no exercise {exercise} in the course")
        return by_number[exercise.strip()]
    return exercise


def verify(label: str, answer: Any) -> Result:
    """Run the check of exercise ``label`` (its label, "ex-rope-complex", or its
    number on the site, "14.1") on ``answer`` and return its verdict (never raises
    over the answer; an unknown exercise is a KeyError naming the known ones)."""
    _load()
    label = _label(label)
    if label not in CHECKS:
        known = ", ".join(sorted(CHECKS)) or "none"
        raise KeyError(f"no check for exercise {label!r}; known: {known}")
    if _unanswered(answer):
        result = Result(
            label, False, "No answer yet: replace the `...` in the answer cell."
        )
    else:
        try:
            checked = CHECKS[label].run(answer)
            result = Result(label, True, checked)
        except Wrong as wrong:
            result = Result(label, False, str(wrong))
        except Exception as error:  # a bug in the answer that escaped call()
            result = Result(
                label, False, f"checking your answer raised {_describe(error)}"
            )
    _RESULTS[label] = result
    return result


def check(label: str, answer: Any) -> None:
    """Check ``answer`` to exercise ``label`` ("ex-rope-complex" or "14.1") and print
    the verdict (wrapped at 88 columns, as the book's code is). In the book's build
    (``POSENC_BOOK_BUILD=1``) a passing verdict is printed without its message, which
    would state the answer under the hidden solution (see the module's docstring)."""
    result = verify(label, answer)
    text = result.neutral() if result.passed and book_build() else str(result)
    print(textwrap.fill(text, 88, break_long_words=False))


def book_build() -> bool:
    """Whether the book's build is executing this chapter (``POSENC_BOOK_BUILD=1``)."""
    return os.environ.get(BOOK_BUILD) == "1"


def results() -> dict[str, Result]:
    """The last verdict of every check run in this session (label -> Result)."""
    return dict(_RESULTS)


# ---- tools for writing checks ---------------------------------------------------


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _copied(value: Any) -> Any:
    """A copy of an argument handed to an answer: tensors cloned (still connected to
    the graph, so a check may differentiate through them), arrays, containers and
    modules copied; anything else (numbers, strings, functions) as it is."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    return value


def call(fn: Any, *args: Any, desc: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on copies of the arguments (an answer may change its
    inputs in place, as ``pos.unsqueeze_(-1)`` does, without changing what the check
    compares it with), with a crash or a missing body turned into a verdict that
    names the input (``desc``)."""
    if not callable(fn):
        raise Wrong(f"expected a function, got {type(fn).__name__} ({fn!r:.60})")
    args, kwargs = _copied(args), _copied(kwargs)
    try:
        out = fn(*args, **kwargs)
    except Exception as error:
        raise Wrong(f"on {desc}, your function raised {_describe(error)}") from None
    if out is None:
        raise Wrong(
            f"on {desc}, your function returned None: did it forget to `return`?"
        )
    imaginary = _imaginary(out)
    if imaginary is not None:  # the checks compare real values: .double() drops it
        raise Wrong(
            f"on {desc}, your function returned a complex {imaginary}: every "
            "exercise asks for real values (torch.view_as_real turns complex "
            "numbers into pairs of reals; .real is right only where the imaginary "
            "part is 0)"
        )
    return out


def _imaginary(value: Any) -> str | None:
    """Where ``value`` (a tensor, an array, a number, or a container of them) holds
    a complex number with a nonzero imaginary part, said in words; else None."""
    if isinstance(value, (complex, np.complexfloating)):
        return f"number {value}" if value.imag else None
    if isinstance(value, torch.Tensor) and value.is_complex():
        kind, array = "tensor", value.detach().cpu().to(torch.complex128).numpy()
    elif isinstance(value, np.ndarray) and np.iscomplexobj(value):
        kind, array = "array", value.astype(complex)
    elif isinstance(value, (list, tuple)):
        return next((w for w in map(_imaginary, value) if w is not None), None)
    elif isinstance(value, dict):
        return _imaginary(list(value.values()))
    else:
        return None
    if not (array.imag != 0).any():
        return None
    idx = tuple(int(i) for i in np.argwhere(array.imag != 0)[0])
    return f"{kind} (imaginary part {array.imag[idx]:.6g} at {idx})"


def expect(condition: bool, message: str) -> None:
    """Raise Wrong(message) unless ``condition``."""
    if not condition:
        raise Wrong(message)


def _as_array(value: Any, what: str, desc: str) -> np.ndarray:
    """float64 values, or complex128 for complex ones (whose imaginary part a
    float64 copy would drop: a complex answer was judged by its real part)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        wide = torch.complex128 if value.is_complex() else torch.float64
        return value.to(wide).numpy()
    if isinstance(value, (int, float, complex, np.number, np.ndarray, list, tuple)):
        try:
            array = np.asarray(value)
            return array.astype(complex if np.iscomplexobj(array) else float)
        except (TypeError, ValueError):
            pass
    raise Wrong(
        f"on {desc}, {what} should be a number or a tensor, got {type(value).__name__}"
    )


def expect_close(
    got: Any,
    want: Any,
    *,
    desc: str,
    what: str = "your answer",
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Compare shape and values; the verdict names the first entry that differs. A
    NaN or an infinity in the answer is a mismatch unless the reference holds the same
    infinity at the same place (a NaN never matches). Complex values are compared as
    complex numbers: a complex answer to a real question is right only where its
    imaginary part is 0."""
    g, w = _as_array(got, what, desc), _as_array(want, "the reference", desc)
    if g.shape != w.shape:
        raise Wrong(
            f"on {desc}, {what} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        )
    if np.iscomplexobj(g) and not np.iscomplexobj(w):
        imaginary = np.abs(g.imag) > atol
        if imaginary.any():
            idx = tuple(int(i) for i in np.argwhere(imaginary)[0])
            raise Wrong(
                f"on {desc}, {what} is complex, with an imaginary part at {idx} "
                f"({g[idx]:.6g}), where a real value ({w[idx]:.6g}) was expected"
            )
    finite = np.isfinite(g) & np.isfinite(w)
    matched = finite | (np.isinf(w) & (g == w))  # the same infinity at the same place
    if not matched.all():
        idx = tuple(int(i) for i in np.argwhere(~matched)[0])
        kind = "a non-finite entry" if not np.isfinite(g[idx]) else "an entry"
        raise Wrong(
            f"on {desc}, {what} has {kind} at {idx}: {g[idx]:.6g} where "
            f"{w[idx]:.6g} was expected ({int((~matched).sum())} of {g.size} "
            "entries are NaN or infinite where the reference is not, or the reverse)"
        )
    g, w = np.where(finite, g, 0.0), np.where(finite, w, 0.0)
    err = np.abs(g - w)
    bad_mask = err > atol + rtol * np.abs(w)
    if bad_mask.any():
        if g.ndim == 0:
            raise Wrong(f"on {desc}, {what} is {float(g):.6g}, expected {float(w):.6g}")
        idx = tuple(int(i) for i in np.argwhere(bad_mask)[0])
        raise Wrong(
            f"on {desc}, {what} differs at entry {idx}: {g[idx]:.6g} where "
            f"{w[idx]:.6g} was expected ({int(bad_mask.sum())} of {g.size} entries "
            f"differ, the largest by {float(err.max()):.3g})"
            + _known_difference(g, w, atol, rtol)
        )


def _known_difference(g: np.ndarray, w: np.ndarray, atol: float, rtol: float) -> str:
    """What a wrong array answer is, when it is the reference up to a known change:
    a constant factor (a sign, a 1/sqrt(d) scale) or an order of the last axis (a
    layout). Empty when it is neither."""
    if np.iscomplexobj(g) or np.iscomplexobj(w) or g.size < 2:
        return ""
    norm = float((w * w).sum())
    if norm > 0:
        factor = float((g * w).sum()) / norm
        if np.all(np.abs(g - factor * w) <= atol + rtol * np.abs(factor * w)):
            if math.isclose(factor, -1.0, rel_tol=1e-4):
                return ": it is the expected answer with its sign flipped"
            for k in range(2, 4097):
                for f, name in ((k**-0.5, f"1/sqrt({k})"), (k**0.5, f"sqrt({k})")):
                    if math.isclose(abs(factor), f, rel_tol=1e-4):
                        sign = "-" if factor < 0 else ""
                        return f": it is the expected answer times {sign}{name}"
            return f": it is the expected answer times {factor:.6g}"
    if g.ndim >= 1 and g.shape[-1] > 1:
        if np.allclose(np.sort(g, -1), np.sort(w, -1), atol=atol, rtol=rtol):
            return (
                ": it holds the expected values in another order along the last "
                "axis (another layout?)"
            )
    return ""


def isclose(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)


# ---- the chapters' checks, registered on first use -------------------------------

_LOADED = False


def all_checks() -> dict[str, Check]:
    """Every registered check (label -> Check), the chapters' modules loaded."""
    _load()
    return dict(CHECKS)


def _load() -> None:
    """Import every ``posenc_lib/course/exercises/<chapter>.py`` (each registers
    its checks)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")

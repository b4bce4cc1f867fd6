"""The course beside the library: what the chapters use and a model does not.

* ``book``: the chapters' helpers (``setup``, seeds a sweep can shift, ``glue``,
  ``show_source``, the committed seed sweeps);
* ``exercises``: the exercises that check themselves, one module per chapter;
* ``lab``: the length-extrapolation harness;
* ``plotting``, ``interactive``: the course's figures (matplotlib; plotly sliders);
* ``models_data``, ``frontier``, ``taxonomy``: the tables of released models, the
  2024-2026 methods and the four-term lens, as data; ``hybrids``: which layers of the
  2025-2026 hybrids rotate.

Nothing here is imported by ``import posenc_lib``: each module loads on first use, as
``pl.book``, ``pl.exercises``, ``pl.lab``, ... (the package's ``__getattr__``), and
under its older names too (``import posenc_lib.exercises``, ``from
posenc_lib.interactive import show``: the same module objects, see
``posenc_lib.lazy``). The figures need the ``course`` extra:
``pip install "posenc_lib[course]"`` (matplotlib, plotly, sympy).
"""

from __future__ import annotations

from ..lazy import COURSE_MODULES, COURSE_NAMES  # noqa: F401  (the course's names)

EXTRA = 'pip install "posenc_lib[course]"'


def needs(package: str, module: str) -> ModuleNotFoundError:
    """The error a course module raises when the ``course`` extra is missing."""
    return ModuleNotFoundError(
        f"{module} needs {package}, which the library alone does not install: "
        f"{EXTRA} (or pip install {package})"
    )

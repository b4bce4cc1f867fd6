"""The course beside the library: what the chapters use and a model does not.

* ``book``: the chapters' helpers (``setup``, seeds a sweep can shift, ``glue``,
  ``show_source``, the committed seed sweeps);
* ``exercises``: the exercises that check themselves, one module per chapter;
* ``lab``: the length-extrapolation harness;
* ``plotting``, ``interactive``: the course's figures (matplotlib; plotly sliders);
* ``models_data``, ``frontier``, ``taxonomy``: the tables of released models, the
  2024-2026 methods and the four-term lens, as data.

Nothing here is imported by ``import posenc_lib``: each module loads on first use, as
``pl.book``, ``pl.exercises``, ``pl.lab``, ... (the package's ``__getattr__``), and
under its older names too (``import posenc_lib.exercises``, ``from
posenc_lib.interactive import show``: the same module objects, see
``install_aliases``). The figures need the ``course`` extra:
``pip install "posenc_lib[course]"`` (matplotlib, plotly, sympy).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# the course's modules, importable as posenc_lib.<name> and posenc_lib.course.<name>
COURSE_MODULES = (
    "book",
    "exercises",
    "frontier",
    "interactive",
    "lab",
    "models_data",
    "plotting",
    "taxonomy",
)
# names the top level hands on from them (pl.heatmap is pl.course.plotting.heatmap)
COURSE_NAMES = {
    "COLORS": "plotting",
    "color_for": "plotting",
    "heatmap": "plotting",
    "label_points": "plotting",
    "overlapping_labels": "plotting",
    "set_plot_style": "plotting",
    "DEPLOYED_MODELS": "models_data",
    "model_table": "models_data",
    "spec_inv_freq": "models_data",
    "four_term_table": "taxonomy",
}
EXTRA = 'pip install "posenc_lib[course]"'


def needs(package: str, module: str) -> ModuleNotFoundError:
    """The error a course module raises when the ``course`` extra is missing."""
    return ModuleNotFoundError(
        f"{module} needs {package}, which the library alone does not install: "
        f"{EXTRA} (or pip install {package})"
    )


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``posenc_lib.<course module>[.sub]`` -> ``posenc_lib.course.<...>``: the
    import returns the course's own module object (no second copy: an exercise check
    registers once)."""

    prefix = __name__.rsplit(".", 1)[0] + "."  # "posenc_lib."

    def find_spec(self, fullname, path=None, target=None):
        rest = fullname[len(self.prefix) :] if fullname.startswith(self.prefix) else ""
        if rest.split(".")[0] in COURSE_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # a placeholder, replaced in exec_module

    def exec_module(self, module):
        target = __name__ + "." + module.__name__[len(self.prefix) :]
        # the import system returns whatever sys.modules holds under the alias
        sys.modules[module.__name__] = importlib.import_module(target)


def install_aliases() -> None:
    """Make the course's older module names importable (once)."""
    if not any(isinstance(f, _Aliases) for f in sys.meta_path):
        sys.meta_path.insert(0, _Aliases())

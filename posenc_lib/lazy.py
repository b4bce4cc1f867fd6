"""What ``import posenc_lib`` does not load: the course, on first use.

``posenc_lib.course`` holds the chapters' code (see its docstring). The package's
``__getattr__`` hands out its modules and a few of its names when first asked
(``pl.book``, ``pl.exercises``, ``pl.heatmap``), and ``install_aliases`` keeps the
course's older module names importable (``import posenc_lib.exercises``, ``from
posenc_lib.interactive import show``) as the very same module objects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

PACKAGE = __name__.rsplit(".", 1)[0]  # "posenc_lib"
# the course's modules, importable as posenc_lib.<name> and posenc_lib.course.<name>
COURSE_MODULES = (
    "book",
    "exercises",
    "frontier",
    "hybrids",
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


def course_attribute(name: str):
    """``pl.<name>`` for a course module or name, loaded now; else AttributeError."""
    if name in COURSE_MODULES:
        return importlib.import_module(f"{PACKAGE}.course.{name}")
    if name in COURSE_NAMES:
        module = importlib.import_module(f"{PACKAGE}.course.{COURSE_NAMES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``posenc_lib.<course module>[.sub]`` -> ``posenc_lib.course.<...>``: the
    import returns the course's own module object (no second copy: an exercise check
    registers once)."""

    prefix = PACKAGE + "."

    def find_spec(self, fullname, path=None, target=None):
        rest = fullname[len(self.prefix) :] if fullname.startswith(self.prefix) else ""
        if rest.endswith(".__main__"):
            # `python -m posenc_lib.lab`: runpy reads the code of the package's
            # __main__, which the path finder finds in the course package's folder
            return None
        if rest.split(".")[0] in COURSE_MODULES:
            real = importlib.util.find_spec(f"{PACKAGE}.course.{rest}")
            package = real is not None and real.submodule_search_locations is not None
            return importlib.util.spec_from_loader(fullname, self, is_package=package)
        return None

    def create_module(self, spec):
        return None  # a placeholder, replaced in exec_module

    def exec_module(self, module):
        target = f"{PACKAGE}.course." + module.__name__[len(self.prefix) :]
        # the import system returns whatever sys.modules holds under the alias
        sys.modules[module.__name__] = importlib.import_module(target)


def install_aliases() -> None:
    """Make the course's older module names importable (once)."""
    if not any(isinstance(f, _Aliases) for f in sys.meta_path):
        sys.meta_path.insert(0, _Aliases())

"""The library and the course apart: ``import posenc_lib`` loads the library only;
the course (``posenc_lib.course``) loads on first use, under its old names too, and
says which extra it needs when that is missing. The ``build`` test installs the
package into fresh virtual environments, as a library user and as a student would."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import pathlib
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import venv

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

import posenc_lib as pl

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("matplotlib", "plotly", "IPython", "sympy")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # as the workflow installs it


def run(code: str, python: str = sys.executable) -> str:
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd="/", timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def reachable(url: str, timeout: float = 10.0) -> bool:
    """Whether ``url`` answers at all (pip retries an unreachable index five times
    for each package it resolves: over a minute of waiting for torch's)."""
    try:
        urllib.request.urlopen(
            urllib.request.Request(url, method="HEAD"), timeout=timeout
        )
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False
    return True


def torch_index(answers=reachable) -> list[str]:
    """pip's arguments for torch: PyTorch's CPU index (as the workflow installs it)
    where the index answers, else none (pip's other sources)."""
    return ["--extra-index-url", CPU_TORCH_INDEX] if answers(CPU_TORCH_INDEX) else []


def test_import_posenc_lib_loads_neither_the_course_nor_a_plotting_library():
    loaded = json.loads(
        run(
            "import json, sys, posenc_lib\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY!r} or m.startswith('posenc_lib.course.'))))"
        )
    )
    assert loaded == []


def test_the_course_loads_on_first_use_under_every_name_once():
    import posenc_lib.exercises as by_old_name
    import posenc_lib.exercises.rope as chapter_checks
    from posenc_lib import lab
    from posenc_lib.interactive import show

    assert by_old_name is pl.exercises is sys.modules["posenc_lib.course.exercises"]
    assert chapter_checks is sys.modules["posenc_lib.course.exercises.rope"]
    assert lab is pl.lab and show is pl.interactive.show
    assert pl.heatmap is pl.course.plotting.heatmap
    assert pl.four_term_table is pl.course.taxonomy.four_term_table
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        pl.not_a_name  # noqa: B018


@pytest.mark.parametrize(
    "blocked, module",
    [("matplotlib", "plotting"), ("plotly", "interactive"), ("IPython", "book")],
)
def test_a_course_module_without_its_extra_names_the_extra(blocked, module):
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "import posenc_lib as pl\n"
        "try:\n"
        f"    m = __import__('posenc_lib.course.{module}', fromlist=['x'])\n"
        "    m.glue('x', 1) if hasattr(m, 'glue') else None\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    said = run(code)
    assert f"needs {blocked}" in said and 'pip install "posenc_lib[course]"' in said


# ---- fresh environments: the library alone, then with the course ----


def _imports(code: str, filename: str) -> set[str]:
    """The modules ``code`` imports (``ast``: ``import x.y`` and ``from x.y import
    z`` give ``x.y``; relative imports aside)."""
    found = set()
    for node in ast.walk(ast.parse(code, filename=filename)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
    return found


def _chapter_imports() -> set[str]:
    """The modules the chapters' code cells import (IPython's ``%``/``!`` lines
    aside)."""
    found = set()
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            lines = "".join(cell["source"]).splitlines()
            code = "\n".join(
                "" if line.lstrip().startswith(("%", "!")) else line for line in lines
            )
            found |= _imports(code, str(path))
    return found


def _own_extras_packages(installed: set[str]) -> set[str]:
    """The packages of the extras that a chapter installs in a Colab cell of its own,
    after the canonical one, beyond ``installed`` (the real-checkpoint chapter:
    "hf")."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own_extras = set()
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"][1:]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            for m in re.finditer(r"posenc_lib\[([^\]]*)\] @", source):
                own_extras |= set(m.group(1).split(",")) - installed
    return {
        canonicalize_name(Requirement(r).name)
        for extra in own_extras
        for r in meta["optional-dependencies"][extra]
    }


def _student_requirements() -> list[Requirement]:
    """What the student README's install line and the Colab cell of every chapter
    install: the ``posenc_lib`` requirement of each (``"posenc_lib[course] @ ..."``)."""
    from tools.authoring.colab_cell import canonical_source
    from tools.build.student_edition import readme

    readme_line = re.search(r'pip install "(posenc_lib[^"]*)"', readme())
    colab_line = re.search(r'url = f"(posenc_lib[^"]*)"', canonical_source())
    assert readme_line and colab_line, "no posenc_lib install line found"
    return [Requirement(m[1]) for m in (readme_line, colab_line)]


def test_the_student_readme_and_the_colab_cell_install_what_the_chapters_import():
    """The student README and the Colab cell install ``posenc_lib`` with the same
    extras, and the library's dependencies with those extras provide every
    top-level module the chapters import (plotly included): the fresh install below
    imports them."""
    readme_req, colab_req = _student_requirements()
    assert readme_req.name == colab_req.name == "posenc_lib"
    assert readme_req.extras == colab_req.extras == {"course"}
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(meta["dependencies"])
    for extra in readme_req.extras:
        wanted += meta["optional-dependencies"][extra]
    declared = {canonicalize_name(Requirement(r).name) for r in wanted}
    # the other extras (``fast``: numba for CoPE's CPU scan) are optional to the
    # library, which imports them behind a fallback: the library may use them, the
    # chapters may not need them
    optional = {
        canonicalize_name(Requirement(r).name)
        for extra, reqs in meta["optional-dependencies"].items()
        if extra not in readme_req.extras
        for r in reqs
    }
    # a chapter that needs another extra installs it in a Colab cell of its own
    # after the canonical one (From the course to a real checkpoint: "hf"); what
    # that extra provides is declared for the chapters too
    declared |= _own_extras_packages(readme_req.extras)
    provides = importlib.metadata.packages_distributions()
    chapters = _chapter_imports()
    library = set()  # and what the library imports for them
    for path in (ROOT / "posenc_lib").rglob("*.py"):
        library |= _imports(path.read_text(), str(path))

    def third_party(imported):
        return {
            m.split(".")[0]
            for m in imported
            if m.split(".")[0] not in sys.stdlib_module_names
            and m.split(".")[0] != "posenc_lib"
        }

    assert {"plotly", "IPython", "matplotlib", "sympy"} <= third_party(
        chapters | library
    )
    for module in sorted(third_party(chapters | library)):
        dists = {canonicalize_name(d) for d in provides.get(module, [])}
        # an optional module not installed here (``datasets``): its own name
        dists = dists or {canonicalize_name(module)}
        allowed = declared if module in third_party(chapters) else declared | optional
        assert dists & allowed, f"{module} (from {dists}) is in no declared dependency"


@pytest.mark.build
def test_fresh_installs_the_library_alone_and_with_the_course(tmp_path):
    """``pip install .`` then ``import posenc_lib``: no plotting library is even
    installed; then ``posenc_lib`` with the extras the student README installs
    (``[course]``): every module a chapter's code imports (``ast``) imports.
    torch comes first, the version requirements.txt pins, as a CPU build (PyTorch's
    CPU index, or this machine's local wheel), so that no CUDA build is downloaded."""
    # what a clone holds (the tracked files): pip builds in the source folder
    source = tmp_path / "source"
    tracked = (
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")

    def pip(*args):  # no .pyc written ahead (a third of torch's install time): the
        # imports below compile what they import, as a reader's first import does
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", "--no-compile", *args],
            capture_output=True, text=True, cwd=source,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    torch_pin = next(
        line.strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    # a CPU build from PyTorch's CPU index (PyPI's Linux torch brings several GB of
    # CUDA libraries); where that index is unreachable, from pip's other sources
    pip(torch_pin, *torch_index())
    assert run("import torch; print(torch.version.cuda)", python).strip() == "None"
    pip(str(source))
    out = run(
        "import importlib.util as u, posenc_lib as pl\n"
        f"print([m for m in {HEAVY[:3]!r} if u.find_spec(m)])\n"
        "print(pl.TinyTransformer(10, 16, 2, 1, pe='rope').n_params())",
        python,
    )
    assert out.splitlines()[0] == "[]", (
        out
    )  # none is installed (sympy comes with torch)
    # what the student README installs (the extras of its posenc_lib line), from the
    # clone instead of the repository's URL
    extras = ",".join(sorted(_student_requirements()[0].extras))
    pip(f"{source}[{extras}]")
    # what a chapter's own Colab cell installs besides (transformers) is not imported
    own = _own_extras_packages(set(extras.split(",")))
    assert own, "the real-checkpoint chapter installs the hf extra"
    modules = sorted(
        m for m in _chapter_imports() if canonicalize_name(m.split(".")[0]) not in own
    )
    assert "posenc_lib.interactive" in modules and "sympy" in modules
    run(f"import importlib\nfor m in {modules!r}: importlib.import_module(m)", python)

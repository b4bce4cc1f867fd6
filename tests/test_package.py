"""The library and the course apart: ``import posenc_lib`` loads the library only;
the course (``posenc_lib.course``) loads on first use, under its old names too, and
says which extra it needs when that is missing. The ``build`` test installs the
package into fresh virtual environments, as a library user and as a student would."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
import venv

import pytest

import posenc_lib as pl

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("matplotlib", "plotly", "IPython", "sympy")


def run(code: str, python: str = sys.executable) -> str:
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd="/", timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


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


def _chapter_imports() -> set[str]:
    """The top-level modules the chapters import (posenc_lib's own modules aside)."""
    found = set()
    for path in sorted((ROOT / "book").glob("part*/*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            found |= set(re.findall(r"^\s*import ([\w.]+)", src, re.M))
            found |= set(re.findall(r"^\s*from ([\w.]+) import", src, re.M))
    return {m for m in found if not m.startswith(".")}


@pytest.mark.build
def test_fresh_installs_the_library_alone_and_with_the_course(tmp_path):
    """``pip install .`` then ``import posenc_lib``: no plotting library is even
    installed; ``pip install ".[course]"``: every module a chapter imports imports.
    torch comes first from the pinned local wheel (requirements.txt), as the Makefile
    installs it, so that no CUDA build is downloaded."""
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

    def pip(*args):
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", *args],
            capture_output=True, text=True, cwd=source,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    torch_pin = next(
        line.strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    pip(torch_pin)
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
    pip(f"{source}[course]")
    modules = sorted(_chapter_imports())
    assert "posenc_lib.interactive" in modules and "sympy" in modules
    run(f"import importlib\nfor m in {modules!r}: importlib.import_module(m)", python)

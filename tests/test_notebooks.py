"""Notebook hygiene: every chapter is in the table of contents, stored clean,
self-checking, and starts with the one canonical Colab install cell; and (``-m build``,
run by ``make test``) every notebook executes without error in the strict site build."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tools import toc
from tools.authoring.colab_cell import TAG, canonical_source, toc_notebooks

ROOT = pathlib.Path(__file__).resolve().parents[1]

NOTEBOOKS = sorted(
    p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
TOC_FILES = toc.entries()
SKELETON = [
    "Learning objectives",
    "Prerequisites",
    "## Exercises",
    "## Summary",
    "## References",
]


def ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


def load(path):
    return json.loads(path.read_text())


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks under book/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_is_in_the_toc(path):
    assert path.relative_to(ROOT).with_suffix("").as_posix() in TOC_FILES, (
        f"{path} is not listed in _toc.yml"
    )


def test_every_toc_entry_exists():
    for entry in TOC_FILES:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md")), (
            f"_toc.yml lists missing {entry}"
        )
    assert set(toc_notebooks()) == set(NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_is_stored_without_outputs(path):
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, (
                f"{path.name}: a code cell has stored outputs; "
                "clear them before committing"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_checks_itself(path):
    code = "\n".join(
        "".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "code"
    )
    assert re.search(r"\bassert\b|assert_close", code), (
        f"{path.name} contains no assertion"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_first_cell_is_the_canonical_colab_cell(path):
    first = load(path)["cells"][0]
    assert first["cell_type"] == "code"
    assert "".join(first["source"]) == canonical_source(), (
        f"{path.name}: the Colab cell differs from the canonical one; "
        "run `python -m tools.authoring.colab_cell --fix`"
    )
    assert TAG in first["metadata"].get("tags", []), (
        f"{path.name}: the Colab cell must be tagged {TAG}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_follows_the_chapter_skeleton(path):
    cells = load(path)["cells"]
    markdown = "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    assert len(re.findall(r"^# ", markdown, re.M)) == 1, (
        f"{path.name}: exactly one '# ' title"
    )
    positions = [markdown.find(part) for part in SKELETON]
    missing = [part for part, at in zip(SKELETON, positions) if at < 0]
    assert not missing, f"{path.name}: missing skeleton sections {missing}"
    assert positions == sorted(positions), (
        f"{path.name}: skeleton sections out of order ({SKELETON})"
    )
    assert "{exercise}" in markdown and ":class: dropdown" in markdown, (
        f"{path.name}: exercises with hidden solutions"
    )
    assert "{footbibliography}" in markdown, (
        f"{path.name}: references via {{footbibliography}}"
    )


# a cell that draws at its top level (not only inside a function it defines)
DRAWS = re.compile(
    r"^(\w+(, \w+)* = )?(plt\.(subplots|figure|show)\(|slider_figure\()", re.M
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_every_figure_has_a_caption_and_alt_text(path):
    """A cell that draws a figure carries myst-nb's figure metadata: a caption (the
    site numbers it, "Fig. 14.1"; the Colab edition prints it under the figure), a
    name to link to, and alt text that says what the figure shows."""
    for cell in load(path)["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or not DRAWS.search(source):
            continue
        meta = cell["metadata"].get("mystnb", {})
        caption = meta.get("figure", {}).get("caption", "")
        alt = meta.get("image", {}).get("alt", "")
        where = f"{path.name} cell {cell.get('id')}"
        assert len(caption) > 30, f"{where}: mystnb.figure.caption missing or empty"
        assert meta["figure"].get("name", "").startswith("fig-"), f"{where}: name"
        assert len(alt) > 30 and alt != caption, f"{where}: mystnb.image.alt"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_uses_the_python3_kernel(path):
    assert load(path)["metadata"]["kernelspec"]["name"] == "python3"


# The strict site build (`make test` selects these with -m build; they are skipped
# otherwise). In the test command nbval has just executed every chapter and filled
# the execution cache (tools/build/nbval_cache.py), so the build renders every page
# from it and executes none: POSENC_EXPECT_CACHED=1 (set by tools/build/test.sh) makes
# that a test. Run alone, the build executes what the cache lacks, and fails on any
# cell error (allow_errors: false, nb_execution_raise_on_error: true in _config.yml);
# these tests say which notebook, with its traceback.
BUILD_LOG = ROOT / "_build" / "logs" / "build.log"
TOC_NOTEBOOKS = toc_notebooks()
EXECUTED = re.compile(r"^(?:.*/)?(book/\S+?\.ipynb): Executed notebook in", re.M)
CACHED = re.compile(r"^(?:.*/)?(book/\S+?\.ipynb): Using cached notebook", re.M)
EXPECT_CACHED = os.environ.get("POSENC_EXPECT_CACHED") == "1"
FAILED = re.compile(
    r"^(?:.*/)?(book/\S+?\.ipynb)(?::\d+)?: WARNING: Executing notebook failed", re.M
)


@pytest.fixture(scope="session")
def strict_build() -> tuple[int, str]:
    """``python -m tools.build.site --all-pages`` once (every page rebuilt, notebooks
    from the execution cache where it has them): its exit status and its log."""
    BUILD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with BUILD_LOG.open("w") as log:
        status = subprocess.run(
            [sys.executable, "-m", "tools.build.site", "--all-pages"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    log = BUILD_LOG.read_text(errors="replace")
    return status, re.sub(r"\x1b\[[0-9;]*m", "", log)  # without terminal colours


@pytest.mark.build
@pytest.mark.parametrize("path", TOC_NOTEBOOKS, ids=ids(TOC_NOTEBOOKS))
def test_notebook_executes_in_the_strict_build(strict_build, path):
    _, log = strict_build
    rel = path.relative_to(ROOT).as_posix()
    if rel in CACHED.findall(log):
        return
    if rel in EXECUTED.findall(log):
        assert not EXPECT_CACHED, (
            f"{rel} was executed by the site build although nbval had just executed "
            "it: its outputs did not reach the cache (tools/build/nbval_cache.py)"
        )
        return
    failed = FAILED.search(log)
    if failed and failed.group(1) == rel:
        report = log[failed.start() :].split("[mystnb.exec]")[0]
        cell = report.find("An error occurred while executing the following cell")
        pytest.fail(f"{rel} failed in the site build:\n{report[max(cell, 0) :][:6000]}")
    if failed:
        pytest.skip(f"not executed: the build stopped at {failed.group(1)}")
    pytest.fail(f"{rel} was not executed by the build (see {BUILD_LOG})")


@pytest.mark.build
def test_the_strict_site_build_passes(strict_build):
    status, log = strict_build
    problems = [
        line
        for line in log.splitlines()
        if re.search(r"WARNING|ERROR|Traceback|exited", line)
        and "Kernel is running over TCP" not in line
    ]
    assert status == 0, (
        f"the site build exited {status} (log: {BUILD_LOG}):\n"
        + "\n".join(problems[-40:] or log.splitlines()[-40:])
    )

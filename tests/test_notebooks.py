"""Notebook hygiene: every chapter is in the table of contents, stored clean,
self-checking, and starts with the one canonical Colab install cell."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from tools.authoring.colab_cell import TAG, canonical_source, toc_notebooks

ROOT = pathlib.Path(__file__).resolve().parents[1]

NOTEBOOKS = sorted(
    p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
TOC_TEXT = (ROOT / "_toc.yml").read_text()
TOC_FILES = re.findall(r"^\s*-?\s*(?:file|root):\s*(\S+)", TOC_TEXT, re.M)
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_notebook_uses_the_python3_kernel(path):
    assert load(path)["metadata"]["kernelspec"]["name"] == "python3"

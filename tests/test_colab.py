"""Colab shows what the site shows: no MyST markup that Colab renders as a bare path.

Colab renders plain Markdown and LaTeX. Of MyST's extras, a citation role reads as its
key and a directive fence reads as a code block, which is acceptable; but
``{literalinclude}`` shows a file path instead of the code, and cross-reference roles
(``{doc}``, ``{ref}``, ``{numref}``, ``{eq}``) show a raw path or label instead of a
link. Chapters print library code with ``pl.book.show_source`` and link with ordinary
Markdown links to ``.ipynb`` files, which work on the site (MyST resolves them) and
read as links in Colab.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
RAW_IN_COLAB = re.compile(r"\{(literalinclude|doc|ref|numref|eq|download)\}")


def markdown(path: pathlib.Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_markdown_has_no_markup_that_colab_shows_raw(path):
    found = sorted({m.group(0) for m in RAW_IN_COLAB.finditer(markdown(path))})
    assert not found, (
        f"{found} render as bare text in Colab: print code with "
        "pl.book.show_source(...) and link with [title](other_chapter.ipynb)"
    )


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_markdown_links_to_chapters_resolve(path):
    for target in re.findall(r"\]\(([^)#\s]+\.ipynb)(?:#[^)]*)?\)", markdown(path)):
        assert (path.parent / target).resolve().exists(), f"{path.name} -> {target}"

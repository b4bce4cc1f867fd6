"""The repository's paths in the prose link to its files (tools/build/repo_links.py):
what counts as a path, the URL it gets, the transform on a page, and every path the
book's prose names is one the repository holds."""

from __future__ import annotations

import json
import logging
import re

import pytest
from docutils import nodes
from docutils.core import publish_doctree

from tools import toc
from tools.build import repo_links

REPO = "https://github.com/posenc-course/positional-encoding-course"
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


@pytest.mark.parametrize(
    "text, path",
    [
        ("tests/test_layouts.py", "tests/test_layouts.py"),
        ("tests/test_cache.py::test_decoding", "tests/test_cache.py"),
        ("posenc_lib/data/sweeps/", "posenc_lib/data/sweeps/"),
        ("tests/golden/<x>.json", None),  # a placeholder, not a path
        ("posenc_lib/data/attention_*.csv", None),
        ("models/llama/modeling_llama.py", None),  # another repository's layout
        ("tests/test_attn.py", None),  # another repository's file (FOREIGN)
        ("pl.attention", None),
        ("tools/measure/bench_model.py --device cuda", None),  # a command
    ],
)
def test_what_counts_as_a_repository_path(text, path):
    assert repo_links.repository_path(text) == path


def test_the_url_of_a_file_a_folder_and_a_missing_path():
    url = repo_links.file_url(REPO, "main", "tests/test_plotting.py")
    assert url == f"{REPO}/blob/main/tests/test_plotting.py"
    assert repo_links.file_url(REPO, "main", "posenc_lib/data/sweeps/") == (
        f"{REPO}/tree/main/posenc_lib/data/sweeps"
    )
    assert repo_links.file_url(REPO, "main", "tests/test_no_such_file.py") is None
    assert repo_links.file_url(REPO, "main", "tests/test_plotting.py/") is None


class App:  # what the transform reads of Sphinx's application
    class config:
        html_theme_options = {"repository_url": REPO, "repository_branch": "main"}


def test_the_transform_links_a_path_and_warns_on_a_missing_one(caplog):
    doctree = publish_doctree(
        "See ``tests/test_plotting.py`` and ``tests/test_gone.py``, not ``pl.x``."
    )
    with caplog.at_level(logging.WARNING):
        repo_links.link_repository_paths(App, doctree, "book/x")
    links = list(doctree.findall(nodes.reference))
    assert [r["refuri"] for r in links] == [f"{REPO}/blob/main/tests/test_plotting.py"]
    assert links[0].astext() == "tests/test_plotting.py"
    assert "tests/test_gone.py" in caplog.text and "not a file" in caplog.text


def _prose():
    """(page, inline code) for every inline code of the book's Markdown."""
    pages = [toc.ROOT / p for p in toc.notebooks()]
    pages += sorted((toc.ROOT / "book").rglob("*.md"))
    for page in pages:
        if page.suffix == ".ipynb":
            cells = json.loads(page.read_text())["cells"]
            text = "\n".join(
                "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
            )
        else:
            text = page.read_text()
        for code in INLINE_CODE.findall(text):
            yield page.relative_to(toc.ROOT).as_posix(), code


def test_every_repository_path_in_the_prose_exists():
    """A path the prose names and the repository does not hold would be a warning in
    the site build; this finds it without one."""
    named, missing = 0, []
    for page, code in _prose():
        path = repo_links.repository_path(code)
        if path is None:
            continue
        named += 1
        if repo_links.file_url(REPO, "main", path) is None:
            missing.append(f"{page}: `{code}`")
    assert named > 50, named
    assert not missing, "\n".join(missing)


def test_the_editions_markdown_gets_the_same_links():
    """The Colab and student editions leave Sphinx out: their Markdown gets the
    links from ``link_markdown`` (colab_edition.Converter.inline)."""
    text = (
        "`tests/test_plotting.py` holds it; `tests/test_gone.py`, `pl.x` and "
        "[`tools/README.md`](elsewhere) stay."
    )
    assert repo_links.link_markdown(text, REPO, "main") == (
        f"[`tests/test_plotting.py`]({REPO}/blob/main/tests/test_plotting.py) holds"
        " it; `tests/test_gone.py`, `pl.x` and [`tools/README.md`](elsewhere) stay."
    )


def test_the_colab_edition_links_the_chapters_paths():
    from tools.build import colab_edition

    nb = json.loads((toc.ROOT / "book" / "part6" / "cost.ipynb").read_text())
    out, _ = colab_edition.convert(
        nb, "book/part6/cost", 29, None, colab_edition.load_bib(), allow_missing=True
    )
    text = "".join("".join(c["source"]) for c in out["cells"])
    assert f"({REPO}/blob/main/tools/measure/bench_model.py)" in text

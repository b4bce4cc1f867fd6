"""The Colab edition (tools/build/colab_edition.py) shows the course in Colab, not MyST.

Colab renders a Markdown cell as CommonMark (plus GFM tables) with MathJax over the
result; it knows no MyST. Each generated notebook is rendered that way here
(markdown-it-py in commonmark mode, with the ``$…$`` maths protected as Colab protects
it) and the rendered HTML must show no raw role (``{footcite:p}`key```), no directive
fence (a code block whose language is ``{exercise}``), no ``:label:``/``:class:`` line,
no ``{glue`` text and no ``(label)=`` target.

The first variant writes the edition with ``--allow-missing`` (no executed notebooks:
glued numbers become a "run the notebook" note), so it runs in the ordinary test
command. The ``build`` variant reads the site build's executed notebooks
(``_build/jupyter_execute``) and checks that every glued value was substituted.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from tools import toc
from tools.build import colab_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRIES = toc.notebook_entries()
RAW = [
    (re.compile(r"\{[a-z][\w:-]*\}<code>"), "a MyST role"),
    (re.compile(r'<code class="language-\{'), "a directive fence"),
    (re.compile(r"(^|>)\s*:(label|class|tags|name):", re.M), "a directive option"),
    (re.compile(r"\{glue"), "a glue role"),
    (re.compile(r"\{footbibliography\}|\{bibliography\}"), "a bibliography directive"),
    (re.compile(r"^<p>\([\w.:-]+\)=</p>$", re.M), "a MyST target"),
]


def colab_markdown() -> MarkdownIt:
    """CommonMark with GFM tables, maths kept for MathJax: what Colab renders."""
    return MarkdownIt("commonmark").enable("table").use(dollarmath_plugin)


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("colab")
    colab_edition.build(out, executed=None, allow_missing=True, use_cache=False,
                        log=lambda _: None)  # fmt: skip
    return out


def rendered(path: pathlib.Path) -> list[str]:
    md = colab_markdown()
    cells = json.loads(path.read_text())["cells"]
    return [
        md.render("".join(c["source"])) for c in cells if c["cell_type"] == "markdown"
    ]


def leftovers(html: str) -> list[str]:
    found = []
    for pattern, what in RAW:
        for m in pattern.finditer(html):
            found.append(f"{what}: …{html[max(0, m.start() - 60) : m.end() + 40]}…")
    return found


@pytest.mark.parametrize("entry", ENTRIES)
def test_colab_edition_has_no_myst(edition, entry):
    path = edition / f"{entry}.ipynb"
    source = json.loads((ROOT / f"{entry}.ipynb").read_text())
    colab = json.loads(path.read_text())

    # code cells unchanged and in order (a solution's code under its form title),
    # the install cell first
    def code(cells):
        return [
            "".join(c["source"]).split("(double-click to show the code)\n", 1)[-1]
            for c in cells
            if c["cell_type"] == "code"
        ]

    assert code(colab["cells"]) == code(source["cells"])
    assert "google.colab" in "".join(colab["cells"][0]["source"])
    problems = [p for html in rendered(path) for p in leftovers(html)]
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("entry", ENTRIES)
def test_colab_edition_keeps_exercises_solutions_and_references(edition, entry):
    source = "\n".join(
        "".join(c["source"])
        for c in json.loads((ROOT / f"{entry}.ipynb").read_text())["cells"]
        if c["cell_type"] == "markdown"
    )
    html = "\n".join(rendered(edition / f"{entry}.ipynb"))
    chapter = toc.chapter_numbers().get(entry)
    n = len(re.findall(r"^`{3,}\{exercise\}", source, re.M))
    for k in range(1, n + 1):
        assert f"<strong>Exercise {chapter}.{k}" in html, f"Exercise {chapter}.{k}"
    assert html.count("<details>") == len(
        re.findall(r"^`{3,}\{solution(?:-start)?\}", source, re.M)
    )
    # a coding exercise's solution code: a Colab form cell (title shown, code folded)
    cells = json.loads((edition / f"{entry}.ipynb").read_text())["cells"]
    for cell in cells:
        if cell["cell_type"] == "code" and "solution" in cell["metadata"].get(
            "tags", []
        ):
            assert cell["metadata"].get("cellView") == "form"
            assert cell["metadata"]["jupyter"]["source_hidden"]  # folded in Jupyter
            assert "".join(cell["source"]).startswith("# @title Solution to Exercise")
    assert not any("{solution-end}" in "".join(c["source"]) for c in cells)
    # each captioned figure: its numbered caption in the cell after it
    for k, cell in enumerate(cells):
        if cell.get("metadata", {}).get("mystnb", {}).get("figure"):
            after = "".join(cells[k + 1]["source"])
            assert after.startswith(f"**Figure {chapter}."), after[:80]
    if "{footbibliography}" in source:
        cited = set(re.findall(r"\{(?:foot)?cite:?[pt]?\}`([^`]*)`", source))
        assert cited and html.count("<li>") >= 1
        assert "et al." in html or " (" in html


def test_citations_and_glue_are_rewritten():
    bib = colab_edition.load_bib()
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": [
                "(sec-x)=\n## X\n\nALiBi {footcite:p}`press2022train` took "
                "{glue:text}`ratio:.1f` times; {footcite:t}`press2022train` say so; "
                "{math}`x^2`.\n\n```{admonition} Erratum: a title\n:class: warning\n"
                "Body.\n```\n\n```{footbibliography}\n```\n"
            ]},
        ],
        "metadata": {},
    }  # fmt: skip
    glued = {"ratio": {"text/plain": "'1.2345'"}}
    out, conv = colab_edition.convert(nb, "book/part3/alibi", 16, glued, bib)
    text = "".join(out["cells"][0]["source"])
    assert "(Press et al., 2022)" in text and "Press et al. (2022) say" in text
    assert "took 1.2 times" in text and "$x^2$" in text
    assert "> **Erratum: a title**\n>\n> Body." in text
    assert "- Press, O., Smith, N. A., and Lewis, M. (2022). Train Short" in text
    assert "(sec-x)=" not in text and conv.substituted == 1 and not conv.missing


def test_missing_values_fail_without_allow_missing(tmp_path):
    with pytest.raises(SystemExit, match="needs the executed notebooks"):
        colab_edition.build(
            tmp_path,
            executed=tmp_path / "none",
            use_cache=False,
            entries=["book/part3/alibi"],
            log=lambda _: None,
        )


@pytest.mark.build
def test_colab_edition_of_the_built_site_has_every_value(tmp_path):
    """After `make site`: every glued value of every chapter is in the Colab edition."""
    executed = ROOT / "_build" / "jupyter_execute"
    if not executed.exists():
        pytest.fail("no _build/jupyter_execute: build the site first (make site)")
    done = colab_edition.build(tmp_path, executed=executed, log=lambda _: None)
    # tools/build/site.py wrote the same edition after the build
    assert all((ROOT / "_build" / "colab" / f"{e}.ipynb").exists() for e in ENTRIES)
    assert all(not conv.missing for conv in done.values())
    for entry in ENTRIES:
        for html in rendered(tmp_path / f"{entry}.ipynb"):
            assert colab_edition.MISSING not in html, entry
            assert not leftovers(html), entry


def test_values_come_from_the_builds_glue_json(tmp_path):
    """myst-nb moves a build's glued outputs into ``<page>.glue.json`` next to the
    executed notebook; the edition reads them from there."""
    folder = tmp_path / "jupyter_execute" / "book" / "part3"
    folder.mkdir(parents=True)
    quoted = re.findall(
        r"\{glue:text\}`(\w+)", (ROOT / "book/part3/alibi.ipynb").read_text()
    )
    values = {name: "'7'" for name in quoted}  # every number the page quotes
    values.update(alibi_fused_ratio="'1.3'", alibi_slow_ratio="3.4")
    glue = {
        name: {"output_type": "display_data", "data": {"text/plain": value}}
        for name, value in values.items()
    }
    (folder / "alibi.glue.json").write_text(json.dumps(glue))
    done = colab_edition.build(
        tmp_path / "out",
        executed=tmp_path / "jupyter_execute",
        use_cache=False,
        entries=["book/part3/alibi"],
        log=lambda _: None,
    )
    assert done["book/part3/alibi"].substituted == len(quoted) > 2
    text = (tmp_path / "out" / "book" / "part3" / "alibi.ipynb").read_text()
    assert "took 1.3 times" in text and "path 3.4 times" in text


def test_the_launch_button_extension_changes_only_the_colab_branch():
    from tools.build.colab_launch import _retarget

    colab = (
        "https://colab.research.google.com/github/posenc-course/"
        "positional-encoding-course/blob/main/book/part3/alibi.ipynb"
    )
    buttons = [
        {"type": "link", "url": "https://github.com/posenc-course/x"},
        {"type": "group", "buttons": [{"type": "link", "text": "Colab", "url": colab}]},
    ]
    assert _retarget(buttons, "colab") == 1
    assert buttons[1]["buttons"][0]["url"] == colab.replace("/main/", "/colab/")
    assert buttons[0]["url"] == "https://github.com/posenc-course/x"
    # the download menu's .ipynb entry says it is the Colab edition; a .md page's
    # source keeps its title
    from tools.build.colab_launch import DOWNLOAD_TOOLTIP, _retitle_download

    menu = [
        {"type": "group", "buttons": [
            {"label": "download-source-button", "url": "../_sources/x.ipynb",
             "tooltip": "Download source file"},
            {"label": "download-source-button", "url": "../_sources/y.md",
             "tooltip": "Download source file"},
        ]},
    ]  # fmt: skip
    assert _retitle_download(menu) == 1
    assert [b["tooltip"] for b in menu[0]["buttons"]] == [
        DOWNLOAD_TOOLTIP,
        "Download source file",
    ]
    assert (
        colab_edition.colab_url("book/part3/alibi") == buttons[1]["buttons"][0]["url"]
    )


def test_nested_fences_and_code_blocks():
    text = (
        "````{solution} ex-a\n:class: dropdown\nUse this:\n```python\nx = 1\n```\n"
        "````\n\n```python\n# {footcite:p}`not_a_role` stays in code\n```\n"
    )
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [text]}]}
    out, _ = colab_edition.convert(nb, "book/part3/alibi", 16, {}, {})
    new = "".join(out["cells"][0]["source"])
    assert "<details>" in new and "```python\nx = 1\n```\n\n</details>" in new
    assert "# {footcite:p}`not_a_role` stays in code" in new


def test_the_instructor_edition_holds_every_solution(edition):
    """The answer key: every chapter, every solution, and a README that says so."""
    import zipfile

    path = colab_edition.instructor_zip(edition, ENTRIES)
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        assert {f"{e}.ipynb" for e in ENTRIES} | {"README.md"} == names
        assert "answer key" in archive.read("README.md").decode()
        for entry in ENTRIES:
            source = (ROOT / f"{entry}.ipynb").read_text()
            solutions = len(re.findall(r"`{3,}\{solution(?:-start)?\}", source))
            assert archive.read(f"{entry}.ipynb").decode().count("<details>") >= (
                solutions
            ), entry


def test_publishing_commits_the_edition_to_its_branch_without_touching_the_tree(
    tmp_path,
):
    from tools.build import publish_colab

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("config", "user.email", "ci@example.org")
    git("config", "user.name", "ci")
    (repo / "README.md").write_text("main\n")
    git("add", "README.md")
    git("commit", "-qm", "main")
    edition = tmp_path / "colab"
    (edition / "book" / "part3").mkdir(parents=True)
    (edition / "book" / "part3" / "alibi.ipynb").write_text("{}\n")
    first = publish_colab.publish(edition, repo, "colab")
    assert git("ls-tree", "-r", "--name-only", "colab") == "book/part3/alibi.ipynb"
    (edition / "book" / "part3" / "alibi.ipynb").write_text('{"v": 2}\n')
    second = publish_colab.publish(edition, repo, "colab")
    assert git("rev-parse", "colab^") == first and second != first
    # the checked-out branch, its index and its files are untouched
    assert git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git("status", "--porcelain") == ""
    assert "Colab edition of" in git("log", "-1", "--format=%s", "colab")


# ---- the download a chapter page serves ("Download → .ipynb") -----------------------

DOWNLOAD = re.compile(r'<a href="(?P<href>[^"]*_sources/[^"]*\.ipynb)"')
DIRECTIVE_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\{[\w:-]+\}", re.M)


def reading_problems(nb: dict) -> list[str]:
    """What a reader would meet in a downloaded notebook that the page does not show:
    a ``{glue`` role (the number unfilled), a MyST directive fence, or an open
    solution (its code not folded in Colab and Jupyter, its prose not under a
    collapsed ``<details>``)."""
    problems = []
    for k, cell in enumerate(nb["cells"]):
        text = "".join(cell["source"])
        meta = cell.get("metadata", {})
        if cell["cell_type"] == "markdown":
            if "{glue" in text:
                problems.append(f"cell {k}: a {{glue}} role")
            if DIRECTIVE_FENCE.search(text):
                problems.append(f"cell {k}: a directive fence")
            outside = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
            if re.search(r"\{solution|Solution to Exercise", outside):
                problems.append(f"cell {k}: a solution outside <details>")
        elif "solution" in meta.get("tags", []) and not (
            meta.get("cellView") == "form"
            and meta.get("jupyter", {}).get("source_hidden")
        ):
            problems.append(f"cell {k}: a solution's code, open")
    return problems


def test_the_reading_check_has_teeth(edition):
    """The authoring source (what Sphinx copies into _sources/) fails the check of the
    download; the Colab edition passes it."""
    source = json.loads((ROOT / "book/part3/alibi.ipynb").read_text())
    found = " ".join(reading_problems(source))
    for what in ("{glue} role", "directive fence", "solution's code, open"):
        assert what in found, what
    for entry in ENTRIES:
        colab = json.loads((edition / f"{entry}.ipynb").read_text())
        assert not reading_problems(colab), entry


@pytest.mark.build
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_page_download_is_the_notebook_as_the_page_reads(entry):
    """After `make site`: a chapter page's "Download → .ipynb" serves the Colab
    edition (numbers glued, no MyST, solutions folded), not the authoring source."""
    page = ROOT / "_build" / "html" / f"{entry}.html"
    if not page.exists():
        pytest.fail(f"no {page}: build the site first (make site)")
    html = page.read_text()
    links = {m["href"] for m in DOWNLOAD.finditer(html)}
    assert len(links) == 1, f"{entry}: download links {links}"
    served = (page.parent / links.pop()).resolve()
    from tools.build.colab_launch import DOWNLOAD_TOOLTIP

    assert f'title="{DOWNLOAD_TOOLTIP}"' in html, "the download's tooltip"
    assert served.is_file(), served
    nb = json.loads(served.read_text())
    assert nb["metadata"].get("posenc_edition") == "colab", served
    problems = reading_problems(nb)
    assert not problems, f"{entry}:\n" + "\n".join(problems[:10])


def test_a_link_to_an_appendix_page_leads_to_the_site_and_the_decks_page():
    """ "[independent runs](../appendix/datasets.md)": the Colab edition links the page
    on the site, a deck the page beside it (there is no .md file in either)."""
    from tools.build import slides

    text = "It held in 10 of 10 [independent runs](../appendix/datasets.md#seeds)."
    colab = colab_edition.Converter("book/part3/rope", 14, {}, {}, True).inline(text)
    assert f"]({colab_edition.site_url()}/book/appendix/datasets.html#seeds)" in colab
    deck = slides.SlideConverter("book/part3/rope", 14, {}, {}, True).inline(text)
    assert "](../book/appendix/datasets.html#seeds)" in deck
    assert ".md" not in colab and ".md" not in deck

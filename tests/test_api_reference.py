"""The API reference (book/appendix/api.md and its pages) names every public name,
public submodule and registered encoding, with the hooks each encoding overrides and
the chapter that teaches it; the built pages have an entry for each, and chapters link
to them. That every page fits a laptop and a phone is checked with every other page
of the book (tests/test_site.py)."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import sys

import pytest

import posenc_lib as pl
from posenc_lib.base import overrides
from tools import toc
from tools.build import api_reference

ROOT = pathlib.Path(__file__).resolve().parents[1]
APPENDIX = ROOT / "book" / "appendix"
DOCS = ["api", *api_reference.PAGES]  # the start page first
PAGES = {key: (APPENDIX / f"{key}.md").read_text() for key in DOCS}
PAGE = "".join(PAGES.values())
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \((?P<cls>[^|]+)\) \| (?P<hooks>[^|]+) \| "
                 r"(?P<chapter>[^|]+) \| (?P<paper>[^|]+) \|$", re.M)  # fmt: skip
ROWS = {m["name"]: m for m in ROW.finditer(PAGES["api"])}


def documented() -> set[str]:
    """The objects the committed pages hand to autodoc."""
    return set(re.findall(r"^\.\. auto(?:class|function|data):: (\S+)$", PAGE, re.M))


def test_the_committed_pages_are_what_the_tool_generates():
    """Stale when a public name, a submodule, an encoding, its hooks or its chapter
    changed (``--check`` does the same from the command line)."""
    stale = [
        key for key, text in api_reference.render().items() if PAGES.get(key) != text
    ]  # (no 900-line diff on failure)
    assert not stale, (
        f"book/appendix/{stale[0]}.md is out of date: "
        "run python -m tools.build.api_reference"
    )


def test_every_page_of_the_reference_is_in_the_table_of_contents():
    entries = toc.entries()
    assert [f"book/appendix/{key}" for key in DOCS] == [
        e for e in entries if e.startswith("book/appendix/api")
    ]
    assert sorted(p.stem for p in APPENDIX.glob("api*.md")) == sorted(DOCS)


def test_the_start_page_links_every_module_section():
    """The start page is the reference's table of contents: a link to each module's
    section, and each page after it lists its modules at its top."""
    labels = set(re.findall(r"^\((api-[\w.]+)\)=$", PAGE, re.M))
    linked = set(re.findall(r"\{ref\}`[^`<]+<(api-[\w.]+)>`", PAGES["api"]))
    assert labels and labels == linked, labels ^ linked
    for key in api_reference.PAGES:
        assert "```{contents}" in PAGES[key], f"{key}.md has no list of its modules"


def test_every_public_name_is_in_the_reference():
    names = documented()
    missing = [
        name
        for name in pl.__all__
        if not inspect.ismodule(getattr(pl, name)) and f"posenc_lib.{name}" not in names
    ]
    assert not missing, f"not in book/appendix/api.md: {missing}"


def test_every_public_submodule_is_in_the_reference():
    namespaces = api_reference.namespaces()
    for name in ("book", "exercises", "interactive", "lab"):
        try:
            importlib.import_module(f"posenc_lib.{name}")
        except ModuleNotFoundError:
            continue
        assert name in namespaces, f"posenc_lib.{name} is not a public submodule"
    names = documented()
    for ns in namespaces:
        module = importlib.import_module(f"posenc_lib.{ns}")
        missing = [
            n
            for n in module.__all__
            if f"posenc_lib.{ns}.{n}" not in names
            and not (getattr(pl, n, None) is getattr(module, n)
                     and f"posenc_lib.{n}" in names)
        ]  # fmt: skip
        assert not missing, f"posenc_lib.{ns}: not in the reference: {missing}"


@pytest.mark.parametrize("name", sorted(pl.REGISTRY))
def test_each_encoding_row_agrees_with_the_registry(name):
    assert name in ROWS, f"encoding {name!r} has no row in book/appendix/api.md"
    row = ROWS[name]
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64)
    cls = type(pe)
    assert cls.__name__ in row["cls"]
    listed = re.findall(r"`(\w+)`", row["hooks"])
    hooks = [h for h in pl.HOOKS if overrides(pe, h)]
    assert listed == hooks, (
        f"{name}: the page lists {listed}, the class overrides {hooks}"
    )
    # the chapter is in the course and its code builds or calls this encoding
    link = re.search(r"\]\(\.\./(?P<entry>[\w/]+)\.ipynb\)", row["chapter"])
    assert link, f"{name}: no chapter found that teaches it"
    nb = ROOT / "book" / f"{link['entry']}.ipynb"
    assert f"book/{link['entry']}" in toc.entries()
    module = sys.modules[cls.__module__]
    used = {cls.__name__, f'"{name}"', *getattr(module, "__all__", ())}
    text = nb.read_text()
    assert any(word in text for word in used) or cls.__module__ in text, (
        f"{name}: chapter {link['entry']} never uses it"
    )


def test_no_row_for_an_unregistered_encoding():
    assert set(ROWS) == set(pl.REGISTRY)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("pl.apply_rope", "posenc_lib.apply_rope"),
        ('pl.make_encoding("rope", 64, 4)', "posenc_lib.make_encoding"),
        ("apply_rope(q, k)", "posenc_lib.apply_rope"),
        ("apply_rope", "posenc_lib.apply_rope"),
        ("Rotary", "posenc_lib.Rotary"),
        ("pl.lab.run_lab", "posenc_lib.lab.run_lab"),
        ("pl.attention", "posenc_lib.attention"),
        ("attention(q, k, v, pe)", "posenc_lib.attention"),
        ("attention", None),  # a plain word in prose
        ("rope", None),
        ("q.shape", None),
        ("torch.arange(5)", None),
    ],
)
def test_inline_code_mentions_find_their_entry(text, expected):
    targets = {
        full.removeprefix("posenc_lib."): (full, "id")
        for full in ("posenc_lib.apply_rope", "posenc_lib.make_encoding",
                     "posenc_lib.Rotary", "posenc_lib.lab.run_lab",
                     "posenc_lib.attention")
    }  # fmt: skip
    targets |= {f"pl.{k}": v for k, v in targets.items()}
    found = api_reference._target(text, targets)
    assert (found[0] if found else None) == expected


def test_references_resolve_in_a_build_that_read_no_page(monkeypatch):
    """Sphinx resolves references when it writes, also in a build that read no page
    (the PDF's single-page build, from the site build's environment), where autodoc
    imported nothing: a reference into a package not imported yet still resolves to
    plain text, and one into no package still warns."""
    from docutils import nodes
    from sphinx import addnodes

    def missing(target):
        node = addnodes.pending_xref("", refdomain="py", reftarget=target)
        return api_reference._missing_reference(None, None, node, contnode)

    contnode = nodes.literal("", "rgb_to_hsv")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    assert missing("colorsys.rgb_to_hsv") is contnode
    assert missing("no_such_package_anywhere.Thing") is None
    assert missing("tools.toc.entries") is None  # the repository's tools: not the API


@pytest.mark.browser
def test_the_built_reference_has_an_entry_for_every_name(open_page):
    """In the built site: every documented name has its anchor, every encoding its
    row, and a chapter's first mention of ``apply_rope`` leads to its entry."""
    from tests.browser import HTML

    html = {}
    for key in DOCS:
        built = HTML / "book" / "appendix" / f"{key}.html"
        if not built.exists():
            pytest.fail(
                f"the site has no book/appendix/{key}.html: _toc.yml's Appendix "
                "lists book/appendix/api and its sections; rebuild"
            )
        html[key] = built.read_text()
    ids = set(re.findall(r'id="([^"]+)"', "".join(html.values())))
    missing = sorted(name for name in documented() if name not in ids)
    assert not missing, f"no entry in the built reference for {missing}"
    cells = set(
        re.findall(r'<td><p><code[^>]*><span class="pre">(\w+)</span>', html["api"])
    )
    assert set(pl.REGISTRY) <= cells, sorted(set(pl.REGISTRY) - cells)
    page = open_page("book/part3/rope.html")
    link = page.locator("a.api-link[href*='posenc_lib.apply_rope']").first
    link.click()
    page.wait_for_url(re.compile(r"api_encodings\.html#posenc_lib\.apply_rope$"))
    assert page.locator('[id="posenc_lib.apply_rope"]').is_visible()
    # the start page's table: every column inside the page at desktop width
    page = open_page("book/appendix/api.html", width=1280)
    table = page.locator("article table").first
    assert table.evaluate("t => t.scrollWidth <= t.clientWidth + 1"), (
        "the table of encodings scrolls sideways at 1280 px"
    )

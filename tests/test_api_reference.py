"""The API reference (book/appendix/api.md) names every public name, public submodule
and registered encoding, with the hooks each encoding overrides and the chapter that
teaches it; the built page has an entry for each, and chapters link to them."""

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
PAGE = (ROOT / "book" / "appendix" / "api.md").read_text()
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<cls>[^|]+) \| (?P<hooks>[^|]+) \| "
                 r"(?P<chapter>[^|]+) \| (?P<paper>[^|]+) \|$", re.M)  # fmt: skip
ROWS = {m["name"]: m for m in ROW.finditer(PAGE)}


def documented() -> set[str]:
    """The objects the committed page hands to autodoc."""
    return set(re.findall(r"^\.\. auto(?:class|function|data):: (\S+)$", PAGE, re.M))


def test_the_committed_page_is_what_the_tool_generates():
    """Stale when a public name, a submodule, an encoding, its hooks or its chapter
    changed (``--check`` does the same from the command line)."""
    current = api_reference.render() == PAGE  # (no 900-line diff on failure)
    assert current, (
        "book/appendix/api.md is out of date: run python -m tools.build.api_reference"
    )


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


@pytest.mark.browser
def test_the_built_reference_has_an_entry_for_every_name(open_page):
    """In the built site: every documented name has its anchor, every encoding its
    row, and a chapter's first mention of ``apply_rope`` leads to its entry."""
    from tests.browser import HTML

    api = HTML / "book" / "appendix" / "api.html"
    if not api.exists():
        pytest.fail(
            "the site has no book/appendix/api.html: add `- file: book/appendix/api`"
            " to _toc.yml's Appendix and rebuild"
        )
    html = api.read_text()
    ids = set(re.findall(r'id="([^"]+)"', html))
    missing = sorted(name for name in documented() if name not in ids)
    assert not missing, f"no entry in the built reference for {missing}"
    cells = set(re.findall(r'<td><p><code[^>]*><span class="pre">(\w+)</span>', html))
    assert set(pl.REGISTRY) <= cells, sorted(set(pl.REGISTRY) - cells)
    page = open_page("book/part3/rope.html")
    link = page.locator("a.api-link[href*='posenc_lib.apply_rope']").first
    link.click()
    page.wait_for_url(re.compile(r"api\.html#posenc_lib\.apply_rope$"))
    assert page.locator('[id="posenc_lib.apply_rope"]').is_visible()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_reference_fits_a_laptop_and_a_phone(open_page, width):
    """Long signatures wrap (_static/api.css) instead of widening the page."""
    from tests.browser import HTML
    from tests.test_site import CLIPPED_JS

    if not (HTML / "book" / "appendix" / "api.html").exists():
        pytest.fail("the site has no book/appendix/api.html (see the test above)")
    page = open_page("book/appendix/api.html", width=width)
    clipped = page.evaluate(CLIPPED_JS, width < 720)
    assert not clipped, f"book/appendix/api.html at {width}px:\n" + "\n".join(
        clipped[:15]
    )

"""The built site's files, read without a browser (a second or two): every link leads
somewhere, and no output shows the build machine's paths.

- Every local ``href`` and ``src`` of every HTML page (the chapters, the generated
  pages, the slides) names a file of the build, and an ``#anchor`` into a page names
  an element of that page. The front page's link to the PDF is one of them: ``make
  site`` prints the PDF into the site after the pages, as the test command does
  before this test runs.
- No executed notebook's output, and no page, holds the absolute path of the
  repository the site was built from or names a file under ``/tmp/``.

Marked ``browser``: it reads the site the browser stage of the test command opens,
and like the browser tests it skips with a message on a reader's machine without a
built site and fails under CI; and ``pdf``: the test command runs it after the PDF
stage, alone (its link check's probe page is briefly part of the site).
"""

from __future__ import annotations

import functools
import html.parser
import json
import pathlib
import re
from urllib.parse import unquote, urlsplit

import pytest

from tests.browser import HTML, IN_CI, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.pdf]

PDF_NAME = "positional-encoding-course.pdf"
EXECUTED = HTML.parent / "jupyter_execute"
# the repository the site was built from (POSENC_SITE_HTML may name another build)
BUILT_FROM = {str(ROOT), str(HTML.resolve().parents[1])}
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TMP_PATH = re.compile(r"(?<![\w.])/tmp/[^\s\"'<>]+")
LINK_ATTRS = {"href", "src"}


@pytest.fixture(scope="module")
def pages() -> list[pathlib.Path]:
    if not (HTML / "index.html").exists():
        message = f"no built site at {HTML}; run `make site` first"
        if IN_CI:
            pytest.fail(message + " (CI builds the site before this test)")
        pytest.skip(message)
    # the theme's Jinja macros in _static/ are copied there, not pages
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts)


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in LINK_ATTRS and value is not None:
                self.links.append(value)
            elif name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value or "")


@functools.cache
def parsed(page: pathlib.Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(errors="replace"))
    return parser


def broken_links(page: pathlib.Path) -> list[str]:
    """The local links of ``page`` that lead nowhere, each with why."""
    broken = []
    for link in parsed(page).links:
        parts = urlsplit(link)
        if parts.scheme or parts.netloc or link.startswith("#/"):
            continue  # another site (checked by nobody here), or a reveal.js route
        path = unquote(parts.path)
        target = (page.parent / path).resolve() if path else page
        if HTML.resolve() not in (target, *target.parents):
            broken.append(f"{link} (outside the site)")
            continue
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{link} (no such file)")
            continue
        anchor = parts.fragment  # a browser tries it as written, then decoded
        if anchor and not anchor.startswith("/") and target.suffix == ".html":
            if not {anchor, unquote(anchor)} & parsed(target).ids:
                broken.append(f"{link} (no #{anchor} on that page)")
    return broken


def test_every_local_link_of_the_site_leads_somewhere(pages):
    assert len(pages) > len(list((ROOT / "book").rglob("*.ipynb")))
    broken = {}
    for page in pages:
        found = broken_links(page)
        if found:
            broken[str(page.relative_to(HTML))] = sorted(set(found))[:5]
    assert not broken, "broken links:\n" + "\n".join(
        f"  {page}: {', '.join(links)}" for page, links in broken.items()
    )


def test_the_front_page_links_the_pdf_the_site_serves(pages):
    intro = HTML / "book" / "intro.html"
    links = [link for link in parsed(intro).links if link.endswith(PDF_NAME)]
    assert links, "the front page does not link the PDF"
    assert not broken_links(intro)
    assert (HTML / PDF_NAME).read_bytes()[:5] == b"%PDF-"


def test_every_page_says_the_licenses_and_can_report_a_problem(pages):
    """Every page of the book has the issues button's "Open issue" link, naming the
    page, and a footer with both licenses (``_config.yml``: ``use_issues_button``,
    ``extra_footer``)."""
    from tools.authoring.colab_cell import _config_value
    from tools.build.license_notice import CONTENT_URL

    repo = _config_value("url")
    book = [p for p in pages if p.relative_to(HTML).parts[0] == "book"]
    assert book
    missing = []
    for page in book:
        name = page.relative_to(HTML).with_suffix("").as_posix()
        links = parsed(page).links
        issue = f"{repo}/issues/new?title=Issue%20on%20page%20%2F{name}.html"
        if not any(link.startswith(issue) for link in links):
            missing.append(f"{name}: no Open issue link")
        if CONTENT_URL not in links or f"{repo}/blob/main/LICENSE" not in links:
            missing.append(f"{name}: no license in the footer")
    assert not missing, "\n".join(missing[:10])


def test_every_link_into_the_repository_names_a_file_it_holds(pages):
    """The repository's paths in the prose are links to GitHub
    (``tools/build/repo_links.py``), and every ``blob/`` or ``tree/`` link of the
    site, those and the theme's, names a file or folder the repository tracks."""
    from tools.authoring.colab_cell import _config_value
    from tools.build import repo_links

    repo, branch = _config_value("url"), _config_value("branch")
    files, folders = repo_links.tracked()
    heads = {f"{repo}/blob/{branch}/": files, f"{repo}/tree/{branch}/": folders}
    missing, linked = [], 0
    for page in pages:
        for link in parsed(page).links:
            for head, held in heads.items():
                if link.startswith(head):
                    path = unquote(urlsplit(link).path)[len(urlsplit(head).path) :]
                    linked += 1
                    if path.rstrip("/") not in held:
                        missing.append(f"{page.relative_to(HTML)}: {link}")
    assert not missing, "links to files the repository does not hold:\n" + "\n".join(
        missing[:10]
    )
    assert linked, "no link into the repository at all"
    cost = HTML / "book" / "part6" / "cost.html"
    if cost.exists():  # the prose's paths: `tools/measure/bench_model.py` is a link
        assert (
            f"{repo}/blob/{branch}/tools/measure/bench_model.py" in parsed(cost).links
        )


def test_the_link_check_has_teeth(pages, tmp_path):
    """A page of the site with a link to a missing file and one to a missing anchor."""
    page = HTML / "book" / "intro.html"
    extra = page.parent / "_link_check_probe.html"
    extra.write_text(
        '<a href="intro.html#no-such-anchor">x</a><img src="../_static/missing.png">'
        '<a href="https://example.org/x.pdf">y</a><a href="intro.html">z</a>'
    )
    try:
        assert sorted(broken_links(extra)) == [
            "../_static/missing.png (no such file)",
            "intro.html#no-such-anchor (no #no-such-anchor on that page)",
        ]
    finally:
        extra.unlink()


def output_texts(notebook: dict):
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            parts = [output.get("text", ""), *output.get("traceback", [])]
            parts += [output.get("evalue", "")]
            for value in output.get("data", {}).values():
                parts.append(value if isinstance(value, str) else json.dumps(value))
            for part in parts:
                yield ANSI.sub("", "".join(part) if isinstance(part, list) else part)


def test_no_output_shows_the_build_machines_paths(pages):
    notebooks = sorted(EXECUTED.rglob("*.ipynb"))
    assert notebooks, f"no executed notebooks in {EXECUTED}"
    found = []
    for path in notebooks:
        for text in output_texts(json.loads(path.read_text())):
            for root in BUILT_FROM:
                if root in text:
                    found.append(f"{path.relative_to(EXECUTED)}: {root}")
            found += [
                f"{path.relative_to(EXECUTED)}: {m.group(0)}"
                for m in TMP_PATH.finditer(text)
            ]
    for page in pages:  # the pages: what the executed notebooks do not keep (the
        # outputs of a cell that raises) and anything else a page shows
        text = page.read_text(errors="replace")
        found += [f"{page.relative_to(HTML)}: {r}" for r in BUILT_FROM if r in text]
        found += [f"{page.relative_to(HTML)}: {m[0]}" for m in TMP_PATH.finditer(text)]
    assert not found, "paths of the build machine:\n  " + "\n  ".join(
        sorted(set(found))[:20]
    )

"""The built website in a real headless Chromium, with every non-local request blocked.

Checks what a reader sees: typeset math (MathJax served from the build, not a CDN),
figures, exercises, the references list and the Colab launch link, on every page of
_toc.yml. Run after building the site (`make site`, or as part of `make test`). Without
Chromium this skips with a message on a reader's machine; under CI (CI=true) it
fails instead.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

# the fixtures browser, server and open_page come from tests/browser.py (a plugin of
# conftest.py), shared by every browser test
from tests.browser import HTML, NOTEBOOK_PAGES, ROOT, TOC  # noqa: F401
from tests import test_interactive_site as interactive

pytestmark = pytest.mark.browser


def test_the_math_check_fails_when_mathjax_cannot_load(browser, server):
    """The check has teeth: with the build's MathJax unreachable (as a CDN-only build is
    offline), no formula is typeset, so the page test below would fail."""
    page = browser.new_page()
    page.route(
        "**/*",
        lambda r: (
            r.abort()
            if "mathjax" in r.request.url.lower()
            or urlparse(r.request.url).hostname != "127.0.0.1"
            else r.continue_()
        ),
    )
    page.goto(f"{server}/{NOTEBOOK_PAGES[0]}.html", wait_until="load")
    page.wait_for_timeout(500)
    assert page.locator("mjx-container").count() == 0
    assert page.locator("span.math, div.math").count() > 0
    page.close()


def test_home_page_links_every_chapter(open_page):
    page = open_page("index.html")  # redirects to the root page of _toc.yml
    page.wait_for_url(f"**/{TOC[0]}.html")
    assert "Positional Encoding" in page.title()
    hrefs = page.eval_on_selector_all(
        "nav.bd-links a", "els => els.map(e => e.getAttribute('href'))"
    )
    for entry in NOTEBOOK_PAGES:
        assert any(entry.split("/")[-1] + ".html" in (h or "") for h in hrefs), (
            f"{entry} is missing from the navigation"
        )


def check_the_chapter_renders_for_a_reader(page, entry, blocked):
    """What a reader needs on a chapter page (at desktop width)."""
    # Math: MathJax (from _static/mathjax, not a CDN) turned every formula into
    # mjx-container.
    typeset = page.locator("mjx-container").count()
    assert typeset > 0, "no typeset math: is MathJax served from the build?"
    raw = page.evaluate(
        "() => Array.from(document.querySelectorAll('span.math, div.math'))"
        ".filter(e => !e.querySelector('mjx-container')).length"
    )
    assert raw == 0, f"{raw} formulas left as raw TeX"
    # Figures: at least one image drawn by the notebook, actually decoded by
    # the browser.
    widths = page.eval_on_selector_all(
        ".cell_output img", "els => els.map(e => e.naturalWidth)"
    )
    assert widths and all(w > 0 for w in widths), f"figures missing or broken: {widths}"
    # Every figure numbered, captioned, and described: alt text that says what it
    # shows, not the hashed file name Sphinx gives an image without one.
    figures = page.eval_on_selector_all(
        ".cell_output img, .cell_output .plotly-graph-div",
        """els => els.map(e => {
          const f = e.closest('figure');
          const cap = f && f.querySelector('figcaption');
          return {tag: e.tagName, alt: e.getAttribute('alt') || '',
                  number: cap ? (cap.querySelector('.caption-number') || {}).textContent
                              : null,
                  caption: cap ? cap.textContent : ''};
        })""",
    )
    for fig in figures:
        assert fig["number"] and fig["number"].startswith("Fig. "), (
            f"a figure without a numbered caption: {fig}"
        )
        assert len(fig["caption"]) > 30, f"a figure's caption says nothing: {fig}"
        if fig["tag"] == "IMG":  # plotly draws SVG with its own title and axes
            assert len(fig["alt"]) > 30 and not fig["alt"].endswith(".png"), (
                f"a figure's alt text does not describe it: {fig['alt']!r}"
            )
    # Exercises with solutions hidden in dropdowns, and a rendered reference list.
    assert page.locator(".exercise").count() >= 1
    assert (
        page.locator("details.solution, .solution.dropdown, .solution.toggle").count()
        >= 1
    )
    assert page.locator("aside.footnote").count() >= 1, "the references list is empty"
    # The Colab launch link, built from the repository URL in _config.yml.
    colab = page.eval_on_selector_all(
        "a[href*='colab.research.google.com']", "els => els.map(e => e.href)"
    )
    assert any(entry + ".ipynb" in href for href in colab), (
        f"no Colab launch link for {entry}: {colab}"
    )
    # ... to the Colab edition (branch colab), which renders in Colab as the page does
    assert all("/blob/colab/" in href for href in colab), colab
    # The Colab install cell is hidden on the website.
    assert "google.colab" not in page.inner_text("article")
    assert all("mathjax" not in url.lower() for url in blocked), (
        "a page tried to fetch MathJax from the network"
    )


# What is cut off at the right edge, or scrolls sideways at desktop width: code (cells,
# docstring examples, code blocks) whose lines do not fit their box, printed outputs
# wider than their box on a laptop (on a phone they scroll), display maths and tables
# wider than their box (allowed on a phone only where the box scrolls, see
# _static/fit.css), and any horizontal overflow of the page itself.
CLIPPED_JS = """(phone) => {
  const wide = (e) => e.scrollWidth > e.clientWidth + 1;
  const scrolls = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const out = [];
  const page = document.documentElement.scrollWidth - window.innerWidth;
  if (page > 1) out.push(`the page is ${page}px wider than the window`);
  for (const e of document.querySelectorAll('article pre')) {
    if (e.closest('div.cell_output')) continue;
    if (wide(e)) out.push('code: ' + e.innerText.split('\\n')[0].slice(0, 60));
  }
  for (const e of document.querySelectorAll('div.cell_output pre')) {
    if (!phone && wide(e)) {
      const line = e.innerText.split('\\n').find((l) => l.length > 88) || '';
      out.push(`output ${e.scrollWidth}px in ${e.clientWidth}px: ` + line.slice(0, 60));
    }
  }
  // a wide formula or table scrolls on a phone (a table's words are never split, see
  // BROKEN_WORDS_JS); at desktop width nothing scrolls sideways
  const boxes = 'mjx-container[display="true"], article table';
  for (const e of document.querySelectorAll(boxes)) {
    if (wide(e) && !(phone && scrolls(e))) {
      const what = e.tagName === 'TABLE' ? 'table' : 'formula';
      out.push(`${what} ${e.scrollWidth}px in ${e.clientWidth}px: `
               + e.textContent.replace(/\\s+/g, ' ').trim().slice(0, 50));
    }
  }
  return out;
}"""


# A printed output's lines each drawn on one line: a line (between newlines) whose
# characters span two line boxes was wrapped (a table's row split, its columns broken).
# Also, per output, whether it is wider than its box and whether the box scrolls.
WRAPPED_OUTPUTS_JS = """() => {
  const out = [];
  for (const pre of document.querySelectorAll('div.cell_output pre')) {
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    let node, wrapped = '';
    while ((node = walker.nextNode()) && !wrapped) {
      let start = 0;
      for (const line of node.textContent.split('\\n')) {
        if (line.trim()) {
          const r = document.createRange();
          r.setStart(node, start);
          r.setEnd(node, start + line.length);
          const tops = new Set(Array.from(r.getClientRects())
            .filter((x) => x.width > 0).map((x) => Math.round(x.top)));
          if (tops.size > 1) { wrapped = line.trim().slice(0, 60); break; }
        }
        start += line.length + 1;
      }
    }
    out.push({wrapped, wide: pre.scrollWidth > pre.clientWidth + 1,
              scrolls: ['auto', 'scroll'].includes(getComputedStyle(pre).overflowX)});
  }
  return out;
}"""
PHONE = 390


def test_printed_outputs_scroll_in_their_box_on_a_phone(open_page):
    """At a phone's width a printed table keeps each row on one line and scrolls
    sideways in its own box (the cost chapter prints tables wider than a phone), while
    the page itself does not scroll sideways."""
    page = open_page("book/part6/cost.html", width=PHONE)
    outputs = page.evaluate(WRAPPED_OUTPUTS_JS)
    wrapped = [o["wrapped"] for o in outputs if o["wrapped"]]
    assert not wrapped, f"{len(wrapped)} outputs wrap a line: {wrapped[:5]}"
    wide = [o for o in outputs if o["wide"]]
    assert len(wide) >= 3, f"the cost chapter prints no table wider than {PHONE}px"
    assert all(o["scrolls"] for o in wide), "a wide output does not scroll in its box"
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 1, f"the page is {overflow}px wider than the window"


# Every word of a table drawn on one line: a word (split at spaces and hyphens) whose
# text spans two line boxes was broken mid-word ("encodi/ng"). Text inside typeset
# maths is skipped (MathJax lays it out itself).
BROKEN_WORDS_JS = """() => {
  const out = [];
  for (const cell of document.querySelectorAll('article table td, article table th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      if (node.parentElement.closest('mjx-container')) continue;
      const re = /[^\\s\\-\u2010-\u2014]{2,}/g;
      let m;
      while ((m = re.exec(node.textContent))) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects())
          .filter((x) => x.width > 0).map((x) => Math.round(x.bottom)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""

# A table whose narrowest layout (its longest unbreakable words side by side) leaves
# less room in its box than a desktop browser's scroll bar takes: the headless browser
# draws no scroll bar, but a reader's at 1280 px does (15-17 px), and the table then
# scrolls sideways (the API reference's table of encodings needed 676 px of 672).
SCROLL_BAR = 17
TIGHT_TABLES_JS = """(room) => {
  const out = [];
  for (const t of document.querySelectorAll('article table')) {
    const box = t.clientWidth;
    const width = t.style.width;
    t.style.width = 'min-content';
    const narrowest = t.scrollWidth;
    t.style.width = width;
    if (narrowest > box - room) {
      out.push(`table needs ${narrowest}px of ${box}px: `
               + t.textContent.replace(/\\s+/g, ' ').trim().slice(0, 50));
    }
  }
  return out;
}"""

# A table column that holds one value in every row says nothing (a "not measured"
# column): tables of three rows or more only.
CONSTANT_COLUMNS_JS = """() => {
  const out = [];
  for (const table of document.querySelectorAll('article table')) {
    const rows = Array.from(table.querySelectorAll('tbody tr'));
    if (rows.length < 3) continue;
    const heads = Array.from(table.querySelectorAll('thead th'));
    const width = rows[0].children.length;
    for (let c = 0; c < width; c++) {
      const values = new Set(rows.map((r) => (r.children[c] || {}).textContent));
      if (values.size === 1) {
        out.push(`column "${(heads[c] || {}).textContent}" is "${[...values][0]}"`);
      }
    }
  }
  return out;
}"""

# every page of the book: the chapters, the appendix (the API reference's pages
# included) and the teaching guide
TABLE_PAGES = TOC


# A page loaded at desktop width and then narrowed to a phone's lays out exactly as one
# loaded at the phone's width (checked on four pages, every formula, table, code and
# paragraph box equal; MathJax's CHTML output does not depend on the width), so each
# page is loaded, and its maths typeset, once.
WIDTHS = (1280, 390)


NEXT_FRAME_JS = (
    "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
)


@pytest.mark.parametrize("entry", TABLE_PAGES)
def test_the_page_reads_at_desktop_and_phone_width(open_page, entry):
    """One load per page, then every check at each width: on a page with interactive
    figures, each follows its control offline (tests/test_interactive_site.py); at
    desktop width a chapter renders for a reader (maths, figures, exercises,
    references, the Colab link);
    nothing is clipped at the right edge, and at desktop width no block scrolls
    sideways, nor a table once a scroll bar takes its width from the page; no table
    splits a word or holds a column with one value."""
    errors = []

    def listen(page):  # from the page's first line (the figure check reads them)
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))

    page = open_page(f"{entry}.html", width=WIDTHS[0], before_load=listen)
    if entry in interactive.PAGES:  # its figures follow their controls, offline
        interactive.check_each_figure_follows_its_control_offline(
            page, open_page.server, entry, errors, open_page.blocked
        )
    for width in WIDTHS:
        if width != WIDTHS[0]:
            page.set_viewport_size({"width": width, "height": 900})
            page.evaluate(NEXT_FRAME_JS)
        if entry in NOTEBOOK_PAGES and width == WIDTHS[0]:
            check_the_chapter_renders_for_a_reader(page, entry, open_page.blocked)
        clipped = page.evaluate(CLIPPED_JS, width < 720)
        assert not clipped, f"{entry} at {width}px:\n" + "\n".join(clipped[:15])
        if width < 720:  # on a phone a printed line is never wrapped: its box scrolls
            wrapped = [o["wrapped"] for o in page.evaluate(WRAPPED_OUTPUTS_JS)]
            wrapped = [w for w in wrapped if w]
            assert not wrapped, f"{entry} at {width}px, outputs wrap: {wrapped[:5]}"
        if width == WIDTHS[0]:  # ... nor with a desktop browser's scroll bar
            tight = page.evaluate(TIGHT_TABLES_JS, SCROLL_BAR)
            assert not tight, f"{entry} at {width}px:\n" + "\n".join(tight[:15])
        broken = page.evaluate(BROKEN_WORDS_JS)
        assert not broken, (
            f"{entry} at {width}px, words split: {sorted(set(broken))[:15]}"
        )
    constant = page.evaluate(CONSTANT_COLUMNS_JS)
    assert not constant, f"{entry}: " + "; ".join(constant)


def test_the_student_edition_downloads_from_the_teaching_guide(open_page):
    page = open_page("book/teaching/guide.html")
    link = page.locator("a[href*='posenc-student-notebooks.zip']")
    assert link.count() == 1, "the teaching guide has no student-edition link"
    url = page.evaluate("(a) => a.href", link.element_handle())
    response = page.request.get(url)
    assert response.status == 200, f"{url}: HTTP {response.status}"
    assert response.body()[:2] == b"PK", f"{url} is not a zip archive"


@pytest.mark.pdf  # the test command runs it after the PDF stage
def test_the_pdf_downloads_from_the_intro(open_page):
    page = open_page("book/intro.html")
    link = page.locator("a[href$='positional-encoding-course.pdf']")
    assert link.count() == 1, "the intro has no link to the PDF"
    url = page.evaluate("(a) => a.href", link.element_handle())
    response = page.request.get(url)
    assert response.status == 200 and response.body()[:5] == b"%PDF-", url


# ---- every page: no script error; the search field (imports kept with the tests
# that use them)
import collections  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402

# Every page of the site, slides included (the theme's Jinja macros in _static/ are
# not pages)
SITE_PAGES = sorted(
    p for p in HTML.rglob("*.html") if "_static" not in p.relative_to(HTML).parts
)
SCRIPT_RE = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S)
DECLARATION_RE = re.compile(r"(?:^|[;{}]\s*|\n\s*)(?:const|let|class)\s+([\w$]+)")


def kinds_of_page() -> dict[tuple[str, ...], pathlib.Path]:
    """The smallest page of each kind: pages that load the same scripts (the theme's,
    MathJax, plotly, reveal.js) are one kind."""
    kinds: dict[tuple[str, ...], pathlib.Path] = {}
    for page in SITE_PAGES:
        sources = tuple(
            re.sub(r"\?.*", "", m.split('src="')[1].split('"')[0]).split("/")[-1]
            for m, _ in SCRIPT_RE.findall(page.read_text(errors="replace"))
            if 'src="' in m
        )
        if sources not in kinds or page.stat().st_size < kinds[sources].stat().st_size:
            kinds[sources] = page
    return kinds


def test_no_page_declares_a_script_name_twice(server):
    """Every page, read as text: a name declared with const, let or class by two of a
    page's inline scripts is a SyntaxError in the browser (sphinx-thebe's
    `const THEBE_JS_URL`, added twice by Sphinx 7.4: tools/build/inline_scripts.py)."""
    twice = []
    for page in SITE_PAGES:
        names = collections.Counter()
        for attrs, body in SCRIPT_RE.findall(page.read_text(errors="replace")):
            if "src=" in attrs or ("type=" in attrs and "javascript" not in attrs):
                continue  # a file, or data (JSON, thebe's config), not a script
            names.update(set(DECLARATION_RE.findall(body)))
        twice += [f"{page.relative_to(HTML)}: {n}" for n, c in names.items() if c > 1]
    assert not twice, "declared twice: " + ", ".join(twice[:10])


def test_no_page_logs_an_error_in_the_browser(browser, server):
    """No page throws or logs an error to the console (a failed request included)
    while it loads: the smallest page of each kind, in Chromium (every chapter
    loads the same scripts as the smallest one of its kind; the page test above
    opens them all)."""
    from tests.browser import _refresh_target, record_non_local

    kinds = kinds_of_page()
    assert len(kinds) >= 4, kinds  # the theme's with and without maths, plotly, slides
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    current = [""]
    page.on("pageerror", lambda e: errors.append(f"{current[0]}: {e}"))
    page.on(
        "console",
        lambda m: m.type == "error" and errors.append(f"{current[0]}: {m.text}"),
    )
    blocked: list[str] = []  # each fails, and logs its error (LAUNCH_ARGS)
    record_non_local(page, blocked)
    for file in sorted(kinds.values()):
        current[0] = path = file.relative_to(HTML).as_posix()
        page.goto(f"{server}/{path}", wait_until="load")
        target = _refresh_target(file)
        if target:  # index.html: the page it redirects to, loaded too
            page.wait_for_url(f"**/{target}", wait_until="load")
        page.evaluate(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
        )
    page.close()
    assert not errors, f"{len(errors)} errors:\n" + "\n".join(errors[:20])
    assert not blocked, blocked


SEARCH_CONTROLS_JS = """() => [...document.querySelectorAll(
    '.search-button-field, .search-button, input[type=search]')]
  .filter((e) => e.checkVisibility() && !e.closest('dialog'))
  .map((e) => e.className || e.tagName)"""


def test_one_search_field_on_a_desktop_and_a_search_button_on_a_phone(open_page):
    page = open_page(f"{NOTEBOOK_PAGES[0]}.html", width=1280)
    shown = page.evaluate(SEARCH_CONTROLS_JS)
    assert len(shown) == 1, f"search controls on the desktop page: {shown}"
    page.set_viewport_size({"width": 390, "height": 900})
    page.evaluate(NEXT_FRAME_JS)
    shown = page.evaluate(SEARCH_CONTROLS_JS)
    assert len(shown) == 1, f"search controls at phone width: {shown}"

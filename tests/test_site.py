"""The built website in a real headless Chromium, with every non-local request blocked.

Checks what a reader sees: typeset math (MathJax served from the build, not a CDN),
figures, exercises, the references list and the Colab launch link, on every page of
_toc.yml. Run after building the site (`make site`, or as part of `make test`). Without
Chromium this skips with a message on a reader's machine; under CI (CI=true) it
fails instead.
"""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import re
import shutil
import threading
from urllib.parse import urlparse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# POSENC_SITE_HTML points the browser tests at another build (e.g. a quick one made
# without executing the notebooks, to check layout while notebooks are being written).
HTML = pathlib.Path(os.environ.get("POSENC_SITE_HTML", ROOT / "_build" / "html"))
TOC = re.findall(
    r"^\s*-?\s*(?:file|root):\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M
)
NOTEBOOK_PAGES = [f for f in TOC if (ROOT / f"{f}.ipynb").exists()]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = (
    os.environ.get("CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.browser


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(
            f"{reason} (CI must run the browser test; "
            ".ci/run installs Debian's chromium)"
        )
    pytest.skip(
        f"{reason}: install Debian's chromium (apt-get install -y chromium) "
        "to run the browser test"
    )


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        _unavailable(f"no built site at {HTML}; run `make site` first")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        _unavailable("Chromium was not found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture
def open_page(browser, server):
    """Open a page with every request that is not to the local server aborted
    (and recorded)."""
    pages, blocked = [], []

    def go(path: str, width: int = 1280):
        page = browser.new_page(viewport={"width": width, "height": 900})
        pages.append(page)

        def route(r):
            if urlparse(
                r.request.url
            ).hostname == "127.0.0.1" or r.request.url.startswith("data:"):
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.goto(f"{server}/{path}", wait_until="load")
        page.wait_for_function(
            "() => !window.MathJax || (MathJax.startup && MathJax.startup.promise)",
            timeout=15000,
        )
        page.evaluate("() => window.MathJax && MathJax.startup.promise")
        return page

    go.blocked = blocked
    yield go
    for page in pages:
        page.close()


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


@pytest.mark.parametrize("entry", NOTEBOOK_PAGES)
def test_chapter_page_renders_for_a_reader(open_page, entry):
    page = open_page(f"{entry}.html")
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
    # The Colab install cell is hidden on the website.
    assert "google.colab" not in page.inner_text("article")
    assert all("mathjax" not in url.lower() for url in open_page.blocked), (
        "a page tried to fetch MathJax from the network"
    )


# What is cut off at the right edge: code cells whose lines do not fit their box,
# printed outputs wider than their box on a laptop (on a phone they scroll), display
# maths and tables wider than their box (allowed on a phone only where the box
# scrolls, see _static/fit.css), and any horizontal overflow of the page itself.
CLIPPED_JS = """(phone) => {
  const wide = (e) => e.scrollWidth > e.clientWidth + 1;
  const scrolls = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const out = [];
  const page = document.documentElement.scrollWidth - window.innerWidth;
  if (page > 1) out.push(`the page is ${page}px wider than the window`);
  for (const e of document.querySelectorAll('div.cell_input pre')) {
    if (wide(e)) out.push('code: ' + e.innerText.split('\\n')[0].slice(0, 60));
  }
  for (const e of document.querySelectorAll('div.cell_output pre')) {
    if (!phone && wide(e)) {
      const line = e.innerText.split('\\n').find((l) => l.length > 88) || '';
      out.push(`output ${e.scrollWidth}px in ${e.clientWidth}px: ` + line.slice(0, 60));
    }
  }
  const boxes = 'mjx-container[display="true"], article table';
  for (const e of document.querySelectorAll(boxes)) {
    if (wide(e) && !(phone && scrolls(e))) {
      const what = e.tagName === 'TABLE' ? 'table' : 'formula';
      out.push(`${what} ${e.scrollWidth}px in ${e.clientWidth}px: `
               + e.textContent.slice(0, 50));
    }
  }
  return out;
}"""


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("entry", NOTEBOOK_PAGES)
def test_nothing_is_clipped_at_desktop_or_phone_width(open_page, entry, width):
    page = open_page(f"{entry}.html", width=width)
    clipped = page.evaluate(CLIPPED_JS, width < 720)
    assert not clipped, f"{entry} at {width}px:\n" + "\n".join(clipped[:15])


def test_the_student_edition_downloads_from_the_teaching_guide(open_page):
    page = open_page("book/teaching/guide.html")
    link = page.locator("a[href*='posenc-student-notebooks.zip']")
    assert link.count() == 1, "the teaching guide has no student-edition link"
    url = page.evaluate("(a) => a.href", link.element_handle())
    response = page.request.get(url)
    assert response.status == 200, f"{url}: HTTP {response.status}"
    assert response.body()[:2] == b"PK", f"{url} is not a zip archive"

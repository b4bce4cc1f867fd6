"""The browser tests' shared pieces: the built site served locally, headless Chromium,
and ``open_page``, which blocks (and records) every request that is not local.

Chromium itself blocks them: ``LAUNCH_ARGS`` resolve every host but 127.0.0.1 to
nothing, so such a request fails at once, as on a machine without a network, and
``record_non_local`` lists each one the page made. Intercepting every request in
Python instead (playwright's ``page.route``) gives the same verdicts at a cost: each
request waits for a round trip to this process, and the browser's cache is off (8 %
more CPU for a chapter's load here); tests keep ``route`` only where they change a
response (a MathJax made unreachable, a CDN served from a file).

conftest.py loads this module as a plugin, so every test can ask for them. Without
Chromium they skip with a message on a reader's machine and fail under CI.
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

from tools import toc

ROOT = pathlib.Path(__file__).resolve().parents[1]
# POSENC_SITE_HTML points the browser tests at another build (e.g. a quick one made
# without executing the notebooks, to check layout while notebooks are being written).
HTML = pathlib.Path(os.environ.get("POSENC_SITE_HTML", ROOT / "_build" / "html"))
TOC = toc.entries()
NOTEBOOK_PAGES = toc.notebook_entries()
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
    # every request to another host fails, as offline (see the module's docstring)
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]


def is_local(url: str) -> bool:
    """A request to the local server (or of a ``data:`` URL, which leaves nothing)."""
    return urlparse(url).hostname == "127.0.0.1" or url.startswith("data:")


def record_non_local(page, blocked: list[str]) -> None:
    """Append to ``blocked`` the URL of every request ``page`` makes to another host
    (Chromium fails each, see ``LAUNCH_ARGS``)."""
    page.on("request", lambda r: None if is_local(r.url) else blocked.append(r.url))


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


def _refresh_target(file: pathlib.Path) -> str | None:
    """The page a meta-refresh redirect names (None for an ordinary page)."""
    if not file.is_file() or file.suffix != ".html":
        return None
    m = re.search(
        r'http-equiv="refresh"[^>]*url=([^"\'>]+)',
        file.read_text(errors="replace"),
        re.I,
    )
    return m.group(1).lstrip("./") if m else None


@pytest.fixture
def open_page(browser, server):
    """Open a page with every request that is not to the local server aborted
    (and recorded)."""
    pages, blocked = [], []

    def go(path: str, width: int = 1280, before_load=None):
        """The page at ``path``, loaded; ``before_load(page)`` runs first (to listen
        to the page's console from its first line)."""
        page = browser.new_page(viewport={"width": width, "height": 900})
        pages.append(page)
        if before_load is not None:
            before_load(page)
        record_non_local(page, blocked)
        page.goto(f"{server}/{path}", wait_until="load")
        # A redirect page (index.html) navigates again after its own load: wait for
        # the page it names, or the MathJax wait below would run on the redirect
        # page and the next evaluate on a page whose MathJax had not started.
        target = _refresh_target(HTML / path.split("#")[0])
        if target:
            page.wait_for_url(f"**/{target}", wait_until="load", timeout=15000)
        page.wait_for_function(
            "() => !window.MathJax || (MathJax.startup && MathJax.startup.promise)",
            timeout=15000,
        )
        page.evaluate(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
        )
        return page

    go.blocked = blocked
    go.server = server
    yield go
    for page in pages:
        page.close()

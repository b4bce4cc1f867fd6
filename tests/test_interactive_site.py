"""The interactive figures in a browser, with no network: on the built site each
figure is drawn by the site's own plotly.js and follows its control; the Colab output
of the same cell draws from plotly.js alone.

The figures' data are checked in tests/test_interactive.py.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time
import types

import pytest
import torch

import posenc_lib as pl
from posenc_lib.interactive import PLOTLY_JS

pytestmark = pytest.mark.browser

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARK = "from posenc_lib.interactive import"


def _figure_cells() -> dict[str, list[str]]:
    """page (without .ipynb) -> the code of its figure cells."""
    out = {}
    for nb in sorted(ROOT.glob("book/**/*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        codes = [
            "".join(c["source"])
            for c in cells
            if c["cell_type"] == "code" and MARK in "".join(c["source"])
        ]
        if codes:
            out[nb.relative_to(ROOT).with_suffix("").as_posix()] = codes
    return out


PAGES = _figure_cells()

# What the figure shows: its traces as drawn in the SVG (line and bar paths, marker
# positions, heatmap images) and its title.
DRAWN_JS = """(gd) => Array.from(gd.querySelectorAll(
    '.cartesianlayer .trace path, .cartesianlayer .hm image, .gtitle'))
  .map((e) => [e.getAttribute('d'), e.getAttribute('transform'),
               e.getAttribute('href'), e.textContent].join(' '))
  .join('|')"""


def _wait_until_changed(page, gd, before: str, seconds: float = 5.0) -> str:
    end = time.time() + seconds
    while time.time() < end:
        now = page.evaluate(DRAWN_JS, gd)
        if now != before:
            return now
        page.wait_for_timeout(100)
    return before


def _move_control(page, gd) -> str:
    """Move the figure's control the way a reader does; returns what was used."""
    rail = gd.query_selector(".slider-container .slider-rail-touch-rect")
    if rail is not None:
        active = page.evaluate("(gd) => gd.layout.sliders[0].active || 0", gd)
        n = page.evaluate("(gd) => gd.layout.sliders[0].steps.length", gd)
        box = rail.bounding_box()
        # click the end of the rail away from the active step
        x = box["x"] + (4 if active > (n - 1) / 2 else box["width"] - 4)
        page.mouse.click(x, box["y"] + box["height"] / 2)
        return "slider"
    header = gd.query_selector(".updatemenu-header-group")
    assert header is not None, "the figure has no slider and no dropdown"
    active = page.evaluate("(gd) => gd.layout.updatemenus[0].active || 0", gd)
    header.click()
    buttons = gd.query_selector_all(".updatemenu-dropdown-button")
    assert len(buttons) >= 2, f"the dropdown opened {len(buttons)} options"
    buttons[(active + 1) % len(buttons)].click()
    return "dropdown"


def check_each_figure_follows_its_control_offline(page, server, entry, errors, blocked):
    """On a figure page loaded at desktop width with ``errors`` listened to from its
    first line: every figure is drawn by the site's own plotly.js and changes when its
    control moves, with no error. tests/test_site.py calls it on the page it loads
    for its own checks (one load per page), for every page of ``PAGES``."""
    # the theme's own errors on every page (not ours) are left to tests/test_site.py;
    # any error while loading that names plotly, and any later one, fails here
    loading = [e for e in errors if "plotly" in e.lower()]
    assert not loading, loading
    errors.clear()
    scripts = page.evaluate(
        "() => Array.from(document.scripts).map((s) => s.src)"
        ".filter((s) => s.includes('plotly'))"
    )
    assert scripts and all(s.startswith(server) for s in scripts), scripts
    page.wait_for_selector(".posenc-interactive .js-plotly-plot .main-svg")
    figures = page.query_selector_all(".posenc-interactive .js-plotly-plot")
    assert len(figures) == len(PAGES[entry]), f"{len(figures)} figures drawn"
    for gd in figures:
        gd.scroll_into_view_if_needed()
        before = page.evaluate(DRAWN_JS, gd)
        assert before, "nothing drawn"
        how = _move_control(page, gd)
        assert _wait_until_changed(page, gd, before) != before, (
            f"moving the {how} of a figure on {entry} changed nothing"
        )
    assert not errors, errors
    assert not blocked, blocked
    page.evaluate("() => window.scrollTo(0, 0)")


def test_every_figure_page_is_checked_by_the_page_test():
    """The figure check runs inside tests/test_site.py's page test: every page with a
    figure is one of the pages that test loads."""
    from tests.test_site import TABLE_PAGES

    assert PAGES and set(PAGES) <= set(TABLE_PAGES), sorted(
        set(PAGES) - set(TABLE_PAGES)
    )


def test_printing_hides_the_controls_and_shows_the_caption(open_page):
    page = open_page("book/part3/alibi.html")
    page.wait_for_selector(".posenc-interactive .js-plotly-plot .main-svg")
    shown = "(s) => getComputedStyle(document.querySelector(s)).display"
    assert page.evaluate(shown, ".posenc-interactive-print") == "none"
    page.emulate_media(media="print")
    assert page.evaluate(shown, ".posenc-interactive-print") == "block"
    assert page.evaluate(shown, ".posenc-interactive .slider-container") == "none"
    caption = page.inner_text(".posenc-interactive-print")
    assert "printed at heads H = 12" in caption


@pytest.fixture
def colab_page(browser):
    """A blank page that serves plotly's CDN address from the installed plotly.js
    (this machine has no network) and blocks everything else."""
    page = browser.new_page()
    blocked, errors = [], []

    def route(r):
        if r.request.url.startswith("https://cdn.plot.ly/"):
            r.fulfill(path=str(PLOTLY_JS), content_type="text/javascript")
        elif r.request.url.startswith(("data:", "about:")):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.blocked, page.errors = blocked, errors
    yield page
    page.close()


def test_the_colab_output_draws_by_itself(colab_page, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    shown = []
    monkeypatch.setattr(
        "IPython.display.display", lambda obj, raw=False: shown.append(obj)
    )
    exec(PAGES["book/part3/alibi"][0], {"torch": torch, "pl": pl, "math": math})
    colab_page.set_content(shown[0]["text/html"], wait_until="load")
    gd = colab_page.wait_for_selector(".js-plotly-plot .main-svg")
    gd = colab_page.query_selector(".js-plotly-plot")
    before = colab_page.evaluate(DRAWN_JS, gd)
    assert before
    _move_control(colab_page, gd)
    assert _wait_until_changed(colab_page, gd, before) != before
    assert not colab_page.errors and not colab_page.blocked, (
        colab_page.errors,
        colab_page.blocked,
    )

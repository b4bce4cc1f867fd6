"""The whole book as one PDF: Jupyter Book's single-page build printed by Chromium.

    python -m tools.build.pdf         # `make site` runs it after the site build
    -> _build/pdf/positional-encoding-course.pdf   (also served by the site, see below)
    python -m tools.build.pdf --check-chromium   # only: is there a Chromium to print?

Three steps:

1. ``jupyter-book build --builder singlehtml``, strict like the site build
   (``--warningiserror --nitpick --keep-going``), into ``_build/singlehtml``, beside
   the site's ``_build/html``: with the site's ``_config.yml`` (the same extensions,
   ``singlehtml_nodes`` among them), it shares the site build's Sphinx environment
   (``_build/.doctrees``), so it reads no page again (nor executes a notebook): it
   only assembles the pages the site build read into one and writes it. The site
   build runs first when its pages are missing or stale (``site_staleness``):
   ``posenc_lib``, the pins, ``_toc.yml`` or an extension of the book changed since
   the last site build (``tools/build/site.py``'s stamps), or a page's source was
   edited since. Sphinx would re-read an edited source itself, but the site build
   also regenerates the pages collected from the chapters (the errata index, the
   teaching guide's). The build records how many sources it read
   (``_build/pdf/build.json``), and ``tests/test_pdf.py`` checks that it was none.
2. Headless Chromium (Debian's ``/usr/bin/chromium``, or ``$CHROMIUM``, driven by
   playwright) opens that page from a local server with every other request blocked,
   waits for MathJax to finish typesetting, for every image to load and for every
   interactive (plotly) figure to be drawn, moves each exercise's solution to an
   appendix at the end of the book (*Solutions to the exercises*, by chapter; a link
   in its place: the site hides it under its exercise, a printed page cannot), opens
   every collapsed block (hidden code), refuses to print if a formula was left as TeX,
   an image is
   broken or a code block is wider than the page, and prints A4 pages with the print
   stylesheet ``_static/print.css`` (each chapter on a new page, code wrapped).
3. The PDF is copied to ``_build/extra/`` (``html_extra_path``: every later site build
   serves it) and into the current ``_build/html/``: the site serves it at its root,
   ``positional-encoding-course.pdf``.

The PDF is tagged and has an outline (bookmarks: parts, chapters, sections), which
``tests/test_pdf.py`` uses to find each chapter's pages; the tags are most of its size
(about 35 MiB for 527 pages; 16 MiB untagged, without bookmarks).

Why not ``jupyter-book build --builder pdfhtml``, which also prints the single-page
build with Chromium? In jupyter-book 1.0.4 (``jupyter_book/pdf.py``) it launches
playwright's own downloaded browser (``p.chromium.launch()`` with no executable path,
so it needs ``playwright install`` and the network; we use Debian's Chromium, offline),
prints as soon as the network is idle without waiting for MathJax, with no page size
and zero side margins, and writes the single-page HTML over the site in
``_build/html``. ``pdflatex`` needs a TeX installation, which the course does not
require. The page is printed from a copy at the build's root (``book.html``) because
Sphinx's ``singlehtml`` writes the root document ``book/intro.html`` with links to
``_static/`` and ``_images/`` relative to the build's root.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

from tools.build.site import BUILD, STAMP, pages_hash

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = BUILD / "pdf"
PDF_NAME = "positional-encoding-course.pdf"
PDF = OUT / PDF_NAME
# jupyter-book's single-page output with no --path-output: beside _build/html, with its
# doctrees in _build/.doctrees (jupyter_book/sphinx.py: the output's parent), the site's
SINGLE = BUILD / "singlehtml"
RECORD = OUT / "build.json"  # the last build's sources read and seconds
# Sphinx's summary of what it re-reads: "updating environment: [reason] 0 added, ..."
UPDATING = re.compile(
    r"updating environment: .*?(\d+) added, (\d+) changed, (\d+) removed"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A4 text width: 210 mm - 2 x 14 mm (the margins of _static/print.css) at 96 px/inch
TEXT_WIDTH_PX = round((210 - 28) / 25.4 * 96)
MARGIN = {"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}
FOOTER = (
    '<div style="font-size:8px;width:100%;text-align:center;color:#555">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)

# The solutions: where the site hides each under its exercise, the PDF prints them
# at the end, in an appendix by chapter, and leaves a link under the exercise.
SOLUTIONS_TITLE = "Solutions to the exercises"
SOLUTION_POINTER = "The solution is in the appendix, Solutions to the exercises."
SOLUTIONS_TO_APPENDIX_JS = """([title, pointerText]) => {
  const solutions = [...document.querySelectorAll('div.solution')];
  if (!solutions.length) return 0;
  // Sphinx's singlehtml puts <span id="document-..."> before each page's section
  const chapterOf = s => s.closest('span[id^="document-"] + section');
  const headingOf = c => c.querySelector('h1, h2, h3, h4');
  const chapters = solutions.map(chapterOf).filter(Boolean);
  const last = chapters[chapters.length - 1];
  // the appendix is one more chapter (its heading at the chapters' level), after them
  const level = last ? +headingOf(last).tagName[1] : 1;
  const appendix = document.createElement('section');
  appendix.id = 'solutions-appendix';
  const heading = document.createElement('h' + level);
  heading.textContent = title;
  appendix.appendChild(heading);
  let chapter = null;
  for (const solution of solutions) {
    const section = chapterOf(solution);
    if (section && section !== chapter) {
      chapter = section;
      const name = headingOf(section).cloneNode(true);
      name.querySelectorAll('a.headerlink').forEach(a => a.remove());
      const sub = document.createElement('h' + Math.min(level + 1, 6));
      sub.textContent = name.textContent.trim() + ' \\u2014 solutions';
      appendix.appendChild(sub);
    }
    const pointer = document.createElement('p');
    pointer.className = 'solution-pointer';
    const link = document.createElement('a');
    link.href = '#' + solution.id;
    link.textContent = pointerText;
    pointer.appendChild(link);
    solution.replaceWith(pointer);
    appendix.appendChild(solution);
  }
  const all = [...document.querySelectorAll('span[id^="document-"] + section')];
  if (all.length) all[all.length - 1].after(appendix);
  else document.body.appendChild(appendix);
  return solutions.length;
}"""
# Run in the page before printing; each returns a list of problems (empty: fine).
OPEN_COLLAPSED_JS = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(
    e => e.classList.remove('toggle-hidden'));
}"""
WAIT_IMAGES_JS = """async () => {
  const imgs = [...document.images];
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(
    r => { i.addEventListener('load', r); i.addEventListener('error', r); })));
  return imgs.filter(i => !i.naturalWidth).map(i => 'broken image: ' + i.src);
}"""
DRAWN_JS = """() => [...document.querySelectorAll('.plotly-graph-div')]
  .every(d => d.querySelector('.main-svg'))"""
UNRENDERED_JS = """() => {
  const bad = [];
  document.querySelectorAll('.math').forEach(m => {
    if (!m.querySelector('mjx-container'))
      bad.push('formula left as TeX: ' + m.textContent.slice(0, 80));
  });
  document.querySelectorAll('mjx-merror').forEach(m =>
    bad.push('MathJax error: ' + m.textContent.slice(0, 80)));
  document.querySelectorAll('.plotly-graph-div').forEach(d => {
    if (!d.querySelector('.main-svg'))
      bad.push('interactive figure not drawn: ' + d.id);
  });
  return bad;
}"""
# Under print media at the A4 text width: code blocks that would be cut at the edge
OVERFLOW_JS = """() => [...document.querySelectorAll('pre')]
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => 'code wider than the page: ' + p.textContent.slice(0, 80))"""


def chromium() -> str:
    path = (
        os.environ.get("CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if not path:
        sys.exit(
            "[pdf] Chromium not found: install Debian's chromium "
            "(apt-get install -y chromium) or set CHROMIUM"
        )
    return path


def site_staleness() -> str | None:
    """Why the site build's pages (and its Sphinx environment, which the single-page
    build writes from) are not current; None when they are."""
    if not STAMP.exists():
        return "no site build"
    if STAMP.read_text() != pages_hash():
        return "posenc_lib, the environment, _toc.yml or an extension changed"
    built = STAMP.stat().st_mtime
    sources = [ROOT / "_config.yml", *(ROOT / "book").rglob("*")]
    edited = [
        path
        for path in sources
        if path.is_file()
        and ".ipynb_checkpoints" not in path.parts
        and path.stat().st_mtime > built
    ]
    if edited:
        more = f" (and {len(edited) - 1} more)" if len(edited) > 1 else ""
        return f"{edited[0].relative_to(ROOT)}{more} edited since"
    return None


def ensure_site() -> None:
    """The single-page build writes from the site build's environment: build the
    site first when it is missing or stale."""
    reason = site_staleness()
    if reason is None:
        return
    print(f"[pdf] running tools.build.site first: {reason}", flush=True)
    subprocess.run([sys.executable, "-m", "tools.build.site"], cwd=ROOT, check=True)


def build_command() -> list[str]:
    return [
        str(pathlib.Path(sys.executable).parent / "jupyter-book"),
        "build",
        str(ROOT),
        "--builder",
        "singlehtml",
        "--warningiserror",
        "--nitpick",
        "--keep-going",
        # no --all, no --config, no --path-output: the site's configuration and
        # environment (_build/.doctrees), which ensure_site made current
    ]


def build_singlehtml() -> int:
    """The single-page build; returns how many sources it read (0 when the site
    build's environment was current)."""
    # the old layout (its own configuration and environment, every page re-read)
    shutil.rmtree(OUT / "_build", ignore_errors=True)
    (OUT / "_config.yml").unlink(missing_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (BUILD / "extra").mkdir(parents=True, exist_ok=True)  # html_extra_path
    proc = subprocess.Popen(
        build_command(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    executed, read = [], 0
    for line in proc.stdout:
        sys.stdout.write(line)
        found = re.search(r"(\S+\.ipynb): Executed notebook", line)
        if found:
            executed.append(found.group(1))
        updating = UPDATING.search(ANSI.sub("", line))
        if updating:
            read += int(updating.group(1)) + int(updating.group(2))
    if proc.wait() != 0:
        sys.exit(f"[pdf] the single-page build failed (exit {proc.returncode})")
    if executed:
        print(
            f"[pdf] {len(executed)} notebook(s) were not in the site's execution "
            f"cache and ran again: {', '.join(executed)}",
            flush=True,
        )
    if read:
        print(
            f"[pdf] the single-page build read {read} source(s) again: the site "
            "build's environment was not current",
            flush=True,
        )
    return read


def root_page() -> pathlib.Path:
    """The single page, copied to the build's root so that its relative links to
    ``_static/`` and ``_images/`` resolve (see the module docstring)."""
    from tools import toc

    page = SINGLE / f"{toc.root_page()}.html"
    target = SINGLE / "book.html"
    shutil.copyfile(page, target)
    return target


@functools.cache
def _serve(directory: str) -> str:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=directory)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def print_pdf(page_file: pathlib.Path, pdf: pathlib.Path) -> None:
    from playwright.sync_api import sync_playwright

    url = f"{_serve(str(page_file.parent))}/{page_file.name}"
    blocked = []

    def route(r):
        if urlparse(r.request.url).hostname == "127.0.0.1":
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": TEXT_WIDTH_PX, "height": 1100})
        page.route("**/*", route)
        page.emulate_media(media="print", color_scheme="light")
        page.goto(url, wait_until="load", timeout=180_000)
        # MathJax typesets after load: wait for its startup promise (all formulas)
        page.wait_for_function(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise",
            timeout=60_000,
        )
        page.evaluate("() => MathJax.startup.promise")
        # interactive figures (posenc_lib.interactive) are drawn by plotly.js
        page.wait_for_function(DRAWN_JS, timeout=60_000)
        moved = page.evaluate(
            SOLUTIONS_TO_APPENDIX_JS, [SOLUTIONS_TITLE, SOLUTION_POINTER]
        )
        print(f"[pdf] {moved} solutions printed in the appendix", flush=True)
        page.evaluate(OPEN_COLLAPSED_JS)
        problems = page.evaluate(WAIT_IMAGES_JS)
        page.evaluate("() => document.fonts.ready.then(() => true)")
        problems += page.evaluate(UNRENDERED_JS)
        problems += page.evaluate(OVERFLOW_JS)
        if blocked:
            problems += [f"blocked a non-local request: {u}" for u in blocked[:5]]
        if problems:
            browser.close()
            sys.exit("[pdf] not printed:\n  " + "\n  ".join(problems[:20]))
        page.pdf(
            path=str(pdf),
            format="A4",
            margin=MARGIN,
            print_background=True,
            display_header_footer=True,
            header_template="<div></div>",
            footer_template=FOOTER,
            outline=True,  # PDF bookmarks from the headings (chapters, sections)
            tagged=True,
        )
        browser.close()


def publish(pdf: pathlib.Path) -> None:
    """Serve the PDF from the site: the current build and every later one."""
    (BUILD / "extra").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pdf, BUILD / "extra" / PDF_NAME)
    if (BUILD / "html" / "index.html").exists():
        shutil.copyfile(pdf, BUILD / "html" / PDF_NAME)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--print-only",
        action="store_true",
        help="print the existing single-page build again (no Sphinx build)",
    )
    parser.add_argument(
        "--check-chromium",
        action="store_true",
        help="only check that Chromium is there to print the PDF (make site runs "
        "this before the site build)",
    )
    args = parser.parse_args()
    if args.check_chromium:
        print(f"[pdf] printing with {chromium()}", flush=True)
        return 0
    if not args.print_only:
        ensure_site()
    start = time.time()
    read = None if args.print_only else build_singlehtml()
    built = time.time()
    print_pdf(root_page(), PDF)
    publish(PDF)
    import pypdfium2  # the page count: 0.2 s here, pypdf's 4-7 s (it parses the
    # whole cross-reference table of the tagged PDF first)

    with contextlib.closing(pypdfium2.PdfDocument(PDF)) as document:
        pages = len(document)
    print(
        f"[pdf] {PDF.relative_to(ROOT)}: {pages} pages, "
        f"{PDF.stat().st_size / 2**20:.1f} MiB; single-page build "
        f"{built - start:.0f} s, printing {time.time() - built:.0f} s",
        flush=True,
    )
    if read is not None:
        record = {
            "sources_read": read,
            "single_page_s": round(built - start, 1),
            "printing_s": round(time.time() - built, 1),
            "pages": pages,
        }
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

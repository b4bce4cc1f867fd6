"""The book's PDF (``make pdf``: tools/build/pdf.py), opened with pypdf (its outline
and images) and PDFium (its text and glyph boxes): a plausible number of pages, every
chapter of ``_toc.yml`` in it under its own title, no formula left as TeX, every
chapter's figures printed, the exercises' solutions in an appendix at the end (not
under their exercises, where the site hides them), and no line of code cut at the
right edge of a page (the check itself tried on a planted page).

Marked ``build``: it needs the PDF, so it runs with ``-m build`` after ``make pdf``.
Without a PDF it skips with a message on a reader's machine and fails under CI.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re
import shutil
import unicodedata

import pytest

from tools import toc
from tools.build import pdf
from tools.build.colab_edition import _from_cache
from tools.build.pdf import PDF, PDF_NAME

pytestmark = pytest.mark.build

ROOT = pathlib.Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TOC = toc.entries()
CHAPTERS = [entry for entry in TOC[1:]]  # the root (the intro) is the title page
NOTEBOOKS = [entry for entry in CHAPTERS if (ROOT / f"{entry}.ipynb").exists()]
# TeX that MathJax should have turned into formulas
RAW_TEX = [r"\frac", r"\sqrt", r"\begin{", r"\end{", r"\mathrm", r"\mathbf", "$$"]
RAW_TEX += [r"\left", r"\right", r"\cdot", r"\theta", r"\top", r"\sum", r"\("]
# a glyph of a monospace font (code) ending beyond the right margin is cut
RIGHT_MARGIN_PT = 14 / 25.4 * 72  # tools/build/pdf.py's MARGIN
INTERACTIVE_CAPTION = "Interactive figure, printed at"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif")
REMOVED = {"remove-cell", "remove_cell", "remove-output", "remove_output"}
SOLUTION_TAG = "solution"  # a solution's code cells: printed in the appendix
SOLUTION_TITLE = "Solution to Exercise"  # sphinx-exercise's title of each solution
SOLUTION_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{solution(-start)?\}", re.M)


@pytest.fixture(scope="module")
def reader():
    if not PDF.exists():
        message = f"no PDF at {PDF}: run `make pdf` (after `make site`)"
        if IN_CI:
            pytest.fail(message + " (CI builds the PDF before this test)")
        pytest.skip(message)
    from pypdf import PdfReader

    return PdfReader(PDF)


def read_pdf_text(path: pathlib.Path) -> tuple[list[str], list[str]]:
    """(the text of each page, the glyphs of code that end beyond the right margin),
    read with PDFium (pypdfium2; pypdf's text extraction took ten times as long).

    A glyph is cut when it is not a space, its font is monospace (code, outputs) and
    its box ends beyond the page's text area (the margin of tools/build/pdf.py, plus
    2 pt). PDFium's text rectangles (a few glyphs each) say which pages to look at."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    left, top, right, bottom = (ctypes.c_double() for _ in range(4))
    font = ctypes.create_string_buffer(256)
    texts, cut = [], []
    doc = pdfium.PdfDocument(path)
    for number in range(len(doc)):
        page = doc[number]
        textpage = page.get_textpage()
        text = textpage.get_text_range()
        texts.append(text)
        edge = page.get_width() - RIGHT_MARGIN_PT + 2
        rects = raw.FPDFText_CountRects(textpage.raw, 0, -1)
        beyond = False
        for k in range(rects):
            raw.FPDFText_GetRect(textpage.raw, k, left, top, right, bottom)
            beyond = beyond or right.value > edge
        for i in range(raw.FPDFText_CountChars(textpage.raw) if beyond else 0):
            char = chr(raw.FPDFText_GetUnicode(textpage.raw, i) or 32)
            if char.isspace():
                continue
            raw.FPDFText_GetCharBox(textpage.raw, i, left, right, bottom, top)
            if right.value <= edge:
                continue
            raw.FPDFText_GetFontInfo(textpage.raw, i, font, len(font), None)
            if b"Mono" in font.value:
                line = text[: i + 1].splitlines()[-1].strip()[-60:]  # up to it
                cut.append(f"page {number + 1}: {line!r} ends at {right.value:.0f} pt")
        textpage.close()
        page.close()
    doc.close()
    return texts, cut


@pytest.fixture(scope="module")
def extracted(reader):
    """(the text of each page, the code that ends beyond the right margin): one pass
    over the PDF."""
    return read_pdf_text(PDF)


@pytest.fixture(scope="module")
def texts(extracted):
    return extracted[0]


def squash(text: str) -> str:
    """Text without whitespace and ligatures (the PDF prints "ﬀ" for "ff"): a title
    broken over two lines still matches."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def title(entry: str) -> str:
    """The chapter's title: the first ``# `` heading of the notebook or page."""
    path = ROOT / f"{entry}.ipynb"
    if path.exists():
        cells = json.loads(path.read_text())["cells"]
        lines = [
            line
            for cell in cells
            if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines()
        ]
    else:
        lines = (ROOT / f"{entry}.md").read_text().splitlines()
    heading = next(line for line in lines if line.startswith("# "))
    # MyST inline markup renders as its text: `code`, *emphasis*, {role}`text`
    heading = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", heading[2:])
    return re.sub(r"[`*_]", "", heading).strip()


def chapter_pages(reader, texts) -> dict[str, range]:
    """entry -> the pages of its chapter, from the PDF's outline (bookmarks, made
    from the headings): a chapter runs from its title's page to the next chapter's."""
    marks = []  # (depth, title, page): chapters are the shallowest headings

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                page = reader.get_destination_page_number(item)
                marks.append((depth, squash(item.title), page))

    walk(reader.outline, 0)
    starts = {}
    for entry in CHAPTERS:
        want = squash(title(entry))
        # "2. Self-attention from scratch"; not the section "2.1. Notation"
        found = sorted(
            m for m in marks if re.fullmatch(r"(\d+\.)?" + re.escape(want), m[1])
        )
        assert found, f"{entry}: no bookmark {title(entry)!r} in the PDF's outline"
        starts[entry] = found[0][2]
    order = sorted(starts.values()) + [len(texts)]
    return {
        entry: range(start, order[order.index(start) + 1])
        for entry, start in starts.items()
    }


@pytest.fixture(scope="module")
def chapters(reader, texts):
    return chapter_pages(reader, texts)


def expected_figures(entry: str, solutions: bool = False) -> tuple[int, int]:
    """(images, interactive figures) that the executed notebook displays: outside
    its exercises' solutions (printed on the chapter's pages), or in them (printed in
    the appendix of solutions)."""
    nb = _from_cache(ROOT / f"{entry}.ipynb")
    assert nb is not None, f"{entry}: not in the execution cache; run `make site`"
    images = interactive = 0
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & REMOVED or (SOLUTION_TAG in tags) != solutions:
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("metadata", {}).get("scrapbook"):
                continue  # glued: shown where the text uses it, if at all
            if "application/vnd.plotly.v1+json" in data:
                interactive += 1
            elif any(mime in data for mime in IMAGE_MIMES):
                images += 1
    return images, interactive


def drawn_images(page) -> int:
    """Image XObjects that the page draws (inside form XObjects too)."""

    def count(resources, seen) -> int:
        total = 0
        xobjects = (resources or {}).get("/XObject") or {}
        for ref in xobjects.values():
            obj = ref.get_object()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.get("/Subtype") == "/Image":
                total += 1
            elif obj.get("/Subtype") == "/Form":
                total += count(obj.get("/Resources"), seen)
        return total

    return count(page.get("/Resources"), set())


def test_the_page_count_is_plausible(reader):
    pages = len(reader.pages)
    assert 5 * len(CHAPTERS) <= pages <= 40 * len(CHAPTERS), (
        f"{pages} pages for {len(CHAPTERS)} chapters"
    )


def test_every_chapter_is_in_the_pdf_under_its_title(reader, texts):
    text = squash("".join(texts))
    missing = [f"{e}: {title(e)!r}" for e in CHAPTERS if squash(title(e)) not in text]
    assert not missing, "chapters missing from the PDF:\n" + "\n".join(missing)
    chapter_pages(reader, texts)  # and each has its bookmark (the outline)


def test_no_formula_is_left_as_tex(texts):
    """Code and outputs may print TeX (a sympy formula, a plot label): the PDF may
    show each string as often as the executed notebooks print it, no more."""
    printed = {tex: 0 for tex in RAW_TEX}
    for entry in NOTEBOOKS:
        nb = _from_cache(ROOT / f"{entry}.ipynb")
        for cell in nb.cells if nb is not None else []:
            if cell["cell_type"] != "code":
                continue
            shown = cell["source"] + "".join(
                "".join(out.get("text", ""))
                + "".join(out.get("data", {}).get("text/plain", ""))
                for out in cell.get("outputs", [])
            )
            for tex in RAW_TEX:
                printed[tex] += shown.count(tex)
    text = "".join(texts)
    left = {tex: text.count(tex) for tex in RAW_TEX if text.count(tex) > printed[tex]}
    assert not left, f"TeX in the PDF beyond what the code prints: {left}"


@pytest.mark.parametrize("entry", NOTEBOOKS)
def test_every_figure_of_the_chapter_is_printed(reader, texts, chapters, entry):
    images, interactive = expected_figures(entry)
    pages = chapters[entry]
    drawn = sum(drawn_images(reader.pages[i]) for i in pages)
    assert drawn >= images, (
        f"{entry}: {images} image outputs, {drawn} images on its pages "
        f"{pages.start + 1}-{pages.stop}"
    )
    captions = sum(squash(texts[i]).count(squash(INTERACTIVE_CAPTION)) for i in pages)
    assert captions >= interactive, (
        f"{entry}: {interactive} interactive figures, {captions} printed"
    )


def appendix_start(reader) -> int:
    """The page where the appendix of solutions starts (its bookmark)."""
    marks = []

    def walk(items):
        for item in items:
            if isinstance(item, list):
                walk(item)
            elif squash(item.title) == squash(pdf.SOLUTIONS_TITLE):
                marks.append(reader.get_destination_page_number(item))

    walk(reader.outline)
    assert marks, f"no bookmark {pdf.SOLUTIONS_TITLE!r}: the solutions have no appendix"
    return marks[0]


def test_the_solutions_are_printed_in_an_appendix_not_under_their_exercises(
    reader, texts
):
    """The site hides each solution under its exercise; a printed page cannot, so
    the PDF prints them all at the end, after the last chapter, and nothing of a
    solution under its exercise."""
    start = appendix_start(reader)
    early = [i + 1 for i in range(start) if squash(SOLUTION_TITLE) in squash(texts[i])]
    assert not early, f"solutions printed under their exercises, pages {early[:10]}"
    sources = [
        "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        if path.suffix == ".ipynb"
        else path.read_text()
        for entry in CHAPTERS
        for path in [ROOT / f"{entry}.ipynb", ROOT / f"{entry}.md"]
        if path.exists()
    ]
    solutions = sum(len(SOLUTION_DIRECTIVE.findall(text)) for text in sources)
    printed = sum(squash(t).count(squash(SOLUTION_TITLE)) for t in texts[start:])
    assert solutions > 50 and printed >= solutions, (
        f"{solutions} solutions in the book, {printed} in the appendix"
    )
    last = max(chapter_pages(reader, texts).values(), key=lambda r: r.start)
    assert start > last.start, "the appendix comes after the last chapter"
    # the figures the solutions draw are printed there
    images = sum(expected_figures(e, solutions=True)[0] for e in NOTEBOOKS)
    drawn = sum(drawn_images(reader.pages[i]) for i in range(start, len(texts)))
    assert drawn >= images, f"{images} images in solutions, {drawn} in the appendix"


def test_the_appendix_mechanism_on_a_small_page(tmp_path):
    """``SOLUTIONS_TO_APPENDIX_JS`` on a page shaped as Sphinx's single-page build
    (two chapters, three solutions): each solution leaves its chapter for the
    appendix, under its chapter's name, and a link to it takes its place."""
    from playwright.sync_api import sync_playwright

    if not (os.environ.get("CHROMIUM") or shutil.which("chromium") or IN_CI):
        pytest.skip("no Chromium: apt-get install -y chromium")
    chapter = (
        '<span id="document-{n}"></span><section id="c{n}"><h2>{n}. Chapter {n}'
        '<a class="headerlink" href="#c{n}">#</a></h2><div class="exercise">'
        "Exercise {n}.1</div>{solutions}<p>End of chapter {n}.</p></section>"
    )
    solution = (
        '<div class="solution dropdown admonition" id="s{n}-{k}">'
        '<p class="admonition-title">Solution to Exercise {n}.{k}</p>'
        "<p>answer {n}.{k}</p></div>"
    )
    page = tmp_path / "book.html"
    page.write_text(
        '<html><body><section id="root"><h1>Book</h1>'
        + chapter.format(n=1, solutions=solution.format(n=1, k=1))
        + chapter.format(
            n=2, solutions=solution.format(n=2, k=1) + solution.format(n=2, k=2)
        )
        + "</section></body></html>"
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=pdf.chromium(), args=pdf.CHROMIUM_ARGS
        )
        tab = browser.new_page()
        tab.goto(page.as_uri())
        moved = tab.evaluate(
            pdf.SOLUTIONS_TO_APPENDIX_JS, [pdf.SOLUTIONS_TITLE, pdf.SOLUTION_POINTER]
        )
        shape = tab.evaluate(
            """() => ({
            chapters: [...document.querySelectorAll('#root > section')].map(s => s.id),
            inChapters: document.querySelectorAll('section[id^=c] .solution').length,
            appendix: [...document.querySelectorAll('#solutions-appendix > *')].map(
              e => e.tagName + ' ' + e.textContent.trim()),
            pointers: [...document.querySelectorAll('p.solution-pointer a')].map(
              a => a.getAttribute('href')),
            })"""
        )
        browser.close()
    assert moved == 3 and shape["inChapters"] == 0
    assert shape["chapters"] == ["c1", "c2", "solutions-appendix"]
    assert shape["appendix"] == [
        f"H2 {pdf.SOLUTIONS_TITLE}",
        "H3 1. Chapter 1 \u2014 solutions",
        "DIV Solution to Exercise 1.1answer 1.1",
        "H3 2. Chapter 2 \u2014 solutions",
        "DIV Solution to Exercise 2.1answer 2.1",
        "DIV Solution to Exercise 2.2answer 2.2",
    ]
    assert shape["pointers"] == ["#s1-1", "#s2-1", "#s2-2"]


def test_the_cut_code_check_finds_a_planted_line(tmp_path):
    """``read_pdf_text`` on two pages printed as tools/build/pdf.py prints the book:
    a line of code that runs past the right margin is reported, with its text; the
    same code wrapped inside the margin, and prose, are not."""
    from playwright.sync_api import sync_playwright

    if not (os.environ.get("CHROMIUM") or shutil.which("chromium") or IN_CI):
        pytest.skip("no Chromium: apt-get install -y chromium")
    line = "too_long = " + " + ".join(f"term_{k}" for k in range(30))
    pages = {
        "cut": f'<pre style="white-space: pre; overflow: visible">{line}</pre>',
        "fits": f'<pre style="white-space: pre-wrap">{line}</pre><p>{line}</p>',
    }
    found = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=pdf.chromium(), args=pdf.CHROMIUM_ARGS
        )
        tab = browser.new_page()
        for name, body in pages.items():
            tab.set_content(f"<html><body>{body}</body></html>")
            tab.pdf(path=str(tmp_path / f"{name}.pdf"), format="A4", margin=pdf.MARGIN)
            found[name] = read_pdf_text(tmp_path / f"{name}.pdf")
        browser.close()
    texts, cut = found["cut"]
    assert squash(line) not in squash(texts[0])  # Chromium drops what is off paper
    assert squash(line)[:40] in squash(texts[0])
    assert cut and all(c.startswith("page 1: ") for c in cut), cut
    shown = re.match(r"page 1: '(.+)' ends at", cut[0]).group(1)
    assert len(shown) > 20 and shown in line, cut  # the line's text, to find it by
    assert found["fits"][1] == [], found["fits"][1]


def test_no_line_of_code_is_cut_at_the_right_edge(extracted):
    """Every run of monospace text (code, outputs) ends inside the page's text area."""
    cut = extracted[1]
    assert not cut, "code cut at the right edge:\n" + "\n".join(cut[:20])


def test_the_site_serves_the_pdf(reader):
    """tools/build/pdf.py copies the PDF into html_extra_path (every later site build
    serves it) and into the current site build."""
    served = [ROOT / "_build" / "extra" / PDF_NAME]
    if (ROOT / "_build" / "html" / "index.html").exists():
        served.append(ROOT / "_build" / "html" / PDF_NAME)
    for path in served:
        assert path.exists(), f"{path} missing: the site does not serve the PDF"
        assert path.read_bytes() == PDF.read_bytes(), f"{path} is an older PDF"


def test_the_single_page_build_read_nothing_the_site_build_had_read(reader):
    """The single-page build writes from the site build's Sphinx environment: the
    site build (run first, or current) read every page, so it read none again (a
    differing configuration would make Sphinx re-read them all: 30 s more here)."""
    if not pdf.RECORD.exists():
        pytest.skip(f"no {pdf.RECORD}: the PDF was printed with --print-only")
    record = json.loads(pdf.RECORD.read_text())
    assert record["pages"] == len(reader.pages), f"{pdf.RECORD} is of another PDF"
    assert record["sources_read"] == 0, (
        f"the single-page build read {record['sources_read']} sources again "
        "(its log: 'updating environment'): the site build's environment was not "
        "current for it, see tools/build/pdf.py"
    )

"""The teaching guide's slides (tools/build/slides.py): every chapter in exactly one
session's deck, the guide's generated facts up to date, each session's required
reading at most an hour, the decks made from the chapters (titles, figures, this
build's numbers, no MyST left, every formula after its lead-in, no "the check above"
pointing at a notebook the slide does not show), and, in Chromium, every slide of
every deck with its maths typeset, its figures loaded, no console error, no request
leaving the machine, and the right arrow walking every slide in order."""

from __future__ import annotations

import json
import re
from collections import Counter
import subprocess
import sys
import zipfile

import pytest

from tests.browser import HTML, _unavailable
from tools.build import session_bundles, slides
from tools.build.colab_edition import MISSING
from tools.build.course_index import chapter_info
from tools.toc import numbered_chapters

SESSIONS = slides.sessions()
# "above"/"below" placing something in the notebook: the cell above, the check
# below, as printed above, (rows above); not a comparison (above 0.9, below $d$)
NOTEBOOK_PLACE = re.compile(
    r"\b(?:cells?|checks?|code|printout|output|count|assertions?|sweep|table|rows?"
    r"|transcription|lines|formula|erratum|note|rule)(?: [\w-]+){0,2} (?:above|below)"
    r"\b(?!\s*[$0-9`])"
    r"|\b(?:shown|printed|checked|read|measured|reproduced|cited|quoted|asserted)"
    r"(?: (?:in|by) the cell)? (?:above|below)\b(?!\s*[$0-9`])"
    r"|\((?:above|below)\)",
    re.I,
)
# MyST that must not reach a slide: roles, directives, targets, glue.
MYST = re.compile(
    r"\{(glue|doc|ref|numref|footcite|cite|math|eq|abbr)[\w:]*\}`"
    r"|^(`{3,}|:{3,})\{|^\([\w.:-]+\)=|\{footbibliography\}",
    re.M,
)


def _deck_text(nb: dict) -> str:
    return "\n".join(c["source"] for c in nb["cells"])


def test_every_chapter_is_in_exactly_one_session():
    chapters = [entry for _, entry in numbered_chapters()]
    placed = [entry for s in SESSIONS for entry in s.chapters]
    assert sorted(placed) == sorted(chapters), "a chapter is in no or two sessions"
    assert len(placed) == len(set(placed))
    assert [s.number for s in SESSIONS] == list(range(1, len(SESSIONS) + 1))
    parts = {caption for caption, _ in numbered_chapters()}
    assert {s.part for s in SESSIONS} == parts, "a part of _toc.yml has no session"
    assert any(s.part.startswith("Part VII") for s in SESSIONS)
    for entry in slides.PLAN:  # a plan names the first chapter of its session
        assert entry in {s.chapters[0] for s in SESSIONS}, entry


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            'section: "The protocol"',
            'section: "The protokol"',
            "book/part3/extrapolation_lab has no section whose heading starts with "
            "'The protokol'; its sections: ",
        ),
        (
            "{chapter: book/part3/alibi, exercise: 1}",
            "{chapter: book/part3/alibj, exercise: 1}",
            "book/part3/alibj is not a numbered chapter of _toc.yml",
        ),
        (
            "{chapter: book/part3/alibi, exercise: 1}",
            "{chapter: book/part3/alibi, exercise: 9}",
            "book/part3/alibi has no exercise 9 (it has 3)",
        ),
        (
            "- first: book/part3/alibi",
            "- first: book/part3/alibi_lab",
            "first: book/part3/alibi_lab is not a numbered chapter",
        ),
        (
            "{chapter: book/part3/alibi, exercise: 1}",
            "{chapter: book/part3/rope, exercise: 1}",
            "book/part3/rope is not one of its chapters",
        ),
        (
            '{chapter: book/part4/cope, section: "What it costs"}',
            '{chapter: book/part4/cope, section: "What it costz"}',
            "optional: book/part4/cope has no section whose heading starts with",
        ),
        (
            "- {chapter: book/part4/stick_breaking}\n",
            "- {chapter: book/part5/vision}\n",
            "book/part5/vision is not one of its chapters",
        ),
        ('    title: "Synthesis"', '    titel: "Synthesis"', "unknown keys"),
    ],
)
def test_a_plan_naming_what_the_book_lacks_is_refused(tmp_path, old, new, says):
    """book/teaching/sessions.yml is checked against the book: a session that names
    a chapter, section or exercise that does not exist is refused, with the session
    and the entry named."""
    head, data = slides.SESSIONS.read_text().split("\nsessions:\n")  # past the schema
    assert old in data
    path = tmp_path / "sessions.yml"
    path.write_text(head + "\nsessions:\n" + data.replace(old, new, 1))
    with pytest.raises(slides.PlanError) as refused:
        slides.load_plan(path)
    message = str(refused.value)
    assert says in message and "session" in message, message


def test_the_plan_is_data_beside_the_guide():
    """The class plan is course content: it lives beside the guide, and the slide
    tool holds no session's title."""
    assert slides.SESSIONS.parent == slides.GUIDE.parent
    code = (slides.ROOT / "tools" / "build" / "slides.py").read_text()
    for plan in slides.PLAN.values():
        assert plan.title not in code, plan.title


def test_the_guide_facts_are_what_the_tool_generates():
    result = subprocess.run(
        [sys.executable, "-m", "tools.build.slides", "--guide", "--check"],
        cwd=slides.ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    guide = slides.GUIDE.read_text()
    for s in SESSIONS:
        assert f'href="../../slides/{s.slug}.html"' in guide, s.slug
        zipped = session_bundles.zip_name(s.number)
        assert f'href="../../student/{zipped}"' in guide, zipped
    assert 'href="../../slides/posenc-slides.zip"' in guide


def test_no_session_asks_more_than_an_hour_of_reading():
    """The guide states each session's required reading (optional chapters and
    sections left out) and keeps it at most 60 minutes; the optional reading is
    stated beside it."""
    assert slides.MAX_READING == 60
    guide = slides.GUIDE.read_text()
    for session in SESSIONS:
        minutes = slides.reading_minutes(session)
        required, optional = slides.reading(session)
        assert minutes <= 60, f"session {session.number}: {minutes} minutes"
        assert minutes == round(slides.reading_cost(required))
        line = slides.reading_line(session)
        assert f"about {minutes} minutes ({required['words']} words" in line
        assert line in guide, f"session {session.number}: the guide is stale"
        if optional:
            assert "**optional**" in line, line
            assert f"{round(slides.reading_cost(optional))} minutes more" in line
    optional = [s for s in SESSIONS if s.plan and s.plan.optional]
    assert optional, "no session marks optional reading"
    # a section marked optional counts out of the reading, the rest of it in
    session = optional[0]
    cells = slides.optional_cells(session)
    for entry in session.chapters:
        skipped = slides.word_count(entry, cells.get(entry, set()))
        assert skipped <= slides.word_count(entry)


def test_a_session_over_an_hour_is_refused(tmp_path, monkeypatch):
    """Without its optional reading a long session is refused by the guide's
    generator, naming the session and the file to mark reading optional in."""
    head, data = slides.SESSIONS.read_text().split("\nsessions:\n")
    data = re.sub(r"    optional:.*?(?=\n  - first:|\Z)", "", data, flags=re.S)
    assert "optional" not in data
    path = tmp_path / "sessions.yml"
    path.write_text(head + "\nsessions:\n" + data)
    monkeypatch.setattr(slides, "SESSIONS", path)
    with pytest.raises(SystemExit, match=r"session \d+ asks \d+ minutes of reading"):
        slides.render_guide()


def _page(markdown: list[str], code: list[str] = (), figure: bool = False) -> list:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": m} for m in markdown]
    for k, source in enumerate(code):
        meta = {"mystnb": {"figure": {"caption": "A figure."}}} if figure else {}
        cells.append(
            {"cell_type": "code", "id": f"c{k}", "metadata": meta, "source": source}
        )
    return cells


def test_the_reading_time_counts_formulas_code_outputs_figures_and_exercises(
    monkeypatch,
):
    """A page with formulas, code, printed lines, figures and exercises costs more
    than the same words alone, each at its stated cost; solutions and cells removed
    from the page cost nothing."""
    words = "The score of a query and a key depends on their offset only. " * 10
    pages = {
        "prose": _page([words]),
        "formulas": _page(
            [
                words + " Here $m - n$ and $\\theta_i$ and {math}`q_m`.\n\n"
                "$$\nq_m^\\top k_n\n$$\n"
            ]
        ),  # fmt: skip
        "code": _page([words], ["x = 1\ny = 2\n\nprint(x + y)\n"]),
        "figure": _page([words], ["plot()\n"], figure=True),
        "exercise": _page([words + "\n```{exercise}\n:label: ex-a\nDo it.\n```\n"]),
    }
    hidden = _page([words], ["secret()\n"])
    hidden[-1]["metadata"]["tags"] = ["remove-cell"]
    solution = _page([words], ["answer = 42\n"])
    solution[-1]["metadata"]["tags"] = ["solution"]
    pages.update(hidden=hidden, solution=solution)
    monkeypatch.setattr(slides, "_cells", lambda entry: pages[entry])
    monkeypatch.setattr(
        slides, "_output_lines", lambda: {"code": {"c0": 4}, "hidden": {"c0": 9}}
    )
    units = {name: slides.reading_units(name) for name in pages}
    cost = {name: slides.reading_cost(u) for name, u in units.items()}
    assert units["formulas"]["display"] == 1 and units["formulas"]["inline"] == 3
    assert units["code"]["code"] == 3 and units["code"]["output"] == 4
    assert units["figure"]["figures"] == 1 and units["exercise"]["exercises"] == 1
    per = {unit: c for unit, (c, _) in slides.READING_COSTS.items()}
    base = cost["prose"]
    assert base == pytest.approx(units["prose"]["words"] / 150)
    assert cost["formulas"] > base and cost["formulas"] - base == pytest.approx(
        per["display"] + 3 * per["inline"], abs=per["words"] * 12
    )
    assert cost["code"] == pytest.approx(base + 3 * per["code"] + 4 * per["output"])
    assert cost["figure"] == pytest.approx(base + per["code"] + per["figures"])
    assert cost["exercise"] > base + per["exercises"]
    assert cost["hidden"] == cost["solution"] == pytest.approx(base)


def test_the_reading_costs_are_calibrated_and_printed_in_the_guide():
    """The estimator gives the chapters a student read in full about the time the
    student estimated (within 15 %, as the chapters change), and the guide prints
    every cost and the calibration."""
    for chapters, minutes in slides.CALIBRATION.items():
        units = sum((slides.reading_units(e) for e in chapters), start=Counter())
        assert slides.reading_cost(units) == pytest.approx(minutes, rel=0.15), chapters
    guide = slides.GUIDE.read_text()
    assert slides.reading_costs() in guide, "the guide's table of costs is stale"
    for _, what in slides.READING_COSTS.values():
        assert what.split(" (", 1)[1].rstrip(")") in guide, what
    # the printed lines are measured (python -m tools.build.slides --measure-outputs
    # after a build) for chapters of the book (a new chapter counts none until then)
    measured = json.loads(slides.OUTPUT_LINES.read_text())
    chapters = {e for _, e in numbered_chapters()}
    assert set(measured) <= chapters and len(measured) >= len(chapters) - 1


def test_reading_time_counts_the_prose():
    entry = SESSIONS[0].chapters[0]
    words = slides.word_count(entry)
    assert 300 < words < 20000
    text = slides.sections(entry)
    assert text[0]["cells"], "the chapter's first cells belong to no section"


def test_a_formula_keeps_its_lead_in():
    """The sentence before a display formula goes with it: across a cell boundary,
    past a paragraph that opens with code, and cut to its last clauses when long."""
    assert slides.lead_in("## Title\n\nThe score is\n\n") == "The score is"
    assert slides.lead_in("`pl.NoPE` has none. So the output is\n") == (
        "So the output is"
    )
    assert slides.lead_in("## A heading\n\n") == ""
    listed = "It makes two changes:\n\n1. the key is relative;\n2. $u$ is learned.\n\n"
    assert slides.lead_in(listed) == listed.strip()
    long = "A clause, " * 40 + "and finally the sum of the terms is"
    lead = slides.lead_in(long)
    assert lead.startswith("… ") and lead.endswith("the sum of the terms is")
    assert len(lead) <= slides.LEAD + 2
    cells = [
        {"cell_type": "markdown", "source": "The loss is the mean of"},
        {"cell_type": "markdown", "source": "$$\nL = x\n$$\n"},
    ]
    assert slides.lead_in(slides._prose_before(cells, 1)) == "The loss is the mean of"


def test_slide_text_names_cells_instead_of_pointing_at_them():
    """The chapter's "the check below" becomes the cell's number, any other "above"
    or "below" that places something in the notebook "in the chapter"; comparisons,
    code and maths are left alone."""
    cells = [
        {"cell_type": "code", "source": "x = 1", "metadata": {}},
        {"cell_type": "markdown", "source": "text"},
        {"cell_type": "code", "source": "", "metadata": {"tags": ["remove-cell"]}},
        {"cell_type": "code", "source": "assert x", "metadata": {}},
    ]
    cases = {
        "The check below computes both.": "The check in the chapter (cell 4) "
        "computes both.",
        "as the cell above shows": "as cell 1 of the chapter shows",
        "The cell transcribes it.": "Cell 4 of the chapter transcribes it.",
        "held in 10 runs (rows above).": "held in 10 runs (rows in the chapter).",
        "as printed above, is 2": "as printed in the chapter, is 2",
        "accuracy above 0.9 and below $d$": "accuracy above 0.9 and below $d$",
        "entries above the diagonal": "entries above the diagonal",
        "`the cell above` and $x$ above $y$": "`the cell above` and $x$ above $y$",
    }
    for text, slide in cases.items():
        assert slides._unanchor(text, cells, 1) == slide, text
        assert not NOTEBOOK_PLACE.search(slides._unanchor(text, cells, 1)), text


def test_sentences_never_cut_a_formula():
    para = "The loss is $a. B$ here. Then it is 3.5 times (see $x$). Done."
    assert slides.sentences(para) == [
        "The loss is $a. B$ here.",
        "Then it is 3.5 times (see $x$).",
        "Done.",
    ]
    para = "As Vaswani et al. (2017) do. Its Eqs. (16)–(18) give"
    assert slides.sentences(para) == ["As Vaswani et al. (2017) do.", para[29:]]


def test_a_figure_reaches_the_deck_as_its_markdown_image_would():
    """``slides.export`` hands the Markdown parser a short name for each figure's PNG
    and puts the data back in the ``src`` it wrote: the deck is the page nbconvert
    makes from the Markdown image itself, byte for byte."""
    import nbformat

    png = (  # one pixel
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
        "AAAABJRU5ErkJggg=="
    )
    cells = [
        {
            "cell_type": "markdown",
            "metadata": {"slideshow": {"slide_type": "slide"}},
            "source": f"### A figure\n\n![a tiny plot](data:image/png;base64,{png})"
            f"\n\nand a second: ![b](data:image/png;base64,{png[::-1]}=)\n",
        }
    ]
    nb = {
        "cells": cells,
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    held = slides.export(nb)
    exporter = slides._exporter.__wrapped__()  # a fresh one, as before the change
    node = nbformat.from_dict(nb)
    node.cells[0].setdefault("id", "c0")
    plain, _ = exporter.from_notebook_node(node, resources={"metadata": {"name": ""}})
    assert held == plain
    assert held.count(f'src="data:image/png;base64,{png}"') == 1
    assert "posenc-figure" not in held


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """Every session's slide notebook, made without executed notebooks."""
    bib = slides.colab_edition.load_bib()
    missing = tmp_path_factory.mktemp("no-build")
    return {
        s.slug: slides.deck_notebook(s, missing, bib, allow_missing=True)
        for s in SESSIONS
    }


def _slides(nb: dict) -> list[str]:
    return [
        c["source"]
        for c in nb["cells"]
        if c["metadata"]["slideshow"]["slide_type"] in ("slide", "subslide")
    ]


def test_the_decks_are_made_from_the_chapters_without_a_build(decks):
    """With no executed notebooks (``--allow-missing``): every chapter's title is in
    its session's deck, no MyST is left, and nbconvert makes a deck that loads
    nothing from the network and that the right arrow walks in order (reveal.js's
    linear navigation)."""
    for session in SESSIONS:
        nb, stats = decks[session.slug]
        text = _deck_text(nb)
        for entry in session.chapters:
            assert chapter_info(entry)["title"] in stats["chapters"].values()
            assert f"../{entry}.html" in text, f"{session.slug} lacks {entry}"
        assert not MYST.search(text), MYST.search(text).group(0)
        kinds = {c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]}
        assert kinds <= {"slide", "subslide", "notes"}
    html = slides.export(nb)
    assert "<section" in html and 'class="notes"' in html
    sources = re.findall(r"""(?:src|href)=["']([^"'#]+)""", html)
    assert not [s for s in sources if re.match(r"(https?:)?//", s)], sources
    assert re.search(r"navigationMode:\s*[\"']linear[\"']", html), "not linear"


def test_no_slide_points_at_a_cell_it_does_not_show(decks):
    """Slides are read without the notebook: none says "the check above", "the cell
    below", "as printed above" (the speaker notes name the cells)."""
    for slug, (nb, _) in decks.items():
        for source in _slides(nb):
            found = NOTEBOOK_PLACE.search(source)
            assert not found, f"{slug}: {found.group(0)!r} in {source[:300]}"


def test_every_formula_on_a_slide_follows_its_lead_in(decks):
    """A display formula (or a run of them) comes after a sentence of prose, the
    chapter's sentence that introduces it, never straight after a heading."""
    total = 0
    for slug, (nb, _) in decks.items():
        for source in _slides(nb):
            flat = re.sub(
                r"\$\$.*?\$\$",
                lambda m: m.group(0).replace("\n", " "),
                source,
                flags=re.S,
            )
            blocks = [b.strip() for b in re.split(r"\n\s*\n", flat) if b.strip()]
            for k, block in enumerate(blocks):
                if not block.startswith("$$"):
                    continue
                total += 1
                j = k - 1
                while j >= 0 and blocks[j].startswith("$$"):
                    j -= 1
                lead = blocks[j] if j >= 0 else ""
                assert lead and not lead.startswith(("#", ">", "|")), (
                    f"{slug}: a formula without its lead-in: {block[:100]}"
                )
    assert total > 100, total


# ---- the built decks (after the site build) -----------------------------------------


@pytest.fixture(scope="module")
def built():
    folder = HTML / "slides"
    if not (folder / f"{SESSIONS[-1].slug}.html").exists():
        _unavailable(f"no slides in {folder}; run `make site` first")
    return folder


@pytest.mark.browser
def test_each_built_deck_has_its_chapters_figures_and_numbers(built):
    with zipfile.ZipFile(built / slides.ZIP) as archive:
        names = set(archive.namelist())
        notebooks = {
            s.slug: json.loads(archive.read(f"posenc-slides/{s.slug}.ipynb"))
            for s in SESSIONS
        }
    for session in SESSIONS:
        nb = notebooks[session.slug]
        text = _deck_text(nb)
        html = (built / f"{session.slug}.html").read_text()
        for entry in session.chapters:
            title = chapter_info(entry)["title"]
            assert f"{title}](../{entry}.html)" in text, f"{session.slug}: {entry}"
        assert "data:image/png;base64," in html, f"{session.slug} has no figure"
        assert MISSING not in text, f"{session.slug} lacks a glued value"
        assert not MYST.search(text), MYST.search(text).group(0)
        quoting = [
            e
            for e in session.chapters
            if any(
                slides.GLUE_ROLE.search(s)
                for c in slides._cells(e)
                if c["cell_type"] == "markdown"
                for s in ["".join(c["source"])]
            )
        ]
        if quoting:  # the chapters quote measured numbers: the deck shows them
            assert "### Measured:" in text, f"{session.slug} shows no numbers"
    for session in SESSIONS:
        assert f"posenc-slides/{session.slug}.html" in names
    for asset in (
        "reveal.js/dist/reveal.js",
        "reveal.js/plugin/notes/notes.js",
        "mathjax/tex-chtml-full.js",
        "README.md",
    ):
        assert f"posenc-slides/{asset}" in names, asset


STEP_THROUGH = """async () => {
  const problems = [];
  const total = Reveal.getTotalSlides();
  Reveal.slide(0, 0);
  for (let k = 0; k < total; k++) {
    const slide = Reveal.getCurrentSlide();
    for (const img of slide.querySelectorAll("img")) {
      if (!img.complete) await img.decode().catch(() => {});
      if (!(img.naturalWidth > 0)) problems.push(`slide ${k + 1}: a figure is missing`);
    }
    const text = slide.cloneNode(true);
    text.querySelectorAll("mjx-container, code, pre, aside, script")
      .forEach((e) => e.remove());
    if (text.textContent.includes("$"))
      problems.push(`slide ${k + 1}: raw $ in ${text.textContent.slice(0, 120)}`);
    if (slide.querySelector("mjx-merror"))
      problems.push(`slide ${k + 1}: a TeX error`);
    if (k < total - 1) Reveal.next();
  }
  return {
    problems,
    total,
    last: Reveal.isLastSlide(),
    maths: document.querySelectorAll(".slides mjx-container").length,
  };
}"""


# every slide of the deck, in document order: (column, place in its column)
ORDER = """() => [...document.querySelectorAll(".reveal .slides > section")].flatMap(
  (column, h) => {
    const stack = column.querySelectorAll(":scope > section");
    return stack.length ? [...stack].map((_, v) => [h, v]) : [[h, 0]];
  })"""
HERE = "() => { const i = Reveal.getIndices(); return [i.h, i.v || 0]; }"


def walk_with_the_right_arrow(page) -> tuple[list, list]:
    """The deck's slides in document order, and the slides the right arrow shows
    from the first one (one more press than there are slides: the last stays)."""
    order = page.evaluate(ORDER)
    page.evaluate("() => Reveal.slide(0, 0)")
    seen = [page.evaluate(HERE)]
    for _ in order:
        page.keyboard.press("ArrowRight")
        seen.append(page.evaluate(HERE))
    return order, seen


@pytest.mark.browser
@pytest.mark.parametrize("slug", [s.slug for s in SESSIONS])
def test_every_slide_of_the_deck_shows_in_a_browser(open_page, built, slug):
    errors = []

    def listen(page):  # from the deck's first line
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))

    page = open_page(f"slides/{slug}.html", before_load=listen)
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=15000)
    page.evaluate("() => MathJax.startup.promise")
    result = page.evaluate(STEP_THROUGH)
    assert result["total"] > len(
        slides.sessions()[int(slug.split("-")[1]) - 1].chapters
    )
    assert result["last"], f"{slug}: stepping stopped before the last slide"
    assert result["maths"] > 0, f"{slug}: no typeset maths"
    assert not result["problems"], "\n".join(result["problems"][:10])
    assert not errors, errors
    assert not open_page.blocked, open_page.blocked


@pytest.mark.browser
def test_the_right_arrow_walks_every_slide_in_order(open_page, built):
    """A teacher's right arrow (or a remote's button, Page Down) shows every slide of
    the deck in order, down each chapter's column and on to the next chapter, and
    stops at the last. Every deck has the same template (checked without a browser
    above); this walks the first, whose chapters are columns of several slides."""
    page = open_page(f"slides/{SESSIONS[0].slug}.html")
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=15000)
    order, seen = walk_with_the_right_arrow(page)
    columns = {h for h, _ in order}
    assert len(columns) > 2 and len(order) > len(columns), order  # both directions
    assert page.evaluate("() => Reveal.getTotalSlides()") == len(order)
    assert seen == order + [order[-1]], f"the right arrow showed {seen}"
    assert not open_page.blocked, open_page.blocked


@pytest.mark.browser
def test_the_guide_links_every_deck(open_page, built):
    page = open_page("book/teaching/guide.html")
    hrefs = page.eval_on_selector_all(
        "a[href*='slides/']", "els => els.map(e => e.href)"
    )
    for session in SESSIONS:
        assert any(h.endswith(f"slides/{session.slug}.html") for h in hrefs), hrefs
    assert any(h.endswith(f"slides/{slides.ZIP}") for h in hrefs)
    zips = page.eval_on_selector_all(
        "a[href*='student/']", "els => els.map(e => e.href)"
    )
    for session in SESSIONS:
        name = session_bundles.zip_name(session.number)
        assert any(h.endswith(f"student/{name}") for h in zips), zips
    assert not open_page.blocked, open_page.blocked

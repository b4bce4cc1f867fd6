"""The teaching guide's slides (tools/build/slides.py): every chapter in exactly one
session's deck, the guide's generated facts up to date, the decks made from the
chapters (titles, figures, this build's numbers, no MyST left), and, in Chromium,
every slide of every deck with its maths typeset, its figures loaded, no console
error and no request leaving the machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import pytest

from tests.browser import HTML, _unavailable
from tools.build import slides
from tools.build.colab_edition import MISSING
from tools.build.course_index import chapter_info
from tools.toc import numbered_chapters

SESSIONS = slides.sessions()
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
    assert 'href="../../slides/posenc-slides.zip"' in guide


def test_reading_time_counts_the_prose():
    entry = SESSIONS[0].chapters[0]
    words = slides.word_count(entry)
    assert 300 < words < 20000
    text = slides.sections(entry)
    assert text[0]["cells"], "the chapter's first cells belong to no section"


def test_sentences_never_cut_a_formula():
    para = "The loss is $a. B$ here. Then it is 3.5 times (see $x$). Done."
    assert slides.sentences(para) == [
        "The loss is $a. B$ here.",
        "Then it is 3.5 times (see $x$).",
        "Done.",
    ]


def test_the_decks_are_made_from_the_chapters_without_a_build(tmp_path):
    """With no executed notebooks (``--allow-missing``): every chapter's title is in
    its session's deck, no MyST is left, and nbconvert makes a deck that loads
    nothing from the network."""
    bib = slides.colab_edition.load_bib()
    for session in SESSIONS:
        nb, stats = slides.deck_notebook(session, tmp_path, bib, allow_missing=True)
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


@pytest.mark.browser
@pytest.mark.parametrize("slug", [s.slug for s in SESSIONS])
def test_every_slide_of_the_deck_shows_in_a_browser(open_page, built, slug):
    page = open_page(f"slides/{slug}.html")
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.reload(wait_until="load")  # with the listeners attached from the start
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
def test_the_guide_links_every_deck(open_page, built):
    page = open_page("book/teaching/guide.html")
    hrefs = page.eval_on_selector_all(
        "a[href*='slides/']", "els => els.map(e => e.href)"
    )
    for session in SESSIONS:
        assert any(h.endswith(f"slides/{session.slug}.html") for h in hrefs), hrefs
    assert any(h.endswith(f"slides/{slides.ZIP}") for h in hrefs)
    assert not open_page.blocked, open_page.blocked

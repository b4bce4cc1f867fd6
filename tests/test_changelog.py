"""The course's own history lives on the changelog page (book/appendix/changelog.md),
not in the lessons: no lesson page narrates an older text of the course, and the
changelog is in the appendix and names chapters that exist."""

from __future__ import annotations

import json
import re

from tools import toc

HISTORY = re.compile(
    r"\b(?:earlier|previous|prior|older|this|first|last) editions?\b"
    r"|\b(?:earlier|previous|prior|older) versions? of (?:this|the) "
    r"(?:chapter|paragraph|section|page|book|course)\b"
    r"|\bthis (?:chapter|paragraph|section|page) used to\b",
    re.I,
)
CHANGELOG = "book/appendix/changelog"


def _text(entry: str) -> str:
    """A page's Markdown and code as the reader meets them (a notebook's cells)."""
    for suffix in (".ipynb", ".md"):
        path = toc.ROOT / (entry + suffix)
        if path.exists():
            break
    if path.suffix == ".md":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells)


def test_no_lesson_page_narrates_the_course_history():
    lessons = [e for e in toc.entries() if not e.startswith("book/appendix/")]
    assert len(lessons) > 30
    found = [
        f"{entry}: ...{text[max(0, m.start() - 60) : m.end() + 20]}..."
        for entry in lessons
        for text in [_text(entry)]
        for m in HISTORY.finditer(text)
    ]
    assert not found, "move the course's own history to the changelog:\n" + "\n".join(
        found
    )


def test_the_history_check_has_teeth():
    for said in (
        "The earlier edition of this chapter made two claims",
        "Earlier versions of this chapter listed V-JEPA 2",
        "An earlier version of this paragraph said",
        "as this chapter used to say",
        "none is committed with this edition yet",
    ):
        assert HISTORY.search(said), said
    for fine in ("the student edition", "the Colab edition", "an earlier chunk"):
        assert not HISTORY.search(fine), fine


def test_the_changelog_is_in_the_appendix_and_names_existing_chapters():
    book = toc.load()
    appendix = [p for p in book.parts if CHANGELOG in p.entries]
    assert appendix, "the changelog is not in _toc.yml"
    assert all(e.startswith("book/appendix/") for e in appendix[0].entries)
    text = (toc.ROOT / f"{CHANGELOG}.md").read_text()
    linked = re.findall(r"\]\(\.\./(part\d/\w+)\.ipynb\)", text)
    assert linked
    notebooks = set(toc.notebook_entries())
    assert {f"book/{page}" for page in linked} <= notebooks, linked
    assert "{doc}`appendix/changelog`" in (toc.ROOT / "book" / "intro.md").read_text()

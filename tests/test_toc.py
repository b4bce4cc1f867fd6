"""tools/toc.py: the one reader of ``_toc.yml``, and that it is the only one."""

from __future__ import annotations

import pathlib
import re

import pytest

from tools import toc

ROOT = pathlib.Path(__file__).resolve().parents[1]

TEXT = """\
# a comment the parser ignores
format: jb-book
root: book/intro
parts:
  - caption: "Part 0 — First"
    numbered: true
    chapters:
      - file: book/part0/a
      - file: book/part0/b
        sections:
          - file: book/part0/b_more
  - caption: Appendix
    chapters:
      - file: book/appendix/notes
  - caption: "Part I — Second"
    numbered: true
    chapters:
      - file: book/part1/c.md
      - file: book/part1/d
"""


def test_parts_entries_and_numbers(tmp_path):
    for entry in ["book/part0/a", "book/part0/b", "book/part0/b_more", "book/part1/d"]:
        (tmp_path / f"{entry}.ipynb").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{entry}.ipynb").write_text("{}")
    for entry in ["book/intro", "book/appendix/notes", "book/part1/c"]:
        (tmp_path / f"{entry}.md").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{entry}.md").write_text("# page\n")
    (tmp_path / "_toc.yml").write_text(TEXT)
    book = toc.load(tmp_path / "_toc.yml")
    assert book.root == "book/intro"
    assert [(p.caption, p.numbered) for p in book.parts] == [
        ("Part 0 — First", True),
        ("Appendix", False),
        ("Part I — Second", True),
    ]
    assert book.parts[0].chapters == ("book/part0/a", "book/part0/b")
    assert book.parts[0].entries == (
        "book/part0/a",
        "book/part0/b",
        "book/part0/b_more",
    )
    assert book.entries()[0] == "book/intro" and "book/part1/c" in book.entries()
    assert book.notebook_entries() == [
        "book/part0/a",
        "book/part0/b",
        "book/part0/b_more",
        "book/part1/d",
    ]
    # numbered as the site numbers them: top-level pages of the numbered parts,
    # counted across parts (the Markdown chapter takes number 3, sections none)
    assert [(c.number, c.entry) for c in book.chapters()] == [
        (1, "book/part0/a"),
        (2, "book/part0/b"),
        (4, "book/part1/d"),
    ]
    assert book.path("book/part1/c") == tmp_path / "book/part1/c.md"
    assert book.part_of("book/part0/b_more").caption == "Part 0 — First"


def test_a_table_of_contents_it_cannot_read_is_refused():
    with pytest.raises(toc.TocError, match="no root"):
        toc.parse("format: jb-book\nparts: []\n")
    with pytest.raises(toc.TocError, match="without file"):
        toc.parse("format: jb-book\nroot: x\nparts:\n  - chapters:\n    - title: y\n")


def test_the_book_is_numbered_as_the_site_shows_it():
    chapters = toc.chapters()
    assert [c.number for c in chapters] == list(range(1, len(chapters) + 1))
    assert toc.chapter_numbers()["book/part3/rope"] == 14  # "Exercise 14.2"
    assert toc.root_page() == "book/intro"
    assert all(p.exists() for p in toc.notebooks())


# Who may read _toc.yml's text: the reader itself; the site build hashes its bytes
# (the execution cache's key); pages.py copies it to add a "Preview" part;
# new_chapter.py edits its text (keeping its comments).
ALLOWED = {
    "tools/toc.py",
    "tools/build/site.py",
    "tools/build/pages.py",
    "tools/authoring/new_chapter.py",
}
READS = re.compile(r"_toc\.yml\"?\)?\.read_text|\(\?:file\|root\)|- file:\\s")


def test_no_tool_or_test_reads_the_toc_by_itself():
    found = []
    for path in [*(ROOT / "tools").rglob("*.py"), *(ROOT / "tests").glob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED or rel == "tests/test_toc.py":
            continue
        if READS.search(path.read_text()):
            found.append(rel)
    assert not found, f"read _toc.yml with tools.toc, not by hand: {found}"

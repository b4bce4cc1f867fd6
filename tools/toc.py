"""The book's table of contents, ``_toc.yml``, read once for every tool.

    python -m tools.toc            # the chapters: number, entry, part
    python -m tools.toc --list     # the notebooks of _toc.yml, one a line

``_toc.yml`` (Jupyter Book's ``jb-book`` format) says which pages the site has, in
which order, and how they are numbered. Every tool that needs the chapters (the
generated pages, the student and Colab editions, the slides, the PDF, the run times,
the tests) asks this module, which parses the file with PyYAML, instead of reading
lines with a regular expression of its own.

Words used here:

* an **entry** is a page as ``_toc.yml`` names it: its path from the repository root
  without the suffix (``book/part3/rope``); ``path(entry)`` is its file;
* a **part** is one item of ``parts``: its ``caption``, whether it is ``numbered``,
  and its ``chapters`` (nested ``sections`` are entries of the part too);
* a **chapter** is a notebook of a numbered part; its **number** is the one the site
  shows ("Exercise 14.2" is the second exercise of chapter 14): the rank of the
  chapter among the top-level pages of the numbered parts, counted across parts
  (``use_multitoc_numbering`` in ``_config.yml``).

Each call reads the file as it is now (it is small), so a tool that edits
``_toc.yml`` (``tools/authoring/new_chapter.py``) reads its own edit back.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOC = ROOT / "_toc.yml"


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the book: its caption, whether its chapters are numbered, and its
    entries in order (``book/part3/rope``)."""

    caption: str
    numbered: bool
    chapters: tuple[str, ...]  # its top-level entries
    entries: tuple[str, ...]  # the same with their nested sections, in order


@dataclasses.dataclass(frozen=True)
class Chapter:
    """A notebook of a numbered part, with the number the site gives it."""

    number: int
    entry: str
    part: str  # the caption of its part


@dataclasses.dataclass(frozen=True)
class Toc:
    """``_toc.yml`` parsed: the root page and the parts."""

    root: str
    parts: tuple[Part, ...]
    base: pathlib.Path  # the repository root the entries are relative to

    def path(self, entry: str) -> pathlib.Path:
        """The file of ``entry``: its notebook if there is one, else its Markdown
        page (the notebook's path when neither exists)."""
        for suffix in (".ipynb", ".md"):
            if (self.base / f"{entry}{suffix}").exists():
                return self.base / f"{entry}{suffix}"
        return self.base / f"{entry}.ipynb"

    def is_notebook(self, entry: str) -> bool:
        return (self.base / f"{entry}.ipynb").exists()

    def entries(self) -> list[str]:
        """Every page in reading order, the root first."""
        return [self.root] + [e for part in self.parts for e in part.entries]

    def notebook_entries(self) -> list[str]:
        """The entries that are notebooks, in reading order."""
        return [e for e in self.entries() if self.is_notebook(e)]

    def notebooks(self) -> list[pathlib.Path]:
        """The notebook files, in reading order."""
        return [self.base / f"{e}.ipynb" for e in self.notebook_entries()]

    def chapters(self) -> list[Chapter]:
        """The notebooks of the numbered parts, with their numbers on the site."""
        out, number = [], 0
        for part in self.parts:
            if not part.numbered:
                continue
            for entry in part.chapters:
                number += 1
                if self.is_notebook(entry):
                    out.append(Chapter(number, entry, part.caption))
        return out

    def part_of(self, entry: str) -> Part:
        for part in self.parts:
            if entry in part.entries:
                return part
        raise KeyError(f"{entry} is in no part of _toc.yml")


class TocError(ValueError):
    """``_toc.yml`` is not a table of contents these tools can read."""


def _entries(items: list, where: str, nested: bool) -> list[str]:
    """The ``file`` entries of a list of chapters; with ``nested``, each followed by
    its ``sections``."""
    out = []
    for item in items or []:
        if not isinstance(item, dict):
            raise TocError(f"_toc.yml: {where} has an entry that is not a mapping")
        if "file" in item:
            out.append(str(item["file"]).removesuffix(".ipynb").removesuffix(".md"))
        elif "glob" not in item and "url" not in item:  # those name no page of ours
            raise TocError(f"_toc.yml: {where} has an entry without file: {item}")
        if nested:
            out += _entries(item.get("sections"), where, nested)
    return out


def parse(text: str, base: pathlib.Path = ROOT) -> Toc:
    """The table of contents in ``text`` (the contents of a ``_toc.yml``)."""
    return _parse(text, pathlib.Path(base))


@functools.lru_cache(maxsize=8)
def _parse(text: str, base: pathlib.Path) -> Toc:
    # kept for the same text and folder (a Toc is immutable): the tools and tests
    # ask for the table hundreds of times a run, 35 ms of YAML each
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or "root" not in data:
        raise TocError("_toc.yml has no root: page")
    if data.get("format") != "jb-book":
        raise TocError(f"_toc.yml: format {data.get('format')!r}, expected jb-book")
    parts = []
    for k, part in enumerate(data.get("parts") or [], start=1):
        caption = str(part.get("caption", f"part {k}"))
        items, where = part.get("chapters"), f"part {caption!r}"
        parts.append(
            Part(
                caption,
                bool(part.get("numbered", False)),
                tuple(_entries(items, where, nested=False)),
                tuple(_entries(items, where, nested=True)),
            )
        )
    return Toc(str(data["root"]), tuple(parts), base)


def load(path: pathlib.Path | None = None) -> Toc:
    """``_toc.yml`` as it is now (``path``: another copy of it, whose entries are
    relative to its folder)."""
    path = TOC if path is None else pathlib.Path(path)
    return parse(path.read_text(), path.resolve().parent)


# ---- what the tools ask for ---------------------------------------------------------


def root_page() -> str:
    """The root page's entry (``book/intro``)."""
    return load().root


def entries() -> list[str]:
    """Every page of the book in reading order, the root first."""
    return load().entries()


def notebook_entries() -> list[str]:
    """The notebooks of the book as entries (``book/part3/rope``), in order."""
    return load().notebook_entries()


def notebooks() -> list[pathlib.Path]:
    """The notebooks of the book as files, in order."""
    return load().notebooks()


def chapters() -> list[Chapter]:
    """The numbered chapters (notebooks of numbered parts) with their numbers."""
    return load().chapters()


def numbered_chapters() -> list[tuple[str, str]]:
    """(part caption, entry) for every numbered chapter, in order."""
    return [(c.part, c.entry) for c in chapters()]


def chapter_numbers() -> dict[str, int]:
    """entry -> the chapter's number on the site (``book/part3/rope``: 14)."""
    return {c.entry: c.number for c in chapters()}


def parts() -> tuple[Part, ...]:
    return load().parts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--list" in argv:
        print("\n".join(p.relative_to(ROOT).as_posix() for p in notebooks()))
        return 0
    for c in chapters():
        print(f"{c.number:3d}  {c.entry:36s}  {c.part}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

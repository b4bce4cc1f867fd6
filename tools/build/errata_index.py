"""The errata index: every erratum admonition of the book, collected from the
notebooks of ``_toc.yml`` (never by hand).

    python -m tools.build.errata_index           # (re)write book/appendix/errata.md
    python -m tools.build.errata_index --check   # exit 1 when the page is out of date

An erratum is an admonition whose title starts with "Erratum":

    ```{admonition} Erratum: what the source says
    :class: warning
    ... the correction and the check ...
    ```

The page lists each one with a link back to its chapter (and the section it sits in) and
what it corrects: the works it cites, and the source deck when it speaks of "the deck"
or "the slides". ``tools/build/site.py`` regenerates the page before every build and
``tests/test_errata_index.py`` fails when a chapter's erratum is missing from it.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

from tools import toc
from tools.build import generated_page

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "book" / "appendix" / "errata.md"
ADMONITION = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{admonition\}\s*(?P<title>Erratum[^\n]*)\n"
    r"(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
CITE = re.compile(r"\{footcite[^}]*\}`([^`]*)`")
HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*$", re.M)
DECK = re.compile(r"\b(deck|slides?)\b", re.I)
NOTES = ROOT / "tools" / "build" / "source_notes_errata.md"


def collect() -> list[dict[str, str]]:
    """One row per erratum, in book order: chapter, section, title, sources."""
    rows = []
    for entry in toc.notebook_entries():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        chapter, section = entry, ""
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            # Walk the headings and admonitions of the cell in order.
            marks = [(m.start(), "h", m) for m in HEADING.finditer(text)]
            marks += [(m.start(), "e", m) for m in ADMONITION.finditer(text)]
            for _, kind, m in sorted(marks, key=lambda t: t[0]):
                if kind == "h":
                    if len(m.group(1)) == 1:
                        chapter = m.group(2)
                    else:
                        section = m.group(2)
                    continue
                body = m.group("body")
                # what the box corrects: the deck when the box, or the paragraph that
                # introduces it, quotes the deck or the slides
                before = text[: m.start()].strip().split("\n\n")[-1]
                deck = any(DECK.search(t) for t in (body, m.group("title"), before))
                cited = [k.strip() for c in CITE.findall(body) for k in c.split(",")]
                cited = [k for k in dict.fromkeys(cited) if k and k != "curtis2025deck"]
                rows.append(
                    dict(
                        entry=entry,
                        chapter=chapter,
                        section=section,
                        title=m.group("title").split(":", 1)[-1].strip()
                        or m.group("title"),
                        deck=deck,
                        cited=", ".join(cited),
                    )
                )
    return rows


def source_notes() -> list[dict[str, str]]:
    """The corrections of the course's own source notes, in book order: entry,
    chapter (its title), title and body, from ``NOTES``."""
    titles = {}
    for entry in toc.notebook_entries():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        for cell in nb["cells"]:
            m = re.search(r"^# (.+)$", "".join(cell["source"]), re.M)
            if cell["cell_type"] == "markdown" and m:
                titles[entry] = m.group(1).strip()
                break
    rows, entry = [], None
    text = NOTES.read_text() if NOTES.exists() else ""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    for block in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        head, _, body = block.partition("\n")
        if head.startswith("## "):
            entry = head[3:].strip()
            if entry not in titles:
                raise ValueError(
                    f"{NOTES.name}: {entry!r} is not a chapter of _toc.yml"
                )
        elif head.startswith("### "):
            if entry is None:
                raise ValueError(f"{NOTES.name}: {head!r} comes before any chapter")
            if "\n- " in "\n" + body or "{glue" in body:
                raise ValueError(f"{NOTES.name}: {head!r}: no list items and no glue")
            rows.append(
                dict(entry=entry, chapter=titles[entry], title=head[4:].strip(),
                     body=body.strip())
            )  # fmt: skip
    order = {e: k for k, e in enumerate(titles)}
    return sorted(rows, key=lambda r: order[r["entry"]])


def render_notes(notes: list[dict[str, str]]) -> list[str]:
    if not notes:
        return []
    lines = [
        "",
        "(source-notes-errata)=",
        "## Corrections of the course's source notes",
        "",
        "The course was written from source notes: the slide deck "
        "{footcite:p}`curtis2025deck` and unpublished notes beside it. Where they are "
        "wrong, the chapters teach the correct form and check it in code, without "
        "repeating the mistake; what the notes said, and why it is wrong, is kept "
        "here, with a link to the chapter whose code checks it.",
    ]
    current = None
    for note in notes:
        if note["entry"] != current:
            current = note["entry"]
            link = f"../{note['entry'].removeprefix('book/')}.ipynb"
            lines += ["", f"### [{note['chapter']}]({link})"]
        lines += ["", f"**{note['title']}.** {note['body']}"]
    return lines


def render(rows: list[dict[str, str]], corrections: list[dict[str, str]] = ()) -> str:
    lines = [
        "# Errata index",
        "",
        "Every erratum in the book, in reading order, generated from the chapters by "
        "`tools/build/errata_index.py` each time the site is built (a test fails when "
        "one is missing). Each chapter's box quotes what a source says, corrects it "
        "and shows the check in code. *Corrects the deck* marks the boxes that correct "
        "the source deck {footcite:p}`curtis2025deck` (the box or the paragraph before "
        "it quotes it); *evidence* lists the works the box cites for its check.",
        "",
        f"The book has **{len(rows)} errata** in "
        f"**{len({r['entry'] for r in rows})} chapters**"
        + (
            f", and **{len(corrections)} corrections of the course's source notes** "
            "({ref}`below <source-notes-errata>`)."
            if corrections
            else "."
        ),
        "",
    ]
    current = None
    for row in rows:
        if row["entry"] != current:
            current = row["entry"]
            link = f"../{row['entry'].removeprefix('book/')}.ipynb"
            lines += ["", f"## [{row['chapter']}]({link})", ""]
        keys = row["cited"].split(", ") if row["cited"] else []
        notes = (["corrects the deck"] if row["deck"] else []) + (
            ["evidence: " + ", ".join(f"{{footcite:t}}`{k}`" for k in keys)]
            if keys
            else []
        )
        section = f" (section *{row['section']}*)" if row["section"] else ""
        tail = "; " + "; ".join(notes) if notes else ""
        lines.append(f"- {row['title']}{section}{tail}")
    lines += render_notes(list(corrections))
    lines += ["", "## References", "", "```{footbibliography}", "```"]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    return generated_page.main(
        PAGE, lambda: render(collect(), source_notes()), "errata_index"
    )


if __name__ == "__main__":
    sys.exit(main())

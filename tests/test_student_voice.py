"""Every lesson page speaks to the student, not to the book's authors.

The words that give author-facing text away, in what a reader sees of a chapter (its
Markdown, and the code and comments of every cell the site shows):

* the authors' task and notes: "this chapter's brief", "the seed's" (the course's
  source notes were called seeds; a student who has just met random seeds reads the
  word as one), corrections of the course's own source notes ("the slide deck", "the
  source deck", "the short notes", "one of the course's sources", "a source writes"):
  those go to the errata appendix (``tools/build/source_notes_errata.md``), never on a
  lesson page;
* the seed sweeps' bookkeeping: which shifts, "each on seeds of its own", the CSV's
  path. The prose says "held in N of M independent runs" and links the appendix that
  explains the runs once (``book/appendix/datasets.md``, *Seeds and independent
  runs*);
* ``pl.book.glue(...)`` and ``sweep.glue()`` calls in a cell the reader sees: glue
  calls go in a hidden cell (tagged ``remove-cell``) after the cell that computes the
  values.

A cell tagged ``remove-cell``, ``remove-input`` or ``hide-input`` is not read (the
site does not show its code).
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from tools.build import student_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRIES = student_edition.toc_notebooks()
HIDDEN = {"remove-cell", "remove-input", "hide-input"}

# (what gives it away, pattern), read in Markdown and in shown code alike
WORDS = [
    ("the chapter's brief", r"\bbrief\b"),
    ("the source notes' name", r"\bseed's\b"),
    ("a correction of the source notes", r"\bslide deck\b|\bsource deck\b"),
    ("a correction of the source notes", r"\bshort notes\b|\bsource notes\b"),
    ("a correction of the source notes", r"\bcourse's sources?\b"),
    ("a correction of the source notes", r"\ba source (writes|says|describes|works)\b"),
    ("a correction of the source notes", r"\bthe source's\b|\bagainst the source\b"),
    ("sweep bookkeeping", r"\b(seeds?|seed pairs?) of its own\b|\bits own seeds\b"),
    ("sweep bookkeeping", r"\bshifts? \d+|_sweep_shifts\b|\bsweep\.shifts\b"),
    ("sweep bookkeeping", r"posenc_lib/data/sweeps/"),
]
# "the deck": the slide deck the course grew from, cited as curtis2025deck. A lesson
# page cites it as "the lectures this course grew from"; its corrections are kept in
# tools/build/source_notes_errata.md.
DECK = (
    "a correction of the slide deck",
    r"\b(the|its|same) deck\b|\bdeck's\b|\bthe slides?\b",
)
# only in code the reader sees
GLUE = ("a glue call shown to the reader", r"\bpl\.book\.glue\(|\bsweep\.glue\(")


def hits(nb: dict, words=WORDS) -> list[str]:
    """Every author-facing word of a notebook, as 'cell N: what: the text'."""
    out = []
    for k, cell in enumerate(nb["cells"]):
        if HIDDEN & set(cell["metadata"].get("tags", [])):
            continue
        text = "".join(cell["source"])
        rules = words + ([GLUE] if cell["cell_type"] == "code" else [])
        for what, pattern in rules:
            for m in re.finditer(pattern, text, re.I):
                around = text[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")
                out.append(f"cell {k} ({cell.get('id')}): {what}: ...{around}...")
    return out


@pytest.mark.parametrize("entry", ENTRIES)
def test_no_author_facing_text_on_a_lesson_page(entry):
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    found = hits(nb)
    assert not found, f"{entry}: author-facing text:\n" + "\n".join(found)


@pytest.mark.parametrize("entry", ENTRIES)
def test_no_correction_of_the_slide_deck_on_a_lesson_page(entry):
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    found = [h for h in hits(nb, [DECK]) if "slide deck" in h]
    assert not found, f"{entry}: the slide deck on the page:\n" + "\n".join(found)


def test_the_words_are_caught():
    """The rules catch what they are for, and leave a student's words alone."""

    def cell(kind, text, tags=()):
        return {"cell_type": kind, "source": [text], "metadata": {"tags": list(tags)}}

    caught = [
        cell("markdown", "This chapter's brief asked to show it."),
        cell("code", "x = 1  # the seed's result"),
        cell("markdown", "The slide deck says RoPE scales tokens."),
        cell("markdown", "One of the course's sources writes it unscaled."),
        cell(
            "markdown",
            "Over shifts {glue:text}`x_sweep_shifts`, each on seeds of its own",
        ),
        # as they stood on the PaTH and RoPE pages when this test was written
        cell(
            "markdown",
            "```{admonition} Erratum: the prefix inverse fails near $\\beta = 1$\n"
            ":class: warning\nThis chapter's brief asked to show \"the inverse blowing "
            'up numerically for $\\beta$ near 2".',
        ),
        cell(
            "code",
            "assert (q.grad - Rm @ upstream).abs().max() > 0.1  # the seed's R_m g",
        ),
        cell("markdown", "A source writes $\\partial L / \\partial Q$ and adds that"),
        cell("code", 'pl.book.glue("path_acc_min", path_min)'),
        cell("code", "pl.book.glue('x', 1.0)"),
        cell("code", 'print(f"passed (shifts {sweep.shifts})")'),
    ]
    for c in caught:
        assert hits({"cells": [c]}), c["source"]
    kept = [
        cell("markdown", "Set the seed of the generator; the source code of fla."),
        cell("markdown", "It held in 10 of 10 independent runs."),
        cell("code", "pl.book.glue('x', 1.0)", tags=["remove-cell"]),
        cell("markdown", "pl.book.glue('x', 1.0) is how a chapter quotes a number."),
    ]
    for c in kept:
        assert not hits({"cells": [c]}), c["source"]

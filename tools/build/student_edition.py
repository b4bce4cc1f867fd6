"""The student edition: every chapter notebook with the exercise solutions removed,
in the Markdown that Colab and Jupyter render, generated from the one source (never
edited by hand).

    python -m tools.build.student_edition [OUT]   # default OUT: _build/student
        [--executed DIR]   # the measured numbers: a build's _build/jupyter_execute
                           # (default: that folder, then the execution cache)
        [--allow-missing]  # no executed copy needed

writes ``OUT/<part>/<chapter>.ipynb`` for every notebook of ``_toc.yml`` and
``OUT/posenc-student-notebooks.zip`` with all of them and a README (how to run them
locally and in Colab). ``tools/build/site.py`` runs it after the build (the numbers
the prose quotes come from that build's executed notebooks) into the site,
``_build/html/student/``; the teaching guide links the zip.

Its Markdown goes through the Colab edition's converter
(``tools/build/colab_edition.py``): exercises numbered as on the site ("**Exercise
14.2.**"), boxes as block quotes, citations and the reference list written out, figure
captions, and every ``{glue:text}`` replaced by the value the build measured, so no
MyST is left. A link to another chapter stays relative: it opens that chapter's
student notebook, beside it in the zip.

What is removed, by nbconvert's ``TagRemovePreprocessor`` (cells by tag):

* ``solution``: every cell of a solution (stored in sphinx-exercise's gated form,
  ``{solution-start}`` … ``{solution-end}``, in cells of its own: the prose and, for a
  coding exercise, its code; see tools/authoring/exercise_cells.py);
* ``solution-check``: the hidden code cells (also tagged ``remove-cell``, so the site
  hides them too) that assert a solution's answer. ``remove-cell`` alone does not
  remove a cell here: the Colab install cell and cells that only glue values for the
  prose carry it and are needed.

What is added, before that: after each exercise, a code cell tagged ``answer`` (its
metadata ``exercise`` holds the exercise's label) to work in: for an exercise with a
registered check (``posenc_lib.exercises``) whose check cell (tagged ``check``, kept)
the chapter has, it starts from the check's ``stub``, and once the solution is gone
the check cell follows it; otherwise it holds one comment. This part is hand-written:
nbconvert's preprocessors transform or remove cells but none inserts one, and an
exercise is not a cell but a ``{exercise}`` directive inside a Markdown cell (often
several in one), so the cell is cut after each directive's closing fence.

Every other code cell is copied unchanged and in order, so a student notebook executes
as its chapter does (tests/test_student_edition.py checks that;
tests/test_student_notebooks.py runs every student notebook with the solutions and
with planted wrong answers in its answer cells).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import pathlib
import re
import sys
import zipfile

import nbformat
from nbconvert.preprocessors import TagRemovePreprocessor

from tools import toc
from tools.build import colab_edition

ROOT = pathlib.Path(__file__).resolve().parents[2]
ZIP_NAME = "posenc-student-notebooks.zip"
CHECK_TAG = "solution-check"
SOLUTION_TAG = "solution"  # every cell of a gated solution (prose and code)
ANSWER_TAG = "answer"
CHECK_CELL_TAG = "check"  # pl.exercises.check("ex-...", answer): kept
REMOVED_TAGS = {SOLUTION_TAG, CHECK_TAG}
EXERCISE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{exercise\}[^\n]*\n.*?^(?P=fence)[ \t]*\n?",
    re.M | re.S,
)
LABEL = re.compile(r"^:label:\s*(\S+)", re.M)
CHECK_CALL = re.compile(r"check\(\s*[\"'](ex-[^\"']+)")
README = """\
# Positional Encoding: Past, Present and Future: student notebooks

One notebook per chapter, without the solutions of the exercises (they are on the
course website, under each exercise). After each exercise there is a code cell for
your answer. For a coding exercise it starts from the function or value to write
(replace the `...`), and the cell after it checks your answer: it prints "right", or
"not yet" with what is wrong and on which input. Run each notebook top to bottom:
later cells use earlier ones.

## In Colab

Upload a notebook (File -> Upload notebook) and run it: its first cell installs the
course library `posenc_lib` from {url}
(it does nothing outside Colab).

## On your machine

Python 3.9 or newer:

    python -m venv .venv && . .venv/bin/activate
    pip install "posenc_lib[course] @ git+{url}@{branch}" jupyterlab
    jupyter lab

then open a notebook. Its first cell is for Colab only: elsewhere it does nothing.
"""


def toc_notebooks() -> list[str]:
    """The ``_toc.yml`` entries that are notebooks (``book/part3/rope``)."""
    return toc.notebook_entries()


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def checked_labels(nb: dict) -> set[str]:
    """The exercises whose check cell (tagged ``check``) the chapter has."""
    return {
        m.group(1)
        for cell in nb["cells"]
        if cell["cell_type"] == "code" and CHECK_CELL_TAG in tags(cell)
        for m in CHECK_CALL.finditer("".join(cell["source"]))
    }


def solution_code(nb: dict) -> dict[str, str]:
    """label -> the code of that exercise's solution (its code cells tagged
    ``solution``, between ``{solution-start} label`` and ``{solution-end}``)."""
    out, label = {}, None
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if SOLUTION_TAG not in tags(cell):
            continue
        if cell["cell_type"] == "markdown" and "{solution-start}" in text:
            label = text.split("{solution-start}", 1)[1].split()[0]
            if "{solution-end}" in text:  # a solution without code
                label = None
        elif cell["cell_type"] == "markdown" and "{solution-end}" in text:
            label = None
        elif cell["cell_type"] == "code" and label:
            out[label] = (out.get(label, "") + "\n" + text).strip("\n") + "\n"
    return out


# The checks' stubs (label -> code), kept under the library's hash (site.py): reading
# them imports every check module and torch (3.3 s of CPU), once per process that
# writes a student notebook (each of the test command's student stages) otherwise.
STUBS = ROOT / "_build" / "check_stubs.json"


@functools.cache
def check_stubs() -> dict[str, str]:
    """Each registered check's stub (``posenc_lib.exercises``), from ``STUBS`` when it
    was written from these very library sources, else read from the checks (and
    written there for the next process)."""
    from tools.build.site import library_hash  # (site imports this module)

    key = library_hash()
    try:
        kept = json.loads(STUBS.read_text())
        if kept["library"] == key:
            return kept["stubs"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from posenc_lib.exercises import all_checks

    stubs = {label: check.stub for label, check in all_checks().items()}
    try:  # whole or not at all: a process reading it meanwhile sees the old one
        STUBS.parent.mkdir(parents=True, exist_ok=True)
        part = STUBS.with_name(f"{STUBS.name}.{os.getpid()}.part")
        part.write_text(json.dumps({"library": key, "stubs": stubs}))
        os.replace(part, STUBS)
    except OSError:
        pass
    return stubs


def answer_cell(number: str, label: str | None, checked: set[str]) -> dict:
    if label in checked:
        source = f"# {number}: complete, then run the check below\n"
        source += check_stubs()[label]
    else:
        source = f"# {number}: your answer\n"
    return nbformat.v4.new_code_cell(
        source=source,
        id=f"answer-{number.split()[-1].replace('.', '-')}",
        metadata={"tags": [ANSWER_TAG], "exercise": label},
    )


def add_answer_cells(nb: dict, chapter: int | None) -> None:
    """Cut each Markdown cell after each ``{exercise}`` and put an answer cell there
    (in place). ``chapter``: the chapter's number on the site (exercises are
    "Exercise 7.2"), None for an unnumbered page."""
    prefix = f"Exercise {chapter}." if chapter else "Exercise "
    checked, cells, number = checked_labels(nb), [], 0
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        found = list(EXERCISE.finditer(text)) if cell["cell_type"] == "markdown" else []
        if not found or SOLUTION_TAG in tags(cell):
            cells.append(cell)
            continue
        start = 0
        for k, m in enumerate(found):
            number += 1
            label = LABEL.search(m.group(0))
            piece = copy.deepcopy(cell)
            piece.update(id=f"{cell.get('id', 'md')}-{k}", source=text[start : m.end()])
            piece["source"] = piece["source"].lstrip("\n")
            cells += [
                piece,
                answer_cell(f"{prefix}{number}", label and label.group(1), checked),
            ]
            start = m.end()
        if text[start:].strip():
            rest = copy.deepcopy(cell)
            rest.update(id=f"{cell.get('id', 'md')}-{len(found)}")
            rest["source"] = text[start:].lstrip("\n")
            cells.append(rest)
    nb["cells"] = cells


def strip_solutions(nb: dict, chapter: int | None = None) -> tuple[dict, int]:
    """The student edition of ``nb`` (a copy), and how many solutions it lost."""
    out = nbformat.from_dict(copy.deepcopy(nb))
    removed = sum(
        "{solution-start}" in "".join(c["source"])
        for c in out.cells
        if SOLUTION_TAG in tags(c)
    )
    add_answer_cells(out, chapter)
    remover = TagRemovePreprocessor(remove_cell_tags=REMOVED_TAGS, enabled=True)
    out, _ = remover.preprocess(out, {})
    out.metadata["posenc_edition"] = "student"
    return out, removed


def readme() -> str:
    from tools.authoring.colab_cell import _config_value
    from tools.build.license_notice import notice

    url, branch = _config_value("url"), _config_value("branch")
    return README.format(url=url, branch=branch) + notice()


class StudentConverter(colab_edition.Converter):
    """The Colab edition's converter, but a link to another chapter stays relative:
    it opens that chapter's student notebook (the zip keeps the book's layout), not
    the Colab edition, which holds the solutions."""

    def chapter_link(self, m: re.Match) -> str:
        return m.group(0)


def student_notebook(
    nb: dict,
    entry: str,
    chapter: int | None,
    glued: dict[str, dict] | None,
    bib,
    allow_missing: bool = False,
) -> tuple[dict, colab_edition.Converter]:
    """The student edition of ``nb`` (the chapter ``entry``, ``book/part3/alibi``):
    solutions removed and answer cells added (:func:`strip_solutions`), then its
    Markdown rewritten as the Colab edition rewrites it, with the glued values
    ``glued`` (``colab_edition.glued_outputs``)."""
    student, _ = strip_solutions(nb, chapter)
    out, conv = colab_edition.convert(
        json.loads(json.dumps(student)),
        entry,
        chapter,
        glued,
        bib,
        allow_missing,
        converter=StudentConverter,
    )
    out["metadata"]["posenc_edition"] = "student"
    return out, conv


def build(
    out_dir: pathlib.Path,
    executed: pathlib.Path | None = colab_edition.EXECUTED,
    allow_missing: bool = False,
    use_cache: bool = True,
) -> list[pathlib.Path]:
    """Write every student notebook and the zip into ``out_dir``; the numbers the
    prose quotes from ``executed`` (a build's executed notebooks) or, if
    ``use_cache``, the execution cache. A value found in neither stops it, naming
    the values, unless ``allow_missing`` (then the text says to run the notebook)."""
    written, missing = [], {}
    numbers, bib = toc.chapter_numbers(), colab_edition.load_bib()
    for entry in toc_notebooks():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        glued = colab_edition.glued_outputs(entry, executed, use_cache)
        student, conv = student_notebook(
            nb, entry, numbers.get(entry), glued, bib, allow_missing
        )
        if conv.missing:
            missing[entry] = sorted(set(conv.missing))
        path = out_dir / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    if missing and not allow_missing:
        raise SystemExit(
            f"the student edition needs the values glued by the executed notebooks "
            f"(looked in {executed}{' and the execution cache' if use_cache else ''}):"
            "\n"
            + "\n".join(f"  {e}: {', '.join(names)}" for e, names in missing.items())
            + "\nbuild the site first (make site), point --executed at a build's "
            "jupyter_execute folder, or pass --allow-missing"
        )
    with zipfile.ZipFile(out_dir / ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.md", readme())
        for path in written:
            archive.write(path, path.relative_to(out_dir).as_posix())
    return written


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", nargs="?", default=str(ROOT / "_build" / "student"))
    colab_edition.add_value_arguments(parser)
    args = parser.parse_args()
    executed = (
        pathlib.Path(args.executed).resolve()
        if args.executed
        else colab_edition.EXECUTED
    )
    out_dir = pathlib.Path(args.out)
    written = build(out_dir, executed, args.allow_missing, not args.executed)
    print(f"wrote {len(written)} student notebooks and {ZIP_NAME} to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

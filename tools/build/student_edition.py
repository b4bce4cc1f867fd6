"""The student edition: every chapter notebook with the exercise solutions removed,
generated from the one source (never edited by hand).

    python -m tools.build.student_edition [OUT]   # default OUT: _build/student

writes ``OUT/<part>/<chapter>.ipynb`` for every notebook of ``_toc.yml`` and
``OUT/posenc-student-notebooks.zip`` with all of them and a README (how to run them
locally and in Colab). ``tools/build/site.py`` runs it and the site serves the zip
(``html_extra_path``), linked from the teaching guide.

What is removed:

* solutions: every cell tagged ``solution`` (a solution is stored in sphinx-exercise's
  gated form, ``{solution-start}`` … ``{solution-end}``, in cells of its own: the
  prose and, for a coding exercise, its code; see tools/authoring/exercise_cells.py);
* code cells tagged ``solution-check``: the hidden cells (also tagged ``remove-cell``,
  so the site hides them too) that assert a solution's answer. ``remove-cell`` alone
  does not remove a cell here: the Colab install cell and cells that only glue values
  for the prose carry it and are needed.

What is added: after each exercise, a code cell (tagged ``answer``) to work in: empty,
or for a coding exercise the check's stub (``posenc_lib.exercises``), followed by the
check cell the chapter has (tagged ``check``, kept).
Every other code cell is copied unchanged and in order, so a student notebook executes
as its chapter does (tests/test_student_edition.py checks that, and runs a student
notebook top to bottom).
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import sys
import zipfile

from tools.build.course_index import numbered_chapters

ROOT = pathlib.Path(__file__).resolve().parents[2]
ZIP_NAME = "posenc-student-notebooks.zip"
CHECK_TAG = "solution-check"
SOLUTION_TAG = "solution"  # a coding exercise's solution code (hide-cell on the site)
ANSWER_TAG = "answer"
EXERCISE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{exercise\}[^\n]*\n.*?^(?P=fence)[ \t]*\n?",
    re.M | re.S,
)
README = """\
# Positional Encoding: Past, Present and Future: student notebooks

One notebook per chapter, without the solutions of the exercises (they are on the
course website, under each exercise). After each exercise there is an empty code
cell for your answer. Run each notebook top to bottom: later cells use earlier ones.

## In Colab

Upload a notebook (File -> Upload notebook) and run it: its first cell installs the
course library `posenc_lib` from {url}
(it does nothing outside Colab).

## On your machine

Python 3.9 or newer:

    python -m venv .venv && . .venv/bin/activate
    pip install "git+{url}@{branch}" jupyterlab sympy
    jupyter lab

then open a notebook. Its first cell is for Colab only: elsewhere it does nothing.
"""


def toc_notebooks() -> list[str]:
    entries = re.findall(
        r"^\s*-?\s*(?:file|root):\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M
    )
    return [e for e in entries if (ROOT / f"{e}.ipynb").exists()]


def is_solution_check(cell: dict) -> bool:
    return cell["cell_type"] == "code" and CHECK_TAG in cell["metadata"].get("tags", [])


def is_solution_code(cell: dict) -> bool:
    return cell["cell_type"] == "code" and SOLUTION_TAG in cell["metadata"].get(
        "tags", []
    )


def checked_label(cells: list[dict], k: int) -> str | None:
    """The exercise whose check (a cell tagged ``check``) follows cell ``k``."""
    for cell in cells[k + 1 : k + 3]:
        if cell["cell_type"] == "code" and "check" in cell["metadata"].get("tags", []):
            m = re.search(r"check\(\s*[\"'](ex-[^\"']+)", "".join(cell["source"]))
            return m.group(1) if m else None
    return None


def answer_cell(cell_id: str, name: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {"tags": [ANSWER_TAG]},
        "outputs": [],
        "source": [f"# {name}: your answer\n"],
    }


def split_after_exercises(cell: dict, first: int, prefix: str) -> list[dict]:
    """The Markdown ``cell`` cut after each exercise, with an answer cell after each
    piece; ``first``: the number of the cell's first exercise in the chapter,
    ``prefix``: "Exercise 7." or "Exercise "."""
    text = "".join(cell["source"])
    ends = [m.end() for m in EXERCISE.finditer(text)]
    if not ends:
        return [cell]
    out, start = [], 0
    for k, end in enumerate(ends):
        source = text[start:end].lstrip("\n").splitlines(keepends=True)
        piece = dict(cell, id=f"{cell.get('id', 'md')}-{k}", source=source)
        number = first + k
        out += [piece, answer_cell(f"answer-{number}", f"{prefix}{number}")]
        start = end
    if text[start:].strip():
        rest = dict(cell, id=f"{cell.get('id', 'md')}-{len(ends)}")
        rest["source"] = text[start:].lstrip("\n").splitlines(keepends=True)
        out.append(rest)
    return out


def strip_solutions(nb: dict, chapter: int | None = None) -> tuple[dict, int]:
    """A copy of ``nb`` without solutions and solution checks, with an answer cell
    after each exercise, and how many solutions were removed. ``chapter``: its number
    on the site (exercises are "Exercise 7.2"), None for an unnumbered page."""
    out, removed = copy.deepcopy(nb), 0
    prefix = f"Exercise {chapter}." if chapter else "Exercise "
    cells, exercises = [], 0
    for k, cell in enumerate(out["cells"]):
        if is_solution_check(cell):
            continue
        if SOLUTION_TAG in cell["metadata"].get("tags", []):
            # a solution's cells (gated: solution-start, code, solution-end)
            removed += "{solution-start}" in "".join(cell["source"])
            label = checked_label(out["cells"], k) if is_solution_code(cell) else None
            if label and cells and ANSWER_TAG in cells[-1]["metadata"].get("tags", []):
                # the answer cell made after the exercise starts from the check's stub
                from posenc_lib.exercises import all_checks

                cells[-1]["source"] = all_checks()[label].stub.splitlines(keepends=True)
            continue
        if cell["cell_type"] != "markdown":
            cells.append(cell)
            continue
        text = "".join(cell["source"])
        pieces = split_after_exercises(cell, exercises + 1, prefix)
        exercises += len(EXERCISE.findall(text))
        cells += pieces
    out["cells"] = cells
    out.setdefault("metadata", {})["posenc_edition"] = "student"
    return out, removed


def readme() -> str:
    from tools.authoring.colab_cell import _config_value

    return README.format(url=_config_value("url"), branch=_config_value("branch"))


def build(out_dir: pathlib.Path) -> list[pathlib.Path]:
    written = []
    numbers = {entry: k for k, (_, entry) in enumerate(numbered_chapters(), start=1)}
    for entry in toc_notebooks():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        student, _ = strip_solutions(nb, numbers.get(entry))
        path = out_dir / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    with zipfile.ZipFile(out_dir / ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.md", readme())
        for path in written:
            archive.write(path, path.relative_to(out_dir).as_posix())
    return written


def main() -> int:
    out_dir = (
        pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "student"
    )
    written = build(out_dir)
    print(f"wrote {len(written)} student notebooks and {ZIP_NAME} to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Give a coding exercise its solution code and its check cell.

    python -m tools.authoring.exercise_cells book/part3/rope.ipynb ex-rope-complex \
        solution.py 'pl.exercises.check("ex-rope-complex", rope_complex)'

Every solution is stored in sphinx-exercise's gated form, in cells of its own tagged
``solution``: a Markdown cell that opens it (```` ```{solution-start} label ````, then
the prose), any code cells, and a Markdown cell that closes it
(```` ```{solution-end} ````). On the site the whole solution, code included, is one
dropdown; the student edition drops every cell tagged ``solution`` (nbconvert's
``TagRemovePreprocessor``) and starts the answer cell from the check's stub.

This inserts the solution's code (a code cell tagged ``solution``) before the
``solution-end`` cell of ``label``, and a code cell tagged ``check`` after it (kept in
the student edition). The notebook keeps its stored form (one-space JSON, Markdown
sources as strings, cell ids), which nbformat's writer would not: it rewrites every
source as a list. Run it once per exercise; it refuses an exercise that already has
its code.
"""

from __future__ import annotations

import json
import pathlib
import sys


def _cell_id(nb: dict, stem: str) -> str:
    taken = {c.get("id") for c in nb["cells"]}
    k = 0
    while f"{stem}-{k}" in taken:
        k += 1
    return f"{stem}-{k}"


def _code(nb: dict, source: str, tags: list[str], stem: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": _cell_id(nb, stem),
        "metadata": {"tags": tags},
        "outputs": [],
        "source": source.rstrip("\n").splitlines(keepends=True),
    }


def solution_end(nb: dict, label: str) -> int:
    """The index of the cell that closes ``label``'s solution."""
    cells, inside = nb["cells"], False
    for k, cell in enumerate(cells):
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "{solution-start}" in src:
            inside = src.split("{solution-start}", 1)[1].split()[0] == label
        elif inside and "{solution-end}" in src:
            return k
    raise SystemExit(f"no {{solution-start}} {label} ... {{solution-end}} found")


def add(path: pathlib.Path, label: str, solution: str, check: str) -> None:
    nb = json.loads(path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    if any(f'"{label}"' in src for src in code):
        raise SystemExit(f"{path}: {label} already has its check cell")
    end = solution_end(nb, label)
    nb["cells"][end + 1 : end + 1] = [_code(nb, check, ["check"], f"{label}-check")]
    nb["cells"][end:end] = [_code(nb, solution, ["solution"], f"{label}-solution")]
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    nb_path, label, sol_file, check_src = sys.argv[1:]
    add(pathlib.Path(nb_path), label, pathlib.Path(sol_file).read_text(), check_src)

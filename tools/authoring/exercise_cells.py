"""Give a coding exercise its solution cell and its check cell.

    python -m tools.authoring.exercise_cells book/part3/rope.ipynb ex-rope-complex \
        solution.py 'pl.exercises.check("ex-rope-complex", rope_complex)'

splits the Markdown cell that holds the exercise right after its ``{solution}``
directive and inserts, there, a code cell tagged ``solution`` and ``hide-cell`` (the
solution's code, behind a toggle on the site; the student edition replaces it by the
check's stub) and a code cell tagged ``check`` (kept in the student edition). The
notebook keeps its stored form (one-space JSON, Markdown sources as strings, cell
ids): nbformat would rewrite every cell's source as a list, a diff over the whole
file. Run it once per exercise; it refuses an exercise that already has its cells.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys


def _cell_id(nb: dict, stem: str) -> str:
    taken = {c.get("id") for c in nb["cells"]}
    k = 0
    while f"{stem}-{k}" in taken:
        k += 1
    return f"{stem}-{k}"


def _code(nb: dict, source: str, tags: list[str], stem: str) -> dict:
    lines = source.rstrip("\n").splitlines(keepends=True)
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": _cell_id(nb, stem),
        "metadata": {"tags": tags},
        "outputs": [],
        "source": lines,
    }


def add(path: pathlib.Path, label: str, solution: str, check: str) -> None:
    nb = json.loads(path.read_text())
    if any(
        label in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"
    ):
        raise SystemExit(f"{path}: {label} already has a code cell")
    fence = re.compile(
        r"^(?P<f>`{3,}|:{3,})\{solution\}\s*"
        + re.escape(label)
        + r"\b.*?^(?P=f)[ \t]*\n?",
        re.M | re.S,
    )
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        m = fence.search(src) if cell["cell_type"] == "markdown" else None
        if m:
            break
    else:
        raise SystemExit(f"{path}: no {{solution}} for {label}")
    head, tail = src[: m.end()].rstrip("\n"), src[m.end() :].lstrip("\n")
    cell["source"] = head
    new = [
        _code(nb, solution, ["solution", "hide-cell"], f"{label}-solution"),
        _code(nb, check, ["check"], f"{label}-check"),
    ]
    if tail.strip():
        new.append(
            {
                "cell_type": "markdown",
                "id": _cell_id(nb, f"{label}-after"),
                "metadata": {},
                "source": tail.rstrip("\n"),
            }
        )
    nb["cells"][i + 1 : i + 1] = new
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    nb_path, label, sol_file, check_src = sys.argv[1:]
    add(pathlib.Path(nb_path), label, pathlib.Path(sol_file).read_text(), check_src)

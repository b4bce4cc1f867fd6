"""Authoring aid: a chapter drafted as MyST markdown -> a clean notebook with the
Colab cell.

    python -m tools.authoring.md2nb draft.md book/partN/chapter.ipynb

The draft starts with a code cell holding only ``COLAB`` (replaced by the canonical
Colab install cell, tagged ``remove-cell``). The notebook is written without outputs,
with stable cell ids, in the form the book stores (one-space JSON, code as a list of
lines, Markdown as one string, as ``tools/authoring/exercise_cells.py`` and
``colab_cell --fix`` write it; the student edition's test compares code cells as
stored). Cell tags
come from the draft: ``:tags: [solution]`` on a code cell, ``+++ {"tags":
["solution"]}`` before a Markdown cell (jupytext's MyST format). The committed
``.ipynb`` is the source of truth; the draft is a convenience (``jupytext --to md:myst
chapter.ipynb`` turns a notebook back into one). ``tools/authoring/chapter_template.md``
is the skeleton every chapter follows; ``python -m tools.authoring.new_chapter`` makes
a chapter from it with this converter.
"""

from __future__ import annotations

import json
import pathlib
import sys

from tools.authoring.colab_cell import TAG, canonical_source


def convert(text: str) -> dict:
    """The notebook (a dict, as stored) of a MyST-markdown draft."""
    import jupytext
    import nbformat

    nb = jupytext.reads(text, fmt="md:myst")
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("lines_to_next_cell", None)
        cell["id"] = f"c{i:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    first = nb.cells[0]
    if not (first.cell_type == "code" and first.source.strip() == "COLAB"):
        raise ValueError("the draft's first cell must be the COLAB placeholder")
    first.source = canonical_source()
    first.metadata = {"tags": [TAG]}
    first["id"] = "colab-setup"
    nbformat.validate(nb)
    stored = json.loads(json.dumps(nb))
    for cell in stored["cells"]:  # as the book stores code: a list of lines
        if cell["cell_type"] == "code":
            cell["source"] = cell["source"].splitlines(keepends=True)
    return stored


def write(nb: dict, dst: pathlib.Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit(__doc__)
    src, dst = map(pathlib.Path, argv)
    write(convert(src.read_text()), dst)
    print("wrote", dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())

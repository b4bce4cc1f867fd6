"""Authoring aid: a chapter drafted as MyST markdown -> a clean notebook with the
Colab cell.

    python -m tools.authoring.md2nb draft.md book/partN/chapter.ipynb

The draft starts with a code cell holding only ``COLAB`` (replaced by the canonical
Colab install cell, tagged ``remove-cell``). The notebook is written without outputs,
with stable cell ids. The committed ``.ipynb`` is the source of truth; the draft is a
convenience (``jupytext --to md:myst chapter.ipynb`` turns a notebook back into one).
See ``tools/authoring/chapter_template.md`` for the skeleton every chapter follows.
"""

import json
import pathlib
import sys

import jupytext
import nbformat

from tools.authoring.colab_cell import canonical_source

src, dst = map(pathlib.Path, sys.argv[1:3])
nb = jupytext.read(src, fmt="md:myst")
nb.metadata = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
for i, cell in enumerate(nb.cells):
    cell.metadata.pop("lines_to_next_cell", None)
    cell["id"] = f"c{i:03d}"
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
first = nb.cells[0]
assert first.cell_type == "code" and first.source.strip() == "COLAB", (
    "first cell must be the COLAB placeholder"
)
first.source = canonical_source()
first.metadata = {"tags": ["remove-cell"]}
first["id"] = "colab-setup"
dst.parent.mkdir(parents=True, exist_ok=True)
nbformat.validate(nb)
dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
print("wrote", dst)

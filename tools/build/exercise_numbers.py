"""Write ``posenc_lib/data/exercise_numbers.json``: every exercise's label and the
number the site gives it ("ex-rope-complex": "14.1"), so that
``pl.exercises.check("14.1", answer)`` works as ``check("ex-rope-complex", answer)``
does, in Colab too (the file is package data; _toc.yml is not shipped).

    python -m tools.build.exercise_numbers [--check]

Numbers as the site numbers them: the chapter's rank in _toc.yml's numbered parts
(``tools.toc.chapters``), the exercise's rank in the chapter. The site
build runs it; a test fails when the committed file is out of date.
"""

from __future__ import annotations

import json
import re
import sys

from tools import ROOT, toc
from tools.build import generated_page

PAGE = ROOT / "posenc_lib" / "data" / "exercise_numbers.json"
LABEL = re.compile(
    r"^`{3,}\{exercise\}[^\n]*\n(?::[\w-]+:[^\n]*\n)*?:label:\s*(\S+)", re.M
)
EXERCISE = re.compile(r"^`{3,}\{exercise\}", re.M)


def render() -> str:
    numbers = {}
    for chapter, entry in ((c.number, c.entry) for c in toc.chapters()):
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        text = "\n".join(
            "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
        )
        labels = LABEL.findall(text)
        if len(labels) != len(EXERCISE.findall(text)):
            raise SystemExit(f"{entry}: every exercise needs a :label:")
        for k, label in enumerate(labels, start=1):
            numbers[label] = f"{chapter}.{k}"
    return json.dumps(numbers, indent=1) + "\n"


def main() -> int:
    return generated_page.main(PAGE, render, "exercise_numbers")


if __name__ == "__main__":
    sys.exit(main())

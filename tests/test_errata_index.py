"""The errata index (book/appendix/errata.md) is generated from the chapters and
misses none of their errata."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

from tools import toc
from tools.build import errata_index

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_committed_page_is_what_the_tool_generates():
    result = subprocess.run(
        [sys.executable, "-m", "tools.build.errata_index", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_erratum_of_every_chapter_is_listed():
    """Independent of the tool's parser: any line opening a directive (``` or :::)
    whose title mentions an erratum, in any notebook of the table of contents."""
    opening = re.compile(r"^(?:`{3,}|:{3,})\{[a-z-]+\}[^\n]*errat", re.I | re.M)
    page = (ROOT / "book" / "appendix" / "errata.md").read_text()
    listed = page.count("\n- ")
    found = 0
    for entry in toc.notebook_entries():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                found += len(opening.findall("".join(cell["source"])))
    assert found == listed, (
        f"{found} erratum boxes in the chapters, {listed} in the index: write each "
        "as ```{admonition} Erratum: ... and run python -m tools.build.errata_index"
    )
    assert found > 0

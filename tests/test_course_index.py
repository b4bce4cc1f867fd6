"""The teaching guide's chapter index (book/teaching/chapters.md) is generated from
the chapters and the measured run times."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tools import RESULTS, toc
from tools.build import course_index

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_committed_page_is_what_the_tool_generates():
    result = subprocess.run(
        [sys.executable, "-m", "tools.build.course_index", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_chapter_has_objectives_exercises_and_a_measured_cpu_time():
    cpu = json.loads((RESULTS / "timings" / "cpu.json").read_text())
    for _, entry in toc.numbered_chapters():
        info = course_index.chapter_info(entry)
        assert info["objectives"], f"{entry}: no learning objectives found"
        assert info["exercises"], f"{entry}: no exercises found"
        assert entry in cpu["seconds"], (
            f"{entry} has no measured run time: "
            "build the site (python -m tools.build.site), then run "
            "python -m tools.measure.time_notebooks"
        )


def test_welcome_page_and_guide_name_every_chapter_of_the_toc():
    """The welcome page's chapter table and the teaching guide's sessions cannot go
    stale: every chapter of _toc.yml is in both."""
    root = pathlib.Path(__file__).resolve().parents[1]
    intro = (root / "book" / "intro.md").read_text()
    guide = (root / "book" / "teaching" / "guide.md").read_text()
    for nb in toc.notebooks():
        rel = nb.relative_to(root / "book").with_suffix("").as_posix()  # part3/rope
        assert f"{{doc}}`{rel}`" in intro, f"book/intro.md's table lacks {rel}"
        assert f"../{rel}.ipynb" in guide or f"book/{rel}" in guide, (
            f"book/teaching/guide.md has no session for {rel}"
        )

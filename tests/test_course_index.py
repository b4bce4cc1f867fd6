"""The teaching guide's chapter index (book/teaching/chapters.md) is generated from
the chapters and the measured run times."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tools import RESULTS
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
    for _, entry in course_index.numbered_chapters():
        info = course_index.chapter_info(entry)
        assert info["objectives"], f"{entry}: no learning objectives found"
        assert info["exercises"], f"{entry}: no exercises found"
        assert entry in cpu["seconds"], (
            f"{entry} has no measured run time: "
            f"run python -m tools.measure.time_notebooks {entry}.ipynb"
        )

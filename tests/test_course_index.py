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


def test_a_gpu_run_cut_short_is_shown_as_far_as_it_went(tmp_path, monkeypatch):
    """A GPU run stopped at a box's time limit leaves the chapters it finished
    (tools/build/nbval_times.py): the table names the card, gives their times, says
    which failed and how many were timed, and prints no missing field."""
    (tmp_path / "cpu.json").write_text((RESULTS / "timings" / "cpu.json").read_text())
    first, second, third = toc.notebook_entries()[:3]
    record = {
        "seconds": {first: 12.0},
        "device": "Planted Card 80GB",  # a planted record: no measurement of a card
        "failed": [second],
        "complete": False,
    }  # no date, no note: fields a partial record may lack
    (tmp_path / "gpu.json").write_text(json.dumps(record))
    monkeypatch.setattr(course_index, "TIMINGS", tmp_path)
    page = course_index.render()
    times = page.split("## Run times", 1)[1].split("\n## ", 1)[0]
    assert "None" not in times
    assert "GPU: Planted Card 80GB; the run stopped early: 1 of " in page
    number = toc.chapter_numbers()
    assert f"failed there: chapter(s) {number.get(second, second)}" in page
    rows = {line.split("|")[2].strip(): line for line in page.splitlines()[:60]
            if line.startswith("| ") and "](" in line}  # fmt: skip
    cells = [row.rstrip(" |").rsplit("|", 1)[1].strip() for row in rows.values()]
    assert cells[:3] == ["12 s", "failed", "not measured"], cells[:3]

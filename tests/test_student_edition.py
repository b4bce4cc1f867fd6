"""The student edition (tools/build/student_edition.py): solutions removed, everything
else kept, and the notebooks still execute."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import zipfile

import pytest

from tools.build import student_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return out, student_edition.build(out)


def test_every_chapter_has_a_student_notebook_without_solutions(edition):
    out, written = edition
    entries = student_edition.toc_notebooks()
    assert len(written) == len(entries)
    for entry, path in zip(entries, written):
        original = json.loads((ROOT / f"{entry}.ipynb").read_text())
        student = json.loads(path.read_text())
        text = json.dumps(student)
        assert "{solution}" not in text, path
        n_solutions = json.dumps(original).count("{solution}")
        assert text.count("removed in the student edition") == n_solutions, path
        # Code cells are identical and in the same order: the student notebook
        # executes exactly as the chapter that nbval runs.
        code = [c["source"] for c in original["cells"] if c["cell_type"] == "code"]
        assert [c["source"] for c in student["cells"] if c["cell_type"] == "code"] == (
            code
        )
        # The exercises themselves stay.
        assert text.count("{exercise}") == json.dumps(original).count("{exercise}")
    names = zipfile.ZipFile(out / student_edition.ZIP_NAME).namelist()
    assert sorted(names) == sorted(p.relative_to(out).as_posix() for p in written)


def test_a_student_notebook_executes_top_to_bottom(edition):
    out, written = edition
    smallest = min(written, key=lambda p: p.stat().st_size)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "--nbval-current-env",
            "-q",
            "-p",
            "no:cacheprovider",
            str(smallest),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

"""Exercises that check themselves (posenc_lib.exercises): the contract of every check.

For each registered check: its exercise exists in its chapter, the chapter has the
solution cell (tagged ``solution``) and the check cell (tagged ``check``); every wrong
answer planted for it gets a verdict containing its own message, without raising; the
student edition's stub, run as it is, gets "not yet" without raising. A book check
cell naming an unregistered exercise fails here too. (That every solution passes its
check is tested by running the chapters: the build, and the student edition with the
solutions pasted back.)
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re

import pytest
import torch

import posenc_lib as pl
from posenc_lib.exercises import Result, all_checks, verify

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKS = all_checks()
CHECK_CALL = re.compile(r'pl\.exercises\.check\(\s*"(ex-[^"]+)",\s*([A-Za-z_]\w*)\s*\)')


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def book_check_cells() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if "check" in tags(cell):
                found.append((path.relative_to(ROOT / "book").as_posix(), cell))
    return found


def test_every_check_cell_of_the_book_names_a_registered_exercise():
    cells = book_check_cells()
    assert cells, "no check cells found in the book"
    for where, cell in cells:
        m = CHECK_CALL.search("".join(cell["source"]))
        assert m, f"{where}: a cell tagged check must call pl.exercises.check"
        assert m[1] in CHECKS, f"{where}: {m[1]} has no registered check"


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_the_chapter_has_the_exercise_its_solution_and_its_check(label):
    check = CHECKS[label]
    nb = json.loads((ROOT / "book" / f"{check.chapter}.ipynb").read_text())
    cells = nb["cells"]
    text = "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    assert f":label: {label}" in text, f"{check.chapter} has no exercise {label}"
    k = next(
        k
        for k, c in enumerate(cells)
        if "check" in tags(c) and f'"{label}"' in "".join(c["source"])
    )
    # the check follows the solution (gated: start, code, end), all tagged solution
    end, code = cells[k - 1], cells[k - 2]
    assert "{solution-end}" in "".join(end["source"]), "the check follows the solution"
    assert code["cell_type"] == "code" and "solution" in tags(code), (
        "the solution's code sits inside the solution, tagged solution"
    )


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_planted_wrong_answers_get_their_own_message(label):
    planted = CHECKS[label].planted
    assert len(planted) >= 2, f"{label}: plant at least two wrong answers"
    for answer, says in planted:
        result = verify(label, answer)
        assert isinstance(result, Result) and not result.passed, (
            f"{label}: a planted wrong answer passed ({says!r})"
        )
        assert says in result.message, (
            f"{label}: expected {says!r} in the verdict, got: {result.message}"
        )


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_the_stub_as_given_is_not_yet_right_and_does_not_crash(label):
    check = CHECKS[label]
    nb = json.loads((ROOT / "book" / f"{check.chapter}.ipynb").read_text())
    name = next(
        m[2]
        for c in nb["cells"]
        if (m := CHECK_CALL.search("".join(c["source"]))) and m[1] == label
    )
    namespace = {"torch": torch, "pl": pl}
    exec(check.stub, namespace)
    assert name in namespace, f"{label}: the stub does not define {name}"
    result = verify(label, namespace[name])
    assert not result.passed
    assert result.message


def test_check_prints_one_verdict_and_returns_nothing():
    label = sorted(CHECKS)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        returned = pl.exercises.check(label, ...)
    assert returned is None
    number = pl.exercises.numbers()[label]
    assert out.getvalue().startswith(f"Exercise {number} ({label}): not yet.")
    assert pl.exercises.results()[label].passed is False


def test_an_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="known: ex-"):
        pl.exercises.verify("ex-no-such-exercise", 1)


def test_registering_rejects_a_bad_label_and_a_second_check():
    with pytest.raises(ValueError, match="label must be"):
        pl.exercises.exercise("rope-complex", chapter="part3/rope", stub="")
    with pytest.raises(ValueError, match="already has a check"):
        pl.exercises.exercise(sorted(CHECKS)[0], chapter="x", stub="")


def test_an_exercise_is_found_by_its_number_on_the_site_too():
    label = sorted(CHECKS)[0]
    number = pl.exercises.numbers()[label]
    assert verify(number, ...).label == label
    with pytest.raises(KeyError, match="no exercise 999.1"):
        verify("999.1", ...)
    with pytest.raises(TypeError, match="exercise must be a label"):
        verify(14.1, ...)


def test_the_committed_exercise_numbers_are_what_the_tool_generates():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "tools.build.exercise_numbers", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    numbers = json.loads((ROOT / "posenc_lib/data/exercise_numbers.json").read_text())
    assert len(numbers) == len(set(numbers.values())) >= 100

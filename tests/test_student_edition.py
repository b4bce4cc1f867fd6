"""The student edition (tools/build/student_edition.py): solutions and the cells that
check them removed, an answer cell after each exercise, everything else kept, its
Markdown rendered by Colab as the site shows it (no MyST left: the checks of
tests/test_colab_edition.py), and the notebooks still execute
(tests/test_student_notebooks.py runs them)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest

import posenc_lib.exercises as pl_exercises

from test_colab_edition import leftovers, rendered
from tools.authoring.colab_cell import canonical_source
from tools.build import colab_edition, site, student_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRIES = student_edition.toc_notebooks()
EXERCISE = re.compile(r"\*\*Exercise (\d+\.)?(\d+)[.*]")  # "**Exercise 14.2.**"


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def tags(cell: dict) -> list[str]:
    return cell["metadata"].get("tags", [])


def looks_like_a_solution_check(cell: dict) -> bool:
    """A code cell hidden from the site (``remove-cell``) that speaks of a solution:
    how the chapters mark the cells that assert an exercise's answer, tag or not."""
    return (
        cell["cell_type"] == "code"
        and "remove-cell" in tags(cell)
        and re.search(r"\bsolutions?\b", "".join(cell["source"]), re.I) is not None
    )


def solution_lines(nb: dict) -> set[str]:
    """The distinctive lines of the chapter's solutions: those that appear nowhere
    else in the notebook (nor in a check's stub, which the student edition gives)."""
    inside = set()
    outside = [c.stub for c in pl_exercises.all_checks().values()]
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if student_edition.SOLUTION_TAG in tags(cell):
            inside.update(
                line.strip()
                for line in text.splitlines()
                if len(line.strip()) > 30 and not line.startswith(":")
            )
        else:
            outside.append(text)
    rest = "\n".join(outside)
    return {line for line in inside if line not in rest}


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    """Written without executed notebooks (glued numbers: "run the notebook")."""
    out = tmp_path_factory.mktemp("student")
    return out, student_edition.build(
        out, executed=None, allow_missing=True, use_cache=False
    )


def student_path(out: pathlib.Path, entry: str) -> pathlib.Path:
    return out / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")


def test_every_check_cell_of_a_solution_is_tagged():
    """A hidden code cell that checks a solution carries ``solution-check`` (besides
    ``remove-cell``, which hides it on the site): that tag is what removes it from
    the student edition."""
    for entry in ENTRIES:
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        for cell in code_cells(nb):
            if looks_like_a_solution_check(cell):
                assert student_edition.CHECK_TAG in tags(cell), (
                    f"{entry}: cell {cell.get('id')} checks a solution: tag it "
                    f"{student_edition.CHECK_TAG!r}"
                )
            if student_edition.CHECK_TAG in tags(cell):
                assert "remove-cell" in tags(cell), (
                    f"{entry}: cell {cell.get('id')} checks a solution and is shown "
                    "on the site: tag it 'remove-cell' too"
                )


@pytest.mark.parametrize("entry", ENTRIES)
def test_no_solution_survives_in_the_student_edition(edition, entry):
    out, _ = edition
    original = json.loads((ROOT / f"{entry}.ipynb").read_text())
    path = out / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
    student = json.loads(path.read_text())
    text = json.dumps(student, ensure_ascii=False)
    assert "{solution" not in text
    assert "<details>" not in text and "Solution to" not in text
    markdown = "\n".join(
        "".join(c["source"]) for c in student["cells"] if c["cell_type"] == "markdown"
    )
    assert json.dumps(original).count("{solution-start}") == len(
        EXERCISE.findall(markdown)
    ), "every exercise of the chapter has a solution, gated in its own cells"
    sources = "\n".join("".join(c["source"]) for c in student["cells"])
    for line in solution_lines(original):
        assert line not in sources, f"solution text survives: {line[:80]!r}"
    for cell in code_cells(student):
        assert student_edition.CHECK_TAG not in tags(cell)
        assert not looks_like_a_solution_check(cell), (
            "a hidden cell that checks a solution survives: "
            + "".join(cell["source"])[:200]
        )


@pytest.mark.parametrize("entry", ENTRIES)
def test_everything_else_is_kept_and_each_exercise_gets_an_answer_cell(edition, entry):
    out, _ = edition
    original = json.loads((ROOT / f"{entry}.ipynb").read_text())
    path = out / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
    student = json.loads(path.read_text())
    nbformat.validate(nbformat.reads(json.dumps(student), as_version=4))
    # The Colab install cell (tagged remove-cell as well) stays first.
    first = student["cells"][0]
    assert "".join(first["source"]) == canonical_source()
    # Every other code cell is identical and in the same order, so the student
    # notebook executes as the chapter does.
    kept = [
        c["source"]
        for c in code_cells(original)
        if student_edition.CHECK_TAG not in tags(c)
        and student_edition.SOLUTION_TAG not in tags(c)
    ]
    answers = [c for c in code_cells(student) if student_edition.ANSWER_TAG in tags(c)]
    assert [
        c["source"]
        for c in code_cells(student)
        if student_edition.ANSWER_TAG not in tags(c)
    ] == kept
    # The exercises themselves stay (numbered as on the site), each followed by its
    # answer cell, which carries the same number.
    n_exercises = json.dumps(original).count("{exercise}")
    cells = student["cells"]
    numbered = [
        m[2]
        for c in cells
        if c["cell_type"] == "markdown"
        for m in EXERCISE.finditer("".join(c["source"]))
    ]
    assert numbered == [str(k) for k in range(1, n_exercises + 1)]
    assert len(answers) == n_exercises
    for k, cell in enumerate(cells):
        if student_edition.ANSWER_TAG in tags(cell):
            before = "".join(cells[k - 1]["source"])
            number = ".".join(cell["id"].split("-")[1:])  # answer-10-2: 10.2
            assert "".join(cell["source"]).startswith(f"# Exercise {number}:")
            assert "".join(EXERCISE.findall(before)[-1]) == number
    # A coding exercise's solution code is gone; its answer cell starts from the
    # check's stub, and the check cell follows it.
    checks = pl_exercises.all_checks()
    for k, cell in enumerate(cells):
        if "check" in tags(cell):
            label = re.search(r'check\("(ex-[^"]+)"', "".join(cell["source"]))[1]
            answer = "".join(cells[k - 1]["source"])
            assert answer.startswith("# Exercise ") and answer.endswith(
                checks[label].stub
            )


def test_no_check_solution_code_survives_in_the_student_edition(edition):
    """The code of every registered check's solution (the chapter's code cells
    tagged ``solution``, inside its gated solution): none of its lines that the
    chapter does not show elsewhere (nor the check's stub) is in the chapter's
    student notebook, and each check's chapter has that code and its check cell."""
    out, _ = edition
    checks = pl_exercises.all_checks()
    for label, check in sorted(checks.items()):
        entry = f"book/{check.chapter}"
        assert entry in ENTRIES, f"{label}: chapter {check.chapter!r} is not in _toc"
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        code = student_edition.solution_code(nb).get(label)
        assert code, f"{entry}: {label} has a check but no solution code cell"
        assert label in student_edition.checked_labels(nb), (
            f"{entry}: {label} has a check but no check cell"
        )
        path = student_path(out, entry)
        student = "\n".join(
            "".join(c["source"]) for c in json.loads(path.read_text())["cells"]
        )
        shown = "\n".join(
            "".join(c["source"])
            for c in nb["cells"]
            if student_edition.SOLUTION_TAG not in tags(c)
        )
        lines = {
            line.strip()
            for line in code.splitlines()
            if line.strip()
            and not line.strip().startswith("#")
            and line.strip() not in check.stub
            and line.strip() not in shown
        }
        assert lines, f"{label}: its solution code has no line of its own to look for"
        for line in lines:
            assert line not in student, f"{label}: solution code survives: {line!r}"


def test_the_zip_holds_every_notebook_and_a_readme(edition):
    out, written = edition
    archive = zipfile.ZipFile(out / student_edition.ZIP_NAME)
    names = archive.namelist()
    assert sorted(names) == sorted(
        ["README.md"] + [p.relative_to(out).as_posix() for p in written]
    )
    readme = archive.read("README.md").decode()
    assert "Colab" in readme and "pip install" in readme
    from tools.authoring.colab_cell import _config_value

    # the same library the Colab cell installs, and no solution in the README
    url = f"git+{_config_value('url')}@{_config_value('branch')}"
    assert f"posenc_lib[course] @ {url}" in readme  # with the course's extra
    assert "{solution" not in readme
    text = "\n".join(archive.read(n).decode() for n in names)
    assert "{solution-start}" not in text


def test_exercises_are_numbered_as_on_the_site(edition):
    """Answer cells are numbered as the site numbers exercises (chapter 10 is T5):
    ``answer-10-k``, and an answer cell without a check says "# Exercise 10.k:"."""
    out, _ = edition
    student = json.loads((out / "part2" / "t5.ipynb").read_text())
    answers = [c for c in code_cells(student) if student_edition.ANSWER_TAG in tags(c)]
    assert [c["id"] for c in answers] == [
        f"answer-10-{k}" for k in range(1, len(answers) + 1)
    ]
    for k, cell in enumerate(answers, start=1):
        if cell["metadata"]["exercise"] not in pl_exercises.all_checks():
            assert "".join(cell["source"]).startswith(f"# Exercise 10.{k}:")


# Every student notebook is executed, with the solutions and with planted wrong
# answers, by tests/test_student_notebooks.py (marked build: it runs beside the site
# build).


# ---- as Colab shows it: no MyST, numbers from the build ----------------------------


@pytest.mark.parametrize("entry", ENTRIES)
def test_student_edition_shows_no_myst_in_colab(edition, entry):
    """Rendered as Colab renders Markdown (CommonMark, ``$…$``), the student notebook
    shows no role, directive fence, ``:label:`` line, ``{glue`` or target (the
    checks of tests/test_colab_edition.py), and no solution."""
    out, _ = edition
    path = student_path(out, entry)
    problems = [p for html in rendered(path) for p in leftovers(html)]
    assert not problems, "\n".join(problems[:10])
    html = "\n".join(rendered(path))
    assert "<details>" not in html and "Solution to" not in html
    assert json.loads(path.read_text())["metadata"]["posenc_edition"] == "student"


def test_links_to_chapters_open_the_student_notebooks(edition):
    """A link to another chapter stays relative (its student notebook, beside it in
    the zip), never to the Colab edition, which holds the solutions."""
    out, written = edition
    text = "\n".join(p.read_text() for p in written)
    assert colab_edition.COLAB not in text
    links = re.findall(r"\]\((\.\./part\d/\w+\.ipynb)", text)
    assert links, "no chapter links to check"
    for path in written:
        for link in re.findall(r"\]\((\.\./part\d/\w+\.ipynb)", path.read_text()):
            assert (path.parent / link).resolve().exists(), (path.name, link)


@pytest.mark.build
def test_the_served_student_edition_has_every_measured_number(tmp_path):
    """After the site build: the student edition it served
    (``_build/html/student``, written by tools/build/site.py from the build's
    executed notebooks) quotes every measured number, and the edition built again
    from the executed notebooks needs no placeholder."""
    executed = ROOT / "_build" / "jupyter_execute"
    served = ROOT / "_build" / "html" / "student" / student_edition.ZIP_NAME
    if not executed.exists():
        pytest.fail("no _build/jupyter_execute: build the site first (make site)")
    assert served.exists(), f"{served} is missing: tools/build/site.py writes it"
    student_edition.build(tmp_path, executed=executed)  # stops on a missing value
    with zipfile.ZipFile(served) as archive:
        for name in archive.namelist():
            text = archive.read(name).decode()
            assert colab_edition.MISSING not in text, name
            assert "{glue" not in text, name


def test_the_stubs_kept_on_disk_are_the_checks_stubs_of_this_library(
    tmp_path, monkeypatch
):
    """``check_stubs`` reads the stubs from a file kept under the library's digest
    (a student stage then imports neither the checks nor torch); a file written from
    other sources, or broken, is read afresh from the checks and rewritten."""
    truth = {label: c.stub for label, c in pl_exercises.all_checks().items()}
    kept = tmp_path / "check_stubs.json"
    monkeypatch.setattr(student_edition, "STUBS", kept)
    for before in (None, "{not json", json.dumps({"library": "x", "stubs": {}})):
        if before is not None:
            kept.write_text(before)
        student_edition.check_stubs.cache_clear()
        assert student_edition.check_stubs() == truth
        written = json.loads(kept.read_text())
        assert written["library"] == site.library_hash()
    stale = {label: "# stale\n" for label in truth}
    kept.write_text(json.dumps({"library": written["library"], "stubs": stale}))
    student_edition.check_stubs.cache_clear()
    assert student_edition.check_stubs() == stale  # read back, not recomputed
    student_edition.check_stubs.cache_clear()

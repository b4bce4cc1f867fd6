"""Every student notebook, run (issue 23): the student edition
(tools/build/student_edition.py) executed top to bottom with nbclient, once per
notebook, doing two things in that one run:

* each checked exercise's answer cell holds the chapter's solution code (its code
  cells tagged ``solution``, by label): its check cell must print "right", and a final
  injected cell asserts, from ``pl.exercises.results()``, that every check ran and
  passed;
* after each check cell, an injected cell feeds the check every planted wrong answer
  (``CHECKS[label].planted``) through ``pl.exercises.verify``: each verdict must fail
  and contain its ``says`` fragment, and nothing may crash the notebook.

Exercises without a check keep their answer cell as the edition gives it (one
comment), and the notebook still runs. Marked ``build``: it executes the whole course
once more (minutes), so it runs with ``-m build`` beside the site build.

It runs on a GPU: a real one where present, else the fake CUDA device of
``tools/testing/fake_cuda.py`` (CUDA tensors that compute on the CPU and refuse to meet
a CPU tensor), entered by an injected first cell. So every chapter's code, its
solutions and the checks that re-evaluate a reader's model are tested for tensors on
the wrong device on every machine, while the site build (nbval) runs them on the CPU.
"""

from __future__ import annotations

import json
import pathlib
import time

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools.build import student_edition as se
from tools.testing.fake_cuda import KERNEL_CELL

pytestmark = pytest.mark.build

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRIES = se.toc_notebooks()

AFTER_CHECK = """\
# injected by tests/test_student_notebooks.py: the planted wrong answers
import posenc_lib.exercises as _ex

_student_verdicts = globals().get("_student_verdicts", {{}})
_student_verdicts[{label!r}] = _ex.results()[{label!r}]  # before verify overwrites it
for _answer, _says in _ex.all_checks()[{label!r}].planted:
    _r = _ex.verify({label!r}, _answer)
    assert not _r.passed, f"a planted answer passes {label}: {{_r}}"
    assert _says in _r.message, f"{label}: {{_says!r}} not in {{_r.message!r}}"
"""
FINAL = """\
# injected by tests/test_student_notebooks.py: every check ran and said right
import posenc_lib.exercises as _ex

_student_verdicts = globals().get("_student_verdicts", {{}})
assert set(_ex.results()) >= set({labels!r}), sorted(_ex.results())
assert sorted(_student_verdicts) == sorted({labels!r}), sorted(_student_verdicts)
_wrong = [str(v) for v in _student_verdicts.values() if not v.passed]
assert not _wrong, _wrong
"""


def injected(nb: nbformat.NotebookNode, solutions: dict[str, str]) -> list[str]:
    """Put the solutions in the answer cells and the injected cells after the check
    cells and at the end (in place); the labels checked, in order."""
    cells, labels = [], []
    for cell in nb.cells:
        label = cell.metadata.get("exercise")
        if se.ANSWER_TAG in se.tags(cell) and label in se.checked_labels(nb):
            cell.source = solutions[label]
        cells.append(cell)
        if cell.cell_type == "code" and se.CHECK_CELL_TAG in se.tags(cell):
            label = se.CHECK_CALL.search(cell.source).group(1)
            labels.append(label)
            source = AFTER_CHECK.format(label=label)
            cells.append(nbformat.v4.new_code_cell(source, id=f"planted-{label}"))
    cells.append(nbformat.v4.new_code_cell(FINAL.format(labels=labels), id="final"))
    if not torch.cuda.is_available():  # the fake GPU (see the module's docstring)
        fake = KERNEL_CELL.format(root=str(ROOT))
        cells.insert(0, nbformat.v4.new_code_cell(fake, id="fake-cuda"))
    nb.cells = cells
    return labels


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student-run")
    # its code cells are what runs: the prose's measured numbers are not needed
    written = se.build(out, executed=None, allow_missing=True, use_cache=False)
    return dict(zip(ENTRIES, written))


@pytest.mark.parametrize("entry", ENTRIES)
def test_student_notebook_runs_with_solutions_and_planted_answers(edition, entry):
    path = edition[entry]
    nb = nbformat.read(path, as_version=4)
    solutions = se.solution_code(json.loads((ROOT / f"{entry}.ipynb").read_text()))
    labels = injected(nb, solutions)
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name} failed:\n{str(error)[-3000:]}", pytrace=False)
    print(f"{time.perf_counter() - start:.1f} s {entry} ({len(labels)} checks)")
    for cell in nb.cells:
        if se.CHECK_CELL_TAG in se.tags(cell):
            label = se.CHECK_CALL.search(cell.source).group(1)
            text = "".join(o.get("text", "") for o in cell.outputs)
            verdict = text.splitlines()[0] if text else ""
            assert label in verdict and ": right." in verdict, text

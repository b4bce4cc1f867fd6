"""Every student notebook, run (issue 23): the student edition
(tools/build/student_edition.py) of each chapter executed top to bottom with nbclient,
each checked exercise's answer cell holding the chapter's solution code (its code
cells tagged ``solution``, by label): its check cell must print "right", and a final
injected cell asserts, from ``pl.exercises.results()``, that every check ran and
passed. Exercises without a check keep their answer cell as the edition gives it (one
comment), and the notebook still runs. Marked ``build``: it executes the whole course
once more (minutes), so it runs with ``-m build`` in the test command.

It runs on a GPU: a real one where present, else the fake CUDA device of
``tools/testing/fake_cuda.py`` (CUDA tensors that compute on the CPU and refuse to meet
a CPU tensor), entered by an injected first cell. So every chapter's code, its
solutions and the checks that re-evaluate a reader's model are tested for tensors on
the wrong device on every machine, while nbval runs them on the CPU.

Two things it no longer repeats (issue 44), each proven elsewhere once:

* the planted wrong answers of every check (``CHECKS[label].planted``) are fed to
  the checks by ``tests/test_exercises.py``, on the CPU and on this GPU (real, else
  fake), for every registered check, a superset of the checks these notebooks call;
* with ``POSENC_TRAIN_ONCE=FOLDER`` (the test command sets it, after nbval recorded
  each chapter's trainings there), an injected cell makes each ``pl.train`` run its
  first steps on the device and then reuse nbval's result for the same inputs
  (``tools/testing/train_once.py``; ``tests/test_train_once.py`` shows a tensor on
  the wrong device still fails). Without it every training runs in full.

Its kernels are the ``POSENC_KERNEL`` the test command names (``posenc-forked``:
fresh kernels forked from a warm process, tools/testing/kernel_forks.py), else
``python3``. A figure is drawn where the site shows it but not encoded as an image
(its outputs are not kept): 0.3 s less per figure, and a figure of GPU tensors fails
its cell (tests/test_device_cells.py). The test process itself imports no torch
(marked ``kernels``): the kernel decides between the GPU and the fake one, and the
checks' stubs come from ``_build/check_stubs.json`` while the library is unchanged
(``student_edition.check_stubs``), 3.4 s less per student stage.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import pathlib
import time

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools import toc
from tools.build import colab_edition
from tools.build import student_edition as se
from tools.testing import kernel_forks, train_once
from tools.testing.device_cells import FIGURES_CELL, GPU_CELL

pytestmark = [pytest.mark.build, pytest.mark.kernels]

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRIES = se.toc_notebooks()
TRAIN_ONCE = os.environ.get("POSENC_TRAIN_ONCE")  # nbval's recorded trainings

FINAL = """\
# injected by tests/test_student_notebooks.py: every check ran and said right
import posenc_lib.exercises as _ex

_results = _ex.results()
assert set(_results) >= set({labels!r}), sorted(_results)
_wrong = [str(_results[_label]) for _label in {labels!r} if not _results[_label].passed]
assert not _wrong, _wrong
try:  # what the kernel computed, for the test command's log
    import resource as _resource

    _usage = _resource.getrusage(_resource.RUSAGE_SELF)
    print(f"kernel CPU {{_usage.ru_utime + _usage.ru_stime:.1f}} s")
except ImportError:
    pass
"""


def injected(
    nb: nbformat.NotebookNode,
    solutions: dict[str, str],
    entry: str | None = None,
    records: str | None = None,
) -> list[str]:
    """Put the solutions in the answer cells, a final check after the last cell, the
    fake GPU first (without a real one) and, with ``records``, the reuse of nbval's
    trainings (in place); the labels checked, in order."""
    cells, labels = [], []
    for cell in nb.cells:
        label = cell.metadata.get("exercise")
        if se.ANSWER_TAG in se.tags(cell) and label in se.checked_labels(nb):
            cell.source = solutions[label]
        cells.append(cell)
        if cell.cell_type == "code" and se.CHECK_CELL_TAG in se.tags(cell):
            labels.append(se.CHECK_CALL.search(cell.source).group(1))
    cells.append(nbformat.v4.new_code_cell(FINAL.format(labels=labels), id="final"))
    first = []
    # the GPU, else the fake one (see the module's docstring): the kernel decides
    first.append(nbformat.v4.new_code_cell(GPU_CELL.format(root=str(ROOT)), id="gpu"))
    # figures drawn, not encoded as images (tools/testing/device_cells.py)
    first.append(nbformat.v4.new_code_cell(FIGURES_CELL, id="figures"))
    if records is not None:
        reuse = train_once.REUSE_CELL.format(
            root=str(ROOT),
            folder=str(pathlib.Path(records).resolve()),
            entry=entry,
            context=train_once.context_of(entry),
        )
        first.append(nbformat.v4.new_code_cell(reuse, id="train-once"))
    nb.cells = first + cells
    return labels


@functools.cache
def _book_facts():
    return toc.chapter_numbers(), colab_edition.load_bib()


def student_edition_of(entry: str, out: pathlib.Path) -> pathlib.Path:
    """The student notebook of ``entry`` (``book/part3/alibi``), written under
    ``out``: its code cells are what runs, so the prose's measured numbers are not
    needed (as ``student_edition.build(..., allow_missing=True)`` writes it)."""
    numbers, bib = _book_facts()
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    student, _ = se.student_notebook(
        nb, entry, numbers.get(entry), None, bib, allow_missing=True
    )
    path = out / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
    return path


def run_student_notebook(
    path: pathlib.Path, entry: str, records: str | None
) -> nbformat.NotebookNode:
    """Execute the student notebook ``path`` of ``entry`` with the solutions pasted
    back (on the GPU, real or fake); fail the test with the failing cell."""
    nb = nbformat.read(path, as_version=4)
    source = json.loads((ROOT / f"{entry}.ipynb").read_text())
    labels = injected(nb, se.solution_code(source), entry, records)
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name=os.environ.get(kernel_forks.KERNEL_VAR, "python3"),
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name} failed:\n{str(error)[-3000:]}", pytrace=False)
    logged = train_once.read_log(records, entry) if records else []
    trainings = collections.Counter(
        r["outcome"] for r in logged if r["mode"] == "reuse"
    )
    said = ", ".join(f"{n} {what}" for what, n in sorted(trainings.items()))
    final = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
    cpu = final.strip().removeprefix("kernel ") + ", " if "kernel CPU" in final else ""
    print(
        f"{time.perf_counter() - start:.1f} s {entry} ({cpu}{len(labels)} checks"
        + (f"; trainings: {said}" if said else "")
        + ")"
    )
    return nb


@pytest.mark.parametrize("entry", ENTRIES)
def test_student_notebook_runs_with_the_solutions_pasted_back(tmp_path, entry):
    path = student_edition_of(entry, tmp_path)
    nb = run_student_notebook(path, entry, TRAIN_ONCE)
    for cell in nb.cells:
        if se.CHECK_CELL_TAG in se.tags(cell):
            label = se.CHECK_CALL.search(cell.source).group(1)
            text = "".join(o.get("text", "") for o in cell.outputs)
            verdict = text.splitlines()[0] if text else ""
            assert label in verdict and ": right." in verdict, text

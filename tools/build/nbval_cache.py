"""nbval executes the chapters; its outputs fill the execution cache the site reads.

A pytest plugin for the notebook stage of the test command::

    python -m pytest -p tools.build.nbval_cache --nbval-lax --nbval-current-env \\
        [-n 2 --dist loadfile] book/part0/self_attention.ipynb ...

nbval runs every code cell of each notebook in one kernel and fails on any error (lax:
stored outputs are not compared; the notebooks store none). This plugin keeps what
each cell printed and displayed and, when every cell of a notebook has passed, writes
the executed notebook into the site build's jupyter-cache (``_build/.jupyter_cache``),
keyed as myst-nb keys it (its code cells and their metadata). The strict site build
that follows (``tools/build/site.py``) then finds every page in the cache and executes
nothing: each chapter is executed once per test command, by nbval, on the device
``pl.book.setup()`` picks (CUDA where there is one).

The cache holds notebooks of one state of the library (``site.library_hash()``): if
the stamp beside it names another, the cache is emptied first. With pytest-xdist
(``--dist loadfile`` keeps a notebook's cells in one worker and one kernel) each worker
stages its executed notebooks in ``_build/nbval/`` and the controller caches them at
the end (one writer for jupyter-cache's database).

The record of each notebook keeps its execution time (the seconds of its cells, kernel
start included), as myst-nb's own execution does, so ``tools/measure/time_notebooks``
reads it back.

The test command (``tools/build/schedule.py``) runs several nbval sessions at once, a
few chapters each: with ``POSENC_NBVAL_STAGE=FOLDER`` a session only stages, in
``FOLDER`` (not emptied; the cache is not touched), and ``python -m
tools.build.nbval_cache --commit FOLDER`` then writes every staged notebook into the
cache, one writer at the end.
With ``POSENC_TRAIN_ONCE=FOLDER`` each kernel first runs
``tools/testing/train_once.RECORD_CELL``: every ``pl.train`` of the chapter is saved
there for its student edition's run (see that module).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time

import nbformat
import pytest

from tools.build import site

STAGE = site.BUILD / "nbval"
STAGE_ONLY = "POSENC_NBVAL_STAGE"  # a folder: stage there, leave the cache to --commit
TRAIN_ONCE = "POSENC_TRAIN_ONCE"  # a folder: record each training there


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


def _controller(config) -> bool:
    return not hasattr(config, "workerinput")


class NotebookRecorder:
    """Collects the outputs of each notebook's cells as nbval runs them."""

    def __init__(self):
        self.runs: dict[str, dict] = {}

    def record(self, item, seconds: float, passed: bool) -> None:
        path = str(item.parent.path)
        run = self.runs.setdefault(path, {"cells": {}, "seconds": 0.0, "ok": True})
        run["seconds"] += seconds
        run["ok"] &= passed
        if hasattr(item, "test_outputs"):
            run["cells"][item.cell_num] = item.test_outputs

    def finish(self, parent) -> None:
        """``parent``'s cells have all run: stage it, executed, if every one passed."""
        path = pathlib.Path(str(parent.path))
        run = self.runs.pop(str(path), None)
        if run is None or not run["ok"]:
            return
        nb = nbformat.read(path, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        if set(run["cells"]) != set(range(len(code))):
            return  # a cell was skipped or deselected: not a whole execution
        for number, cell in enumerate(code):
            cell.outputs = [nbformat.from_dict(o) for o in run["cells"][number]]
            cell.execution_count = number + 1
        try:
            rel = path.resolve().relative_to(site.ROOT)
        except ValueError:  # a notebook outside the repository (a test's)
            rel = pathlib.Path(path.name)
        out = _stage() / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
        out.with_suffix(".json").write_text(
            json.dumps({"uri": str(path.resolve()), "seconds": run["seconds"]})
        )


def _execute_as_a_notebook_does(self, cell_input, allow_stdin=None):
    """nbval's ``RunningKernel.execute_cell_input`` with ``store_history=True``, as
    Jupyter and nbclient (myst-nb's executor) send a cell: IPython reads a trailing
    ``;`` (no result shown) from the history, so without it ``ax.legend();`` would
    display the legend's repr, a second output the site would render."""
    return self.kc.execute(
        cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False
    )


def _record_trainings(folder: str):
    """nbval's ``IPyNbFile.setup`` (which starts the kernel), then the kernel records
    each training of the chapter in ``folder`` (tools/testing/train_once.py)."""
    from nbval.plugin import IPyNbFile

    from tools.testing import train_once

    start_kernel = IPyNbFile.setup

    def setup(self):
        start_kernel(self)
        path = pathlib.Path(str(self.path)).resolve()
        try:
            entry = path.relative_to(site.ROOT).with_suffix("").as_posix()
        except ValueError:  # a notebook outside the repository (a test's)
            entry = path.with_suffix("").as_posix()
        cell = train_once.RECORD_CELL.format(
            root=str(site.ROOT),
            folder=str(pathlib.Path(folder).resolve()),
            entry=entry,
            context=train_once.context_of(entry),
        )
        kernel = self.kernel
        msg_id = kernel.kc.execute(cell, store_history=False, stop_on_error=False)
        while True:  # its messages, until the kernel is idle again
            msg = kernel.get_message(stream="iopub", timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                raise RuntimeError(
                    "the training recorder failed in the kernel:\n"
                    + "\n".join(msg["content"]["traceback"])
                )
            if (
                msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
            ):
                break

    IPyNbFile.setup = setup


def pytest_configure(config):
    if not config.getoption("nbval_lax", False):
        return
    from nbval.kernel import RunningKernel

    RunningKernel.execute_cell_input = _execute_as_a_notebook_does
    if os.environ.get(TRAIN_ONCE):
        _record_trainings(os.environ[TRAIN_ONCE])
    config._posenc_recorder = NotebookRecorder()
    # the site shows these outputs: a check under a hidden solution prints a neutral
    # verdict (posenc_lib.exercises.check); the kernels inherit this environment
    os.environ["POSENC_BOOK_BUILD"] = "1"
    if _controller(config) and os.environ.get(STAGE_ONLY):
        _stage().mkdir(parents=True, exist_ok=True)
    elif _controller(config):
        shutil.rmtree(STAGE, ignore_errors=True)
        STAGE.mkdir(parents=True, exist_ok=True)
        current = site.library_hash()
        if site.stamp_of(site.CACHE_STAMP) != current:
            # the cache may hold only notebooks of this library and environment
            shutil.rmtree(site.CACHE, ignore_errors=True)
            site.CACHE_STAMP.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _is_cell(item):
        item.__dict__.setdefault("_posenc_reports", []).append(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter()
    yield
    recorder = getattr(item.config, "_posenc_recorder", None)
    if recorder is None or not _is_cell(item):
        return
    reports = item.__dict__.get("_posenc_reports", [])
    passed = bool(reports) and all(r.passed for r in reports)
    recorder.record(item, time.perf_counter() - start, passed)
    if nextitem is None or nextitem.parent is not item.parent:
        recorder.finish(item.parent)


def _stage() -> pathlib.Path:
    return pathlib.Path(os.environ.get(STAGE_ONLY) or STAGE)


def commit(stage: pathlib.Path = STAGE, into: pathlib.Path | None = None) -> int:
    """Write every notebook staged in ``stage`` into the site's execution cache
    (emptied first if it holds another state of the library), or into the cache
    ``into`` (a page preview's: ``tools/build/pages.py``); how many."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    current = site.library_hash()
    if into is None and site.stamp_of(site.CACHE_STAMP) != current:
        shutil.rmtree(site.CACHE, ignore_errors=True)
        site.CACHE_STAMP.unlink(missing_ok=True)
    cache = get_cache(str(into or site.CACHE))
    cached = 0
    for staged in sorted(stage.rglob("*.ipynb")):
        info = json.loads(staged.with_suffix(".json").read_text())
        nb = nbformat.read(staged, as_version=4)
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, info["uri"], data={"execution_seconds": info["seconds"]}),
            check_validity=False,
            overwrite=True,
        )
        cached += 1
    if into is None:
        site.CACHE_STAMP.write_text(current)
    return cached


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if getattr(config, "_posenc_recorder", None) is None or not _controller(config):
        return
    if os.environ.get(STAGE_ONLY):
        return  # python -m tools.build.nbval_cache --commit, once every session is done
    cached = commit()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"nbval_cache: {cached} executed notebook(s) written to {site.CACHE} "
            f"for the site build"
        )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="Write the notebooks staged by nbval sessions (POSENC_NBVAL_STAGE) "
        "into the site's execution cache."
    )
    parser.add_argument("--commit", required=True, metavar="FOLDER", help="the stage")
    parser.add_argument("--cache", help="another cache (a page preview's)")
    args = parser.parse_args()
    into = pathlib.Path(args.cache) if args.cache else None
    cached = commit(pathlib.Path(args.commit), into)
    print(f"nbval_cache: {cached} executed notebook(s) written to {into or site.CACHE}")

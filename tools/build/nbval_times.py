"""A pytest plugin: each chapter's run time under nbval, written the moment it ends.

    python -m pytest -p tools.build.nbval_times --nbval-times FILE \\
        --nbval-lax --nbval-current-env [-n 16 --dist loadfile] book/part3/x.ipynb

For the GPU run (``tools/build/test_gpu.sh``), on a box that may stop the command at
its time limit: FILE, in the form of ``tools/results/timings/<device>.json`` (which
the teaching guide's run-time table reads), is written when the run starts and again
after each notebook whose cells have all run, so a run cut short keeps every chapter
it finished (``"complete"`` is true once every notebook collected has ended).

A chapter's seconds are the sum of its cells' setup, call and teardown as pytest
reports them: nbval starts the notebook's kernel in its first cell's setup and stops it
in its last cell's teardown, so kernel start is included, as in jupyter-cache's
records. Only chapters whose every cell passed are timed; the others are listed under
``"failed"``. Under pytest-xdist the controller, which receives every worker's reports,
writes the file. Needs neither jupyter-cache nor nbconvert, which a GPU box may lack
(``tools/measure/time_notebooks.py`` reads the same times from the execution cache
that the test command fills).
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import pathlib

import pytest

from tools import ROOT


def pytest_addoption(parser):
    parser.addoption(
        "--nbval-times",
        type=pathlib.Path,
        help="write each notebook's run time to this JSON file as it ends",
    )


def entry_of(nodeid: str) -> str | None:
    """``book/part3/rope.ipynb::Cell 3`` -> ``book/part3/rope`` (None for a test
    that is not a notebook's cell)."""
    path = nodeid.split("::", 1)[0]
    return path.removesuffix(".ipynb") if path.endswith(".ipynb") else None


class Times:
    """The controller's record: cells expected and seen per notebook, its seconds."""

    def __init__(self, out: pathlib.Path, device: str, workers: int):
        self.out, self.device, self.workers = out, device, workers
        self.expected: dict[str, set[str]] = {}
        self.done: dict[str, set[str]] = collections.defaultdict(set)
        self.spent: dict[str, float] = collections.defaultdict(float)
        self.failed: set[str] = set()
        self.seconds: dict[str, float] = {}
        self.started = datetime.datetime.now(datetime.timezone.utc)

    def expect(self, nodeids) -> None:
        for nodeid in nodeids:
            entry = entry_of(nodeid)
            if entry is not None:
                self.expected.setdefault(entry, set()).add(nodeid)

    def report(self, report) -> None:
        entry = entry_of(report.nodeid)
        if entry is None or entry in self.seconds or entry in self.failed:
            return
        self.spent[entry] += report.duration
        if report.failed:
            self.failed.add(entry)
            self.write()
            return
        if report.when == "teardown":
            self.done[entry].add(report.nodeid)
            if self.done[entry] >= self.expected.get(entry, {report.nodeid}):
                self.seconds[entry] = round(self.spent[entry], 1)
                self.write()

    def record(self) -> dict:
        """The run so far: ``complete`` once every notebook has passed or failed."""
        finished = set(self.seconds) | self.failed
        workers = min(self.workers, max(len(self.expected), 1))
        alone = (
            "run one after another"
            if workers == 1
            else f"run {workers} at a time on one GPU (so each took longer than it "
            "takes alone)"
        )
        from tools import toc  # the file lists the chapters as _toc.yml does

        book = [e for e in toc.notebook_entries() if e in self.expected]
        order = book + [e for e in self.expected if e not in book]
        return {
            "seconds": {e: self.seconds[e] for e in order if e in self.seconds},
            "device": self.device,
            "measured": self.started.date().isoformat(),
            "workers": workers,
            "note": f"wall-clock seconds per notebook, {alone}, executed by nbval "
            "(pytest's durations of each notebook's cells, kernel start included)",
            "failed": sorted(self.failed),
            "complete": bool(order) and finished >= set(order),
        }

    def write(self) -> None:
        """The record, replaced whole (a reader never sees half a file)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        part = self.out.with_name(self.out.name + ".part")
        part.write_text(json.dumps(self.record(), indent=1) + "\n")
        os.replace(part, self.out)


def device_name() -> str:
    """The card's name, as ``tools/measure/time_notebooks.py`` records it."""
    from tools.measure.time_notebooks import device

    return device()[1]


class Plugin:
    """The controller's hooks, around one ``Times``."""

    def __init__(self, times: Times):
        self.times = times

    def pytest_collection_finish(self, session):
        self.times.expect(item.nodeid for item in session.items)  # without xdist
        self.times.write()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        if not self.times.expected:  # every worker collects the same notebooks
            self.times.expect(ids)
            self.times.write()

    def pytest_runtest_logreport(self, report):
        self.times.report(report)


def pytest_configure(config):
    out = config.getoption("nbval_times", None)
    if out is None or hasattr(config, "workerinput"):  # the controller writes
        return
    workers = getattr(config.option, "numprocesses", None) or 1
    times = Times(out if out.is_absolute() else ROOT / out, device_name(), workers)
    times.write()
    config.pluginmanager.register(Plugin(times), "posenc_nbval_times")

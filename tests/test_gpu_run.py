"""The GPU run's pieces that a machine without a card can check: the chapters'
times written as each one ends, the wheelhouse's install plan, the schedule, and
the collection of a run's results (tools/build/test_gpu.sh)."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import types

import nbformat
import pytest

from tools.build import gpu_run, nbval_times, wheels
from tools.testing.fake_cuda import FAKE_PROPERTIES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def report(nodeid, when="call", duration=1.0, failed=False):
    return types.SimpleNamespace(
        nodeid=nodeid, when=when, duration=duration, failed=failed
    )


def test_a_chapter_is_written_the_moment_its_last_cell_ends(tmp_path):
    out = tmp_path / "gpu.json"
    times = nbval_times.Times(out, "a card", workers=16)
    a, b = "book/part1/a.ipynb", "book/part1/b.ipynb"
    times.expect([f"{a}::Cell 0", f"{a}::Cell 1", f"{b}::Cell 0", "tests/x.py::t"])
    times.write()
    assert json.loads(out.read_text())["seconds"] == {}
    for when in ("setup", "call", "teardown"):
        times.report(report(f"{a}::Cell 0", when, 2.0))
    assert json.loads(out.read_text())["seconds"] == {}  # one cell still to run
    times.report(report(f"{b}::Cell 0", "call", 0.5, failed=True))
    for when in ("setup", "call", "teardown"):
        times.report(report(f"{a}::Cell 1", when, 0.25))
    record = json.loads(out.read_text())
    assert record["seconds"] == {"book/part1/a": 6.8}  # 3 x 2.0 + 3 x 0.25
    assert record["failed"] == ["book/part1/b"] and record["complete"] is True
    assert record["device"] == "a card" and record["workers"] == 2  # 2 notebooks
    assert not list(tmp_path.glob("*.part"))  # replaced whole, never half-written


def test_a_run_cut_short_keeps_what_it_finished(tmp_path):
    out = tmp_path / "gpu.json"
    times = nbval_times.Times(out, "a card", workers=1)
    times.expect(["book/a.ipynb::Cell 0", "book/b.ipynb::Cell 0"])
    times.report(report("book/a.ipynb::Cell 0", "teardown", 3.0))
    record = json.loads(out.read_text())
    assert record["seconds"] == {"book/a": 3.0} and record["complete"] is False
    assert "one after another" in record["note"]


@pytest.mark.parametrize("workers", [1, 2])
def test_nbval_writes_each_notebooks_time_through_the_plugin(tmp_path, workers):
    """Two small notebooks under nbval (on two pytest-xdist workers, or one): the
    record names both, timed, as complete."""
    for name, cells in (("one", ["x = 1", "assert x == 1"]), ("two", ["y = 2"])):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    out = tmp_path / "gpu.json"
    xdist = ["-n", "2", "--dist", "loadfile"] if workers == 2 else []
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "tools.build.nbval_times",
            "--nbval-times", str(out), "--nbval-lax", "--nbval-current-env",
            "-o", "addopts=", "-p", "no:cacheprovider", "-q", f"--rootdir={tmp_path}",
            *xdist, "one.ipynb", "two.ipynb",
        ],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(out.read_text())
    assert sorted(record["seconds"]) == ["one", "two"], record
    assert all(s > 0 for s in record["seconds"].values())
    assert record["complete"] and record["workers"] == workers


def test_the_wheelhouse_installs_only_what_the_python_lacks(tmp_path):
    names = ["nbval-0.11.0-py2.py3-none-any.whl", "PyYAML-6.0.3-cp312-cp312-x.whl",
             "pytest_xdist-3.8.0-py3-none-any.whl"]  # fmt: skip
    paths = [tmp_path / n for n in names]
    missing, kept = wheels.plan(paths, {"pyyaml": "6.0.1", "pytest-xdist": "3.5.0"})
    assert missing == [paths[0]]
    assert [(w.name, v) for w, v in kept] == [(names[1], "6.0.1"), (names[2], "3.5.0")]
    assert wheels.wheel_name(paths[2]) == "pytest-xdist"
    assert wheels.main(["install", str(tmp_path), str(tmp_path / "site")]) == 1  # none


def test_the_chapters_go_longest_first_and_the_schedule_is_lpt():
    seconds = gpu_run.cpu_seconds()
    ordered = gpu_run.order(
        [ROOT / (e + ".ipynb") for e in list(seconds)[:6]]
    )  # fmt: skip
    times = [seconds[gpu_run.entry(p)] for p in ordered]
    assert times == sorted(times, reverse=True)
    assert gpu_run.lpt([5, 4, 3, 3, 2, 2, 1], 3) == [7, 7, 6]
    assert gpu_run.lpt([5, 4], 8)[0] == 5  # never less than the longest
    plan = gpu_run.schedule(list(seconds), 16, 540)
    assert "on 16 workers, longest first" in plan and "fits while" in plan


def test_collect_refuses_a_rehearsal_on_the_fake_device(tmp_path, monkeypatch):
    record = {"seconds": {"book/part0/x": 1.0}, "device": FAKE_PROPERTIES.name}
    (tmp_path / "gpu.json").write_text(json.dumps(record))
    assert FAKE_PROPERTIES.name.startswith(gpu_run.FAKE_CARD)
    assert gpu_run.collect(tmp_path) == 1
    # a real run's files are copied into place
    into = tmp_path / "repo"
    into.mkdir()
    monkeypatch.setattr(gpu_run, "FILES", {"gpu.json": into / "gpu.json"})
    record["device"] = "Planted Card 80GB"  # a planted record, no measurement
    (tmp_path / "gpu.json").write_text(json.dumps(record))
    monkeypatch.setattr(gpu_run, "ROOT", tmp_path)
    assert gpu_run.collect(tmp_path) == 0
    assert json.loads((into / "gpu.json").read_text()) == record
    assert gpu_run.collect(tmp_path / "empty") == 1


def test_the_attention_benchmark_is_bounded_and_writes_row_by_row(
    tmp_path, monkeypatch, request
):
    """The GPU run's bounds, at tiny sizes: FlexAttention capped at no compile,
    then no measurement past the deadline; every row it did not run says why, the
    files say whether and why it stopped, and no half-written file is left."""
    from tools.measure import bench_attention

    monkeypatch.setenv(bench_attention.MMAP_VAR, "65536")  # no re-exec in a test
    # each memory measurement starts with gc.collect(): let it walk the benchmark's
    # own objects, not every object of this test process (0.4 s a walk late in the
    # unit stage, 16 of them)
    gc.freeze()
    request.addfinalizer(gc.unfreeze)
    out = tmp_path / "attention_cpu.csv"
    argv = ["--n", "16", "32", "--names", "alibi", "--paths", "fused", "flex",
            "--repeats", "2", "--out", str(out)]  # fmt: skip
    assert bench_attention.main([*argv, "--max-compiles", "0"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = {(r["n"], r["path"], r["positions"]): r for r in data["rows"]}
    assert rows[16, "fused", "explicit"]["fwd_x"] > 0
    capped = "not run: FlexAttention compiles capped at 0 (--max-compiles)"
    assert rows[16, "flex", "explicit"]["note"] == capped
    assert data["meta"]["complete"] and data["meta"]["stopped"] is None
    assert data["meta"]["compiles"] == 0

    assert bench_attention.main([*argv, "--deadline-s", "0"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    notes = {r.get("note") for r in data["rows"] if r["path"] != "fused"}
    assert notes == {"not run: past the time budget (--deadline-s)"}
    assert data["meta"]["stopped"] == "time budget: --deadline-s 0"
    assert out.read_text().count("past the time budget") == len(data["rows"]) - 2
    assert not list(tmp_path.glob("*.part"))

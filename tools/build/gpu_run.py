"""The GPU run's helpers (``tools/build/test_gpu.sh``, ``make test-gpu``).

    python -m tools.build.gpu_run order [NOTEBOOK ...]    # longest first
    python -m tools.build.gpu_run schedule --workers 16   # the run, planned
    python -m tools.build.gpu_run phases                  # seconds kept per phase
    python -m tools.build.gpu_run collect RESULTS         # its results, into place

``order``: the chapters of ``_toc.yml`` (or those given), longest first by their
logged CPU times (``tools/results/timings/cpu.json``). nbval's workers
(pytest-xdist, ``--dist loadfile --no-loadscope-reorder``) take the next notebook in
that order as each finishes one, which is the longest-processing-time-first schedule.

``schedule``: that schedule on ``--workers`` workers, from the logged CPU times, and
the time each phase of the run is given within its budget (``PHASES``): how much
slower than those times the chapters may run on the box, and the run still fit.

``collect``: the files a run wrote into RESULTS, copied to where the repository keeps
them (``FILES``), to commit: the chapters' GPU times and the attention and model
benchmarks on CUDA. It refuses a run on the fake device of
``tools/testing/fake_cuda.py`` (a rehearsal) and names what a run cut short lacks.
"""

from __future__ import annotations

import argparse
import heapq
import json
import pathlib
import shutil
import sys

from tools import RESULTS, ROOT, toc

# RESULTS/<name> -> where the repository keeps it (read by the teaching guide's
# table, tools/build/course_index.py, and by pl.attention_benchmark /
# pl.model_benchmark for the cost chapter)
FILES = {
    "gpu.json": RESULTS / "timings" / "gpu.json",
    "attention_cuda.json": ROOT / "posenc_lib" / "data" / "attention_cuda.json",
    "attention_cuda.csv": ROOT / "posenc_lib" / "data" / "attention_cuda.csv",
    "model_bench_cuda.json": ROOT / "posenc_lib" / "data" / "model_bench_cuda.json",
    "model_bench_cuda.md": ROOT / "posenc_lib" / "data" / "model_bench_cuda.md",
}
# seconds of the default budget (BUDGET_S = 540, nine minutes) kept for each phase
# of test_gpu.sh after the chapters: what the chapters may use is the rest
PHASES = {"setup": 30, "tests": 90, "attention benchmark": 120, "model benchmark": 90}
FAKE_CARD = "fake CUDA"  # how tools/testing/fake_cuda.py's card names itself


def cpu_seconds() -> dict[str, float]:
    record = json.loads((RESULTS / "timings" / "cpu.json").read_text())
    return record["seconds"]


def entry(path: pathlib.Path) -> str:
    return path.resolve().relative_to(ROOT).with_suffix("").as_posix()


def order(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    """``paths``, longest first by their logged CPU time (unlogged ones first: the
    safe guess for a chapter never timed)."""
    seconds = cpu_seconds()
    return sorted(paths, key=lambda p: -seconds.get(entry(p), float("inf")))


def lpt(times: list[float], workers: int) -> list[float]:
    """Each worker's load when every job, longest first, goes to the worker that
    is free first."""
    loads = [0.0] * max(1, workers)
    heapq.heapify(loads)
    for t in sorted(times, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return sorted(loads, reverse=True)


def schedule(entries: list[str], workers: int, budget: float) -> str:
    """The chapters ``entries`` on ``workers`` workers, longest first, from their
    logged CPU times, within ``budget`` seconds less the other phases'."""
    seconds = cpu_seconds()
    unlogged = [e for e in entries if e not in seconds]
    longest = max(seconds.values())  # an unlogged chapter: counted as the longest
    times = [seconds.get(e, longest) for e in entries]
    loads = lpt(times, workers)
    slot = budget - sum(PHASES.values())
    lines = [
        f"{len(times)} chapters, {sum(times):.0f} s one after another on the logged "
        f"CPU ({json.loads((RESULTS / 'timings' / 'cpu.json').read_text())['device']})"
        + (
            f"; {len(unlogged)} without a logged time, counted as the longest"
            if unlogged
            else ""
        ),
        f"on {workers} workers, longest first: {loads[0]:.0f} s (the longest chapter "
        f"alone: {max(times):.0f} s; busiest to idlest worker {loads[0]:.0f} to "
        f"{loads[-1]:.0f} s)",
        f"budget {budget:.0f} s: "
        + ", ".join(f"{k} {v} s" for k, v in PHASES.items())
        + f", the chapters {slot:.0f} s",
        f"fits while the chapters run at most {slot / loads[0]:.1f} x their logged "
        "CPU times on the box (several at a time)",
    ]
    return "\n".join(lines)


def collect(folder: pathlib.Path) -> int:
    found = {name: folder / name for name in FILES if (folder / name).is_file()}
    if not found:
        print(f"no results in {folder}: expected some of {sorted(FILES)}")
        return 1
    for name, path in found.items():
        if name.endswith(".json"):
            data = json.loads(path.read_text())
            meta = data.get("meta", data)
            card = meta.get("card") or meta.get("device_name") or meta.get("device")
            if str(card).startswith(FAKE_CARD):
                print(f"{path} was measured on the fake device ({card}): a rehearsal")
                return 1
    for name, path in found.items():
        shutil.copyfile(path, FILES[name])
        print(f"{path} -> {FILES[name].relative_to(ROOT)}")
    gpu = found.get("gpu.json")
    if gpu:
        record = json.loads(gpu.read_text())
        if not record.get("complete"):
            print(f"gpu.json: {len(record['seconds'])} chapters timed (cut short)")
        if record.get("failed"):
            print(f"gpu.json: failed on the GPU: {', '.join(record['failed'])}")
    for name in ("attention_cuda.json", "model_bench_cuda.json"):
        if name in found and json.loads(found[name].read_text())["meta"].get("stopped"):
            print(f"{name}: stopped early ({name} meta 'stopped' says why)")
    print("commit them; then python -m tools.build.generated (the guide's table)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    first = verbs.add_parser("order", help="the chapters, longest first")
    first.add_argument("notebooks", nargs="*", type=pathlib.Path)
    plan = verbs.add_parser("schedule", help="the run, planned from the CPU times")
    plan.add_argument("--workers", type=int, default=16)
    plan.add_argument("--budget", type=float, default=540.0)
    plan.add_argument("notebooks", nargs="*", type=pathlib.Path)
    verbs.add_parser("phases", help="the seconds PHASES keeps, for test_gpu.sh")
    into = verbs.add_parser("collect", help="a run's results, into the repository")
    into.add_argument("folder", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.verb == "order":
        paths = [p.resolve() for p in args.notebooks] or toc.notebooks()
        print("\n".join(str(p.relative_to(ROOT)) for p in order(paths)))
        return 0
    if args.verb == "schedule":
        if args.workers < 1:
            parser.error(f"--workers must be >= 1, got {args.workers}")
        entries = [entry(p) for p in args.notebooks] or toc.notebook_entries()
        print(schedule(entries, args.workers, args.budget))
        return 0
    if args.verb == "phases":
        print(*PHASES.values())
        return 0
    return collect(args.folder)


if __name__ == "__main__":
    sys.exit(main())

"""The test command's stages, run on every core: `make test` (tools/build/test.sh).

    python -m tools.build.schedule                       # the whole test command
    python -m tools.build.schedule --chapter book/part3/alibi  # one chapter
    python -m tools.build.schedule --plan [--jobs 4]     # the schedule it expects

Each stage is a command, the stages it needs and those it comes after. A stage starts
as soon as what it needs has passed, what it comes after has ended and a core is free
(``--jobs``, default: the cores, ``nproc``); of the ready stages, the one with the
longest expected path to the end of the run starts first (the critical path), by the
times the last run logged (``_build/logs/stages.json``; without one,
``tools/results/stages.json`` if committed, else estimates from each chapter's nbval
time, ``tools/results/timings/cpu.json``). A stage that can use several cores (the
browser tests, by pytest-xdist) gets the free ones the other ready stages leave. A
stage that fails skips the stages that need it; the others still run (a group's
student notebooks run after its nbval, passed or not), and the command fails. Each
stage's output goes to ``_build/logs/<stage>.log``. A run that changes a file git tracks
fails at the end, naming it: the stages write only under ``_build/``, so a changed file
is a committed generated one that was stale (the site build rewrites those before a test
could see them). At the end a table of the stages
(start, seconds, CPU seconds, each stage's seconds over the committed run's, result)
is printed and written to ``_build/logs/stages.json`` (the next run's expected times)
and ``stages.tsv``, with the machine's pace against the committed run, which moves a
shared machine's total more than most changes do: the chapters' (``pace``: the same
chapters' nbval times) and the other stages' (``pace_other_stages``), which can differ
within one run, and the total at that run's pace (``at_committed_pace``: the wall
over the two paces, weighted by their stages' seconds), and how many C++ kernels
torch's compile cache held at the start and at the end (``compile_cache``: a machine
without them compiles each in the run). On one core the stages run one after another.

The stages of the whole command and what each proves: tools/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from tools.testing import compile_cache, kernel_forks

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
LOGS = BUILD / "logs"
COMMITTED = ROOT / "tools" / "results" / "stages.json"  # a copy of a quiet run's log
CHAPTER_TIMES = ROOT / "tools" / "results" / "timings" / "cpu.json"
RECORDS = BUILD / "train_once"  # nbval's trainings, for the student run
STAGE = BUILD / "nbval"  # nbval's executed notebooks, for the cache
# Chapters go to nbval (and to their student notebooks) in groups, one pytest start-up
# each: about 1/GROUPS_PER_CORE of a core's share of nbval per group (fewer, longer
# groups on few cores; a chapter alone on many), at least MIN_GROUP seconds.
GROUPS_PER_CORE, MIN_GROUP = 4, 20.0
# Seconds of the stages no run has logged yet (2 cores, a quiet machine), and of a
# student notebook: a fraction of its chapter's nbval time (its trainings reused).
ESTIMATES = {
    "cache": 5,
    "build": 70,
    "pdf": 125,
    "browser:pages": 165,
    "browser:rest": 135,
    "browser-pdf": 15,
    "unit:rest": 140,
    "unit:registry": 60,
    "train-once": 20,
    "installs": 100,
    "recipe": 100,
    "page": 40,
}
STUDENT_FRACTION = 0.5


@dataclasses.dataclass
class Stage:
    name: str
    command: list[str]
    needs: list[str] = dataclasses.field(default_factory=list)  # must have passed
    after: list[str] = dataclasses.field(default_factory=list)  # must have ended
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    chapters: list[str] = dataclasses.field(default_factory=list)
    split: int = 1  # the most cores it can use: pytest-xdist's workers (-n)
    estimate: float = 60.0
    # what the run found
    status: str = "waiting"  # waiting, running, passed, failed, skipped
    cores: int = 1
    start: float | None = None
    seconds: float | None = None
    cpu: float | None = None

    def argv(self) -> list[str]:
        split = ["-n", str(self.cores), "--dist", "load"] if self.cores > 1 else []
        return self.command + split


def python() -> str:
    return os.environ.get("PY") or sys.executable


def pytest(*args: str) -> list[str]:
    return [python(), "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", *args]


def chapters() -> list[str]:
    from tools import toc

    return list(toc.notebook_entries())


def log_name(name: str) -> str:
    return name.replace(":", "-").replace("/", "_")


# ---- the stages ----------------------------------------------------------------------


def last_times(logs: pathlib.Path = LOGS) -> dict[str, float]:
    """Seconds per stage, and per chapter (``nbval:<entry>``, ``student:<entry>``),
    from the last run's log, else from the committed copy of one."""
    for path in (logs / "stages.json", COMMITTED):
        try:
            return json.loads(path.read_text())["expected"]
        except (OSError, ValueError, KeyError):
            continue
    return {}


def expected(times: dict[str, float], key: str) -> float:
    if key in times:
        return times[key]
    kind, _, entry = key.partition(":")
    if kind in ("nbval", "student") and entry.startswith("book/"):
        chapter = json.loads(CHAPTER_TIMES.read_text())["seconds"].get(entry, 20.0)
        return chapter * (STUDENT_FRACTION if kind == "student" else 1.0)
    return ESTIMATES.get(key, ESTIMATES.get(kind, 60.0))


def groups(entries: list[str], times: dict[str, float], jobs: int) -> list[list[str]]:
    """The chapters in book order, in groups of about ``GROUPS_PER_CORE`` per core of
    expected nbval time (a long chapter alone)."""
    seconds = {e: expected(times, f"nbval:{e}") for e in entries}
    size = max(MIN_GROUP, sum(seconds.values()) / (GROUPS_PER_CORE * jobs))
    out, current, total = [], [], 0.0
    for entry in entries:
        if current and total + seconds[entry] > size:
            out.append(current)
            current, total = [], 0.0
        current.append(entry)
        total += seconds[entry]
    return out + ([current] if current else [])


def nbval_stage(
    name: str,
    entries: list[str],
    logs: pathlib.Path = LOGS,
    stage: pathlib.Path = STAGE,
    records: pathlib.Path = RECORDS,
    kernels: dict[str, str] | None = None,
) -> Stage:
    """The chapters under nbval: their executed notebooks staged for the cache
    (tools/build/nbval_cache.py), every ``pl.train`` recorded
    (tools/testing/train_once.py). With ``kernels`` (``kernel_server``'s environment)
    each notebook's kernel is forked from the warm server, else started afresh."""
    junit = logs / f"{log_name('nbval:' + name)}.xml"
    kernels = kernels or {}
    kernel = ["--nbval-current-env"]
    if "POSENC_KERNEL" in kernels:
        kernel = ["--nbval-kernel-name", kernels["POSENC_KERNEL"]]
    return Stage(
        f"nbval:{name}",
        pytest(
            "-p",
            "tools.build.nbval_cache",
            "--nbval-lax",
            *kernel,
            "-q",
            "-rfE",
            f"--junitxml={junit}",
            "--nbval-cell-timeout=300",
            *[f"{e}.ipynb" for e in entries],
        ),  # fmt: skip
        env={
            "POSENC_NBVAL_STAGE": str(stage),
            "POSENC_TRAIN_ONCE": str(records),
            **kernels,
        },
        chapters=entries,
    )


def student_stage(
    name: str,
    entries: list[str],
    records: pathlib.Path = RECORDS,
    kernels: dict[str, str] | None = None,
) -> Stage:
    """The chapters' student notebooks on a GPU (real, else the fake device), the
    solutions pasted back, nbval's trainings reused after their first steps; their
    kernels forked from the warm server with ``kernels``."""
    ids = " or ".join(f"{e}]" for e in entries)
    return Stage(
        f"student:{name}",
        pytest(
            "tests/test_student_notebooks.py",
            "-m",
            "build",
            "-q",
            "-rfEs",
            "-s",
            "-k",
            ids,
        ),  # fmt: skip
        after=[f"nbval:{name}"],  # its recorded trainings; it runs if nbval failed
        env={"POSENC_TRAIN_ONCE": str(records), **(kernels or {})},
        chapters=entries,
    )


BROWSER = ("-q", "-rs", "--durations=10")
# A browser test is marked ``browser`` (and ``pdf``) in its own file: the browser stages
# collect only those files (collecting the whole of tests/ costs each process, and each
# xdist worker, 10 s); tests/test_schedule.py holds every marked test to the list.
BROWSER_MARK = re.compile(r"\bmark\.(browser|pdf)\b")


def browser_test_files() -> list[str]:
    """The test files that mark browser tests, relative to the root."""
    return [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if BROWSER_MARK.search(path.read_text())
    ]


# The registry's tests (every encoding on every attention path) run as a stage of their
# own beside the other unit tests: they compile a FlexAttention kernel for each
# encoding and masking, which a machine without torch's compile cache makes afresh
# (tools/README.md, the unit stages); the two halves overlap where cores are free, so
# that the unit tests do not bound a run on more cores.
REGISTRY_TESTS = "tests/test_registry.py"


def unit_tests(registry: bool = False) -> list[str]:
    """The unit and hygiene tests, what `make test-quick` runs, in two stages: the
    registry's (``registry=True``) and the others."""
    where = [REGISTRY_TESTS] if registry else ["tests", f"--ignore={REGISTRY_TESTS}"]
    return pytest(*where, "-m", "not browser and not build", "-q", "--durations=15")


def kernel_server() -> kernel_forks.Server | None:
    """The server of forked kernels (tools/testing/kernel_forks.py) for the chapters'
    notebooks, preloading what every chapter imports first; None where
    POSENC_NO_KERNEL_FORKS=1 or it cannot start (the stages then start ordinary
    kernels)."""
    if os.environ.get("POSENC_NO_KERNEL_FORKS") == "1":
        return None
    notebooks = [ROOT / f"{entry}.ipynb" for entry in chapters()]
    try:
        return kernel_forks.start(kernel_forks.preloads(notebooks), python())
    except (OSError, RuntimeError) as error:
        print(f"   (ordinary kernels: {error})", flush=True)
        return None


def whole_command(
    times: dict[str, float], jobs: int, kernels: dict[str, str] | None = None
) -> list[Stage]:
    stages = []
    for k, entries in enumerate(groups(chapters(), times, jobs)):
        name = entries[0].removeprefix("book/") if len(entries) == 1 else f"g{k + 1}"
        stages += [
            nbval_stage(name, entries, kernels=kernels),
            student_stage(name, entries, kernels=kernels),
        ]
    every_nbval = [s.name for s in stages if s.name.startswith("nbval:")]
    pdf_log = shlex.quote(str(LOGS / "pdf-build.log"))
    pdf = shlex.join([python(), "-m", "tools.build.pdf"]) + f" > {pdf_log} 2>&1"
    pdf += f" || {{ tail -40 {pdf_log}; exit 1; }}; "
    pdf += shlex.join(pytest("tests/test_pdf.py", "-m", "build", "-q", "-rs"))
    stages += [
        Stage(
            "cache",
            [python(), "-m", "tools.build.nbval_cache", "--commit", str(STAGE)],
            needs=every_nbval,
        ),
        Stage(
            "build",  # the strict site build, from the cache (it executes nothing)
            pytest(
                "tests/test_notebooks.py",
                "tests/test_colab_edition.py",
                "tests/test_student_edition.py",
                "tests/test_exercises.py",
                "-m",
                "build",
                "-q",
                "-rs",
            ),  # fmt: skip
            needs=["cache"],
            env={"POSENC_EXPECT_CACHED": "1"},
        ),
        Stage("pdf", ["bash", "-c", pdf], needs=["build"]),
        # the site in Chromium, but for the PDF it serves: every page at two widths
        # (tests/test_site.py), beside the other browser tests
        Stage(
            "browser:pages",
            pytest(*BROWSER, "tests/test_site.py", "-m", "browser and not pdf"),
            needs=["build"],
            split=2,
        ),
        Stage(
            "browser:rest",
            pytest(
                *BROWSER,
                *[f for f in browser_test_files() if f != "tests/test_site.py"],
                "-m",
                "browser and not pdf",
            ),  # fmt: skip
            needs=["build"],
            split=2,
        ),
        Stage(
            "browser-pdf",  # the PDF the site serves (after the other browser tests:
            # its link check adds a probe page to the site for a moment)
            pytest(*BROWSER, *browser_test_files(), "-m", "browser and pdf"),
            needs=["pdf"],
            after=["browser:pages", "browser:rest"],
        ),
        Stage("unit:rest", unit_tests()),
        Stage("unit:registry", unit_tests(registry=True)),
        Stage(
            "train-once",  # the reuse of nbval's trainings hides no device error
            pytest("tests/test_train_once.py", "-m", "build", "-q", "-rs"),
        ),
        Stage("installs", pytest("tests/test_package.py", "-m", "build", "-q", "-rs")),
        Stage(
            "recipe", pytest("tests/test_contributing.py", "-m", "build", "-q", "-rs")
        ),
    ]
    return estimated(stages, times)


def one_chapter(
    entry: str,
    out: pathlib.Path,
    times: dict[str, float],
    kernels: dict[str, str] | None = None,
) -> list[Stage]:
    """``--chapter``: the chapter under nbval (recording its trainings), then beside
    each other its student notebook on the GPU (reusing them) and its page, strictly,
    rendered from nbval's execution (``tools/build/pages.py``, into ``out/pages``)."""
    stage, records, pages = out / "nbval", out / "train_once", out / "pages"
    nbval = nbval_stage("chapter", [entry], out / "logs", stage, records, kernels)
    student = student_stage("chapter", [entry], records, kernels)
    commit = [python(), "-m", "tools.build.nbval_cache", "--commit", str(stage)]
    commit += ["--cache", str(pages / ".jupyter_cache")]
    page = [python(), "-m", "tools.build.pages", f"{entry}.ipynb", "--out", str(pages)]
    both = shlex.join(commit) + " && " + shlex.join(page)
    page = Stage("page", ["bash", "-c", both], needs=[nbval.name])
    stages = [nbval, student, page]
    return estimated(stages, times)


def estimated(stages: list[Stage], times: dict[str, float]) -> list[Stage]:
    for stage in stages:
        kind = stage.name.split(":")[0]
        if stage.chapters:
            stage.estimate = sum(expected(times, f"{kind}:{e}") for e in stage.chapters)
        else:
            stage.estimate = expected(times, stage.name)
    return stages


# ---- the schedule --------------------------------------------------------------------


def priorities(stages: list[Stage]) -> dict[str, float]:
    """Each stage's expected seconds from its start to the end of the longest chain of
    stages that need it."""
    after: dict[str, list[str]] = {s.name: [] for s in stages}
    for s in stages:
        for need in s.needs + s.after:
            after[need].append(s.name)
    by_name = {s.name: s for s in stages}
    memo: dict[str, float] = {}

    def path(name: str) -> float:
        if name not in memo:
            memo[name] = by_name[name].estimate + max(
                (path(n) for n in after[name]), default=0.0
            )
        return memo[name]

    return {s.name: path(s.name) for s in stages}


def to_start(
    stages: list[Stage], passed: set[str], ended: set[str], free: int, rank
) -> list[Stage]:
    """The stages to start now, with their cores set: the ready ones (what they need
    passed, what they come after ended) by rank while cores are free; a stage that
    can split takes the free cores the other ready stages leave."""
    ready = sorted(
        (
            s
            for s in stages
            if s.status == "waiting"
            and set(s.needs) <= passed
            and set(s.after) <= ended
        ),
        key=lambda s: -rank[s.name],
    )
    out = []
    for k, stage in enumerate(ready):
        if free < 1:
            break
        # as many cores as it can use, but one for each other ready stage whose path
        # to the end is longer than this stage will take on them
        cores = min(stage.split, free)
        while cores > 1:
            longer = [
                o for o in ready[k + 1 :] if rank[o.name] > duration(stage, cores)
            ]
            if len(longer) <= free - cores:
                break
            cores -= 1
        stage.cores = cores
        free -= cores
        out.append(stage)
    return out


def duration(stage: Stage, cores: int | None = None) -> float:
    """Expected seconds on its cores (pytest-xdist keeps some of the work serial)."""
    return stage.estimate * (0.15 + 0.85 / (cores or stage.cores))


def simulate(stages: list[Stage], jobs: int) -> list[tuple[Stage, float, float]]:
    """(stage, start, end) as ``run`` would run them in the expected times."""
    rank = priorities(stages)
    done: set[str] = set()
    running: list[tuple[float, str]] = []
    now, plan = 0.0, []
    by_name = {s.name: s for s in stages}
    while True:
        busy = sum(by_name[n].cores for _, n in running)
        for stage in to_start(stages, done, done, jobs - busy, rank):
            stage.status = "running"
            running.append((now + duration(stage), stage.name))
            plan.append((stage, now, now + duration(stage)))
        if not running:
            break
        running.sort()
        now, name = running.pop(0)
        done.add(name)
    for stage in stages:
        stage.status = "waiting"
    return plan


def run(stages: list[Stage], jobs: int, logs: pathlib.Path, echo) -> None:
    """Run the stages on ``jobs`` cores (see the module), recording in each its
    status, cores, start, seconds and CPU seconds."""
    rank = priorities(stages)
    logs.mkdir(parents=True, exist_ok=True)
    running: dict[int, tuple[Stage, object, subprocess.Popen]] = {}
    t0 = time.time()
    while True:
        for stage in stages:  # what a failure upstream rules out
            failed = [s for s in stages if s.name in stage.needs and s.status in
                      ("failed", "skipped")]  # fmt: skip
            if stage.status == "waiting" and failed:
                stage.status = "skipped"
                echo(f"   {stage.name}: skipped ({failed[0].name} did not pass)")
        passed = {s.name for s in stages if s.status == "passed"}
        ended = {s.name for s in stages if s.status in ("passed", "failed", "skipped")}
        busy = sum(s.cores for s, _, _ in running.values())
        for stage in to_start(stages, passed, ended, jobs - busy, rank):
            log = open(logs / f"{log_name(stage.name)}.log", "w")
            env = {**os.environ, **stage.env, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(
                stage.argv(), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            stage.status, stage.start = "running", time.time() - t0
            running[proc.pid] = (stage, log, proc)  # kept: subprocess would reap it
            cores = f", {stage.cores} cores" if stage.cores > 1 else ""
            echo(f"-> {stage.start:5.0f} s  {stage.name}{cores}")
        if not running:
            break
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        stage, log, proc = running.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.close()
        stage.seconds = time.time() - t0 - stage.start
        stage.cpu = usage.ru_utime + usage.ru_stime
        passed = proc.returncode == 0
        stage.status = "passed" if passed else "failed"
        echo(f"<- {time.time() - t0:5.0f} s  {stage.name}: {stage.status}")
        if not passed:
            text = (logs / f"{log_name(stage.name)}.log").read_text(errors="replace")
            echo("\n".join(f"   | {line}" for line in text.splitlines()[-60:]))


def chapter_times(stages: list[Stage], logs: pathlib.Path) -> dict[str, float]:
    """Each chapter's seconds under nbval (its cells, from the junit files) and as a
    student notebook (from the student stages' output)."""
    out: dict[str, float] = {}
    for stage in stages:
        kind = stage.name.split(":")[0]
        path = logs / f"{log_name(stage.name)}.{'xml' if kind == 'nbval' else 'log'}"
        if kind not in ("nbval", "student") or not path.exists():
            continue
        if kind == "nbval":
            for case in ET.parse(path).iter("testcase"):
                name = case.get("classname", "").removesuffix(".ipynb")
                key = "nbval:" + name.replace(".", "/")
                out[key] = out.get(key, 0.0) + float(case.get("time", 0))
        else:
            text = path.read_text(errors="replace")
            for m in re.finditer(r"^([\d.]+) s (book/\S+) \(", text, re.M):
                out[f"student:{m.group(2)}"] = float(m.group(1))
    return {k: round(v, 1) for k, v in out.items()}


def is_chapters(key: str) -> bool:
    """A stage of chapters' cells (an nbval or student group, or one chapter's), whose
    pace is the chapters'; the others (unit, build, pdf, the browser, ...) are the
    rest of the command."""
    return key.split(":")[0] in ("nbval", "student")


def pace(
    times: dict[str, float], reference: dict[str, float], chapters: bool = True
) -> tuple[float, int]:
    """How fast the machine ran against a reference run: the median, over the chapters
    both timed, of a chapter's nbval seconds here over its seconds there (the same
    work, unless the chapter changed: the median lets a few changed chapters pass),
    and how many chapters it is the median of; ``(nan, 0)`` without any. With
    ``chapters=False``, the same over the other stages both runs timed (unit, build,
    pdf, the browser stages, ...; not the groups of chapters, whose members change):
    the rest of the command, which a shared machine's speed can move apart from the
    chapters' within one run."""
    if chapters:
        keys = [k for k in times if k.startswith("nbval:book/")]
    else:
        keys = [k for k in times if not is_chapters(k)]
    # (a stage both runs timed; one logged as 0.0 s measures no speed)
    ratios = [
        times[k] / reference[k]
        for k in keys
        if times[k] > 0 and reference.get(k, 0) > 0
    ]
    return (statistics.median(ratios), len(ratios)) if ratios else (math.nan, 0)


def at_reference_pace(
    stages: list[Stage], wall: float, paces: tuple[float, float]
) -> float:
    """The run's seconds at the reference run's pace: ``wall`` over the two paces
    (the chapters', the other stages'), each weighted by the seconds its stages took
    here; a pace that could not be measured (nan) gives way to the other."""
    chapters = sum(s.seconds or 0.0 for s in stages if is_chapters(s.name))
    rest = sum(s.seconds or 0.0 for s in stages if not is_chapters(s.name))
    weighted = [(w, p) for w, p in zip((chapters, rest), paces) if p > 0]  # not nan
    total = sum(w for w, _ in weighted)
    if not weighted or total <= 0:
        return math.nan
    return wall / (sum(w * p for w, p in weighted) / total)


def report(
    stages: list[Stage],
    jobs: int,
    wall: float,
    logs: pathlib.Path,
    echo,
    kernels_at_start: int | None = None,
):
    """The table of the stages, the pace, and torch's compile cache, printed (echo) and
    written to ``logs``: ``kernels_at_start`` is ``compile_cache.kernels()`` at the
    start of the run, so that a run which compiled what a warm cache holds says so."""

    def fmt(value):
        return "-" if value is None else f"{value:.0f}"

    order = sorted(stages, key=lambda s: (s.start is None, s.start or 0, s.name))
    width = max(len(s.name) for s in stages)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    times = {s.name: round(s.seconds, 1) for s in stages if s.status == "passed"}
    times = {**times, **chapter_times(stages, logs)}
    # the machine's pace against the committed run (the same chapters' nbval cells,
    # and the other stages): on a shared machine it moves the total by more than most
    # changes do, and not always the chapters' and the rest's alike in one run
    try:
        committed = json.loads(COMMITTED.read_text())
        then = committed["expected"]
        (speed, count), (other, others) = pace(times, then), pace(times, then, False)
    except (OSError, ValueError, KeyError):
        committed, then, speed, count, other, others = {}, {}, math.nan, 0, math.nan, 0

    def against(s):  # a stage's seconds over the committed run's (not the groups')
        was = then.get(s.name, 0) if not is_chapters(s.name) else 0
        return f"{s.seconds / was:.2f}" if s.seconds and was > 0 else "-"

    echo(f"\n== the stages, {jobs} at a time (CPU: user + system of its processes;")
    echo(f"   x then: its seconds over the committed run's)")
    echo(
        f"   {'stage':<{width}}  {'start':>5}  {'seconds':>7}  {'CPU':>5}  "
        f"{'x then':>6}  result"
    )
    for s in order:
        cores = f" ({s.cores} cores)" if s.cores > 1 else ""
        echo(
            f"   {s.name:<{width}}  {fmt(s.start):>5}  {fmt(s.seconds):>7}  "
            f"{fmt(s.cpu):>5}  {against(s):>6}  {s.status}{cores}"
        )
    echo(f"   {'all':<{width}}  {'':>5}  {wall:>7.0f}  (load average now: {load})")
    at_then = at_reference_pace(stages, wall, (speed, other))
    if count or others:
        echo(
            f"   pace against the committed run ({COMMITTED.relative_to(ROOT)}, "
            f"{committed.get('date')}): the chapters' nbval cells took "
            + (f"{speed:.2f} x their time there (median of {count} chapters)"
               if count else "no time both runs measured")
            + ", the other stages "
            + (f"{other:.2f} x (median of {others})" if others else "none both ran")
            + f"; at that run's pace, {at_then:.0f} s"
        )  # fmt: skip
    kernels_at_end = compile_cache.kernels()
    if kernels_at_start is not None:
        compiled = kernels_at_end - kernels_at_start
        echo(
            f"   torch's compile cache ({compile_cache.directory()}), C++ kernels: "
            f"{kernels_at_start} at the start, {kernels_at_end} at the end"
            + (
                f"; this run compiled {compiled} that were not cached (in its "
                "stages' times)"
                if compiled > 0
                else ""
            )
        )
    rows = [
        {
            "stage": s.name,
            "status": s.status,
            "cores": s.cores,
            "start": s.start and round(s.start, 1),
            "seconds": s.seconds and round(s.seconds, 1),
            "cpu": s.cpu and round(s.cpu, 1),
            "expected": round(s.estimate, 1),
        }
        for s in order
    ]
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "jobs": jobs,
        "cores": os.cpu_count(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(wall, 1),
        "pace": round(speed, 3) if count else None,  # see above: the chapters'
        "pace_other_stages": round(other, 3) if others else None,  # and the rest's
        "at_committed_pace": round(at_then, 1) if count or others else None,
        "compile_cache": {
            "kernels_at_start": kernels_at_start,
            "kernels_at_end": kernels_at_end,
        },
        "stages": rows,
        # what the next run schedules by (a stage that did not pass keeps the time
        # of the run before)
        "expected": {**last_times(logs), **times},
    }
    (logs / "stages.json").write_text(json.dumps(summary, indent=1) + "\n")
    with open(logs / "stages.tsv", "w") as f:
        f.write("\t".join(rows[0]) + "\n")
        for r in rows:
            f.write("\t".join("" if v is None else str(v) for v in r.values()) + "\n")
    echo(f"   (also in {logs / 'stages.json'} and stages.tsv)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chapter", help="one chapter, e.g. book/part3/alibi")
    parser.add_argument(
        "--plan", action="store_true", help="print the plan, run nothing"
    )
    args = parser.parse_args(argv)
    jobs = max(1, args.jobs)
    logs, out = LOGS, BUILD / "chapter"
    server = None if args.plan else kernel_server()
    kernels = server.env() if server else None
    try:
        return _main(args, parser, jobs, logs, out, kernels)
    finally:
        if server:
            cpu = server.stop()
            if cpu is not None:  # not in the stages' CPU column: not their children
                print(f"   the forked kernels' CPU: {cpu:.0f} s", flush=True)


def tracked_files(root: pathlib.Path = ROOT) -> dict[str, str]:
    """Each file git tracks in ``root`` and a digest of its content (``{}`` outside a
    git checkout); a deleted file's digest is ``"deleted"``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return {}
    digests = {}
    for name in filter(None, listed.split("\0")):
        path = root / name
        digests[name] = (
            hashlib.sha256(path.read_bytes()).hexdigest()
            if path.is_file()
            else "deleted"
        )
    return digests


def rewritten(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The tracked files whose content the run changed."""
    return sorted(
        n for n in before.keys() | after.keys() if before.get(n) != after.get(n)
    )


def _main(args, parser, jobs, logs, out, kernels) -> int:
    if args.chapter:
        entry = args.chapter.removesuffix(".ipynb")
        if entry not in chapters():
            parser.error(f"{entry} is not a chapter of _toc.yml")
        logs = out / "logs"
        stages = one_chapter(entry, out, last_times(logs), kernels)
    else:
        stages = whole_command(last_times(), jobs, kernels)

    def echo(line: str) -> None:
        print(line, flush=True)

    if args.plan:
        plan = simulate(stages, jobs)
        echo(f"the expected schedule on {jobs} core(s) (seconds):")
        for stage, begin, end in sorted(plan, key=lambda p: (p[1], p[0].name)):
            cores = f" ({stage.cores} cores)" if stage.cores > 1 else ""
            echo(f"  {begin:5.0f} -> {end:5.0f}  {stage.name}{cores}")
        echo(f"  end: {max(end for _, _, end in plan):.0f} s")
        return 0
    start, tracked = time.time(), tracked_files()
    if args.chapter:  # the page's build stays: the next run of it is incremental
        for path in (out / "nbval", out / "train_once"):
            shutil.rmtree(path, ignore_errors=True)
    else:  # every chapter is executed by this run
        for path in (RECORDS, STAGE, BUILD / ".jupyter_cache"):
            shutil.rmtree(path, ignore_errors=True)
        (BUILD / ".cache-library-hash").unlink(missing_ok=True)
    echo(f"== {len(stages)} stages, {jobs} at a time; each stage's output: {logs}/")
    cached = compile_cache.kernels()  # torch's compile cache: cold or warm
    run(stages, jobs, logs, echo)
    report(stages, jobs, time.time() - start, logs, echo, cached)
    return verdict(stages, tracked, start, logs, echo)


def verdict(stages, tracked, start, logs, echo, root: pathlib.Path = ROOT) -> int:
    """0 when every stage passed and no tracked file of ``root`` changed since
    ``tracked`` (``tracked_files`` at the start), else 1, saying why."""
    failed = [s.name for s in stages if s.status != "passed"]
    if failed:
        echo(f"!! did not pass: {', '.join(failed)} (their logs: {logs}/)")
        return 1
    changed = rewritten(tracked, tracked_files(root))
    if changed:
        echo(
            f"!! {len(changed)} tracked file(s) changed during the run:"
            f" {', '.join(changed)}. The stages write only under _build/: a committed"
            " generated file was stale (run .venv/bin/python -m tools.build.generated"
            " and commit what it writes), or a file was edited meanwhile"
        )
        return 1
    echo(f"== all tests passed in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

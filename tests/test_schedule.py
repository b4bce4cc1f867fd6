"""The test command's scheduler (tools/build/schedule.py): every stage of the command
is planned, each after what it needs, on any number of cores; a failed stage skips
what needs it and nothing else; the stage times are logged for the next run."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tools import toc
from tools.build import schedule


def stages(jobs: int) -> list[schedule.Stage]:
    return schedule.whole_command({}, jobs)


@pytest.mark.parametrize("jobs", [1, 2, 4, 16])
def test_every_chapter_and_stage_is_planned_after_what_it_needs(jobs):
    plan = {
        s.name: (begin, end) for s, begin, end in schedule.simulate(stages(jobs), jobs)
    }
    every = stages(jobs)
    assert set(plan) == {s.name for s in every}
    chapters = [e for s in every if s.name.startswith("nbval:") for e in s.chapters]
    assert chapters == list(toc.notebook_entries())  # each once, in book order
    students = [e for s in every if s.name.startswith("student:") for e in s.chapters]
    assert students == chapters
    for stage in every:
        for need in stage.needs + stage.after:
            assert plan[stage.name][0] >= plan[need][1], (stage.name, need)
    assert {"cache", "build", "pdf", "browser:pages", "browser:rest", "browser-pdf",
            "unit:rest", "unit:registry", "train-once", "installs",
            "recipe"} <= set(plan)  # fmt: skip
    ends = [end for _, end in plan.values()]
    busy = sum(end - begin for begin, end in plan.values())
    if jobs == 1:
        assert max(ends) == pytest.approx(busy)  # one after another
    else:  # the cores kept busy, or the longest chain of stages the limit
        chain = max(schedule.priorities(every).values())
        assert max(ends) < 1.2 * max(busy / jobs, chain)


def test_more_cores_never_plan_a_longer_run():
    ends = [max(e for _, _, e in schedule.simulate(stages(j), j)) for j in (1, 2, 4, 8)]
    assert ends == sorted(ends, reverse=True)


def run(tmp_path, plan: list[schedule.Stage], jobs: int = 2) -> list[str]:
    said = []
    schedule.run(plan, jobs, tmp_path, said.append)
    schedule.report(plan, jobs, 1.0, tmp_path, said.append)
    return said


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_failed_stage_skips_what_needs_it_and_nothing_else(tmp_path):
    plan = [
        schedule.Stage("a", py("import sys; print('a says'); sys.exit(3)")),
        schedule.Stage("b", py("pass"), needs=["a"]),
        schedule.Stage("c", py("pass"), after=["a"]),
        schedule.Stage("d", py("pass")),
    ]
    said = "\n".join(run(tmp_path, plan))
    assert [s.status for s in plan] == ["failed", "skipped", "passed", "passed"]
    assert "a says" in said  # the failed stage's output is shown
    assert (tmp_path / "a.log").read_text().strip() == "a says"


def test_the_stage_times_are_logged_for_the_next_run(tmp_path):
    plan = [
        schedule.Stage("nbval:g1", py("import time; time.sleep(0.2)")),
        schedule.Stage("cache", py("pass"), needs=["nbval:g1"]),
    ]
    said = run(tmp_path, plan, jobs=1)
    log = json.loads((tmp_path / "stages.json").read_text())
    assert [r["stage"] for r in log["stages"]] == ["nbval:g1", "cache"]
    assert log["expected"]["nbval:g1"] >= 0.2
    assert all(r["status"] == "passed" and r["cpu"] is not None for r in log["stages"])
    assert (tmp_path / "stages.tsv").read_text().splitlines()[0].startswith("stage\t")
    assert any(line.lstrip().startswith("nbval:g1") for line in said)  # the table
    assert schedule.last_times(tmp_path)["nbval:g1"] == log["expected"]["nbval:g1"]


def test_a_stage_that_can_split_takes_the_cores_the_others_leave():
    plan = [
        schedule.Stage("browser", ["x"], split=4),
        schedule.Stage("pdf", ["x"]),
    ]
    for stage in plan:
        stage.estimate = 100.0
    rank = schedule.priorities(plan)
    started = schedule.to_start(plan, set(), set(), 4, rank)
    assert {s.name: s.cores for s in started} == {"browser": 3, "pdf": 1}
    assert plan[0].argv()[-4:] == ["-n", "3", "--dist", "load"]


def test_a_run_that_rewrites_a_tracked_file_fails_naming_it(tmp_path):
    """The site build rewrites the generated files before it builds: in a clean clone
    whose committed chapter index was stale, the unit test then read the rewritten
    one and passed. The command compares the tracked files before and after."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "index.md").write_text("old\n")
    (repo / "ignored.txt").write_text("not tracked\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for command in (["init", "-q"], ["add", "index.md"], ["commit", "-qm", "one"]):
        subprocess.run(git + command, check=True)
    before = schedule.tracked_files(repo)
    assert list(before) == ["index.md"]
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('new\\n')"
    for target, code in (("ignored.txt", 0), ("index.md", 1)):
        plan = [schedule.Stage("build", py(write) + [str(repo / target)])]
        said = run(tmp_path, plan)
        got = schedule.verdict(plan, before, 0.0, tmp_path, said.append, root=repo)
        assert got == code, said
    assert "1 tracked file(s) changed during the run: index.md" in said[-1]
    assert "tools.build.generated" in said[-1]  # and what to run


def test_every_browser_test_is_in_a_file_the_browser_stages_collect(request):
    """The browser stages collect only ``browser_test_files()``; every test marked
    ``browser`` that this session deselected (the unit stages deselect them all:
    tests/conftest.py keeps them) is in one of them."""
    files = set(schedule.browser_test_files())
    marked = {
        item.path.relative_to(schedule.ROOT).as_posix()
        for item in getattr(request.config, "posenc_deselected", [])
        if item.get_closest_marker("browser") or item.get_closest_marker("pdf")
    }
    assert marked <= files, marked - files
    assert "tests/test_site.py" in files and "tests/test_schedule.py" not in files


def test_the_pace_is_the_median_ratio_of_the_chapters_both_runs_timed():
    """The machine's pace against the committed run: the median of the chapters'
    ratios, so one changed chapter does not move it; stages and chapters only one
    run timed are left out."""
    reference = {"nbval:book/a": 10.0, "nbval:book/b": 20.0, "nbval:book/c": 5.0,
                 "nbval:book/gone": 3.0, "unit": 100.0}  # fmt: skip
    here = {"nbval:book/a": 12.0, "nbval:book/b": 24.0, "nbval:book/c": 50.0,
            "nbval:book/new": 9.0, "unit": 300.0}  # fmt: skip
    assert schedule.pace(here, reference) == (pytest.approx(1.2), 3)
    del here["nbval:book/c"]
    assert schedule.pace(here, reference) == (pytest.approx(1.2), 2)
    speed, count = schedule.pace({"unit": 1.0}, reference)
    assert count == 0 and math.isnan(speed)


def test_the_other_stages_have_a_pace_of_their_own():
    """The rest of the command (unit, build, pdf, ...) against the committed run: the
    median of its stages' ratios; the groups of chapters are not among them (their
    members change), nor a stage only one run timed."""
    reference = {"unit": 100.0, "pdf": 200.0, "build": 50.0, "nbval:g1": 10.0,
                 "student:g1": 10.0, "nbval:book/a": 10.0, "gone": 5.0,
                 "cache": 2.5}  # fmt: skip
    here = {"unit": 90.0, "pdf": 180.0, "build": 100.0, "nbval:g1": 30.0,
            "student:g1": 30.0, "nbval:book/a": 13.0, "recipe": 60.0,
            "cache": 0.0}  # fmt: skip
    # (cache logged as 0.0 s: no measure of speed, left out)
    assert schedule.pace(here, reference, chapters=False) == (pytest.approx(0.9), 3)
    assert schedule.pace(here, reference) == (pytest.approx(1.3), 1)


def test_the_total_at_the_reference_pace_weighs_each_pace_by_its_stages():
    """A run whose chapters ran 1.5 x slower and whose other stages ran as fast as
    the reference run, half of its stage-seconds each: at the reference pace it takes
    the wall over 1.25; with one pace unmeasured, the other alone."""
    done = [
        schedule.Stage("nbval:g1", [], seconds=300.0),
        schedule.Stage("student:g1", [], seconds=100.0),
        schedule.Stage("unit", [], seconds=400.0),
    ]
    assert schedule.at_reference_pace(done, 500.0, (1.5, 1.0)) == pytest.approx(400)
    assert schedule.at_reference_pace(done, 500.0, (1.25, math.nan)) == 400
    assert math.isnan(schedule.at_reference_pace(done, 500.0, (math.nan, math.nan)))


def test_the_report_gives_the_pace_against_the_committed_run(tmp_path, monkeypatch):
    committed = tmp_path / "committed.json"
    committed.write_text(
        json.dumps({"date": "then", "expected": {"nbval:book/a": 1.0}})
    )
    monkeypatch.setattr(schedule, "COMMITTED", committed)
    monkeypatch.setattr(schedule, "ROOT", tmp_path)
    monkeypatch.setattr(schedule, "chapter_times", lambda *a: {"nbval:book/a": 1.5})
    plan = [schedule.Stage("nbval:g1", py("pass"))]
    said = run(tmp_path, plan)
    assert any(
        "took 1.50 x" in line and "that run's pace, 1 s" in line for line in said
    )
    assert json.loads((tmp_path / "stages.json").read_text())["pace"] == 1.5


def test_the_report_says_how_warm_torchs_compile_cache_was(tmp_path, monkeypatch):
    """A machine without torch's compile cache compiles every kernel in the run (the
    unit stages' time doubles or more here): the report says how many kernels the
    cache held at the start and the end, so that such a run is told from a slow one."""
    cache = tmp_path / "inductor"
    (cache / "ab").mkdir(parents=True)
    (cache / "ab" / "cached.so").touch()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    compiles = f"open({str(cache / 'ab' / 'new.so')!r}, 'w').close()"
    plan = [schedule.Stage("unit", py(compiles))]
    logs = tmp_path / "logs"
    logs.mkdir()
    said = []
    at_start = schedule.compile_cache.kernels()
    schedule.run(plan, 1, logs, said.append)
    schedule.report(plan, 1, 1.0, logs, said.append, at_start)
    line = next(line for line in said if "compile cache" in line)
    assert str(cache) in line
    assert "1 at the start, 2 at the end; this run compiled 1" in line
    log = json.loads((logs / "stages.json").read_text())
    assert log["compile_cache"] == {"kernels_at_start": 1, "kernels_at_end": 2}


def test_the_two_unit_stages_run_every_unit_test_once():
    """``unit:rest`` and ``unit:registry`` together collect every test file, each in
    one of them, with make test-quick's selection of marks."""
    stages = {s.name: s.command for s in schedule.whole_command({}, 2)}
    every = {p.relative_to(schedule.ROOT).as_posix()
             for p in (schedule.ROOT / "tests").glob("test_*.py")}  # fmt: skip
    collected = []
    for name in ("unit:rest", "unit:registry"):
        args = stages[name][stages[name].index("pytest") + 1 :]
        ignored = {
            a.removeprefix("--ignore=") for a in args if a.startswith("--ignore=")
        }
        files = set()
        for where in (a for a in args if a.startswith("tests")):
            found = {f for f in every if f == where or f.startswith(where + "/")}
            files |= found - ignored
        collected.append(files)
        assert args[args.index("-m") + 1] == "not browser and not build", name
    rest, registry = collected
    assert rest | registry == every and not rest & registry
    assert registry == {schedule.REGISTRY_TESTS}

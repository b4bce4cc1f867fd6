"""The publishing workflow (.github/workflows/publish.yml) is one GitHub Actions accepts
and does what the README says: on a push to main it runs the test command, which
builds the site and its PDF, deploys the built site to GitHub Pages and pushes the
Colab edition to branch colab.

The schema check is check-jsonschema's copy of GitHub's workflow schema (offline);
the rest reads the workflow as data.
"""

from __future__ import annotations

import fnmatch
import pathlib
import re
import subprocess
import sys

import yaml

from tools.build import publish_colab

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PUBLISH = ROOT / ".github" / "workflows" / "publish.yml"


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def uses(job: dict, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


def test_every_workflow_validates_against_githubs_schema():
    assert PUBLISH in WORKFLOWS
    check = pathlib.Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(check), "--builtin-schema", "vendor.github-workflows", *WORKFLOWS],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_has_teeth(tmp_path):
    """A misspelt key (runs_on) fails the same check."""
    bad = tmp_path / "bad.yml"
    bad.write_text(PUBLISH.read_text().replace("runs-on:", "runs_on:", 1))
    check = pathlib.Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(check), "--builtin-schema", "vendor.github-workflows", str(bad)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0


def test_a_push_to_main_tests_builds_and_publishes_the_course():
    flow = yaml.safe_load(PUBLISH.read_text())
    on = flow[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["push"]["branches"] == ["main"]
    assert flow["permissions"] == {"contents": "read"}, "least privilege by default"
    build, deploy = flow["jobs"]["build"], flow["jobs"]["deploy"]
    runs = [s.get("run", "") for s in steps(build)]
    # the test command (.ci/run: make test) builds the site, then the PDF into it
    test_step = next(i for i, r in enumerate(runs) if r.strip() == ".ci/run")
    upload = uses(build, "actions/upload-pages-artifact")
    assert len(upload) == 1 and upload[0]["with"]["path"] == "_build/html"
    assert steps(build).index(upload[0]) > test_step, "the site is tested first"
    assert any("_build/html/positional-encoding-course.pdf" in r for r in runs)
    # the Colab edition, on the branch the Colab buttons open (_config.yml)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"]["colab_branch"] == publish_colab.BRANCH
    colab = flow["jobs"]["colab"]
    assert colab["needs"] == "build", "pushed only once every test has passed"
    assert any(
        "tools.build.publish_colab --push" in s.get("run", "") for s in steps(colab)
    )
    # GitHub Pages: deploy-pages after the build, with the permissions it needs
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert len(uses(deploy, "actions/deploy-pages")) == 1


def test_only_the_push_of_branch_colab_may_write_and_the_tests_hold_no_token():
    """The test command runs the whole course's code: its job has a read-only token,
    not kept in the checkout. Only the job that pushes branch colab may write
    (``contents`` alone), and it runs nothing but that push."""
    flow = yaml.safe_load(PUBLISH.read_text())
    jobs = flow["jobs"]
    writers = {
        name: job["permissions"]
        for name, job in jobs.items()
        if "write" in job.get("permissions", {}).values()
    }
    assert writers == {
        "colab": {"contents": "write"},
        "deploy": {"pages": "write", "id-token": "write"},
    }
    build = jobs["build"]
    assert build["permissions"] == {"contents": "read"}
    for step in uses(build, "actions/checkout"):
        assert step.get("with", {}).get("persist-credentials") is False
    # the colab job runs only the push, on the edition the tested build made
    runs = [s["run"] for s in steps(jobs["colab"]) if "run" in s]
    assert [r for r in runs if "python" in r] == [
        r for r in runs if "python -m tools.build.publish_colab --push origin" in r
    ]
    assert ".ci/run" not in "".join(runs) and "make" not in "".join(runs)
    handed = uses(build, "actions/upload-artifact")
    taken = uses(jobs["colab"], "actions/download-artifact")
    assert len(handed) == len(taken) == 1
    assert handed[0]["with"]["name"] == taken[0]["with"]["name"]
    assert taken[0]["with"]["path"] == "_build/colab"


def test_the_answer_key_never_leaves_the_build():
    """The instructor edition (``_build/colab/posenc-instructor-notebooks.zip``, the
    answer key) is not in the artifact handed to the colab job (an artifact of a
    public repository can be downloaded), and ``publish_colab`` would not push it
    (``tests/test_publish_colab.py``)."""
    from tools.build.colab_edition import INSTRUCTOR_ZIP

    flow = yaml.safe_load(PUBLISH.read_text())
    (handed,) = uses(flow["jobs"]["build"], "actions/upload-artifact")
    paths = handed["with"]["path"].split()
    assert "_build/colab" in paths
    excluded = [p[1:] for p in paths if p.startswith("!")]
    assert any(fnmatch.fnmatch(f"_build/colab/{INSTRUCTOR_ZIP}", p) for p in excluded)


# The current major version of each action the workflow uses (as of November 2026:
# the tags of each action's repository); GitHub retires the older ones' runtimes.
CURRENT_MAJOR = {
    "actions/cache": 5,
    "actions/checkout": 7,
    "actions/setup-python": 7,
    "actions/upload-artifact": 7,
    "actions/download-artifact": 8,
    "actions/upload-pages-artifact": 5,
    "actions/deploy-pages": 5,
}


def test_every_action_is_at_its_current_major_version():
    flow = yaml.safe_load(PUBLISH.read_text())
    used = [
        s["uses"] for job in flow["jobs"].values() for s in steps(job) if "uses" in s
    ]
    assert used
    for ref in used:
        action, _, version = ref.partition("@")
        assert action in CURRENT_MAJOR, f"{action}: which major version is current?"
        assert version == f"v{CURRENT_MAJOR[action]}", (
            f"{ref}: the current major version is v{CURRENT_MAJOR[action]}"
        )


def test_the_fresh_installs_take_torch_from_the_cpu_index_the_workflow_uses():
    """PyPI's torch for Linux brings several GB of CUDA libraries, more than a GitHub
    runner's disk spares: the workflow installs a CPU build first, and the fresh
    environments of ``tests/test_package.py`` (run by the test command) take theirs
    from the same CPU index."""
    from tests import test_package

    text = PUBLISH.read_text()
    index = re.search(r"--index-url (\S+)", text)
    assert index and index.group(1).rstrip("/").endswith("/whl/cpu")
    assert test_package.CPU_TORCH_INDEX == index.group(1)
    source = (ROOT / "tests" / "test_package.py").read_text()
    assert "pip(torch_pin, *torch_index())" in source
    cpu = ["--extra-index-url", test_package.CPU_TORCH_INDEX]
    assert test_package.torch_index(lambda url: True) == cpu
    assert test_package.torch_index(lambda url: False) == []  # pip's own sources


def test_the_workflow_runs_what_the_repository_has():
    text = PUBLISH.read_text()
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run is executable"
    for module in ("tools.build.publish_colab",):
        assert module in text
        assert (ROOT / (module.replace(".", "/") + ".py")).exists()
    # the torch the workflow installs first is the one requirements.txt pins
    pin = next(
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    assert pin in text


def test_the_test_command_starts_with_the_compiled_kernels_of_earlier_runs():
    """The unit tests compile a few hundred graphs: the workflow restores torch's
    compile cache (and saves it after the run) where the test command looks for it."""
    build = steps(yaml.safe_load(PUBLISH.read_text())["jobs"]["build"])
    names = [s.get("uses", s.get("run", "")) for s in build]
    cache = next(s for s in build if s.get("uses", "").startswith("actions/cache@"))
    command = next(s for s in build if s.get("run", "").strip() == ".ci/run")
    assert build.index(cache) < build.index(command), names
    assert command["env"]["TORCHINDUCTOR_CACHE_DIR"] == cache["with"]["path"]
    assert "requirements.txt" in cache["with"]["key"]  # a new torch: a new cache
    assert "posenc_lib/**" in cache["with"]["key"]

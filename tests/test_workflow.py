"""The publishing workflow (.github/workflows/publish.yml) is one GitHub Actions accepts
and does what the README says: on a push to main it runs the test command, which
builds the site and its PDF, deploys the built site to GitHub Pages and pushes the
Colab edition to branch colab.

The schema check is check-jsonschema's copy of GitHub's workflow schema (offline);
the rest reads the workflow as data.
"""

from __future__ import annotations

import pathlib
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
    push = [i for i, r in enumerate(runs) if "tools.build.publish_colab --push" in r]
    assert push and push[0] > test_step
    assert build["permissions"] == {"contents": "write"}, "to push branch colab"
    # GitHub Pages: deploy-pages after the build, with the permissions it needs
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert len(uses(deploy, "actions/deploy-pages")) == 1


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

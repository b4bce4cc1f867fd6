"""The Colab install cell changes nothing Colab already has.

Every chapter's first cell runs ``pip install "posenc_lib[course] @ git+..."`` inside
Colab (``tools/authoring/colab_cell.py``). Colab pins its own packages (IPython 7.34
and traitlets 5.7 among them); replacing one of them under a running kernel can break
the runtime, so the course must install nothing Colab already has at a version that
works.

The test resolves that install as pip would inside Colab: an empty environment in
which every package of Colab's ``pip freeze`` (``tests/colab/pip-freeze.txt``, with
its source) is installed as a stub of its name and version, and pip asked for the
course, built from this checkout, for Colab's Python and platform (``--dry-run
--report``: pip reads the packages' metadata from the package index, downloads no
wheel and installs nothing). It fails when pip would install any package Colab
pins, naming the version Colab has and the one pip would bring.

It needs the package index that pip uses by default: without it the test skips and
says so.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import venv

import pytest
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
FREEZE = ROOT / "tests" / "colab" / "pip-freeze.txt"
# Colab's machine (os-info.txt of the freeze's commit: Ubuntu 22.04, glibc 2.35)
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]


def colab_python() -> str:
    found = re.search(r"^# colab-python: (\S+)", FREEZE.read_text(), re.M)
    assert found, f"{FREEZE} names no Colab Python version"
    return found.group(1)


def colab_packages() -> dict[str, tuple[str, str]]:
    """Canonical name -> (name, version) of every line of Colab's freeze; a direct
    URL (``torch @ https://.../torch-2.11.0%2Bcpu-...whl``) gives the version in its
    file name (a local ``+cpu`` dropped: the package index has the same release)."""
    found = {}
    for line in FREEZE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if " @ " in line:
            name, url = (part.strip() for part in line.split(" @ ", 1))
            stem = re.sub(r"%2B", "+", url.rsplit("/", 1)[-1])
            version = re.match(r"[^-]+-([0-9][^-]*?)(?:\.tar\.gz|-|$)", stem)
            version = version.group(1).split("+")[0] if version else "0"
        else:
            name, version = line.split("==", 1)
        found[canonicalize_name(name)] = (name, version)
    return found


def pip_env() -> dict[str, str]:
    """pip as Colab runs it: its default index (or ``PIP_INDEX_URL``, a mirror of it),
    without this machine's configuration files, local wheel folders, extra indexes
    or constraints."""
    keep = {"PIP_INDEX_URL", "PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST"}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PIP_") or key in keep
    }
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        PIP_DEFAULT_TIMEOUT="30",
    )
    return env


def pip(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=pip_env(),
        timeout=900,
    )


def colab_like_environment(path: pathlib.Path) -> pathlib.Path:
    """A virtual environment holding, for each package of Colab's freeze, the
    metadata of that version (what pip reads to decide what is installed); its
    Python."""
    venv.create(path, with_pip=False)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name, version in colab_packages().values():
        info = pathlib.Path(site) / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text("")
    return python


def test_the_freeze_is_colabs_and_names_its_source():
    text = FREEZE.read_text()
    assert "googlecolab/backend-info" in text and re.search(
        r"commit [0-9a-f]{40}", text
    )
    packages = colab_packages()
    assert len(packages) > 500
    assert packages["ipython"] == ("ipython", "7.34.0")
    assert packages["torch"][1] == "2.11.0"  # from the wheel's URL


def test_the_colab_install_changes_no_package_colab_pins(tmp_path, library_wheel):
    probe = pip("index", "versions", "ipython", cwd=tmp_path)
    if probe.returncode != 0:
        last = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["?"]
        pytest.skip(
            "the package index is unreachable, so Colab's install cannot be "
            f"resolved here (pip index versions ipython: {last[0]})"
        )
    colab = colab_packages()
    python = colab_like_environment(tmp_path / "colab")
    wheel = library_wheel  # built by pip from this checkout (tests/conftest.py)
    report = tmp_path / "report.json"
    # what the Colab cell installs: posenc_lib with the extras its URL names
    from tools.authoring.colab_cell import canonical_source

    extras = re.search(r"posenc_lib\[([^\]]*)\] @", canonical_source())
    assert extras, "the Colab cell installs no posenc_lib[...]"
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    done = pip(
        "--python", str(python), "install", "--dry-run", "--quiet",
        "--report", str(report), "--only-binary=:all:",
        "--python-version", colab_python(), *platforms,
        f"posenc_lib[{extras.group(1)}] @ {wheel.as_uri()}",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    installs = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "posenc_lib" in {n.replace("-", "_") for n in installs}
    changed = {
        f"{colab[name][0]} {colab[name][1]} -> {version}"
        for name, version in installs.items()
        if name in colab
    }
    assert not changed, (
        "the Colab cell would replace packages Colab pins: "
        + ", ".join(sorted(changed))
    )

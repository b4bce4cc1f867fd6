"""The course's wheelhouse: what a GPU box without a package registry lacks.

    make wheels [WHEELS=DIR] [WHEELS_PYTHON=3.12]        # where PyPI is reachable
    python -m tools.build.wheels download DIR --python 3.12
    python -m tools.build.wheels install DIR TARGET  # on the box (make test-gpu does)

``make test-gpu`` needs, beside torch with CUDA, numpy, matplotlib, sympy and tqdm
(which a GPU box has; their wheels alone weigh over 100 MiB), what runs the chapters
under nbval and the tests: ``NEEDED`` below, with everything they depend on.

``download`` resolves them for the box's Python (``--python``, default 3.12) on x86-64
Linux, binary wheels only (``pip download --only-binary=:all: --python-version ...
--platform manylinux...``), at the versions of the environment that runs it (its
``pip freeze`` as constraints: the versions the test command passes with), into DIR,
and refuses a wheelhouse over ``LIMIT_MIB`` (what travels to the box with the
repository is limited).

``install`` puts into TARGET (a folder for ``PYTHONPATH``) every wheel of DIR whose
distribution the running Python lacks, with ``pip install --no-index --no-deps``:
nothing is fetched, and the box keeps its own copy of what it has (a second version
of a package on the path would shadow its own), which it names.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tempfile

# what the GPU run imports beyond torch, numpy, matplotlib, sympy and tqdm: the
# notebook runner and its kernel, the chapters' interactive figures, the test runner
# on several workers, and PyYAML (tools/toc.py reads _toc.yml)
NEEDED = [
    "nbval", "nbclient", "ipykernel", "plotly", "narwhals", "pytest", "pytest-xdist",
    "pyyaml",
]  # fmt: skip
LIMIT_MIB = 40
PLATFORMS = [
    "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
    "manylinux_2_5_x86_64", "manylinux1_x86_64",
]  # fmt: skip


def normalize(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: pathlib.Path) -> str:
    """``pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl`` -> ``pyzmq``."""
    return normalize(path.name.split("-", 1)[0])


def installed() -> dict[str, str]:
    """Every distribution the running Python finds: normalized name -> version."""
    return {
        normalize(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions()
        if d.metadata["Name"]
    }


def plan(wheels: list[pathlib.Path], have: dict[str, str]):
    """``(to install, kept)``: the wheels whose distribution is missing, and
    ``(wheel, version there)`` for those the Python has already."""
    missing = [w for w in wheels if wheel_name(w) not in have]
    kept = [(w, have[wheel_name(w)]) for w in wheels if wheel_name(w) in have]
    return missing, kept


def install(folder: pathlib.Path, target: pathlib.Path) -> int:
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        print(f"no wheels in {folder}: make wheels writes them", file=sys.stderr)
        return 1
    missing, kept = plan(wheels, installed())
    for wheel, version in kept:
        print(f"  kept this Python's {wheel_name(wheel)} {version} ({wheel.name})")
    if missing:
        target.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
            "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target),
            *map(str, missing),
        ]  # fmt: skip
        subprocess.run(command, check=True)
    print(f"installed {len(missing)} wheel(s) into {target}, kept {len(kept)}")
    return 0


def constraints() -> str:
    """This environment's versions (``pip freeze``), editable installs and torch
    left out."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    lines = [
        line for line in frozen.splitlines()
        if "==" in line and not line.startswith(("-e", "torch=="))
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def download(folder: pathlib.Path, python: str) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write(constraints())
    command = [
        sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
        "--python-version", python, "--implementation", "cp",
        "--abi", "cp" + python.replace(".", ""), "--abi", "abi3", "--abi", "none",
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "--platform", "any", "-c", pins.name, "-d", str(folder), *NEEDED,
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True)
    finally:
        pathlib.Path(pins.name).unlink()
    wheels = sorted(folder.glob("*.whl"))
    names = [wheel_name(w) for w in wheels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # an older download in DIR: one version of each, or the box has two
        print(f"{folder} holds two versions of {twice}: empty it first")
        return 1
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {mib:.1f} MiB, for Python {python}, in {folder}")
    if mib > LIMIT_MIB:
        print(f"over {LIMIT_MIB} MiB: too large to travel with the repository")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    get = verbs.add_parser("download", help="write the wheelhouse (needs PyPI)")
    get.add_argument("folder", type=pathlib.Path)
    get.add_argument("--python", default="3.12", help="the box's Python (3.12)")
    put = verbs.add_parser("install", help="install it, offline, into a folder")
    put.add_argument("folder", type=pathlib.Path)
    put.add_argument("target", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.verb == "download":
        if not re.fullmatch(r"3\.\d+", args.python):
            parser.error(f"--python must be like 3.12, got {args.python!r}")
        return download(args.folder.resolve(), args.python)
    return install(args.folder.resolve(), args.target.resolve())


if __name__ == "__main__":
    sys.exit(main())

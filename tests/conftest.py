import fcntl
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tools.testing import compile_cache

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the browser tests' fixtures (server, browser, open_page): see tests/browser.py
pytest_plugins = ["tests.browser"]

# torch.compile's kernels cached without this environment's folder in their keys, so a
# clean clone (a new .venv) finds the kernels an earlier run compiled with this torch;
# applied when a test first imports torch's compiler (a process that runs notebooks in
# their kernels imports neither torch nor its compiler)
compile_cache.apply_on_import()


@pytest.fixture(autouse=True)
def _seed_and_threads(request):
    """Every test starts from the same seed, single-threaded (stable on 2-core
    machines). A notebook's cells (nbval's items) take no fixture, and a test marked
    ``kernels`` runs notebooks in kernels of their own: they seed themselves, and the
    test process then imports no torch."""
    if request.node.get_closest_marker("kernels"):
        yield
        return
    import torch

    if torch.accelerator.is_available():
        torch.manual_seed(0)  # the CPU's generator and the device's
    else:
        # the only generator there is: torch.manual_seed would also queue a seed for
        # each absent device, capturing the call's stack each time (2 ms a test)
        torch.default_generator.manual_seed(0)
    torch.set_num_threads(1)
    yield


def pytest_collection_modifyitems(config, items):
    """Tests marked ``build`` run the whole site build (minutes): only when selected
    with ``-m build`` (``make test`` does), never by a plain ``pytest tests``."""
    if "build" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="runs the strict site build: select with -m build")
    for item in items:
        if item.get_closest_marker("build"):
            item.add_marker(skip)


def pytest_deselected(items):
    """Keep the tests this session deselected (by -m) on its config:
    tests/test_schedule.py checks that each browser test among them is in a file the
    browser stages collect."""
    if items:
        config = items[0].config
        config.posenc_deselected = [*getattr(config, "posenc_deselected", []), *items]


def _build_library_wheel(folder: pathlib.Path) -> pathlib.Path:
    source, wheels = folder / "source", folder / "wheels"
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "pyproject.toml", "README.md", "LICENSE",
         "posenc_lib"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
         str(source)],
        capture_output=True, text=True, cwd=folder,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("posenc_lib-*.whl")
    return wheel


@pytest.fixture(scope="session")
def library_wheel(tmp_path_factory) -> pathlib.Path:
    """The library's wheel as pip builds it (in its isolated build environment) from
    this checkout's tracked ``pyproject.toml``, ``README.md``, ``LICENSE`` and
    ``posenc_lib/``: what a ``git+`` URL of the repository installs. Built once a
    session (4 CPU s): under pytest-xdist the first worker that asks builds it in the
    session's shared folder while the others wait on a lock, then read it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return _build_library_wheel(tmp_path_factory.mktemp("library-wheel"))
    shared = tmp_path_factory.getbasetemp().parent / "library-wheel"  # this session's
    shared.mkdir(exist_ok=True)
    with open(shared.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built = list((shared / "wheels").glob("posenc_lib-*.whl"))
        return built[0] if built else _build_library_wheel(shared)

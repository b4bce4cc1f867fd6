import pytest

from tools.testing import compile_cache

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

"""The test command's forked kernels (tools/testing/kernel_forks.py) are fresh kernels:
each a new process with an empty namespace, in its notebook's folder and environment,
with the sys.path and ipykernel parent an ordinary kernel has; interrupts reach them;
a killed client takes its kernel along; and a request from elsewhere (another
sys.path) or with no server gets an ordinary kernel. The server preloads only what
every chapter imports first.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import time

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools import toc
from tools.testing import kernel_forks

ROOT = pathlib.Path(__file__).resolve().parents[1]
FACTS = """\
import json, os, sys
from ipykernel.kernelapp import IPKernelApp
print(json.dumps({
    "pid": os.getpid(), "parent": os.getppid(), "cwd": os.getcwd(),
    "planted": os.environ.get("POSENC_PLANTED"), "path": sys.path,
    "watches": IPKernelApp.instance().parent_handle,
    "names": sorted(k for k in globals() if not k.startswith("_")),
}))
"""


@pytest.fixture(scope="module")
def server():
    started = kernel_forks.start(["torch"])
    yield started
    started.stop()


@pytest.fixture
def forked(server, monkeypatch):
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return server


def run(cells: list[str], kernel: str, folder: pathlib.Path = ROOT / "book") -> list:
    """Each cell's printed text, run in a new kernel ``kernel``."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=60, kernel_name=kernel, resources={"metadata": {"path": folder}}
    ).execute()
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


def facts(kernel: str) -> dict:
    return json.loads(run([FACTS], kernel)[0])


def test_the_server_preloads_only_what_every_chapter_imports_first(tmp_path):
    chapters = [ROOT / f"{e}.ipynb" for e in toc.notebook_entries()]
    assert kernel_forks.preloads(chapters) == ["torch"]
    # never a module whose import reads the kernel's environment
    assert not {"posenc_lib", "matplotlib.pyplot", "ipykernel"} & set(
        kernel_forks.HEAVY
    )
    # a chapter that does not import torch first: nothing is preloaded
    planted = tmp_path / "planted.ipynb"
    cells = [nbformat.v4.new_code_cell("import math\nprint(math.pi)")]
    planted.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    assert kernel_forks.preloads([*chapters, planted]) == []


def test_a_forked_kernel_is_a_fresh_kernel(forked, monkeypatch):
    monkeypatch.setenv("POSENC_PLANTED", "from the client")
    ordinary = facts("python3")
    first, second = facts(kernel_forks.KERNEL_NAME), facts(kernel_forks.KERNEL_NAME)
    assert first["parent"] == second["parent"] == forked.process.pid  # forked
    assert ordinary["parent"] != forked.process.pid
    assert first["pid"] != second["pid"]
    for key in ("cwd", "planted", "path", "names", "watches"):
        assert first[key] == second[key] == ordinary[key], key
    assert first["planted"] == "from the client"
    assert first["watches"] == os.getpid()  # ipykernel exits when its parent does
    # a name from one notebook is not in the next
    run(["x = 1"], kernel_forks.KERNEL_NAME)
    with pytest.raises(CellExecutionError, match="NameError"):
        run(["print(x)"], kernel_forks.KERNEL_NAME)


@contextlib.contextmanager
def forked_kernel():
    """(manager, client) of a forked kernel, ready; shut down afterwards."""
    km = KernelManager(kernel_name=kernel_forks.KERNEL_NAME)
    km.start_kernel(cwd=str(ROOT))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=30)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def reply_to(kc, msg_id: str, timeout: float) -> dict:
    """The shell channel's reply to ``msg_id``, past any other (a late reply to one of
    ``wait_for_ready``'s kernel_info requests, on a busy machine)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def test_an_interrupt_reaches_a_forked_kernel_and_it_goes_on(forked):
    with forked_kernel() as (km, kc):
        msg = kc.execute("import time; time.sleep(60)")
        time.sleep(1.0)
        km.interrupt_kernel()
        reply = reply_to(kc, msg, timeout=20)
        assert reply["parent_header"]["msg_id"] == msg
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        for _ in range(20):  # ipykernel aborts what arrives just after an error
            reply = kc.execute_interactive("print(6 * 7)", timeout=20)
            if reply["content"]["status"] != "aborted":
                break
            time.sleep(0.2)
        assert reply["content"]["status"] == "ok"


def test_a_killed_client_takes_its_kernel_along(forked):
    with forked_kernel() as (km, kc):
        pids = []
        kc.execute_interactive(
            "import os; print(os.getpid())",
            output_hook=lambda m: pids.append(m["content"].get("text", "")),
            timeout=20,
        )
        kernel = int("".join(pids).strip())
        km.provisioner.process.send_signal(signal.SIGKILL)  # the client
        for _ in range(100):
            try:
                os.kill(kernel, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"kernel {kernel} outlived its client")


def test_another_sys_path_or_no_server_gets_an_ordinary_kernel(forked, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/another-checkout")
    assert facts(kernel_forks.KERNEL_NAME)["parent"] == os.getpid()
    monkeypatch.delenv("PYTHONPATH")
    monkeypatch.setenv(kernel_forks.SOCKET_VAR, "/nonexistent/socket")
    assert facts(kernel_forks.KERNEL_NAME)["parent"] == os.getpid()


def test_the_kernels_cpu_is_reported_when_the_server_stops():
    server = kernel_forks.start([])
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name, value in server.env().items():
                mp.setenv(name, value)
            run(["sum(i * i for i in range(3_000_000))"], kernel_forks.KERNEL_NAME)
    finally:
        cpu = server.stop()
    assert cpu is not None and cpu > 0.1

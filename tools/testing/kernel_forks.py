"""Jupyter kernels forked from a warm process: the test command's 74 notebook runs
(each chapter under nbval, then its student notebook) skip the start-up every kernel
repeats, about 2 s of CPU each on this machine (Python started, torch
imported), about three minutes of the command's CPU time.

    server = start(modules)          # a process that imported them once, then waits
    env = server.env()               # the kernel "posenc-forked", and where to ask
    ... nbval --nbval-kernel-name posenc-forked / NotebookClient(kernel_name=...)
    server.stop()

A kernel started by that name runs ``kernel_forks.py launch -f CONNECTION_FILE`` (a
client of a few milliseconds). It sends the server its environment, its working
folder, its ``sys.path`` and its standard streams; the server forks a child that takes
them all, then runs what ``python -m ipykernel_launcher -f CONNECTION_FILE`` runs. The
client stays as the kernel's process for jupyter_client: it passes every signal on to
the child's process group (an interrupt, a termination), exits with the child's status,
and if the client is killed the server kills the child.

Why nothing is lost: a forked kernel is a new process with a new, empty namespace: a
notebook that forgets ``import torch`` fails with a NameError as in a fresh kernel.
The server imports only the modules that every chapter's first code cells import
(``preloads``), so after those cells a forked kernel holds the modules a fresh one
holds. The server refuses a request whose ``sys.path`` differs from its own (another
checkout, another PYTHONPATH, another Python): the client then ``exec``s the ordinary
ipykernel launcher, as it does when no server answers. tests/test_kernel_forks.py
shows each of these.
"""

from __future__ import annotations

import json
import os
import pathlib
import selectors
import signal
import socket
import subprocess
import sys
import tempfile

KERNEL_NAME = "posenc-forked"
SOCKET_VAR = "POSENC_KERNEL_FORKS"  # the server's address, for the client
KERNEL_VAR = "POSENC_KERNEL"  # the kernel a notebook test starts (else python3)
# The modules worth preloading (their import costs seconds); one is preloaded only when
# every chapter imports it. Never a module whose import reads the kernel it will run
# in: ipykernel reads JPY_PARENT_PID into a class default (the parent it watches),
# matplotlib.pyplot its backend from the kernel's MPLBACKEND, and posenc_lib imports
# tqdm.auto, which picks a notebook or a console progress bar by asking IPython; so
# the child imports those itself, in its own environment.
HEAVY = ("torch", "numpy", "sympy")
FIRST_CELLS = 3  # the code cells whose imports count as a chapter's first imports
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def preloads(notebooks: list[pathlib.Path]) -> list[str]:
    """The modules of ``HEAVY`` that the first code cells of every notebook import,
    in ``HEAVY``'s order."""
    import ast

    common = set(HEAVY)
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"][:FIRST_CELLS]
        names = set()
        for cell in code:
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:  # a cell magic
                continue
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif (
                    isinstance(node, ast.ImportFrom) and node.module and not node.level
                ):
                    names.add(node.module)
        common &= names
    return [m for m in HEAVY if m in common]


# ---- the client: the kernel's command ---------------------------------------------


def _readline(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            return ""
        data += chunk
    return data.decode()


def launch(argv: list[str]) -> None:
    """Ask the server for a kernel with these arguments; without an answer, or if it
    refuses, become an ordinary kernel."""
    path = os.environ.get(SOCKET_VAR, "")
    answer = ""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        request = {
            "argv": argv,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "path": sys.path[1:],  # [0] is this script's folder
            "executable": sys.executable,
        }
        socket.send_fds(sock, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        answer = _readline(sock)
    except OSError:
        pass
    if not answer.startswith("pid "):
        command = [sys.executable, "-m", "ipykernel_launcher", *argv]
        os.execv(sys.executable, command)
    pid = int(answer.split()[1])

    def forward(signum, frame):
        try:
            os.killpg(pid, signum)
        except OSError:
            pass

    for signum in SIGNALS:
        signal.signal(signum, forward)
    answer = _readline(sock)  # "exit N" once the kernel has exited
    sys.exit(int(answer.split()[1]) if answer.startswith("exit ") else 1)


# ---- the server ---------------------------------------------------------------------


def _child(request: dict, fds: list[int], server_fds: list[int]) -> None:
    """In the forked process: let go of the server's sockets, take the client's
    streams, environment, folder and arguments, then run ipykernel's launcher."""
    signal.set_wakeup_fd(-1)
    for signum in (*SIGNALS, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for fd in server_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    os.setpgid(0, 0)  # the kernel's own group, which the client signals
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["ipykernel_launcher", *request["argv"]]
    sys.path[:] = request["path"]  # as ipykernel_launcher leaves it (no cwd)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def serve(address: str, modules: list[str]) -> None:
    """Import ``modules`` once, then fork a kernel for each request on the Unix socket
    ``address``; "ready" on stdout once listening. Stops on SIGTERM."""
    import importlib

    for name in modules:
        importlib.import_module(name)
    import threading

    if threading.active_count() != 1:  # a fork copies only the thread that forks
        sys.exit(f"kernel_forks: Python threads after importing {modules}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(1))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    print("ready", flush=True)
    while not stopping:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                own = [listener.fileno(), wake_r, wake_w, selector.fileno()]
                own += [c.fileno() for c in children.values() if c.fileno() != -1]
                _accept(conn, children, selector, own)
            elif key.fileobj == wake_r:
                os.read(wake_r, 4096)
            else:  # a client's connection: it said nothing more, so it is gone
                conn = key.fileobj
                pid = next((p for p, c in children.items() if c is conn), None)
                if pid is not None:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                selector.unregister(conn)  # closed once the kernel is reaped
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                if conn.fileno() != -1:
                    try:
                        selector.unregister(conn)
                    except (KeyError, ValueError):
                        pass
                conn.close()
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    listener.close()
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernels it reaped
    print(f"cpu {usage.ru_utime + usage.ru_stime:.1f}", flush=True)


def _accept(conn, children, selector, own: list[int]) -> None:
    """Read a client's request; fork its kernel, or refuse it."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    request = json.loads(data)
    same = request["path"] == sys.path[1:] and request["executable"] == sys.executable
    if not same or len(fds) != 3:  # another checkout or Python: an ordinary kernel
        for fd in fds:
            os.close(fd)
        conn.sendall(b"refused\n")
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        try:
            _child(request, fds, [*own, conn.fileno()])
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.sendall(f"pid {pid}\n".encode())
    selector.register(conn, selectors.EVENT_READ)


# ---- the server, from the test command ----------------------------------------------


class Server:
    """A running server and the kernelspec that points at it."""

    def __init__(self, folder: pathlib.Path, process: subprocess.Popen):
        self.folder, self.process = folder, process

    @property
    def address(self) -> str:
        return str(self.folder / "socket")

    def env(self) -> dict[str, str]:
        """What a process that starts kernels needs: the kernelspec's folder on
        JUPYTER_PATH, the server's address, and the kernel's name (POSENC_KERNEL,
        which tests/test_student_notebooks.py starts)."""
        path = [str(self.folder / "jupyter"), os.environ.get("JUPYTER_PATH", "")]
        return {
            "JUPYTER_PATH": os.pathsep.join(filter(None, path)),
            SOCKET_VAR: self.address,
            KERNEL_VAR: KERNEL_NAME,
        }

    def stop(self) -> float | None:
        """Stop the server (and any kernel still running); the CPU seconds of the
        kernels it forked, which their stages' own CPU times do not hold."""
        cpu = None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                out, _ = self.process.communicate(timeout=10)
                said = out.split()
                cpu = float(said[-1]) if said[-2:-1] == ["cpu"] else None
            except subprocess.TimeoutExpired:
                self.process.kill()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
        return cpu


def start(modules: list[str], python: str = sys.executable) -> Server:
    """Start a server that preloads ``modules`` (``preloads``), and write the kernel
    ``KERNEL_NAME`` for it; the server is ready when this returns."""
    python = os.path.abspath(python)  # kernels start in their notebooks' folders
    folder = pathlib.Path(tempfile.mkdtemp(prefix="kernel-forks-"))
    spec = folder / "jupyter" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    script = str(pathlib.Path(__file__).resolve())
    kernel = {
        "argv": [python, script, "launch", "-f", "{connection_file}"],
        "display_name": "Python 3 (forked from a warm process)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1))
    process = subprocess.Popen(
        [python, script, "serve", str(folder / "socket"), *modules],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the stage runner's signals are not the kernels'
    )
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise RuntimeError(f"kernel_forks: the server did not start ({line!r})")
    return Server(folder, process)


def main(argv: list[str]) -> None:
    if argv[:1] == ["launch"]:
        launch(argv[1:])
    elif argv[:1] == ["serve"]:
        serve(argv[1], argv[2:])
    else:
        sys.exit("usage: kernel_forks.py launch -f FILE | serve SOCKET [MODULE...]")


if __name__ == "__main__":
    main(sys.argv[1:])

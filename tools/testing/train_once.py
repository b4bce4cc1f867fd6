"""Train once per test command: the student run reuses what nbval trained.

The test command executes every chapter twice: under nbval (on the device
``pl.book.setup()`` picks: the CPU here) and as its student edition on a GPU (the fake
CUDA device of ``fake_cuda.py`` where there is none). The fake device computes on the
CPU with real values, so training the same model on the same batches again computes
the same numbers again (up to rounding where the library takes its GPU code paths);
what the second training can find is a tensor on the wrong device, and a training
shows that in its first steps. So ``pl.train`` is wrapped from outside
(``posenc_lib/train.py`` is not touched):

* **record**, in each nbval kernel (``RECORD_CELL``, sent by
  ``tools/build/nbval_cache.py``): every call trains as it is; its result is saved in
  ``FOLDER/<key>.pt``: the losses, every parameter, buffer and gradient after it, the
  random state after it, and a fingerprint of the model after its first
  ``FIRST_STEPS`` steps (each parameter's and gradient's sum and norm);
* **reuse**, in each student kernel (``REUSE_CELL``, injected by
  ``tests/test_student_notebooks.py``): a call with a record of its model, arguments
  and random state runs its first ``FIRST_STEPS`` steps for real, on the device
  (``pl.train`` itself: forward, backward, clipping, the optimizer's step); then one
  real step of ``pl.train`` on every later batch that brings a shape, a dtype or an
  integer (a position, a token) beyond those the steps before it met, since code that
  grows a table or takes another branch does so there; it draws every remaining batch
  in order (so the batch function and its generator advance as in a full training)
  and, if the batches are those recorded and the fingerprint after the first steps is
  the recorded one (within ``TOLERANCE``), loads the recorded parameters, buffers and
  gradients into the model, where it is, sets the recorded random state and returns
  the recorded losses. Anything else (no record, other batches, another fingerprint)
  trains in full, as without this module.

The key holds everything a training's result depends on: the chapter (its notebook's
bytes) and the library's state (``tools.build.site.library_hash()``), where it computes
(the CPU, for the fake device), the model (its class, ``repr``, every parameter and
buffer), the arguments (``steps``, ``lr``, ``weight_decay``, ``causal``), the random
state on entry, and every batch. The fingerprint guards what a key cannot see (a
setting kept in a plain attribute) and a GPU code path whose gradient is wrong. What
the reuse cannot see: a wrong device that only a later batch of shapes and values
already met reveals (code that branches on the step count, or on a value inside the
range the earlier steps covered). Each call appends one line to ``FOLDER/log.jsonl``
(chapter, outcome, steps run, fingerprint difference), which the test reports.
``tests/test_train_once.py`` shows that a tensor on the wrong device, in the training
or after it, still fails under reuse, and that another training is never reused.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import pathlib
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: nbval's own process, which
    import torch  # only writes RECORD_CELL for each kernel, never loads it

__all__ = [
    "install",
    "uninstall",
    "context_of",
    "read_log",
    "FIRST_STEPS",
    "RECORD_CELL",
    "REUSE_CELL",
]

FIRST_STEPS = 2  # steps run for real on the device before a record is reused
# The largest difference of fingerprints (each parameter's and gradient's sum and
# norm, on the scale of the recorded norm) taken as the same training. On the fake
# device the library takes its GPU code paths (fused attention in blocks, not the CPU's
# flash kernel) on the CPU's kernels: in the book's trainings they differ from nbval's
# CPU paths by 0 to 5e-4 after the first steps; a wrong gradient on one of those paths
# differs by its own size, and the training then runs in full (tests/test_train_once).
TOLERANCE = 1e-2
ROOT = pathlib.Path(__file__).resolve().parents[2]
_ORIGINAL = None  # pl.train as the library defines it, while a wrapper is installed
_PARAMS = ("model", "batches", "steps", "lr", "weight_decay", "causal", "device")


class _Enough(Exception):
    """Raised by the batch function after the first steps (reuse)."""


def context_of(entry: str) -> str:
    """The part of every key that names the chapter (``book/part3/alibi``, or a
    notebook's absolute path without ``.ipynb``) and the library's state."""
    from tools.build import site

    notebook = (ROOT / f"{entry}.ipynb").read_bytes()
    return f"{site.library_hash()}:{hashlib.sha256(notebook).hexdigest()}"


# ---- what a training depends on ------------------------------------------------------


def _tensor_bytes(t: torch.Tensor) -> bytes:
    import torch

    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _update(digest, value) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        digest.update(_tensor_bytes(value))
    elif isinstance(value, (tuple, list)):
        digest.update(f"L{len(value)}".encode())
        for v in value:
            _update(digest, v)
    elif isinstance(value, dict):  # a batch's side inputs: named tensors, by name
        digest.update(f"D{len(value)}".encode())
        for name in sorted(value, key=repr):
            digest.update(f"K{name!r}".encode())
            _update(digest, value[name])
    else:
        digest.update(f"V{value!r}".encode())


def _computes_on(model: torch.nn.Module) -> str:
    """Where the model's arithmetic happens: the CPU for the fake CUDA device."""
    import torch

    for t in [*model.parameters(), *model.buffers()]:
        fake = t.__dict__.get("_posenc_on_fake_cuda", False)
        return "cpu" if fake else torch._C.TensorBase.device.__get__(t).type
    return "cpu"


def _model_key(model, args: dict, context: str) -> str:
    import torch

    digest = hashlib.sha256(context.encode())
    digest.update(_computes_on(model).encode())
    digest.update(f"{type(model).__module__}.{type(model).__qualname__}".encode())
    digest.update(repr(model).encode())
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        digest.update(name.encode())
        _update(digest, t)
    for name in ("steps", "lr", "weight_decay", "causal"):
        digest.update(f"{name}={args[name]!r}".encode())
    digest.update(_tensor_bytes(torch.get_rng_state()))
    return digest.hexdigest()[:24]


def _batch_key(hashes: list[str]) -> str:
    return hashlib.sha256("".join(hashes).encode()).hexdigest()[:24]


def _batch_hash(batch) -> str:
    digest = hashlib.sha256()
    _update(digest, batch)
    return digest.hexdigest()


def _fingerprint(model: torch.nn.Module) -> list[float]:
    """Each parameter's and gradient's sum and norm (float64): after two steps of
    AdamW the parameters have moved by about the learning rate whatever the gradient,
    so the gradients carry most of what tells two computations apart."""
    import torch

    out = []
    with torch.no_grad():
        for p in model.parameters():
            for t in (p, p.grad):
                if t is None:
                    out += [0.0, 0.0]
                else:
                    t = t.detach().double()
                    out += [t.sum().item(), t.norm().item()]
    return out


def _difference(a: list[float], b: list[float]) -> float:
    """The largest difference of two fingerprints, each (sum, norm) pair measured on
    the recorded norm's scale (inf when they do not even have the same length)."""
    if len(a) != len(b):
        return math.inf
    out = 0.0
    for k in range(0, len(a), 2):
        scale = abs(b[k + 1]) + 1e-12
        out = max(out, abs(a[k] - b[k]) / scale, abs(a[k + 1] - b[k + 1]) / scale)
    return out


def _elements(batch) -> list:
    """A batch's elements with their places: ``(k, t)`` for its k-th, ``((k, name),
    t)`` for each tensor of a dict in it (the side inputs), by name."""
    out = []
    for k, t in enumerate(batch):
        if isinstance(t, dict):
            out += [((k, name), t[name]) for name in sorted(t, key=repr)]
        else:
            out.append((k, t))
    return out


def _signature(batch) -> tuple:
    """Shapes, dtypes and which elements (and side inputs) are present: a new one is
    probed."""
    import torch

    return tuple(
        (k, tuple(t.shape), str(t.dtype))
        if isinstance(t, torch.Tensor)
        else (k, repr(t))
        for k, t in _elements(batch)
    )


def _extremes(batch) -> dict:
    """The smallest and largest value of each integer tensor of a batch (tokens,
    targets, positions, and side inputs such as a graph's distances and degrees)."""
    import torch

    out = {}
    for k, t in _elements(batch):
        if (
            isinstance(t, torch.Tensor)
            and t.numel()
            and not t.is_floating_point()
            and not t.is_complex()
        ):
            c = t.detach().cpu()
            out[k] = (int(c.min()), int(c.max()))
    return out


# ---- the wrapper ---------------------------------------------------------------------


class _Session:
    def __init__(self, mode: str, folder: pathlib.Path, entry: str, context: str):
        self.mode, self.folder, self.entry, self.context = mode, folder, entry, context
        self.folder.mkdir(parents=True, exist_ok=True)

    def log(self, **fields) -> None:
        line = json.dumps({"entry": self.entry, "mode": self.mode, **fields})
        with open(self.folder / "log.jsonl", "a") as f:
            f.write(line + "\n")

    # record: train as it is, save the result
    def record(self, args: dict, call) -> list[float]:
        import torch

        model, batches, steps = args["model"], args["batches"], args["steps"]
        try:
            key = _model_key(model, args, self.context)
        except Exception:  # not a model we can read: train as it is, record nothing
            return call(batches)
        hashes, fingerprint = [], []

        def drawn(step):
            if step == FIRST_STEPS:
                fingerprint[:] = _fingerprint(model)
            batch = batches(step)
            hashes.append(_batch_hash(batch))
            return batch

        start = time.perf_counter()
        losses = call(drawn)
        seconds = time.perf_counter() - start
        record = {
            "losses": [float(x) for x in losses],
            "params": {
                n: p.detach().cpu().clone() for n, p in model.named_parameters()
            },
            "buffers": {n: b.detach().cpu().clone() for n, b in model.named_buffers()},
            "grads": {
                n: p.grad.detach().cpu().clone()
                for n, p in model.named_parameters()
                if p.grad is not None
            },
            "rng": torch.get_rng_state(),
            "fingerprint": fingerprint,
            "seconds": seconds,
        }
        path = self.folder / f"{key}-{_batch_key(hashes)}.pt"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(record, tmp)
        tmp.replace(path)
        self.log(outcome="recorded", steps=steps, ran=steps, seconds=round(seconds, 3))
        return losses

    # reuse: the first steps for real, then the record
    def reuse(self, args: dict, call, probe) -> list[float]:
        import torch

        model, batches, steps = args["model"], args["batches"], args["steps"]
        start = time.perf_counter()
        try:
            key = _model_key(model, args, self.context)
        except Exception:
            return call(batches)
        if steps <= FIRST_STEPS or not list(self.folder.glob(f"{key}-*.pt")):
            short = steps <= FIRST_STEPS
            self.log(
                outcome=f"trained ({'short' if short else 'no record'})",
                steps=steps,
                ran=steps,
            )
            return call(batches)
        rng = torch.get_rng_state()
        saved = [
            (t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]
        ]
        drawn, fingerprint = [], []

        def first(step):
            if step == FIRST_STEPS:
                fingerprint[:] = _fingerprint(model)
                raise _Enough
            drawn.append(batches(step))
            return drawn[-1]

        try:
            call(first)  # the first steps, for real, on the model's device
        except _Enough:
            pass
        seen = {_signature(b) for b in drawn}
        low_high = {}
        for b in drawn:
            for k, (lo, hi) in _extremes(b).items():
                old = low_high.get(k, (lo, hi))
                low_high[k] = (min(old[0], lo), max(old[1], hi))
        probes = []
        for step in range(FIRST_STEPS, steps):
            batch = batches(step)
            drawn.append(batch)
            new = _signature(batch) not in seen
            seen.add(_signature(batch))
            for k, (lo, hi) in _extremes(batch).items():
                old = low_high.get(k, (lo, hi))
                if k in low_high and (lo < old[0] or hi > old[1]):
                    new = True
                low_high[k] = (min(old[0], lo), max(old[1], hi))
            if new:
                probes.append(batch)
        hashes = [_batch_hash(b) for b in drawn]
        path = self.folder / f"{key}-{_batch_key(hashes)}.pt"
        record = torch.load(path, map_location="cpu") if path.exists() else None
        differs = (
            math.inf
            if record is None
            else _difference(fingerprint, record["fingerprint"])
        )
        if differs > TOLERANCE:
            outcome = "other batches" if record is None else "another fingerprint"
            with torch.no_grad():  # start again from where the call started
                for t, value in saved:
                    t.copy_(value)
            for p in model.parameters():
                p.grad = None
            torch.set_rng_state(rng)
            losses = call(lambda step: drawn[step])
            self.log(
                outcome=f"trained ({outcome})", steps=steps, ran=steps, differs=differs
            )
            return losses
        for batch in probes:  # one real step on each batch that brings something new
            probe(batch)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(record["params"][name])
            for name, b in model.named_buffers():
                b.copy_(record["buffers"][name])
        for name, p in model.named_parameters():
            grad = record["grads"].get(name)
            p.grad = None if grad is None else grad.to(p.device)
        torch.set_rng_state(record["rng"])
        model.eval()
        self.log(
            outcome="reused",
            steps=steps,
            ran=FIRST_STEPS + len(probes),
            differs=differs,
            seconds=round(time.perf_counter() - start, 3),
            saved=round(record["seconds"], 3),
        )
        return list(record["losses"])


def install(mode: str, folder: str | os.PathLike, entry: str, context: str) -> None:
    """Wrap ``pl.train`` (everywhere the library and the course name it) to record
    (``mode="record"``) or reuse (``"reuse"``) trainings in ``folder``."""
    import torch

    import posenc_lib  # noqa: F401  (its module train, shadowed by the function)

    train_module = sys.modules["posenc_lib.train"]
    global _ORIGINAL
    if mode not in ("record", "reuse"):
        raise ValueError(f"mode must be 'record' or 'reuse', got {mode!r}")
    uninstall()
    original = train_module.train
    session = _Session(mode, pathlib.Path(folder), entry, context)
    signature = inspect.signature(original)

    def train(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # its own error
        bound.apply_defaults()
        given = bound.arguments
        steps = given["steps"]
        if not callable(given["batches"]) or type(steps) is not int or steps < 1:
            return original(*args, **kwargs)  # its own error, or its own behaviour

        def call(batches, **changes):
            return original(**{**given, "batches": batches, **changes})

        def probe(batch):
            original(
                **{
                    **given,
                    "batches": lambda step: batch,
                    "steps": 1,
                    "progress": False,
                }
            )

        if mode == "record":
            return session.record(given, call)
        return session.reuse(given, call, probe)

    train.__doc__, train.__wrapped__ = original.__doc__, original
    train.__signature__ = signature
    _ORIGINAL = original
    _replace(original, train)


def uninstall() -> None:
    """Put ``pl.train`` back."""
    global _ORIGINAL
    if _ORIGINAL is not None:
        _replace(sys.modules["posenc_lib.train"].train, _ORIGINAL)
        _ORIGINAL = None


def _replace(old, new) -> None:
    """Every module of the library (and the course) that holds ``old`` as ``train``."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "posenc_lib" and getattr(module, "train", None) is old:
            module.train = new


def read_log(folder: str | os.PathLike, entry: str | None = None) -> list[dict]:
    """The calls logged in ``folder`` (those of ``entry`` only, if given)."""
    path = pathlib.Path(folder) / "log.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in rows if entry is None or r["entry"] == entry]


# The cells that install it in a kernel (the repository's root on the path only while
# importing this module): nbval_cache.py runs RECORD_CELL before a chapter's first
# cell; the student-notebook test injects REUSE_CELL after the fake-CUDA cell.
_CELL = """\
# injected: pl.train {what} (tools/testing/train_once.py)
import sys as _sys
_sys.path.insert(0, {root!r})
from tools.testing import train_once as _train_once
_sys.path.remove({root!r})
_train_once.install({mode!r}, {folder!r}, {entry!r}, {context!r})
"""
RECORD_CELL = _CELL.replace("{what}", "records each training").replace(
    "{mode!r}", "'record'"
)
REUSE_CELL = _CELL.replace("{what}", "reuses nbval's training after its first steps")
REUSE_CELL = REUSE_CELL.replace("{mode!r}", "'reuse'")

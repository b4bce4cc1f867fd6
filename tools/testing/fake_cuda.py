"""A CUDA device for a machine without one: the wrong-device bugs of a GPU, on a CPU.

Inside ``fake_cuda()``, ``torch.cuda.is_available()`` is True and a tensor can be put
"on CUDA": ``torch.randn(3, device="cuda")``, ``x.to("cuda")``, ``x.cuda()``,
``model.to("cuda")``. Such a tensor says ``device(type='cuda', index=0)`` and computes
on the CPU, with real values (so ``.item()``, ``.tolist()``, training and printing all
work), but it refuses to meet a CPU tensor as CUDA does::

    RuntimeError: Expected all tensors to be on the same device, but found at least
    two devices, cuda:0 and cpu!

It also refuses ``.numpy()`` (and so matplotlib) on a CUDA tensor, and a CPU generator
for a CUDA factory, as CUDA does. So code that passes under ``fake_cuda()`` on this
CPU puts its tensors where a GPU needs them; code that fails here fails on a GPU.

How: a ``TorchFunctionMode`` (above autograd, so backward runs on the real CPU
tensors) marks the Python tensor objects that live "on CUDA" and answers
``tensor.device`` for them. torch's own ``FakeTensorMode`` was tried first: it holds no
data (every ``.item()``, ``.tolist()`` and data check raises), and on a CPU-only build
its CUDA tensors abort the process in backward (no CUDA device guard), so it cannot
run a training step.

What it does not model: CUDA's rule that some ops accept a 0-d CPU tensor (every 0-d
CPU tensor is accepted here), streams (``torch.accelerator.current_stream()`` answers
a stub that captures no graph, so that the optimizers run on a CUDA build of torch
without a card), memory (``torch.cuda.max_memory_allocated`` is
0; ``get_device_properties`` describes a 2 GiB card, so a chapter that sizes its runs
by the card's memory stays small), and kernels (the CPU kernels run).
``torch.compile`` is not supported inside it.
Used by ``tests/test_device.py`` and, for every chapter, by
``tests/test_student_notebooks.py``; ``python -m tools.testing.fake_cuda NOTEBOOK``
runs one notebook on it.
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch
from torch.overrides import TorchFunctionMode

from tools.testing.device_cells import FAKE_CUDA_CELL

__all__ = ["fake_cuda", "on_fake_cuda", "FakeCudaMode", "KERNEL_CELL"]

CUDA = torch.device("cuda", 0)
_TAG = "_posenc_on_fake_cuda"
_Base = torch._C.TensorBase
_DEVICE_GET = _Base.device.__get__
_IS_CUDA_GET = _Base.is_cuda.__get__
_IS_CPU_GET = _Base.is_cpu.__get__
_DATA_SET = _Base.data.__set__
_ORIGINAL_TO = _Base.to

# Calls that take tensors on two devices on real CUDA (indexing with CPU indices,
# copies between devices, metadata).
_MIXED_OK = {
    _Base.__getitem__,
    _Base.__setitem__,
    _Base.copy_,
    torch.Tensor.type_as,
    torch._has_compatible_shallow_copy_type,
    torch.Tensor.__format__,
    torch.Tensor.__repr__,
}
_MOVES = {_Base.to, _Base.cuda, torch.Tensor.cuda, _Base.cpu, torch.Tensor.cpu}
_TO_NUMPY = {_Base.numpy, torch.Tensor.__array__}


def on_fake_cuda(t: object) -> bool:
    """Whether ``t`` is a tensor on the fake CUDA device."""
    return isinstance(t, torch.Tensor) and t.__dict__.get(_TAG, False)


def _mark(t: object, on: bool = True) -> object:
    if isinstance(t, torch.Tensor):
        t.__dict__[_TAG] = on
    return t


def _mark_all(out: object) -> object:
    if isinstance(out, torch.Tensor):
        _mark(out)
    elif isinstance(out, (tuple, list)):
        for o in out:
            _mark_all(o)
    elif isinstance(out, dict):
        for o in out.values():
            _mark_all(o)
    return out


def _kind(device: object) -> str | None:
    if device is None:
        return None
    if isinstance(device, int):  # a bare index names a CUDA device
        return "cuda"
    return torch.device(device).type


def _mismatch(func) -> RuntimeError:
    name = getattr(func, "__name__", str(func))
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two "
        f"devices, cuda:0 and cpu! (in {name}; raised by the fake CUDA device of "
        "tools/testing/fake_cuda.py, as a GPU would)"
    )


def _scan(args, kwargs) -> tuple[bool, bool]:
    """(a tensor on the fake device among the arguments, a CPU tensor of dimension >= 1
    among them), looking inside lists and tuples: one pass, as every op pays it."""
    fake = cpu = False
    for group in (args, kwargs.values()):
        for a in group:
            if isinstance(a, (list, tuple)):
                for t in a:
                    if isinstance(t, torch.Tensor):
                        if t.__dict__.get(_TAG, False):
                            fake = True
                        elif t.dim() > 0:
                            cpu = True
            elif isinstance(a, torch.Tensor):
                if a.__dict__.get(_TAG, False):
                    fake = True
                elif a.dim() > 0:
                    cpu = True
    return fake, cpu


class FakeCudaMode(TorchFunctionMode):
    """The mode behind ``fake_cuda()`` (see the module)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs)
        fake, cpu = _scan(args, kwargs)
        if fake:
            if func in _TO_NUMPY:
                raise TypeError(
                    "can't convert cuda:0 device type tensor to numpy. Use "
                    "Tensor.cpu() to copy the tensor to host memory first."
                )
            if cpu and func not in _MIXED_OK:
                raise _mismatch(func)
        want = _kind(kwargs.get("device")) if "device" in kwargs else None
        if want == "cuda":
            generator = kwargs.get("generator")
            if generator is not None and generator.device.type != "cuda":
                raise RuntimeError(
                    "Expected a 'cuda' device type for generator but found 'cpu'"
                )
            kwargs = {**kwargs, "device": "cpu"}
        out = func(*args, **kwargs)
        if want == "cuda" or (want is None and fake):
            _mark_all(out)
        return out


def _device(func, args, kwargs):
    return CUDA if on_fake_cuda(args[0]) else _DEVICE_GET(args[0])


def _is_cuda(func, args, kwargs):
    return on_fake_cuda(args[0]) or _IS_CUDA_GET(args[0])


def _is_cpu(func, args, kwargs):
    return not on_fake_cuda(args[0]) and _IS_CPU_GET(args[0])


def _set_data(func, args, kwargs):
    _DATA_SET(args[0], args[1])
    _mark(args[0], on_fake_cuda(args[1]))


def _move(func, args, kwargs):
    """``to``, ``cuda``, ``cpu``: the same data, marked for its new device."""
    self = args[0]
    here = "cuda" if on_fake_cuda(self) else _DEVICE_GET(self).type
    if func in (_Base.cuda, torch.Tensor.cuda):
        target, rest = "cuda", {}
    elif func in (_Base.cpu, torch.Tensor.cpu):
        target, rest = "cpu", {}
    elif len(args) > 1 and isinstance(args[1], torch.Tensor):  # to(other)
        other = args[1]
        target = "cuda" if on_fake_cuda(other) else _DEVICE_GET(other).type
        rest = {"dtype": other.dtype}
    else:
        parsed = {k: v for k, v in kwargs.items() if k != "copy"}  # not _parse_to's
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
            *args[1:], **parsed
        )
        target = here if device is None else device.type
        rest = {"dtype": dtype} if dtype is not None else {}
        if memory_format is not None:
            rest["memory_format"] = memory_format
        if kwargs.get("copy"):
            rest["copy"] = True
    if target == here:
        out = _ORIGINAL_TO(self, **rest) if rest else self
    else:  # a move makes a new tensor, as between real devices
        out = _ORIGINAL_TO(self, **{**rest, "copy": True})
    if out is not self:
        _mark(out, target == "cuda")
    return out


def _as_called(func, args, kwargs):
    """A call the mode lets through untouched: ``Module.to(device="cuda")`` parses
    its arguments with ``torch._C._nn._parse_to``, whose ``device`` must stay
    ``cuda`` (the tensors' own ``to`` then moves them)."""
    return func(*args, **kwargs)


# Calls answered by the mode itself (a dict: every op looks itself up once).
_SPECIAL = {
    _DEVICE_GET: _device,
    _IS_CUDA_GET: _is_cuda,
    _IS_CPU_GET: _is_cpu,
    _DATA_SET: _set_data,
    torch._C._nn._parse_to: _as_called,
    **{move: _move for move in _MOVES},
}


# What the fake device reports of itself: a small card, so that a chapter that sizes
# its runs by the GPU's memory stays within what the CPU computes in seconds.
FAKE_PROPERTIES = types.SimpleNamespace(
    name="fake CUDA (computing on the CPU)",
    total_memory=2 * 2**30,
    major=8,
    minor=0,
    multi_processor_count=1,
)


def _cuda_state():
    """What ``torch.cuda`` answers inside ``fake_cuda()``: one small device whose
    allocator reports nothing (``max_memory_allocated`` is 0)."""
    zero_state = torch.zeros(16, dtype=torch.uint8)
    return {
        "get_device_properties": lambda *a, **k: FAKE_PROPERTIES,
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "synchronize": lambda *a, **k: None,
        "get_device_name": lambda *a, **k: FAKE_PROPERTIES.name,
        "get_rng_state": lambda *a, **k: zero_state.clone(),
        "set_rng_state": lambda *a, **k: None,
        "get_rng_state_all": lambda: [zero_state.clone()],
        "set_rng_state_all": lambda *a, **k: None,
        "manual_seed": lambda *a, **k: None,
        "manual_seed_all": lambda *a, **k: None,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "max_memory_allocated": lambda *a, **k: 0,
        "memory_allocated": lambda *a, **k: 0,
        "is_bf16_supported": lambda *a, **k: True,
    }


_PARAMETER_NEW = torch.nn.Parameter.__new__


def _parameter_new(cls, data=None, requires_grad=True):
    """``nn.Parameter(t)`` makes a new Python object (``copy.deepcopy`` of a module
    does): it stays on the device of ``t``."""
    param = _PARAMETER_NEW(cls, data, requires_grad)
    return _mark(param) if on_fake_cuda(data) else param


# The stream torch.accelerator answers inside fake_cuda(): the optimizers ask it
# whether a CUDA graph is being captured (torch.optim's graph-capture check), which
# on a CUDA build of torch without a card would initialise the missing driver
_FAKE_STREAM = types.SimpleNamespace(
    is_capturing=lambda: False, synchronize=lambda: None, query=lambda: True
)


def _accelerator_state():
    """What ``torch.accelerator`` answers inside ``fake_cuda()`` (torch >= 2.6)."""
    if not hasattr(torch, "accelerator"):
        return {}
    return {"current_stream": lambda *a, **k: _FAKE_STREAM}


@contextlib.contextmanager
def fake_cuda():
    """Inside: a CUDA device that computes on the CPU (see the module)."""
    patches = [(torch.cuda, _cuda_state())]
    if hasattr(torch, "accelerator"):
        patches.append((torch.accelerator, _accelerator_state()))
    saved = [
        (module, {name: getattr(module, name) for name in values})
        for module, values in patches
    ]
    for module, values in patches:
        for name, value in values.items():
            setattr(module, name, value)
    torch.nn.Parameter.__new__ = _parameter_new
    try:
        with FakeCudaMode():
            yield
    finally:
        torch.nn.Parameter.__new__ = _PARAMETER_NEW
        for module, values in saved:
            for name, value in values.items():
                setattr(module, name, value)


# The first cell a notebook runs to execute on the fake device (a kernel keeps it on
# until it stops): main() below injects it; tests/test_student_notebooks.py injects
# device_cells.GPU_CELL, which enters it where the kernel has no CUDA.
KERNEL_CELL = FAKE_CUDA_CELL


def main(argv: list[str]) -> int:
    """``python -m tools.testing.fake_cuda NOTEBOOK...``: run each notebook top to
    bottom on the fake CUDA device; print which pass and the first failing cell."""
    import pathlib
    import time

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    root = pathlib.Path(__file__).resolve().parents[2]
    status = 0
    for name in argv:
        path = pathlib.Path(name).resolve()
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(
            0, nbformat.v4.new_code_cell(KERNEL_CELL.format(root=str(root)))
        )
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        try:
            client.execute()
            print(f"pass  {time.perf_counter() - start:6.1f} s  {name}", flush=True)
        except CellExecutionError as error:
            status = 1
            print(
                f"FAIL  {time.perf_counter() - start:6.1f} s  {name}\n{error}",
                flush=True,
            )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Measuring what a computation costs, on any device: time and tensor memory.

``tensor_memory(fn)`` runs ``fn()`` and reports the peak of the memory held by the
tensors it creates (its result included), by watching every tensor the ATen dispatcher
returns (``TorchDispatchMode``) and when each is freed. It counts what the
computation *materialises*, independent of the allocator's caching (which makes
process-level numbers noisy on a CPU); workspace that a fused kernel allocates
internally and frees before returning is not visible to it. Tensors that existed
before the call (weights, inputs) are not counted.

``attention_benchmark(device)`` returns the committed results of
``tools/measure/bench_attention.py`` (every registered encoding on each of its
attention paths, as ratios to plain SDPA measured in the same run), which the cost
chapter plots; ``model_benchmark(device)`` those of ``tools/measure/bench_model.py``.
``benchmark_devices(kind)`` says which devices each has (a GPU run stopped early may
have written one and not the other), and ``benchmark_machine(meta)`` names where a
run was made with the fields it recorded.
"""

from __future__ import annotations

import json
import pathlib
import time
import weakref
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "tensor_memory",
    "best_time",
    "count_host_syncs",
    "attention_benchmark",
    "benchmark_devices",
    "benchmark_machine",
    "model_benchmark",
    "BENCH_DIR",
]

# written by tools/measure/bench_attention.py
BENCH_DIR = pathlib.Path(__file__).parent / "data"


def _tensors(x):
    """The tensors in an ATen call's arguments or result (a tensor, or tuples, lists
    and dicts of them; a result's named tuple is a tuple): what ``tree_leaves``
    returns of them, less its generality's cost (3 of every 4 seconds of the watch on
    an attention step of many small operations)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


class _Watch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage pointer -> [bytes, tensors]
        self.current = 0
        self.peak = 0

    def _release(self, ptr: int) -> None:
        entry = self.live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a view or in-place result shares an input's storage: it is new memory only
        # if that storage is (it was created inside the call)
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        seen = set()
        for t in _tensors(out):
            if id(t) in seen:
                continue
            seen.add(id(t))
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if not nbytes or (ptr in inputs and ptr not in self.live):
                continue  # empty, or a view of a tensor from before the call
            if ptr in self.live:
                self.live[ptr][1] += 1
            else:
                self.live[ptr] = [nbytes, 1]
                self.current += nbytes
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, ptr)
        return out


def tensor_memory(fn: Callable[[], object]) -> tuple[object, int]:
    """``(fn(), peak bytes)``: the most memory the tensors created by ``fn`` held at
    once (see the module docstring for what is and is not counted)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    watch = _Watch()
    with watch:
        result = fn()
    return result, watch.peak


# Python-level reads of a tensor's values: on a GPU each one waits for the stream
_SYNCS = {
    torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist,
    torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
    torch.equal, torch.Tensor.nonzero, torch.nonzero, torch.Tensor.unique,
    torch.unique, torch.Tensor.__len__,
}  # fmt: skip


class _CountSyncs(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in _SYNCS
        return func(*args, **(kwargs or {}))


def count_host_syncs(fn: Callable[[], object]) -> tuple[object, int]:
    """``(fn(), n)``: how often ``fn`` read a tensor's values into Python
    (``bool(t)``, ``t.item()``, ``t.tolist()``, ``int(t)``, ``torch.equal``,
    ``nonzero``...). On a GPU each of these stalls until the stream has computed the
    value; on any device each is a place where ``torch.compile`` must break the
    graph. Counted where Python sees them (``TorchFunctionMode``), on any device."""
    with _CountSyncs() as mode:
        out = fn()
    return out, mode.count


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """The fastest of ``repeats`` wall-clock runs of ``fn()`` in seconds, after
    ``warmup`` untimed runs (synchronising CUDA when it is in use).

    Hand-written rather than ``torch.utils.benchmark.Timer`` (checked with torch
    2.13), whose public methods cannot keep this contract, on which the chapters
    budget their run time: ``Timer.timeit(number)`` always adds
    ``max(number // 100, 2)`` untimed runs and returns the mean of one block, so
    ``warmup=0, repeats=1`` (the cost chapter times a training step exactly once)
    runs ``fn`` 3 times; ``blocked_autorange`` and ``adaptive_autorange`` choose the
    number of runs themselves (until 0.2 s of runs: thousands for a fast ``fn``;
    ``adaptive_autorange`` ran a 0.2 s ``fn`` 43 times, 10 s) and report a median
    of block means, while the best of a few runs is what stays stable on a shared
    machine; ``Timer.repeat`` raises NotImplementedError. Timer also sets the
    thread count to 1 unless told otherwise; this measures with the caller's."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    for name, value, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


# the benchmarks committed with the library: kind -> the files' prefix
_KINDS = {"attention": "attention", "model": "model_bench"}


def benchmark_devices(kind: str = "attention") -> list[str]:
    """The devices whose benchmark of ``kind`` (``"attention"``, the default, or
    ``"model"``) is committed with the library: ``"cpu"``, and ``"cuda"`` once
    ``make test-gpu`` has run on a GPU and its result has been committed. Each kind is
    looked for on its own: a GPU run stopped early may have left one without the
    other."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
    prefix = _KINDS[kind] + "_"
    return sorted(p.stem[len(prefix) :] for p in BENCH_DIR.glob(prefix + "*.json"))


def benchmark_machine(meta: dict) -> str:
    """How a committed benchmark names where it ran, from its ``meta``, with only
    the fields it recorded: the card (or the CPU and its threads), torch, numba
    where it was used, and that the run stopped early where it did, e.g.
    ``"NVIDIA H200, torch 2.11.0"`` or ``"x86_64, 1 thread(s), torch 2.13.0"``."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a benchmark's meta dict, got {type(meta)}")
    on_gpu = str(meta.get("device", "")).startswith("cuda")
    name = (meta.get("card") or meta.get("device_name")) if on_gpu else None
    name = name or meta.get("device_name") or meta.get("machine") or "a machine"
    parts = [str(name)]
    if meta.get("threads") and not on_gpu:
        parts.append(f"{meta['threads']} thread(s)")
    for key in ("torch", "numba"):
        if meta.get(key):
            parts.append(f"{key} {meta[key]}")
    text = ", ".join(parts)
    if meta.get("stopped"):
        text += f" (stopped early: {meta['stopped']})"
    return text


def attention_benchmark(device: str = "cpu") -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of the committed ``tools/measure/bench_attention.py`` run on
    ``device`` (``"cpu"``, or ``"cuda"`` where one was measured).

    ``meta``: the machine, threads, torch version, shape and reference. ``rows``: one
    dict per length ``n``, encoding, path and positions, with ``fwd_x`` / ``fb_x``
    (forward / forward+backward time over plain SDPA's), ``fwd_ms``, ``fb_ms``, peak
    memory (``fwd_peak_mib``, ``fb_peak_mib``), ``cache_mib``, ``compile_s`` and a
    ``note`` for what was refused or skipped (ratios absent there).
    """
    return _committed("attention", device, "bench_attention.py")


def model_benchmark(device: str = "cpu") -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of the committed ``tools/measure/bench_model.py`` run on
    ``device`` (``"cpu"``, or ``"cuda"`` where one was measured): a whole
    ``TinyTransformer`` with each encoding against the same model whose attention is
    one ``F.scaled_dot_product_attention(is_causal=True)``.

    ``meta``: the machine, threads, torch version, the model's configuration
    (``config``) and how it was timed. ``rows``: one dict per model, with ``fwd_ms``,
    ``fb_ms``, ``fb_peak_mib`` and the ratios ``fwd_x_sdpa``, ``fb_x_sdpa``,
    ``fb_peak_x_sdpa`` (over the plain SDPA model) and ``fwd_x_nope``, ``fb_x_nope``,
    ``fb_peak_x_nope`` (over the NoPE model), or a ``note`` where it was refused.
    """
    return _committed("model_bench", device, "bench_model.py")


def _committed(kind: str, device: str, tool: str) -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of ``BENCH_DIR/<kind>_<device>.json``, or a ``ValueError``
    naming the devices committed and the tool (in ``tools/measure/``) that writes
    one."""
    path = BENCH_DIR / f"{kind}_{device}.json"
    if not isinstance(device, str) or not path.is_file():
        have = benchmark_devices("model" if kind == "model_bench" else kind)
        raise ValueError(
            f"device must be one of {have} (the {kind.replace('_', ' ')} runs "
            f"committed with the library), got {device!r}; run tools/measure/{tool} "
            "to measure this machine (on a GPU: make test-gpu)"
        )
    data = json.loads(path.read_text())
    return data["meta"], data["rows"]

"""The length-extrapolation lab from the command line, at any scale.

``python -m posenc_lib.lab`` (or the console script ``posenc-lab``) runs the book's
lab (``posenc_lib.lab``: train each encoding at length L on the same data from the
same initial seed, evaluate at f x L) with the same core functions the chapter calls
(``build_model``, ``evaluate``, ``format_table``; each step is ``pl.train``'s own,
``train_step`` with ``make_optimizer``'s schedule), and adds what a long run needs:
presets, a configuration file, checkpoints, ``--resume``, many processes.

Quick start::

    python -m posenc_lib.lab                         # the book's toy (--preset toy)
    python -m posenc_lib.lab --preset cpu-small --out runs/small
    python -m posenc_lib.lab --preset gpu-medium --data-dir /data/books --out runs/m
    python -m posenc_lib.lab --config lab.toml --steps 2000 --encodings rope,alibi
    python -m posenc_lib.lab --out runs/small --resume        # after an interrupt
    torchrun --standalone --nproc_per_node=4 -m posenc_lib.lab --preset gpu-medium

Configuration: a preset (``--preset``: ``toy``, ``cpu-small``, ``gpu-medium``,
``gpu-large``; ``--list-presets`` prints them), then a file (``--config``, JSON or
TOML, its keys the field names below, with ``-`` or ``_``), then the flags, each
overriding the one before. Every field is a flag (``--train-len 64``; tuples are
comma-separated, ``--factors 1,2,4,8``). Fields: those of ``LabConfig`` (the data,
the model's size, the training, the evaluation) and ``encodings``, ``seeds``,
``tokens`` (sets ``steps`` to the steps that train on at least that many tokens),
``dtype`` (``auto``: bfloat16 autocast on a GPU, float32 on a CPU), ``device``,
``out``, ``checkpoint_every`` (steps; 0: only on an interrupt), ``eval_chunk``
(evaluation windows per forward pass, 0: all at once). A bad value is an error that
names the field and what it allows.

Data: ``markov`` (the book's chain), ``stdlib`` (the book's characters of the
standard library), ``text`` (``--data-dir``: every file of a folder, matched by
``--data-glob``, read as bytes, a vocabulary of 256; ``--data-dir stdlib`` reads the
running Python's standard library), ``hf`` (``--hf-dataset name[:config]``: the
``text`` column of a Hugging Face dataset, its first ``--corpus-chars`` bytes, streamed
online through the optional ``datasets``: ``pip install "posenc_lib[datasets]"``).
Text is split by position: the first 90 % trains, the rest evaluates, and no window
crosses the split. A batch is a function of the seed and the step only, so a resumed run
reads the same batches and N processes read the same global batch as one.

Output (``--out``): ``results.json`` (every result, the summary, the configuration and
the run's record), ``table.txt`` (the book's table), ``plot.png`` (if matplotlib is
present), ``run_log.jsonl`` (one line per start: device, world size, versions,
configuration, what it resumed, how it ended), ``jobs/`` (each finished encoding and
seed) and ``checkpoints/`` (the one in progress: model, optimizer, schedule, the RNG
states of torch, numpy and Python, the step, the losses so far).

Checkpoints: every ``--checkpoint-every`` steps, and when the run is stopped (Ctrl-C
or SIGTERM, as a cluster's scheduler sends before its time limit): the step in
progress finishes, the checkpoint is written, and the run exits with status 75; a
second Ctrl-C stops at once. ``--resume`` continues from it bit for bit (the same
number of processes: a different number only changes the order of float sums), with
the configuration the run started with (flags that would change it are an error).

Many processes: under ``torchrun`` the same command trains with
``DistributedDataParallel`` (nccl on GPUs, gloo on CPUs): each process computes its
share of every global batch (``batch_size`` must divide by the number of processes),
the losses are averaged over processes, every process evaluates the same model, and
process 0 alone writes the checkpoints and results.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import pathlib
import platform
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ...registry import REGISTRY
from ...train import make_optimizer, train_step
from ...utils import get_device
from . import (
    LabConfig,
    LabResult,
    build_model,
    evaluate,
    format_table,
    lab_source,
    result_from_dict,
    result_to_dict,
    summarize,
)

__all__ = [
    "RunConfig",
    "PRESETS",
    "StreamData",
    "load_config_file",
    "resolve_config",
    "run",
    "main",
]

EXIT_STOPPED = 75  # stopped before the end with a checkpoint: resume with --resume
DTYPES = ("auto", "float32", "bfloat16")
_STEP_SEED = 1_000_003  # the batch of (seed, step) is drawn with seed * this + step

PRESETS: dict[str, dict] = {
    # the book's chapter (LabConfig's defaults: the Markov chain, L = 16)
    "toy": dict(encodings=("alibi", "nope", "rope", "sinusoidal")),
    # a CPU run larger than the toy (1,691 s for the committed one, one thread): ~0.8M
    # parameters, L = 64, real text (the standard library's top-level modules, byte
    # by byte)
    "cpu-small": dict(
        encodings=("alibi", "nope", "rope", "sinusoidal"),
        dataset="text",
        data_dir="stdlib",
        data_glob="*.py",
        train_len=64,
        factors=(1, 2, 4, 8),
        d_model=128,
        n_heads=4,
        n_layers=4,
        batch_size=32,
        steps=800,
        lr=3e-3,
        eval_sequences=16,
        checkpoint_every=100,
    ),
    # one GPU (its time not measured here): ~11M parameters, L = 256
    "gpu-medium": dict(
        encodings=("alibi", "nope", "rope", "sinusoidal", "t5", "xpos", "fox"),
        dataset="text",
        data_dir="stdlib",
        data_glob="**/*.py",
        train_len=256,
        factors=(1, 2, 4, 8),
        d_model=384,
        n_heads=6,
        n_layers=6,
        batch_size=64,
        steps=5000,
        lr=1e-3,
        eval_sequences=64,
        eval_chunk=16,
        checkpoint_every=500,
    ),
    # several GPUs (torchrun; not run here): ~85M parameters, L = 1024
    "gpu-large": dict(
        encodings=("alibi", "nope", "rope", "sinusoidal", "t5", "xpos", "fox"),
        dataset="text",
        data_dir="stdlib",
        data_glob="**/*.py",
        train_len=1024,
        factors=(1, 2, 4),
        d_model=768,
        n_heads=12,
        n_layers=12,
        batch_size=64,
        steps=20000,
        lr=6e-4,
        eval_sequences=64,
        eval_chunk=4,
        checkpoint_every=1000,
    ),
}


@dataclass(frozen=True)
class RunConfig(LabConfig):
    """A lab run from the command line: ``LabConfig`` (what the book's chapter runs)
    and what a run of many encodings and seeds, on some device, needs."""

    encodings: tuple[str, ...] = ("alibi", "nope", "rope", "sinusoidal")
    seeds: tuple[int, ...] = (0,)
    dtype: str = "auto"  # auto: bfloat16 autocast on a GPU, float32 on a CPU
    device: str = "auto"  # auto: cuda if present (each process its own), else cpu
    out: str = "lab_runs/run"
    checkpoint_every: int = 0  # steps; 0: only on an interrupt
    eval_chunk: int = 0  # evaluation windows per forward pass; 0: all at once
    preset: str = "toy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.encodings:
            raise ValueError("encodings must list at least one encoding")
        unknown = [e for e in self.encodings if e not in REGISTRY]
        if unknown:
            raise ValueError(
                f"encodings: unknown {unknown}; allowed: {', '.join(sorted(REGISTRY))}"
            )
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings must not repeat, got {self.encodings!r}")
        if not self.seeds or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds
        ):
            raise ValueError(
                f"seeds must be a non-empty tuple of ints >= 0, got {self.seeds!r}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(
                f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}"
            )
        if self.device != "auto":
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as err:
                raise ValueError(
                    "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got "
                    f"{self.device!r}"
                ) from err
        for name in ("checkpoint_every", "eval_chunk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.preset not in PRESETS:
            raise ValueError(
                f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}"
            )

    def lab(self) -> LabConfig:
        """The ``LabConfig`` part (what the book's functions read)."""
        names = {f.name for f in dataclasses.fields(LabConfig)}
        return LabConfig(**{k: v for k, v in self.__dict__.items() if k in names})


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_TUPLES = {"factors": int, "seeds": int, "encodings": str}
_RESUMABLE = {"checkpoint_every", "out", "device", "eval_chunk"}  # may change


def _field_type(name: str):
    default = FIELDS[name].default
    return type(default)


def _coerce(name: str, value):
    """A value from a file or a flag as ``name``'s type; an error naming the field."""
    if name not in FIELDS:
        raise ValueError(
            f"unknown field {name!r}; allowed: {', '.join(sorted(FIELDS))}"
        )
    if name in _TUPLES:
        kind = _TUPLES[name]
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(
                f"{name} must be a list (or a comma-separated string), got {value!r}"
            )
        try:
            return tuple(kind(v) if kind is str else _as_int(name, v) for v in value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: {err}") from None
    kind = _field_type(name)
    if kind is int:
        return _as_int(name, value)
    if kind is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.replace("_", ""))
        except ValueError:
            raise ValueError(f"{name} must be an int, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    return value


def load_config_file(path: str | os.PathLike) -> dict:
    """A JSON or TOML file of fields (``-`` or ``_`` in the names), checked and
    typed; an unknown key is an error naming it and the allowed ones."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"config: no file {str(path)!r}")
    text = path.read_text()
    if path.suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError as err:  # Python < 3.11
            raise ValueError("config: TOML needs Python >= 3.11; use JSON") from err
        data = tomllib.loads(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"config must be a .json or .toml file, got {str(path)!r}")
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(path)!r} must hold a table of fields")
    return {k.replace("-", "_"): v for k, v in data.items()}


def resolve_config(
    preset: str = "toy", file: dict | None = None, flags: dict | None = None
) -> RunConfig:
    """The preset's fields, then the file's, then the flags' (each a dict of fields,
    coerced and checked): one ``RunConfig``. ``tokens`` sets ``steps``."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    fields: dict = {"preset": preset, **PRESETS[preset]}
    tokens = None
    for source in (file or {}, flags or {}):
        for name, value in source.items():
            if name == "tokens":
                tokens = _as_int("tokens", value)
                if tokens < 1:
                    raise ValueError(f"tokens must be an int > 0, got {tokens}")
                fields.pop("steps", None)
                continue
            if name == "preset" and value != preset:
                raise ValueError(
                    f"preset: give it once (--preset), got a second one, {value!r}"
                )
            fields[name] = _coerce(name, value)
    if tokens is not None:
        per_step = fields.get("batch_size", LabConfig.batch_size) * fields.get(
            "train_len", LabConfig.train_len
        )
        fields["steps"] = -(-tokens // per_step)
    return RunConfig(**fields)


class StreamData:
    """The lab's data drawn step by step: ``batch(step)`` is a function of the seed
    and the step alone (a resumed run reads the same batches), cut into the process's
    share of the global batch. ``eval`` is the fixed evaluation set, as in
    ``make_lab_data`` (the same windows for every seed)."""

    def __init__(self, cfg: LabConfig, seed: int, rank: int = 0, world: int = 1):
        from . import _EVAL_SEED

        if cfg.batch_size % world:
            raise ValueError(
                f"batch_size ({cfg.batch_size}, the global batch) must divide by the "
                f"number of processes ({world})"
            )
        self.cfg, self.seed, self.rank, self.world = cfg, seed, rank, world
        self.source = lab_source(cfg)
        self.vocab_size, self.floor = self.source.vocab_size, self.source.floor
        gen = torch.Generator().manual_seed(_EVAL_SEED)
        self.eval = self.source.eval_windows(
            cfg.eval_sequences, max(cfg.lengths) + 1, gen
        )  # (B, max_len + 1)

    def global_batch(self, step: int) -> torch.Tensor:
        """``(batch_size, L + 1)``: every process's windows of ``step``."""
        gen = torch.Generator().manual_seed(self.seed * _STEP_SEED + step)
        return self.source.train_windows(
            self.cfg.batch_size, self.cfg.train_len + 1, gen
        )

    def batch(self, step: int):
        """``(tokens, targets, None)``: this process's rows of the global batch."""
        share = self.cfg.batch_size // self.world
        x = self.global_batch(step)[self.rank * share : (self.rank + 1) * share]
        return x[:, :-1], x[:, 1:], None


class _Stop:
    """Set by SIGINT or SIGTERM (or by ``stop_at``): stop after the step in progress.
    A second SIGINT interrupts at once."""

    def __init__(self):
        self.signal = 0

    def __call__(self, signum, frame):
        if self.signal and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_distributed(device_choice: str) -> tuple[_Dist, torch.device]:
    """The process group when launched by torchrun (WORLD_SIZE > 1), and the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # auto: CUDA when present, unless POSENC_DEVICE says otherwise (pl.get_device)
    choice = get_device() if device_choice == "auto" else torch.device(device_choice)
    cuda = choice.type == "cuda"
    if world <= 1:
        return _Dist(), choice
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch has no torch.distributed")
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    return _Dist(rank, world, local, backend), device


def _versions() -> dict:
    import posenc_lib

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "posenc_lib": getattr(posenc_lib, "__version__", "unknown"),
    }
    try:
        root = pathlib.Path(__file__).resolve().parents[3]
        out["git_commit"] = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def _cpu_name() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _where(dist_info: _Dist, device: torch.device, dtype: str) -> dict:
    """What ran where: the machine, the device, the processes, the versions."""
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
        "device": str(device),
        "device_name": (
            torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        ),
        "dtype": dtype,
        "world_size": dist_info.world,
        "backend": dist_info.backend or "none (one process)",
        "versions": _versions(),
        "argv": sys.argv[1:],
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _rng_state() -> dict:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _atomic_save(obj, path: pathlib.Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _write_json(obj, path: pathlib.Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


class _Stopped(Exception):
    pass


def _train_job(
    cfg: RunConfig,
    name: str,
    seed: int,
    data: StreamData,
    dist_info: _Dist,
    device: torch.device,
    out: pathlib.Path,
    stop: _Stop,
    resume: bool,
    stop_at: int,
    progress: bool,
) -> LabResult:
    """Train one encoding for one seed (from its checkpoint if ``resume``), evaluate
    it with the book's ``evaluate``; raise ``_Stopped`` after a checkpoint if asked
    to stop."""
    ckpt = out / "checkpoints" / f"{name}-seed{seed}.pt"
    lab_cfg = cfg.lab()
    model = build_model(name, lab_cfg, data.vocab_size, seed).to(device)
    wrapped = model
    opt, sched = make_optimizer(model, cfg.steps, cfg.lr)
    start, losses, seconds = 0, [], 0.0
    if resume and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["schedule"])
        start, losses, seconds = state["step"], state["losses"], state["seconds"]
        _set_rng_state(state["rng"])
        if state["world_size"] != dist_info.world and dist_info.main:
            print(
                f"lab: {name} seed {seed} resumes with {dist_info.world} process(es) "
                f"after {state['world_size']}: the same batches, float sums in "
                "another order (equal up to rounding, not bit for bit)",
                file=sys.stderr,
            )
    if dist_info.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=True,  # dsa's indexer trains apart from the loss
        )
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if _dtype(cfg, device) == "bfloat16"
        else None
    )

    def save(step: int) -> None:
        if dist_info.main:
            _atomic_save(
                {
                    "step": step,
                    "losses": losses,
                    "seconds": seconds + time.perf_counter() - t0,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "schedule": sched.state_dict(),
                    "rng": _rng_state(),
                    "world_size": dist_info.world,
                    "config": cfg.__dict__,
                },
                ckpt,
            )

    tokens_per_step = cfg.batch_size * cfg.train_len
    bar = tqdm(
        total=cfg.steps,
        initial=start,
        desc=f"{name} seed {seed}",
        disable=not (progress and dist_info.main),
        mininterval=1.0,
        dynamic_ncols=True,
    )
    t0 = time.perf_counter()
    model.train()
    for step in range(start, cfg.steps):
        loss = train_step(wrapped, opt, sched, data.batch(step), device, True, autocast)
        flag = float(bool(stop.signal) or step + 1 == stop_at)
        if dist_info.world > 1:
            import torch.distributed as dist

            both = torch.stack([loss.float(), loss.new_tensor(flag).float()])
            dist.all_reduce(both)  # the mean loss over processes; stop if any must
            loss, flag = both[0] / dist_info.world, float(both[1])
        losses.append(loss.item())
        done = step + 1
        rate = (done - start) * tokens_per_step / max(time.perf_counter() - t0, 1e-9)
        bar.update()
        bar.set_postfix(loss=f"{losses[-1]:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
        if flag and done < cfg.steps:
            save(done)
            bar.close()
            raise _Stopped(f"{name} seed {seed} at step {done}")
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            save(done)
    bar.close()
    model.eval()
    seconds += time.perf_counter() - t0
    tail = losses[-max(1, len(losses) // 10) :]
    t_eval = time.perf_counter()
    with autocast or contextlib.nullcontext():
        res = evaluate(
            name,
            model,
            lab_cfg,
            data,
            seed,
            device,
            sum(tail) / len(tail),
            chunk=cfg.eval_chunk or None,
        )
    res.seconds = seconds + time.perf_counter() - t_eval  # training + evaluation
    res.budget = f"{cfg.steps} steps of {tokens_per_step} tokens"
    if dist_info.main:
        (out / "jobs").mkdir(exist_ok=True)
        _write_json(
            {**result_to_dict(res), "losses": losses},
            out / "jobs" / f"{name}-seed{seed}.json",
        )
        ckpt.unlink(missing_ok=True)  # the job is done: its result replaces it
    return res


def _dtype(cfg: RunConfig, device: torch.device) -> str:
    if cfg.dtype == "auto":
        return "bfloat16" if device.type == "cuda" else "float32"
    return cfg.dtype


def run(
    cfg: RunConfig,
    resume: bool = False,
    stop_at: int = 0,
    progress: bool = True,
) -> int:
    """Every encoding and seed of ``cfg``, into ``cfg.out``; 0 when all are done,
    ``EXIT_STOPPED`` when stopped with a checkpoint (``stop_at``: stop after that
    step of the first unfinished job, as if interrupted)."""
    dist_info, device = _init_distributed(cfg.device)
    out = pathlib.Path(cfg.out)
    if dist_info.main:
        if not resume:  # a fresh run: nothing of an earlier one in this folder
            for old in (out / "jobs", out / "checkpoints"):
                for f in old.glob("*") if old.is_dir() else ():
                    f.unlink()
            (out / "run_log.jsonl").unlink(missing_ok=True)
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        _write_json(cfg.__dict__, out / "config.json")
    if dist_info.world > 1:
        import torch.distributed as dist

        dist.barrier()
    where = _where(dist_info, device, _dtype(cfg, device))
    record = {"started": _now(), "resume": resume, **where, "config": cfg.__dict__}
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    wall = time.perf_counter()
    results, status = [], "finished"
    try:
        for seed in cfg.seeds:
            data = StreamData(cfg.lab(), seed, dist_info.rank, dist_info.world)
            for name in cfg.encodings:
                done = out / "jobs" / f"{name}-seed{seed}.json"
                if resume and done.exists():
                    results.append(result_from_dict(_job_result(done)))
                    continue
                if stop.signal:
                    raise _Stopped(f"before {name} seed {seed}")
                results.append(
                    _train_job(
                        cfg, name, seed, data, dist_info, device, out, stop,
                        resume, stop_at, progress,
                    )
                )  # fmt: skip
                stop_at = 0  # only the first job trained in this call stops
    except _Stopped as why:
        status = f"stopped ({why}); resume with --resume"
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    record.update(status=status, finished=_now(), wall_s=time.perf_counter() - wall)
    if dist_info.main:
        with open(out / "run_log.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")
        if status == "finished":
            _write_results(cfg, results, out, where)
        print(f"lab: {status}; output in {out}", file=sys.stderr)
    if dist_info.world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return 0 if status == "finished" else EXIT_STOPPED


def _job_result(path: pathlib.Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("losses", None)
    return data


def _write_results(cfg, results: list[LabResult], out: pathlib.Path, where) -> None:
    """results.json, table.txt and plot.png (if matplotlib is present)."""
    log = [json.loads(line) for line in open(out / "run_log.jsonl")]
    table = format_table(results)
    summary = {
        name: {str(k): v for k, v in entry.items()}
        for name, entry in summarize(results).items()
    }
    curves = {}
    for res in results:
        losses = json.loads(
            (out / "jobs" / f"{res.encoding}-seed{res.seed}.json").read_text()
        )["losses"]
        every = max(1, len(losses) // 50)
        curves[f"{res.encoding}-seed{res.seed}"] = {
            "every": every,
            "loss": losses[::every],
        }
    record = {
        "config": cfg.__dict__,
        "description": cfg.lab().describe(),
        "run": {
            **where,
            "wall_s": sum(r["wall_s"] for r in log),
            "starts": len(log),
            "started": log[0]["started"],
            "finished": log[-1]["finished"],
        },
        "results": [result_to_dict(r) for r in results],
        "summary": summary,
        "table": table,
        "train_curves": curves,
    }
    _write_json(record, out / "results.json")
    (out / "table.txt").write_text(table + "\n")
    print(table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from . import plot_lab

        fig, ax = plt.subplots(figsize=(6, 4))
        plot_lab(results, ax=ax, title=f"lab: {cfg.preset}, L = {cfg.train_len}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "plot.png", dpi=120)
        plt.close(fig)
    except ImportError:
        pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m posenc_lib.lab",
        description="The length-extrapolation lab: train each encoding at length L, "
        "evaluate at f x L.",
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=None, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--config", default=None, help="a JSON or TOML file of fields")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--list-presets", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--stop-at",
        type=int,
        default=0,
        help="stop after this step of the first unfinished job, with a checkpoint, "
        "as if interrupted (for tests and time-limited jobs)",
    )
    p.add_argument("--tokens", default=None, help="train on at least this many tokens")
    for name, f in FIELDS.items():
        if name == "preset":
            continue
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.list_presets:
        for name, fields in PRESETS.items():
            print(f"{name}: {json.dumps(fields, default=list)}")
        return 0
    flags = {
        k: v
        for k, v in vars(args).items()
        if k in FIELDS and k != "preset" and v is not None
    }
    if args.tokens is not None:
        flags["tokens"] = args.tokens
    try:
        if args.resume:
            cfg = _resumed_config(args, flags)
        else:
            file = load_config_file(args.config) if args.config else {}
            preset = args.preset or file.pop("preset", "toy")
            cfg = resolve_config(preset, file, flags)
    except ValueError as err:
        print(f"lab: bad configuration: {err}", file=sys.stderr)
        return 2
    return run(cfg, args.resume, args.stop_at, not args.no_progress)


def _resumed_config(args, flags: dict) -> RunConfig:
    """The configuration saved in ``--out``; flags may change only what does not
    change the results (``checkpoint_every``, ``device``, ``eval_chunk``)."""
    out = pathlib.Path(flags.get("out", RunConfig.out))
    saved = out / "config.json"
    if not saved.exists():
        raise ValueError(f"out: --resume needs a run in {str(out)!r}, found none")
    fields = json.loads(saved.read_text())
    base = RunConfig(**{k: _coerce(k, v) for k, v in fields.items()})
    if args.config:
        raise ValueError(
            "config: --resume reads the configuration the run started with"
        )
    if args.preset and args.preset != base.preset:
        raise ValueError(
            f"preset: --resume continues the run with its preset ({base.preset!r}), "
            f"got {args.preset!r}"
        )
    for name, value in flags.items():
        if name == "tokens" or _coerce(name, value) != getattr(base, name):
            if name not in _RESUMABLE:
                raise ValueError(
                    f"{name}: --resume continues the run with its configuration "
                    f"({name} = {getattr(base, name, None)!r}); only "
                    f"{', '.join(sorted(_RESUMABLE))} may change"
                )
    return dataclasses.replace(
        base, **{k: _coerce(k, v) for k, v in flags.items() if k in _RESUMABLE}
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

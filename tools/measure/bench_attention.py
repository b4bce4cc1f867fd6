"""What attention costs with each encoding, on each of its paths: a benchmark.

    python -m tools.measure.bench_attention         # n = 512 .. 4096, all
    python -m tools.measure.bench_attention --n 2048 --names nope rope alibi t5
    python -m tools.measure.bench_attention --profile gpu --deadline-s 120  # GPU run

Reference (1.00): plain ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, b =
1, h = 4, d = 32, measured in the same run. Then every registered encoding on each path
it supports (``fused``, ``reference``, ``flex``; ``auto`` marks the default one),
causal, with the encoding's example positions (``arange(n)`` for a sequence) and side
inputs, and for a sequence encoding its default path once more with ``q_pos = k_pos =
None`` (column ``positions``: ``explicit`` or ``default``). Path ``mask``, for an
encoding with a ``key_bias`` or ``band_bias`` form (ALiBi, FoX, T5): the fused path with
that form switched off, so that the bias reaches the kernel as a float mask, as most
code runs it: what the form trades against.

* ``fwd``: forward under ``torch.no_grad()``; every call shares one ``Positions``
  (``pl.prepare``), as the layers of one forward pass do, so what depends only on
  positions (ALiBi's and T5's bias, RoPE's cos and sin) is built once: the cost of
  one more layer;
* ``fwd+bwd``: forward and backward, gradients for q, k, v and the encoding's
  parameters (a learned bias shared by the calls gets the sum of their gradients);
* peak memory: on CUDA what the call adds to the allocator's peak
  (``torch.cuda.max_memory_allocated``); on a CPU what it adds to the process's
  resident set at its high-water mark (Linux ``/proc/self/clear_refs``; the tool
  re-runs itself with ``MALLOC_MMAP_THRESHOLD_=65536`` so that freed buffers leave the
  process), and
  ``cache``: what the shared ``Positions`` holds (built once per forward pass).

Times are the best of interleaved repeats (reference and candidate alternate, so load
drift hits both), one thread. A configuration whose memory, extrapolated from the
previous n as n^2, would pass ``--max-mib`` is skipped and says so, as is the
reference path above ``--reference-max-n`` (2048: it grows as n^2 and is the same
einsum for all).
FlexAttention on CPU has no backward: its ``fwd+bwd`` is empty there; its first call's
compile time is reported. Writes ``posenc_lib/data/attention_<device>.csv`` and
``.json`` (one row per n, encoding, path and positions; shipped with the library and
read by ``pl.attention_benchmark`` for the cost chapter) and prints the ratios.

Bounded for the GPU run (``--profile gpu``, ``tools/build/test_gpu.sh``): the fused
and explicit paths are measured first, at every length, then FlexAttention, whose
compiles are what a budget runs out of; both files are rewritten after every row
(``meta``: ``complete``, and ``stopped`` with the reason when the run was not), so a
run stopped at a time limit keeps the rows it measured. ``--deadline-s`` starts no
measurement past that time and ``--max-compiles`` caps the graphs ``torch.compile``
makes for the flex path (counted by dynamo, per row in ``compiles``): the rows not
run say so in their note. Each flex row starts from an empty compile cache
(``torch._dynamo.reset()``), so torch's recompile limit is never reached: past it
FlexAttention would run unfused, and the library refuses that rather than label an
unfused run "flex".
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import pathlib
import platform
import sys
import time
import warnings

from posenc_lib.backends.explain import SAME_PATH
from tools.measure import version

ROOT = pathlib.Path(__file__).resolve().parents[2]
MMAP_VAR = "MALLOC_MMAP_THRESHOLD_"
B, H, D = 1, 4, 32


def _reexec_with_mmap_threshold() -> None:
    """Freed large buffers go back to the OS only below glibc's mmap threshold."""
    if os.environ.get(MMAP_VAR) is None and sys.platform.startswith("linux"):
        env = dict(os.environ, **{MMAP_VAR: "65536"})
        # run as ``python -m tools.measure.bench_attention``: re-run the module
        main = ["-m", __spec__.name] if __spec__ else [sys.argv[0]]
        os.execve(sys.executable, [sys.executable, *main, *sys.argv[1:]], env)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def peak_mib(fn) -> float:
    """MiB the call ``fn()`` adds at its peak: to CUDA's allocated memory on a GPU,
    else to the process's resident set (nan off Linux)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the high-water mark VmHWM to the current size
        before = _status_kib("VmRSS")
    except OSError:
        fn()
        return math.nan
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def best_of(fns: dict, repeats: int) -> dict:
    """name -> best seconds; the functions run in turn, ``repeats`` rounds."""
    best = {name: math.inf for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


# the lengths, paths and FlexAttention budget of a run: "cpu" is the committed CPU run;
# "gpu" fits the GPU run's time (tools/build/test_gpu.sh): two lengths, the flex path
# at the longer only, its compiles (2 to 12 s each on a GPU) capped
PROFILES = {
    "cpu": dict(n=[512, 1024, 2048, 4096], flex_n=None, max_compiles=None),
    "gpu": dict(n=[2048, 8192], flex_n=[8192], max_compiles=24),
}
FIELDS = [
    "n", "encoding", "path", "positions", "default", "fwd_x", "fb_x", "fwd_ms",
    "fb_ms", "fwd_peak_mib", "fb_peak_mib", "fb_peak_x", "cache_mib",
    "compile_s", "compiles", "note",
]  # fmt: skip


def graphs_compiled() -> int:
    """How many graphs torch.compile has made in this process (dynamo's count)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), default="cpu",
        help="lengths, flex lengths and compile cap (see PROFILES); the flags below "
        "override it",
    )  # fmt: skip
    parser.add_argument("--n", type=int, nargs="+")
    parser.add_argument("--names", nargs="+", help="encodings (default: all)")
    parser.add_argument(
        "--paths", nargs="+", default=["fused", "reference", "flex", "mask"],
        choices=["fused", "reference", "flex", "mask", "fast", "slow"],  # old names
    )  # fmt: skip
    parser.add_argument("--flex-n", type=int, nargs="+", help="lengths for flex")
    parser.add_argument("--repeats", type=int, default=5, help="best of (default 5)")
    parser.add_argument(
        "--budget-s", type=float, default=1.5,
        help="time one measurement may take; slow paths get fewer repeats (>= 2)",
    )  # fmt: skip
    parser.add_argument(
        "--deadline-s", type=float,
        help="start no measurement past this many seconds (the rest: a note)",
    )  # fmt: skip
    parser.add_argument(
        "--max-compiles", type=int,
        help="graphs torch.compile may make for the flex path (the rest: a note)",
    )  # fmt: skip
    parser.add_argument("--max-mib", type=float, default=3000.0)
    parser.add_argument(
        "--reference-max-n", "--slow-max-n", type=int, default=2048,
        help="largest n for the reference (explicit scores) path; it grows as n^2",
    )  # fmt: skip
    parser.add_argument("--out", type=pathlib.Path, help="CSV path (JSON beside it)")
    parser.add_argument(
        "--merge", action="store_true",
        help="keep the rows of --out this run does not measure (other encodings, "
        "or other paths of these); the merged rows are marked in their note",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.paths = [SAME_PATH.get(p, p) for p in args.paths]  # the old names
    for key, value in PROFILES[args.profile].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    _reexec_with_mmap_threshold()

    import torch
    import torch.nn.functional as F

    import posenc_lib as pl

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    device = pl.get_device()
    names = args.names or sorted(pl.REGISTRY)
    unknown = sorted(set(names) - set(pl.REGISTRY))
    if unknown:
        parser.error(f"unknown encodings {unknown}; registered: {sorted(pl.REGISTRY)}")
    out = args.out or pl.BENCH_DIR / f"attention_{device.type}.csv"
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows, last_peak, started = [], {}, time.perf_counter()
    lengths = sorted(args.n)
    old = None
    if args.merge and out.with_suffix(".json").exists():
        old = json.loads(out.with_suffix(".json").read_text())
    meta = dict(
        device=str(device),
        machine=platform.processor() or platform.machine(),
        card=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpus=os.cpu_count(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        numba=version("numba"),  # CoPE's blocks compiled on a CPU
        shape=dict(b=B, h=H, d=D),
        reference="F.scaled_dot_product_attention(q, k, v, is_causal=True)",
        profile=args.profile,
        lengths=lengths,
        flex_lengths=sorted(args.flex_n or lengths),
        max_compiles=args.max_compiles,
        deadline_s=args.deadline_s,
    )
    state = dict(compiles=0, stopped=None, took={})  # took: key -> (n, seconds)

    def save(complete: bool) -> None:
        """The rows so far, into the CSV and the JSON (each replaced whole)."""
        meta.update(
            seconds=round(time.perf_counter() - started),
            compiles=state["compiles"],
            complete=complete,
            stopped=state["stopped"],
        )
        write(out, meta, rows, names, args.paths, old)

    contexts = {}

    def context(n):
        """The inputs and the reference of length ``n``, made once."""
        if n in contexts:
            return contexts[n]
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, n, D, device=device) for _ in range(3))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

        def sdpa_fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            sync()

        def sdpa_fb():
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=True).sum().backward()
            sync()

        sdpa_fwd(), sdpa_fb()
        base = {"fwd": peak_mib(sdpa_fwd), "fb": peak_mib(sdpa_fb)}
        contexts[n] = (q, k, v, qg, kg, vg, sdpa_fwd, sdpa_fb, base)
        rows.append(dict(n=n, encoding="sdpa (reference)", path="fused",
                         positions="", fwd_peak_mib=base["fwd"],
                         fb_peak_mib=base["fb"], fwd_x=1.0,
                         fb_x=1.0))  # fmt: skip
        return contexts[n]

    # the fused and explicit paths first, at every length, then FlexAttention (its
    # compiles are what a time budget runs out of)
    for path in sorted(args.paths, key=lambda p: p == "flex"):
        flex_n = sorted(set(lengths) & set(args.flex_n or lengths))
        for n in flex_n if path == "flex" else lengths:
            q, k, v, qg, kg, vg, sdpa_fwd, sdpa_fb, base_peak = context(n)
            for name in names:
                for row in measure(
                    name, path, n, q, k, v, qg, kg, vg, sdpa_fwd, sdpa_fb,
                    base_peak, args, state, last_peak, started,
                ):  # fmt: skip
                    rows.append(row)
                    save(complete=False)
                print(f"n = {n}, {path}: {name} done "
                      f"({time.perf_counter() - started:.0f} s)",
                      file=sys.stderr)  # fmt: skip
    save(complete=True)
    print(table(rows))
    print(f"\nwrote {out} and .json in {meta['seconds']} s")
    return 0


def measure(name, path, n, q, k, v, qg, kg, vg, sdpa_fwd, sdpa_fb, base_peak, args,
            state, last_peak, started):  # fmt: skip
    """The rows of ``name`` on ``path`` at length ``n``: explicit positions, and
    for a sequence encoding on its default path the default ones too."""
    import torch

    import posenc_lib as pl

    device = q.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    pe = pl.make_encoding(name, d_model=H * D, n_heads=H, max_len=n).to(device)
    g = torch.Generator().manual_seed(0)
    pos = pe.example_positions(B, n, generator=g).to(device)
    inputs = {
        key: t.to(device) for key, t in pe.example_inputs(B, n, generator=g).items()
    }
    x = torch.randn(B, n, H * D, device=device)
    causal = pl.prepare(pe, B, H, n, n, pos, pos, True, None, inputs, device)
    default = "fused" if pe.runs_fused(causal) else "reference"  # this call's path
    if path == "mask" and float_mask_twin(pe) is None:
        return  # no form to switch off
    runs = [(path, "explicit")]
    if pe.coord_axes is None and path == default:
        runs.append((default, "default"))  # q_pos = k_pos = None: 0 .. n-1
    for path, given in runs:
        row = dict(
            n=n, encoding=name, path=path, positions=given, default=path == default
        )
        p_ = pos if given == "explicit" else None

        # prepared once, as a model prepares them once per forward pass: what
        # depends only on positions is built once and shared
        def prepared(p_=p_, pe=pe, inputs=inputs):
            return pl.prepare(pe, B, H, n, n, p_, p_, True, None, inputs, device)

        shared = prepared()
        # path mask: the fused path with the bias as a float mask
        run_pe = float_mask_twin(pe) if path == "mask" else pe
        run_path = "fused" if path == "mask" else path

        def call(q_, k_, v_, path=run_path, pe=run_pe, shared=shared, x=x):
            # a graph cannot be reused after its backward: training calls (q_
            # requires grad) get positions of their own
            own = prepared() if q_.requires_grad else shared
            return pl.attention(q_, k_, v_, pe, path=path, x=x, positions=own)

        key = (name, path, given)
        can_fb = not (path == "flex" and device.type == "cpu")
        if args.deadline_s is not None:
            now = time.perf_counter() - started
            # a row takes about its shorter length's time, times (n / that n)^2, and
            # more once its arrays outgrow the caches: twice that, to be safe
            prev_n, prev_s = state["took"].get(key, (n, 0.0))
            guess = 2 * prev_s * (n / prev_n) ** 2
            if now > args.deadline_s or now + guess > args.deadline_s:
                state["stopped"] = f"time budget: --deadline-s {args.deadline_s:.0f}"
                note = (
                    "not run: past the time budget"
                    if now > args.deadline_s
                    else f"not run: ~{guess:.0f} s would pass the time budget"
                )
                yield {**row, "note": note + " (--deadline-s)"}
                continue
        row_started = time.perf_counter()
        if path == "flex" and args.max_compiles is not None:
            if state["compiles"] + 1 + can_fb > args.max_compiles:
                note = f"not run: FlexAttention compiles capped at {args.max_compiles}"
                yield {**row, "note": note + " (--max-compiles)"}
                continue
        if path == "reference" and n > args.reference_max_n:
            yield {**row, "note": "skipped: reference path above n_max"}
            continue
        if key in last_peak:  # memory grows as n^2 at most
            prev_n, prev_mib = last_peak[key]
            guess = prev_mib * (n / prev_n) ** 2
            if guess > args.max_mib:
                yield {**row, "note": f"skipped: ~{guess:.0f} MiB > --max-mib"}
                continue
        if path == "flex":
            # a fresh compile cache per row: torch's recompile limit is never reached
            # (past it FlexAttention would run unfused; the library refuses that)
            torch._dynamo.reset()
        graphs = graphs_compiled()
        try:
            with torch.no_grad():
                start = time.perf_counter()
                call(q, k, v)  # warm-up: compile, caches
                first = time.perf_counter() - start
            if can_fb:
                start = time.perf_counter()
                call(qg, kg, vg).sum().backward()  # warm-up
                sync()
                t_fb = time.perf_counter() - start
        except (ValueError, TypeError, RuntimeError) as error:
            state["compiles"] += graphs_compiled() - graphs
            yield {**row, "note": f"refused: {str(error).splitlines()[0][:90]}"}
            continue
        finally:
            for t_ in (qg, kg, vg):
                t_.grad = None
            run_pe.zero_grad(set_to_none=True)
        if path == "flex":
            row["compile_s"] = round(first, 2)
            row["compiles"] = graphs_compiled() - graphs
            state["compiles"] += row["compiles"]

        def fwd(call=call):
            with torch.no_grad():
                call(q, k, v)
            sync()

        def fb(call=call):
            call(qg, kg, vg).sum().backward()
            sync()

        repeats = max(2, min(args.repeats, int(args.budget_s / max(first, 1e-4))))
        t = best_of({"ref": sdpa_fwd, "fwd": fwd}, repeats)
        row.update(fwd_ms=1e3 * t["fwd"], fwd_x=t["fwd"] / t["ref"])
        row["fwd_peak_mib"] = peak_mib(fwd)
        if can_fb:
            repeats = max(2, min(args.repeats, int(args.budget_s / t_fb)))
            t = best_of({"ref": sdpa_fb, "fb": fb}, repeats)
            row.update(fb_ms=1e3 * t["fb"], fb_x=t["fb"] / t["ref"])
            row["fb_peak_mib"] = peak_mib(fb)
            row["fb_peak_x"] = row["fb_peak_mib"] / max(base_peak["fb"], 1e-3)
        else:
            row["note"] = "no backward: FlexAttention on CPU is forward only"
        memo = [t for t in shared.memo.values() if isinstance(t, torch.Tensor)]
        row["cache_mib"] = sum(t.numel() * t.element_size() for t in memo) / 2**20
        peaks = [row.get("fwd_peak_mib", 0), row.get("fb_peak_mib", 0)]
        last_peak[key] = (n, max(p for p in peaks if p == p) + row["cache_mib"])
        for t_ in (qg, kg, vg):
            t_.grad = None
        run_pe.zero_grad(set_to_none=True)
        state["took"][key] = (n, time.perf_counter() - row_started)
        yield row


def write(out: pathlib.Path, meta: dict, rows: list[dict], names, paths, old) -> None:
    """``out`` (CSV) and its JSON, each replaced whole; with ``old`` (--merge) the
    other encodings' rows of the earlier run kept, and its meta."""
    if old is not None:
        when = time.ctime()
        later = f"measured later ({when})"
        rows = [
            {**r, "note": "; ".join(filter(None, [r.get("note"), later]))}
            if r["encoding"] in names and r["path"] in paths else r
            for r in rows
        ]  # fmt: skip
        # an old row stays unless this run measured its encoding on its path
        kept = [
            r for r in old["rows"]
            if not (r["encoding"] in names and r["path"] in paths)
            and r["encoding"] != "sdpa (reference)"
        ]  # fmt: skip
        rows = (
            kept
            + [r for r in rows if r["encoding"] != "sdpa (reference)"]
            + [r for r in old["rows"] if r["encoding"] == "sdpa (reference)"]
        )
        added = dict(encodings=names, paths=paths, when=when,
                     torch=meta["torch"], numba=meta["numba"],
                     seconds=meta["seconds"])  # fmt: skip
        meta = {**old["meta"], "merged": [*old["meta"].get("merged", []), added]}
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    with open(part, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _fmt(row.get(key)) for key in FIELDS})
    os.replace(part, out)
    part.write_text(
        json.dumps(dict(meta=meta, rows=rows), indent=1, default=str) + "\n"
    )
    os.replace(part, out.with_suffix(".json"))


def float_mask_twin(pe):
    """A copy of ``pe`` with its ``key_bias`` and ``band_bias`` forms switched off,
    so that the fused path hands the kernel its ``score_bias`` as a float mask; None
    for an encoding without either form."""
    import copy

    from posenc_lib.base import PositionalEncoding, overrides

    forms = [f for f in ("key_bias", "band_bias") if overrides(pe, f)]
    if not forms:
        return None
    cls = type(pe)
    plain = {f: getattr(PositionalEncoding, f) for f in forms}
    twin = copy.deepcopy(pe)
    twin.__class__ = type(f"{cls.__name__}AsFloatMask", (cls,), plain)
    return twin


def _fmt(value):
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return "" if value is None else value


def table(rows) -> str:
    """Ratios to the reference: forward and fwd+bwd time, fwd+bwd peak memory."""
    sizes = sorted({r["n"] for r in rows})
    keys = sorted(
        {(r["encoding"], r["path"], r["positions"]) for r in rows
         if r["path"] != "fused"}
    )  # fmt: skip
    lines = [
        "time / plain SDPA (fwd | fwd+bwd); * = default path; - = not run;",
        "positions explicit (the encoding's example, arange(n) for a sequence) or",
        "default (q_pos = k_pos = None)",
        f"{'encoding':<16}{'path':<6}{'positions':<10}"
        + "".join(f"{'n=' + str(n):>16}" for n in sizes),
    ]
    for name, path, given in keys:
        cells, star = [], ""
        for n in sizes:
            match = [
                r for r in rows
                if (r["encoding"], r["path"], r.get("positions")) == (name, path, given)
            ]  # fmt: skip
            row = next((r for r in match if r["n"] == n), {})
            star = "*" if row.get("default") else star
            fwd, fb = row.get("fwd_x"), row.get("fb_x")
            cell = f"{fwd:.2f}" if fwd else "-"
            cell += f" | {fb:.2f}" if fb else " | -"
            cells.append(f"{cell:>16}")
        if any(c.strip() != "- | -" for c in cells):
            lines.append(f"{name:<16}{path + star:<6}{given:<10}" + "".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""What a whole model costs with each encoding: ``TinyTransformer`` against a
nanoGPT-style model that calls the fused kernel directly.

    python -m tools.measure.bench_model                       # CPU, 10 encodings
    python -m tools.measure.bench_model --device cuda         # (b, n) = (4, 2048), bf16
    python -m tools.measure.bench_model --encodings nope t5 --repeats 9

Baseline (1.00): ``SDPAModel``, written here, the same model as
``pl.TinyTransformer(vocab, D, h, N)`` (embedding, N pre-LayerNorm blocks with four
bias-free projections and a 4D GELU MLP, final LayerNorm, bias-free head; the same
parameter names, so a NoPE ``TinyTransformer``'s weights load into it and give its
logits) whose attention is one ``F.scaled_dot_product_attention(q, k, v,
is_causal=True)``: no positions, no checks, no hooks. Every encoding is then
``pl.TinyTransformer(..., pe=pl.make_encoding(name, d_model=D, n_heads=h,
max_len=n))`` on the same random tokens, causal (a language model), on its default
path; each is also reported against the NoPE ``TinyTransformer`` (the library's own
overhead cancels there, what is left is the encoding's):

* ``fwd``: ``model(tokens)`` under ``torch.no_grad()``;
* ``fwd+bwd``: ``cross_entropy(model(tokens), tokens).backward()``, gradients set to
  None before each run;
* ``peak``: the extra memory of one ``fwd+bwd`` at its peak, the gradients included:
  on CUDA what it adds to ``torch.cuda.max_memory_allocated``; on a CPU the peak of
  the tensors it creates (``pl.tensor_memory``, which does not see the allocator's
  caching).

Every round runs every model once, back to back (A B C ... A B C ...), after two
warm-up runs each; times are medians over the rounds, ratios the median of each
round's ratio, so load that drifts over a run hits the models of a round alike.
One thread on a CPU. Writes ``posenc_lib/data/model_bench_<device>.json`` (meta: torch,
device, card, threads on a CPU, date, config; one row per model) and a markdown table
beside it (``.md``), and prints the table. Both are rewritten after every round, so a
run stopped at a time limit keeps what it measured; ``--deadline-s`` (the GPU run,
``tools/build/test_gpu.sh``) starts no round past that time (meta ``rounds``, and
``stopped`` with the reason when fewer than ``--repeats`` ran).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import posenc_lib as pl
from tools.measure import version

ENCODINGS = [
    "nope", "rope", "alibi", "t5", "xpos", "fox", "sink", "stick_breaking", "cope",
    "path",
]  # fmt: skip
# the configurations the model-level targets name: vocab, D, h, N; tokens (b, n); dtype
CONFIGS = {
    "cpu": dict(
        vocab=256, d_model=128, n_heads=4, n_layers=2, batch=1, n=1024, dtype="float32"
    ),  # fmt: skip
    "cuda": dict(
        vocab=1024,
        d_model=1024,
        n_heads=16,
        n_layers=4,
        batch=4,
        n=2048,
        dtype="bfloat16",
    ),  # fmt: skip
}
BASELINE = "sdpa (baseline)"


class SDPABlock(nn.Module):
    """x + Attn(LN(x)), then x + MLP(LN(x)); attention is the fused kernel, causal."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.Module()  # named as in TinyTransformer: weights load across
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self.attn, name, nn.Linear(d_model, d_model, bias=False))
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``(b, n, D)`` -> ``(b, n, D)``"""
        b, n, D = x.shape
        a, h = self.attn, self.n_heads
        t = self.ln1(x)
        # (b, n, D) -> (b, h, n, d)
        q, k, v = (
            w(t).view(b, n, h, D // h).transpose(1, 2) for w in (a.w_q, a.w_k, a.w_v)
        )
        # z = softmax(q k^T / sqrt(d) + causal mask) v
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, d)
        x = x + a.w_o(z.transpose(1, 2).reshape(b, n, D))
        return x + self.mlp(self.ln2(x))


class SDPAModel(nn.Module):
    """nanoGPT's shape of model, sized as ``TinyTransformer(vocab, D, h, N)``:
    tokens ``(b, n)`` -> logits ``(b, n, V)``, causal, no positional encoding."""

    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(
            SDPABlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (b, n, D)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # (b, n, V)


def peak_mib(fn, device: torch.device) -> float:
    """MiB that ``fn()`` adds at its peak: to CUDA's allocated memory on a GPU; on a
    CPU the peak of the tensors it creates (``pl.tensor_memory``)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    return pl.tensor_memory(fn)[1] / 2**20


def build(name: str, cfg: dict, device: torch.device, dtype: torch.dtype):
    """The baseline (``name = BASELINE``) or ``TinyTransformer`` with encoding
    ``name``, seeded, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    sizes = (cfg["vocab"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"])
    if name == BASELINE:
        model = SDPAModel(*sizes)
    else:
        D, h = cfg["d_model"], cfg["n_heads"]
        pe = pl.make_encoding(name, d_model=D, n_heads=h, max_len=cfg["n"])
        if pe.coord_axes is not None or pe.side_inputs:
            raise ValueError("reads coordinates or side inputs, not token order")
        model = pl.TinyTransformer(*sizes, pe=pe)
    return model.to(device=device, dtype=dtype)


def measure(
    models: dict,
    tokens: torch.Tensor,
    repeats: int,
    deadline=None,
    each_round=None,
    skipped=None,
) -> dict:
    """name -> {"fwd": [s, ...], "fb": [s, ...], "peak": MiB}: warm-up and the
    peak of each model, then ``repeats`` rounds, every model once per round, in
    turn. With ``deadline`` (a ``time.perf_counter()`` value) no model but the two
    references (the baseline, NoPE) is warmed up past it, and no round starts past
    it (one always runs): a model left out is removed from ``models`` and
    ``skipped(name)`` is called. ``each_round(times)`` is called after every
    round."""
    device = tokens.device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    targets = tokens.flatten()

    def fwd(model):
        with torch.no_grad():
            model(tokens)

    def fb(model):
        logits = model(tokens)
        F.cross_entropy(logits.flatten(0, 1).float(), targets).backward()

    def timed(fn, model) -> float:
        model.zero_grad(set_to_none=True)
        if sync:
            sync()
        start = time.perf_counter()
        fn(model)
        if sync:
            sync()
        return time.perf_counter() - start

    times = {name: {"fwd": [], "fb": []} for name in models}
    for name, model in list(models.items()):  # warm-up: caches, kernels, allocator
        late = deadline is not None and time.perf_counter() > deadline
        if late and name not in (BASELINE, "nope"):
            del models[name], times[name]
            if skipped is not None:
                skipped(name)
            continue
        for _ in range(2):
            timed(fwd, model), timed(fb, model)
        model.zero_grad(set_to_none=True)
        times[name]["peak"] = peak_mib(lambda model=model: fb(model), device)
        model.zero_grad(set_to_none=True)
    for round_ in range(repeats):
        if round_ and deadline is not None and time.perf_counter() > deadline:
            break
        for name, model in models.items():
            times[name]["fwd"].append(timed(fwd, model))
            times[name]["fb"].append(timed(fb, model))
        if each_round is not None:
            each_round(times)
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return times


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median over rounds of ``a / b`` (the two ran in the same round)."""
    return statistics.median(x / y for x, y in zip(a, b))


def rows_of(times: dict, default_path: dict, notes: dict, models: dict) -> list[dict]:
    """One row per model: medians in ms, ratios to the baseline and to NoPE."""
    base, nope = times[BASELINE], times.get("nope")
    rows = []
    for name in [BASELINE, *default_path, *notes]:
        row = dict(model=name)
        if name in notes:
            rows.append({**row, "note": notes[name]})
            continue
        t = times[name]
        row.update(
            path=default_path.get(name, "sdpa"),
            params=sum(p.numel() for p in models[name].parameters()),
            fwd_ms=1e3 * statistics.median(t["fwd"]),
            fb_ms=1e3 * statistics.median(t["fb"]),
            fb_peak_mib=t["peak"],
        )
        for ref, key in ((base, "sdpa"), (nope, "nope")):
            if ref is None:
                continue
            row[f"fwd_x_{key}"] = paired_ratio(t["fwd"], ref["fwd"])
            row[f"fb_x_{key}"] = paired_ratio(t["fb"], ref["fb"])
            row[f"fb_peak_x_{key}"] = t["peak"] / max(ref["peak"], 1e-9)
        rows.append(row)
    return rows


def table(meta: dict, rows: list[dict]) -> str:
    """The rows as a markdown table: ms, ratios to the baseline and to NoPE."""
    cfg = meta["config"]
    head = (
        f"`TinyTransformer({cfg['vocab']}, {cfg['d_model']}, {cfg['n_heads']}, "
        f"{cfg['n_layers']})` on tokens ({cfg['batch']}, {cfg['n']}), {cfg['dtype']}, "
        f"{meta['device_name']}, "
        + (f"{meta['threads']} thread(s), " if meta.get("threads") else "")
        + f"torch {meta['torch']}, "
        + (f"numba {meta['numba']}, " if meta.get("numba") else "")
        + f"{meta['date']}; medians of {meta.get('rounds', meta['repeats'])} "
        "interleaved rounds. "
        "x sdpa / x nope: time or peak over the baseline's / the NoPE model's."
    )
    cols = [
        ("model", "model", "{}"), ("path", "path", "{}"),
        ("fwd ms", "fwd_ms", "{:.1f}"), ("fwd+bwd ms", "fb_ms", "{:.1f}"),
        ("fwd x sdpa", "fwd_x_sdpa", "{:.2f}"),
        ("fwd+bwd x sdpa", "fb_x_sdpa", "{:.2f}"),
        ("fwd+bwd x nope", "fb_x_nope", "{:.2f}"),
        ("peak MiB", "fb_peak_mib", "{:.1f}"),
        ("peak x sdpa", "fb_peak_x_sdpa", "{:.2f}"),
        ("peak x nope", "fb_peak_x_nope", "{:.2f}"),
    ]  # fmt: skip
    lines = [head, "", "| " + " | ".join(c[0] for c in cols) + " |"]
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for row in rows:
        cells = []
        for _, key, fmt in cols:
            value = row.get(key)
            cells.append("-" if value is None else fmt.format(value))
        if "note" in row:
            cells[1] = row["note"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=sorted(CONFIGS), default="cpu")
    parser.add_argument("--encodings", nargs="+", default=ENCODINGS)
    parser.add_argument("--repeats", type=int, default=15, help="rounds (median)")
    parser.add_argument("--out", type=pathlib.Path, help="JSON path (.md beside it)")
    parser.add_argument(
        "--deadline-s", type=float,
        help="start no round past this many seconds (one always runs); the JSON "
        "and the table are rewritten after every round",
    )  # fmt: skip
    sizes = parser.add_argument_group("sizes (default: the device's configuration)")
    for key in ("vocab", "d_model", "n_heads", "n_layers", "batch", "n"):
        sizes.add_argument("--" + key.replace("_", "-"), type=int, dest=key)
    sizes.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    unknown = [name for name in args.encodings if name not in pl.REGISTRY]
    if unknown:
        parser.error(
            f"--encodings: unknown {unknown}; registered: {sorted(pl.REGISTRY)}"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    cfg = dict(CONFIGS[args.device])
    cfg.update({k: getattr(args, k) for k in cfg if getattr(args, k) is not None})
    for key in ("vocab", "d_model", "n_heads", "n_layers", "batch", "n"):
        if cfg[key] < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1, got {cfg[key]}")
    if cfg["d_model"] % cfg["n_heads"]:
        parser.error(f"--d-model {cfg['d_model']} must split into --n-heads")
    names = ["nope"] + [n for n in args.encodings if n != "nope"]  # NoPE: a reference
    device, dtype = torch.device(args.device), getattr(torch, cfg["dtype"])
    out = args.out or pl.BENCH_DIR / f"model_bench_{args.device}.json"

    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        started = time.perf_counter()
        tokens = torch.randint(
            0, cfg["vocab"], (cfg["batch"], cfg["n"]),
            generator=torch.Generator().manual_seed(0),
        ).to(device)  # fmt: skip
        models, notes, default_path = (
            {BASELINE: build(BASELINE, cfg, device, dtype)},
            {},
            {},
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in names:
                try:
                    model = build(name, cfg, device, dtype)
                    with torch.no_grad():
                        model(tokens[:, :2])  # refused here, not mid-measurement
                except (ValueError, TypeError, RuntimeError) as error:
                    notes[name] = f"refused: {str(error).splitlines()[0][:90]}"
                    continue
                models[name] = model
                # the path a causal call in token order takes (the model's calls)
                causal = pl.prepare(model.pe, 1, 1, 2, 2, causal=True, device=device)
                default_path[name] = (
                    "fused" if model.pe.runs_fused(causal) else "reference"
                )
            meta = dict(
                device=args.device,
                device_name=(
                    torch.cuda.get_device_name(device)
                    if device.type == "cuda"
                    else _cpu_name()
                ),
                cpus=os.cpu_count(),
                threads=torch.get_num_threads() if device.type == "cpu" else None,
                torch=torch.__version__,
                numba=version("numba"),  # CoPE's blocks compiled on a CPU
                python=platform.python_version(),
                date=datetime.datetime.now(datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M UTC"
                ),
                config=cfg,
                repeats=args.repeats,
                baseline=(
                    "SDPAModel: TinyTransformer's layers, attention "
                    "F.scaled_dot_product_attention(q, k, v, is_causal=True)"
                ),
                timing=(
                    "median of interleaved rounds; ratios: median of per-round ratios"
                ),
                memory=(
                    "torch.cuda.max_memory_allocated over the call"
                    if device.type == "cuda"
                    else "pl.tensor_memory (peak of the tensors the call creates)"
                ),
            )

            def save(times, complete=False):
                rounds = len(times[BASELINE]["fb"])
                meta.update(
                    seconds=round(time.perf_counter() - started),
                    rounds=rounds,
                    complete=complete,
                    stopped=(
                        f"time budget: {rounds} of {args.repeats} rounds "
                        f"(--deadline-s {args.deadline_s:.0f})"
                        if complete and rounds < args.repeats
                        else None
                    ),
                )
                write(out, meta, rows_of(times, default_path, notes, models))

            deadline = None if args.deadline_s is None else started + args.deadline_s

            def skipped(name):
                notes[name] = "not run: past the time budget (--deadline-s)"
                default_path.pop(name)

            times = measure(models, tokens, args.repeats, deadline, save, skipped)
        save(times, complete=True)
        rows = rows_of(times, default_path, notes, models)
    finally:
        torch.set_num_threads(threads)
    print(table(meta, rows))
    print(f"wrote {out} and .md in {meta['seconds']} s", file=sys.stderr)
    return 0


def write(out: pathlib.Path, meta: dict, rows: list[dict]) -> None:
    """The JSON and its markdown table (``.md``), each replaced whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in (
        (out, json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n"),
        (out.with_suffix(".md"), table(meta, rows)),
    ):
        part = path.with_name(path.name + ".part")
        part.write_text(text)
        os.replace(part, path)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())

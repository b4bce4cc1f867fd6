"""The length-extrapolation lab: train a tiny causal LM at length L, evaluate it
at f x L.

One seeded harness for any 1-D encoding of ``REGISTRY`` (Part III, "The
length-extrapolation lab")::

    >>> cfg = LabConfig(steps=150)  # Markov data, L = 16, factors 1, 2, 4, 8
    >>> results = run_lab(["alibi", "sinusoidal"], cfg, seeds=(0,))
    >>> print(format_table(results))

Protocol (the ALiBi paper's "train short, test long", Press et al. 2022, at toy scale):

* every encoding trains the same ``TinyTransformer`` from the same initial seed on the
  same batches of length L (``train_len``), with ``max_len = L`` handed to its factory;
* evaluation uses one fixed set of long sequences of ``max(factors) * L`` tokens, cut
  into windows of ``n = f * L`` tokens, so every length scores exactly the same
  predicted tokens;
* ``loss_in`` is the loss at 1 x L on the second half of each window (positions
  L/2 .. L-1, positions the model trained on, with warm context); ``loss_past[f]`` is
  the loss at f x L on positions L .. fL-1, which no training window reached.
  ``rise(f)`` is their difference: ~0 means the encoding extrapolates, > 0 means the
  loss grows past L;
* an encoding that cannot run past L (a learned table raises) is reported as undefined
  (nan) there, with the reason, instead of failing the run.

Which encodings the chapters train: ``LAB_ENCODINGS``, a declared list (the lab
chapter and the comparison chapter train exactly these). Registering an encoding does
not add it: each name costs both chapters a training run, so a chapter that wants a new
one in the lab adds it here and re-measures both chapters' run time and seed sweeps.
``sequence_encodings()`` lists every registered encoding the harness *can* run.

After training, a RoPE model can be changed without training (``rope_rescaled``: PI,
NTK-aware scaling, YaRN at each evaluation length) or have its rotation dropped and be
recalibrated at L (``drop_rope``, ``recalibration_batches``: DroPE, Gelberg et al.
2026); ``run_drope`` compares them, with each method's training budget.

Data: ``"markov"`` is an order-k Markov chain (``MarkovSource``) whose entropy rate is a
known loss floor; ``"stdlib"`` is characters of the Python standard library's own
source, split into a training part (the first 90 %) and an evaluation part (the rest);
``"text"`` is every file of a folder read byte by byte (``read_text_folder``), and
``"hf"`` a Hugging Face dataset's text (``read_hf_dataset``, online, with the optional
``datasets``), split alike. The same lab at larger sizes, with checkpoints and many
processes, is the command line ``python -m posenc_lib.lab`` (``posenc_lib.lab.cli``).
"""

from __future__ import annotations

import copy
import math
import pathlib
import sysconfig
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ...base import HOOKS, overrides
from ...data import MarkovSource, stdlib_corpus
from ...encodings.rope import Rotary
from ...encodings.rope_scaling import rope_inv_freq
from ...model import TinyTransformer
from ...registry import REGISTRY, make_encoding
from ...train import train
from ...utils import check_head_split, check_positive_int, get_device, seed_everything

__all__ = [
    "LAB_ENCODINGS",
    "sequence_encodings",
    "LabConfig",
    "LabData",
    "LabResult",
    "DATASETS",
    "LabSource",
    "lab_source",
    "read_text_folder",
    "read_hf_dataset",
    "make_lab_data",
    "build_model",
    "result_to_dict",
    "result_from_dict",
    "load_results",
    "committed_run",
    "run_encoding",
    "train_at_length",
    "evaluate",
    "run_lab",
    "rope_rescaled",
    "drop_rope",
    "recalibration_batches",
    "run_drope",
    "format_table",
    "plot_lab",
    "summarize",
]

DATASETS = ("markov", "stdlib", "text", "hf")
_EVAL_SEED = 10_000  # the evaluation set does not depend on the training seed
_RECAL_SEED = 20_000  # recalibration windows: seed + this, apart from the training's

# The encodings the lab chapter and the comparison chapter train, one run each: every
# 1-D encoding the library held before those of 2025-26 (lerope, inkling_bias, wall,
# ddrope, fope: measured in their own chapter). Declared, not read from the registry,
# so that a new encoding does not silently lengthen both chapters.
LAB_ENCODINGS = (
    "alibi",
    "axial",
    "conv_pos",
    "cope",
    "da_transformer",
    "dsa",
    "fox",
    "huang_m1",
    "huang_m2",
    "huang_m3",
    "huang_m4",
    "learned",
    "nope",
    "nope_tempered",
    "path",
    "path_fox",
    "rope",
    "rope_chunked",
    "rope_dynamic",
    "rope_values",
    "shaw",
    "sink",
    "sinusoidal",
    "stick_breaking",
    "t5",
    "tener",
    "transformer_xl",
    "xpos",
)


@dataclass(frozen=True)
class LabConfig:
    """Everything that defines one lab run (sizes, data and training); seeds are passed
    separately."""

    dataset: str = "markov"  # "markov", "stdlib" or "text" (a folder, byte-level)
    train_len: int = 16  # L, the training length
    factors: tuple[int, ...] = (1, 2, 4, 8)  # evaluate at f * L
    steps: int = 150
    batch_size: int = 16
    lr: float = 1e-2
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 1
    eval_sequences: int = 32  # long evaluation sequences of max(factors) * L tokens
    markov_states: int = 8
    markov_order: int = 2
    markov_temperature: float = (
        0.25  # sharp transitions: knowing the last two tokens pays
    )
    markov_seed: int = 0  # the chain itself (its transition table)
    corpus_chars: int = 200_000
    data_dir: str = ""  # "text": a folder of text files ("stdlib": Python's own)
    data_glob: str = "**/*"  # "text": which files of data_dir, sorted by path
    hf_dataset: str = ""  # "hf": a Hugging Face dataset, "name" or "name:config"

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(
                f"dataset must be one of {', '.join(map(repr, DATASETS))}, got "
                f"{self.dataset!r}"
            )
        if (self.dataset == "text") != bool(self.data_dir):
            raise ValueError(
                "data_dir must name a folder of text files when dataset is 'text' "
                f"(and only then), got data_dir={self.data_dir!r} with "
                f"dataset={self.dataset!r}"
            )
        if (self.dataset == "hf") != bool(self.hf_dataset):
            raise ValueError(
                "hf_dataset must name a Hugging Face dataset ('name' or "
                "'name:config') when dataset is 'hf' (and only then), got "
                f"hf_dataset={self.hf_dataset!r} with dataset={self.dataset!r}"
            )
        for name in (
            "train_len",
            "steps",
            "batch_size",
            "d_model",
            "n_heads",
            "n_layers",
            "eval_sequences",
            "markov_states",
            "markov_order",
            "corpus_chars",
        ):
            check_positive_int(getattr(self, name), name)
        if self.train_len < 2:
            raise ValueError(
                "train_len must be >= 2 (loss_in uses the window's second half), got "
                f"{self.train_len}"
            )
        if not self.factors or any(
            isinstance(f, bool) or not isinstance(f, int) or f < 1 for f in self.factors
        ):
            raise ValueError(
                f"factors must be a non-empty tuple of ints >= 1, got {self.factors!r}"
            )
        if 1 not in self.factors or list(self.factors) != sorted(set(self.factors)):
            raise ValueError(
                "factors must be increasing and include 1 (the in-distribution "
                f"reference), got {self.factors!r}"
            )
        if not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        check_head_split(self.d_model, self.n_heads)

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(f * self.train_len for f in self.factors)

    def describe(self) -> str:
        """The harness in words, generated from this configuration: chapters print it
        instead of typing a description that could drift from the code."""
        if self.dataset == "markov":
            floor = MarkovSource(
                self.markov_states,
                self.markov_order,
                self.markov_seed,
                self.markov_temperature,
            ).loss_floor
            data = (
                f"an order-{self.markov_order} Markov chain over "
                f"{self.markov_states} symbols (temperature "
                f"{self.markov_temperature:g}, chain seed {self.markov_seed}); its "
                f"entropy rate, the loss floor, is {floor:.3f} nats/token"
            )
        elif self.dataset == "stdlib":
            data = (
                f"the first {self.corpus_chars:,} characters of the Python standard "
                "library's own source"
            )
        elif self.dataset == "text":
            data = (
                f"the bytes of the files {self.data_glob!r} under {self.data_dir!r} "
                "(byte-level, 256 symbols)"
            )
        else:
            data = (
                f"the first {self.corpus_chars:,} bytes of the 'text' column of the "
                f"Hugging Face dataset {self.hf_dataset!r} (byte-level, 256 symbols)"
            )
        lengths = ", ".join(f"{n}" for n in self.lengths)
        return "\n".join(
            [
                f"- Data: {data}.",
                f"- Model: {self.n_layers} layer(s), d_model {self.d_model}, "
                f"{self.n_heads} heads ({self.d_model // self.n_heads} dimensions "
                "per head).",
                f"- Training: {self.steps} steps of {self.batch_size} windows of "
                f"L = {self.train_len} tokens (AdamW, learning rate {self.lr:g}).",
                f"- Evaluation: {self.eval_sequences} long sequences, read in windows "
                f"of N = {lengths} tokens; reported: the loss on positions past L "
                "and the mean loss over each window.",
            ]
        )


@dataclass
class LabData:
    """Token tensors for one seed: ``train`` ``(steps * batch_size, L + 1)``, ``eval``
    ``(B, max_len + 1)``."""

    vocab_size: int
    train: torch.Tensor
    eval: torch.Tensor
    floor: float | None  # the Markov chain's entropy rate (nats), None for real text

    def batches(self, batch_size: int):
        """``step -> (tokens, targets, None)``: the step-th block of ``batch_size``
        training windows."""

        def batch(step: int):
            x = self.train[step * batch_size : (step + 1) * batch_size]  # (b, L + 1)
            return x[:, :-1], x[:, 1:], None

        return batch


def _windows(
    stream: torch.Tensor, count: int, length: int, generator: torch.Generator
) -> torch.Tensor:
    """``(count, length)`` windows of a 1-D token stream at random offsets."""
    if length > len(stream):
        raise ValueError(
            f"a window of {length} tokens does not fit "
            f"the {len(stream)} tokens available"
        )
    starts = torch.randint(len(stream) - length + 1, (count,), generator=generator)
    return stream[starts[:, None] + torch.arange(length)]


def read_text_folder(folder: str, pattern: str = "**/*") -> torch.Tensor:
    """The bytes of the files ``pattern`` under ``folder`` (sorted by path, hidden
    files and folders skipped), one after the other with a newline between files, as
    a 1-D stream of token ids 0 .. 255 (a byte-level tokenizer: nothing to fit, every
    file readable). ``folder = "stdlib"`` reads the running Python's standard
    library."""
    root = pathlib.Path(
        sysconfig.get_paths()["stdlib"] if folder == "stdlib" else folder
    )
    if not root.is_dir():
        raise ValueError(f"data_dir must be a folder, got {folder!r} ({root})")
    files = [
        f
        for f in sorted(root.glob(pattern))
        if f.is_file() and not any(p.startswith(".") for p in f.relative_to(root).parts)
    ]
    if not files:
        raise ValueError(
            f"data_dir {folder!r} holds no file matching data_glob {pattern!r}"
        )
    raw = b"\n".join(f.read_bytes() for f in files)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


def read_hf_dataset(name: str, n_bytes: int, split: str = "train") -> torch.Tensor:
    """The first ``n_bytes`` bytes (UTF-8) of the ``text`` column of the Hugging Face
    dataset ``name`` (``"name"`` or ``"name:config"``), rows joined by newlines, as
    token ids 0 .. 255. Streams from the Hub (online) through the optional
    ``datasets`` package (``pip install "posenc_lib[datasets]"``); nothing in the
    book or its tests calls it."""
    check_positive_int(n_bytes, "n_bytes")
    try:
        import datasets
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "dataset 'hf' needs the datasets package, which the library does not "
            'install: pip install "posenc_lib[datasets]" (or pip install datasets)'
        ) from err
    path, _, config = name.partition(":")
    rows = datasets.load_dataset(path, config or None, split=split, streaming=True)
    parts, total = [], 0
    for row in rows:
        if "text" not in row:
            raise ValueError(
                f"hf_dataset {name!r} has no 'text' column (columns: {sorted(row)})"
            )
        parts.append(row["text"].encode("utf-8"))
        total += len(parts[-1]) + 1
        if total >= n_bytes:
            break
    raw = b"\n".join(parts)[:n_bytes]
    if len(raw) < 2:
        raise ValueError(f"hf_dataset {name!r} split {split!r} holds no text")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


@dataclass
class LabSource:
    """Where ``cfg``'s tokens come from: a Markov chain, or a stream of text split
    into a training part and an evaluation part that do not overlap (the first 90 %
    and the rest, ``train_span`` and ``eval_span`` as offsets into the stream)."""

    vocab_size: int
    floor: float | None
    chain: MarkovSource | None = None
    stream: torch.Tensor | None = None  # (N,) token ids, text only
    split: int = 0  # stream[:split] trains, stream[split:] evaluates

    @property
    def train_span(self) -> tuple[int, int]:
        return (0, self.split)

    @property
    def eval_span(self) -> tuple[int, int]:
        return (self.split, 0 if self.stream is None else len(self.stream))

    def train_windows(self, count: int, length: int, gen: torch.Generator):
        """``(count, length)`` training windows drawn with ``gen``."""
        if self.chain is not None:
            return self.chain.sample(count, length, gen)
        return _windows(self.stream[: self.split], count, length, gen)

    def eval_windows(self, count: int, length: int, gen: torch.Generator):
        """``(count, length)`` evaluation windows drawn with ``gen``."""
        if self.chain is not None:
            return self.chain.sample(count, length, gen)
        return _windows(self.stream[self.split :], count, length, gen)


def lab_source(cfg: LabConfig) -> LabSource:
    """``cfg``'s data source: the chain, the standard library's characters, or a
    folder of text read byte by byte (``read_text_folder``)."""
    if cfg.dataset == "markov":
        chain = MarkovSource(
            cfg.markov_states,
            cfg.markov_order,
            seed=cfg.markov_seed,
            temperature=cfg.markov_temperature,
        )
        return LabSource(cfg.markov_states, chain.loss_floor, chain=chain)
    if cfg.dataset == "stdlib":
        corpus = stdlib_corpus(cfg.corpus_chars)
        vocab, stream = corpus.vocab_size, corpus.data
    elif cfg.dataset == "text":
        vocab, stream = 256, read_text_folder(cfg.data_dir, cfg.data_glob)
    else:
        vocab, stream = 256, read_hf_dataset(cfg.hf_dataset, cfg.corpus_chars)
    return LabSource(vocab, None, stream=stream, split=int(0.9 * len(stream)))


def make_lab_data(cfg: LabConfig, seed: int) -> LabData:
    """The training batches for ``seed`` and the fixed evaluation set of
    ``cfg``'s dataset."""
    train_gen = seed_everything(seed)
    eval_gen = torch.Generator().manual_seed(_EVAL_SEED)
    n_train, n_eval = cfg.steps * cfg.batch_size, max(cfg.lengths) + 1
    source = lab_source(cfg)
    return LabData(
        source.vocab_size,
        source.train_windows(n_train, cfg.train_len + 1, train_gen),
        source.eval_windows(cfg.eval_sequences, n_eval, eval_gen),
        source.floor,
    )


@dataclass
class LabResult:
    """One encoding, one seed. Losses in nats per predicted token; nan where
    undefined."""

    encoding: str
    seed: int
    lengths: tuple[int, ...]
    loss_in: float  # 1 x L, positions L/2 .. L-1
    loss_past: dict[int, float]  # n -> loss at positions L .. n-1 (n > L)
    loss_mean: dict[int, float]  # n -> loss over every position of the windows
    per_position: list[
        float
    ]  # loss at each position 0 .. max(n)-1 of the longest windows
    train_loss: float  # mean of the last 10 % of training steps
    seconds: float
    undefined: str = ""  # why some lengths are undefined ("" if none)
    train_len: int = field(default=0)
    budget: str = ""  # the training the model received, when the table states it

    def rise(self, n: int) -> float:
        """``loss_past[n] - loss_in``: how much worse than in-distribution past L
        (nan if undefined)."""
        return self.loss_past[n] - self.loss_in


@torch.no_grad()
def _token_losses(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    n: int,
    device: torch.device,
    chunk: int | None = None,
) -> torch.Tensor:
    """Cut ``(B, N + 1)`` sequences into windows of n tokens; ``(B * N / n, n)``
    per-token losses (``chunk`` windows per forward pass, all at once if None)."""
    total = tokens.shape[1] - 1
    x = tokens[:, :total].reshape(-1, n)  # (w, n)
    y = tokens[:, 1:].reshape(-1, n)  # (w, n)
    parts = []
    for xs, ys in zip(x.split(chunk or len(x)), y.split(chunk or len(y))):
        logits = model(xs.to(device))  # (c, n, V)
        ce = F.cross_entropy(logits.transpose(1, 2), ys.to(device), reduction="none")
        parts.append(ce.float().cpu())  # (c, n)
    return torch.cat(parts)  # (w, n)


def sequence_encodings() -> list[str]:
    """The registered encodings this harness can run, sorted: those that read 1-D token
    positions and need no side inputs (an image's coordinates or a graph's distances do
    not exist in a text sequence). A method registered later joins automatically; the
    chapters train ``LAB_ENCODINGS``, a declared subset."""
    names = []
    for name, factory in REGISTRY.items():
        pe = factory(d_model=32, n_heads=4, max_len=16)
        if pe.coord_axes is None and not pe.side_inputs:
            names.append(name)
    return sorted(names)


def run_encoding(
    name: str,
    cfg: LabConfig,
    data: LabData,
    seed: int = 0,
    device: torch.device | None = None,
) -> LabResult:
    """Train ``REGISTRY[name]`` at length L on ``data`` and evaluate it at every length
    of ``cfg``."""
    device = device or get_device()
    start = time.perf_counter()
    model, train_loss = train_at_length(name, cfg, data, seed, device)
    return evaluate(name, model, cfg, data, seed, device, train_loss, start)


def build_model(
    name: str, cfg: LabConfig, vocab_size: int, seed: int = 0
) -> TinyTransformer:
    """``REGISTRY[name]`` built with ``max_len = L`` into a ``TinyTransformer`` of
    ``cfg``'s size, from the initial seed ``seed`` (the same initial weights for every
    encoding that adds no parameters), on the CPU."""
    if name not in REGISTRY:
        raise KeyError(
            f"unknown encoding {name!r}; registered: {', '.join(sorted(REGISTRY))}"
        )
    seed_everything(seed)
    pe = make_encoding(
        name, d_model=cfg.d_model, n_heads=cfg.n_heads, max_len=cfg.train_len
    )
    return TinyTransformer(vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, pe=pe)


def train_at_length(
    name: str,
    cfg: LabConfig,
    data: LabData,
    seed: int = 0,
    device: torch.device | None = None,
) -> tuple[TinyTransformer, float]:
    """``REGISTRY[name]`` built with ``max_len = L`` into a ``TinyTransformer`` from the
    initial seed ``seed`` and trained on ``data``'s batches of L tokens; returns the
    model and its mean loss over the last 10 % of the steps."""
    device = device or get_device()
    model = build_model(name, cfg, data.vocab_size, seed).to(device)
    losses = train(
        model,
        data.batches(cfg.batch_size),
        cfg.steps,
        lr=cfg.lr,
        device=device,
        progress=False,
    )
    tail = losses[-max(1, len(losses) // 10) :]
    return model, sum(tail) / len(tail)


def evaluate(
    name: str,
    model,
    cfg: LabConfig,
    data: LabData,
    seed: int = 0,
    device: torch.device | None = None,
    train_loss: float = math.nan,
    start: float | None = None,
    budget: str = "",
    chunk: int | None = None,
) -> LabResult:
    """Read a trained ``model`` at every length n of ``cfg`` on ``data``'s evaluation
    set (``model`` may be a function ``n -> model``, for a model changed per length):
    ``loss_in`` at L on positions L/2 .. L-1, ``loss_past[n]`` on positions L .. n-1; a
    length the model cannot read is nan, with the reason in ``undefined``. ``chunk``:
    windows per forward pass (all at once if None), for long windows on a GPU."""
    device = device or get_device()
    start = time.perf_counter() if start is None else start
    model_at = model if callable(model) and not isinstance(model, nn.Module) else None
    L = cfg.train_len
    loss_past, loss_mean, per_position, undefined = {}, {}, [], ""
    for n in cfg.lengths:
        try:
            ce = _token_losses(
                model_at(n) if model_at else model, data.eval, n, device, chunk
            )
        except Exception as err:  # noqa: BLE001  (only past L, re-raised below)
            if n <= L:
                raise
            undefined = undefined or f"{type(err).__name__}: {err}"
            loss_past[n] = loss_mean[n] = math.nan
            continue
        loss_mean[n] = ce.mean().item()  # ce: (windows, n)
        if n == L:
            loss_in = ce[:, L // 2 :].mean().item()
        if n > L:
            loss_past[n] = ce[:, L:].mean().item()
        if n == max(cfg.lengths):
            per_position = ce.mean(0).tolist()
    return LabResult(
        name,
        seed,
        cfg.lengths,
        loss_in,
        loss_past,
        loss_mean,
        per_position,
        train_loss,
        time.perf_counter() - start,
        undefined,
        L,
        budget,
    )


def run_lab(
    names: list[str] | tuple[str, ...],
    cfg: LabConfig,
    seeds: tuple[int, ...] = (0,),
    device: torch.device | None = None,
    verbose: bool = True,
    progress: bool = False,
) -> list[LabResult]:
    """``run_encoding`` for every name and seed (the data is built once per seed).

    ``verbose`` prints a line per run; ``progress`` shows one progress bar for the
    whole sweep instead (print ``format_table(results)`` afterwards for one table).
    """
    if not names:
        raise ValueError("names must list at least one encoding")
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    results = []
    bar = tqdm(
        total=len(names) * len(seeds), desc="lab", disable=not progress, leave=False
    )
    for seed in seeds:
        data = make_lab_data(cfg, seed)
        for name in names:
            bar.set_postfix_str(f"{name}, seed {seed}")
            res = run_encoding(name, cfg, data, seed, device)
            results.append(res)
            bar.update()
            if verbose and not progress:
                print(_line(res))
    bar.close()
    return results


def _rotary_of(model: torch.nn.Module) -> Rotary:
    """The one plain ``Rotary`` a model shares between its layers, or a clear error."""
    pe = getattr(model, "pe", None)
    blocks = getattr(model, "blocks", ())
    if type(pe) is not Rotary or any(b.attn.pe is not pe for b in blocks):
        raise TypeError(
            "model must be a TinyTransformer trained with one shared plain RoPE "
            f"(pl.Rotary, the registry's 'rope'), got pe={type(pe).__name__}"
        )
    if pe.scaling is not None or pe.rotary_dim is not None:
        raise ValueError(
            "model's RoPE must be unscaled and rotate every coordinate, got "
            f"scaling={pe.scaling!r}, rotary_dim={pe.rotary_dim!r}"
        )
    return pe


def rope_rescaled(model: torch.nn.Module, scaling: str, **params) -> torch.nn.Module:
    """A copy of ``model`` (trained with plain RoPE) whose frequencies are replaced by
    ``rope_inv_freq(d, base, scaling, **params)``, attention factor included: PI
    (``"linear"``), NTK-aware scaling (``"ntk"``), YaRN (``"yarn"``), applied after
    training without any more of it. The weights are shared by value (a deep copy)."""
    pe = _rotary_of(model)
    inv_freq, factor = rope_inv_freq(pe.d_head, pe.base, scaling, **params)
    new = copy.deepcopy(model)
    new.pe.inv_freq = inv_freq.to(pe.inv_freq.device)  # (d/2,) float64, every layer
    new.pe.attention_factor, new.pe.scaling = factor, scaling
    return new


def drop_rope(model: torch.nn.Module) -> torch.nn.Module:
    """DroPE's first step: a copy of ``model`` (trained with plain RoPE) whose rotation
    is the identity, every frequency 0, so cos = 1 and sin = 0 at every position (what
    ``NoPEAttention.forward`` of SakanaAI/DroPE, ``custom_models/attention.py``, hands
    the attention): the same weights, no position in q or k. Recalibrate it after."""
    pe = _rotary_of(model)
    new = copy.deepcopy(model)
    new.pe.inv_freq = torch.zeros_like(pe.inv_freq)  # R(0) = I in every layer
    new.pe.attention_factor = 1.0
    return new


def recalibration_batches(cfg: LabConfig, seed: int, steps: int):
    """``step -> (tokens, targets, None)`` for ``steps`` steps of fresh training windows
    of length L (``cfg``'s data: new samples of the chain, or windows of the text's
    training part), drawn with a generator of their own (seed + 20000), so the lab's
    training batches are unchanged."""
    check_positive_int(steps, "steps")
    gen = torch.Generator().manual_seed(_RECAL_SEED + seed)
    count = steps * cfg.batch_size
    windows = lab_source(cfg).train_windows(count, cfg.train_len + 1, gen)
    return LabData(0, windows, windows[:0], None).batches(cfg.batch_size)


def run_drope(
    cfg: LabConfig,
    data: LabData,
    seed: int = 0,
    recal_steps: int = 30,
    device: torch.device | None = None,
) -> list[LabResult]:
    """DroPE beside the RoPE model it starts from, the zero-shot scalings of that
    model, NoPE trained from scratch, the RoPE model with its rotation dropped and no
    recalibration, and the RoPE model trained for as many more steps as DroPE
    recalibrates (the control for the extra training).

    RoPE is the lab's: trained at L for ``cfg.steps`` steps from the initial seed
    ``seed``. At each evaluation length n = f L, PI, NTK-aware scaling and YaRN
    (original length L) use the factor f (``rope_rescaled``); at n = L they are RoPE
    itself. DroPE is ``drop_rope`` of it ("dropped"), trained ``recal_steps`` more
    steps at L on ``recalibration_batches``, with ``cfg``'s learning rate and a fresh
    optimizer. The results, in the order ``rope``, ``rope+PI``, ``rope+NTK``,
    ``rope+YaRN``, ``nope``, ``dropped``, ``DroPE``, ``rope+more``, carry each
    method's budget (``LabResult.budget``)."""
    check_positive_int(recal_steps, "recal_steps")
    device = device or get_device()
    steps, L = cfg.steps, cfg.train_len
    trained = f"{steps} steps at L"
    start = time.perf_counter()
    model, rope_loss = train_at_length("rope", cfg, data, seed, device)
    results = [evaluate("rope", model, cfg, data, seed, device, rope_loss, start)]
    results[0].budget = trained
    for label, scaling in (("PI", "linear"), ("NTK", "ntk"), ("YaRN", "yarn")):
        extra = {"original_max_position_embeddings": L} if scaling == "yarn" else {}
        rescaled = {
            n: rope_rescaled(model, scaling, factor=n // L, **extra) if n > L else model
            for n in cfg.lengths
        }
        results.append(
            evaluate(
                f"rope+{label}",
                rescaled.__getitem__,
                cfg,
                data,
                seed,
                device,
                rope_loss,
                budget=f"{trained}; factor n/L at length n, no training",
            )
        )
    results.append(run_encoding("nope", cfg, data, seed, device))
    results[-1].budget = f"{trained}, from the start"
    dropped = drop_rope(model)
    results.append(
        evaluate(
            "dropped",
            dropped,
            cfg,
            data,
            seed,
            device,
            math.nan,
            budget=f"{trained}; RoPE dropped, no more training",
        )
    )
    recal = recalibration_batches(cfg, seed, recal_steps)
    share = f"{recal_steps / steps:.0%} of the training"
    for label, tuned in (
        ("DroPE", drop_rope(model)),
        ("rope+more", copy.deepcopy(model)),
    ):
        start = time.perf_counter()
        losses = train(tuned, recal, recal_steps, lr=cfg.lr, progress=False)
        tail = losses[-max(1, len(losses) // 10) :]
        what = "RoPE dropped, then" if label == "DroPE" else "RoPE kept,"
        results.append(
            evaluate(
                label,
                tuned,
                cfg,
                data,
                seed,
                device,
                sum(tail) / len(tail),
                start,
                f"{trained}; {what} {recal_steps} more at L ({share})",
            )
        )
    return results


def encoding_groups(names) -> dict[str, list[str]]:
    """Sort registered encodings by how position enters attention, read from the hooks
    each overrides (for small multiples instead of one crowded plot)."""
    groups: dict[str, list[str]] = {
        "added to the input": [],
        "rotations of q and k": [],
        "biases and re-weighting of scores": [],
        "no position index (mask, gates, data)": [],
    }
    for name in names:
        pe = REGISTRY[name](d_model=32, n_heads=4, max_len=16)
        own = {h for h in HOOKS if overrides(pe, h)}
        if "encode_input" in own:
            groups["added to the input"].append(name)
        elif pe._ctx_hooks or not own:  # reads the data, or nothing at all
            groups["no position index (mask, gates, data)"].append(name)
        elif "transform_qk" in own:
            groups["rotations of q and k"].append(name)
        else:
            groups["biases and re-weighting of scores"].append(name)
    return {k: v for k, v in groups.items() if v}


def result_to_dict(res: LabResult) -> dict:
    """``res`` as JSON-ready data (lengths as string keys; nan stays nan, which
    Python's json writes as NaN)."""
    out = dict(res.__dict__)
    out["lengths"] = list(res.lengths)
    out["loss_past"] = {str(n): v for n, v in res.loss_past.items()}
    out["loss_mean"] = {str(n): v for n, v in res.loss_mean.items()}
    return out


def result_from_dict(data: dict) -> LabResult:
    """The ``LabResult`` that ``result_to_dict`` wrote."""
    data = dict(data)
    data["lengths"] = tuple(data["lengths"])
    data["loss_past"] = {int(n): v for n, v in data["loss_past"].items()}
    data["loss_mean"] = {int(n): v for n, v in data["loss_mean"].items()}
    return LabResult(**data)


def load_results(path) -> tuple[list[LabResult], dict]:
    """The results of a lab run written by ``python -m posenc_lib.lab``
    (``results.json``, or a copy of it such as a committed run): the ``LabResult``
    list and the whole record (its ``config``, ``run``: where and how it ran)."""
    import json

    record = json.loads(pathlib.Path(path).read_text())
    return [result_from_dict(r) for r in record["results"]], record


def committed_run(name: str = "cpu_small") -> tuple[list[LabResult], dict]:
    """A run of ``python -m posenc_lib.lab`` shipped with the library
    (``posenc_lib/data/lab_<name>.json``, its ``results.json`` as written): the
    results and the record (``config``; ``run``: machine, device, versions, time)."""
    path = pathlib.Path(__file__).parents[2] / "data" / f"lab_{name}.json"
    if not path.exists():
        shipped = sorted(p.stem[4:] for p in path.parent.glob("lab_*.json"))
        raise ValueError(f"name must be one of {shipped}, got {name!r}")
    return load_results(path)


def _line(res: LabResult) -> str:
    past = "  ".join(
        f"{n:>4}: {res.loss_past[n]:.3f}" for n in res.lengths if n > res.train_len
    )
    note = "  (undefined past L)" if res.undefined else ""
    return (
        f"{res.encoding:>15} seed {res.seed}  in {res.loss_in:.3f}  past L -> {past}  "
        f"[{res.seconds:.1f}s]{note}"
    )


def summarize(results: list[LabResult]) -> dict[str, dict[str, float]]:
    """Mean over seeds, per encoding: ``{"in": loss_in, n: rise(n) for each n > L}``."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.encoding for r in results):
        rows = [r for r in results if r.encoding == name]
        entry: dict = {"in": sum(r.loss_in for r in rows) / len(rows)}
        for n in rows[0].lengths:
            if n > rows[0].train_len:
                entry[n] = sum(r.rise(n) for r in rows) / len(rows)
        out[name] = entry
    return out


def format_table(results: list[LabResult]) -> str:
    """A text table: loss at 1 x L, then the rise past L at each longer length
    (mean over seeds)."""
    summary = summarize(results)
    lengths = [n for n in results[0].lengths if n > results[0].train_len]
    seeds = sorted({r.seed for r in results})
    budgets = {r.encoding: r.budget for r in results if r.budget}
    head = f"{'encoding':>15} | {'loss@L':>7} | " + " | ".join(
        f"rise@{n:<4}" for n in lengths
    )
    lines = [
        f"mean over seeds {seeds}; rise = loss past L minus loss at L (nats)",
        head + (" | budget" if budgets else ""),
        "-" * len(head),
    ]
    for name, entry in summary.items():
        cells = " | ".join(
            "    n/a " if math.isnan(entry[n]) else f"{entry[n]:+8.3f}" for n in lengths
        )
        budget = f" | {budgets.get(name, '')}" if budgets else ""
        lines.append(f"{name:>15} | {entry['in']:7.3f} | {cells}{budget}")
    return "\n".join(lines)


def plot_lab(
    results: list[LabResult], ax=None, floor: float | None = None, title: str = ""
):
    """Loss vs evaluation length (mean over seeds): ``loss_in`` at L, then
    ``loss_past`` beyond."""
    import matplotlib.pyplot as plt

    # here, not at the top: a process of the command line that draws no plot (a
    # stopped run, a rank past the first) imports no plotting library
    from ..plotting import color_for

    ax = ax or plt.gca()
    L = results[0].train_len
    for name in dict.fromkeys(r.encoding for r in results):
        rows = [r for r in results if r.encoding == name]
        xs = list(rows[0].lengths)
        ys = [
            sum(r.loss_in if n == L else r.loss_past[n] for r in rows) / len(rows)
            for n in xs
        ]
        ax.plot(
            xs,
            ys,
            "o-",
            color=color_for(name),
            label=name + (" (undefined past L)" if rows[0].undefined else ""),
        )
    if floor is not None:
        ax.axhline(
            floor, color="black", ls=":", lw=1, label="loss floor (entropy rate)"
        )
    ax.axvline(L, color="gray", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(results[0].lengths), [str(n) for n in results[0].lengths])
    ax.set(
        xlabel="evaluation length n (training length L dashed)",
        ylabel="loss past L (nats / token)",
        title=title,
    )
    return ax

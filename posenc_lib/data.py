"""Deterministic data sources, generated in code (nothing is downloaded).

* ``MarkovSource``: an order-k Markov chain over a small alphabet with a known
  loss floor.
* ``CharCorpus`` / ``stdlib_corpus``: characters of the Python standard library's own
  source text, which every Python (Colab included) ships: real text with no download.
* ``copy_offset_batch``: "output the token k positions back", where only offsets matter.
"""

from __future__ import annotations

import itertools
import math
import pathlib
import sysconfig

import torch

from .utils import check_positive_int

__all__ = ["MarkovSource", "CharCorpus", "stdlib_corpus", "copy_offset_batch"]


class MarkovSource:
    """An order-``order`` Markov chain over ``n_states`` symbols with sharp random
    transitions.

    ``loss_floor`` is the entropy rate in nats: the cross-entropy a perfect model
    reaches once it has seen ``order`` tokens of context.
    """

    def __init__(
        self, n_states: int = 8, order: int = 2, seed: int = 0, temperature: float = 0.5
    ):
        self.n_states = check_positive_int(n_states, "n_states")
        self.order = check_positive_int(order, "order")
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not math.isfinite(temperature)
            or temperature <= 0
        ):
            raise ValueError(
                f"temperature must be a finite number > 0, got {temperature!r} (it "
                "divides the logits of the transition table)"
            )
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(
            (n_states,) * order + (n_states,), generator=g, dtype=torch.float64
        )
        self.transition = (logits / temperature).softmax(
            -1
        )  # (S, ..., S) next-symbol probs
        self.loss_floor = self._entropy_rate()

    def _entropy_rate(self) -> float:
        s, k = self.n_states, self.order
        contexts = list(itertools.product(range(s), repeat=k))
        index = {c: r for r, c in enumerate(contexts)}
        step = torch.zeros(
            len(contexts), len(contexts), dtype=torch.float64
        )  # context -> context
        for c in contexts:
            for nxt in range(s):
                step[index[c], index[c[1:] + (nxt,)]] += self.transition[c][nxt]
        stationary = torch.full(
            (len(contexts),), 1.0 / len(contexts), dtype=torch.float64
        )
        for _ in range(2000):
            stationary = stationary @ step
        probs = torch.stack([self.transition[c] for c in contexts])  # (C, S)
        # H = sum_c pi(c) * ( -sum_x p(x|c) log p(x|c) )
        return float((stationary * -(probs * probs.log()).sum(-1)).sum())

    def sample(
        self, batch: int, length: int, generator: torch.Generator
    ) -> torch.Tensor:
        """``(batch, length)`` int64 sequences started from uniformly random
        contexts."""
        check_positive_int(batch, "batch")
        if length <= self.order:
            raise ValueError(
                f"length must exceed the chain's order ({self.order}), got {length}"
            )
        out = torch.empty(batch, length, dtype=torch.long)
        out[:, : self.order] = torch.randint(
            self.n_states, (batch, self.order), generator=generator
        )
        flat = self.transition.reshape(-1, self.n_states)  # (S^k, S)
        for t in range(self.order, length):
            ctx = torch.zeros(batch, dtype=torch.long)
            for c in range(t - self.order, t):
                ctx = ctx * self.n_states + out[:, c]
            out[:, t] = torch.multinomial(
                flat[ctx].float(), 1, generator=generator
            ).squeeze(-1)
        return out


class CharCorpus:
    """A character-level corpus: ``vocab`` maps characters to ids; ``data`` is the
    id stream."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        if len(text) < 2:
            raise ValueError("text must hold at least two characters")
        self.vocab = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.vocab)}
        self.data = torch.tensor([self.stoi[ch] for ch in text], dtype=torch.long)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(
                "text contains characters outside the corpus vocabulary: "
                f"{unknown[:10]}"
            )
        return torch.tensor([self.stoi[ch] for ch in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.vocab)]
        if bad:  # Python would read -1 as the last character, silently
            raise ValueError(
                f"ids must be in [0, {len(self.vocab)}) (the vocabulary), "
                f"got {bad[:10]}"
            )
        return "".join(self.vocab[i] for i in ids)

    def batch(
        self, batch: int, length: int, generator: torch.Generator
    ) -> torch.Tensor:
        """``(batch, length + 1)`` windows at random offsets (inputs are ``[:, :-1]``,
        targets ``[:, 1:]``)."""
        check_positive_int(batch, "batch")
        check_positive_int(length, "length")
        if length + 1 > len(self.data):
            raise ValueError(
                f"length + 1 = {length + 1} exceeds the corpus size {len(self.data)}"
            )
        starts = torch.randint(len(self.data) - length, (batch,), generator=generator)
        return torch.stack([self.data[s : s + length + 1] for s in starts.tolist()])


def stdlib_corpus(
    n_chars: int = 200_000,
    modules: tuple[str, ...] = (
        "textwrap",
        "string",
        "shlex",
        "fractions",
        "difflib",
        "heapq",
        "bisect",
        "calendar",
        "random",
        "statistics",
    ),
) -> CharCorpus:
    """The first ``n_chars`` printable-ASCII characters of some standard-library
    modules' source.

    Non-ASCII characters are dropped so the vocabulary is small (<= 97 symbols). The
    text is the running Python's own, so it is identical for everyone on the same
    Python version.
    """
    check_positive_int(n_chars, "n_chars")
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    parts = []
    missing = [name for name in modules if not (root / f"{name}.py").exists()]
    if missing:
        raise ValueError(
            f"modules {missing} have no source file {root}/<name>.py in this Python's "
            "standard library; name top-level .py modules such as 'os' or 'typing'"
        )
    for name in modules:
        path = root / f"{name}.py"
        parts.append(path.read_text(encoding="utf-8", errors="ignore"))
    text = "".join(ch for ch in "\n".join(parts) if ch == "\n" or 32 <= ord(ch) < 127)
    if len(text) < 1000:
        raise RuntimeError(f"could not read the standard library's source under {root}")
    return CharCorpus(text[:n_chars])


def copy_offset_batch(
    batch: int,
    length: int,
    k: int,
    vocab_size: int,
    generator: torch.Generator,
    start: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random tokens whose target at t is the token at t - k (ignored, -100, for t < k).

    Returns tokens ``(batch, length)``, targets ``(batch, length)`` and positions
    ``(length,)`` starting at ``start``, so a model can be tested at shifted
    absolute positions.
    """
    check_positive_int(batch, "batch")
    check_positive_int(length, "length")
    check_positive_int(k, "k")
    check_positive_int(vocab_size, "vocab_size")
    if k >= length:
        raise ValueError(f"k ({k}) must be smaller than length ({length})")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    tokens = torch.randint(vocab_size, (batch, length), generator=generator)
    targets = torch.full_like(tokens, -100)
    targets[:, k:] = tokens[:, :-k]
    return tokens, targets, torch.arange(start, start + length)

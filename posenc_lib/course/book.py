"""Helpers for the chapters themselves: seeds a sweep can shift, glue, library source.

They are the book's, not the library's: ``pl.book.glue``, never ``pl.book.glue`` (the
top-level namespace holds only what a model built with posenc_lib uses).

* ``setup(seed)``: the first call of every chapter (seed, one CPU thread, plot style).
* ``chapter_seeds(0, 1)``: the seeds a chapter was written with, moved to a block of
  its own by the environment variable ``POSENC_SEED_SHIFT`` (default 0): shift ``s``
  turns seed ``k`` into ``k + s * SEED_BLOCK``. ``tools/measure/seed_sweep.py``
  re-runs a notebook with other shifts, so every assertion is tried on seeds it was
  not written with, and no seed is shared between two runs of a sweep (shifts 100 and
  101 give seeds 100000, 100001 and 101000, 101001, never the overlapping 100, 101 and
  101, 102): a toy claim is a statement about a distribution of seeds, not one run.
* ``glue(name, value)``: myst-nb's ``glue`` (the prose quotes the number the run made)
  without needing myst-nb installed, so the same cell runs in Colab.
* ``show_source(obj)``: the library's own code, printed from a cell, so that the site
  and Colab both show it (``{literalinclude}`` shows a bare path in Colab).
"""

from __future__ import annotations

import csv
import inspect
import os
import pathlib

import torch

__all__ = [
    "setup",
    "device_label",
    "chapter_seeds",
    "seed_shift",
    "glue",
    "show_source",
    "Sweep",
]

SEED_SHIFT_VAR = "POSENC_SEED_SHIFT"
# chapters write seeds below this; shift s owns [s * SEED_BLOCK, (s + 1) * SEED_BLOCK)
SEED_BLOCK = 1000
# myst-nb's marker for values glued with display=False (myst_nb.ext.glue.GLUE_PREFIX)
GLUE_PREFIX = "application/papermill.record/"


def setup(seed: int = 0, threads: int | None = 1) -> torch.device:
    """One call at the top of every chapter: seed everything, fix CPU threads, set
    the plot style.

    One CPU thread is the default because on small 2-core machines two threads made the
    same training loop up to five times slower and far less repeatable (see
    ``EXPERIMENTS.md``). Returns the device to use (CUDA when present).
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(
                f"threads must be a positive int (or None to leave torch's setting), "
                f"got {threads!r}"
            )
    from ..utils import get_device, seed_everything

    seed_everything(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    from .plotting import set_plot_style

    set_plot_style()
    return get_device()


def device_label(device: torch.device | str) -> str:
    """How the prose names the device a figure was measured on: "the CPU", or the
    GPU's name (the site is built on a CPU; a reader's GPU run prints its own)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "the CPU" if device.type == "cpu" else str(device)


def seed_shift() -> int:
    """The shift a seed sweep asked for (``POSENC_SEED_SHIFT``), 0 normally."""
    raw = os.environ.get(SEED_SHIFT_VAR, "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{SEED_SHIFT_VAR} must be an integer, got {raw!r}") from None


def chapter_seeds(*seeds: int) -> list[int]:
    """``seeds`` moved to the block of ``seed_shift()``: ``k + shift * SEED_BLOCK``.

    ``chapter_seeds(0, 1)`` is ``[0, 1]`` normally and ``[100000, 100001]`` at shift
    100, so two runs of a sweep never share a seed."""
    if not seeds or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seeds
    ):
        raise TypeError(f"chapter_seeds takes one or more int seeds, got {seeds!r}")
    if not all(0 <= s < SEED_BLOCK for s in seeds):
        raise ValueError(
            f"chapter_seeds takes seeds in [0, {SEED_BLOCK}) (each shift of a sweep "
            f"owns a block of {SEED_BLOCK}), got {seeds!r}"
        )
    return [s + seed_shift() * SEED_BLOCK for s in seeds]


def _ipython():
    """IPython's display machinery (a notebook's kernel has it; the ``course`` extra
    installs it elsewhere)."""
    try:
        import IPython.core.formatters
        import IPython.display
    except ModuleNotFoundError:
        from . import needs

        raise needs("IPython", __name__) from None
    return IPython.core.formatters, IPython.display


def glue(name: str, value, display: bool = False, from_sweep: bool = False) -> None:
    """Store ``value`` under ``name`` for ``{glue:text}`` in the prose (as myst-nb's
    ``glue`` does, with the same output format); shows it only when ``display``."""
    formatters, ipy = _ipython()
    format_display_data, ipy_display = formatters.format_display_data, ipy.display

    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=prefix)
    if from_sweep:  # read from a committed sweep, not made by this run: seed_sweep
        metadata["posenc_from_sweep"] = True  # does not record it as a run's value
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def show_source(obj) -> None:
    """Display the source code of a library function or class, highlighted."""
    _, ipy = _ipython()
    ipy.display(ipy.Code(inspect.getsource(obj), language="python"))


# ---- the committed seed sweeps (package data, so Colab reads them too) ----

SWEEPS = pathlib.Path(__file__).parents[1] / "data" / "sweeps"
_META = ("shift", "status", "error", "seconds")


class Sweep:
    """The committed seed sweep of one chapter (``tools/measure/seed_sweep.py`` wrote
    it): one row per shift, each run on its own seeds (``chapter_seeds``), with every
    value the chapter glued.

    ``Sweep("comparison").range("cmp_rope_rise")`` is the smallest and largest rise
    of RoPE's loss over the sweep, as text (``('+0.52', '+0.87')``, say);
    ``.count("cmp_rope_rise", lambda v: v > 0.4)`` in how many runs it exceeded 0.4.

    ``glue()`` glues ``<chapter>_sweep_runs``, ``_passed`` and ``_shifts``, and for
    every glued column ``<column>_min`` / ``<column>_max`` as the CSV wrote them, so the
    prose quotes the sweep (``{glue:text}`cmp_rope_rise_min```), never a typed copy.
    """

    def __init__(self, chapter: str):
        path = SWEEPS / f"{chapter}.csv"
        if not path.exists():
            known = sorted(p.stem for p in SWEEPS.glob("*.csv"))
            raise ValueError(f"no sweep for chapter {chapter!r}; swept: {known}")
        with path.open() as f:
            self.rows = list(csv.DictReader(f))
        self.chapter = chapter

    @property
    def runs(self) -> int:
        return len(self.rows)

    @property
    def passed(self) -> int:
        """Runs in which every cell (every assertion) of the chapter passed."""
        return sum(r["status"] == "pass" for r in self.rows)

    @property
    def shifts(self) -> str:
        s = sorted(int(r["shift"]) for r in self.rows)
        contiguous = s == list(range(s[0], s[-1] + 1))
        return f"{s[0]}–{s[-1]}" if contiguous else ", ".join(map(str, s))

    def values(self, name: str) -> list[float]:
        """The column ``name`` as numbers (runs that did not glue it are left out)."""
        if not self.rows or name not in self.rows[0]:
            cols = [c for c in (self.rows[0] if self.rows else {}) if c not in _META]
            raise KeyError(f"{self.chapter} sweep has no column {name!r}; has {cols}")
        return [float(r[name]) for r in self.rows if r.get(name) not in (None, "")]

    def range(self, name: str) -> tuple[str, str]:
        """(smallest, largest) of column ``name``, as the sweep wrote them."""
        texts = [r[name] for r in self.rows if r.get(name) not in (None, "")]
        self.values(name)  # checks the name
        return min(texts, key=float), max(texts, key=float)

    def count(self, name: str, holds) -> int:
        """In how many runs ``holds(value)`` is true for column ``name``."""
        return sum(bool(holds(v)) for v in self.values(name))

    def glue(self) -> None:
        """Glue the run counts and every numeric column's range (see the class),
        marked as read from the sweep, so a re-run of the sweep does not record them
        as the run's own values. A count computed from the sweep in a chapter
        (``sweep.count``) is glued with ``pl.book.glue(name, n, from_sweep=True)``."""
        glue(f"{self.chapter}_sweep_runs", self.runs, from_sweep=True)
        glue(f"{self.chapter}_sweep_passed", self.passed, from_sweep=True)
        glue(f"{self.chapter}_sweep_shifts", self.shifts, from_sweep=True)
        for name in self.rows[0] if self.rows else ():
            if name in _META:
                continue
            try:
                lo, hi = self.range(name)
            except ValueError:  # not a number (a label)
                continue
            glue(f"{name}_min", lo, from_sweep=True)
            glue(f"{name}_max", hi, from_sweep=True)

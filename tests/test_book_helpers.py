"""The helpers the chapters use: shiftable seeds, glue, printed library source."""

import pytest

import torch

import posenc_lib as pl


def test_chapter_seeds_follow_the_sweep_shift(monkeypatch):
    monkeypatch.delenv("POSENC_SEED_SHIFT", raising=False)
    assert pl.book.chapter_seeds(0, 1) == [0, 1]
    monkeypatch.setenv("POSENC_SEED_SHIFT", "100")
    assert pl.book.chapter_seeds(0, 1) == [100_000, 100_001]
    monkeypatch.setenv("POSENC_SEED_SHIFT", "101")
    assert pl.book.chapter_seeds(0, 1) == [101_000, 101_001]


def test_no_seed_is_shared_between_two_runs_of_a_sweep(monkeypatch):
    """Shifts 0 and 100-109 with the seeds the chapters write (0..9): all disjoint."""
    runs = []
    for shift in [0, *range(100, 110)]:
        monkeypatch.setenv("POSENC_SEED_SHIFT", str(shift))
        runs.append(set(pl.book.chapter_seeds(*range(10))))
    assert sum(map(len, runs)) == len(set().union(*runs))
    with pytest.raises(ValueError, match=r"seeds in \[0, 1000\)"):
        pl.book.chapter_seeds(1000)
    monkeypatch.setenv("POSENC_SEED_SHIFT", "x")
    with pytest.raises(ValueError, match="POSENC_SEED_SHIFT must be an integer"):
        pl.book.chapter_seeds(0)


def test_chapter_seeds_rejects_non_integers():
    with pytest.raises(TypeError, match="one or more int seeds"):
        pl.book.chapter_seeds(0.5)
    with pytest.raises(TypeError, match="one or more int seeds"):
        pl.book.chapter_seeds()


def test_glue_writes_the_output_myst_nb_reads(monkeypatch):
    """Same bundle and metadata as myst_nb.glue, without importing myst-nb."""
    import IPython.display
    from myst_nb.ext.glue import GLUE_PREFIX, glue

    seen = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: seen.append((a, k)))
    import myst_nb.ext.glue as mg

    monkeypatch.setattr(mg, "ipy_display", lambda *a, **k: seen.append((a, k)))
    pl.book.glue("acc", 0.9731)
    glue("acc", 0.9731, display=False)
    assert seen[0] == seen[1]
    assert pl.book.GLUE_PREFIX == GLUE_PREFIX
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        pl.book.glue("", 1)


def test_every_committed_sweep_has_ten_independent_runs():
    for path in sorted(pl.book.SWEEPS.glob("*.csv")):
        sweep = pl.book.Sweep(path.stem)
        assert sweep.runs >= 10, path.name
        shifts = [int(r["shift"]) for r in sweep.rows]
        assert len(set(shifts)) == len(shifts) and 0 not in shifts, path.name


def test_sweep_reads_ranges_and_counts_as_written(tmp_path, monkeypatch):
    (tmp_path / "toy.csv").write_text(
        "shift,status,error,seconds,acc,label\n"
        "100,pass,,1.0,0.90,a\n101,fail,AssertionError: x,1.0,0.85,b\n"
        "102,pass,,1.0,1.00,c\n"
    )
    monkeypatch.setattr(pl.book, "SWEEPS", tmp_path)
    sweep = pl.book.Sweep("toy")
    assert (sweep.runs, sweep.passed, sweep.shifts) == (3, 2, "100–102")
    assert sweep.range("acc") == ("0.85", "1.00")
    assert sweep.count("acc", lambda v: v >= 0.9) == 2
    with pytest.raises(KeyError, match="no column 'loss'"):
        sweep.values("loss")
    with pytest.raises(ValueError, match="no sweep for chapter 'nope'"):
        pl.book.Sweep("nope")


def test_device_label_names_the_cpu_or_the_card():
    assert pl.book.device_label("cpu") == "the CPU"
    assert pl.book.device_label(torch.device("cpu")) == "the CPU"
    from tools.testing.fake_cuda import fake_cuda

    with fake_cuda():
        assert pl.book.device_label("cuda") == torch.cuda.get_device_name(0)

"""tools/measure/time_notebooks.py reads run times from jupyter-cache's records."""

from __future__ import annotations

import json

from jupyter_cache import get_cache

from tools.measure import time_notebooks


def test_run_times_come_from_the_matching_cache_records(tmp_path, monkeypatch):
    root = time_notebooks.ROOT
    paths = [root / "book/part3/rope.ipynb", root / "book/part3/alibi.ipynb"]
    cache = get_cache(tmp_path / "cache")
    monkeypatch.setattr(time_notebooks, "toc_notebooks", lambda: paths)
    monkeypatch.setattr(time_notebooks, "RESULTS", tmp_path / "results")
    cache.cache_notebook_file(
        str(paths[0]), data={"execution_seconds": 4.04}, check_validity=False
    )
    # a notebook without a matching record: nothing is written
    assert time_notebooks.main(["--cache", str(tmp_path / "cache")]) == 1
    assert not (tmp_path / "results").exists()
    cache.cache_notebook_file(
        str(paths[1]), data={"execution_seconds": 2.96}, check_validity=False
    )
    assert time_notebooks.main(["--cache", str(tmp_path / "cache")]) == 0
    kind, _ = time_notebooks.device()
    written = json.loads(
        (tmp_path / "results" / "timings" / f"{kind}.json").read_text()
    )
    assert written["seconds"] == {"book/part3/rope": 4.0, "book/part3/alibi": 3.0}
    assert {"device", "measured", "note"} <= set(written)


def test_one_chapter_is_measured_alone_and_merged(tmp_path, monkeypatch):
    """Given notebooks, the tool measures only those and merges them into the file:
    the other times stay, each merged chapter is listed under ``added`` with its own
    machine and date; ``forget`` drops a chapter's times again."""
    root = time_notebooks.ROOT
    paths = [root / f"book/part3/{name}.ipynb" for name in ("rope", "alibi", "nope")]
    cache = get_cache(tmp_path / "cache")
    monkeypatch.setattr(time_notebooks, "toc_notebooks", lambda: paths)
    monkeypatch.setattr(time_notebooks, "RESULTS", tmp_path / "results")
    kind, _ = time_notebooks.device()
    out = tmp_path / "results" / "timings" / f"{kind}.json"
    out.parent.mkdir(parents=True)
    full = {
        "seconds": {"book/part3/rope": 4.0, "book/part3/alibi": 3.0},
        "device": "the full run's machine",
        "measured": "2026-01-01",
        "note": "a note",
    }
    out.write_text(json.dumps(full, indent=1) + "\n")
    cache.cache_notebook_file(
        str(paths[2]), data={"execution_seconds": 7.04}, check_validity=False
    )
    args = ["--cache", str(tmp_path / "cache"), "book/part3/nope.ipynb"]
    assert time_notebooks.main(args) == 0
    written = json.loads(out.read_text())
    assert list(written["seconds"].items()) == [
        ("book/part3/rope", 4.0),
        ("book/part3/alibi", 3.0),
        ("book/part3/nope", 7.0),
    ]
    assert (written["device"], written["measured"]) == (
        "the full run's machine",
        "2026-01-01",
    )
    assert set(written["added"]) == {"book/part3/nope"}
    # a notebook outside _toc.yml is refused
    assert time_notebooks.main(args[:2] + ["book/part3/nowhere.ipynb"]) == 1
    assert time_notebooks.forget("book/part3/nope") == [out]
    assert json.loads(out.read_text()) == full

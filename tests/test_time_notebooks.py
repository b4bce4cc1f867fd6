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

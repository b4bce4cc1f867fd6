"""Time every chapter notebook, one after another, as a reader's machine would run it.

    python -m tools.measure.time_notebooks                 # all notebooks of _toc.yml
    python -m tools.measure.time_notebooks book/part3/rope.ipynb ...
    python -m tools.measure.time_notebooks --from-build   # the last site build's times

Each notebook runs top to bottom in a fresh kernel (nbclient; kernel start included)
and the wall-clock seconds are written to ``tools/results/timings/<device>.json``
(``cpu``, or ``gpu`` when CUDA is present) with the machine they were measured on. The
teaching guide's run-time table (tools/build/course_index.py) and the welcome page read
that file;
nothing there is typed by hand. Not part of the test command: run it when chapters
change (the whole course takes a few minutes on a 2-core CPU). ``--from-build`` reads
the execution time jupyter-cache recorded for each notebook in the last strict site
build (``_build/.jupyter_cache``: the same one-after-another run, kernel start
excluded) instead of running them again.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re
import sys
import time

import nbformat
from nbclient import NotebookClient

from tools import RESULTS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def toc_notebooks() -> list[str]:
    entries = re.findall(
        r"^\s*-?\s*(?:file|root):\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M
    )
    return [f"{e}.ipynb" for e in entries if (ROOT / f"{e}.ipynb").exists()]


def device() -> tuple[str, str]:
    import torch

    if torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0)
    cores = os.cpu_count()
    return "cpu", f"{platform.processor() or platform.machine()}, {cores} cores"


def from_build() -> dict[str, float]:
    """notebook -> seconds, as the last site build's execution cache recorded them."""
    from jupyter_cache import get_cache

    cache = get_cache(ROOT / "_build" / ".jupyter_cache")
    return {
        pathlib.Path(r.uri).relative_to(ROOT).as_posix(): r.data["execution_seconds"]
        for r in cache.list_cache_records()
        if "execution_seconds" in (r.data or {})
    }


def main() -> int:
    built = from_build() if sys.argv[1:] == ["--from-build"] else None
    paths = list(built) if built is not None else (sys.argv[1:] or toc_notebooks())
    kind, name = device()
    out = RESULTS / "timings" / f"{kind}.json"
    record = json.loads(out.read_text()) if out.exists() else {"seconds": {}}
    for path in paths:
        if built is not None:
            record["seconds"][path.removesuffix(".ipynb")] = round(built[path], 1)
            print(f"{built[path]:6.1f} s  {path} (site build)", flush=True)
            continue
        nb = nbformat.read(ROOT / path, as_version=4)
        start = time.perf_counter()
        NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str((ROOT / path).parent)}},
        ).execute()
        seconds = time.perf_counter() - start
        record["seconds"][path.removesuffix(".ipynb")] = round(seconds, 1)
        print(f"{seconds:6.1f} s  {path}", flush=True)
    record.update(
        device=name,
        measured=datetime.date.today().isoformat(),
        note="wall-clock seconds per notebook, run one after another "
        + (
            "in the strict site build (jupyter-cache's execution time)"
            if built is not None
            else "by tools/measure/time_notebooks.py, kernel start included"
        ),
    )
    order = [p.removesuffix(".ipynb") for p in toc_notebooks()]
    record["seconds"] = {
        k: record["seconds"][k]
        for k in sorted(
            record["seconds"], key=lambda k: order.index(k) if k in order else 999
        )
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    total = sum(record["seconds"].values())
    print(f"total {total:.0f} s over {len(record['seconds'])} notebooks -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

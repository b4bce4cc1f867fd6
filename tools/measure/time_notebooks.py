"""Every chapter's run time, from jupyter-cache's execution records (no timer of its
own): those nbval wrote in the test command (tools/build/nbval_cache.py), or the site
build's.

    make test  (or python -m tools.build.site)  # executes every chapter
    python -m tools.measure.time_notebooks     # reads _build/.jupyter_cache
    python -m tools.measure.time_notebooks --cache PATH   # another build's cache

nbval (or the site build) executes each notebook of ``_toc.yml`` in a fresh kernel,
and jupyter-cache records for each the seconds that execution took
(``NbCacheRecord.data["execution_seconds"]``: the cells' run, kernel start included;
``POSENC_NBVAL_WORKERS`` says how many ran at a time, recorded with the times, since
notebooks that share a machine each take longer). This reads the record that
matches each notebook as it is now (``match_cache_file``: the same code cells) and
writes the seconds to
``tools/results/timings/<device>.json`` (``cpu``, or ``gpu`` when CUDA is present:
build the site on that machine), with the machine and the date of the build. The
teaching guide's run-time table (tools/build/course_index.py) reads that file; nothing
there is typed by hand. A notebook changed since the build has no matching record:
the tool names it and writes nothing (build the site again).

The same records can be shown on a page by myst-nb: the directive ``{nb-exec-table}``
renders a table of every notebook the build executed or took from the cache, with
its run time (jupyter-cache's ``execution_seconds``), method and status.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

from jupyter_cache import get_cache

from tools import RESULTS
from tools.toc import notebooks as toc_notebooks

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = ROOT / "_build" / ".jupyter_cache"


def device() -> tuple[str, str]:
    import torch

    if torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0)
    cores = os.cpu_count()
    return "cpu", f"{platform.processor() or platform.machine()}, {cores} cores"


def from_cache(cache_dir: pathlib.Path = CACHE) -> tuple[dict, list[str]]:
    """(entry -> cache record, entries without one) for every notebook of _toc.yml;
    an entry is ``book/part3/rope``."""
    cache = get_cache(cache_dir)
    found, missing = {}, []
    for path in toc_notebooks():
        entry = path.relative_to(ROOT).with_suffix("").as_posix()
        try:
            found[entry] = cache.match_cache_file(str(path))
        except KeyError:
            missing.append(entry)
    return found, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=pathlib.Path, default=CACHE)
    args = parser.parse_args(argv)
    if not (args.cache / "global.db").exists():
        print(f"no jupyter-cache at {args.cache}: build the site first")
        return 1
    records, missing = from_cache(args.cache)
    if missing:
        print(
            "no execution record matches these notebooks as they are now (changed "
            "since the build?): build the site again\n  " + "\n  ".join(missing)
        )
        return 1
    kind, name = device()
    seconds = {
        entry: round(r.data["execution_seconds"], 1) for entry, r in records.items()
    }
    for entry, s in seconds.items():
        print(f"{s:6.1f} s  {entry}")
    workers = int(os.environ.get("POSENC_NBVAL_WORKERS", "1"))
    alone = (
        "run one after another"
        if workers == 1
        else f"run {workers} at a time on one {kind.upper()} (so each took longer "
        "than it takes alone)"
    )
    record = {
        "seconds": seconds,
        "device": name,
        "measured": max(r.created for r in records.values()).date().isoformat(),
        "workers": workers,
        "note": f"wall-clock seconds per notebook, {alone}, executed by nbval or the "
        "site build (jupyter-cache's execution records, kernel start included)",
    }
    out = RESULTS / "timings" / f"{kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    total = sum(seconds.values())
    print(f"total {total:.0f} s over {len(seconds)} notebooks -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

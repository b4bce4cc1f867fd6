"""Every chapter's run time, from jupyter-cache's execution records (no timer of its
own): those nbval wrote in the test command (tools/build/nbval_cache.py), or the site
build's.

    make test  (or python -m tools.build.site)  # executes every chapter
    python -m tools.measure.time_notebooks     # reads _build/.jupyter_cache
    python -m tools.measure.time_notebooks --cache PATH   # another build's cache

    # one new or changed chapter, executed by the page preview:
    python -m tools.build.pages book/part3/x.ipynb --out /tmp/p
    python -m tools.measure.time_notebooks --cache /tmp/p/.jupyter_cache \
        book/part3/x.ipynb

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

Given notebooks, it measures only those and merges them into the file, keeping the
other chapters' times; each merged chapter is listed under ``added`` with its own
machine and date (the file's ``device`` and ``measured`` are the full run's), and the
teaching guide's table says so. The next full measurement drops ``added``.

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


def from_cache(
    cache_dir: pathlib.Path = CACHE, paths: list[pathlib.Path] | None = None
) -> tuple[dict, list[str]]:
    """(entry -> cache record, entries without one) for every notebook of _toc.yml
    (or of ``paths``); an entry is ``book/part3/rope``."""
    from jupyter_cache import get_cache  # here: a GPU box may lack it (nbval_times)

    cache = get_cache(cache_dir)
    found, missing = {}, []
    for path in toc_notebooks() if paths is None else paths:
        entry = path.relative_to(ROOT).with_suffix("").as_posix()
        try:
            found[entry] = cache.match_cache_file(str(path))
        except KeyError:
            missing.append(entry)
    return found, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=pathlib.Path, default=CACHE)
    parser.add_argument("notebooks", nargs="*", help="only these, merged into the file")
    args = parser.parse_args(argv)
    if not (args.cache / "global.db").exists():
        print(f"no jupyter-cache at {args.cache}: build the site first")
        return 1
    only = [(ROOT / nb).with_suffix(".ipynb").resolve() for nb in args.notebooks]
    if unknown := [p for p in only if p not in toc_notebooks()]:
        print("not notebooks of _toc.yml: " + ", ".join(map(str, unknown)))
        return 1
    records, missing = from_cache(args.cache, only or None)
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
    if only and out.exists():
        record = merge(json.loads(out.read_text()), record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    total = sum(seconds.values())
    print(f"total {total:.0f} s over {len(seconds)} notebooks -> {out}")
    return 0


def forget(entry: str) -> list[pathlib.Path]:
    """Drop ``entry``'s run times from every timing file (a chapter removed); the
    files changed."""
    changed = []
    for path in sorted((RESULTS / "timings").glob("*.json")):
        record = json.loads(path.read_text())
        if entry not in record["seconds"] and entry not in record.get("added", {}):
            continue
        record["seconds"].pop(entry, None)
        if "added" in record:
            record["added"].pop(entry, None)
            if not record["added"]:
                del record["added"]
        path.write_text(json.dumps(record, indent=1) + "\n")
        changed.append(path)
    return changed


def merge(old: dict, new: dict) -> dict:
    """``old`` (a full measurement) with the chapters of ``new`` measured since:
    their times replace or join the others (in the order of _toc.yml), and each is
    listed under ``added`` with its machine and date."""
    seconds = {**old["seconds"], **new["seconds"]}
    order = [p.relative_to(ROOT).with_suffix("").as_posix() for p in toc_notebooks()]
    added = dict(old.get("added", {}))
    for entry in new["seconds"]:
        added[entry] = {"device": new["device"], "measured": new["measured"]}
    return {
        **old,
        "seconds": {e: seconds[e] for e in order if e in seconds},
        "added": {e: added[e] for e in order if e in added},
    }


if __name__ == "__main__":
    sys.exit(main())

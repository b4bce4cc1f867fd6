"""Build a few pages of the book, strictly, into their own folder: a fast preview
for authors.

    python -m tools.build.pages book/part0/self_attention.ipynb [more pages] [--out DIR]

Builds the whole table of contents, plus the given pages if they are not in it yet (a
"Preview" part), but executes only the given pages: the others are rendered without
running, so links between chapters resolve and the build stays strict (any warning or
failing cell is an error). Output goes to ``DIR`` (default ``_build/pages``) with its
own execution cache, so several authors can preview different chapters at once without
touching the full site in ``_build/html``. Open ``DIR/_build/html/index.html``.

One kind of warning is expected and forgiven: a page that is not executed has no glued
values, so each of its ``{glue}`` roles warns "No key ... found in glue data". Sphinx
cannot be told to ignore one warning of one page (``suppress_warnings`` would hide the
same warning in the previewed pages, where it is an error), so the build runs without
``--warningiserror`` and this tool fails on every warning of its log but those. Its
execution cache (``DIR/.jupyter_cache``) keeps each executed page's run time:
``python -m tools.measure.time_notebooks --cache DIR/.jupyter_cache PAGE`` records it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys

from tools import toc

ROOT = pathlib.Path(__file__).resolve().parents[2]
WARNING = re.compile(r"^(?:(?P<file>\S+?)(?::\d+)?: )?(?:WARNING|ERROR|CRITICAL)\b")
NO_GLUE = re.compile(r"WARNING: No key '[^']*' found in glue data")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def unforgiven(log: str, executed: set[str]) -> list[str]:
    """The warnings and errors of a build log, less the missing glued values of the
    pages that were not executed (``executed``: the executed pages' entries)."""
    out = []
    for line in COLOUR.sub("", log).splitlines():
        m = WARNING.match(line)
        if not m or "Kernel is running over TCP" in line:
            continue
        page = m.group("file") or ""
        page = pathlib.Path(page).with_suffix("").as_posix() if page else ""
        page = page.removeprefix(ROOT.as_posix() + "/")
        if NO_GLUE.search(line) and page not in executed:
            continue
        out.append(line)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "pages",
        nargs="+",
        help="notebooks or markdown pages, relative to the repository root",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "_build" / "pages"), help="output folder"
    )
    args = parser.parse_args()
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for page in args.pages:
        path = (
            (ROOT / page).resolve()
            if not pathlib.Path(page).is_absolute()
            else pathlib.Path(page)
        )
        if not path.exists():
            parser.error(f"no such page: {page}")
        entries.append(path.relative_to(ROOT).with_suffix("").as_posix())
    toc_text = (ROOT / "_toc.yml").read_text()
    listed = set(toc.entries())
    extra = [e for e in entries if e not in listed]
    toc_file = out / "_toc.yml"
    toc_file.write_text(
        toc_text.rstrip("\n")
        + "\n"
        + ("  - caption: Preview\n    chapters:\n" if extra else "")
        + "".join(f"      - file: {e}\n" for e in extra)
    )
    skip = sorted(
        f"{e}.ipynb"
        for e in listed | set(entries)
        if e not in entries and (ROOT / f"{e}.ipynb").exists()
    )
    config = out / "_config.yml"
    text = (ROOT / "_config.yml").read_text()
    text = re.sub(r"^(\s+cache:).*$", rf"\1 {out / '.jupyter_cache'}", text, flags=re.M)
    text = re.sub(
        r"^execute:\n",
        "execute:\n  exclude_patterns: [" + ", ".join(f'"{p}"' for p in skip) + "]\n",
        text,
        flags=re.M,
    )
    # local_extensions (all under tools/) are found relative to the config file:
    # point them at the repo
    text = re.sub(
        r"^(\s+[\w.]+: +)(tools/\S*)(?=\s|$)", rf"\g<1>{ROOT}/\2", text, flags=re.M
    )
    config.write_text(text)
    cmd = [
        str(pathlib.Path(sys.executable).parent / "jupyter-book"),
        "build",
        str(ROOT),
        "--toc",
        str(toc_file),
        "--config",
        str(config),
        "--path-output",
        str(out),
        "--nitpick",
    ]
    os.environ["POSENC_BOOK_BUILD"] = "1"  # the site's check output (exercises.check)
    # html_extra_path (the student edition) must exist, or the strict build warns
    (ROOT / "_build" / "extra").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    log = []
    for line in proc.stdout:
        sys.stdout.write(line)
        log.append(line)
    status = proc.wait()
    problems = unforgiven("".join(log), set(entries))
    if problems and status == 0:
        status = 1
    if problems:
        print("[build_pages] warnings and errors:\n" + "\n".join(problems[:40]))
    print(f"[build_pages] exit {status}; open {out / '_build' / 'html' / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())

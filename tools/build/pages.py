"""Build a few pages of the book, strictly, into their own folder: a fast preview
for authors.

    python -m tools.build.pages book/part0/self_attention.ipynb [more pages] [--out DIR]

Renders the given pages, executed, and without executing them the pages they link
to, the root page and the bibliography (where ``{cite}`` roles resolve); the given
pages that are not in the table of contents yet join it in a "Preview" part. Every
other page of ``_toc.yml`` keeps its place, and so its number, as a stub: a page with
its title only. So links from the given pages resolve, chapter and exercise numbers
are the site's, and the build reads a few pages instead of the whole book (the site
build, ``make site`` or the test command's build stage, renders every page; it alone
has the API reference, so the preview's mentions of library names are not linked to
it). The build is strict (any warning or failing cell is an error). It reads its
pages from ``DIR/src``, a tree of links to the repository's files with the stubs in
place of the pages it does not render. Output goes to ``DIR`` (default
``_build/pages``) with its own execution cache, so several authors can preview
different chapters at once without touching the full site in ``_build/html``. Open
``DIR/_build/html/index.html``.

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
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

from tools import toc
from tools.build.colab_edition import CHAPTER_LINK, PAGE_LINK  # the book's links

ROOT = pathlib.Path(__file__).resolve().parents[2]
WARNING = re.compile(r"^(?:(?P<file>\S+?)(?::\d+)?: )?(?:WARNING|ERROR|CRITICAL)\b")
NO_GLUE = re.compile(r"WARNING: No key '[^']*' found in glue data")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


HEADING = re.compile(r"^#\s+(.+?)\s*$", re.M)
KEEP_OUT = {"_build", "_toc.yml", "_config.yml", "book"}  # DIR/src makes its own


def markdown_of(path: pathlib.Path) -> str:
    """The Markdown of a page: a notebook's Markdown cells, or the page's text."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )


def linked(path: pathlib.Path) -> set[str]:
    """The entries of the pages that ``path`` links to (relative Markdown links)."""
    out, text = set(), markdown_of(path)
    for link in [*CHAPTER_LINK.finditer(text), *PAGE_LINK.finditer(text)]:
        page = (path.parent / link.group("path")).resolve()
        if page.is_relative_to(ROOT) and page.exists():
            out.add(page.relative_to(ROOT).with_suffix("").as_posix())
    return out


def bibliographies(contents: toc.Toc) -> set[str]:
    """The pages that hold a ``{bibliography}`` directive."""
    return {
        e for e in contents.entries()
        if "{bibliography}" in markdown_of(contents.path(e))
    }  # fmt: skip


def stub(path: pathlib.Path) -> str:
    """A page with the title of ``path`` only, in the same format (a notebook stays a
    notebook: links name the file with its suffix)."""
    found = HEADING.search(markdown_of(path))
    text = f"# {found.group(1) if found else path.stem}\n\nNot in this preview.\n"
    if path.suffix != ".ipynb":
        return text
    cell = {"cell_type": "markdown", "id": "stub", "metadata": {}, "source": text}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                       "nbformat_minor": 5})  # fmt: skip


def source_tree(
    src: pathlib.Path, rendered: set[str], pages: list[str], contents: toc.Toc
) -> None:
    """``src``: links to the repository's files, each page of ``pages`` (entries of
    ``contents``, or pages not in it yet) a link if it is ``rendered``, else its
    stub."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for item in ROOT.iterdir():  # (not a folder that holds src: no loop)
        hidden = item.name in KEEP_OUT or item.name.startswith(".")
        if not hidden and not src.resolve().is_relative_to(item.resolve()):
            (src / item.name).symlink_to(item)
    (src / "_build").mkdir()  # html_extra_path: the student edition, the PDF
    (src / "_build" / "extra").symlink_to(ROOT / "_build" / "extra")
    files = {contents.path(entry): entry for entry in pages}
    for path in sorted((ROOT / "book").rglob("*")):
        if path.is_dir() or {"_build", ".ipynb_checkpoints"} & set(path.parts):
            continue
        target = src / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        entry = files.get(path)
        if entry is None or entry in rendered:
            target.symlink_to(path)
        else:
            target.write_text(stub(path))


def unforgiven(log: str, executed: set[str], src: pathlib.Path = ROOT) -> list[str]:
    """The warnings and errors of a build log, less the missing glued values of the
    pages that were not executed (``executed``: the executed pages' entries; ``src``:
    the folder the build read them from)."""
    out = []
    for line in COLOUR.sub("", log).splitlines():
        m = WARNING.match(line)
        if not m or "Kernel is running over TCP" in line:
            continue
        page = m.group("file") or ""
        page = pathlib.Path(page).with_suffix("").as_posix() if page else ""
        page = page.removeprefix(src.as_posix() + "/").removeprefix(
            ROOT.as_posix() + "/"
        )
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
    contents = toc.load()
    listed = set(contents.entries())
    # the root, the bibliography (where {cite} roles resolve) and the pages the given
    # ones link to
    rendered = {contents.root, *entries, *bibliographies(contents)}
    for entry in entries:
        rendered |= linked(contents.path(entry))
    # html_extra_path (the student edition) must exist, or the strict build warns
    (ROOT / "_build" / "extra").mkdir(parents=True, exist_ok=True)
    src = out / "src"
    source_tree(src, rendered, sorted(listed | set(entries)), contents)
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
        str(src),
        "--toc",
        str(toc_file),
        "--config",
        str(config),
        "--path-output",
        str(out),
        "--nitpick",
    ]
    os.environ["POSENC_BOOK_BUILD"] = "1"  # the site's check output (exercises.check)
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
    problems = unforgiven("".join(log), set(entries), src)
    if problems and status == 0:
        status = 1
    if problems:
        print("[build_pages] warnings and errors:\n" + "\n".join(problems[:40]))
    print(f"[build_pages] exit {status}; open {out / '_build' / 'html' / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Build a few pages of the book, strictly, into their own folder: a fast preview
for authors.

    python -m tools.build.pages book/part0/self_attention.ipynb [more pages] [--out DIR]

Builds the whole table of contents, plus the given pages if they are not in it yet (a
"Preview" part), but executes only the given pages: the others are rendered without
running, so links between chapters resolve and the build stays strict (any warning or
failing cell is an error). Output goes to ``DIR`` (default ``_build/pages``) with its
own execution cache, so several authors can preview different chapters at once without
touching the full site in ``_build/html``. Open ``DIR/_build/html/index.html``.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
    listed = set(re.findall(r"^\s*-?\s*(?:file|root):\s*(\S+)", toc_text, re.M))
    extra = [e for e in entries if e not in listed]
    toc = out / "_toc.yml"
    toc.write_text(
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
        str(toc),
        "--config",
        str(config),
        "--path-output",
        str(out),
        "--warningiserror",
        "--nitpick",
        "--keep-going",
    ]
    # html_extra_path (the student edition) must exist, or the strict build warns
    (ROOT / "_build" / "extra").mkdir(parents=True, exist_ok=True)
    result = subprocess.run(cmd, cwd=ROOT)
    print(
        f"[build_pages] exit {result.returncode}; open "
        f"{out / '_build' / 'html' / 'index.html'}"
    )
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

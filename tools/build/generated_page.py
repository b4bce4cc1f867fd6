"""Write a generated page, or check that the committed one is up to date: the shared
command line of tools/build/errata_index.py and tools/build/course_index.py."""

from __future__ import annotations

import pathlib
import sys
from typing import Callable

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main(page: pathlib.Path, render: Callable[[], str], tool: str) -> int:
    """``tool [--check]``: write ``render()`` to ``page``, or with ``--check`` exit 1
    when ``page`` differs from it."""
    text = render()
    if "--check" in sys.argv:
        if not page.exists() or page.read_text() != text:
            print(f"{page.relative_to(ROOT)} is out of date: ", end="")
            print(f"run python -m tools.build.{tool}")
            return 1
        return 0
    if page.exists() and page.read_text() == text:
        # untouched: the test command's --check may be reading it at the same time
        print(f"{page.relative_to(ROOT)} is up to date")
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    print(f"wrote {page.relative_to(ROOT)}")
    return 0

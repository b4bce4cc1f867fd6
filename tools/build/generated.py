"""Every generated file of the repository at once: what the site build regenerates
before it runs, and what a test checks is up to date.

    python -m tools.build.generated           # (re)write every generated file
    python -m tools.build.generated --check   # exit 1, naming each one out of date

The files are collected from the chapters (and ``_toc.yml``, the timing files, the
class plan), never typed: after adding, removing or moving a chapter, or editing its
exercises, objectives or errata, run this and commit what it wrote.

| generator | writes |
|---|---|
| ``errata_index`` | ``book/appendix/errata.md`` |
| ``course_index`` | ``book/teaching/chapters.md`` |
| ``exercise_numbers`` | ``posenc_lib/data/exercise_numbers.json`` |
| ``slides --guide`` | the generated lines of ``book/teaching/guide.md`` |
| ``api_reference`` | ``book/appendix/api*.md`` |

``tools/build/site.py`` runs the same list before every build (a test checks that
the two agree).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATORS = (
    "errata_index",
    "course_index",
    "exercise_numbers",
    "slides --guide",
    "api_reference",
)


def run(check: bool = False, cwd: pathlib.Path = ROOT) -> list[str]:
    """Run every generator (with ``--check``: check only); the ones that failed."""
    failed = []
    for generator in GENERATORS:
        module, *args = generator.split()
        result = subprocess.run(
            [sys.executable, "-m", f"tools.build.{module}", *args]
            + (["--check"] if check else []),
            cwd=cwd,
        )
        if result.returncode != 0:
            failed.append(generator)
    return failed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    failed = run(check="--check" in argv)
    if failed:
        print("failed: " + ", ".join(f"tools.build.{g}" for g in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

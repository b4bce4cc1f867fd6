"""Build the website strictly: any Sphinx warning or notebook cell error fails
the build.

    python -m tools.build.site              # incremental: re-executes what changed
    python -m tools.build.site --fresh      # empty execution cache, every page rebuilt
    python -m tools.build.site --all-pages  # every page rebuilt from the execution
                                            # cache (the test command, after nbval
                                            # filled it: tools/build/nbval_cache.py)

jupyter-cache keys executed notebooks on their code cells only, so a change to
``posenc_lib`` (its code, or the data it ships: the seed sweeps the chapters quote, the
benchmark), or to the pinned environment, would otherwise leave stale outputs on the
site. We key the cache on those too: a stamp beside it names the library state its
notebooks were executed with, and a cache of another state is dropped; a second stamp
does the same for the built pages, and names the code of the book's own Sphinx
extensions too (``local_extensions`` in ``_config.yml``): Sphinx re-reads a page when
its source changed, never when an extension that reads it did. The PDF's single-page
build (``tools/build/pdf.py``) reads nothing itself: it writes from this build's
environment (``_build/.doctrees``), so it checks both stamps before.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

import yaml

from tools.build import colab_edition, generated, session_bundles

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
CACHE_STAMP = BUILD / ".cache-library-hash"  # the library the cache was executed with
STAMP = BUILD / ".library-hash"  # the library (and extensions) of the built pages


def stamp_of(path: pathlib.Path) -> str | None:
    return path.read_text() if path.exists() else None


def library_hash() -> str:
    digest = hashlib.sha256()
    lib = ROOT / "posenc_lib"
    files = sorted([*lib.rglob("*.py"), *lib.rglob("*.csv"), *lib.rglob("*.json")]) + [
        ROOT / "requirements.txt",
        ROOT / "pyproject.toml",
        # A changed table of contents (its numbering, a new part) can crash
        # sphinx-external-toc's incremental build: rebuild everything then.
        ROOT / "_toc.yml",
    ]
    for path in files:
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def local_extensions() -> list[pathlib.Path]:
    """The modules of the book's own Sphinx extensions (``local_extensions`` in
    ``_config.yml``: name -> folder, relative to the repository)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    found = config.get("sphinx", {}).get("local_extensions") or {}
    return [ROOT / folder / f"{name}.py" for name, folder in found.items()]


def pages_hash() -> str:
    """The state of the built pages beyond their sources: the library's
    (``library_hash``) and that of the extensions' code, which Sphinx does not
    track (an edited extension rebuilds every page, from the execution cache)."""
    digest = hashlib.sha256(library_hash().encode())
    for path in sorted(local_extensions()):
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def main() -> int:
    fresh = "--fresh" in sys.argv
    os.environ["POSENC_BOOK_BUILD"] = "1"  # checks print neutral verdicts on the site
    current, pages = library_hash(), pages_hash()
    if fresh or stamp_of(CACHE_STAMP) != current:
        reason = "--fresh" if fresh else "posenc_lib or the environment changed"
        print(f"[build] dropping the execution cache ({reason})", flush=True)
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE_STAMP.unlink(missing_ok=True)
    stale = fresh or "--all-pages" in sys.argv or stamp_of(STAMP) != pages
    if stale:
        print("[build] rebuilding every page", flush=True)
        for path in (BUILD / "html", BUILD / "jupyter_execute", BUILD / ".doctrees"):
            shutil.rmtree(path, ignore_errors=True)
    cmd = [
        str(pathlib.Path(sys.executable).parent / "jupyter-book"),
        "build",
        str(ROOT),
        "--warningiserror",
        "--nitpick",
        "--keep-going",
        "--builder",
        "html",
    ]
    if stale:
        cmd.append("--all")
    # Generated pages first: the errata index, the teaching guide's chapter
    # index and its sessions' facts are collected from the chapters.
    failed = generated.run()
    if failed:
        print(f"[build] a generator failed: {failed}", flush=True)
        return 1
    shutil.rmtree(BUILD / "extra" / "student", ignore_errors=True)  # its old place
    (BUILD / "extra").mkdir(parents=True, exist_ok=True)  # html_extra_path
    start = time.time()
    result = subprocess.run(cmd, cwd=ROOT)
    print(
        f"[build] jupyter-book exited {result.returncode} after "
        f"{time.time() - start:.0f} s",
        flush=True,
    )
    if result.returncode != 0:
        # never trust pages or a cache that a failed build may have half-written
        STAMP.unlink(missing_ok=True)
        CACHE_STAMP.unlink(missing_ok=True)
        return result.returncode
    BUILD.mkdir(exist_ok=True)
    STAMP.write_text(pages)
    CACHE_STAMP.write_text(current)
    print(f"[build] open {BUILD / 'html' / 'index.html'}")
    # The student edition, quoting the numbers this build measured, into the site
    # (the teaching guide links _build/html/student/posenc-student-notebooks.zip).
    student = [sys.executable, "-m", "tools.build.student_edition"]
    subprocess.run([*student, str(BUILD / "html" / "student")], cwd=ROOT, check=True)
    session_bundles.build(BUILD / "html" / "student")  # and one zip per session
    # The teaching guide's slides, one deck per session, from this build's executed
    # notebooks (so after the build), into the site: _build/html/slides.
    subprocess.run([sys.executable, "-m", "tools.build.slides"], cwd=ROOT, check=True)
    # The Colab edition: the notebooks in plain Markdown, with the values glued by
    # this build's executed notebooks (tools/build/colab_edition.py).
    shutil.rmtree(BUILD / "colab", ignore_errors=True)
    result = subprocess.run(
        [sys.executable, "-m", "tools.build.colab_edition"], cwd=ROOT
    )
    if result.returncode == 0:
        # each chapter page's "Download → .ipynb" serves that edition, not the MyST
        # source Sphinx copied into _sources/
        served = colab_edition.serve_downloads(BUILD / "html", BUILD / "colab")
        print(f"[build] {len(served)} pages' downloads serve the Colab edition")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

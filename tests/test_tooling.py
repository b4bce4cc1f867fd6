"""The pipeline's own guarantees: the site's execution cache is keyed on the library,
and the code fits the page."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tools.build import site as build_site

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_cache_key_changes_when_the_library_or_the_pins_change(tmp_path, monkeypatch):
    for name in ("posenc_lib", "requirements.txt", "pyproject.toml", "_toc.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    monkeypatch.setattr(build_site, "ROOT", tmp_path)
    before = build_site.library_hash()
    assert build_site.library_hash() == before  # deterministic
    (tmp_path / "posenc_lib" / "encodings" / "nope.py").write_text(
        "# changed\n", encoding="utf-8"
    )
    after_lib = build_site.library_hash()
    assert after_lib != before  # a library edit drops the cache
    with open(tmp_path / "requirements.txt", "a") as f:
        f.write("# changed pin\n")
    after_pins = build_site.library_hash()
    assert after_pins != after_lib  # so does a change of pins
    with open(tmp_path / "_toc.yml", "a") as f:
        f.write("# a new part\n")
    assert build_site.library_hash() != after_pins  # and of the table of contents


def test_the_pages_stamp_names_the_book_extensions_too(tmp_path, monkeypatch):
    """Sphinx re-reads a page when its source changed, not when an extension that
    reads it did: the built pages' stamp names the extensions' code, so an edited
    extension rebuilds the pages (and the PDF's, which it writes from them); the
    execution cache's stamp does not (its notebooks are still good)."""
    for name in ("posenc_lib", "requirements.txt", "pyproject.toml", "_toc.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    shutil.copy(ROOT / "_config.yml", tmp_path)
    shutil.copytree(ROOT / "tools" / "build", tmp_path / "tools" / "build")
    monkeypatch.setattr(build_site, "ROOT", tmp_path)
    names = {path.stem for path in build_site.local_extensions()}
    assert {"api_reference", "repo_links", "singlehtml_nodes"} <= names
    library, pages = build_site.library_hash(), build_site.pages_hash()
    with open(tmp_path / "tools" / "build" / "repo_links.py", "a") as f:
        f.write("# changed\n")
    assert build_site.library_hash() == library
    assert build_site.pages_hash() != pages


def test_the_pdf_build_shares_the_site_builds_environment():
    """The single-page build (tools/build/pdf.py) is jupyter-book's, strict, with the
    site's configuration and no --path-output: beside _build/html, so its doctrees are
    the site build's _build/.doctrees (jupyter-book puts them beside the output), and
    with no --all, so it reads no page the site build read. For Sphinx to accept that
    environment the extensions must be the site's: _config.yml lists the one the
    single-page builder needs."""
    import inspect

    from jupyter_book import sphinx as jb_sphinx

    from tools.build import pdf

    command = pdf.build_command()
    assert command[1:5] == ["build", str(ROOT), "--builder", "singlehtml"]
    assert {"--warningiserror", "--nitpick", "--keep-going"} <= set(command)
    assert not {"--all", "--config", "--path-output"} & set(command)
    assert pdf.SINGLE.parent == build_site.BUILD
    source = inspect.getsource(jb_sphinx.build_sphinx)
    assert 'Path(outputdir).parent.joinpath(".doctrees")' in source
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "singlehtml_nodes" in config["sphinx"]["local_extensions"]
    # how it counts the sources it read: Sphinx's summary line, in colour or not
    for line, read in (
        (
            "\x1b[01mupdating environment: \x1b[39;49;00m0 added, 0 changed, 0 removed",
            0,
        ),
        ("updating environment: [new config] 49 added, 0 changed, 0 removed", 49),
        ("updating environment: 0 added, 2 changed, 1 removed", 2),
    ):
        found = pdf.UPDATING.search(pdf.ANSI.sub("", line))
        assert int(found.group(1)) + int(found.group(2)) == read, line


def test_the_pdf_build_builds_the_site_first_when_it_is_stale(tmp_path, monkeypatch):
    """The single-page build prints the site build's environment: the site is built
    first when there is none, when the library, the pins, the table of contents or
    an extension changed since (the stamp), or when a page's source is newer than
    the last site build (it also regenerates the pages collected from the chapters).
    """
    import os

    from tools.build import pdf

    stamp = tmp_path / "_build" / ".library-hash"
    stamp.parent.mkdir()
    notebook = tmp_path / "book" / "part1" / "x.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}\n")
    (tmp_path / "_config.yml").write_text("title: x\n")
    monkeypatch.setattr(pdf, "ROOT", tmp_path)
    monkeypatch.setattr(pdf, "STAMP", stamp)
    monkeypatch.setattr(pdf, "pages_hash", lambda: "current")
    assert pdf.site_staleness() == "no site build"
    stamp.write_text("older")
    assert "changed" in pdf.site_staleness()
    stamp.write_text("current")
    built = stamp.stat().st_mtime
    for path in (notebook, tmp_path / "_config.yml"):
        os.utime(path, (built - 60, built - 60))
    assert pdf.site_staleness() is None
    os.utime(notebook, (built + 1, built + 1))  # edited after the site build
    assert pdf.site_staleness() == "book/part1/x.ipynb edited since"
    os.utime(notebook, (built - 60, built - 60))
    checkpoint = notebook.parent / ".ipynb_checkpoints" / "x-checkpoint.ipynb"
    checkpoint.parent.mkdir()
    checkpoint.write_text("{}\n")  # Jupyter's autosave is no source
    os.utime(checkpoint, (built + 1, built + 1))
    assert pdf.site_staleness() is None


def test_code_fits_the_page():
    """``ruff format --check`` and ``ruff check`` (E501 at 88 columns, notebooks
    included) pass from the repository root, as configured in pyproject.toml."""
    ruff = pathlib.Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip(
            f"ruff is not installed next to {sys.executable}; "
            "pip install -r requirements.txt to check that the code fits the page"
        )
    failures = []
    for command in (["format", "--check"], ["check"]):
        result = subprocess.run(
            [str(ruff), *command, "--output-format", "concise", "--no-cache", "."],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            # path:line:col: E501 Line too long (n > 88); notebooks add "cell k:"
            lines = (result.stdout + result.stderr).splitlines()
            found = (re.match(r"(.+?):(cell \d+:)?\d+:\d+: ", line) for line in lines)
            files = sorted({m.group(1) for m in found if m})
            failures.append(f"ruff {' '.join(command)} fails on: {', '.join(files)}")
            failures += lines
    assert not failures, (
        "the code does not fit the page (88 columns); run `ruff format <file>` and "
        "wrap what `ruff check` reports by hand:\n" + "\n".join(failures)
    )


def test_no_notebook_code_line_passes_88_columns_even_behind_a_pragma():
    """ruff's E501 forgives a line whose code fits before a trailing ``# noqa``;
    the page does not, so a chapter's code line counts its pragma too."""
    import json

    long = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for k, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                if len(line) > 88:
                    rel = path.relative_to(ROOT)
                    long.append(f"{rel} cell {k}: {len(line)} columns: {line[:60]}")
    assert not long, "code lines wider than the page (88 columns):\n" + "\n".join(long)


def test_the_page_preview_forgives_only_the_glue_of_the_pages_it_did_not_run():
    """``tools/build/pages.py`` renders the pages it does not execute without their
    glued values: their "No key ... in glue data" warnings are expected; the same
    warning on an executed page, and any other warning, fails the preview."""
    from tools.build import pages

    root = pages.ROOT.as_posix()
    glue = "WARNING: No key 'x' found in glue data for this document. [mystnb.glue]"
    log = "\n".join(
        [
            f"\x1b[91m{root}/book/part1/a.ipynb:270002: {glue}\x1b[39;49;00m",
            f"{root}/book/part3/new.ipynb:10002: {glue}",
            f"{root}/book/part3/new.ipynb:4: WARNING: undefined label: 'fig-x'",
            "[IPKernelApp] WARNING | Kernel is running over TCP without encryption.",
            "build succeeded, 3 warnings.",
        ]
    )
    problems = pages.unforgiven(log, {"book/part3/new"})
    assert len(problems) == 2 and all("book/part3/new" in p for p in problems)
    assert pages.unforgiven(log.splitlines()[0], {"book/part3/new"}) == []
    # the same log, written by a build that read its pages from DIR/src
    src = pathlib.Path("/tmp/p/src")
    moved = log.replace(root, src.as_posix())
    expected = [p.replace(root, src.as_posix()) for p in problems]
    assert pages.unforgiven(moved, {"book/part3/new"}, src) == expected


def test_the_page_preview_renders_the_pages_it_needs_and_stubs_the_rest(tmp_path):
    """The preview reads the given pages, the root and the pages they link to; every
    other page of the table of contents is a stub with its title only, in its own
    format (a notebook stays a notebook, so links naming ``.ipynb`` resolve and the
    numbering is the site's)."""
    import json

    from tools import toc
    from tools.build import pages

    entry = "book/part6/toolkit"
    links = pages.linked(pages.ROOT / f"{entry}.ipynb")
    assert "book/part1/sinusoidal" in links and "book/part3/rope" in links
    assert all((pages.ROOT / f"{e}.ipynb").exists() or (pages.ROOT / f"{e}.md")
               .exists() for e in links)  # fmt: skip
    page = tmp_path / "a" / "page.md"
    page.parent.mkdir()
    (tmp_path / "b.ipynb").write_text("{}")
    page.write_text("[x](../b.ipynb#sec) [y](https://e.org/c.md) [z](#here) [w](no.md)")
    assert pages.linked(page) == set()  # outside the repository, or missing
    contents = toc.load()
    every = contents.entries()
    rendered = {contents.root, entry, *links}
    src = tmp_path / "src"
    pages.source_tree(src, rendered, every, contents)
    for e in every:
        path = contents.path(e)
        copy = src / path.relative_to(pages.ROOT)
        if e in rendered:
            assert copy.is_symlink() and copy.resolve() == path.resolve(), e
            continue
        assert not copy.is_symlink(), e
        title = pages.HEADING.search(pages.markdown_of(path)).group(1)
        if path.suffix == ".ipynb":
            cells = json.loads(copy.read_text())["cells"]
            assert [c["cell_type"] for c in cells] == ["markdown"], e
        assert pages.markdown_of(copy).startswith(f"# {title}\n"), e
    assert (src / "posenc_lib").resolve() == pages.ROOT / "posenc_lib"
    assert not (src / "_toc.yml").exists()  # the preview writes its own


def test_pybtex_finds_a_plugin_without_scanning_the_installed_packages_again():
    """tools/build/bibtex_plugins.py (a local extension of every build): a style's
    plugin lookup scans the installed distributions' entry points once per group and
    name, and a later lookup finds the same class without a scan."""
    import pybtex.plugin

    from tools.build import bibtex_plugins

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "bibtex_plugins" in config["sphinx"]["local_extensions"]
    bibtex_plugins.memoise_entry_points()
    bibtex_plugins.memoise_entry_points()  # twice: still one cache, not a cache of one
    scan = pybtex.plugin.entry_points
    assert not hasattr(scan.__wrapped__, "cache_info")
    first = pybtex.plugin.find_plugin("pybtex.style.formatting", "plain")
    misses = scan.cache_info().misses
    again = pybtex.plugin.find_plugin("pybtex.style.formatting", "plain")
    assert again is first and first.__name__ == "Style"
    assert scan.cache_info().misses == misses  # found without a second scan
    labels = pybtex.plugin.find_plugin("pybtex.style.labels")  # the default plugin
    assert labels is not first

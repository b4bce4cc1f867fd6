"""A Sphinx extension: every inline-code path of the repository is a link to it.

The prose names the repository's files as inline code (`tests/test_layouts.py`,
`tools/measure/seed_sweep.py`, `posenc_lib/data/sweeps/cost.csv`), which a reader of
the site, the PDF or Colab cannot open. After Sphinx resolves a page
(``doctree-resolved``), each such literal becomes a link to the file on GitHub,
``{repository.url}/blob/{repository.branch}/{path}`` (a folder: ``tree/``), the URL
and branch of ``_config.yml`` (jupyter-book passes them as ``html_theme_options``).

Why a doctree transform and not a rewrite of the built HTML: the PDF is printed from
Sphinx's single-page build (tools/build/pdf.py), which runs the same extensions, so
its links come from the same code; a rewrite of ``_build/html`` would miss it.

A path counts as the repository's when it starts with one of ``PREFIXES``; it is
linked only when the repository tracks it (``git ls-files``; the working tree where
there is no git). One that does not exist is a warning, which fails the strict site
build and the page preview, so prose cannot send the reader to a file that is not
there. Placeholders (``tests/golden/<x>.json``, ``*``) are not paths and are left
alone; so are the files of other repositories that the book names under a path of the
same form (``FOREIGN``). ``tests/test_site_files.py`` checks every link on the built
site against the tree. The Colab and student editions, which leave Sphinx out, get the
same links from ``link_markdown`` (tools/build/colab_edition.py).

Standalone on purpose: ``local_extensions`` imports it by file, not as ``tools.…``.
"""

from __future__ import annotations

import functools
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREFIXES = ("tests/", "tools/", "posenc_lib/", "book/", ".github/", ".ci/")
# A path with an optional pytest node id (`tests/test_x.py::test_y`).
PATH = re.compile(r"^(?P<path>[\w.-]+(?:/[\w.-]+)*/?)(?:::[\w\[\]-]+)?$")
# Paths of other repositories that the book cites in the same form: never ours.
FOREIGN = {
    "tests/test_attn.py": "stickbreaking-attention's kernel tests (stick_breaking)",
    "tests/ops/triton/test_mamba3_siso.py": "state-spaces/mamba's (research_2026)",
}
CLASS = "repo-link"


@functools.cache
def tracked(root: pathlib.Path = ROOT) -> tuple[frozenset[str], frozenset[str]]:
    """The repository's files and folders (relative, '/'-separated)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout.decode()
        files = frozenset(f for f in listed.split("\0") if f)
    except (OSError, subprocess.CalledProcessError):  # not a checkout: the files
        files = frozenset(
            p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
        )
    folders = frozenset(
        parent.as_posix()
        for f in files
        for parent in pathlib.PurePosixPath(f).parents
        if parent.as_posix() != "."
    )
    return files, folders


def repository_path(text: str) -> str | None:
    """The repository path an inline literal names (node id dropped), or None when it
    is not one: another prefix, a placeholder, a foreign file."""
    text = text.strip()
    if not text.startswith(PREFIXES):
        return None
    m = PATH.match(text)
    if m is None:  # `tests/golden/<x>.json`, `posenc_lib/data/*_cuda.*`, prose
        return None
    path = m["path"]
    return None if path in FOREIGN else path


def file_url(
    base: str, branch: str, path: str, root: pathlib.Path = ROOT
) -> str | None:
    """The GitHub URL of ``path`` (a file: blob/, a folder: tree/), or None when the
    repository does not hold it."""
    files, folders = tracked(root)
    bare = path.rstrip("/")
    if bare in files and not path.endswith("/"):
        kind = "blob"
    elif bare in folders:
        kind = "tree"
    else:
        return None
    return f"{base.rstrip('/')}/{kind}/{branch}/{bare}"


# an inline code span of Markdown, not already the text of a link
INLINE_CODE = re.compile(r"(?<![`\[])`(?P<code>[^`\n]+)`(?![`\]])")


def link_markdown(text: str, base: str, branch: str, root: pathlib.Path = ROOT) -> str:
    """Markdown ``text`` with each inline-code path of the repository made a link to
    its file, as the site has it: for the editions that leave Sphinx out (Colab,
    student). A path the repository does not hold stays as it is (the site build
    names it)."""

    def link(m: re.Match) -> str:
        path = repository_path(m["code"])
        url = path and file_url(base, branch, path, root)
        return f"[{m.group(0)}]({url})" if url else m.group(0)

    return INLINE_CODE.sub(link, text)


def link_repository_paths(app, doctree, docname) -> None:
    from docutils import nodes
    from sphinx.util import logging

    options = app.config.html_theme_options or {}
    base = options.get("repository_url")
    branch = options.get("repository_branch") or "main"
    if not base:
        return
    log = logging.getLogger(__name__)
    for literal in list(doctree.findall(nodes.literal)):
        if isinstance(literal.parent, (nodes.reference, nodes.title)):
            continue  # already a link (the API reference's), or a heading
        path = repository_path(literal.astext())
        if path is None:
            continue
        url = file_url(base, branch, path)
        if url is None:
            log.warning(
                f"`{path}` is not a file or folder of the repository: fix the path, "
                "or, if it names another repository's file, add it to FOREIGN in "
                "tools/build/repo_links.py",
                location=literal,
            )
            continue
        ref = nodes.reference("", "", internal=False, refuri=url, reftitle=path)
        ref["classes"].append(CLASS)
        literal.parent.replace(literal, ref)
        ref.append(literal)


def setup(app):
    app.connect("doctree-resolved", link_repository_paths)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}

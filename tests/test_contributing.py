"""CONTRIBUTING.md is true: its chapter recipe, followed end to end in a copy of the
repository, makes a chapter that every generator, the hygiene tests, the student
edition and the strict page build accept, touching the files it lists, and its
removal recipe restores the copy byte for byte (``-m build``: minutes); its fast-form
recipe, followed likewise, makes a form that the table runs (seconds). Beside it,
quick checks that the documents and the tools agree: the chapter template is in the
book's exercise form, every command the documents name exists, every tool is in
tools/README.md, and the site build runs every generator.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from tools import toc
from tools.authoring import md2nb, new_chapter
from tools.build import student_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
ENTRY = "book/part3/my_method"  # the recipe's example chapter
SKIP = {"_build", "__pycache__", ".ipynb_checkpoints", ".git", ".venv"}


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def exercise_forms(nb: dict) -> set[tuple[str, ...]]:
    """The shape of each exercise of a notebook, from its ``{exercise}`` to the cell
    before the next exercise or heading: one word per cell (``exercise``, then
    ``start``, ``code``, ``end`` for the cells tagged ``solution``, ``check`` for a
    check cell)."""
    forms, current = set(), None
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "solution" not in tags(cell):
            if current:
                forms.add(tuple(current))
            current = ["exercise"] if "{exercise}" in text else None
            continue
        if current is None:
            continue
        if "check" in tags(cell):
            current.append("check")
        elif "solution" in tags(cell):
            kind = "code" if cell["cell_type"] == "code" else "markdown"
            kind = "start" if "{solution-start}" in text else kind
            current.append("end" if "{solution-end}" in text else kind)
        else:
            current.append("other")
    if current:
        forms.add(tuple(current))
    return forms


def template_notebook() -> dict:
    return md2nb.convert(new_chapter.chapter_text(ENTRY, "My method"))


def test_the_template_writes_exercises_as_the_book_does():
    """Every form of exercise in the template (a self-checking coding exercise, a
    prose one) is a form the book's chapters use, with ``:class: dropdown``."""
    book = set()
    for path in toc.notebooks():
        book |= exercise_forms(json.loads(path.read_text()))
    nb = template_notebook()
    forms = exercise_forms(nb)
    assert ("exercise", "start", "code", "end", "check") in forms
    assert ("exercise", "start", "end") in forms
    assert forms <= book, f"forms the book does not use: {forms - book}"
    starts = [
        "".join(c["source"])
        for c in nb["cells"]
        if "{solution-start}" in "".join(c["source"])
    ]
    assert all(":class: dropdown" in s for s in starts)
    # the student edition finds the solution code and the check
    assert student_edition.solution_code(nb) and student_edition.checked_labels(nb)


def test_the_template_stores_cells_as_the_book_does():
    """Code as a list of lines (Markdown as one string), the canonical Colab cell
    first, no outputs, cell ids: what the hygiene tests and the student edition's
    cell-by-cell comparison expect."""
    nb = template_notebook()
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(isinstance(c["source"], list) for c in code)
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert nb["cells"][0]["id"] == "colab-setup"
    assert len({c["id"] for c in nb["cells"]}) == len(nb["cells"])
    text = json.dumps(nb)
    assert "ex-my-method-offsets" in text and "template" not in text.lower()


def test_the_scaffold_refuses_before_it_writes():
    before = toc.TOC.read_text()
    for args, says in [
        (("book/part3/My-Method", "T", "s", None), "lower case"),
        (("book/part3/alibi", "T", "s", None), "exists already"),
        (("book/part9/x", "T", "s", None), "no numbered part"),
        (("book/part3/x", "T", "s", "book/part4/cope"), "folder is book/part3/"),
        (("book/part3/x", "T", "s", "book/appendix/api"), "not a chapter"),
        # a checks module named like a name of the checks' package replaces it
        # there (the package's torch, check, numbers...): 40 of 54 checks broke
        (("book/part3/torch", "T", "s", None), "shadow"),
        (("book/part3/check", "T", "s", None), "shadow"),
        (("book/part3/numbers", "T", "s", None), "shadow"),
        (("book/part3/expect_close", "T", "s", None), "shadow"),
    ]:
        with pytest.raises(new_chapter.Refused, match=says):
            new_chapter.create(*args)
    assert toc.TOC.read_text() == before
    assert not (ROOT / "book/part3/x.ipynb").exists()


def test_every_command_the_documents_name_exists():
    """``python -m tools....`` in README.md, CONTRIBUTING.md and tools/README.md
    names a module that exists."""
    for doc in ("README.md", "CONTRIBUTING.md", "tools/README.md"):
        text = (ROOT / doc).read_text()
        for module in set(re.findall(r"python -m (tools(?:\.\w+)+)", text)):
            path = ROOT / pathlib.Path(*module.split("."))
            assert (
                path.with_suffix(".py").exists() or (path / "__main__.py").exists()
            ), f"{doc} names python -m {module}, which does not exist"


def test_tools_readme_lists_every_tool():
    """Every module and script under tools/ has its row in tools/README.md."""
    readme = (ROOT / "tools" / "README.md").read_text()
    missing = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "tools").rglob("*"))
        if path.suffix in (".py", ".sh")
        and path.name != "__init__.py"
        and not SKIP & set(path.parts)
        and f"`{path.name}`" not in readme
    ]
    assert not missing, f"tools/README.md does not list {missing}"


def test_the_site_build_runs_every_generator():
    """``tools/build/site.py`` regenerates the pages through
    ``tools/build/generated.py``, the one list of generators."""
    source = (ROOT / "tools" / "build" / "site.py").read_text()
    assert "generated.run()" in source and "tools.build.errata_index" not in source


def test_the_checks_directory_is_where_the_checks_are():
    """``new_chapter.CHECKS_DIR`` (the one constant to change when the checks move)
    holds the chapters' checks, and CONTRIBUTING names it."""
    assert (new_chapter.CHECKS_DIR / "alibi.py").exists()
    module = importlib.import_module(new_chapter.checks_package() + ".alibi")
    assert pathlib.Path(module.__file__) == new_chapter.CHECKS_DIR / "alibi.py"
    chapter = CONTRIBUTING.split("### A chapter", 1)[1].split("\n### ", 1)[0]
    rel = new_chapter.CHECKS_DIR.relative_to(ROOT).as_posix()
    assert f"`{rel}/<name>.py`" in chapter


# ---- the recipe, end to end ---------------------------------------------------------


def recipe(name: str) -> list[str]:
    """The commands of the ``bash`` block after ``<!-- recipe: name``, one per
    command (continued lines joined, comments dropped)."""
    at = CONTRIBUTING.index(f"<!-- recipe: {name}")
    block = CONTRIBUTING[at:].split("```bash\n", 1)[1].split("```", 1)[0]
    block = block.replace("\\\n", " ")
    return [line.strip() for line in block.splitlines() if line.strip()[:1] not in "#"]


def copy_of_the_repository(dst: pathlib.Path) -> None:
    """The working tree's files (tracked, and untracked ones git does not ignore)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def snapshot(root: pathlib.Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not SKIP & set(p.relative_to(root).parts)
    }


def changed(before: dict, after: dict) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


@pytest.mark.build
def test_the_chapter_recipe_end_to_end(tmp_path):
    repo, pages = tmp_path / "repo", tmp_path / "p"
    copy_of_the_repository(repo)
    env = {**os.environ, "PYTHONPATH": str(repo)}  # the copy's tools and library
    env.pop("POSENC_EXPECT_CACHED", None)

    def run(command: str) -> None:
        command = command.replace(".venv/bin/python", shlex.quote(sys.executable))
        command = command.replace("/tmp/p", str(pages))
        start = time.time()
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
        )
        print(f"{time.time() - start:5.0f} s  {command}")
        assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-6000:]}"

    before = snapshot(repo)
    steps = recipe("chapter")
    assert ENTRY in steps[0] and "new_chapter" in steps[0]
    for command in steps:
        run(command)
    touched = changed(before, snapshot(repo))
    name = pathlib.PurePosixPath(ENTRY).name
    checks = new_chapter.CHECKS_DIR.relative_to(ROOT).as_posix()
    assert touched == {
        f"{ENTRY}.ipynb",
        f"{checks}/{name}.py",
        "_toc.yml",
        "book/intro.md",
        "book/teaching/guide.md",
        "tools/results/timings/cpu.json",
        "book/teaching/chapters.md",
        "posenc_lib/data/exercise_numbers.json",
        "book/appendix/api.md",  # the chapters after part3/alibi are renumbered
    }
    # every file it touched is one the recipe names
    chapter = CONTRIBUTING.split("### A chapter", 1)[1].split("\n### ", 1)[0]
    for path in touched:
        documented = path.replace(ENTRY, "book/<part>/<name>").replace(
            f"{checks}/{name}", f"{checks}/<name>"
        )
        assert f"`{documented}`" in chapter, f"CONTRIBUTING does not name {path}"
    # what the recipe's commands left is what the unit tests want of a chapter
    run(
        ".venv/bin/python -m pytest -q tests/test_course_index.py tests/test_slides.py "
        "tests/test_errata_index.py tests/test_toc.py -m 'not browser'"
    )
    added = json.loads((repo / "tools/results/timings/cpu.json").read_text())["added"]
    assert set(added) == {ENTRY}
    assert (pages / "_build" / "html" / f"{ENTRY}.html").exists()

    for command in recipe("remove a chapter"):
        run(command)
    assert not changed(before, snapshot(repo)), "the removal left the copy changed"


# ---- the fast-form recipe, end to end ------------------------------------------------

QUERY_BIAS = '''"""The query-bias form: ``score_bias`` as a term of the query alone
(``pe.query_bias``), which the softmax drops: the plain kernel, with no bias.

The identity that makes it exact::

    softmax_j(q_i . k_j * scale + u_i) = softmax_j(q_i . k_j * scale)

Proved equal to the reference by
``tests/test_registry.py::test_fused_forms_equal_the_hooks_forward_and_backward``.
"""

from . import sdpa

NAME, HOOK = "query_bias", "query_bias"


def why_not(pe, call):
    return None


def attend(q, k, v, pe, pos, ctx, scale):
    if pe.call_hook("query_bias", q, k, pos.q, pos.k, ctx=ctx) is None:
        return None
    mask = None if pos.ordered and pos.user_mask is None else pos.mask
    return sdpa.run(q, k, v, mask, scale, pos.ordered)
'''

CONTRACT_ENTRY = '''    def query_bias(self, q, k, q_pos, k_pos):
        """``None``, or ``score_bias`` as a term ``u`` ``(b|1, h|1, i)`` of the query
        alone (``backends/query_bias.py``)."""
        return None

    def causal_attention('''

# a user's encoding that states its bias through the new hook, as a test module of the
# copy: it runs in the pytest process of the copy's tests/test_fast_forms.py (one
# start of torch and the library for both)
USE_IT = """
import torch

import posenc_lib as pl


class QueryBias(pl.PositionalEncoding):
    def score_bias(self, q, k, q_pos, k_pos):
        return self.query_bias(q, k, q_pos, k_pos)[..., None]

    def query_bias(self, q, k, q_pos, k_pos):
        return (q_pos * 0.5).to(q.dtype)[:, None, :]


def test_it_runs_and_equals_the_reference():
    pe = QueryBias()
    assert pl.explain_path(pe).form == "query_bias", pl.explain_path(pe)
    assert pl.explain_path(pe, causal=False).form == "query_bias"
    mha = pl.MultiHeadAttention(16, 2, pe).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    grads = []
    for path in ("fused", "reference"):
        x.grad = None
        out = mha(x, causal=True, path=path)
        out.square().sum().backward()
        grads.append((out, x.grad.clone()))
    for fast, slow in zip(*grads):
        torch.testing.assert_close(fast, slow)
"""


def test_the_fast_form_recipe_end_to_end(tmp_path):
    """CONTRIBUTING's "A fast form", followed in a copy of the repository: one
    module, one table row, one contract entry make a form that the table runs,
    ``pl.explain_path`` names and ``tests/test_fast_forms.py`` accepts, equal to the
    reference; nothing else is touched, and the recipe names every file."""
    recipe_text = CONTRIBUTING.split("### A fast form", 1)[1].split("\n### ", 1)[0]
    repo = tmp_path / "repo"
    copy_of_the_repository(repo)
    before = snapshot(repo)
    backends = repo / "posenc_lib" / "backends"
    # 1. one module
    (backends / "query_bias.py").write_text(QUERY_BIAS)
    # 2. one table row, before the plain kernel's
    table = (backends / "forms.py").read_text()
    sdpa_row = "    Row(sdpa, ordered=False, kernel=True),\n"
    assert sdpa_row in table and "from . import band_bias," in table
    table = table.replace(sdpa_row, sdpa_row.replace("sdpa", "query_bias") + sdpa_row)
    table = table.replace(
        "from . import band_bias,", "from . import band_bias, query_bias,"
    )
    (backends / "forms.py").write_text(table)
    # 3. one contract entry
    base = (repo / "posenc_lib" / "base.py").read_text()
    assert base.count('"sink_logits", "causal_attention",') == 1
    base = base.replace(
        '"sink_logits", "causal_attention",',
        '"sink_logits", "query_bias", "causal_attention",',
    )
    base = base.replace("    def causal_attention(", CONTRACT_ENTRY, 1)
    (repo / "posenc_lib" / "base.py").write_text(base)
    touched = changed(before, snapshot(repo))
    assert touched == {
        "posenc_lib/backends/query_bias.py",
        "posenc_lib/backends/forms.py",
        "posenc_lib/base.py",
    }
    for path in ("posenc_lib/backends/<form>.py", "posenc_lib/backends/forms.py",
                 "posenc_lib/base.py"):  # fmt: skip
        assert f"`{path}`" in recipe_text, f"the recipe does not name {path}"
    (repo / "tests" / "test_query_bias_form.py").write_text(USE_IT)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p",
         "no:randomly", "tests/test_query_bias_form.py", "tests/test_fast_forms.py"],
        cwd=repo, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (
        "test_query_bias_form.py::test_it_runs_and_equals_the_reference PASSED"
        in done.stdout
    )

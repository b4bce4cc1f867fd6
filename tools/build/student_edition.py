"""The student edition: every chapter notebook with the exercise solutions removed,
generated from the one source (never edited by hand).

    python -m tools.build.student_edition [OUT]   # default OUT: _build/student

writes ``OUT/<part>/<chapter>.ipynb`` for every notebook of ``_toc.yml`` and
``OUT/posenc-student-notebooks.zip`` with all of them. ``tools/build/site.py`` runs it
and the site serves the zip (``html_extra_path``), linked from the teaching guide.

Solutions are ``{solution}`` directives in Markdown cells; each is replaced by one
line that says where the solution is. Code cells are copied unchanged and in order,
so a student notebook executes exactly as its chapter does
(tests/test_student_edition.py checks that, and runs one student notebook top to
bottom).
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
ZIP_NAME = "posenc-student-notebooks.zip"
SOLUTION = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{solution\}\s*(?P<label>\S*)[^\n]*\n"
    r".*?^(?P=fence)[ \t]*\n?",
    re.M | re.S,
)
PLACEHOLDER = (
    "*(Solution to `{label}` removed in the student edition: it is on the course "
    "website, in this chapter.)*\n"
)


def toc_notebooks() -> list[str]:
    entries = re.findall(
        r"^\s*-?\s*(?:file|root):\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M
    )
    return [e for e in entries if (ROOT / f"{e}.ipynb").exists()]


def strip_solutions(nb: dict) -> tuple[dict, int]:
    """A copy of ``nb`` without solutions, and how many were removed."""
    out, removed = copy.deepcopy(nb), 0
    for cell in out["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        new, n = SOLUTION.subn(
            lambda m: PLACEHOLDER.format(label=m.group("label") or "exercise"), text
        )
        if n:
            removed += n
            cell["source"] = new.splitlines(keepends=True)
    out.setdefault("metadata", {})["posenc_edition"] = "student"
    return out, removed


def build(out_dir: pathlib.Path) -> list[pathlib.Path]:
    written = []
    for entry in toc_notebooks():
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        student, _ = strip_solutions(nb)
        path = out_dir / pathlib.Path(entry).relative_to("book").with_suffix(".ipynb")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    with zipfile.ZipFile(out_dir / ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in written:
            archive.write(path, path.relative_to(out_dir).as_posix())
    return written


def main() -> int:
    out_dir = (
        pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "student"
    )
    written = build(out_dir)
    print(f"wrote {len(written)} student notebooks and {ZIP_NAME} to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

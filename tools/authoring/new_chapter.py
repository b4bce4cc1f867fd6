"""Scaffold a new chapter (or remove one): every file a chapter needs, made from the
template, then every generated page brought up to date.

    python -m tools.authoring.new_chapter book/part3/my_method "My method" \\
        --shows "what it shows, one line for the welcome page's table" \\
        [--after book/part3/alibi]
    python -m tools.authoring.new_chapter --remove book/part3/my_method

A chapter is not one file: the book finds it through ``_toc.yml``, the welcome page
lists it, the teaching guide sets it in a session, the exercise checker has a module
for it, and five generated files number and index it. Making it by hand means
touching each; this makes all of them, in order:

1. ``book/partN/<name>.ipynb``: ``tools/authoring/chapter_template.md`` (the skeleton
   of every chapter, its exercises in the book's form: a self-checking coding
   exercise and a prose one) with the title, and the labels made the chapter's own
   (``ex-template-...`` becomes ``ex-<name>-...``, also ``fig-`` and the glue keys),
   converted by ``tools/authoring/md2nb.py`` (the canonical Colab cell first);
2. ``<CHECKS_DIR>/<name>.py``: the exercise checks of the chapter, from
   ``tools/authoring/checks_template.py`` (how to write a check, and the check of
   the template's coding exercise, registered for this chapter);
3. ``_toc.yml``: the chapter's line after ``--after`` (default: after the last
   chapter of the part whose chapters live in ``book/partN/``), the file's comments
   and layout kept (the text is edited, never re-dumped);
4. ``book/intro.md``: the chapter's row in the table of chapters (``--shows``);
5. ``book/teaching/guide.md``: "Also read [title](...)." in the prose of the session
   the chapter joins (a chapter joins the session of the chapter before it);
6. the generators (``tools/build/generated.py``): the errata index, the chapter
   index, the exercise numbers, the guide's session facts, the API reference.

What it cannot write is left to the author, and printed at the end: the chapter
itself, its references in ``book/references.bib``, its measured run time
(``tools/measure/time_notebooks.py``), and the guide's prose. ``--remove`` undoes
1-5 (refusing where an author's edit makes the undo a guess), drops the chapter's
run times, and runs the generators again. The test that follows CONTRIBUTING's
recipe with this tool is ``tests/test_contributing.py``.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import subprocess
import sys

from tools import ROOT, toc

HERE = pathlib.Path(__file__).resolve().parent
# Where each chapter's exercise checks live, one module per chapter (its notebook's
# name); the package's import name follows from it.
CHECKS_DIR = ROOT / "posenc_lib" / "course" / "exercises"
TEMPLATE = HERE / "chapter_template.md"
CHECKS_TEMPLATE = HERE / "checks_template.py"
INTRO = ROOT / "book" / "intro.md"
GUIDE = ROOT / "book" / "teaching" / "guide.md"
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


class Refused(SystemExit):
    """The scaffold will not do this (the message says why and what to do)."""


def checks_package() -> str:
    """The import name of ``CHECKS_DIR`` (``posenc_lib.exercises``)."""
    return ".".join(CHECKS_DIR.relative_to(ROOT).parts)


def checks_module(entry: str) -> pathlib.Path:
    return CHECKS_DIR / f"{pathlib.PurePosixPath(entry).name}.py"


def normalise(entry: str) -> str:
    """``book/part3/x.ipynb`` or ``book/part3/x`` -> ``book/part3/x``."""
    entry = entry.strip().removesuffix(".ipynb").removesuffix(".md").strip("/")
    parts = entry.split("/")
    if len(parts) != 3 or parts[0] != "book" or not NAME.fullmatch(parts[2]):
        raise Refused(
            f"{entry}: expected book/<part folder>/<name>, the name in lower case "
            "letters, digits and _ (at most 40), e.g. book/part3/my_method"
        )
    taken = package_names()
    if parts[2] in taken:
        raise Refused(
            f"{entry}: the chapter's checks would be the module "
            f"{checks_package()}.{parts[2]}, which would shadow the name "
            f"{parts[2]!r} that the checks' package ({CHECKS_DIR.relative_to(ROOT)}/"
            "__init__.py) defines or imports, and break every check: name the "
            f"chapter otherwise (not {', '.join(sorted(taken))})"
        )
    return entry


def package_names() -> set[str]:
    """The names bound at the top level of the checks' package (its imports, defs,
    classes and assignments): a submodule of the same name would replace each of
    them in the package's namespace once imported."""
    tree = ast.parse((CHECKS_DIR / "__init__.py").read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(
                n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
            )
    return {n for n in names if NAME.fullmatch(n)}


# ---- the chapter's own files ------------------------------------------------------


def chapter_text(entry: str, title: str) -> str:
    """The template with the chapter's title and labels."""
    name = pathlib.PurePosixPath(entry).name
    slug = name.replace("_", "-")
    text = TEMPLATE.read_text()
    if "\n# Chapter title\n" not in text:
        raise Refused(f"{TEMPLATE.name} has no '# Chapter title' line to replace")
    text = text.replace("\n# Chapter title\n", f"\n# {title}\n", 1)
    text = text.replace("ex-template-", f"ex-{slug}-")
    text = text.replace("fig-template-", f"fig-{slug}-")
    return re.sub(r"\btemplate_(?=\w)", f"{name}_", text)


def checks_text(entry: str) -> str:
    """The checks template, registered for the chapter."""
    name = pathlib.PurePosixPath(entry).name
    chapter = entry.removeprefix("book/")
    text = CHECKS_TEMPLATE.read_text()
    text = text.replace("book/partN/template.ipynb", f"{entry}.ipynb")
    text = text.replace("partN/template", chapter)
    text = text.replace("ex-template-", f"ex-{name.replace('_', '-')}-")
    text = text.replace(
        "posenc_lib/exercises/", CHECKS_DIR.relative_to(ROOT).as_posix() + "/"
    )
    return text.replace("posenc_lib.exercises", checks_package())


def ruff_format(path: pathlib.Path) -> None:
    """``ruff format`` the file when ruff is installed beside Python (the label and
    the chapter's name change the lines' lengths)."""
    ruff = pathlib.Path(sys.executable).with_name("ruff")
    if ruff.exists():
        subprocess.run(
            [str(ruff), "format", "--quiet", "--no-cache", str(path)], check=True
        )


# ---- text edits of the shared files -----------------------------------------------


def _toc_line(text: str, entry: str) -> re.Match:
    found = list(
        re.finditer(
            rf"^(?P<indent>[ \t]*)- file: {re.escape(entry)}(?:\.ipynb|\.md)?"
            r"[ \t]*(?:#.*)?\n",
            text,
            re.M,
        )
    )
    if len(found) != 1:
        raise Refused(f"_toc.yml has {len(found)} lines '- file: {entry}', not one")
    return found[0]


def toc_with(text: str, entry: str, after: str) -> str:
    """``_toc.yml``'s text with ``- file: entry`` after ``after``'s entry (and its
    nested lines)."""
    m = _toc_line(text, after)
    indent, end = m.group("indent"), m.end()
    for line in text[end:].splitlines(keepends=True):  # its sections, if any
        if line.strip() and len(line) - len(line.lstrip()) <= len(indent):
            break
        end += len(line)
    new = text[:end] + f"{indent}- file: {entry}\n" + text[end:]
    part = toc.parse(new).part_of(entry)
    chapters = list(part.chapters)
    assert chapters[chapters.index(entry) - 1] == after, "the entry landed elsewhere"
    return new


def toc_without(text: str, entry: str) -> str:
    m = _toc_line(text, entry)
    rest = text[m.end() :].split("\n", 1)[0]
    if len(rest) - len(rest.lstrip()) > len(m.group("indent")):
        raise Refused(f"{entry} has sections in _toc.yml: remove them by hand first")
    new = text[: m.start()] + text[m.end() :]
    if entry in toc.parse(new).entries():
        raise Refused(f"_toc.yml still lists {entry}")
    return new


def _intro_row(text: str, rel: str) -> re.Match:
    found = list(
        re.finditer(rf"^\|[^\n]*\{{doc\}}`{re.escape(rel)}`[^\n]*\n", text, re.M)
    )
    if len(found) != 1:
        raise Refused(f"{INTRO.name}: {len(found)} rows of the table name {rel}")
    return found[0]


def intro_with(text: str, entry: str, after: str, shows: str) -> str:
    """The welcome page with the chapter's row after ``after``'s."""
    rel, prev = entry.removeprefix("book/"), after.removeprefix("book/")
    shows = " ".join(shows.split()).replace("|", "\\|")
    m = _intro_row(text, prev)
    return text[: m.end()] + f"| | {{doc}}`{rel}` | {shows} |\n" + text[m.end() :]


def intro_without(text: str, entry: str) -> str:
    m = _intro_row(text, entry.removeprefix("book/"))
    if not re.match(r"^\|\s*\|", m.group(0)):
        raise Refused(
            f"{INTRO.name}: the row of {entry} names its part: move the part's name "
            "to the next row, then remove the chapter"
        )
    return text[: m.start()] + text[m.end() :]


def guide_line(entry: str, title: str) -> str:
    return f"Also read [{title}](../{entry.removeprefix('book/')}.ipynb).\n\n"


def guide_with(text: str, entry: str, title: str, session: int) -> str:
    """The guide with the chapter named in its session's prose, just before the
    session's generated lines."""
    marker = f"<!-- session {session}: generated by tools/build/slides.py"
    if text.count(marker) != 1:
        raise Refused(f"{GUIDE.name} has no generated block for session {session}")
    at = text.index(marker)
    return text[:at] + guide_line(entry, title) + text[at:]


def guide_without(text: str, entry: str) -> tuple[str, bool]:
    """The guide without the scaffold's line; whether the guide still names the
    chapter (an author's own sentence, left to the author)."""
    rel = entry.removeprefix("book/")
    line = re.compile(
        rf"^Also read \[[^\]\n]*\]\(\.\./{re.escape(rel)}\.ipynb\)\.\n\n", re.M
    )
    text = line.sub("", text, count=1)
    return text, f"../{rel}.ipynb" in text


# ---- the commands -----------------------------------------------------------------


def placement(entry: str, after: str | None) -> tuple[str, toc.Part]:
    """The chapter the new one follows, and their part."""
    book = toc.load()
    folder = str(pathlib.PurePosixPath(entry).parent)
    if after is None:
        parts = [
            p
            for p in book.parts
            if p.numbered
            and any(str(pathlib.PurePosixPath(e).parent) == folder for e in p.chapters)
        ]
        if len(parts) != 1:
            raise Refused(
                f"no numbered part of _toc.yml holds the chapters of {folder}/: add "
                "the part to _toc.yml (and its session to book/teaching/guide.md) "
                "by hand, or name the chapter to follow with --after"
            )
        return parts[0].chapters[-1], parts[0]
    after = normalise(after)
    try:
        part = book.part_of(after)
    except KeyError:
        raise Refused(f"--after {after}: not in _toc.yml") from None
    if after not in part.chapters or not part.numbered:
        raise Refused(f"--after {after}: not a chapter of a numbered part")
    if str(pathlib.PurePosixPath(after).parent) != folder:
        raise Refused(f"--after {after}: the new chapter's folder is {folder}/")
    return after, part


def create(entry: str, title: str, shows: str, after: str | None) -> list[str]:
    """Write the chapter's files and edit the shared ones; the paths touched."""
    from tools.build import slides
    from tools.authoring import md2nb

    entry = normalise(entry)
    title = " ".join(title.split())
    if not title or not shows.strip():
        raise Refused(
            "the chapter needs a title and --shows (its row on the welcome page)"
        )
    notebook, module = ROOT / f"{entry}.ipynb", checks_module(entry)
    for path in (notebook, ROOT / f"{entry}.md", module):
        if path.exists():
            raise Refused(f"{path.relative_to(ROOT)} exists already")
    if entry in toc.entries():
        raise Refused(f"_toc.yml lists {entry} already")
    after, _ = placement(entry, after)
    session = next(s.number for s in slides.sessions() if after in s.chapters)
    # every edit computed first: a refusal leaves the repository as it was
    toc_text = toc_with(toc.TOC.read_text(), entry, after)
    intro = intro_with(INTRO.read_text(), entry, after, shows)
    guide = guide_with(GUIDE.read_text(), entry, title, session)
    nb = md2nb.convert(chapter_text(entry, title))
    checks = checks_text(entry)

    md2nb.write(nb, notebook)
    module.write_text(checks)
    ruff_format(module)
    toc.TOC.write_text(toc_text)
    INTRO.write_text(intro)
    GUIDE.write_text(guide)
    return [
        p.relative_to(ROOT).as_posix()
        for p in (notebook, module, toc.TOC, INTRO, GUIDE)
    ]


def remove(entry: str) -> tuple[list[str], list[str]]:
    """Undo ``create``; the paths touched and what is left to the author."""
    from tools.measure import time_notebooks

    entry = normalise(entry)
    if entry not in toc.entries():
        raise Refused(f"_toc.yml does not list {entry}")
    toc_text = toc_without(toc.TOC.read_text(), entry)
    intro = intro_without(INTRO.read_text(), entry)
    guide, named = guide_without(GUIDE.read_text(), entry)
    touched, left = [], []
    for path in (ROOT / f"{entry}.ipynb", checks_module(entry)):
        if path.exists():
            path.unlink()
            touched.append(path)
    toc.TOC.write_text(toc_text)
    INTRO.write_text(intro)
    GUIDE.write_text(guide)
    touched += [toc.TOC, INTRO, GUIDE, *time_notebooks.forget(entry)]
    if named:
        left.append(
            f"{GUIDE.relative_to(ROOT)} still names the chapter: edit its prose"
        )
    sweep = (
        ROOT
        / "posenc_lib"
        / "data"
        / "sweeps"
        / f"{pathlib.PurePosixPath(entry).name}.csv"
    )
    if sweep.exists():
        left.append(f"{sweep.relative_to(ROOT)} is the chapter's seed sweep: delete it")
    return [p.relative_to(ROOT).as_posix() for p in touched], left


NEXT = """\
Next, by hand (CONTRIBUTING.md, "Add a chapter"):
  1. write {entry}.ipynb (in Jupyter, or as a draft: jupytext --to md:myst, edit,
     python -m tools.authoring.md2nb draft.md {entry}.ipynb), its exercises in the
     template's form; add what it cites to book/references.bib;
  2. its checks in {module} (or delete the example check with its exercise);
  3. the session's prose in book/teaching/guide.md (the scaffold wrote "Also read");
  4. preview it strictly and record its run time:
       python -m tools.build.pages {entry}.ipynb --out /tmp/p
       python -m tools.measure.time_notebooks --cache /tmp/p/.jupyter_cache \\
           {entry}.ipynb
  5. python -m tools.build.generated, then commit every file it lists as written."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("entry", help="book/<part folder>/<name>, e.g. book/part3/x")
    parser.add_argument("title", nargs="?", help="the chapter's title")
    parser.add_argument(
        "--shows", help="its row in book/intro.md's table: what it shows"
    )
    parser.add_argument(
        "--after", help="the chapter it follows (default: its part's last)"
    )
    parser.add_argument("--remove", action="store_true", help="remove the chapter")
    args = parser.parse_args(argv)
    from tools.build import generated

    if args.remove:
        touched, left = remove(args.entry)
        print("removed the chapter from:\n  " + "\n  ".join(touched))
    else:
        if args.title is None or args.shows is None:
            parser.error("a new chapter needs its title and --shows")
        touched = create(args.entry, args.title, args.shows, args.after)
        left = []
        print("wrote:\n  " + "\n  ".join(touched))
    print("running the generators (tools/build/generated.py):", flush=True)
    failed = generated.run()
    for line in left:
        print("left to you:", line)
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    if not args.remove:
        entry = normalise(args.entry)
        module = checks_module(entry).relative_to(ROOT).as_posix()
        print(NEXT.format(entry=entry, module=module))
    return 0


if __name__ == "__main__":
    sys.exit(main())

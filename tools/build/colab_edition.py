"""The Colab edition: every notebook of ``_toc.yml`` with its Markdown cells rewritten
as plain CommonMark and ``$…$`` maths, which Colab (and plain Jupyter) render, where
the MyST of the site shows as source (issue 24). Generated from the one source at build
time, never edited by hand.

    python -m tools.build.colab_edition                 # values: _build/jupyter_execute
    python -m tools.build.colab_edition --executed DIR  # another build's executed
                                                        # notebooks, e.g. those of
                                                        # tools.build.pages --out P:
                                                        # P/_build/jupyter_execute
    python -m tools.build.colab_edition --allow-missing # no executed copy needed
    python -m tools.build.colab_edition --out DIR       # default _build/colab

writes ``OUT/book/<part>/<chapter>.ipynb`` (the repository's own paths, so ``OUT`` can
be published as the root of the ``colab`` branch that the Colab launch buttons open;
see tools/README.md). ``tools/build/site.py`` runs it after the site build.

What changes, in Markdown cells only (code cells are copied unchanged, the Colab
install cell stays first):

* ``{exercise}`` → a bold "Exercise 14.2" heading (numbered as the site and the
  teaching guide number them: the chapter's number in _toc.yml's numbered parts, the
  exercise's rank in the chapter); a solution (gated: ``{solution-start}`` …
  ``{solution-end}`` in cells of their own) → its prose in a ``<details><summary>``
  block (collapsed, as on the site) and its code in a Colab form cell titled "Solution
  to Exercise 14.2" (``cellView: form``: Colab shows the title and hides the code
  until the reader opens it; ``jupyter.source_hidden`` folds it in Jupyter too); the
  ``{solution-end}`` cell is dropped;
* ``{admonition}`` (learning objectives, errata, ...) and the other directives
  (``{prf:theorem}``, ``{note}``, ...) → a block quote with a bold title;
* ``{glue:text}`name``` / ``{glue:text}`name:.1f``` / ``{glue}`` → the value glued by
  the executed notebook, formatted as myst-nb formats it. Without an executed copy the
  tool stops with the missing names, or, with ``--allow-missing``, writes
  "(run the notebook to see this number)";
* ``{footcite:p}`` / ``{cite:p}`` → "(Press et al., 2022)", ``{footcite:t}`` /
  ``{cite:t}`` → "Press et al. (2022)", from book/references.bib, and
  ``{footbibliography}`` → the list of the works the chapter cites;
* ``{doc}``, ``{ref}``, ``{numref}`` → links to the website; ``{math}`` → ``$…$``;
  links to another chapter (``../part0/x.ipynb``) → that chapter's Colab edition;
* directive options (``:label:``, ``:class:``, ...) and ``(label)=`` targets are
  dropped;
* a figure's caption (myst-nb's cell metadata ``mystnb.figure.caption``, numbered
  "Fig. 14.1" on the site) → a Markdown cell after the figure's cell, "**Figure
  14.1.** …", numbered the same way.

tests/test_colab_edition.py renders every generated notebook as Colab does
(CommonMark, no MyST) and fails on any MyST markup left.

``OUT/README.md`` says what the edition is and under which licenses (published with
the notebooks on branch ``colab``).

The site serves this edition as each chapter page's download (the button "Download →
.ipynb"): ``serve_downloads`` puts it in place of the authoring source that Sphinx
copies into ``_build/html/_sources/`` (tools/build/site.py runs it after this edition),
so a reader who downloads a page gets the page as it reads, as the Colab button opens
it.

The **instructor edition** is the same notebooks, solutions included, zipped with a
README (``OUT/posenc-instructor-notebooks.zip``): the teacher's answer key, which the
site does not serve (the student edition is the one it serves, without solutions).
"""

from __future__ import annotations

import argparse
import codecs
import copy
import json
import pathlib
import re
import sys
from collections.abc import Callable

from tools import toc
from tools.authoring.colab_cell import _config_value
from tools.build import repo_links
from tools.build.course_index import chapter_info

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIB = ROOT / "book" / "references.bib"
OUT = ROOT / "_build" / "colab"
EXECUTED = ROOT / "_build" / "jupyter_execute"
CACHE = ROOT / "_build" / ".jupyter_cache"
COLAB = "https://colab.research.google.com/github"
BRANCH = "colab"  # the published branch that holds OUT (tools/README.md)
MISSING = "(run the notebook to see this number)"
# A MyST directive: the same shape as course_index.EXERCISE and
# student_edition.SOLUTION, for any directive name.
DIRECTIVE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>[^\n]*)\n"
    r"(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
# A code block that is not a directive (kept as it is).
CODE_FENCE = re.compile(
    r"^(?P<fence>`{3,}|~{3,})(?![`~{])[^\n]*\n.*?^(?P=fence)[ \t]*$", re.M | re.S
)
ROLE = re.compile(r"(?<!`)\{(?P<name>[\w:-]+)\}`(?P<text>[^`]*)`")
OPTION = re.compile(r"^:[\w-]+:.*$")
TARGET = re.compile(r"^\([\w.:-]+\)=[ \t]*\n?", re.M)
CHAPTER_LINK = re.compile(
    r"\]\((?P<path>(?!https?:)[^)#\s]+\.ipynb)(?P<anchor>#[^)]*)?\)"
)
# a link to a page of the book that is not a chapter (an appendix: ``datasets.md``)
PAGE_LINK = re.compile(r"\]\((?P<path>(?!https?:)[^)#\s]+\.md)(?P<anchor>#[^)]*)?\)")
TITLES = {
    "note": "Note", "tip": "Tip", "warning": "Warning", "important": "Important",
    "hint": "Hint", "caution": "Caution", "attention": "Attention", "danger": "Danger",
    "error": "Error", "seealso": "See also", "prf:proof": "Proof",
}  # fmt: skip
NUMBERED = {"exercise": "Exercise", "prf:theorem": "Theorem", "prf:lemma": "Lemma",
            "prf:definition": "Definition", "prf:example": "Example",
            "figure": "Figure"}  # fmt: skip


class MissingValue(LookupError):
    pass


# ---- the executed notebooks: glued values -------------------------------------------


def glued_outputs(
    entry: str, executed: pathlib.Path | None, use_cache: bool = True
) -> dict[str, dict] | None:
    """name -> the glued output's data (mime prefix removed) of ``entry``
    (``book/part3/alibi``), from the site build's executed copy: myst-nb moves the glued
    outputs of ``executed/<entry>.ipynb`` into ``executed/<entry>.glue.json``; a
    notebook that still holds them (``scrapbook`` metadata, as
    tools/measure/seed_sweep.py's ``glued_values`` reads them) is read too. Without
    an executed copy, the execution cache (if ``use_cache``), matched on the
    notebook's code. None when there is no executed copy at all."""
    import nbformat

    nb, values = None, {}
    if executed is not None:
        glue = executed / f"{entry}.glue.json"
        if glue.exists():
            for name, out in json.loads(glue.read_text()).items():
                values[name] = dict(out.get("data", {}))
        path = executed / f"{entry}.ipynb"
        if path.exists():
            nb = nbformat.read(path, as_version=4)
    if nb is None and not values and use_cache and CACHE.exists():
        nb = _from_cache(ROOT / f"{entry}.ipynb")
    if nb is None and not values:
        return None
    for cell in nb.cells if nb is not None else []:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            prefix = meta.get("mime_prefix", "")
            values[meta["name"]] = {
                k.removeprefix(prefix): v for k, v in out.get("data", {}).items()
            }
    return values


def _from_cache(path: pathlib.Path):
    """The executed notebook that jupyter-cache holds for ``path`` (matched on its code
    cells, as myst-nb matches it), or None."""
    import nbformat
    from jupyter_cache import get_cache

    try:
        _, merged = get_cache(CACHE).merge_match_into_notebook(
            nbformat.read(path, as_version=4)
        )
    except KeyError:  # no cached execution of this code
        return None
    return merged


def format_glue(data: dict, spec: str) -> str:
    """A glued value as ``{glue:text}`` shows it (myst-nb's format_plain_text)."""
    from myst_nb.core.variables import format_plain_text

    if "text/plain" not in data:
        raise MissingValue("no text/plain")
    return format_plain_text(str(data["text/plain"]), spec or "s")


# ---- the bibliography ---------------------------------------------------------------


def _plain(text: str) -> str:
    """LaTeX of a BibTeX field → plain text: accents decoded, braces dropped."""
    import latexcodec  # noqa: F401  (registers the "ulatex" codec; pybtex needs it)

    text = text.replace("``", "“").replace("''", "”").replace("--", "–")
    try:
        text = codecs.decode(text, "ulatex")
    except ValueError:
        pass
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def load_bib(path: pathlib.Path = BIB):
    import pybtex.database

    return pybtex.database.parse_file(str(path)).entries


def _surnames(entry) -> list[str]:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    return [_plain(" ".join(p.prelast_names + p.last_names)) for p in people]


def cite_label(entry) -> tuple[str, str]:
    """(authors, year) as the site's author_year style writes them."""
    names = _surnames(entry) or [_plain(entry.fields.get("title", "?"))]
    if len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return who, _plain(entry.fields.get("year", "n.d."))


def reference(entry) -> str:
    """One line of the reference list: authors (year). Title. Venue."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = []
    for p in people:
        first = " ".join(
            n[0] + "." for n in p.first_names + p.middle_names if _plain(n)[:1]
        )
        last = _plain(" ".join(p.prelast_names + p.last_names))
        names.append(f"{last}, {_plain(first)}" if first else last)
    who = ", ".join(names[:-1]) + ", and " + names[-1] if len(names) > 2 else (
        " and ".join(names)
    )  # fmt: skip
    f = {k.lower(): _plain(v) for k, v in entry.fields.items()}
    venue = f.get("journal") or f.get("booktitle") or f.get("publisher") or ""
    if not venue and f.get("eprint"):
        venue = f"arXiv:{f['eprint']}"
    title = f.get("title", "")
    parts = [
        f"{who} ({f.get('year', 'n.d.')}).",
        title + ("" if title[-1:] in ".?!" else "."),
    ]
    if venue:
        parts.append(f"*{venue}*.")
    link = f.get("url") or (f"https://doi.org/{f['doi']}" if f.get("doi") else "")
    if link:
        parts.append(f"<{link}>")
    return " ".join(parts)


# ---- links --------------------------------------------------------------------------


def site_url() -> str:
    """The website's address: ``html.baseurl`` in _config.yml, else the GitHub Pages
    address of the repository."""
    text = (ROOT / "_config.yml").read_text()
    if m := re.search(r"^\s+baseurl:\s*(\S+)", text, re.M):
        return m.group(1).strip("\"'").rstrip("/")
    owner, repo = _config_value("url").rstrip("/").split("/")[-2:]
    return f"https://{owner}.github.io/{repo}"


def colab_url(entry: str, branch: str = BRANCH) -> str:
    """The Colab address of ``entry``'s Colab edition on the published branch."""
    owner, repo = _config_value("url").rstrip("/").split("/")[-2:]
    return f"{COLAB}/{owner}/{repo}/blob/{branch}/{entry}.ipynb"


# ---- one chapter --------------------------------------------------------------------


class Converter:
    """Rewrites the Markdown cells of one chapter (``entry``: ``book/part3/alibi``)."""

    link_repository = True  # inline-code paths of the repository link to GitHub

    def __init__(
        self,
        entry: str,
        chapter: int | None,
        glued: dict[str, dict] | None,
        bib,
        allow_missing: bool,
    ):
        self.entry, self.chapter, self.glued, self.bib = entry, chapter, glued, bib
        self.allow_missing = allow_missing
        self.counts: dict[str, int] = {}
        self.labels: dict[str, str] = {}  # exercise label -> "Exercise 14.2"
        self.cited: list[str] = []
        self.missing: list[str] = []
        self.substituted = 0
        self.solution = ""  # the exercise whose gated solution is open

    # -- directives

    def number(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        prefix = f"{self.chapter}." if self.chapter else ""
        return f"{NUMBERED[kind]} {prefix}{self.counts[kind]}"

    def directive(self, m: re.Match) -> str:
        name, arg = m.group("name"), m.group("arg").strip()
        lines = m.group("body").splitlines()
        options = {}
        while lines and OPTION.match(lines[0]):
            key, _, value = lines.pop(0)[1:].partition(":")
            options[key] = value.strip()
        body = self.markdown("\n".join(lines).strip("\n"))
        if name == "footbibliography":
            return self.bibliography()
        if name in NUMBERED:
            title = self.number(name)
            if options.get("label"):
                self.labels[options["label"]] = title
            if arg:
                title += f" ({self.inline(arg)})"
            return f"**{title}.** " + body if body else f"**{title}.**"
        if name == "solution":
            target = self.labels.get(arg, "the exercise above")
            return (
                f"<details>\n<summary>Solution to {target}</summary>\n\n{body}\n\n"
                "</details>"
            )
        if name == "solution-start":  # the prose follows; convert() closes <details>
            self.solution = self.labels.get(arg, "the exercise above")
            return f"<details>\n<summary>Solution to {self.solution}</summary>\n"
        if name == "solution-end":
            return ""
        if name in ("code-block", "code", "sourcecode"):
            return f"```{arg}\n{m.group('body').rstrip()}\n```"
        if name in ("math",):
            return f"$$\n{m.group('body').strip()}\n$$"
        if name.startswith("glue"):
            return self.glue_block(arg or m.group("body").strip())
        title = self.inline(arg) if name == "admonition" else TITLES.get(name, "")
        if not title:
            title = name.split(":")[-1].replace("-", " ").capitalize()
        elif name.startswith("prf:") and arg:
            title += f" ({self.inline(arg)})"
        quoted = "\n".join("> " + line if line else ">" for line in body.splitlines())
        return f"> **{title}**\n>\n{quoted}" if body else f"> **{title}**"

    # -- roles

    def role(self, m: re.Match) -> str:
        name, text = m.group("name"), m.group("text")
        if name in ("glue", "glue:", "glue:text", "glue:any", "glue:md"):
            key, _, spec = (
                text.partition(":") if name == "glue:text" else (text, "", "")
            )
            return self.glue_value(key.split("::")[-1], spec)
        if name == "glue:math":
            return "$" + self.glue_value(text.split(":")[0], "") + "$"
        if name in ("footcite", "footcite:p", "cite", "cite:p", "footcite:t", "cite:t"):
            return self.citation(text, textual=name.endswith(":t"))
        if name == "math":
            return f"${text}$"
        if name in ("doc", "ref", "numref", "eq"):
            return self.site_link(name, text)
        if name in ("abbr",):
            return re.sub(r"\s*\(.*\)$", "", text)
        return text  # any other role: its text

    def glue_value(self, key: str, spec: str) -> str:
        try:
            if self.glued is None or key not in self.glued:
                raise MissingValue(key)
            value = format_glue(self.glued[key], spec)
        except MissingValue:
            self.missing.append(key)
            return MISSING
        self.substituted += 1
        return value

    def glue_block(self, key: str) -> str:
        data = (self.glued or {}).get(key)
        if data and "image/png" in data:
            self.substituted += 1
            return f"![{key}](data:image/png;base64,{data['image/png'].strip()})"
        if data and "text/plain" in data:
            return self.glue_value(key, "")
        self.missing.append(key)
        return "*(run the notebook to see this figure)*"

    def citation(self, keys: str, textual: bool) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",") if k.strip()):
            if key not in self.bib:
                raise SystemExit(f"{self.entry}: {key!r} is not in {BIB.name}")
            if key not in self.cited:
                self.cited.append(key)
            who, year = cite_label(self.bib[key])
            parts.append(f"{who} ({year})" if textual else f"{who}, {year}")
        return "; ".join(parts) if textual else "(" + "; ".join(parts) + ")"

    def bibliography(self) -> str:
        if not self.cited:
            return ""
        return "\n".join(f"- {reference(self.bib[k])}" for k in self.cited)

    def site_link(self, role: str, text: str) -> str:
        m = re.match(r"(?P<title>.*?)\s*<(?P<target>[^>]+)>$", text, re.S)
        title, target = (m.group("title"), m.group("target")) if m else ("", text)
        base = site_url()
        if role == "doc":
            page = (pathlib.PurePosixPath(self.entry).parent / target).as_posix()
            page = re.sub(r"[^/]+/\.\./", "", page.removeprefix("/"))
            url = f"{base}/{pathlib.PurePosixPath(page).with_suffix('')}.html"
        else:
            url = f"{base}/{self.entry}.html#{target}"
        return f"[{title or target}]({url})"

    def chapter_link(self, m: re.Match) -> str:
        path = (pathlib.PurePosixPath(self.entry).parent / m.group("path")).as_posix()
        while re.search(r"[^/.]+/\.\./", path):
            path = re.sub(r"[^/.]+/\.\./", "", path, count=1)
        if not (ROOT / path).exists():
            return m.group(0)
        return f"]({colab_url(path.removesuffix('.ipynb'))}{m.group('anchor') or ''})"

    def page_link(self, m: re.Match) -> str:
        """A link to a page of the book that is not a chapter: to that page on the
        site (the edition has no copy of it)."""
        path = (pathlib.PurePosixPath(self.entry).parent / m.group("path")).as_posix()
        while re.search(r"[^/.]+/\.\./", path):
            path = re.sub(r"[^/.]+/\.\./", "", path, count=1)
        if not (ROOT / path).exists():
            return m.group(0)
        url = f"{site_url()}/{path.removesuffix('.md')}.html"
        return f"]({url}{m.group('anchor') or ''})"

    # -- text

    def inline(self, text: str) -> str:
        text = ROLE.sub(self.role, text)
        text = CHAPTER_LINK.sub(self.chapter_link, text)
        text = PAGE_LINK.sub(self.page_link, text)
        if not self.link_repository:
            return text
        # the repository's paths link to its files, as on the site (repo_links.py)
        return repo_links.link_markdown(
            text, _config_value("url"), _config_value("branch")
        )

    def markdown(self, text: str) -> str:
        """``text`` with its directives, roles and targets rewritten; code blocks that
        are not directives are kept as they are."""
        out, pos = [], 0
        spans = sorted(
            [(m.start(), m.end(), m, self.directive) for m in DIRECTIVE.finditer(text)]
            + [(m.start(), m.end(), m, None) for m in CODE_FENCE.finditer(text)],
            key=lambda s: s[0],
        )
        for start, end, m, handle in spans:
            if start < pos:  # inside a span already handled
                continue
            out.append(self.inline(TARGET.sub("", text[pos:start])))
            out.append(handle(m) if handle else m.group(0))
            pos = end
        out.append(self.inline(TARGET.sub("", text[pos:])))
        return "".join(out)


def convert(
    nb: dict,
    entry: str,
    chapter: int | None,
    glued: dict[str, dict] | None,
    bib,
    allow_missing: bool = False,
    converter: type[Converter] = Converter,
) -> tuple[dict, Converter]:
    """The Colab edition of the notebook ``nb`` (a dict, not modified); ``converter``:
    a subclass for another edition (the student edition's links, see there)."""
    out = copy.deepcopy(nb)
    conv = converter(entry, chapter, glued, bib, allow_missing)
    cells = []
    for cell in out["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "markdown":
            if "solution" in cell.get("metadata", {}).get("tags", []):
                # Colab's form cell: the title shows, the code stays folded
                title = f"Solution to {conv.solution or 'the exercise above'}"
                cell["source"] = f"# @title {title} (double-click to show the code)\n"
                cell["source"] = [cell["source"]] + source.splitlines(keepends=True)
                cell["metadata"]["cellView"] = "form"
                # and Jupyter (Lab, Notebook 7) folds its code the same way
                cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
            cells.append(cell)
            caption = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            if caption.get("caption"):
                # the site's numbered caption (myst-nb's figure metadata), as text
                title = conv.number("figure")
                cells.append(
                    {
                        "cell_type": "markdown",
                        "id": f"{cell.get('id', 'fig')}-caption",
                        "metadata": {},
                        "source": [f"**{title}.** {conv.inline(caption['caption'])}"],
                    }
                )
            continue
        opens = "{solution-start}" in source
        text = conv.markdown(source)
        if opens:
            text = text.rstrip() + "\n\n</details>"
        if not text.strip():  # the closing {solution-end} cell
            continue
        cell["source"] = re.sub(r"\n{3,}", "\n\n", text).splitlines(keepends=True)
        cells.append(cell)
    out["cells"] = cells
    out.setdefault("metadata", {})["posenc_edition"] = "colab"
    return out, conv


def build(
    out_dir: pathlib.Path = OUT,
    executed: pathlib.Path | None = None,
    allow_missing: bool = False,
    entries: list[str] | None = None,
    use_cache: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Converter]:
    """Write the Colab edition of every notebook of _toc.yml (or of ``entries``);
    return each chapter's converter (its substituted and missing values)."""
    bib = load_bib()
    numbers = toc.chapter_numbers()
    if entries is None:
        entries = toc.notebook_entries()
    done, missing = {}, {}
    for entry in entries:
        nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
        glued = glued_outputs(entry, executed, use_cache)
        colab, conv = convert(nb, entry, numbers.get(entry), glued, bib, allow_missing)
        exercises = len(chapter_info(entry)["exercises"])
        if conv.counts.get("exercise", 0) != exercises:
            raise SystemExit(
                f"{entry}: numbered {conv.counts.get('exercise', 0)} exercises, the "
                f"teaching guide (course_index) counts {exercises}"
            )
        if conv.missing:
            missing[entry] = (glued is None, sorted(set(conv.missing)))
        path = out_dir / f"{entry}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(colab, indent=1, ensure_ascii=False) + "\n")
        done[entry] = conv
        log(
            f"{path.relative_to(out_dir)}: {conv.substituted} glued values, "
            f"{len(conv.missing)} missing, {len(conv.cited)} works cited, "
            f"{conv.counts.get('exercise', 0)} exercises"
        )
    if missing and not allow_missing:
        where = executed or f"{EXECUTED.relative_to(ROOT)} or {CACHE.relative_to(ROOT)}"
        lines = [
            f"  {e}: "
            + ("no executed copy" if none else "not glued in the executed copy: ")
            + ("" if none else ", ".join(names))
            for e, (none, names) in missing.items()
        ]
        raise SystemExit(
            f"the Colab edition needs the executed notebooks (looked in {where}):\n"
            + "\n".join(lines)
            + "\nbuild the site first (make site), point --executed at a build's "
            "jupyter_execute folder, or pass --allow-missing"
        )
    return done


INSTRUCTOR_ZIP = "posenc-instructor-notebooks.zip"
INSTRUCTOR_README = """# Positional Encoding — instructor edition (answer key)

Every chapter of the course as a notebook that Colab and Jupyter render as the website
does, **with the solutions of every exercise** (under "Solution to Exercise N.k") and
the measured numbers of the build it came from. This is the answer key: give students
the student edition (linked from the teaching guide), which has none.

Run locally: `pip install "posenc_lib[course] @ git+{url}@{branch}"`, then open a
notebook with Jupyter.
"""


COLAB_README = """# Positional Encoding: Past, Present and Future — Colab edition

Every chapter of the course ({site}) as a notebook that Colab renders as the website
does: exercises numbered, solutions collapsed under each exercise, the numbers the
build measured. The Colab button of a chapter's page opens it here. This branch is
written by the site build from branch {branch} of {url} on every publication: edit
the chapters there, not here.
"""


def write_readme(out_dir: pathlib.Path) -> pathlib.Path:
    """The Colab edition's README (published with it on branch ``colab``)."""
    from tools.build.license_notice import notice

    path = out_dir / "README.md"
    path.write_text(
        COLAB_README.format(
            site=site_url(), url=_config_value("url"), branch=_config_value("branch")
        )
        + notice()
    )
    return path


def instructor_zip(out_dir: pathlib.Path, entries: list[str]) -> pathlib.Path:
    """Zip the Colab-edition notebooks of ``entries`` (solutions kept) with a README."""
    import zipfile

    from tools.build.license_notice import notice

    path = out_dir / INSTRUCTOR_ZIP
    readme = (
        INSTRUCTOR_README.format(
            url=_config_value("url"), branch=_config_value("branch")
        )
        + notice()
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.md", readme)
        for entry in entries:
            archive.write(out_dir / f"{entry}.ipynb", f"{entry}.ipynb")
    return path


def serve_downloads(html: pathlib.Path, out_dir: pathlib.Path = OUT) -> list[str]:
    """Make each chapter page's download button (sphinx-book-theme's "Download →
    .ipynb", a link to ``_sources/<entry>.ipynb``, which Sphinx copies from the
    authoring source: MyST roles, directive fences, solutions open) serve this
    edition's notebook instead: the page as it reads, numbers glued, exercises
    numbered, solutions folded, and the same notebook its Colab button opens. Run
    after the site build and this edition (tools/build/site.py); returns the
    entries replaced."""
    served = []
    for entry in toc.notebook_entries():
        source = out_dir / f"{entry}.ipynb"
        target = html / "_sources" / f"{entry}.ipynb"
        if not source.exists():
            raise SystemExit(f"{source}: no Colab edition to serve (build it first)")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        served.append(entry)
    return served


def add_value_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executed`` and ``--allow-missing``: where the glued values come from (this
    edition's and the student edition's command lines)."""
    parser.add_argument(
        "--executed",
        help="folder of executed notebooks (a build's _build/jupyter_execute); "
        "default: _build/jupyter_execute, then the execution cache",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help=f'write "{MISSING}" where no executed value exists',
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(OUT), help="output folder")
    add_value_arguments(parser)
    parser.add_argument("notebooks", nargs="*", help="only these (default: _toc.yml)")
    args = parser.parse_args()
    executed = pathlib.Path(args.executed).resolve() if args.executed else EXECUTED
    entries = [
        (ROOT / n).resolve().relative_to(ROOT).with_suffix("").as_posix()
        for n in args.notebooks
    ] or None
    done = build(
        pathlib.Path(args.out), executed, args.allow_missing, entries, not args.executed
    )
    write_readme(pathlib.Path(args.out))
    instructor_zip(pathlib.Path(args.out), list(done))
    total = sum(c.substituted for c in done.values())
    print(f"wrote {len(done)} Colab notebooks to {args.out} ({total} glued values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

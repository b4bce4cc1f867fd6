"""Slides for every session of the teaching guide, generated from the chapters so that
they cannot drift from them.

    python -m tools.build.slides                  # decks into _build/html/slides
    python -m tools.build.slides --out DIR        # elsewhere
    python -m tools.build.slides --executed DIR   # another build's executed notebooks
    python -m tools.build.slides --allow-missing  # no executed copy needed
    python -m tools.build.slides --guide          # (re)write the guide's generated
                                                  # blocks (book/teaching/guide.md)
    python -m tools.build.slides --guide --check  # exit 1 when they are out of date
    python -m tools.build.slides --measure-outputs  # after a build: the printed lines
                                                  # the reading time counts

A session is a part of ``_toc.yml``, split where the class plan,
``book/teaching/sessions.yml`` (data beside the guide; its schema at its top), starts a
session at a later chapter of the part (Part III is two sessions); a chapter added to
a part joins its session by itself. The plan also gives each session its title, the
sections to demonstrate and the exercises to set; ``load_plan`` refuses a plan that
names a chapter, a section or an exercise the book does not have. For each chapter
of a session the deck has

* a title slide: the chapter's number and title and its learning objectives;
* its key derivation, in its own words: every display formula after the sentence that
  introduces it (``lead_in``: the last sentence before it, in its cell or the Markdown
  cell before; its last clauses when it is long; displays in a row share it), one
  slide per section (a chapter's formulas are each checked by the code cells after
  them; the notes name those cells);
* its figures: the matplotlib figures of the executed notebook (the experiments'
  first, at most ``FIGURES`` per chapter), with their numbered captions and alt text
  (myst-nb's figure metadata);
* its measured numbers: the sentences that quote glued values, with the values of the
  build substituted;
* its errata: every erratum admonition (what ``tools/build/errata_index.py`` lists);
* speaker notes on every slide naming the chapter's cells (counted from 1, as Jupyter
  and Colab list them: the Colab install cell is cell 1) and the page on the site.

A slide is read without its notebook, so where the chapter's prose places something
in it ("the check below", "as printed above"), ``_unanchor`` names the cell instead
("the check in the chapter (cell 12)") or says "in the chapter". The decks are one
sequence (reveal.js's ``navigationMode: "linear"``): the right arrow, Space or a
remote's button visits every slide in order, each chapter still a column of the
overview (Esc).

The MyST of the chapters is rewritten by ``tools/build/colab_edition.py``'s
``Converter`` (glued values substituted, citations as text, directives as block
quotes); links point to the site's pages instead of Colab. The slide notebook
(markdown cells with ``slideshow.slide_type`` metadata) is turned into a reveal.js deck
by nbconvert's ``SlidesExporter`` with a small template (``slides_template/``) that
loads reveal.js and MathJax from the deck's own folder, never from a CDN: reveal.js
5 is the copy bundled in the ``sphinx-revealjs`` wheel (MIT), MathJax 3 the copy of
``sphinx-mathjax-offline`` (Apache-2.0) that the site already serves. The folder
(decks, reveal.js, MathJax), with the slide notebooks, is also zipped
(``posenc-slides.zip``): it works opened from disk, with no network.

``tools/build/site.py`` runs this after the site build, writing straight into
``_build/html/slides``: the decks need the executed notebooks, which exist only once
Sphinx has run, and Sphinx copies ``html_extra_path`` before that is over (a deck
made there would reach the site one build late). What goes on a slide is chosen here,
by hand-written rules (no maintained tool makes slides from MyST chapters); the
rendering is nbconvert's and reveal.js's.

The guide's per-session facts (reading time, estimated by ``reading_units`` and
``READING_COSTS`` from what the pages show, with the reading the plan marks optional
left out and stated beside it, at most ``MAX_READING`` minutes; run time; slides; the
session's zip of student notebooks, ``tools/build/session_bundles.py``; demo cells;
exercises; the self-checking ones) are generated into book/teaching/guide.md between
markers, with the ``generated_page`` pattern, and so is the guide's table of the
reading costs and their calibration; tests/test_slides.py checks them and the decks.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import pathlib
import re
import shutil
import sys
import zipfile

import yaml

from tools import RESULTS, toc
from tools.build import colab_edition, errata_index, generated_page
from tools.build.course_index import chapter_info, first_sentence

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "_build" / "html" / "slides"
GUIDE = ROOT / "book" / "teaching" / "guide.md"
SESSIONS = GUIDE.with_name("sessions.yml")  # the class plan, as data
TEMPLATE = pathlib.Path(__file__).with_name("slides_template")
ZIP = "posenc-slides.zip"
FIGURES = 4  # figures per chapter at most
NUMBERS = 6  # sentences of measured numbers per chapter at most
FORMULAS = 3  # display formulas per slide at most
LEAD = 300  # characters of a formula's lead-in, at most (its last clauses)
WORDS_PER_MINUTE = 150  # technical prose (its formulas and code priced apart)
MAX_READING = 60  # minutes of required reading per session, at most
# The reading time: what a page shows a student, each unit at a stated cost in
# minutes (``reading_units`` counts them; the guide prints this table). Prose alone
# at 150 words a minute (the guide's estimate until November 2026) gave 34 minutes
# for session 4 and 59 for session 6 where a student who read them start to finish
# estimated about 1 h 45 min and 2 h 20 min (plus the exercises, which are class
# time). Prose keeps its 150 words a minute; the split among the other units is a
# judgement (a formula or a line of code reads more slowly than a word: an inline
# symbol a few seconds, a display half a minute, a code line as long as a short
# sentence, a figure a minute), and their common scale is the least-squares fit to
# the two estimates, rounded: these chapters, read in full, cost what the student
# estimated within 5 % (``CALIBRATION``; tests/test_slides.py keeps it within 15 %
# as the chapters change). One student's estimate, not a measurement: calibrate
# again when better data come.
READING_COSTS: dict[str, tuple[float, str]] = {
    "words": (1 / WORDS_PER_MINUTE, "a word of prose (150 words a minute)"),
    "display": (30 / 60, "a displayed formula (30 s)"),
    "inline": (3.5 / 60, "an inline formula or symbol (3.5 s)"),
    "code": (2.2 / 60, "a line of code the page shows (2.2 s)"),
    "output": (1 / 60, "a line of printed output (1 s)"),
    "figures": (1.0, "a figure with its caption (1 min)"),
    "exercises": (0.5, "an exercise's statement (30 s; solving it is class time)"),
}
# the chapters a student read in full, and the minutes they estimated (issue 49)
CALIBRATION: dict[tuple[str, ...], int] = {
    ("book/part3/context_length", "book/part3/rope", "book/part3/extending_rope"): 105,
    (
        "book/part4/cope",
        "book/part4/forgetting_transformer",
        "book/part4/path_attention",
    ): 140,
}
# the printed lines of each code cell of each chapter (by cell id), measured from a
# build's executed notebooks: python -m tools.build.slides --measure-outputs
OUTPUT_LINES = RESULTS / "reading" / "output_lines.json"
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)[^$\n]+?\$(?!\$)|\{math\}`[^`]*`")
DISPLAY = re.compile(
    r"^\$\$(?P<tex>.+?)\$\$[ \t]*(?:\([\w:.-]+\))?[ \t]*$", re.M | re.S
)
MATH_DIRECTIVE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{math\}[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*$", re.M)
SOLUTION = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*$", re.M | re.S
)
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`")


@dataclasses.dataclass
class Plan:
    """What the guide says about a session: its title, the sections to demonstrate
    live (chapter, the start of a section heading), and the exercises to set
    (chapter, the exercise's rank in the chapter)."""

    title: str
    demos: list[tuple[str, str]]
    exercises: list[tuple[str, int]]
    # reading left to the students who want more: (chapter, "") for a whole
    # chapter, (chapter, the start of a section heading) for a section
    optional: list[tuple[str, str]] = dataclasses.field(default_factory=list)


class PlanError(SystemExit):
    """``book/teaching/sessions.yml`` names something the book does not have (the
    message says which session and what)."""


def _count(n: int, noun: str) -> str:
    """'the 3 notebooks', 'the notebook': a count the guide's lines can say."""
    return f"the {noun}" if n == 1 else f"the {n} {noun}s"


def _plural(n: int, noun: str) -> str:
    """'1 figure', '3 figures'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def load_plan(path: pathlib.Path | None = None) -> dict[str, Plan]:
    """The sessions' plan (``book/teaching/sessions.yml``, its schema at its top),
    keyed by the session's first chapter, after checking that every chapter,
    section and exercise it names exists in the book."""
    path = SESSIONS if path is None else path
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or set(data) != {"sessions"}:
        raise PlanError(f"{where}: expected one key, sessions: (a list)")
    numbers = toc.chapter_numbers()
    plan, last = {}, 0
    for k, item in enumerate(data["sessions"] or [], start=1):
        name = f"{where}, session {k}"
        if not isinstance(item, dict):
            raise PlanError(f"{name}: expected a mapping (first:, title:, ...)")
        if unknown := set(item) - {"first", "title", "demos", "exercises", "optional"}:
            raise PlanError(f"{name}: unknown keys {sorted(unknown)}")
        first, title = item.get("first"), item.get("title")
        if not isinstance(title, str) or not title.strip():
            raise PlanError(f"{name}: title: is missing")
        name = f"{where}, session {title!r}"
        if first not in numbers:
            raise PlanError(
                f"{name}: first: {first} is not a numbered chapter of _toc.yml"
            )
        if numbers[first] <= last:
            raise PlanError(f"{name}: sessions must be listed in course order")
        if first in plan:
            raise PlanError(f"{name}: a second session starts at {first}")
        last = numbers[first]
        demos, exercises = [], []
        for demo in item.get("demos") or []:
            entry, start = _named(demo, ("chapter", "section"), str, numbers, name)
            try:
                find_section(entry, start)
            except LookupError as error:
                heads = [s["heading"] for s in sections(entry) if s["heading"]]
                raise PlanError(
                    f"{name}: demo: {error}; its sections: " + "; ".join(heads)
                ) from None
            demos.append((entry, start))
        for exercise in item.get("exercises") or []:
            entry, rank = _named(exercise, ("chapter", "exercise"), int, numbers, name)
            count = len(chapter_info(entry)["exercises"])
            if not 1 <= rank <= count:
                raise PlanError(
                    f"{name}: exercise: {entry} has no exercise {rank} (it has {count})"
                )
            exercises.append((entry, rank))
        optional = []
        for extra in item.get("optional") or []:
            if isinstance(extra, dict) and set(extra) == {"chapter"}:
                extra = dict(extra, section="")
            entry, start = _named(extra, ("chapter", "section"), str, numbers, name)
            if start:
                try:
                    find_section(entry, start)
                except LookupError as error:
                    raise PlanError(f"{name}: optional: {error}") from None
            optional.append((entry, start))
        plan[first] = Plan(title.strip(), demos, exercises, optional)
    for first, session in _members(plan).items():
        named = plan[first].demos + plan[first].exercises + plan[first].optional
        for entry in {e for e, _ in named}:
            if entry not in session:
                raise PlanError(
                    f"{where}, session {plan[first].title!r}: {entry} is not one of "
                    f"its chapters ({', '.join(session)})"
                )
    return plan


def _members(plan: dict[str, Plan]) -> dict[str, list[str]]:
    """The chapters of each planned session (keyed by its first chapter): from it
    to the next session's start or the end of its part."""
    out, current, part = {}, None, None
    for caption, entry in toc.numbered_chapters():
        if caption != part or entry in plan:
            current, part = entry, caption
        out.setdefault(current, []).append(entry)
    return {first: out[first] for first in plan}


def _named(item, keys: tuple[str, str], kind: type, numbers: dict, name: str):
    """``item[keys[0]]``, a numbered chapter, and ``item[keys[1]]``, of ``kind``."""
    if not isinstance(item, dict) or set(item) != set(keys):
        raise PlanError(
            f"{name}: expected {{{keys[0]}: ..., {keys[1]}: ...}}, got {item}"
        )
    entry, value = item[keys[0]], item[keys[1]]
    if entry not in numbers:
        raise PlanError(f"{name}: {entry} is not a numbered chapter of _toc.yml")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PlanError(f"{name}: {keys[1]}: {value!r} is not a {kind.__name__}")
    return entry, value


def __getattr__(name: str):
    if name == "PLAN":  # the plan as it is now (read on each use, as _toc.yml is)
        return load_plan()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass
class Session:
    number: int
    title: str
    part: str
    chapters: list[str]  # entries, book/part3/alibi
    plan: Plan | None

    @property
    def slug(self) -> str:
        return f"session-{self.number}"


def sessions() -> list[Session]:
    """The course's sessions: the numbered parts of _toc.yml, split where the plan
    (``book/teaching/sessions.yml``) starts a session."""
    out: list[Session] = []
    part = None
    plans = load_plan()
    for caption, entry in toc.numbered_chapters():
        if caption != part or entry in plans:
            plan = plans.get(entry)
            title = plan.title if plan else caption.split("—", 1)[-1].strip()
            out.append(Session(len(out) + 1, title, caption, [], plan))
            part = caption
        out[-1].chapters.append(entry)
    return out


def chapter_numbers() -> dict[str, int]:
    return toc.chapter_numbers()


# ---- reading a chapter --------------------------------------------------------------


def _cells(entry: str) -> list[dict]:
    return json.loads((ROOT / f"{entry}.ipynb").read_text())["cells"]


def word_count(entry: str, skip: set[int] | frozenset = frozenset()) -> int:
    """Words of the chapter's prose (markdown cells), formulas, code blocks,
    directive options and the exercises' solutions (cells tagged ``solution``,
    ``{solution}`` blocks) left out; and the cells of ``skip`` (0-based)."""
    words = 0
    for index, cell in enumerate(_cells(entry)):
        if cell["cell_type"] != "markdown" or index in skip:
            continue
        if "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        text = "".join(cell["source"])
        text = SOLUTION.sub(" ", text)
        text = DISPLAY.sub(" ", colab_edition.CODE_FENCE.sub(" ", text))
        text = re.sub(r"^:[\w-]+:.*$|^(`{3,}|:{3,}).*$", " ", text, flags=re.M)
        words += len(re.findall(r"[A-Za-z0-9][\w'’.-]*", text))
    return words


def _output_lines() -> dict[str, dict[str, int]]:
    if "data" not in _OUTPUTS:
        path = OUTPUT_LINES
        _OUTPUTS["data"] = json.loads(path.read_text()) if path.exists() else {}
    return _OUTPUTS["data"]


_OUTPUTS: dict = {}


def printed_lines(outputs: list) -> int:
    """The lines a code cell's outputs print as text (streams, plain results, error
    messages); an image or an interactive figure is a figure, not lines."""

    def count(text) -> int:
        return len(("".join(text) if isinstance(text, list) else text).splitlines())

    lines = 0
    for out in outputs:
        data = out.get("data", {})
        if out.get("output_type") == "stream":
            lines += count(out.get("text", ""))
        elif out.get("output_type") == "error":
            lines += 1 + count(out.get("evalue", ""))
        elif data and not any(k.startswith("image/") or k == "text/html" for k in data):
            lines += count(data.get("text/plain", ""))
    return lines


def measure_output_lines(executed) -> dict[str, dict[str, int]]:
    """Each chapter's printed lines per code cell (by cell id), from a build's
    executed notebooks (or the execution cache): what ``OUTPUT_LINES`` holds."""
    out = {}
    for entry in toc.notebook_entries():
        cells = cells_executed(entry, executed)
        if not cells:
            raise SystemExit(f"{entry}: no executed notebook (build the site first)")
        out[entry] = {
            c["id"]: n
            for c in cells
            if c["cell_type"] == "code" and (n := printed_lines(c.get("outputs", [])))
        }
    return out


def reading_units(
    entry: str, skip: set[int] | frozenset = frozenset()
) -> collections.Counter:
    """What the chapter's page shows a reader, counted in the units of
    ``READING_COSTS``: its prose words (``word_count``), display and inline formulas
    and exercises (Markdown, solutions left out), the lines of code it shows (cells
    removed from the page and solutions left out), their printed lines
    (``OUTPUT_LINES``) and its captioned figures; the cells of ``skip`` left out."""
    units: collections.Counter = collections.Counter()
    printed = _output_lines().get(entry, {})
    for index, cell in enumerate(_cells(entry)):
        tags = cell.get("metadata", {}).get("tags", [])
        if index in skip or "solution" in tags:
            continue
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            text = colab_edition.CODE_FENCE.sub(" ", SOLUTION.sub(" ", text))
            units["display"] += len(DISPLAY.findall(text))
            units["display"] += len(MATH_DIRECTIVE.findall(text))
            text = MATH_DIRECTIVE.sub(" ", DISPLAY.sub(" ", text))
            units["inline"] += len(INLINE_MATH.findall(text))
            units["exercises"] += len(re.findall(r"^`{3,}\{exercise\}", text, re.M))
        elif "remove-cell" not in tags:
            units["code"] += sum(1 for line in text.splitlines() if line.strip())
            units["output"] += printed.get(cell.get("id", ""), 0)
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            units["figures"] += bool(figure.get("caption"))
    units["words"] = word_count(entry, skip)
    return units


def reading_cost(units: collections.Counter) -> float:
    """Minutes to read what ``units`` counts, at the costs of ``READING_COSTS``."""
    return sum(READING_COSTS[unit][0] * n for unit, n in units.items())


def sections(entry: str) -> list[dict]:
    """The chapter's sections in order: heading, its cells (0-based indices)."""
    out = [dict(heading="", level=1, cells=[])]
    for index, cell in enumerate(_cells(entry)):
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        heads = [m for m in HEADING.finditer(text) if len(m.group(1)) > 1]
        for m in heads:  # a cell that opens two sections belongs to both
            out.append(dict(heading=m.group(2), level=len(m.group(1)), cells=[index]))
        if not heads:
            out[-1]["cells"].append(index)
    return out


def section_of(entry: str, index: int) -> str:
    heading = ""
    for s in sections(entry):
        if index in s["cells"]:
            heading = s["heading"]
    return heading


def find_section(entry: str, start: str) -> dict:
    """The section of ``entry`` whose heading starts with ``start``."""
    for s in sections(entry):
        if s["heading"].startswith(start):
            return s
    raise LookupError(f"{entry} has no section whose heading starts with {start!r}")


def cell_range(indices: list[int]) -> str:
    first, last = indices[0] + 1, indices[-1] + 1
    return f"cell {first}" if first == last else f"cells {first}–{last}"


def page_url(entry: str, depth: int = 1) -> str:
    """The chapter's page on the site, relative to a deck (``slides/x.html``)."""
    return "../" * depth + f"{entry}.html"


class SlideConverter(colab_edition.Converter):
    """The Colab edition's rewriting of MyST, with links to the site's pages (the
    decks are served from the site) instead of Colab and absolute addresses."""

    link_repository = False  # a deck links nothing outside the site

    def site_link(self, role: str, text: str) -> str:
        m = re.match(r"(?P<title>.*?)\s*<(?P<target>[^>]+)>$", text, re.S)
        title, target = (m.group("title"), m.group("target")) if m else ("", text)
        if role == "doc":
            page = (pathlib.PurePosixPath(self.entry).parent / target).as_posix()
            while re.search(r"[^/.]+/\.\./", page):
                page = re.sub(r"[^/.]+/\.\./", "", page, count=1)
            return f"[{title or target}](../{page.removesuffix('.md')}.html)"
        return f"[{title or target}](../{self.entry}.html#{target})"

    def chapter_link(self, m: re.Match) -> str:
        path = (pathlib.PurePosixPath(self.entry).parent / m.group("path")).as_posix()
        while re.search(r"[^/.]+/\.\./", path):
            path = re.sub(r"[^/.]+/\.\./", "", path, count=1)
        suffix = pathlib.PurePosixPath(path).suffix  # .ipynb, or .md (an appendix)
        return f"](../{path.removesuffix(suffix)}.html{m.group('anchor') or ''})"

    page_link = chapter_link  # the decks sit beside the site: a page is a page


ABBREVIATION = re.compile(r"\b(?:Eqs?|Figs?|Secs?|Refs?|al|e\.g|i\.e|cf|vs|resp)\.$")


def sentences(paragraph: str) -> list[str]:
    """The sentences of a markdown paragraph, never cut inside a formula or a role,
    nor after an abbreviation (Eqs. (16)–(18), Vaswani et al. (2017))."""
    text = " ".join(line.strip() for line in paragraph.splitlines()).strip()
    text = re.sub(r"^[-*] |^\d+\. ", "", text)
    out, start = [], 0
    for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z(*])", text):
        head = text[start : m.start()]
        if ABBREVIATION.search(head):
            continue
        if head.count("$") % 2 == 0 and head.count("`") % 2 == 0:
            out.append(head)
            start = m.end()
    out.append(text[start:])
    return [s for s in out if s]


def lead_in(text: str, limit: int = LEAD) -> str:
    """The sentence that introduces a display formula: the last sentence of the prose
    before it (a short list whole, a long one's last item; not a heading, a table or
    a directive's fence), or
    "" when there is none. A sentence longer than ``limit`` characters keeps its last
    clauses, after an ellipsis, so that the slide shows what leads into the formula."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not paragraphs or re.match(r"[#|>$]|`{3}|:{3}|:[\w-]+:", paragraphs[-1]):
        return ""
    items = re.split(r"\n(?=[ \t]*(?:[-*]|\d+\.) )", paragraphs[-1])
    if len(items) > 1 and len(paragraphs[-1]) <= 2 * limit:
        # a short list leads in as a whole, after the sentence that opens it
        opening = paragraphs[-2] if len(paragraphs) > 1 else ""
        if opening.endswith(":") and not re.match(r"[#|>$]|`{3}|:{3}", opening):
            return sentences(opening)[-1] + "\n\n" + paragraphs[-1]
        return paragraphs[-1]
    last = sentences(items[-1])[-1]
    if len(last) > limit:
        for m in re.finditer(r"[;,:] ", last):
            head, rest = last[: m.start()], last[m.end() :]
            if len(rest) <= limit and head.count("$") % 2 == head.count("`") % 2 == 0:
                return "… " + rest
    return last


def _prose_before(cells: list[dict], index: int) -> str:
    """The Markdown cell just before cell ``index`` (a formula that opens a cell is
    introduced there), or "" when a code cell comes between."""
    if index and cells[index - 1]["cell_type"] == "markdown":
        return "".join(cells[index - 1]["source"])
    return ""


# "above" and "below" as adverbs: where something is in the notebook (the check
# below, as printed above), not a comparison (above 0.9, below the diagonal)
WHERE = re.compile(
    r"\b(?P<word>above|below)\b(?!\s*(?:[$0-9`+\\−~≈-]|(?:the|a|an|one|all|its"
    r"|their|it|them|chance|zero|half|that|those|this|any|every|each|[A-Z][\w-]*)"
    r"\b))"
)
# the notebook's cells named with a direction: "the cell above", "the check below"
CELL_REF = re.compile(
    r"\b(?P<the>[Tt]he|[Tt]his|[Tt]hat) (?P<what>(?:code )?cell|check|code|printout"
    r"|output|count|computation)(?P<gap> (?:\w+ ){0,1}?)(?P<word>above|below)\b"
)
# a cell named without a direction ("The cell transcribes ..."): the one after it
NEXT_CELL = re.compile(
    r"\b(?P<the>[Tt]he|[Tt]his) (?P<what>(?:code )?cell)\b"
    r"(?!-| (?:\w+ )?(?:above|below)\b| of\b| by\b)(?P<gap>)(?P<word>)"
)
PROTECTED = re.compile(
    r"^(`{3,}|~{3,}).*?^\1|`[^`\n]*`|\$\$.*?\$\$|\$[^$]*\$", re.S | re.M
)


def _code_cell(cells: list[dict], index: int, word: str) -> int | None:
    """The nearest code cell before (``above``) or after (``below``) cell ``index``,
    visible on the site (not tagged ``remove-cell``)."""
    step = -1 if word == "above" else 1
    k = index + step
    while 0 <= k < len(cells):
        cell = cells[k]
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code" and "remove-cell" not in tags:
            return k
        k += step
    return None


def _unanchor(text: str, cells: list[dict], index: int) -> str:
    """Chapter prose (of cell ``index``) as a slide shows it, away from the notebook:
    "the check below" becomes "the check in the chapter (cell 12)", "the cell above"
    "cell 11 of the chapter", any other "above"/"below" that places something in the
    notebook "in the chapter". Code and maths are left alone."""

    def cell_ref(m: re.Match) -> str:
        k = _code_cell(cells, index, m.group("word") or "below")
        if k is None:
            if not m.group("word"):
                return m.group(0)
            return m.group(0).removesuffix(m.group("word")) + "in the chapter"
        if "cell" in m.group("what"):
            first = "C" if m.group("the")[0].isupper() else "c"
            return f"{first}ell {k + 1} of the chapter"
        where = f"in the chapter (cell {k + 1})"
        return f"{m.group('the')} {m.group('what')}{m.group('gap')}{where}"

    spans = [m.span() for m in PROTECTED.finditer(text)]

    def outside(rewrite):
        def sub(m: re.Match) -> str:
            inside = any(a <= m.start() < b for a, b in spans)
            return m.group(0) if inside else rewrite(m)

        return sub

    # one pass each over the whole text (what follows a word decides its sense),
    # matches inside code or maths left alone; the second pass sees the first's
    # output, whose spans moved, so it re-finds them
    text = CELL_REF.sub(outside(cell_ref), text)
    spans = [m.span() for m in PROTECTED.finditer(text)]
    text = NEXT_CELL.sub(outside(cell_ref), text)
    spans = [m.span() for m in PROTECTED.finditer(text)]
    return WHERE.sub(outside(lambda m: "in the chapter"), text)


def figure_captions(cells: list[dict]) -> dict[int, tuple[int, str, str]]:
    """cell index -> (the figure's number in the chapter, caption, alt text), from
    myst-nb's cell metadata (``mystnb.figure.caption``, ``mystnb.image.alt``),
    numbered in order as the site numbers them (Fig. 14.2)."""
    out, number = {}, 0
    for index, cell in enumerate(cells):
        meta = cell.get("metadata", {}).get("mystnb", {})
        caption = meta.get("figure", {}).get("caption")
        if caption:
            number += 1
            out[index] = (number, caption, meta.get("image", {}).get("alt", ""))
    return out


def _checks(cells: list[dict], index: int) -> list[int]:
    """The code cells after markdown cell ``index``, up to the next heading, that
    assert something (they check the formula)."""
    out = []
    for k in range(index + 1, len(cells)):
        cell = cells[k]
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            if HEADING.search(text):
                break
            continue
        if re.search(r"assert|sympy|sp\.|\.check", text):
            out.append(k)
    return out


def chapter_slides(entry: str, number: int, executed, bib, allow_missing) -> dict:
    """The slides of one chapter: a list of (kind, markdown, notes) and counts."""
    cells = _cells(entry)
    info = chapter_info(entry)
    conv = SlideConverter(entry, number, colab_edition.glued_outputs(
        entry, executed, use_cache=executed is None), bib, allow_missing)  # fmt: skip
    url = page_url(entry)
    where = f"[Chapter {number}, {info['title']}]({url})"
    slides = []
    objectives = "\n".join(f"1. {conv.inline(o)}" for o in info["objectives"])
    slides.append(
        (
            "slide",
            f"## {number}. {conv.inline(info['title'])}\n\n"
            + (f"**Learning objectives**\n\n{objectives}\n" if objectives else ""),
            f"{where}: {len(cells)} cells, about {word_count(entry)} words. "
            f"Exercises: {len(info['exercises'])} (Exercise {number}.1 to "
            f"{number}.{len(info['exercises'])}).",
        )
    )
    # formulas, one slide per section
    by_section: dict[str, list[tuple[int, list[str], str]]] = {}
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        found = [(m, m.group("tex")) for m in DISPLAY.finditer(text)]
        found += [(m, m.group("body")) for m in MATH_DIRECTIVE.finditer(text)]
        previous = 0
        for m, tex in sorted(found, key=lambda f: f[0].start()):
            before = text[previous : m.start()]
            items = by_section.setdefault(section_of(entry, index), [])
            if previous and not before.strip():  # a display right after another
                items[-1][1].append(tex.strip())  # shares its lead-in
            else:
                lead = lead_in(before) or (
                    "" if previous else lead_in(_prose_before(cells, index))
                )
                items.append((index, [tex.strip()], _unanchor(lead, cells, index)))
            previous = m.end()
    for heading, items in by_section.items():
        for start in range(0, len(items), FORMULAS):
            chunk = items[start : start + FORMULAS]
            body = "\n\n".join(
                (f"{conv.markdown(lead)}\n\n" if lead else "")
                + "\n\n".join(f"$$\n{conv.inline(tex)}\n$$" for tex in texs)
                for _, texs, lead in chunk
            )
            notes = []
            for index in dict.fromkeys(i for i, _, _ in chunk):
                checks = _checks(cells, index)
                notes.append(
                    f"cell {index + 1}"
                    + (
                        ", checked by " + ", ".join(f"cell {k + 1}" for k in checks)
                        if checks
                        else ""
                    )
                )
            slides.append(
                (
                    "subslide",
                    f"### {conv.inline(heading or info['title'])}\n\n{body}\n",
                    f"{where}, section «{heading}»: the formulas of "
                    + "; ".join(notes)
                    + ". The chapter derives each; the cells named check it in code.",
                )
            )
    # figures: the experiments' first
    figures = []
    for index, cell in enumerate(cells_executed(entry, executed)):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                figures.append((index, png.strip() if isinstance(png, str) else png))
    experiments = [f for f in figures if section_of(entry, f[0]).startswith("Exper")]
    chosen = (experiments + [f for f in figures if f not in experiments])[:FIGURES]
    captions = figure_captions(cells)
    for index, png in sorted(chosen, key=lambda f: f[0]):
        heading = section_of(entry, index)
        png = "".join(png) if isinstance(png, list) else png
        figure, caption, alt = captions.get(index, (None, "", ""))
        alt = re.sub(r"[\[\]\n]", " ", alt or f"figure of {entry}, cell {index + 1}")
        below = (
            f"\n**Figure {number}.{figure}.** {conv.inline(caption)}\n"
            if figure
            else ""
        )
        slides.append(
            (
                "subslide",
                f"### {conv.inline(heading or info['title'])}\n\n"
                f"![{alt}](data:image/png;base64,{png})\n" + below,
                f"{where}, section «{heading}»: the figure of cell {index + 1}, as "
                "this build ran it. Demo: run that cell live and change its "
                "parameters.",
            )
        )
    # measured numbers: the sentences that quote glued values
    quoted = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = colab_edition.DIRECTIVE.sub("", "".join(cell["source"]))
        for para in re.split(r"\n\s*\n", text):
            if para.lstrip().startswith(("|", "#")):
                continue  # a table or a heading
            quoted += [(index, s) for s in sentences(para) if GLUE_ROLE.search(s)]
    for start in range(0, min(len(quoted), NUMBERS), NUMBERS // 2):
        chunk = quoted[start : min(start + NUMBERS // 2, NUMBERS)]
        body = "\n".join(f"- {_unanchor(conv.markdown(s), cells, i)}" for i, s in chunk)
        slides.append(
            (
                "subslide",
                f"### Measured: {conv.inline(info['title'])}\n\n{body}\n",
                f"{where}: the numbers of "
                + ", ".join(f"cell {i + 1}" for i, _ in chunk)
                + ", glued from this build's run of the notebook (the seed sweeps "
                "in tools/results/sweeps say how often each claim holds).",
            )
        )
    # errata
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for m in errata_index.ADMONITION.finditer(text):
            slides.append(
                (
                    "subslide",
                    _unanchor(conv.markdown(m.group(0)), cells, index) + "\n",
                    f"{where}, cell {index + 1} (section «{section_of(entry, index)}»):"
                    " the erratum and its check, listed in the errata index.",
                )
            )
    return dict(
        slides=slides,
        figures=len(chosen),
        substituted=conv.substituted,
        missing=sorted(set(conv.missing)),
        title=info["title"],
    )


_EXECUTED: dict = {}


def cells_executed(entry: str, executed) -> list[dict]:
    """The executed notebook's cells (outputs), from the build or the cache."""
    key = (entry, str(executed))
    if key not in _EXECUTED:
        import nbformat

        nb = None
        if executed is not None and (executed / f"{entry}.ipynb").exists():
            nb = nbformat.read(executed / f"{entry}.ipynb", as_version=4)
            if not any(c.get("outputs") for c in nb.cells):
                # myst-nb writes a page it took from its execution cache without
                # outputs (it saves the notebook it read, not the cached one)
                nb = None
        if nb is None and colab_edition.CACHE.exists():
            nb = colab_edition._from_cache(ROOT / f"{entry}.ipynb")
        _EXECUTED[key] = nb.cells if nb is not None else []
    return _EXECUTED[key]


# ---- the deck -----------------------------------------------------------------------


def _cell(source: str, slide_type: str) -> dict:
    return {
        "cell_type": "markdown",
        "metadata": {"slideshow": {"slide_type": slide_type}},
        "source": source,
    }


def optional_cells(session: Session) -> dict[str, set[int]]:
    """The cells (0-based) of each chapter of the session that the plan marks as
    optional reading: a whole chapter, or the cells of a section (a cell that also
    opens a section not marked optional stays required)."""
    out: dict[str, set[int]] = {}
    for entry, start in session.plan.optional if session.plan else []:
        if not start:
            out[entry] = set(range(len(_cells(entry))))
            continue
        cells = set(find_section(entry, start)["cells"])
        kept = {
            i
            for s in sections(entry)
            if not any(
                s["heading"].startswith(o)
                for e, o in session.plan.optional
                if e == entry
            )
            for i in s["cells"]
        }
        out.setdefault(entry, set()).update(cells - kept)
    return out


def reading(session: Session) -> tuple[collections.Counter, collections.Counter]:
    """What the session's reading shows (``reading_units``): required, and
    optional."""
    optional = optional_cells(session)
    total: collections.Counter = collections.Counter()
    required: collections.Counter = collections.Counter()
    for entry in session.chapters:
        total.update(reading_units(entry))
        required.update(reading_units(entry, optional.get(entry, set())))
    return required, total - required


def reading_words(session: Session) -> tuple[int, int]:
    """The words of the session's prose: required, and optional."""
    required, optional = reading(session)
    return required["words"], optional["words"]


def reading_minutes(session: Session) -> int:
    """Minutes of required reading (optional sections and chapters left out), at the
    costs of ``READING_COSTS``."""
    return round(reading_cost(reading(session)[0]))


def run_seconds(session: Session) -> tuple[float, list[str]]:
    cpu = json.loads((RESULTS / "timings" / "cpu.json").read_text())["seconds"]
    return (
        sum(cpu.get(e, 0.0) for e in session.chapters),
        [e for e in session.chapters if e not in cpu],
    )


def deck_notebook(session: Session, executed, bib, allow_missing) -> tuple[dict, dict]:
    numbers = chapter_numbers()
    cells = []
    stats = dict(chapters={}, figures=0, substituted=0, missing={})
    titles = []
    for entry in session.chapters:
        ch = chapter_slides(entry, numbers[entry], executed, bib, allow_missing)
        optional = session.plan and (entry, "") in session.plan.optional
        titles.append(
            f"Chapter {numbers[entry]}: [{ch['title']}]({page_url(entry)})"
            + (" (optional reading)" if optional else "")
        )
        stats["chapters"][entry] = ch["title"]
        stats["figures"] += ch["figures"]
        stats["substituted"] += ch["substituted"]
        if ch["missing"]:
            stats["missing"][entry] = ch["missing"]
        for kind, source, notes in ch["slides"]:
            cells.append(_cell(source, kind))
            cells.append(_cell(notes, "notes"))
    seconds, _ = run_seconds(session)
    intro = (
        f"# Session {session.number}: {session.title}\n\n"
        f"*{session.part}*\n\n"
        + "\n".join(f"- {t}" for t in titles)
        + f"\n\nReading: about {reading_minutes(session)} minutes"
        + (" (and some optional)" if reading_words(session)[1] else "")
        + ". "
        f"The notebooks run in {seconds:.0f} s on a laptop CPU.\n"
    )
    head = [
        _cell(intro, "slide"),
        _cell(
            "Generated by tools/build/slides.py from the chapters and this build's "
            "executed notebooks: every number is the one the site shows. Press S for "
            "this speaker view. Right arrow (or Space, or a click on the remote) "
            "goes to the next slide, through every chapter in order; left goes "
            "back; Esc shows all slides, one column per chapter. The teaching guide "
            "has the class plan.",
            "notes",
        ),
    ]
    nb = {
        "cells": head + cells,
        "metadata": {
            "title": f"Session {session.number}: {session.title}",
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return nb, stats


# A figure of a slide notebook: a Markdown image whose link is the PNG itself
FIGURE_LINK = re.compile(r"\]\((data:image/png;base64,[A-Za-z0-9+/=]*)\)")
HELD = "posenc-figure-{}"  # what the exporter's Markdown parser reads in its place


@functools.cache
def _exporter():
    """nbconvert's SlidesExporter with the deck's template: made once (it compiles
    its templates on first use), shared by every deck."""
    from nbconvert import SlidesExporter

    return SlidesExporter(
        template_file="posenc_deck.html.j2",
        extra_template_basedirs=[str(TEMPLATE.parent)],
        extra_template_paths=[str(TEMPLATE)],
        reveal_url_prefix="reveal.js",
        reveal_theme="white",
        reveal_transition="none",
        reveal_number="c/t",
        reveal_width="1280",
        reveal_height="800",
        exclude_input_prompt=True,
    )


def export(nb: dict) -> str:
    """The reveal.js deck of a slide notebook (nbconvert's SlidesExporter).

    Each figure's PNG reaches the page as the data its Markdown image links to; the
    Markdown parser (mistune) reads a link character by character, 16 ms for one of
    these, so it reads a short name in its place (``HELD``) and the data is put back
    in the ``src`` it wrote: the same page (tests/test_slides.py)."""
    import nbformat

    figures: list[str] = []

    def hold(match: re.Match) -> str:
        figures.append(match.group(1))
        return "](" + HELD.format(len(figures) - 1) + ")"

    node = nbformat.from_dict(nb)
    for k, cell in enumerate(node.cells):
        cell.setdefault("id", f"c{k}")
        if cell.cell_type == "markdown":
            cell.source = FIGURE_LINK.sub(hold, cell.source)
    body, _ = _exporter().from_notebook_node(node, resources={"metadata": {"name": ""}})
    for k, data in enumerate(figures):
        held = f'src="{HELD.format(k)}"'
        if body.count(held) != 1:
            raise RuntimeError(f"slides: figure {k} of the deck was not drawn once")
        body = body.replace(held, f'src="{data}"')
    return body


def copy_assets(out: pathlib.Path) -> None:
    """reveal.js (from the sphinx-revealjs wheel) and MathJax (from
    sphinx-mathjax-offline) into ``out``: the decks load nothing from the network."""
    import importlib.util

    reveal = pathlib.Path(importlib.util.find_spec("sphinx_revealjs").origin).parent
    reveal = reveal / "_static" / "revealjs"
    mathjax = pathlib.Path(
        importlib.util.find_spec("sphinx-mathjax-offline").origin
    ).parent
    mathjax = mathjax / "static" / "mathjax"
    wanted = {
        reveal / "LICENSE": "reveal.js/LICENSE",
        reveal / "dist" / "reveal.js": "reveal.js/dist/reveal.js",
        reveal / "dist" / "reveal.css": "reveal.js/dist/reveal.css",
        reveal / "dist" / "reset.css": "reveal.js/dist/reset.css",
        reveal / "dist" / "theme" / "white.css": "reveal.js/dist/theme/white.css",
        reveal / "plugin" / "notes" / "notes.js": "reveal.js/plugin/notes/notes.js",
        mathjax / "tex-chtml-full.js": "mathjax/tex-chtml-full.js",
    }
    for src, dst in wanted.items():
        (out / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / dst)
    for tree, dst in [
        (reveal / "dist" / "theme" / "fonts" / "source-sans-pro", "reveal.js/dist/"
         "theme/fonts/source-sans-pro"),
        (mathjax / "output" / "chtml" / "fonts" / "woff-v2", "mathjax/output/chtml/"
         "fonts/woff-v2"),
    ]:  # fmt: skip
        shutil.copytree(tree, out / dst, dirs_exist_ok=True)


README = """# Positional Encoding — slides for the sessions of the teaching guide

One reveal.js deck per session of the teaching guide, generated from the chapters and
the executed notebooks of the build the site was made from. Open session-N.html in a
browser (no network needed: reveal.js and MathJax are in this folder). Keys: right
arrow, Space or Page Down for the next slide (every slide of every chapter, in order),
left arrow or Page Up for the previous one, Home and End for the first and last, S for
the speaker view (the current slide, the next one, a timer and the notes, which name
the chapter's cells), F for full screen, Esc or O for an overview (one column per
chapter; click a slide to go there), B to black out the screen.

session-N.ipynb is the slide notebook the deck was made from (markdown cells with
slide_type metadata): edit it and run
`jupyter nbconvert --to slides session-N.ipynb` to make your own deck (nbconvert's
own template loads reveal.js and MathJax from the network).

reveal.js {reveal} (MIT license, reveal.js/LICENSE) comes from the sphinx-revealjs
wheel; MathJax (Apache-2.0) from the sphinx-mathjax-offline wheel.
"""


def readme() -> str:
    """The decks' README, ending with the course's licenses."""
    from tools.build.license_notice import notice

    return README.format(reveal=reveal_version()) + notice()


def reveal_version() -> str:
    import importlib.util

    path = pathlib.Path(importlib.util.find_spec("sphinx_revealjs").origin).parent
    head = (path / "_static" / "revealjs" / "dist" / "reveal.js").read_text()[:200]
    m = re.search(r"reveal\.js (\d+\.\d+\.\d+)", head)
    return m.group(1) if m else "?"


def build(
    out: pathlib.Path = OUT,
    executed: pathlib.Path | None = colab_edition.EXECUTED,
    allow_missing: bool = False,
    log=print,
) -> dict[str, dict]:
    """Write every session's deck to ``out`` with the assets, and the zip (decks,
    assets and the slide notebooks); return each deck's stats."""
    bib = colab_edition.load_bib()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    copy_assets(out)
    done, missing, notebooks = {}, {}, {}
    for session in sessions():
        nb, stats = deck_notebook(session, executed, bib, allow_missing)
        html = export(nb)
        (out / f"{session.slug}.html").write_text(html)
        notebooks[f"{session.slug}.ipynb"] = (
            json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        )
        stats["slides"] = sum(
            c["metadata"]["slideshow"]["slide_type"] in ("slide", "subslide")
            for c in nb["cells"]
        )
        stats["bytes"] = len(html.encode())
        missing.update(stats["missing"])
        done[session.slug] = stats
        log(
            f"slides/{session.slug}.html: {len(session.chapters)} chapters, "
            f"{stats['slides']} slides, {stats['figures']} figures, "
            f"{stats['substituted']} glued values, {stats['bytes'] / 1e6:.1f} MB"
        )
    if missing and not allow_missing:
        raise SystemExit(
            "the decks need the executed notebooks (build the site first, or "
            "--executed DIR, or --allow-missing); missing glued values:\n"
            + "\n".join(f"  {e}: {', '.join(v)}" for e, v in missing.items())
        )
    (out / "README.md").write_text(readme())
    with zipfile.ZipFile(out / ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.name != ZIP:
                archive.write(path, f"posenc-slides/{path.relative_to(out)}")
        for name, text in notebooks.items():  # in the zip only: the site has the decks
            archive.writestr(f"posenc-slides/{name}", text)
    log(f"slides/{ZIP}: {(out / ZIP).stat().st_size / 1e6:.1f} MB")
    return done


# ---- the guide's generated blocks ---------------------------------------------------

BLOCK = re.compile(
    r"(?P<open><!-- session (?P<n>\d+): generated by tools/build/slides.py[^\n]*-->\n)"
    r".*?(?P<close><!-- end of session (?P=n) -->)",
    re.S,
)


CHECK_CALL = re.compile(r"exercises\.check\(\s*[\"'](ex-[\w-]+)[\"']")


def self_checking(entry: str) -> list[int]:
    """The ranks of the chapter's exercises whose answer cell is followed by a
    ``pl.exercises.check("ex-label", answer)`` cell (the student edition keeps it)."""
    from tools.build.course_index import EXERCISE

    labels, checked = [], set()
    for cell in _cells(entry):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for m in EXERCISE.finditer(text):
                label = re.search(r"^:label:\s*(\S+)", m.group("body"), re.M)
                labels.append(label.group(1) if label else None)
        else:
            checked.update(CHECK_CALL.findall(text))
    return [k for k, label in enumerate(labels, start=1) if label in checked]


def reading_line(session: Session) -> str:
    """The guide's reading line: the required minutes, the words they are counted
    from, and the optional reading with its minutes."""
    required, extra = reading(session)
    minutes = reading_minutes(session)
    if minutes > MAX_READING:
        raise SystemExit(
            f"session {session.number} asks {minutes} minutes of reading, more than "
            f"{MAX_READING}: mark chapters or sections optional in {SESSIONS.name}"
        )
    plan = session.plan
    whole = [e for e, start in plan.optional if not start] if plan else []
    chapters = [e for e in session.chapters if e not in whole]
    formulas = required["display"] + required["inline"]
    line = (
        f"- **Reading**: about {minutes} minutes ({required['words']} words of prose, "
        f"{_plural(formulas, 'formula')} ({required['display']} displayed), "
        f"{_plural(required['code'], 'line')} of code and {required['output']} of "
        f"printed output, {_plural(required['figures'], 'figure')} and "
        f"{_plural(required['exercises'], 'exercise')} in "
        f"{_count(len(chapters), 'chapter')}, at the costs above)"
    )
    if not +extra:
        return line + "."
    parts = [_guide_link(e) for e in whole]
    for entry in dict.fromkeys(e for e, start in plan.optional if start):
        heads = [
            f"*{find_section(entry, start)['heading']}*"
            for e, start in plan.optional
            if e == entry and start
        ]
        parts.append(f"in {_guide_link(entry)}: " + ", ".join(heads))
    return (
        line + f"; **optional**, about {round(reading_cost(extra))} minutes "
        "more: " + "; ".join(parts) + "."
    )


def _guide_link(entry: str) -> str:
    title = chapter_info(entry)["title"]
    return f"[{title}](../{entry.removeprefix('book/')}.ipynb)"


def session_facts(session: Session) -> str:
    """The generated part of a session in the guide."""
    numbers = chapter_numbers()
    seconds, unmeasured = run_seconds(session)
    lines = [
        reading_line(session),
        f"- **Run time**: the notebooks take {seconds:.0f} s together on a laptop CPU"
        + (f" ({', '.join(unmeasured)} not measured)" if unmeasured else "")
        + " (tools/results/timings/cpu.json).",
        f'- **Lecture**: <a href="../../slides/{session.slug}.html">the slides of '
        f"session {session.number}</a> (press S for the speaker notes, which name "
        "the chapters' cells).",
    ]
    from tools.build.session_bundles import zip_name

    lines.append(
        f'- **Student notebooks**: <a href="../../student/{zip_name(session.number)}"'
        f" download>{_count(len(session.chapters), 'notebook')} of session "
        f"{session.number} (zip)</a>, without solutions, with a README."
    )
    plan = session.plan
    if plan and plan.demos:
        demos = []
        for entry, start in plan.demos:
            s = find_section(entry, start)
            title = chapter_info(entry)["title"]
            demos.append(
                f"[{title}](../{entry.removeprefix('book/')}.ipynb), section "
                f"*{s['heading']}* ({cell_range(s['cells'])})"
            )
        lines.append("- **Demo**: " + "; then ".join(demos) + ".")
    if plan and plan.exercises:
        items = []
        for entry, k in plan.exercises:
            exercises = chapter_info(entry)["exercises"]
            if not 1 <= k <= len(exercises):
                raise LookupError(f"{entry} has no exercise {k}")
            items.append(f"*Exercise {numbers[entry]}.{k}* ({exercises[k - 1]})")
        lines.append("- **Exercises**: " + "; ".join(items))
    checking = [
        f"*Exercise {numbers[e]}.{k}*"
        for e in session.chapters
        for k in self_checking(e)
    ]
    lines.append(
        "- **Self-checking exercises**: "
        + (", ".join(checking) if checking else "none yet in these chapters")
        + "."
    )
    return "\n".join(lines) + "\n"


COSTS_BLOCK = re.compile(
    r"(?P<open><!-- reading costs: generated by tools/build/slides.py[^\n]*-->\n)"
    r".*?(?P<close><!-- end of reading costs -->)",
    re.S,
)


def calibration_lines() -> list[str]:
    """Each calibration's chapters: the student's estimate beside this estimator's."""
    numbers = chapter_numbers()
    lines = []
    for chapters, minutes in CALIBRATION.items():
        units: collections.Counter = collections.Counter()
        for entry in chapters:
            units.update(reading_units(entry))
        names = ", ".join(str(numbers[e]) for e in chapters)
        lines.append(
            f"chapters {names} in full: about {minutes // 60} h {minutes % 60:02d} "
            f"min estimated by a student who read them, {round(reading_cost(units))} "
            "minutes here"
        )
    return lines


def reading_costs() -> str:
    """The guide's table of the reading costs and their calibration."""
    rows = [
        f"| {what.split(' (')[0]} | {what.split(' (', 1)[1].rstrip(')')} |"
        for _, what in READING_COSTS.values()
    ]
    return (
        "| each | costs |\n|---|---|\n"
        + "\n".join(rows)
        + "\n\nThe printed lines are those of the last build "
        f"(`{OUTPUT_LINES.relative_to(ROOT)}`); solutions and cells hidden on the "
        "page are not counted. Calibration: "
        + "; ".join(calibration_lines())
        + ". One student's estimate, not a measurement: the costs are a judgement "
        "of how much slower a formula or a line of code reads than a word, scaled "
        "to it.\n"
    )


def render_guide() -> str:
    text = GUIDE.read_text()
    text, found = COSTS_BLOCK.subn(
        lambda m: m.group("open") + reading_costs() + m.group("close"), text
    )
    if not found:
        raise SystemExit(
            f"{GUIDE.name} has no block for the reading costs: add '<!-- reading "
            "costs: generated by tools/build/slides.py, do not edit -->' and "
            "'<!-- end of reading costs -->'"
        )
    by_number = {s.number: s for s in sessions()}
    seen = set()

    def fill(m: re.Match) -> str:
        n = int(m.group("n"))
        if n not in by_number:
            raise SystemExit(f"{GUIDE.name} has a block for session {n}, which is none")
        seen.add(n)
        return m.group("open") + session_facts(by_number[n]) + m.group("close")

    text = BLOCK.sub(fill, text)
    if lost := sorted(set(by_number) - seen):
        raise SystemExit(
            f"{GUIDE.name} has no generated block for session(s) {lost}: add "
            "'<!-- session N: generated by tools/build/slides.py, do not edit -->' "
            "and '<!-- end of session N -->'"
        )
    return text


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--executed", help="a build's jupyter_execute folder")
    parser.add_argument("--allow-missing", action="store_true")
    parser.add_argument("--guide", action="store_true", help="the guide's blocks")
    parser.add_argument("--check", action="store_true", help="with --guide")
    parser.add_argument(
        "--measure-outputs",
        action="store_true",
        help=f"write {OUTPUT_LINES.relative_to(ROOT)} from the executed notebooks",
    )
    args = parser.parse_args()
    if args.guide:
        return generated_page.main(GUIDE, render_guide, "slides --guide")
    executed = (
        pathlib.Path(args.executed).resolve()
        if args.executed
        else colab_edition.EXECUTED
    )
    if not args.executed and not executed.exists():
        executed = None  # the execution cache
    if args.measure_outputs:
        OUTPUT_LINES.parent.mkdir(parents=True, exist_ok=True)
        data = measure_output_lines(executed)
        OUTPUT_LINES.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUTPUT_LINES.relative_to(ROOT)}: {len(data)} chapters")
        return 0
    build(pathlib.Path(args.out), executed, args.allow_missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())

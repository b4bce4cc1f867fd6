"""The book's API reference (book/appendix/api.md and the pages it leads to),
generated from ``posenc_lib`` itself, and the Sphinx extension that renders it and
links the chapters to it.

    python -m tools.build.api_reference           # (re)write the reference's pages
    python -m tools.build.api_reference --check   # exit 1 when a page is out of date

**The pages** list, in autodoc directives, every name of ``posenc_lib.__all__``
(grouped by the module that defines it: the library's modules on
``api_library.md``, the encodings in course order on ``api_encodings.md``) and every
public submodule (see :func:`namespaces`; on ``api_course.md``); Sphinx's autodoc
fills in each signature and docstring at build time, so the text can only be as stale
as the docstrings. The start page, ``api.md``, links every module's section and holds
a table with one row per ``posenc_lib.REGISTRY`` entry: its name and class, the hooks
it overrides (``posenc_lib.base.overrides``), the chapter that teaches it (see
:func:`teaching_chapter`, read from the notebooks) and its paper (see :func:`paper`),
four columns that fit the page at desktop width. Each module's section starts with its
docstring's first paragraph and the papers its docstrings cite; each page after the
start page opens with a list of its modules. ``tools/build/site.py`` regenerates the
pages before every build and a test checks that the committed ones are current.

**The extension** (``setup``; ``local_extensions`` in ``_config.yml``, which imports
this file as ``api_reference``, so the Sphinx side imports nothing from ``tools``)
loads autodoc,
makes references outside ``posenc_lib`` (``torch.Tensor`` in a signature) plain text
instead of nitpicky warnings (the build is offline: no intersphinx), and links the
first inline-code mention of a documented name on every page (``pl.apply_rope``,
``make_encoding("rope", 64, 4)``, ``pl.lab.run_lab``) to its entry. Sphinx has
no setting for that last part, hence the hand-written transform; it changes the HTML
only: the notebooks (and so Colab) keep their plain Markdown.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import pkgutil
import re
import sys
import types
from collections import Counter
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]
APPENDIX = ROOT / "book" / "appendix"
# the pages after the start page (api.md): {file name: (title, what it documents)}
PAGES = {
    "api_library": (
        "The library",
        "the modules of `posenc_lib` itself (the attention, the interface every "
        "encoding implements, positions, the model and its training)",
    ),
    "api_encodings": (
        "The encodings",
        "every encoding class of `posenc_lib.encodings` and its functions, in the "
        "order the course teaches them",
    ),
    "api_course": (
        "The course namespaces",
        "what the chapters use beside the library (`pl.book`, `pl.exercises`, "
        "`pl.lab`, ...)",
    ),
}
DOCNAMES = {f"book/appendix/{key}" for key in ("api", *PAGES)}
# "Press et al., 2022", "Huang et al. (2020)", "Shaw, Uszkoreit and Vaswani (2018)"
CITATION = re.compile(
    r"(?P<who>[A-Z][\w'-]+(?: et al\.|(?:, [A-Z][\w'-]+)*(?: and [A-Z][\w'-]+)?))"
    r",? \(?(?P<year>(?:19|20)\d\d)\b"
)


# --------------------------------------------------------------------------- names


def _lib():
    import posenc_lib

    return posenc_lib


def _chapter_code() -> dict[str, str]:
    """``{toc entry: the code of its cells}`` for every notebook of ``_toc.yml``, in
    order (``book/part3/rope``)."""
    from tools import toc

    out = {}
    for entry in toc.notebook_entries():
        cells = json.loads((ROOT / f"{entry}.ipynb").read_text())["cells"]
        out[entry] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "code"
        )
    return out


def namespaces() -> list[str]:
    """The public submodules: those a reader reaches as ``pl.<module>.<name>``.

    A submodule of ``posenc_lib`` is public when ``posenc_lib.__all__`` exports it
    (``book``, ``exercises``); when it exports functions or classes and the top
    level re-exports none of its ``__all__`` (``lab``, ``interactive``, but not
    ``backends``, two modules and a dict); or when a chapter's code reaches it as
    ``pl.<module>.`` and it exports names the top level does not (``models_data``;
    ``encodings`` re-exports everything at the top level). A module added later is
    picked up by the same rules.
    """
    pl = _lib()
    top = {id(getattr(pl, name)) for name in pl.__all__}
    exported = {
        name for name in pl.__all__ if inspect.ismodule(getattr(pl, name, None))
    }
    code = "\n".join(_chapter_code().values())
    used = set(re.findall(r"\bpl\.([a-z_]\w*)\.", code))
    out = []
    # the library's modules and the course's (posenc_lib.course, which a reader
    # reaches as pl.book, pl.exercises, ...: the names the reference uses)
    names = [info.name for info in pkgutil.iter_modules(pl.__path__)]
    names = sorted({*names, *pl.course.COURSE_MODULES} - {"course"})
    for name in names:
        info = types.SimpleNamespace(name=name)
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"posenc_lib.{info.name}")
        names = list(getattr(module, "__all__", ()))
        objects = [getattr(module, n) for n in names]
        own = [obj for obj in objects if id(obj) not in top]
        code_like = [o for o in own if inspect.isfunction(o) or inspect.isclass(o)]
        if (
            info.name in exported
            or (code_like and len(own) == len(objects))
            or (info.name in used and own)
        ):
            out.append(info.name)
    return out


def defining_module(name: str, obj) -> str:
    """The module a top-level name comes from (data has no ``__module__``: the
    module whose ``__all__`` exports the very object)."""
    module = getattr(obj, "__module__", None)
    if (
        module
        and module.startswith("posenc_lib")
        and not inspect.ismodule(obj)
        and getattr(sys.modules.get(module), name, None) is obj
    ):
        return module
    for key, mod in sorted(sys.modules.items()):
        if key.startswith("posenc_lib.") and key != "posenc_lib.encodings":
            if name in getattr(mod, "__all__", ()) and getattr(mod, name) is obj:
                return key
    return "posenc_lib"


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    paragraph = inspect.cleandoc(doc or "").split("\n\n")[0]
    return " ".join(paragraph.split())


def paper(cls: type, module: ModuleType, alone: bool) -> str:
    """The paper of an encoding class: the first citation ("Press et al., 2022") of
    its docstring; else its module's, when the module's first paragraph cites one
    paper only or the module holds this encoding only; else an empty string."""
    found = [CITATION.search(summary(cls.__doc__))]
    found.append(CITATION.search(inspect.cleandoc(cls.__doc__ or "")))
    first = {
        f"{m['who']}, {m['year']}" for m in CITATION.finditer(summary(module.__doc__))
    }
    if len(first) == 1 or alone:
        found.append(CITATION.search(summary(module.__doc__)))
    if alone:
        found.append(CITATION.search(inspect.cleandoc(module.__doc__ or "")))
    for m in found:
        if m:
            return f"{m.group('who')}, {m.group('year')}"
    return ""


def papers(module: ModuleType) -> list[str]:
    """Every citation ("Press et al., 2022") in a module's docstring and its
    classes' and functions' docstrings, in order, once each."""
    docs = [module.__doc__] + [
        getattr(module, name).__doc__ for name in getattr(module, "__all__", ())
    ]
    found = [
        f"{m['who']}, {m['year']}"
        for doc in docs
        if isinstance(doc, str)
        for m in CITATION.finditer(inspect.cleandoc(doc))
    ]
    return list(dict.fromkeys(found))


# ------------------------------------------------------------------------ encodings


def hooks(cls: type) -> list[str]:
    """The hooks of ``HOOKS`` that ``cls`` overrides, in the attention's order."""
    from posenc_lib.base import HOOKS, overrides

    return [hook for hook in HOOKS if overrides(cls, hook)]


def _shown(code: str) -> set[str]:
    """Identifiers inside the ``show_source(...)`` calls of some code."""
    out: set[str] = set()
    for m in re.finditer(r"show_source\(([^)]*)\)", code):
        out |= set(re.findall(r"[A-Za-z_]\w*", m.group(1)))
    return out


def teaching_chapter(name: str, cls: type, code: dict[str, str]) -> str | None:
    """The chapter (toc entry) that teaches the encoding registered as ``name``.

    Read from the chapters' code, by these rules in order (ties: the earlier
    chapter): a chapter named after it (``part3/alibi`` for ``"alibi"``); one that
    prints the source of its class, or of a private base it shares with its family
    (``_HuangScalar``), with ``show_source``; the most mentions of its name or class
    (``make_encoding("rope_dynamic", ...)``, ``Rotary2D(``) in code and prose; one
    that prints its module's source; the most uses of its module's functions.
    ``None`` when no chapter uses it.
    """
    module = sys.modules[cls.__module__]
    own = {cls.__name__} | {
        base.__name__
        for base in cls.__mro__
        if base.__module__ == cls.__module__ and base.__name__.startswith("_")
    }
    module_names = set(getattr(module, "__all__", ())) - {cls.__name__}
    module_names.add(cls.__module__.rsplit(".", 1)[1])
    best, best_key = None, None
    for entry, src in code.items():
        words = _words(entry, src)
        key = (
            entry.rsplit("/", 1)[1] == name,
            bool(words["shown"] & own),
            words["quoted"][name]
            + words["code"][cls.__name__]
            + sum(words["prose"][w] for w in {name.lower(), cls.__name__.lower()}),
            bool(words["shown"] & module_names),
            sum(words["code"][n] for n in module_names),
        )
        if any(key) and (best_key is None or key > best_key):
            best, best_key = entry, key
    return best


_PROSE: dict[str, str] = {}
_WORDS: dict[str, dict] = {}


def _words(entry: str, src: str) -> dict:
    """A chapter's words, counted once: identifiers and quoted names in its code,
    lower-cased words of its prose, and what its ``show_source`` calls print."""
    if entry not in _WORDS:
        _WORDS[entry] = dict(
            code=Counter(re.findall(r"\w+", src)),
            quoted=Counter(re.findall(r"[\"']([\w-]+)(?=[\"'])", src)),
            prose=Counter(re.findall(r"\w+", _chapter_prose(entry).lower())),
            shown=_shown(src),
        )
    return _WORDS[entry]


def _chapter_prose(entry: str) -> str:
    if entry not in _PROSE:
        cells = json.loads((ROOT / f"{entry}.ipynb").read_text())["cells"]
        _PROSE[entry] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
        )
    return _PROSE[entry]


def chapter_title(entry: str) -> str:
    m = re.search(r"^# (.+)$", _chapter_prose(entry), re.M)
    return m.group(1).strip() if m else entry


def encodings() -> list[dict]:
    """One row per registered encoding: name, class, hooks, chapter, paper."""
    pl = _lib()
    code = _chapter_code()
    classes = {
        name: type(pl.make_encoding(name, d_model=32, n_heads=4, max_len=64))
        for name in sorted(pl.REGISTRY)
    }
    modules = [cls.__module__ for cls in set(classes.values())]
    rows = []
    for name, cls in classes.items():
        # a module with several encodings cites several papers: the class's own only
        alone = modules.count(cls.__module__) == 1
        rows.append(
            dict(
                name=name,
                cls=cls.__name__,
                public=getattr(pl, cls.__name__, None) is cls,
                module=cls.__module__,
                hooks=hooks(cls),
                chapter=teaching_chapter(name, cls, code),
                paper=paper(cls, sys.modules[cls.__module__], alone),
            )
        )
    return rows


# ----------------------------------------------------------------------------- page


def _directive(name: str, obj, prefix: str = "posenc_lib") -> list[str]:
    target = f"{prefix}.{name}"
    if inspect.isclass(obj):
        return [f".. autoclass:: {target}", "   :members:", ""]
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return [f".. autofunction:: {target}", ""]
    # a short tuple or number is its own best description (HOOKS); a table is not
    small = isinstance(obj, (tuple, str, int, float)) and len(repr(obj)) <= 120
    return [f".. autodata:: {target}", *([] if small else ["   :no-value:"]), ""]


def _rst_block(lines: list[str]) -> list[str]:
    return ["```{eval-rst}", *lines, "```", ""]


def _encodings_table(rows: list[dict]) -> list[str]:
    """The table of registered encodings, one row each; four columns, so that every
    one shows at desktop width (the name and its class share the first), in a
    container of class ``api-encodings``, whose code ``_static/api.css`` sets smaller:
    the longest class names and hooks decide the table's width."""
    from tools import toc

    number = {e: f"{k}." for e, k in toc.chapter_numbers().items()}
    lines = [
        "```{container} api-encodings",
        "",
        "| name (class) | hooks | chapter | paper |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cls = (
            f"{{py:class}}`~posenc_lib.{row['cls']}`"
            if row["public"]
            else f"`{row['cls']}`"
        )
        hook_text = ", ".join(f"`{h}`" for h in row["hooks"]) or "none"
        chapter = row["chapter"]
        chapter_text = (
            f"{number.get(chapter, '')}{' ' if chapter in number else ''}"
            f"[{chapter_title(chapter)}](../{chapter.removeprefix('book/')}.ipynb)"
            if chapter
            else "—"
        )
        lines.append(
            f"| `{row['name']}` ({cls}) | {hook_text} | {chapter_text} | "
            f"{row['paper'] or '—'} |"
        )
    return [*lines, "```"]


def _contents() -> list[str]:
    """A list of the page's sections at its top: one link per module."""
    return ["```{contents} Modules on this page", ":local:", ":depth: 1", "```", ""]


def _ref(name: str, label: str) -> str:
    """A link to a module's section, from the start page."""
    return f"{{ref}}`{name} <{label}>`"


def render() -> dict[str, str]:
    """``{docname: text}`` for every page of the reference: ``api`` (the start page:
    what is where, and the table of encodings), then one page per part of the
    library (``PAGES``)."""
    pl = _lib()
    rows = encodings()
    code = _chapter_code()
    chapters = list(code)
    # top-level names, grouped by defining module; encodings in course order
    groups: dict[str, list[str]] = {}
    for name in pl.__all__:
        obj = getattr(pl, name)
        if inspect.ismodule(obj):
            continue
        groups.setdefault(defining_module(name, obj), []).append(name)
    taught = {r["module"]: chapters.index(r["chapter"]) for r in rows if r["chapter"]}

    def order(module: str) -> tuple:
        if module.startswith("posenc_lib.encodings."):
            return (1, taught.get(module, len(chapters)), module)
        return (0, 0, "")  # core modules keep their __all__ order

    sections: dict[str, list[str]] = {key: [] for key in PAGES}
    titles: dict[str, list[str]] = {key: [] for key in PAGES}
    for module in sorted(groups, key=order):
        key = "api_encodings" if order(module)[0] else "api_library"
        label = f"api-{module.removeprefix('posenc_lib.')}"
        short = module.removeprefix("posenc_lib.").removeprefix("encodings.")
        titles[key].append(_ref(short, label))
        # the page's title names the package: short headings fit the side bar
        lines = [f"({label})=", f"## `{module.removeprefix('posenc_lib.')}`", ""]
        body = [summary(sys.modules[module].__doc__), ""]
        if cited := papers(sys.modules[module]):
            body += [f"Papers cited in this module: {'; '.join(cited)}.", ""]
        for name in groups[module]:
            body += _directive(name, getattr(pl, name))
        sections[key] += lines + _rst_block(body)
    for ns in namespaces():
        module = importlib.import_module(f"posenc_lib.{ns}")
        titles["api_course"].append(_ref(f"pl.{ns}", f"api-pl.{ns}"))
        lines = [f"(api-pl.{ns})=", f"## `pl.{ns}`", ""]
        body = [summary(module.__doc__), ""]
        # names the top level re-exports are documented once, on the library's page
        shared = [
            n for n in module.__all__ if getattr(pl, n, None) is getattr(module, n)
        ]
        if shared:
            names = ", ".join(f":py:obj:`pl.{n} <posenc_lib.{n}>`" for n in shared)
            body += [f"Also here, documented with the library: {names}.", ""]
        for name in module.__all__:
            if name not in shared:
                body += _directive(name, getattr(module, name), f"posenc_lib.{ns}")
        sections["api_course"] += lines + _rst_block(body)

    index = [
        "# API reference",
        "",
        "Every public name of `posenc_lib`, with its signature and docstring "
        "(shapes use the legend `b` batch, `h` heads, `i`/`j` query/key positions, "
        "`d` head dimension, `D` model dimension; see the "
        "[notation](notation.md)). The list is generated by "
        "`tools/build/api_reference.py` from `posenc_lib.__all__`, the public "
        "submodules and `posenc_lib.REGISTRY`; the signatures and descriptions are "
        "read from the docstrings by Sphinx when the book is built. In a notebook, "
        "`help(pl.apply_rope)` shows the same text.",
        "",
        "The reference has three pages:",
        "",
    ]
    for key, (title, what) in PAGES.items():
        index.append(
            f"- [{title}]({key}.md): {what}. Its modules: {', '.join(titles[key])}."
        )
    index += [
        "",
        "## Encodings by name",
        "",
        'Build any of them with `pl.make_encoding("name", d_model, n_heads, '
        "max_len)`. *Hooks*: the hooks of `pl.HOOKS` that its class overrides "
        "(the others keep `PositionalEncoding`'s identity defaults). *Chapter*: "
        "the chapter that teaches it, read from the chapters' code (the rules are "
        "in `teaching_chapter` of the generator). *Paper*: the citation in its "
        "docstring.",
        "",
        *_encodings_table(rows),
    ]
    pages = {"api": index}
    for key, (title, what) in PAGES.items():
        pages[key] = [
            f"# {title}",
            "",
            f"Part of the [API reference](api.md): {what}.",
            "",
            *_contents(),
            *sections[key],
        ]
    return {key: "\n".join(lines).rstrip() + "\n" for key, lines in pages.items()}


# ------------------------------------------------------------------------ extension


def source_comment(module: ModuleType, name: str) -> str:
    """The comment that documents a module-level constant: on its line (``X = 1  #
    ...``) or the ``#`` lines right above it; empty if there is none."""
    try:
        lines = inspect.getsource(module).splitlines()
    except (OSError, TypeError):
        return ""
    start = re.compile(rf"^{re.escape(name)}\b[^=\n]*=")
    for k, line in enumerate(lines):
        if start.match(line):
            if m := re.search(r"\s#\s+(?!fmt:|noqa|type:)(.+)$", line):
                return m.group(1).strip()
            above = []
            for prev in reversed(lines[:k]):
                if not prev.startswith("#"):
                    break
                above.insert(0, prev.lstrip("#").strip())
            return " ".join(above)
    return ""


def _document_constants(app, what, name, obj, options, lines):
    """A constant has no docstring of its own: autodoc would show its type's (a
    dict's); show the comment above or beside it in the source instead."""
    if what not in ("data", "attribute") or inspect.isclass(obj):
        return
    if getattr(obj, "__doc__", None) != getattr(type(obj), "__doc__", None):
        return
    module_name, _, short = name.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None:
        return
    home = sys.modules.get(defining_module(short, obj), module)
    text = source_comment(home, short)
    lines[:] = [re.sub(r"([*_`|\\])", r"\\\1", text)] if text else []


def _skip_module_plumbing(app, what, name, obj, skip, options):
    """Leave out ``torch.nn.Module`` methods an encoding overrides without a
    docstring of its own (``extra_repr``, ``forward``): autodoc would show
    PyTorch's text for them."""
    from torch import nn

    if what == "class" and hasattr(nn.Module, name):
        if inspect.getdoc(obj) == inspect.getdoc(getattr(nn.Module, name)):
            return True
    return None


def _missing_reference(app, env, node, contnode):
    """A Python reference outside ``posenc_lib`` (``torch.Tensor``, ``nn.Module``)
    resolves to plain text: the offline build has no inventory to link it to."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    head = target.split(".", 1)[0]
    if head == "posenc_lib":
        # a class in a signature that its module does not export (``_HuangTable``,
        # ``exercises.Check``) is not in the reference: plain text. An exported
        # name that is missing from the reference still warns.
        module_name, _, name = target.rpartition(".")
        module = _module(module_name)
        if module is not None and hasattr(module, name):
            if name not in getattr(module, "__all__", ()):
                return contnode
        return None
    if head == "tools" or _module(head) is None:
        return None
    return contnode


def _module(name: str) -> ModuleType | None:
    """The module ``name``, imported if autodoc has not: a build that reads no page
    (the PDF's single-page build, from the site build's environment) resolves the
    references all the same; None if there is no such module."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _link_targets(env) -> dict[str, tuple[str, str]]:
    """``{spelling: (docname, anchor)}`` for every documented ``posenc_lib`` name:
    ``pl.apply_rope``, ``posenc_lib.apply_rope``, ``apply_rope``; ``pl.lab.run_lab``
    and ``lab.run_lab``; ``Positions.reuse`` for members."""
    objects = env.get_domain("py").objects
    out: dict[str, tuple[str, str]] = {}
    for full, entry in sorted(objects.items(), key=lambda kv: kv[1].aliased):
        if not full.startswith("posenc_lib.") or entry.objtype == "module":
            continue
        short = full.removeprefix("posenc_lib.")
        where = (entry.docname, entry.node_id)
        for spelling in (full, f"pl.{short}", short):
            out.setdefault(spelling, where)
    return out


MENTION = re.compile(
    r"^(?:pl\.|posenc_lib\.)?(?P<path>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
    r"(?P<call>[(\[].*)?$",
    re.S,
)


def _target(text: str, targets: dict) -> tuple[str, str] | None:
    m = MENTION.match(text.strip())
    if not m:
        return None
    path = m.group("path")
    qualified = text.strip().startswith(("pl.", "posenc_lib."))
    # a bare lower-case word (`attention`, `train`) is prose, unless it is a call
    if not (qualified or m.group("call") or not path.islower() or "_" in path):
        return None
    return targets.get(path)


def _link_first_mentions(app, doctree, docname):
    """Turn the first inline-code mention of each documented name on a page into a
    link to its entry (never in titles, links, or the reference page itself)."""
    from docutils import nodes
    from sphinx import addnodes

    if app.builder.format != "html" or docname in DOCNAMES:
        return
    if not hasattr(app.env, "_posenc_api_targets"):
        app.env._posenc_api_targets = _link_targets(app.env)
    targets = app.env._posenc_api_targets
    if not targets:
        return
    seen: set[tuple[str, str]] = set()
    for literal in list(doctree.findall(nodes.literal)):
        parent = literal.parent
        if isinstance(parent, (nodes.reference, nodes.title, addnodes.desc_signature)):
            continue
        if isinstance(parent, (nodes.TextElement,)) and parent.tagname == "caption":
            continue
        where = _target(literal.astext(), targets)
        if where is None or where in seen:
            continue
        seen.add(where)
        target_doc, anchor = where
        if app.builder.name == "singlehtml":
            uri = f"#{anchor}"
        else:
            uri = app.builder.get_relative_uri(docname, target_doc) + f"#{anchor}"
        ref = nodes.reference("", "", internal=True, refuri=uri, reftitle=anchor)
        ref["classes"].append("api-link")
        parent.replace(literal, ref)
        ref.append(literal)


def _forget_targets(app, env):
    if hasattr(env, "_posenc_api_targets"):
        del env._posenc_api_targets


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.config.autodoc_member_order = "bysource"
    app.config.autodoc_typehints_format = "short"
    app.connect("missing-reference", _missing_reference)
    app.connect("autodoc-process-docstring", _document_constants)
    app.connect("autodoc-skip-member", _skip_module_plumbing)
    app.connect("env-updated", _forget_targets)
    app.connect("doctree-resolved", _link_first_mentions)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}


def main() -> int:
    from tools.build import generated_page

    codes = [
        generated_page.main(APPENDIX / f"{key}.md", lambda: text, "api_reference")
        for key, text in render().items()
    ]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())

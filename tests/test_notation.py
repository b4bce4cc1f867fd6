"""One notation across the chapters: the notation appendix's tables hold where a test
can see them.

``book/appendix/notation.md`` maps each symbol to its meaning (a symbol may have a
second meaning in named chapters: its row's last column links them). Over every
chapter of ``_toc.yml``, in its Markdown:

* a letter of the table's *Sizes, indices and positions* is not defined with another
  meaning: a definition ("where $d$ is the number of heads", "$n$ (the ...)", "a head
  of dimension $d$", "a key at $n$") must name one of the meanings the table gives it
  in that chapter (the table's words, or one of their few synonyms in ``ALIASES``);
* an offset is written key minus query (the table's $R_{ij} = j - i$; $n - m$ with
  RoFormer's letters, query at $m$, key at $n$), except in the chapters the table
  names for $i - j$, or where the sentence says it is the other way ("query − key");
* the imaginary unit in a complex exponential is upright, $e^{\\mathrm{i} m\\theta}$;
* every symbol of the tables is used in some chapter, and every letter that a quarter
  of the chapters use on its own is in the tables.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from tools.build import student_edition

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTATION = ROOT / "book/appendix/notation.md"
ENTRIES = student_edition.toc_notebooks()
EVERYWHERE = "every chapter"

# The letters whose definitions are checked, and the words a definition of each
# meaning may use besides the table's own (lower case; a definition matches a meaning
# when it contains the meaning's first words or one of these).
ALIASES = {
    "batch size": ["batch"],
    "a head": ["head"],
    "number of heads": ["heads"],
    "transition matrix of a token": ["householder", "reflection", "transition"],
    "head dimension": [
        "head of dimension",
        "head of width",
        "head of size",
        "dimension of a head",
        "dimension of each head",
        "head size",
        "size of a head",
        "per head",
        "query and key",
        "queries and keys",
    ],
    "model dimension": [
        "model width",
        "width of the model",
        "embedding",
        "encoding of",
    ],
    "fox's cumulative log-decay": ["decay", "logits", "bias"],
    "sequence length": ["length", "tokens", "keys", "window", "sequence"],
    "query position and key position": ["query at", "key at", "queries at", "keys at"],
    "training length": ["length", "trained", "training"],
    "the length being read": ["length"],
    "the strictly lower-triangular matrix of a chunk's compact form": ["triangular"],
    "evaluation length": ["length"],
}
CHECKED = ["b", "h", "H", "d", "D", "n", "m", "L", "N"]
ROLE = {"m": "query", "n": "key"}  # RoFormer's letters: query at m, key at n

# an offset written query minus key, as ($a - b$): (query letter, key letter)
QUERY_MINUS_KEY = [("i", "j"), ("m", "n"), ("t", "s"), ("t", "j")]
NAMED_OTHER_WAY = re.compile(r"query\s*(−|-|minus)\s*key", re.I)


def split_symbols(cell: str) -> list[str]:
    """'$x_i$, $X$ (`b n D`)' -> ['x_i', 'X']: the math of a table's first column, a
    formula reduced to its left side ('R_{ij} = j - i' -> 'R_{ij}')."""
    out = []
    for math in re.findall(r"\$([^$]+)\$", cell):
        depth, part = 0, ""
        for ch in math + ",":
            depth += (ch in "({") - (ch in ")}")
            if ch == "," and depth == 0:
                if part.split("=")[0].strip():
                    out.append(part.split("=")[0].strip())
                part = ""
            else:
                part += ch
    return out


def links(cell: str) -> set[str]:
    """The chapters a table cell links, as _toc.yml entries."""
    return {
        "book/" + m.group(1)
        for m in re.finditer(r"\]\(\.\./(part\d/[\w]+)\.ipynb\)", cell)
    }


def notation_table(text: str | None = None) -> dict[str, list[tuple[str, set | None]]]:
    """symbol -> [(meaning, the chapters it holds in, or None for every chapter)], from
    every table of the appendix, and the reused letters named after the first table
    (meaning 'reused')."""
    text = NOTATION.read_text() if text is None else text
    table: dict[str, list[tuple[str, set | None]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[0]) <= set("-"):
            continue
        if cells[0] == "symbol":
            continue
        where = None
        if len(cells) == 3 and EVERYWHERE not in cells[2]:
            where = links(cells[2])
        for symbol in split_symbols(cells[0]):
            table.setdefault(symbol, []).append((cells[1], where))
    m = re.search(r"^Other letters \(([^)]*)\)", text, re.M)
    for symbol in split_symbols(m.group(1) if m else ""):
        table.setdefault(symbol, []).append(("reused", None))
    return table


def markdown(nb: dict) -> list[tuple[int, str]]:
    """(cell index, text) of every Markdown cell, glue roles made plain and quoted
    lines (a paper's own words, in its notation) left out."""
    out = []
    for k, c in enumerate(nb["cells"]):
        if c["cell_type"] == "markdown":
            text = re.sub(r"\{glue:text\}`[^`]*`", "X", "".join(c["source"]))
            text = "\n".join(
                line for line in text.split("\n") if not line.startswith(">")
            )
            out.append((k, text))
    return out


def meanings_in(table, symbol: str, entry: str) -> list[str]:
    return [
        meaning
        for meaning, where in table.get(symbol, [])
        if where is None or entry in where
    ]


def head_words(meaning: str) -> str:
    """'head dimension, $d = D/H$' -> 'head dimension': the meaning's first words."""
    return re.split(r"[,:(;]", meaning.lower())[0].strip()


def matches(phrase: str, meaning: str) -> bool:
    head = head_words(meaning)
    words = [head] + ALIASES.get(head, [])
    return any(w in phrase for w in words)


def definitions(text: str, symbol: str):
    """(what defines it, the words around) for each definition of $symbol$ in text."""
    x = re.escape(f"${symbol}$")
    m = r"(?P<m>[^.;:\n$]{3,60})"
    patterns = [
        rf"\bwhere {x},? (?:is|denotes|counts) {m}",
        rf"{x},? (?:is|denotes) the {m}",
        rf"\bwith {x},? the {m}",
        rf"(?<!\bat )(?<!\bof )(?<!\bto )(?<!past )(?<!\bby )"
        rf"{x} \((?P<m>the [^)$]{{3,60}})\)",
        rf"(?P<m>[^.;:\n$]{{0,30}}\b(?:of|at) (?:dimension|width|size|length)) {x}",
        rf"(?P<m>\b(?:number of \w+|(?!(?:of|at|a|the|and|with)\b)[\w-]+ "
        rf"(?:dimension|length|width|size))) {x}",
        rf"(?P<m>\b(?:query|queries|key|keys) at) {x}",
    ]
    for p in patterns:
        for found in re.finditer(p, text):
            yield found.group(0), found.group("m").lower()


def redefinitions(nb: dict, entry: str, table) -> list[str]:
    out = []
    for k, text in markdown(nb):
        for symbol in CHECKED:
            allowed = meanings_in(table, symbol, entry)
            for what, phrase in definitions(text, symbol):
                role = re.match(r"(quer|key)", phrase)
                if role and symbol in ROLE:
                    ok = role.group(1) == ROLE[symbol][:4] and any(
                        matches(phrase, a) for a in allowed
                    )
                elif role:
                    continue  # a key at $i$: a position, as the table says
                else:
                    ok = any(matches(phrase, a) for a in allowed)
                if not ok:
                    out.append(
                        f"cell {k}: ${symbol}$ defined as '{what.strip()}'; the "
                        f"notation table gives it, here: {allowed or 'nothing'}"
                    )
    return out


def offsets_the_other_way(nb: dict, entry: str, exceptions: set) -> list[str]:
    out = []
    if entry in exceptions:
        return out
    for k, text in markdown(nb):
        for q, key in QUERY_MINUS_KEY:
            pattern = (
                rf"\boffsets?(?: is| of| =)? \${q} ?[-−] ?{key}(?:\$| [^$\w][^$]*\$)"
            )
            for found in re.finditer(pattern, text):
                before = text[max(0, found.start() - 60) : found.end()]
                if NAMED_OTHER_WAY.search(before):
                    continue
                out.append(
                    f"cell {k}: '{found.group(0)}' is query minus key; the book's "
                    f"offset is key minus query (${key} - {q}$)"
                )
    return out


def other_names(nb: dict, entry: str) -> list[str]:
    """Sizes the table names written another way: the model dimension as d_model
    (Vaswani et al.'s letters; the book's is $D$), a loss as $L$ (a length), the
    relative rotation of RoFormer's letters the wrong way round ($R_{m-n}$ for
    $R_m^\\top R_n = R_{n-m}$)."""
    out = []
    for k, text in markdown(nb):
        for found in re.finditer(r"d_\{?\\(?:text|mathrm)\{model\}\}?", text):
            if re.search(
                r"\$D\$ for \$$|paper", text[max(0, found.start() - 40) : found.start()]
            ):
                continue  # the paper's name, mapped to the book's
            out.append(f"cell {k}: ${found.group(0)}$: the model dimension is $D$")
        for found in re.finditer(r"\\partial L\b(?!_)", text):
            out.append(f"cell {k}: ${found.group(0)}$: a loss is $\\mathcal{{L}}$")
        for found in re.finditer(r"R_\{m ?- ?n\}", text):
            out.append(f"cell {k}: ${found.group(0)}$: the rotation is $R_{{n-m}}$")
    return out


HIDDEN = {"remove-cell", "remove-input", "hide-input"}


def comment_offsets(nb: dict, entry: str, exceptions: set) -> list[str]:
    """Code comments the reader sees that restate an offset query minus key."""
    out = []
    if entry in exceptions:
        return out
    for k, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or HIDDEN & set(
            cell["metadata"].get("tags", [])
        ):
            continue
        for line in "".join(cell["source"]).splitlines():
            comment = line.partition("#")[2]
            for q, key in QUERY_MINUS_KEY:
                if re.search(rf"\boffsets? (?:= )?{q} ?- ?{key}\b", comment):
                    out.append(
                        f"cell {k}: the comment '#{comment}' is query minus key; the "
                        f"book's offset is key minus query ({key} - {q})"
                    )
    return out


def italic_imaginary_units(nb: dict) -> list[str]:
    """Complex exponentials whose exponent starts with an italic i: $e^{i m\\theta}$,
    $e^{-i r \\theta_l}$, $\\exp(i\\phi)$ (an index i further on, $e^{-m(i - j)}$,
    is not one)."""
    out = []
    unit = re.compile(r"(?:e\^\{|\\exp\s*\\?\()\s*(?:-|\+|\\pm)?\s*i(?=\s*[A-Za-z\\(])")
    for k, text in markdown(nb):
        for math in re.findall(r"\$\$?([^$]+)\$\$?", text):
            if unit.search(math):
                out.append(f"cell {k}: an italic imaginary unit in ${math.strip()}$")
    return out


def used(symbol: str, texts: list[str]) -> bool:
    pattern = re.escape(symbol).replace(r"\ ", r"\s*")
    return any(re.search(rf"(?<![A-Za-z\\]){pattern}(?![A-Za-z])", t) for t in texts)


def standalone_letters(text: str) -> set[str]:
    """Letters used as a whole formula: $d$, $q_i$, $\\theta_k$, $W^{(h)}$."""
    out = set()
    for math in re.findall(r"(?<![$\\])\$([^$\n]{1,40})\$", text):
        m = re.match(
            r"^(\\[a-zA-Z]+|[A-Za-z])(?:_\{?[^}]*\}?)?(?:\^\{?[^}]*\}?)?$", math
        )
        if m and m.group(1) not in {r"\mathcal", r"\mathrm", r"\text", r"\tilde"}:
            out.add(m.group(1))
    return out


@pytest.fixture(scope="module")
def table():
    return notation_table()


@pytest.fixture(scope="module")
def exceptions():
    """The chapters the appendix names as writing the offset i - j."""
    text = NOTATION.read_text()
    m = re.search(
        r"key minus query \(the book's convention\); ([^|]*) write \$i - j\$", text
    )
    assert m, "the offset row of the notation appendix no longer names its exceptions"
    names = {"ALiBi": "book/part3/alibi", "Transformer-XL": "book/part2/transformer_xl"}
    return {entry for name, entry in names.items() if name in m.group(1)}


def load(entry: str) -> dict:
    return json.loads((ROOT / f"{entry}.ipynb").read_text())


def test_the_table_is_read(table):
    for symbol in CHECKED + [r"\theta_i", r"\mathrm{i}", "R_{ij}", r"\omega_k", "q_i"]:
        assert symbol in table, f"${symbol}$ is not in the notation appendix's tables"
    assert any(where for _, where in table["n"]), "n's second meaning names no chapter"
    for symbol in CHECKED:
        for meaning, _ in table[symbol]:
            head = head_words(meaning)
            assert head in ALIASES, f"${symbol}$: '{head}' has no entry in ALIASES"


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_chapter_keeps_the_notation(entry, table, exceptions):
    nb = load(entry)
    found = (
        redefinitions(nb, entry, table)
        + offsets_the_other_way(nb, entry, exceptions)
        + italic_imaginary_units(nb)
        + other_names(nb, entry)
        + comment_offsets(nb, entry, exceptions)
    )
    assert not found, f"{entry} departs from the notation appendix:\n" + "\n".join(
        found
    )


def test_every_symbol_of_the_table_is_used(table):
    texts = [t for entry in ENTRIES for _, t in markdown(load(entry))]
    unused = [s for s in table if not used(s, texts)]
    assert not unused, f"the notation appendix lists symbols no chapter uses: {unused}"


def test_the_common_letters_are_in_the_table(table):
    chapters: dict[str, set] = {}
    for entry in ENTRIES:
        for _, text in markdown(load(entry)):
            for letter in standalone_letters(text):
                chapters.setdefault(letter, set()).add(entry)
    common = {s for s, c in chapters.items() if len(c) >= len(ENTRIES) / 4}
    bases = {m.group(0) for s in table if (m := re.match(r"\\?[A-Za-z]+", s))}
    missing = sorted(common - bases)
    assert not missing, (
        "letters a quarter of the chapters use on their own are missing from the "
        f"notation appendix: {missing}"
    )


def test_the_checks_catch_a_planted_inconsistency(table, exceptions):
    """Each check fails on a small fake chapter that breaks it, and passes its fix."""

    def nb(text):
        return {"cells": [{"cell_type": "markdown", "source": [text], "metadata": {}}]}

    entry = "book/part3/fake"
    wrong = [
        "Scores are divided by $\\sqrt{d}$, where $d$ is the number of heads.",
        "The model dimension $d$ is split into heads.",
        "The sequence is cut into $n$ (the number of heads) parts.",
        "A query at $n$ and a key at $m$ meet at angle $(n - m)\\theta$.",
    ]
    for text in wrong:
        assert redefinitions(nb(text), entry, table), text
    right = [
        "Scores are divided by $\\sqrt{d}$, where $d$ is the head dimension.",
        "A head of dimension $d$ is cut into pairs; the model dimension $D$ is not.",
        "A window of length $n$, trained at length $L$.",
    ]
    for text in right:
        assert not redefinitions(nb(text), entry, table), text
    rope = "book/part3/rope"
    assert not redefinitions(nb("a query at $m$ and a key at $n$"), rope, table)
    assert redefinitions(nb("a query at $m$ and a key at $n$"), entry, table)

    assert offsets_the_other_way(nb("depends on the offset $m - n$ only"), rope, set())
    assert offsets_the_other_way(nb("the offset $i - j$ of query i"), entry, set())
    assert offsets_the_other_way(nb("offsets $t - s > L - 1$"), entry, set())
    assert not offsets_the_other_way(nb("offsets $i - j_0$"), entry, set())
    assert not offsets_the_other_way(nb("the offset $n - m$ only"), rope, set())
    assert not offsets_the_other_way(nb("offset = query − key, $t - j$"), entry, set())
    assert not offsets_the_other_way(
        nb("offsets $i - j$"), "book/part3/alibi", exceptions
    )

    assert other_names(nb("two layers, $d_{\\text{model}} = 64$"), entry)
    assert other_names(nb("$R_m^\\top R_n = R_{m - n}$"), entry)
    assert other_names(nb("$\\partial L / \\partial A_{ij}$"), entry)
    assert not other_names(nb("$\\partial \\mathcal{L} / \\partial A_{ij}$"), entry)
    assert not other_names(nb("> $\\sin(pos/10000^{2i/d_{\\text{model}}})$"), entry)
    assert not other_names(nb("The course writes $D$ for $d_{\\text{model}}$."), entry)
    assert not other_names(nb("$D = 64$ and $R_m^\\top R_n = R_{n-m}$"), entry)

    code = {"cell_type": "code", "metadata": {}, "source": ["x = 1  # offsets m - n"]}
    assert comment_offsets({"cells": [code]}, rope, set())
    code["source"] = ["x = 1  # distances m - n, offsets n - m"]
    assert not comment_offsets({"cells": [code]}, rope, set())

    assert italic_imaginary_units(nb("multiply by $e^{i m \\theta}$"))
    assert italic_imaginary_units(nb("$$\\sum_l h_l e^{i r \\theta_l}$$"))
    assert not italic_imaginary_units(nb("multiply by $e^{\\mathrm{i} m \\theta_i}$"))
    assert not italic_imaginary_units(nb("$e^{-m_h (i - j)}$ has no imaginary unit"))

    assert used(r"\theta_i", ["pair $i$ turns at $\\theta_i$"])
    assert not used(r"\theta_i", ["pair $i$ turns at $\\theta_{i}$ or $\\theta$"])
    fake = notation_table(
        "| symbol | meaning | where |\n|---|---|---|\n| $d$ | x | y |"
    )
    assert fake == {"d": [("x", set())]}

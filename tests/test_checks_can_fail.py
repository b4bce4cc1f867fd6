"""Checks that cannot fail, found by their shape in every chapter's code and every test:
an ``assert`` (or ``assert_close``, ``torch.equal``, ``allclose``, ``isclose``,
``approx``) that compares an expression with itself, or only literals, or only names
the same code bound once to a literal and never touched again (a value the cell
typed). Each of these holds whatever the library computes. The shapes are narrow on
purpose, so that nothing sound is flagged; a check against itself by other means (a
transcription compared with the same transcription) still needs a reader."""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p
    for p in [*(ROOT / "book").rglob("*.ipynb"), *(ROOT / "tests").rglob("*.py")]
    if ".ipynb_checkpoints" not in p.parts
)
CLOSE = {"assert_close", "assert_allclose", "equal", "allclose", "isclose", "approx"}
READS = {"items", "keys", "values", "get", "count", "index", "copy"}  # mutate nothing


def code_of(path: pathlib.Path) -> str:
    """A test's source; a notebook's code cells, in order, without IPython magics."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    lines = [
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(lines)


def is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def typed_names(tree: ast.AST) -> set[str]:
    """Names bound exactly once, by ``name = <literal>``, that nothing else binds,
    passes to a call, calls a method of (but one that only reads, ``READS``), or
    assigns an item of."""
    bindings: dict[str, int] = {}
    literal: set[str] = set()
    touched: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bindings[name.id] = bindings.get(name.id, 0) + 1
                if isinstance(target, ast.Name) and is_literal(node.value):
                    literal.add(target.id)
                if isinstance(target, ast.Subscript):
                    touched.update(
                        n.id for n in ast.walk(target) if isinstance(n, ast.Name)
                    )
        elif isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)
        ):
            target = node.target
            touched.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            touched.add(node.name)
        elif isinstance(node, ast.arg):
            touched.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            touched.update(node.names)
        elif isinstance(node, ast.Call):
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if method is not None and method not in READS:
                touched.update(
                    n.id for n in ast.walk(node.func.value) if isinstance(n, ast.Name)
                )
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Name):
                    touched.add(arg.id)
    return {n for n in literal if bindings.get(n) == 1 and n not in touched}


def vacuous(tree: ast.AST):
    """(line, why, the check) for each check of the shapes above."""
    typed = typed_names(tree)

    def known(node):  # its value is written in the code
        return is_literal(node) or (isinstance(node, ast.Name) and node.id in typed)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            sides = [node.test.left, *node.test.comparators]
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            if name not in CLOSE:
                continue
            sides = node.args[:2]
        else:
            continue
        text = ast.unparse(node.test if isinstance(node, ast.Assert) else node)
        dumps = [ast.dump(side) for side in sides]
        if any(a == b for a, b in zip(dumps, dumps[1:])):
            yield node.lineno, "compares an expression with itself", text
        elif all(known(side) for side in sides):
            yield node.lineno, "compares values written in the code", text


@pytest.mark.parametrize(
    "path", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES]
)
def test_no_check_holds_whatever_the_code_computes(path):
    found = [
        f"line {line}: {why}: {text[:100]}"
        for line, why, text in vacuous(ast.parse(code_of(path)))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("x = f()\nassert x == x", True),
        ("assert_close(f(a), f(a))", True),
        ("assert 3 < 4", True),
        ("n = 91\nassert n == 91", True),
        ("table = {(1, 'a'): 2}\nassert (1, 'a') in table", True),
        ("t = {1: 2}\nfor k, v in t.items():\n    pass\nassert 1 in t", True),
        ("n = pe.band\nassert n == 91", False),  # a golden number: sound
        ("n = 91\nn += 1\nassert n == 92", False),  # rebound
        ("calls = []\nrun(calls)\nassert calls == []", False),  # handed to a call
        ("calls = []\nf = lambda: calls.append(1)\nassert calls == []", False),
        ("assert_close(f(a), g(a))", False),
        ("assert c < 10 < 1e8 < d", False),  # literals between measured values
    ],
)
def test_the_shapes_are_found_and_sound_checks_are_not(source, flagged):
    assert bool(list(vacuous(ast.parse(source)))) == flagged

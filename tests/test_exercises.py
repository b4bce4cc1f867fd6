"""Exercises that check themselves (posenc_lib.exercises): the contract of every check.

For each registered check: its exercise exists in its chapter, the chapter has the
solution cell (tagged ``solution``) and the check cell (tagged ``check``); every wrong
answer planted for it gets a verdict containing its own message, without raising; the
student edition's stub, run as it is, gets "not yet" without raising. A book check
cell naming an unregistered exercise fails here too. (That every solution passes its
check is tested by running the chapters: the build, and the student edition with the
solutions pasted back.)
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import pathlib
import re

import numpy as np
import pytest
import torch

import posenc_lib as pl
from posenc_lib.exercises import Result, all_checks, verify

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKS = all_checks()
CHECK_CALL = re.compile(r'pl\.exercises\.check\(\s*"(ex-[^"]+)",\s*([A-Za-z_]\w*)\s*\)')


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def book_check_cells() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if "check" in tags(cell):
                found.append((path.relative_to(ROOT / "book").as_posix(), cell))
    return found


def test_every_check_cell_of_the_book_names_a_registered_exercise():
    cells = book_check_cells()
    assert cells, "no check cells found in the book"
    for where, cell in cells:
        m = CHECK_CALL.search("".join(cell["source"]))
        assert m, f"{where}: a cell tagged check must call pl.exercises.check"
        assert m[1] in CHECKS, f"{where}: {m[1]} has no registered check"


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_the_chapter_has_the_exercise_its_solution_and_its_check(label):
    check = CHECKS[label]
    nb = json.loads((ROOT / "book" / f"{check.chapter}.ipynb").read_text())
    cells = nb["cells"]
    text = "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    assert f":label: {label}" in text, f"{check.chapter} has no exercise {label}"
    k = next(
        k
        for k, c in enumerate(cells)
        if "check" in tags(c) and f'"{label}"' in "".join(c["source"])
    )
    # the check follows the solution (gated: start, code, end), all tagged solution
    end, code = cells[k - 1], cells[k - 2]
    assert "{solution-end}" in "".join(end["source"]), "the check follows the solution"
    assert code["cell_type"] == "code" and "solution" in tags(code), (
        "the solution's code sits inside the solution, tagged solution"
    )


def on_the_gpu():
    """A real CUDA device where there is one, else the fake one (as the student
    notebooks run)."""
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    from tools.testing.fake_cuda import fake_cuda

    return fake_cuda()


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("label", sorted(CHECKS))
def test_planted_wrong_answers_get_their_own_message(label, device):
    """Every planted answer of every registered check is judged wrong, with its own
    message, on the CPU and on a GPU (real, else the fake device). Until issue 44 the
    student notebooks' kernels fed the same answers (``CHECKS[label].planted``, for
    the labels of their check cells: registered ones, see the test above) to
    ``verify`` on the GPU after each check cell; this is that test, once."""
    planted = CHECKS[label].planted
    assert len(planted) >= 2, f"{label}: plant at least two wrong answers"
    for answer, says in planted:
        with on_the_gpu() if device == "gpu" else contextlib.nullcontext():
            result = verify(label, answer)
        assert isinstance(result, Result) and not result.passed, (
            f"{label}: a planted wrong answer passed ({says!r})"
        )
        assert says in result.message, (
            f"{label}: expected {says!r} in the verdict, got: {result.message}"
        )


def _chapter_and_name(label: str) -> tuple[dict, str]:
    """The chapter notebook (JSON) of check ``label`` and the name its check cell
    passes (the function or value the reader writes)."""
    nb = json.loads((ROOT / "book" / f"{CHECKS[label].chapter}.ipynb").read_text())
    name = next(
        m[2]
        for c in nb["cells"]
        if (m := CHECK_CALL.search("".join(c["source"]))) and m[1] == label
    )
    return nb, name


@pytest.mark.parametrize("label", sorted(CHECKS))
def test_the_stub_as_given_is_not_yet_right_and_does_not_crash(label):
    check = CHECKS[label]
    _, name = _chapter_and_name(label)
    namespace = {"torch": torch, "pl": pl}
    exec(check.stub, namespace)
    assert name in namespace, f"{label}: the stub does not define {name}"
    result = verify(label, namespace[name])
    assert not result.passed
    assert result.message


def test_check_prints_one_verdict_and_returns_nothing():
    label = sorted(CHECKS)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        returned = pl.exercises.check(label, ...)
    assert returned is None
    number = pl.exercises.numbers()[label]
    assert out.getvalue().startswith(f"Exercise {number} ({label}): not yet.")
    assert pl.exercises.results()[label].passed is False


def test_an_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="known: ex-"):
        pl.exercises.verify("ex-no-such-exercise", 1)


def test_registering_rejects_a_bad_label_and_a_second_check():
    with pytest.raises(ValueError, match="label must be"):
        pl.exercises.exercise("rope-complex", chapter="part3/rope", stub="")
    with pytest.raises(ValueError, match="already has a check"):
        pl.exercises.exercise(sorted(CHECKS)[0], chapter="x", stub="")


def test_an_exercise_is_found_by_its_number_on_the_site_too():
    label = sorted(CHECKS)[0]
    number = pl.exercises.numbers()[label]
    assert verify(number, ...).label == label
    with pytest.raises(KeyError, match="no exercise 999.1"):
        verify("999.1", ...)
    with pytest.raises(TypeError, match="exercise must be a label"):
        verify(14.1, ...)


def test_the_committed_exercise_numbers_are_what_the_tool_generates():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "tools.build.exercise_numbers", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    numbers = json.loads((ROOT / "posenc_lib/data/exercise_numbers.json").read_text())
    assert len(numbers) == len(set(numbers.values())) >= 100


# ---- answers that are NaN, and answers that change their inputs (issue 33) ----------
def _solution(label: str):
    """The chapter's solution to ``label`` when its code runs on its own (with the
    usual imports), else None (it reads names the chapter defined before it)."""
    from tools.build.student_edition import solution_code

    nb, name = _chapter_and_name(label)
    head = "import math\nimport numpy as np\nimport torch\nimport posenc_lib as pl\n"
    namespace: dict = {}
    registry, sized = dict(pl.REGISTRY), set(pl.registry.NEEDS_MAX_LEN)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(head + solution_code(nb).get(label, ""), namespace)
    except Exception:
        return None
    finally:  # a solution may register an encoding: the other tests must not see it
        pl.REGISTRY.clear()
        pl.REGISTRY.update(registry)
        pl.registry.NEEDS_MAX_LEN.clear()
        pl.registry.NEEDS_MAX_LEN.update(sized)
    return namespace.get(name)


@functools.cache
def solutions() -> dict:
    """label -> the chapter's solution where it runs on its own (else None)."""
    return {label: _solution(label) for label in CHECKS}


def _nan_filled(value, count: list, as_numpy: bool):
    """``value`` with every floating-point tensor, array and float NaN (counted in
    ``count[0]``); tensors as NumPy arrays when ``as_numpy``."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        count[0] += 1
        nan = torch.full_like(value.detach(), float("nan"))
        return nan.numpy() if as_numpy else nan
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        count[0] += 1
        return np.full(value.shape, np.nan)
    if isinstance(value, float):
        count[0] += 1
        return math.nan
    if isinstance(value, (tuple, list)):
        return type(value)(_nan_filled(v, count, as_numpy) for v in value)
    if isinstance(value, dict):
        return {k: _nan_filled(v, count, as_numpy) for k, v in value.items()}
    return value


def _nan_answer(answer, count: list, as_numpy: bool):
    if callable(answer) and not isinstance(answer, (type, torch.nn.Module)):
        return lambda *a, **kw: _nan_filled(answer(*a, **kw), count, as_numpy)
    return _nan_filled(answer, count, as_numpy)


def test_an_answer_filled_with_nan_is_never_right():
    """For every check, the chapter's solution (where it runs on its own) and every
    planted answer, with each float they return NaN-filled (as they return it, and
    as a NumPy array): the verdict is "not yet". (``ex-path-flip`` said "right" to a
    NumPy array of NaN: its reference is -inf above the diagonal.)"""
    right, tried = [], 0
    for label in sorted(CHECKS):
        answers = [solutions()[label]] + [a for a, _ in CHECKS[label].planted]
        for answer in (a for a in answers if a is not None):
            for as_numpy in (False, True):
                count = [0]
                result = verify(label, _nan_answer(answer, count, as_numpy))
                tried += count[0] > 0
                if count[0] and result.passed:
                    right.append((label, "numpy" if as_numpy else "as returned"))
    assert not right, f"NaN-filled answers judged right: {sorted(set(right))}"
    assert tried > 100, tried


def _complex_filled(value, count: list):
    """``value`` with every floating-point tensor, array and float made complex: its
    real part the value, an imaginary part of 1 (counted in ``count[0]``)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        count[0] += 1
        return torch.complex(value.detach(), torch.ones_like(value.detach()))
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        count[0] += 1
        return value + 1j
    if isinstance(value, float):
        count[0] += 1
        return complex(value, 1.0)
    if isinstance(value, (tuple, list)):
        return type(value)(_complex_filled(v, count) for v in value)
    if isinstance(value, dict):
        return {k: _complex_filled(v, count) for k, v in value.items()}
    return value


def test_a_complex_answer_is_not_right_because_its_real_part_is():
    """For every check, the chapter's solution (where it runs on its own and is
    right) with each float tensor it returns made complex, ``x + 1j``: "not yet".
    (Nine checks said "right": the comparison kept the real part only.)"""
    right, tried = [], 0
    for label, solution in sorted(solutions().items()):
        if solution is None or not verify(label, solution).passed:
            continue
        count = [0]
        if callable(solution) and not isinstance(solution, (type, torch.nn.Module)):
            answer = lambda *a, _s=solution, **kw: _complex_filled(_s(*a, **kw), count)
        else:
            answer = _complex_filled(solution, count)
        result = verify(label, answer)
        tried += count[0] > 0
        if count[0] and result.passed:
            right.append(label)
    assert not right, f"complex answers judged right: {right}"
    assert tried > 20, tried


def test_a_right_answer_that_changes_its_inputs_is_still_right():
    """A solution that, after computing its answer, reshapes its tensor inputs in
    place (``pos.unsqueeze_(-1)``) is still right: the check hands it copies."""
    wrong, tried = [], 0
    for label, solution in sorted(solutions().items()):
        if not callable(solution) or isinstance(solution, (type, torch.nn.Module)):
            continue
        if not verify(label, solution).passed:
            continue

        def changing(*args, _solution=solution, **kwargs):
            copies = (a.clone() if torch.is_tensor(a) else a for a in args)
            out = _solution(*copies, **kwargs)
            for a in args:
                if torch.is_tensor(a) and not a.requires_grad:
                    a.unsqueeze_(-1)
            return out

        tried += 1
        result = verify(label, changing)
        if not result.passed:
            wrong.append((label, result.message))
    assert not wrong, wrong
    assert tried > 20, tried


# ---- on the website a check never states the answer; a student's check does ---------


def _printed(label: str, answer) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pl.exercises.check(label, answer)
    return " ".join(out.getvalue().split())


def test_the_book_build_prints_a_neutral_verdict_and_a_student_the_message(
    monkeypatch,
):
    """Under ``POSENC_BOOK_BUILD=1`` (the book's builds) a check on the chapter's own
    solution prints "right" and nothing of what it checked, which would state the
    answer under the hidden solution; without it (a student's notebook) it prints
    the whole message. A "not yet" is printed in full either way."""
    tried = 0
    for label, solution in sorted(solutions().items()):
        if solution is None or not verify(label, solution).passed:
            continue
        tried += 1
        message = verify(label, solution).message
        monkeypatch.delenv(pl.exercises.BOOK_BUILD, raising=False)
        student = _printed(label, solution)
        assert student.endswith(" ".join(message.split())[1:]), student
        assert ": right." in student
        monkeypatch.setenv(pl.exercises.BOOK_BUILD, "1")
        book = _printed(label, solution)
        neutral = " ".join(Result(label, True, message).neutral().split())
        assert book == neutral and message[1:20] not in book, book
        assert _printed(label, ...).startswith(
            f"Exercise {pl.exercises.numbers()[label]} ({label}): not yet. No answer"
        )
    assert tried > 20, tried


def executed_check_outputs(cache: pathlib.Path) -> list[tuple[str, str, str]]:
    """(chapter, label, printed text) of every check cell of the book, as the site's
    execution cache ``cache`` (``_build/.jupyter_cache``, which nbval fills and the
    site build renders) holds them; a chapter it does not hold gives no output."""
    import nbformat
    from jupyter_cache import get_cache

    found = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        try:
            _, nb = get_cache(cache).merge_match_into_notebook(nb)
        except KeyError:  # never executed with this code
            pass
        for cell in nb.cells:
            if "check" not in tags(cell):
                continue
            label = CHECK_CALL.search(cell.source)[1]
            text = "".join(o.get("text", "") for o in cell.get("outputs", []))
            found.append((path.relative_to(ROOT).as_posix(), label, text))
    return found


@pytest.mark.build
def test_no_check_output_on_the_site_states_an_answer():
    """Every check cell the site shows (from the execution cache that nbval fills and
    the site build renders) prints only the neutral verdict "right", never what was
    checked. Run by the test command after the site build."""
    cache = ROOT / "_build" / ".jupyter_cache"
    if not cache.is_dir():
        pytest.skip(f"no site build: {cache} is missing (make site)")
    found = executed_check_outputs(cache)
    assert len(found) == len(book_check_cells())
    stated = [
        f"{where}: {text.strip()[:200] or '(no output: not executed?)'}"
        for where, label, text in found
        if " ".join(text.split()) != Result(label, True, "").neutral()
    ]
    assert not stated, "check outputs that say more than the verdict:\n" + "\n".join(
        stated
    )

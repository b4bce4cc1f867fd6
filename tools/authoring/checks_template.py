"""Checks for the exercises of book/partN/template.ipynb.

A coding exercise checks itself: after its solution (the cells tagged ``solution``,
from ``{solution-start}`` to ``{solution-end}``) the chapter has a cell tagged
``check``, ``pl.exercises.check("ex-...", answer)``, which runs the check registered
here on the reader's answer and prints "right" or "not yet" with what is wrong on
which input. The student edition keeps that cell and gives the reader an answer cell
that starts from the check's ``stub``.

Writing a check (the whole contract is in posenc_lib/course/exercises/__init__.py):

* register it with ``@exercise(label, chapter="partN/template", stub=STUB)``; the
  stub is the signature and docstring the reader completes, its body ``...``;
* call the answer through ``call(answer, ..., desc="the input, in words")``, which
  turns a crash or a missing ``return`` into a verdict naming the input;
* compare with ``expect_close(got, want, desc=...)`` or ``expect(condition, message)``,
  or raise ``Wrong(message)`` for a mistake you can name: say what is wrong and on
  which input, never the solution;
* return one sentence that says what was checked;
* ``plant(label, wrong_answer, says)`` at least two wrong answers: the tests feed each
  to the check and want ``says`` in its verdict.

The check below is the chapter template's example exercise: replace it by the
chapter's own checks (or delete it with its exercise and check cell).
"""

from __future__ import annotations

import torch

from posenc_lib.course.exercises import Wrong, call, exercise, expect_close, plant

OFFSETS_STUB = '''\
def offsets(n):
    """The (n, n) tensor of offsets i - j, query i (row), key j (column)."""
    ...  # your code
'''


@exercise("ex-template-offsets", chapter="partN/template", stub=OFFSETS_STUB)
def _(answer):
    for n in (1, 4, 7):
        desc = f"n = {n}"
        got = call(answer, n, desc=desc)
        i = torch.arange(n)
        want = i[:, None] - i[None, :]  # (i, j)
        if isinstance(got, torch.Tensor) and n > 1 and torch.equal(got, -want):
            raise Wrong(f"on {desc}, your offsets are j - i: the query i is the row")
        expect_close(got, want, desc=desc)
    return "equals i - j, query i in the rows, for n = 1, 4 and 7"


plant(
    "ex-template-offsets",
    lambda n: torch.arange(n)[None, :] - torch.arange(n)[:, None],
    "are j - i",
)
plant("ex-template-offsets", lambda n: torch.zeros(n, n + 1), "has shape")

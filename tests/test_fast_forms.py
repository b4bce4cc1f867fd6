"""The table of fast forms (``posenc_lib/backends/forms.py``): what it says runs is
what runs, each form names the test that proves it equal to the reference, and the
forms share one block loop."""

import ast
import pathlib
import re

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.backends import forms

ROOT = pathlib.Path(__file__).resolve().parents[1]
BACKENDS = ROOT / "posenc_lib" / "backends"
NAMES = sorted(pl.REGISTRY)


def build(name):
    return pl.make_encoding(name, d_model=32, n_heads=4, max_len=64)


@pytest.mark.parametrize("row", forms.FORMS, ids=lambda row: row.form.NAME)
def test_each_form_is_one_module_that_names_its_equality_test(row):
    """A row is a module with its name, hook, condition and call; its docstring
    names a test that exists; its hook (if any) is a contract entry (``FAST_FORMS``),
    which the registry contract holds equal to the hooks it restates."""
    form = row.form
    assert callable(form.why_not) and callable(form.attend)
    assert form.HOOK is None or form.HOOK in pl.base.FAST_FORMS
    named = re.findall(r"``(tests/test_\w+\.py)::(test_\w+)``", form.__doc__)
    assert named, f"{form.__name__} names no test"
    for path, test in named:
        source = (ROOT / path).read_text()
        assert f"def {test}(" in source, f"{form.__name__} names {path}::{test}"


def test_no_backend_module_is_long_and_one_loop_walks_the_blocks():
    """Small files, and the loop over blocks of queries (``for start in range(0, i,
    size)``) written once in the library: in ``blocks.py``, which the forms and the
    encodings' own algorithms (stick-breaking, CoPE, Wall) walk."""
    for path in BACKENDS.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 200, path.name
    loops = {}
    for path in (ROOT / "posenc_lib").rglob("*.py"):
        if "course" not in path.parts:
            text = path.read_text()
            found = re.findall(r"^\s*for \w+ in range\(0, ", text, re.M)
            if found:
                loops[path.relative_to(ROOT).as_posix()] = len(found)
    assert loops == {"posenc_lib/backends/blocks.py": 1}, loops


def _calls_recorded(monkeypatch):
    """Each form's ``attend`` wrapped to record its name when it returns a tensor."""
    ran = []
    for row in forms.FORMS:

        def attend(*args, _attend=row.form.attend, _name=row.form.NAME):
            out = _attend(*args)
            if out is not None:
                ran.append(_name)
            return out

        monkeypatch.setattr(row.form, "attend", attend)
    return ran


@pytest.mark.parametrize("kind", ["run", "gaps", "mask"])
@pytest.mark.parametrize("name", NAMES)
def test_the_form_explain_path_names_is_the_one_that_runs(name, kind, monkeypatch):
    """For every encoding, causal calls over a run, with gaps and with a mask: the
    path and form ``pl.explain_path`` names are those the call runs (and a refused
    path is refused with the reason it gives)."""
    torch.manual_seed(0)
    pe = build(name)
    mha = pl.MultiHeadAttention(32, 4, pe, input_encoded=True)
    g = torch.Generator().manual_seed(0)
    pos = pe.example_positions(1, 10, generator=g)
    inputs = pe.example_inputs(1, 10, generator=g) or None
    mask = None
    if kind == "gaps" and pe.coord_axes is None:
        pos = pos * 2
    if kind == "mask":
        if pe.causal_only:
            pytest.skip(f"{name} takes no mask of the caller's")
        mask = (torch.rand(1, 1, 10, 10, generator=g) > 0.3) | torch.eye(10).bool()
    positions = pl.prepare(pe, 1, 4, 10, 10, pos, pos, True, mask, inputs)
    choice = pl.explain_path(mha, positions)
    ran = _calls_recorded(monkeypatch)
    x = torch.randn(1, 10, 32)
    with torch.no_grad():
        mha(x, positions=positions)
    assert ran == ([choice.form] if choice.path == "fused" else []), (choice, ran)
    if choice.path == "reference":
        with pytest.raises(ValueError) as refused:
            mha(x, positions=positions, path="fused")
        assert str(refused.value) == choice.not_taken["fused"]


@pytest.mark.parametrize(
    "name, form",
    [("alibi", "key_bias"), ("fox", "key_bias"), ("t5", "band_bias"),
     ("sink", "sink_logits"), ("stick_breaking", "causal_attention"),
     ("nope", "sdpa"), ("rope", "sdpa")],
)  # fmt: skip
def test_explain_path_names_each_form_and_why_the_others_are_not_taken(name, form):
    choice = pl.explain_path(build(name))  # causal, in token order: the forms' call
    assert (choice.path, choice.form) == ("fused", form), choice
    assert set(choice.not_taken) >= set(forms.NAMES) - {form}
    assert form in str(choice)


def test_explain_path_says_why_a_form_is_not_taken():
    fox = build("fox")
    half = pl.explain_path(fox, dtype=torch.float16)
    assert half.form == "sdpa" and "float16" in half.not_taken["key_bias"]
    sb = build("stick_breaking")
    gaps = pl.prepare(sb, 1, 4, 8, 8, torch.arange(8) * 2, torch.arange(8) * 2, True)
    sb = pl.explain_path(sb, gaps)
    assert sb.path == "reference" and "causal_attention serves" in sb.not_taken["fused"]
    assert pl.explain_path(fox, path="flex").form == "flex"
    weights = pl.explain_path(fox, return_weights=True)
    assert (
        weights.form == "reference" and "return_weights" in weights.not_taken["fused"]
    )


@pytest.mark.parametrize("new, old", [("reference", "slow"), ("fused", "fast")])
def test_the_old_path_names_are_aliases_of_the_names_that_say_what_runs(new, old):
    torch.manual_seed(0)
    mha = pl.MultiHeadAttention(32, 4, "alibi")
    x = torch.randn(2, 9, 32)
    assert torch.equal(mha(x, causal=True, path=new), mha(x, causal=True, path=old))
    assert pl.explain_path(mha, path=new) == pl.explain_path(mha, path=old)
    with pytest.raises(ValueError, match="path must be one of"):
        pl.explain_path(mha, path="bogus")


def test_the_layer_module_reaches_the_cache_without_a_type_checking_import():
    tree = ast.parse((ROOT / "posenc_lib" / "layer.py").read_text())
    assert "TYPE_CHECKING" not in ast.dump(tree)
    assert pl.MultiHeadAttention.__module__ == "posenc_lib.layer"
    assert_close(pl.attention(*torch.ones(3, 1, 1, 2, 2)), torch.ones(1, 1, 2, 2))


def _bias_cases():
    """(encoding, causal, q_pos, k_pos, x) for the fast-bias form's hooks: PaTH and
    PaTH-FoX (causal; a run, shuffled positions, a KV cache's last queries), T5 with
    its bidirectional and its causal table (a run, gaps, a KV cache, per batch)."""
    g = torch.Generator().manual_seed(0)
    n = 70  # PaTH: more than one chunk of 64
    run, shuffled = torch.arange(n)[None], torch.randperm(n, generator=g)[None]
    gaps = torch.randint(1, 4, (2, n), generator=g).cumsum(-1)
    for gate in (False, True):
        pe = pl.PaTHAttention(16, 2, forget_gate=gate).double()
        for q_pos, k_pos in ((run, run), (shuffled, shuffled), (run[:, -5:], run)):
            yield pe, True, q_pos, k_pos
    for bidirectional in (True, False):
        pe = pl.T5RelativeBias(2, bidirectional=bidirectional, init_std=1.0).double()
        for q_pos, k_pos in ((run, run), (gaps, gaps), (run[:, -5:], run),
                             (gaps[:, ::3], gaps)):  # fmt: skip
            yield pe, bidirectional, q_pos, k_pos


@pytest.mark.parametrize("case", range(14))
def test_fast_score_bias_equals_the_formula_forward_and_backward(case):
    """``fast_score_bias`` (PaTH's chunks, T5's table per offset) equals
    ``score_bias`` (the loop over diagonals, the bucket of every pair), values and
    the gradients of q, k, the layer input and every parameter (float64); and
    through attention the fused path, which runs it, equals the reference."""
    pe, causal, q_pos, k_pos = list(_bias_cases())[case]
    torch.manual_seed(case)
    with torch.no_grad():  # parameters away from their initial values
        for t in pe.parameters():
            t.add_(0.5 * torch.randn_like(t))
    b, i, j = max(q_pos.shape[0], k_pos.shape[0]), q_pos.shape[1], k_pos.shape[1]
    q = torch.randn(b, 2, i, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, 2, j, 8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(b, j, 16, dtype=torch.float64, requires_grad=True)
    ctx = pl.Context(x=x)
    grad = torch.randn(b, 2, i, j, dtype=torch.float64)
    results = []
    for hook in ("score_bias", "fast_score_bias"):
        bias = pe.call_hook(hook, q, k, q_pos, k_pos, ctx=ctx).expand(b, 2, i, j)
        seen = torch.isfinite(bias)
        inputs = [q, k, x, *pe.parameters()]
        loss = (bias * grad)[seen].sum()
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        grads = [torch.zeros(1) if d is None else d for d in grads]  # unused
        results.append([bias.detach(), *grads])
    for slow, fast in zip(*results):
        assert_close(fast, slow)
    if i == j:  # through attention: the form runs it (T5's band, where it serves)
        v = torch.randn(b, 2, j, 8, dtype=torch.float64)
        kw = dict(causal=causal, x=x.detach())
        positions = pl.prepare(pe, b, 2, i, j, q_pos, k_pos, causal, None, None)
        choice = pl.explain_path(pe, positions, dtype=torch.float64)
        band = (
            isinstance(pe, pl.T5RelativeBias)
            and choice.path == "fused"
            and forms.Call.of(positions, torch.float64).ordered
        )
        assert choice.form == ("band_bias" if band else "fast_score_bias"), choice
        for path in ("reference", "fused"):
            results.append(pl.attention(q, k, v, pe, q_pos, k_pos, path=path, **kw))
        assert_close(results[-1], results[-2])

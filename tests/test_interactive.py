"""The interactive figures (posenc_lib/interactive.py and the cells that use it).

Each figure cell of the book is run here as it is written (with ``show`` captured): the
arrays stored for a few control positions must equal the library's values, computed
again here (often from the closed form), and the Colab output of the same cell must be
a self-contained page holding the same figure. The browser half is
tests/test_interactive_site.py.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import sys
import types

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from plotly.io.json import to_json_plotly

import posenc_lib as pl
from posenc_lib import interactive
from posenc_lib.interactive import mimebundle, slider_figure

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARK = "from posenc_lib.interactive import"


def figure_cells() -> list[tuple[str, int, str]]:
    """(notebook, k-th figure in it, code) for every figure cell of the book."""
    out = []
    for nb in sorted(ROOT.glob("book/**/*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        codes = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        figs = [c for c in codes if MARK in c]
        out += [(nb.relative_to(ROOT).as_posix(), k, c) for k, c in enumerate(figs)]
    return out


CELLS = {(nb, k): code for nb, k, code in figure_cells()}
# cells that read results computed earlier in their chapter (not run on their own)
NEEDS_CHAPTER = {("book/part3/extrapolation_lab.ipynb", 0)}


def run_cell(code: str) -> list[dict]:
    """Run a figure cell in a fresh namespace (the chapters' usual imports) and return
    the mime bundles it displays."""
    shown = []
    display = pytest.MonkeyPatch()
    display.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))
    try:
        exec(code, {"torch": torch, "pl": pl, "math": math})
    finally:
        display.undo()
    assert len(shown) == 1 and isinstance(shown[0], dict), "one show() per cell"
    return shown


def cell_figure(nb: str, k: int) -> go.Figure:
    figs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interactive, "show", figs.append)
        code = CELLS[(nb, k)]
        ns = {"torch": torch, "pl": pl, "math": math}
        exec(code, ns)
    return figs[0]


def step(fig: go.Figure, label: str) -> dict:
    """The data arrays stored for the control position labelled ``label``."""
    ctl = fig.layout.sliders[0] if fig.layout.sliders else fig.layout.updatemenus[0]
    steps = ctl.steps if fig.layout.sliders else ctl.buttons
    for s in steps:
        if s.label == label or s.label.endswith(f": {label}"):
            return s.args[0]
    raise KeyError(f"no position {label!r} in {[s.label for s in steps]}")


def close(stored, expected, rtol=1e-4, atol=1e-6) -> None:
    stored = np.array([np.nan if v is None else v for v in np.ravel(stored)], float)
    expected = torch.as_tensor(expected, dtype=torch.float64).flatten().numpy()
    np.testing.assert_allclose(stored, expected, rtol=rtol, atol=atol)


def test_every_figure_cell_is_found():
    assert len(CELLS) >= 10, sorted(CELLS)
    assert len({nb for nb, _ in CELLS}) >= 9


# --- each figure stores the library's values -----------------------------------------


@pytest.mark.parametrize("base", ["100", "100,000"])
def test_sinusoid_table_against_base(base):
    fig = cell_figure("book/part1/sinusoidal.ipynb", 0)
    close(
        step(fig, base)["z"][0],
        pl.sinusoidal_table(48, 32, base=float(base.replace(",", ""))),
    )


@pytest.mark.parametrize("base", ["100", "1,000,000"])
def test_rope_decay_against_base(base):
    fig = cell_figure("book/part3/rope.ipynb", 0)
    data = step(fig, base)
    theta, _ = pl.rope_inv_freq(64, base=float(base.replace(",", "")))
    r = torch.tensor(data["x"][0], dtype=torch.float64)
    # q = k = ones: the score is the sum over pairs of 2 cos(r theta_i), over d
    close(data["y"][0], (r[:, None] * theta).cos().sum(-1) * 2 / 64)


@pytest.mark.parametrize("i", ["0", "17", "31"])
def test_rope_pair_against_index(i):
    fig = cell_figure("book/part3/rope.ipynb", 1)
    data = step(fig, i)
    theta, _ = pl.rope_inv_freq(64)
    r = torch.tensor(data["x"][0], dtype=torch.float64)
    close(data["y"][0], (r * theta[int(i)]).cos(), atol=1e-5)


@pytest.mark.parametrize("H", [1, 6, 12, 32])
def test_alibi_slopes_for_any_head_count(H):
    data = step(cell_figure("book/part3/alibi.ipynb", 0), str(H))
    stored = data["y"][0] + data["y"][1]
    close(stored, pl.alibi_slopes(H, dtype=torch.float64))
    assert data["x"][0] + data["x"][1] == list(range(1, H + 1))


@pytest.mark.parametrize("B", [8, 64])
def test_t5_buckets_against_count(B):
    data = step(cell_figure("book/part2/t5.ipynb", 0), str(B))
    offsets = torch.tensor(data["x"][0])
    for y, bi in zip(data["y"], (True, False)):
        assert y == pl.t5_relative_bucket(offsets, bi, num_buckets=B).tolist()


@pytest.mark.parametrize("s", ["2", "32"])
def test_rope_scaling_ratios_against_factor(s):
    data = step(cell_figure("book/part3/extending_rope.ipynb", 0), s)
    plain, _ = pl.rope_inv_freq(128)
    kw = {"original_max_position_embeddings": 4096}
    for y, (kind, params) in zip(
        data["y"], [("linear", {}), ("ntk", {}), ("yarn", kw), ("llama3", kw)]
    ):
        scaled, _ = pl.rope_inv_freq(128, scaling=kind, factor=float(s), **params)
        close(y, scaled / plain)


@pytest.mark.parametrize("p", ["0.25", "1.0"])
def test_p_rope_and_partial_rotary_against_fraction(p):
    data = step(cell_figure("book/part7/rope_deployed.ipynb", 0), p)
    prope, _ = pl.rope_inv_freq(
        128, scaling="proportional", partial_rotary_factor=float(p)
    )
    close(data["y"][0], prope.where(prope > 0, torch.nan))
    close(data["y"][1], pl.rope_inv_freq(int(float(p) * 128))[0])


@pytest.mark.parametrize("f", ["0.5", "0.99"])
def test_fox_map_against_gate(f):
    z = torch.tensor(
        step(cell_figure("book/part4/forgetting_transformer.ipynb", 0), f)["z"][0],
        dtype=torch.float64,
    )
    i, j = torch.arange(16)[:, None], torch.arange(16)[None, :]
    # constant gates: F_ij = f^(i - j) below the diagonal, 0 above it
    before = (j <= i) & (i < 10)
    close(z[before], float(f) ** (i - j)[before].double())
    assert (z[j > i] == 0).all()
    # across token 10's shut gate: the factor 0.02 once
    assert math.isclose(z[12, 5], float(f) ** 6 * 0.02, rel_tol=1e-4)


@pytest.mark.parametrize("M", [2, 7])
def test_swin_index_against_window(M):
    data = step(cell_figure("book/part5/vision.ipynb", 0), str(M))
    assert data["z"][0] == pl.swin_relative_position_index(M, M).tolist()


def test_mrope_ids_against_sequence():
    fig = cell_figure("book/part5/video_audio.ipynb", 0)
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert len(labels) >= 3
    data = step(fig, labels[2].split(": ", 1)[1])  # the video at 2 t per frame
    ids = pl.mrope_position_ids(
        [("text", 3), ("video", (3, 2, 2)), ("text", 3)], time_interval=2.0
    )
    assert data["y"] == [ids[:, a].tolist() for a in range(3)]


# --- the builder: ranges, print caption, sizes, errors ------------------------------


def test_ranges_span_every_position_and_the_caption_names_the_first():
    fig = slider_figure(
        [1, 3], lambda a: [{"y": [0, a]}], label="a", active=1, title=lambda a: f"{a}"
    )
    lo, hi = fig.layout.yaxis.range
    assert lo < 0 and hi > 3
    assert fig.data[0].y == (0, 3) and fig.layout.title.text == "3"
    assert fig.layout.sliders[0].steps[0].args == ({"y": [[0, 1]]}, {"title.text": "1"})
    assert "printed at a = 3" in mimebundle(fig, colab=False)["text/plain"]


def test_non_finite_values_are_gaps_and_heatmaps_share_a_colour_scale():
    fig = slider_figure(
        [1.0, 2.0],
        lambda a: [{"type": "heatmap", "z": [[a, float("-inf")]]}],
        label="a",
    )
    assert [list(row) for row in fig.data[0].z] == [[1.0, None]]
    assert (fig.data[0].zmin, fig.data[0].zmax) == (1.0, 2.0)


@pytest.mark.parametrize(("nb", "k"), sorted(set(CELLS) - NEEDS_CHAPTER))
def test_every_figure_is_small(nb, k):
    html = mimebundle(cell_figure(nb, k), colab=False)["text/html"]
    assert len(html) < 300_000, f"{nb}: {len(html)} characters"


# A symbol spelled in ASCII, as in code comments ("theta_i", "lambda", "m_h"), where
# the static figures of the same chapters write it as maths (θᵢ, λ, mₕ): plotly draws
# any unicode, so an interactive figure writes the symbol as the reader sees it.
ASCII_SYMBOL = re.compile(
    r"\b(?:alpha|beta|gamma|delta|epsilon|theta|lambda|mu|sigma|tau|phi|psi|omega)"
    r"(?:_\w+)?\b|\b[A-Za-z]_[A-Za-z0-9]\b",
    re.I,
)


def figure_texts(fig: go.Figure) -> list[str]:
    """Every text a reader sees drawn: titles (figure, axes, colour bars), the
    control's label and its positions, the legend's names, annotations."""
    layout = fig.to_dict()["layout"]
    texts = [str(layout.get("title", {}).get("text", ""))]
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            texts.append(str(axis.get("title", {}).get("text", "")))
    texts += [str(a.get("text", "")) for a in layout.get("annotations", ())]
    for control in [*layout.get("sliders", ()), *layout.get("updatemenus", ())]:
        texts.append(str(control.get("currentvalue", {}).get("prefix", "")))
        texts += [str(s.get("label", "")) for s in control.get("steps", ())]
        texts += [str(b.get("label", "")) for b in control.get("buttons", ())]
    for trace in fig.to_dict()["data"]:
        texts.append(str(trace.get("name", "")))
        texts.append(str(trace.get("colorbar", {}).get("title", {}).get("text", "")))
    return [t for t in texts if t]


@pytest.mark.parametrize(("nb", "k"), sorted(set(CELLS) - NEEDS_CHAPTER))
def test_every_figure_writes_its_symbols_as_the_static_figures_do(nb, k):
    texts = figure_texts(cell_figure(nb, k))
    spelled = [t for t in texts if ASCII_SYMBOL.search(t)]
    assert not spelled, f"{nb}: symbols spelled in ASCII: {spelled}"


def test_the_symbol_check_catches_an_ascii_axis_title():
    fig = slider_figure(
        [1, 2], lambda v: [{"y": [v]}], label="v", layout={"yaxis_title": "theta_i"}
    )
    assert any(ASCII_SYMBOL.search(t) for t in figure_texts(fig))
    fig.update_layout(yaxis_title="θᵢ (radians per token)")
    assert not any(ASCII_SYMBOL.search(t) for t in figure_texts(fig))


BAD = [
    (dict(values=[]), ValueError, "values"),
    (dict(traces=[{"y": [1]}]), TypeError, "traces must be a function"),
    (dict(traces=lambda v: []), ValueError, "non-empty list"),
    (dict(traces=lambda v: ["y"]), TypeError, "not dict"),
    (dict(traces=lambda v: [{"y": [1]}] * v), ValueError, "same traces"),
    (dict(traces=lambda v: [{"y": ["a", None]}]), TypeError, "trace y"),
    (dict(control="knob"), ValueError, "control must be one of"),
    (dict(label=""), ValueError, "label"),
    (dict(active=2), ValueError, "active must be an index"),
    (dict(active=True), TypeError, "active must be an int"),
    (dict(title=3), TypeError, "title"),
    # tensors and strings where numbers and booleans are needed (issue 33)
    (dict(values=torch.tensor([1, 2])), TypeError, "values must be numbers or str"),
    (dict(values=[torch.tensor(1), 2]), TypeError, "values must be numbers or str"),
    (dict(values="12"), TypeError, "values must be a list"),
    (dict(active=torch.tensor(1)), TypeError, "active must be an int"),
    (dict(fix_ranges="False"), TypeError, "fix_ranges must be a bool"),
    (dict(fix_ranges=torch.tensor(False)), TypeError, "fix_ranges must be a bool"),
    (dict(fmt="{:g}"), TypeError, "fmt must be a function"),
    (dict(layout="xaxis_title"), TypeError, "layout must be a dict"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD)
def test_bad_input_names_the_argument(change, error, message):
    args = dict(values=[1, 2], traces=lambda v: [{"y": [v]}], label="v") | change
    with pytest.raises(error, match=message):
        slider_figure(args.pop("values"), args.pop("traces"), **args)


def test_mimebundle_refuses_what_it_cannot_show():
    with pytest.raises(TypeError, match="fig must be a plotly Figure"):
        mimebundle({"data": []})
    with pytest.raises(ValueError, match="no slider or dropdown"):
        mimebundle(go.Figure())


# --- the same cell in Colab ---------------------------------------------------------


@pytest.fixture
def in_colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))


@pytest.mark.parametrize(("nb", "k"), sorted(set(CELLS) - NEEDS_CHAPTER))
def test_the_cell_shows_a_self_contained_output_in_colab(in_colab, nb, k):
    (bundle,) = run_cell(CELLS[(nb, k)])
    page = bundle["text/html"]
    # Colab draws each output in its own frame: it must load plotly.js itself
    assert 'src="https://cdn.plot.ly/plotly-' in page, "plotly.js is not loaded"
    assert page.index("cdn.plot.ly") < page.index("Plotly.newPlot(")
    # the same figure as on the website
    fig = cell_figure(nb, k)
    site = mimebundle(fig, colab=False)["text/html"]
    for part in (
        to_json_plotly(fig.to_dict()["data"]),
        to_json_plotly(fig.to_dict()["layout"]),
    ):
        assert part in page and part in site
    assert "cdn" not in site.lower() and "<script src" not in site


def test_the_website_output_carries_plotly_json_for_jupyter():
    (bundle,) = run_cell(CELLS[("book/part3/alibi.ipynb", 0)])
    spec = bundle["application/vnd.plotly.v1+json"]
    assert spec["layout"]["sliders"][0]["steps"] and spec["data"]
    assert 'class="posenc-interactive"' in bundle["text/html"]

"""Interactive figures that need no kernel: a slider or a dropdown over values
computed in advance.

Every control position is computed when the notebook runs (by ``posenc_lib``'s own
functions, called by the chapter), and the figure carries all of them: moving the
control only swaps arrays that are already in the page. The website therefore stays
static and works offline, and Colab shows the same cell the same way.

>>> from posenc_lib.interactive import slider_figure, show
>>> fig = slider_figure(
...     [4, 8, 12],
...     lambda n: [{"type": "bar", "y": alibi_slopes(n).tolist()}],
...     label="heads",
... )
>>> show(fig)  # doctest: +SKIP

``show`` gives each environment what it needs:

- the website (and Jupyter): a ``<div>`` drawn by the site's own copy of plotly.js,
  which ``setup`` (this module is also a Sphinx extension, listed in ``_config.yml``)
  copies from the installed ``plotly`` package into ``_static/`` and loads on the pages
  that have a figure; no CDN, so the site works offline. The bundle also carries
  plotly's JSON mime type, which JupyterLab and VS Code draw natively.
- Colab (``"google.colab" in sys.modules``): plotly's own Colab output, self-contained:
  it loads plotly.js from plotly's CDN (Colab is online, and draws each output in its
  own frame, so each output loads it).

Print (the PDF is the site printed by Chromium): plotly draws the figure at the
control's first position; ``_static/interactive.css`` hides the controls in print and
shows the caption line that says which position is drawn.

Plotly has no "precomputed states" figure type of its own, so this module builds one
from slider/dropdown steps that call ``Plotly.update`` with stored arrays (plotly's
documented ``method="update"`` steps); the checks here give errors that name the
argument at fault instead of a blank figure.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from numbers import Number
import pathlib
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence

import numpy as np

try:
    import plotly.graph_objects as go
except ModuleNotFoundError:  # the library alone does not install plotly
    from . import needs

    raise needs("plotly", __name__) from None

__all__ = ["slider_figure", "show", "mimebundle", "DATA_KEYS"]

# The trace properties that may change from one control position to the next.
DATA_KEYS = ("x", "y", "z", "text")
CONTROLS = ("slider", "dropdown")
# Figures shrink with the page (phones) and show no plotly logo.
CONFIG = {"responsive": True, "displaylogo": False}
DIGITS = 5  # significant digits stored: keeps each figure's HTML small


def _compact(value, name: str):
    """Numbers (tensor, array, list) -> nested lists of ``DIGITS``-digit floats or ints;
    non-finite numbers become ``None`` (a gap in the plot: JSON has no inf)."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype.kind in "US":  # labels (x categories, hover text)
        return arr.tolist()
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold numbers or strings, got dtype {arr.dtype}")
    if arr.dtype.kind in "biu":
        return arr.tolist()

    def one(v):
        v = float(v)
        return float(f"{v:.{DIGITS}g}") if math.isfinite(v) else None

    return np.vectorize(one, otypes=[object])(arr).tolist() if arr.size else []


def _states(values, traces) -> list[list[dict]]:
    if not callable(traces):
        raise TypeError(
            "traces must be a function: control value -> list of trace dicts, got "
            f"{type(traces).__name__}"
        )
    states = []
    for v in values:
        made = traces(v)
        if not isinstance(made, (list, tuple)) or not made:
            raise ValueError(
                f"traces({v!r}) must return a non-empty list of trace dicts, got "
                f"{made!r:.80}"
            )
        for t in made:
            if not isinstance(t, dict):
                raise TypeError(
                    f"traces({v!r}) returned a {type(t).__name__}, not dict"
                )
        states.append([dict(t) for t in made])
    first = states[0]
    for v, state in zip(values, states):
        shape = [
            (t.get("type", "scatter"), sorted(k for k in t if k in DATA_KEYS))
            for t in state
        ]
        want = [
            (t.get("type", "scatter"), sorted(k for k in t if k in DATA_KEYS))
            for t in first
        ]
        if shape != want:
            raise ValueError(
                f"traces({v!r}) gives traces {shape}, but traces({values[0]!r}) gives "
                f"{want}: every control position needs the same traces"
            )
    for state in states:
        for t in state:
            for k in DATA_KEYS:
                if k in t:
                    t[k] = _compact(t[k], f"trace {k}")
    return states


def _finite(nested) -> list[float]:
    out = []
    for v in np.asarray(nested, dtype=object).ravel():
        if isinstance(v, list):
            out += _finite(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
    return out


def _span(numbers: list[float]) -> list[float] | None:
    if not numbers:
        return None
    lo, hi = min(numbers), max(numbers)
    pad = 0.05 * (hi - lo) if hi > lo else 0.5
    return [lo - pad, hi + pad]


def slider_figure(
    values: Sequence,
    traces: Callable[[object], list[dict]],
    *,
    label: str,
    control: str = "slider",
    active: int = 0,
    title: str | Callable[[object], str] | None = None,
    layout: dict | None = None,
    fix_ranges: bool = True,
    fmt: Callable[[object], str] = str,
) -> go.Figure:
    """A plotly figure with one control (``"slider"`` or ``"dropdown"``) over
    ``values``.

    ``traces(v)`` gives the list of plotly trace dicts (``type`` defaults to
    ``"scatter"``) to draw at control value ``v``; every value must give the same
    traces with the same data keys among ``DATA_KEYS`` (their arrays may differ,
    their lengths too). The other trace properties (name, mode, colours) are taken
    from the position drawn first. ``title``: a string, or ``v -> str`` for a title that
    follows the control. ``fix_ranges``: axes (and heatmap colour scales) span every
    position's data, so that moving the control moves the curves, not the axes.
    ``active``: the index of the position drawn first (and printed).
    ``values`` are numbers or strings (their labels are ``fmt(v)``); a tensor is
    refused (its labels would read "tensor(1.)"): pass ``t.tolist()``.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(
            f"values must be a list of control positions, got {type(values).__name__}"
            f" ({values!r:.40})"
        )
    values = list(values)
    if not values:
        raise ValueError("values must hold at least one control position, got none")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (Number, str)):
            hint = ": pass values.tolist()" if hasattr(v, "detach") else ""
            raise TypeError(
                "values must be numbers or strings (the control's positions), got "
                f"{type(v).__name__} ({v!r:.40}){hint}"
            )
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    if not isinstance(label, str) or not label:
        raise ValueError(f"label must be a non-empty string, got {label!r}")
    if isinstance(active, bool) or not isinstance(active, int):
        raise TypeError(f"active must be an int, got {type(active).__name__}")
    if not 0 <= active < len(values):
        raise ValueError(
            f"active must be an index into values (0 .. {len(values) - 1}), "
            f"got {active}"
        )
    if title is not None and not (isinstance(title, str) or callable(title)):
        raise TypeError(f"title must be a string or a function, got {title!r}")
    if not isinstance(fix_ranges, bool):  # "False" and tensor(False) are truthy
        raise TypeError(f"fix_ranges must be a bool, got {fix_ranges!r}")
    if not callable(fmt):
        raise TypeError(f"fmt must be a function (value -> label), got {fmt!r}")
    if layout is not None and not isinstance(layout, dict):
        raise TypeError(
            f"layout must be a dict of plotly layout properties, got {layout!r}"
        )
    states = _states(values, traces)
    titles = [
        title(v) if callable(title) else title for v in values
    ]  # per position, or None
    base = states[active]
    data = []
    for index, t in enumerate(base):
        props = {"type": "scatter", **t}
        if fix_ranges and props["type"] == "heatmap" and "z" in t:
            zs = _finite([s[index]["z"] for s in states])
            if zs and "zmin" not in props and "zmax" not in props:
                props.update(zmin=min(zs), zmax=max(zs))
        data.append(props)
    fig = go.Figure(data=data)
    # From the top: the title, the dropdown (if any), the legend in rows (so the
    # plot keeps the page's width on a phone), the plot, the slider (if any).
    legend = 40 if len(base) > 1 else 0  # plotly shows no legend for one trace
    top = 60 + legend + (30 if control == "dropdown" else 0)
    height = 480 if control == "slider" else 430
    fig.update_layout(
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": top, "b": 40},
        height=height,
        title={"y": 0.98, "yanchor": "top", "yref": "container", "font_size": 14},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
    )
    fig.update_layout(layout or {})  # the caller's layout wins
    if titles[active] is not None:
        fig.update_layout(title_text=titles[active])
    if fix_ranges:
        for axis, key in (("xaxis", "x"), ("yaxis", "y")):
            if (fig.layout[axis].range is not None) or any(
                t.get("type", "scatter") == "heatmap" for t in base
            ):
                continue
            numbers = _finite([t.get(key, []) for s in states for t in s])
            if fig.layout[axis].type == "log":  # plotly's log ranges are in log10
                numbers = [math.log10(v) for v in numbers if v > 0]
            span = _span(numbers)
            if span is not None:
                fig.layout[axis].range = span
    steps = []
    for v, state, text in zip(values, states, titles):
        data = {
            k: [t.get(k) for t in state]
            for k in DATA_KEYS
            if any(k in t for t in state)
        }
        relayout = {} if text is None else {"title.text": text}
        name = fmt(v)
        steps.append({"method": "update", "label": name, "args": [data, relayout]})
    if control == "slider":
        fig.update_layout(
            sliders=[
                {
                    "active": active,
                    "currentvalue": {"prefix": f"{label} = "},
                    "pad": {"t": 45},
                    "steps": steps,
                }
            ]
        )
    else:
        for step in steps:
            step["label"] = f"{label}: {step['label']}"
        fig.update_layout(
            updatemenus=[
                {
                    "type": "dropdown",
                    "active": active,
                    "buttons": steps,
                    "x": 0.0,
                    "xanchor": "left",
                    # above the legend: in paper units, the plot's height is 1
                    "y": 1 + (legend + 5) / (height - top - 40),
                    "yanchor": "bottom",
                    "showactive": True,
                }
            ]
        )
    fig.layout.meta = {"posenc": {"label": label, "values": [fmt(v) for v in values]}}
    return fig


def _control(fig: go.Figure) -> tuple[str, dict]:
    if fig.layout.sliders:
        return "slider", fig.layout.sliders[0]
    if fig.layout.updatemenus:
        return "dropdown", fig.layout.updatemenus[0]
    raise ValueError("fig has no slider or dropdown: build it with slider_figure")


def _caption(fig: go.Figure) -> str:
    kind, ctl = _control(fig)
    meta = (fig.layout.meta or {}).get("posenc", {})
    label = meta.get("label", "the control")
    step = ctl.steps[ctl.active or 0] if kind == "slider" else ctl.buttons[ctl.active]
    value = (meta.get("values") or [step.label])[ctl.active or 0]
    where = "slider" if kind == "slider" else "menu"
    return (
        f"Interactive figure, printed at {label} = {value}: move the {where} on the "
        "website or in Colab."
    )


def mimebundle(fig: go.Figure, colab: bool | None = None) -> dict[str, object]:
    """What ``show`` displays: the Colab output when ``colab`` (default: running in
    Colab), else the website's ``<div>`` plus plotly's JSON."""
    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly Figure, got {type(fig).__name__}")
    caption = _caption(fig)
    if colab is None:
        colab = "google.colab" in sys.modules
    if colab:
        # what plotly's own Colab renderer displays (ColabRenderer in
        # plotly/io/_base_renderers.py): the figure and a script tag for plotly.js
        page = fig.to_html(include_plotlyjs="cdn", full_html=False, config=CONFIG)
        return {"text/html": page, "text/plain": caption}
    spec = fig.to_json()
    # a stable id (the same figure gives the same page): hash of the figure
    div_id = "posenc-fig-" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    div = fig.to_html(
        include_plotlyjs=False, full_html=False, config=CONFIG, div_id=div_id
    )
    return {
        "text/html": (
            f'<div class="posenc-interactive">{div}'
            f'<p class="posenc-interactive-print">{html.escape(caption)}</p></div>'
        ),
        "application/vnd.plotly.v1+json": {**json.loads(spec), "config": CONFIG},
        "text/plain": caption,
    }


def show(fig: go.Figure) -> None:
    """Display ``fig`` the way this environment needs (see the module docstring)."""
    from IPython.display import display

    display(mimebundle(fig), raw=True)


# --- Sphinx: serve plotly.js from the site -----------------------------------------

PLOTLY_JS = pathlib.Path(go.__file__).parents[1] / "package_data" / "plotly.min.js"


def _add_plotly_where_used(app, pagename, templatename, context, doctree) -> None:
    # a page-specific script (Sphinx >= 3.5): only pages with a figure load 4.8 MB
    if "plotly-graph-div" in context.get("body", ""):
        app.add_js_file("plotly.min.js", priority=200)


def _copy_plotly(app, exc) -> None:
    if exc is None and app.builder.format == "html":
        static = pathlib.Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PLOTLY_JS, static / "plotly.min.js")


def setup(app) -> dict:
    """Sphinx extension: copy the installed plotly's ``plotly.min.js`` into the
    build's ``_static/`` and load it on the pages that show a figure."""
    if not PLOTLY_JS.is_file():
        raise FileNotFoundError(f"plotly.js not found at {PLOTLY_JS}")
    app.connect("html-page-context", _add_plotly_where_used)
    app.connect("build-finished", _copy_plotly)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

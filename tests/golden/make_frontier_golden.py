"""Produce tests/golden/frontier_transformers.json: where each model of
``posenc_lib.frontier.MODEL_POSITION`` computes its positional encoding, read from the
source of Hugging Face ``transformers`` (no model is imported or run).

For each model the script parses ``models/<module>/modeling_<module>.py`` and records,
for the class named in the transcription, every call inside its methods to a function
whose name contains ``rotary`` or ``alibi``, with the condition of each ``if`` around
that call (innermost first), whether such a condition reads an attribute that the
class's ``__init__`` sets from ``layer_idx``, whether the file defines
``apply_rotary_pos_emb``, and whether the class calls a sigmoid (an output gate); and,
from ``configuration_<module>.py``, the defaults listed in ``CONFIG_DEFAULTS``; and
whether each line of ``QUOTED_LINES`` occurs in ``modeling_<module>.py``.
``tests/test_frontier.py`` compares the transcription with this file always, and
re-extracts from the installed source when it is there. It also builds two
configuration classes, ``Llama4TextConfig`` and ``SmolLM3Config``, for several
settings (``attention_chunk_size=None`` and a sliding window among them) and records
their ``no_rope_layers`` and ``layer_types`` (``layer_lists``), the golden vectors of
the chapter's transcriptions ``llama4_layers`` and ``smollm3_layers``. Run it with the
reference environment (transformers 5.24.0):

    /work/ref/bin/python tests/golden/make_frontier_golden.py
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import re
import sys


def position_calls(source: str, class_name: str) -> dict:
    """``{"calls": [{"name", "guards", "per_layer"}], "defines_apply_rotary": bool,
    "sigmoid_gate": bool}`` for ``class_name`` in ``source``. ``per_layer``: a guard
    reads an attribute that ``__init__`` sets from ``layer_idx`` (so layers differ in
    whether they call it)."""
    tree = ast.parse(source)
    defines = any(
        isinstance(n, ast.FunctionDef) and n.name == "apply_rotary_pos_emb"
        for n in tree.body
    )
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name),
        None,
    )
    if cls is None:
        raise LookupError(f"class {class_name} not found")
    # attributes that __init__ sets from the layer index (self.x = ...layer_idx...)
    per_layer = set()
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            from_layer = {"layer_idx"}  # names computed from the layer index
            for node in ast.walk(item):
                if not isinstance(node, ast.Assign):
                    continue
                value = ast.unparse(node.value)
                if not any(name in value for name in from_layer):
                    continue
                for t in node.targets:
                    if isinstance(t, ast.Attribute):
                        per_layer.add(f"self.{t.attr}")
                    elif isinstance(t, ast.Name):
                        from_layer.add(t.id)
    calls = []
    sigmoid = []

    def visit(node, guards):
        if isinstance(node, ast.If):
            for child in node.body:
                visit(child, [ast.unparse(node.test)] + guards)
            for child in node.orelse:
                visit(child, [f"not ({ast.unparse(node.test)})"] + guards)
            return
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "sigmoid":
                sigmoid.append(ast.unparse(node))
            if "rotary" in name.lower() or "alibi" in name.lower():
                call = dict(name=name, guards=guards)
                call["per_layer"] = any(a in g for g in guards for a in per_layer)
                if call not in calls:
                    calls.append(call)
        for child in ast.iter_child_nodes(node):
            visit(child, guards)

    for item in cls.body:
        if isinstance(item, ast.FunctionDef):
            visit(item, [])
    return dict(calls=calls, defines_apply_rotary=defines, sigmoid_gate=bool(sigmoid))


def config_default(source: str, name: str):
    """The default of setting ``name`` in a configuration file's source: a dataclass
    field (``name: type = value``), or ``kwargs.setdefault / kwargs.pop(name, value)``;
    ``"kimi_k2 text model"``: the model type put in place of a ``kimi_k2`` text model.
    """
    if name == "kimi_k2 text model":
        pattern = r'== "kimi_k2":\s*\n\s*self\.text_config\["model_type"\] = "(\w+)"'
        return re.search(pattern, source).group(1)
    for pattern in (
        rf"^\s*{name}: [^=\n]+= (.+?)\s*(?:#.*)?$",
        rf'kwargs\.(?:setdefault|pop)\("{name}", ([^)]+)\)',
    ):
        found = re.search(pattern, source, re.M)
        if found:
            return ast.literal_eval(found.group(1))
    raise LookupError(f"no default for {name}")


# (n_layers, no_rope_layer_interval, attention_chunk_size) and (n_layers, interval,
# use_sliding_window, sliding_window): the settings recorded from the real classes
LLAMA4_CASES = [(48, 4, 8192), (48, 4, None), (10, 3, 16), (7, 2, None)]
SMOLLM3_CASES = [(36, 4, False, None), (36, 4, True, 4096), (12, 3, True, None)]


def layer_lists() -> dict:
    """``no_rope_layers`` and ``layer_types`` of Llama4TextConfig and SmolLM3Config."""
    from transformers import Llama4TextConfig, SmolLM3Config

    out = {"llama4": [], "smollm3": []}
    for n, interval, chunk in LLAMA4_CASES:
        cfg = Llama4TextConfig(
            num_hidden_layers=n,
            no_rope_layer_interval=interval,
            attention_chunk_size=chunk,
        )
        out["llama4"].append(
            dict(
                args=[n, interval, chunk],
                no_rope_layers=list(cfg.no_rope_layers),
                layer_types=list(cfg.layer_types),
            )
        )
    for n, interval, use_sw, window in SMOLLM3_CASES:
        cfg = SmolLM3Config(
            num_hidden_layers=n,
            no_rope_layer_interval=interval,
            use_sliding_window=use_sw,
            sliding_window=window,
        )
        out["smollm3"].append(
            dict(
                args=[n, interval, use_sw, window],
                no_rope_layers=list(cfg.no_rope_layers),
                layer_types=list(cfg.layer_types),
            )
        )
    return out


def main() -> None:
    import transformers

    root = pathlib.Path(transformers.__file__).parent / "models"
    spec = importlib.util.spec_from_file_location(
        "frontier",
        pathlib.Path(__file__).resolve().parents[2]
        / "posenc_lib"
        / "course"
        / "frontier.py",
    )
    frontier = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frontier)
    out = dict(
        transformers=transformers.__version__,
        python=sys.version.split()[0],
        models={},
    )
    for model, row in frontier.MODEL_POSITION.items():
        path = root / row["module"] / f"modeling_{row['module']}.py"
        found = position_calls(path.read_text(), row["cls"])
        out["models"][model] = dict(module=row["module"], cls=row["cls"], **found)
    out["config_defaults"] = {}
    for module, name in frontier.CONFIG_DEFAULTS:
        path = root / module / f"configuration_{module}.py"
        value = config_default(path.read_text(), name)
        out["config_defaults"][f"{module}: {name}"] = value
    out["quoted_lines"] = {}
    for module, lines in frontier.QUOTED_LINES.items():
        path = root / module / f"modeling_{module}.py"
        present = {line.strip() for line in path.read_text().splitlines()}
        out["quoted_lines"][module] = {line: line in present for line in lines}
    out["layer_lists"] = layer_lists()
    dest = pathlib.Path(__file__).with_name("frontier_transformers.json")
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest} (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()

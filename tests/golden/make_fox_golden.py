"""Produce tests/golden/fox_fla.json from flash-linear-attention's naive FoX.

The reference is ``naive_forgetting_attn`` in ``fla/ops/forgetting_attn/naive.py``
(package ``fla-core``; the FoX authors' README points to it as the second
implementation). The package needs triton at import, so only that one file is loaded,
by path; it needs torch and einops. Run it outside the course's environment:

    pip download --no-deps -d /tmp/ref_fox_dl fla-core einops
    pip install --no-deps --target /tmp/ref_fox /tmp/ref_fox_dl/*.whl
    PYTHONPATH=/tmp/ref_fox python tests/golden/make_fox_golden.py

The gates are made as fla's layer makes them (``fla/layers/forgetting_attn.py``:
``f = F.logsigmoid(self.f_proj(hidden_states).float())``, ``f_proj = nn.Linear(hidden,
num_heads, bias=True)``), from a stored ``x``, weight and bias, so the test can load the
same weight into ``pl.ForgettingAttention`` and compare the attention outputs. fla's
layout is ``(b, t, h, d)`` and ``(b, t, h)`` for the log gates; the course's is
``(b, h, t, d)`` and ``(b, h, t)``: ``tests/test_fox.py`` transposes explicitly.

One case sets q = 0 and v = the identity (d = t): the output rows are then fla's
attention weights themselves, ``softmax_j(D_ij)``, which pins the bias up to the
per-row constant that a softmax ignores.
"""

import importlib.metadata
import importlib.util
import json
import pathlib
import sys

import torch
import torch.nn.functional as F


def rounded(t: torch.Tensor, digits: int = 6) -> torch.Tensor:
    """``t`` rounded to ``digits`` significant digits, in float64: inputs are rounded
    before the reference runs, so the JSON stays small and holds the numbers it ran on
    (up to fla's cast to float32)."""
    values = [float(f"{v:.{digits}g}") for v in t.flatten().tolist()]
    return torch.tensor(values, dtype=torch.float64).view(t.shape)


def as_list(t: torch.Tensor) -> list:
    return rounded(t, 9).tolist()


def load_naive():
    root = next(p for p in map(pathlib.Path, sys.path) if (p / "fla").is_dir())
    path = root / "fla" / "ops" / "forgetting_attn" / "naive.py"
    spec = importlib.util.spec_from_file_location("fla_naive_fox", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_forgetting_attn


# name, batch, length, heads, head dim, model dim, gate bias offset (log-odds)
CASES = [
    ("forget_hard", 2, 9, 3, 4, 12, -2.0),  # gates near 0.1: steep decay
    ("forget_soft", 2, 9, 3, 4, 12, 4.0),  # gates near 0.98: long memory
    ("long", 1, 40, 2, 8, 16, 1.0),
]


def main() -> None:
    naive = load_naive()
    g = torch.Generator().manual_seed(2025)
    out = []
    for name, b, t, h, d, dm, offset in CASES:
        x = rounded(torch.randn(b, t, dm, generator=g))
        weight = rounded(torch.randn(h, dm, generator=g) / dm**0.5)
        bias = rounded(offset + torch.randn(h, generator=g))
        # fla's layer: f = F.logsigmoid(self.f_proj(hidden_states).float())
        log_f = F.logsigmoid(F.linear(x, weight, bias).float())  # (b, t, h)
        q, k, v = (rounded(torch.randn(b, t, h, d, generator=g)) for _ in range(3))
        o = naive(q, k, v, log_f)  # (b, t, h, d), float32 inside
        out.append(
            {
                "name": name,
                "x": as_list(x),
                "gate_weight": as_list(weight),
                "gate_bias": as_list(bias),
                "log_f": as_list(log_f),
                "q": as_list(q),
                "k": as_list(k),
                "v": as_list(v),
                "out": as_list(o),
            }
        )
    # weights: q = 0, v = identity, so row i of the output is softmax_j(D_ij)
    b, t, h = 2, 12, 3
    log_f = rounded(F.logsigmoid(3 * torch.randn(b, t, h, generator=g)))  # (b, t, h)
    q = torch.zeros(b, t, h, t)
    v = torch.eye(t).expand(b, h, t, t).permute(0, 2, 1, 3).contiguous()  # (b, t, h, t)
    weights = naive(q, q, v, log_f)  # (b, i, h, j)
    out.append(
        {"name": "weights", "log_f": as_list(log_f), "weights": as_list(weights)}
    )
    doc = {
        "source": f"fla-core {importlib.metadata.version('fla-core')}, torch "
        f"{torch.__version__}: fla/ops/forgetting_attn/naive.py naive_forgetting_attn "
        "(computes in float32)",
        "layout": "fla's: x (b, t, D), q/k/v/out (b, t, h, d), log_f (b, t, h), "
        "weights (b, i, h, j)",
        "cases": out,
    }
    path = pathlib.Path(__file__).with_name("fox_fla.json")
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {path} ({len(out)} cases, {path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

"""Produce tests/golden/wall_fla.json from flash-linear-attention's own reference for
Wall attention, ``naive_wall_attn`` in ``fla/ops/wall_attn/naive.py``.

fla needs triton (and a GPU) for everything but that file, so the file is run from a
checkout of the repository, by path (commit bc3b101dcb713ddc5bd8924b66754eb68b5ccf89,
2026-08-22), with the two modules it imports supplied: ``fla.ops.utils.constant``,
loaded by path from the same checkout (``RCP_LN2``), and ``fla.ops.utils.cumsum``,
whose ``chunk_global_cumsum`` is a triton kernel, replaced by what that kernel
computes for ``[B, T, H, K]`` input (``chunk_global_cumsum_vector``): the cumulative
sum over T, times ``scale``, in float32. The gates are made as fla's layer makes them
(``fla/layers/wall_attn.py``, ``WallAttention.forward``: ``g =
F.logsigmoid(self.g_proj(hidden_states).float())``, ``g_proj = nn.Linear(hidden,
hidden, bias=True)``, split per head as ``'... (h d) -> ... h d'``), from a stored
``x``, weight and bias, so the test loads the same weight into ``pl.WallAttention``.
fla's layout is ``[B, T, H, K]``; the course's ``(b, h, t, d)``: ``tests/test_wall.py``
transposes explicitly. Made with torch 2.13.0 (CPU), in /work/ref:

    git -C <fla checkout> checkout bc3b101dcb713ddc5bd8924b66754eb68b5ccf89
    /work/ref/bin/python tests/golden/make_wall_golden.py --fla <fla checkout>
"""

import argparse
import importlib.util
import json
import pathlib
import sys
import types

import torch
import torch.nn.functional as F

OUT = pathlib.Path(__file__).with_name("wall_fla.json")
COMMIT = "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"


def f32(x: torch.Tensor) -> list:
    """A float32 tensor as nested lists of 9 significant digits (exact in float32)."""

    def short(a):
        return [short(e) for e in a] if isinstance(a, list) else float(f"{a:.9g}")

    return short(x.detach().float().tolist())


# name, batch, length, heads, head dim, gate bias (8: fla's init, near plain attention)
CASES = [
    ("init", 2, 9, 2, 4, 8.0),
    ("strong", 2, 9, 2, 4, -1.0),  # each token keeps about a quarter of a channel
    ("long", 1, 48, 2, 8, 0.0),  # G spans tens of nats: far keys decay to nothing
]


def load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def chunk_global_cumsum(s, reverse=False, cu_seqlens=None, scale=None, **kwargs):
    """What fla's triton ``chunk_global_cumsum`` computes for ``[B, T, H, K]`` input
    without ``cu_seqlens`` (the only use here): the sum over T, times ``scale``."""
    assert not reverse and cu_seqlens is None and s.dim() == 4
    out = s.float().cumsum(1)
    return out if scale is None else out * scale


def naive_from(root: pathlib.Path):
    for name in ("fla", "fla.ops", "fla.ops.utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    load(root / "fla" / "ops" / "utils" / "constant.py", "fla.ops.utils.constant")
    cumsum = types.ModuleType("fla.ops.utils.cumsum")
    cumsum.chunk_global_cumsum = chunk_global_cumsum
    sys.modules["fla.ops.utils.cumsum"] = cumsum
    naive = load(root / "fla" / "ops" / "wall_attn" / "naive.py", "fla_wall_naive")
    return naive.naive_wall_attn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fla", required=True, help="a checkout of fla at COMMIT")
    naive_wall_attn = naive_from(pathlib.Path(parser.parse_args().fla))
    cases = {}
    for seed, (name, b, n, h, d, bias) in enumerate(CASES):
        g = torch.Generator().manual_seed(seed)
        hidden = h * d
        x = torch.randn(b, n, hidden, generator=g)
        weight = torch.randn(hidden, hidden, generator=g) / hidden**0.5
        gate_bias = bias + 0.5 * torch.randn(hidden, generator=g)
        q, k, v = (torch.randn(b, n, h, d, generator=g) for _ in range(3))  # [B,T,H,K]
        # fla's layer: g = logsigmoid(g_proj(x).float()), '... (h d) -> ... h d'
        log_g = F.logsigmoid(F.linear(x, weight, gate_bias).float()).view(b, n, h, d)
        o = naive_wall_attn(q, k, v, log_g, scale=d**-0.5)  # [B, T, H, V]
        cases[name] = {
            "x": f32(x),
            "g_proj_weight": f32(weight),
            "g_proj_bias": f32(gate_bias),
            "q": f32(q),
            "k": f32(k),
            "v": f32(v),
            "g": f32(log_g),
            "o": f32(o),
        }
    doc = {
        "source": "fla-org/flash-linear-attention fla/ops/wall_attn/naive.py "
        f"naive_wall_attn (commit {COMMIT}); gates as fla/layers/wall_attn.py",
        "torch": torch.__version__,
        "layout": "[B, T, H, K]",
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

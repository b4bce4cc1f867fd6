"""Produce tests/golden/path_fla.json from flash-linear-attention's naive PaTH.

The reference is ``naive_path_attn`` in ``fla/ops/path_attn/naive.py`` (package
``fla-core`` 0.6.0; the file is identical to the one at commit bc3b101d of
github.com/fla-org/flash-linear-attention). The package needs triton at import, so
only that one file is loaded, by path; it needs torch and einops. Run it outside
the course's environment:

    pip download --no-deps -d /tmp/ref_path_dl fla-core
    (cd /tmp/ref_path && unzip -o /tmp/ref_path_dl/fla_core-0.6.0-py3-none-any.whl)
    PYTHONPATH=/tmp/ref_path /work/ref/bin/python tests/golden/make_path_golden.py

``naive_path_attn(q, k, v, w, beta, g, scale, chunk_size=64)`` takes fla's layout
``(b, t, h, d)``, ``beta`` ``(b, t, h)`` and log gates ``g`` ``(b, t, h)``, and
computes ``softmax(scale * (q_i^T H_i ... H_{j+1} k_j + G_i - G_j))`` with ``G`` the
cumulative sum of ``g``, in float32, chunk by chunk (the UT transform). Without a
gate fla's tests pass ``g = 0``; so do the cases "plain" below. Cases "gated" pass a
gate: fla multiplies it by the scale (the course does not: the test maps
``log_f = scale * g``).

Case "layer": w and beta made as fla's ``PaTHAttention`` layer makes them with
``use_low_rank_w=False, use_w_shortconv=False`` (``fla/layers/path_attn.py``):
``w = l2_norm(w_proj(x))`` per head, ``beta = bt_proj(x).sigmoid() * 2``, from a
stored x and weights, so the test can load them into ``pl.PaTHAttention``.
"""

import importlib.metadata
import importlib.util
import json
import pathlib
import sys

import torch
import torch.nn.functional as F


def rounded(t: torch.Tensor, digits: int = 6) -> torch.Tensor:
    """``t`` rounded to ``digits`` significant digits, in float64 (inputs are rounded
    before the reference runs, so the JSON holds the numbers it ran on)."""
    values = [float(f"{v:.{digits}g}") for v in t.flatten().tolist()]
    return torch.tensor(values, dtype=torch.float64).view(t.shape)


def as_list(t: torch.Tensor) -> list:
    return rounded(t, 9).tolist()


def load_naive():
    root = next(p for p in map(pathlib.Path, sys.path) if (p / "fla").is_dir())
    path = root / "fla" / "ops" / "path_attn" / "naive.py"
    spec = importlib.util.spec_from_file_location("fla_naive_path", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_path_attn


# name, batch, length, heads, head dim, beta range, unit w, gated
CASES = [
    ("plain", 2, 9, 2, 4, (0.0, 2.0), True, False),
    ("plain_near_2", 1, 12, 2, 8, (1.9, 2.0), True, False),
    ("plain_raw_w", 1, 10, 1, 4, (0.2, 1.0), False, False),  # w as given, not unit
    ("plain_two_chunks", 1, 70, 1, 8, (0.0, 2.0), True, False),  # crosses 64
    ("gated", 2, 11, 2, 4, (0.0, 2.0), True, True),
]


def main() -> None:
    naive = load_naive()
    g = torch.Generator().manual_seed(2505)
    out = []
    for name, b, t, h, d, (lo, hi), unit, gated in CASES:
        q, k, v = (rounded(torch.randn(b, t, h, d, generator=g)) for _ in range(3))
        w = torch.randn(b, t, h, d, generator=g)
        w = rounded(F.normalize(w, dim=-1) if unit else 0.7 * w)
        beta = rounded(lo + (hi - lo) * torch.rand(b, t, h, generator=g))
        if gated:
            gate = rounded(F.logsigmoid(2 + torch.randn(b, t, h, generator=g)))
        else:
            gate = torch.zeros(b, t, h)
        scale = d**-0.5
        o = naive(q, k, v, w, beta, gate, scale)  # (b, t, h, d)
        case = {"name": name, "q": q, "k": k, "v": v, "w": w, "beta": beta}
        case.update({"g": gate, "scale": scale, "out": o})
        out.append(
            {key: as_list(x) if torch.is_tensor(x) else x for key, x in case.items()}
        )
    # the layer: w and beta from x, as fla's PaTHAttention (no low rank, no conv)
    b, t, h, d = 2, 8, 2, 4
    dm = h * d
    x = rounded(torch.randn(b, t, dm, generator=g))
    w_weight = rounded(torch.randn(dm, dm, generator=g) / dm**0.5)
    bt_weight = rounded(torch.randn(h, dm, generator=g) / dm**0.5)
    bt_bias = rounded(torch.randn(h, generator=g))
    w = F.linear(x.float(), w_weight.float()).view(b, t, h, d)
    w = F.normalize(w, dim=-1)  # fla: l2_norm(w, output_dtype=torch.float32)
    beta = F.linear(x.float(), bt_weight.float(), bt_bias.float()).sigmoid() * 2
    q, k, v = (rounded(torch.randn(b, t, h, d, generator=g)) for _ in range(3))
    o = naive(q, k, v, w, beta, torch.zeros(b, t, h), d**-0.5)
    layer = {"name": "layer", "x": x, "w_weight": w_weight, "bt_weight": bt_weight}
    layer.update({"bt_bias": bt_bias, "w": w, "beta": beta, "q": q, "k": k, "v": v})
    layer["out"] = o
    out.append(
        {key: as_list(x) if torch.is_tensor(x) else x for key, x in layer.items()}
    )
    doc = {
        "source": "fla-core 0.6.0 (wheel unzipped, not installed: it needs triton), "
        f"torch {torch.__version__}, einops {importlib.metadata.version('einops')}: "
        "fla/ops/path_attn/naive.py naive_path_attn (float32, chunk_size=64)",
        "layout": "fla's: q/k/v/w/out (b, t, h, d), beta and g (b, t, h)",
        "cases": out,
    }
    path = pathlib.Path(__file__).with_name("path_fla.json")
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {path} ({len(out)} cases, {path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

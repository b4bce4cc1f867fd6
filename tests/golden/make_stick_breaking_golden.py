"""Produce tests/golden/stick_breaking_fla.json from two independent references.

1. flash-linear-attention's ``naive_stickbreaking_attn`` in
   ``fla/ops/stickbreaking_attn/naive.py`` (package ``fla-core``): log space, in float64
   for float64 inputs. The package needs triton at import, so only that one file is
   loaded, by path (it needs torch only).
2. The authors' reference ``stickbreaking(q, k, v, mask, cum_weight)`` in
   ``stickbreaking_attention/sb_ref.py`` of github.com/shawntan/stickbreaking-attention,
   called as their kernel test calls it (``ref_fwd`` in ``tests/test_attn.py``:
   ``mask = triu(0)`` or ``triu(1)`` with ``attend_current``, ``cum_weight =
   tril(-1)``, then ``o + rem[..., None] * v``). It computes in float32 whatever the
   input dtype. Optional: the script checks that it agrees with fla and stores its
   output with the leftover stick added.

Run it outside the course's environment::

    pip download --no-deps -d /tmp/ref_sb_dl fla-core
    pip install --no-deps --target /tmp/ref_sb /tmp/ref_sb_dl/*.whl
    git clone https://github.com/shawntan/stickbreaking-attention /tmp/ref_sb_authors
    PYTHONPATH=/tmp/ref_sb python tests/golden/make_stick_breaking_golden.py \\
        --authors /tmp/ref_sb_authors/stickbreaking_attention/sb_ref.py

Layouts: fla's q, k, v, o are ``(b, t, h, d)`` and rem ``(b, t, h)``; the authors'
``(b, h, t, d)``. The JSON stores fla's layout; ``tests/test_stick_breaking.py``
transposes explicitly. Both use ``scale = 1/sqrt(d)`` by default, as stored.

One case sets v to the identity (d_v = t): the output rows are then the attention
weights themselves, which pins ``A_ij`` entry by entry.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import pathlib
import sys

import torch


def rounded(t: torch.Tensor, digits: int = 6) -> torch.Tensor:
    """``t`` rounded to ``digits`` significant digits, in float64: inputs are rounded
    before the references run, so the JSON holds the numbers they ran on."""
    values = [float(f"{v:.{digits}g}") for v in t.flatten().tolist()]
    return torch.tensor(values, dtype=torch.float64).view(t.shape)


def as_list(t: torch.Tensor) -> list:
    return rounded(t.double(), 12).tolist()


def load(path: pathlib.Path, name: str, attr: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attr)


def load_fla():
    root = next(p for p in map(pathlib.Path, sys.path) if (p / "fla").is_dir())
    path = root / "fla" / "ops" / "stickbreaking_attn" / "naive.py"
    return load(path, "fla_naive_sb", "naive_stickbreaking_attn")


def authors_out(stickbreaking, q, k, v, attend_current):
    """The authors' ``ref_fwd``: o + rem * v, in their (b, h, t, d) layout."""
    t = q.shape[1]
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # (b, h, t, d)
    cm = torch.ones(t, t, dtype=q.dtype).tril(-1)
    mask = torch.ones(t, t).triu(1 if attend_current else 0).bool()  # True = hidden
    o, rem = stickbreaking(q, k, v, mask, cm)
    return (o + rem[..., None] * v).transpose(1, 2)  # (b, t, h, d)


# name, batch, length, heads, head dim, logit gain, attend_current
CASES = [
    ("plain", 2, 9, 3, 4, 1.0, False),
    ("attend_current", 2, 9, 3, 4, 1.0, True),
    ("saturated", 1, 12, 2, 4, 6.0, False),  # logits of tens: beta near 0 or 1
    ("long", 1, 64, 2, 8, 2.0, False),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--authors", type=pathlib.Path, help="path to their sb_ref.py")
    args = parser.parse_args()
    naive = load_fla()
    theirs = args.authors and load(args.authors, "authors_sb_ref", "stickbreaking")
    g = torch.Generator().manual_seed(2024)
    out = []
    for name, b, t, h, d, gain, attend_current in CASES:
        q = rounded(gain * torch.randn(b, t, h, d, generator=g))
        k = rounded(gain * torch.randn(b, t, h, d, generator=g))
        v = rounded(torch.randn(b, t, h, d, generator=g))
        o, rem = naive(q, k, v, attend_current=attend_current)  # float64 inside
        case = {
            "name": name,
            "attend_current": attend_current,
            **{key: as_list(x) for key, x in (("q", q), ("k", k), ("v", v))},
            "out": as_list(o),
            "rem": as_list(rem),
        }
        if theirs:
            with_rem = authors_out(theirs, q, k, v, attend_current)
            mine = o + rem[..., None] * v
            err = (with_rem - mine).abs().max().item()
            assert err < 1e-5, f"{name}: authors vs fla differ by {err:.3g}"
            case["out_plus_rem_v_authors"] = as_list(with_rem)
        out.append(case)
    # weights: v = identity (d_v = t), so row i of the output is A_i.
    b, t, h, d = 2, 10, 2, 4
    q = rounded(3 * torch.randn(b, t, h, d, generator=g))
    k = rounded(torch.randn(b, t, h, d, generator=g))
    v = torch.eye(t, dtype=torch.float64)[None, :, None, :].expand(b, t, h, t)
    for attend_current in (False, True):
        weights, rem = naive(q, k, v.contiguous(), attend_current=attend_current)
        out.append(
            {
                "name": f"weights_attend_current_{attend_current}",
                "attend_current": attend_current,
                "q": as_list(q),
                "k": as_list(k),
                "weights": as_list(weights),  # (b, i, h, j)
                "rem": as_list(rem),
            }
        )
    doc = {
        "source": f"fla-core {importlib.metadata.version('fla-core')}, torch "
        f"{torch.__version__}: fla/ops/stickbreaking_attn/naive.py "
        "naive_stickbreaking_attn (float64 inputs, computed in float64)"
        + (
            "; out_plus_rem_v_authors from shawntan/stickbreaking-attention "
            "stickbreaking_attention/sb_ref.py stickbreaking (float32 inside), "
            "checked against fla to 1e-5"
            if theirs
            else ""
        ),
        "layout": "fla's: q/k/v/out (b, t, h, d), rem (b, t, h), weights (b, i, h, j)",
        "scale": "1/sqrt(d), both references' default",
        "cases": out,
    }
    path = pathlib.Path(__file__).with_name("stick_breaking_fla.json")
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {path} ({len(out)} cases, {path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

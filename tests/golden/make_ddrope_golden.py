"""Produce tests/golden/ddrope_mamba3.json from the Mamba-3 authors' reference, the
functions ``mamba3_siso_fwd_ref`` (chunked, parallel) and ``mamba3_siso_step_ref``
(recurrent, one token at a time) with their helper ``_segsum``, in
``tests/ops/triton/test_mamba3_siso.py`` of github.com/state-spaces/mamba (commit
e9594ce1c732d97440f0332fdc43170a2294dbfa, 2026-07-23; flash-linear-attention's
``fla/layers/mamba3.py`` calls the kernels those functions check).

The test file imports triton and the CUDA kernels at its top, so the three functions
are taken out of its source with ``ast`` and run verbatim, with ``torch``, ``F``,
``math``, ``Optional``, ``Tuple`` and einops' ``repeat`` (einops 0.8.2) in their
namespace. Made with torch 2.13.0 (CPU), in /work/ref:

    pip download --no-deps -d /tmp/dl einops
    pip install --no-deps --target /tmp/einops /tmp/dl/einops-*.whl
    git -C <mamba checkout> show e9594ce:tests/ops/triton/test_mamba3_siso.py > ref.py
    PYTHONPATH=/tmp/einops /work/ref/bin/python tests/golden/make_ddrope_golden.py \\
        --reference ref.py

**Reading the rotation out of the layer.** With no decay (``ADT = 0``), ``Trap``
large (``sigmoid = 1`` in float32, so the shifted term ``DT (1 - trap)`` is 0 and
each key's weight is its ``DT``), no biases, ``D`` or ``Z``, and values that are the
identity (``V[s] = e_s``), the reference's output is ``out[t, h, s] = (R(phi_t) C_t) .
(R(phi_s) B_s) * DT_s`` for ``s <= t``, 0 after: the rotated query-key products
themselves. The angle logits are shared by the heads, as ``Mamba3`` expands them.
Recorded: the inputs, both functions' outputs and final angle states.
"""

import argparse
import ast
import json
import math
import pathlib
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from einops import repeat

OUT = pathlib.Path(__file__).with_name("ddrope_mamba3.json")
COMMIT = "e9594ce1c732d97440f0332fdc43170a2294dbfa"
NAMES = {"_segsum", "mamba3_siso_fwd_ref", "mamba3_siso_step_ref"}


def f32(x: torch.Tensor) -> list:
    """A float32 tensor as nested lists of 9 significant digits (exact in float32)."""

    def short(a):
        return [short(e) for e in a] if isinstance(a, list) else float(f"{a:.9g}")

    return short(x.detach().float().tolist())


def reference(path: pathlib.Path) -> dict:
    source = path.read_text()
    ns = {"torch": torch, "F": F, "math": math, "Optional": Optional}
    ns.update({"Tuple": Tuple, "repeat": repeat})
    for node in ast.parse(source).body:
        if getattr(node, "name", None) in NAMES:
            code = ast.get_source_segment(source, node)
            exec(compile(code, "<test_mamba3_siso.py>", "exec"), ns)
    assert NAMES <= set(ns), NAMES - set(ns)
    return ns


def case(ns, seed, b=2, n=8, h=2, d=8, angles=2, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, n, h, d, generator=g)  # C, (batch, seqlen, heads, d_state)
    k = torch.randn(b, n, h, d, generator=g)  # B
    logits = spread * torch.randn(b, n, angles, generator=g)  # shared by the heads
    dt = F.softplus(torch.randn(b, h, n, generator=g))  # (batch, heads, seqlen)
    v = torch.eye(n).view(1, n, 1, n).expand(b, n, h, n).contiguous()  # V[s] = e_s
    zeros = torch.zeros(h, d)
    args = dict(
        Q=q,
        K=k,
        V=v,
        ADT=torch.zeros(b, h, n),
        DT=dt,
        Trap=torch.full((b, h, n), 30.0),
        Q_bias=zeros,
        K_bias=zeros,
        Angles=logits[:, :, None].expand(b, n, h, angles).contiguous(),
    )
    out, (phi, *_) = ns["mamba3_siso_fwd_ref"](**args)
    step, (phi_step, *_) = ns["mamba3_siso_step_ref"](**args)
    return {
        "q": f32(q),
        "k": f32(k),
        "angle_logits": f32(logits),
        "dt": f32(dt),
        "out": f32(out),  # (b, t, h, s)
        "final_angles": f32(phi),  # (b, h, p), reduced mod 2 pi
        "out_step": f32(step),
        "final_angles_step": f32(phi_step),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True, help="test_mamba3_siso.py")
    ns = reference(pathlib.Path(parser.parse_args().reference))
    doc = {
        "source": "state-spaces/mamba tests/ops/triton/test_mamba3_siso.py "
        f"mamba3_siso_fwd_ref, mamba3_siso_step_ref (commit {COMMIT})",
        "torch": torch.__version__,
        "layout": "q, k (b, t, h, d); angle_logits (b, t, p); dt (b, h, t)",
        "cases": {
            "small": case(ns, 0),
            "wide_angles": case(ns, 1, n=12, d=8, angles=4, spread=3.0),
            "half_rotated": case(ns, 2, n=6, d=12, angles=3),
        },
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

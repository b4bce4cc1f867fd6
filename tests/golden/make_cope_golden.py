"""Produce tests/golden/cope_ref.json from two independent CoPE implementations.

1. **x-transformers** (Phil Wang), class ``CoPE`` in
   ``x_transformers/x_transformers.py`` ("Appendix B of arXiv:2405.18719"): the bias
   ``cope(q, sim)`` that ``Attend.forward`` adds to the scaled, masked scores. Install
   it outside the course's environment (it needs einx, einops, loguru, frozendict,
   torch-einops-utils; torch comes from the course's venv):

       pip download --no-deps -d /tmp/ref_cope_dl x-transformers einx einops loguru \\
           frozendict torch-einops-utils
       pip install --no-deps --target /tmp/ref_cope /tmp/ref_cope_dl/*.whl

2. **The authors' training code**, ``ContextPosSelfAttn`` in
   ``projects/cope/src/cope/context_position.py`` of github.com/facebookresearch/RAM
   (MIT licence; not on PyPI, so the file is loaded by path from a checkout): the whole
   attention output and weights, with its default scaling (``--no-cope-nodiv``: the
   sum ``q.k + q.e[p]`` divided by sqrt(d)) and with ``--cope-nodiv`` (only ``q.k``
   divided, the paper's appendix form). Then run

       RAM_COPE=/path/to/RAM/projects/cope/src/cope/context_position.py \\
           PYTHONPATH=/tmp/ref_cope .venv/bin/python tests/golden/make_cope_golden.py

Conventions, mapped in ``tests/test_cope.py``: x-transformers' table is ``(max_pos,
d)`` like the course's, and it masks with ``-finfo.max`` instead of ``-inf`` (both
give a gate of 0). The authors' table is ``(1, d, npos)`` (the course's transposed);
their tensors are ``(B * H, L, d)`` with the heads folded into the batch and their mask
``(B * H, L, L)`` holds 1.0 / 0.0.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import types

import torch


def rounded(t: torch.Tensor, digits: int = 6) -> torch.Tensor:
    """``t`` rounded to ``digits`` significant digits, in float64: the inputs are
    rounded before the references run, so the JSON holds the numbers they ran on."""
    values = [float(f"{v:.{digits}g}") for v in t.flatten().tolist()]
    return torch.tensor(values, dtype=torch.float64).view(t.shape)


def as_list(t: torch.Tensor) -> list:
    return rounded(t.double(), 12).tolist()


def xtransformers_cases(g: torch.Generator) -> list[dict]:
    from x_transformers.x_transformers import CoPE

    out = []
    # name, b, h, i, j, d, max_pos, logit scale (large: gates near 0 or 1)
    for name, b, h, i, j, d, max_pos, scale in [
        ("xt_causal", 2, 3, 10, 10, 8, 11, 1.0),  # no clamping: max_pos = n + 1
        ("xt_clamped", 1, 2, 12, 12, 4, 5, 3.0),  # p_ij beyond 4 clamps
        ("xt_cache", 2, 2, 4, 9, 8, 10, 1.0),  # 4 queries, the last of 9 keys
    ]:
        q = rounded(torch.randn(b, h, i, d, generator=g, dtype=torch.float64))
        sim = rounded(scale * torch.randn(b, h, i, j, generator=g, dtype=torch.float64))
        emb = rounded(torch.randn(max_pos, d, generator=g, dtype=torch.float64))
        # Attend.forward: causal_mask = ones(i, j).triu(j - i + 1), filled with -max
        future = torch.ones(i, j, dtype=torch.bool).triu(j - i + 1)
        masked = sim.masked_fill(future, -torch.finfo(sim.dtype).max)
        cope = CoPE(dim=d, heads=h, max_pos=max_pos).double()
        with torch.no_grad():
            cope.pos_emb.copy_(emb)
            bias = cope(q, masked)  # (b, h, i, j)
        out.append(
            {
                "name": name,
                "source": "x-transformers",
                "q": as_list(q),
                "scores": as_list(sim),
                "pos_emb": as_list(emb),
                "bias": as_list(bias),
            }
        )
    return out


def load_ram(path: str):
    spec = importlib.util.spec_from_file_location("ram_context_position", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ContextPosSelfAttn


def ram_cases(g: torch.Generator, path: str) -> list[dict]:
    attn_cls = load_ram(path)
    out = []
    # name, b, h, n, d, npos (None: block_size + 1), nodiv, padded keys in row 0
    for name, b, h, n, d, npos, nodiv, pad in [
        ("ram_div", 2, 2, 9, 8, None, False, 0),
        ("ram_nodiv", 2, 2, 9, 8, None, True, 0),
        ("ram_nodiv_clamped_padded", 2, 2, 10, 4, 4, True, 3),
    ]:
        q, k, v = (
            rounded(torch.randn(b, h, n, d, generator=g, dtype=torch.float64))
            for _ in range(3)
        )
        npos_ = n + 1 if npos is None else npos
        emb = rounded(torch.randn(npos_, d, generator=g, dtype=torch.float64))
        allowed = torch.ones(b, n, n, dtype=torch.bool).tril()  # (b, i, j)
        allowed[0, :, :pad] = False  # the first `pad` keys of row 0 are padding
        allowed[0, :pad, :pad] |= torch.eye(pad, dtype=torch.bool)  # see themselves
        cfg = types.SimpleNamespace(
            drop=0.0, cope_layers=1, pos_emb="cope", cope_npos=npos, block_size=n,
            head_dim=d, cope_val_gates=False, cope_sep_key=False, cope_nodiv=nodiv,
        )  # fmt: skip
        attn = attn_cls(cfg, 0).double().eval()
        with torch.no_grad():
            attn.pos_emb.copy_(emb.T[None])  # (1, d, npos)
            fold = (b * h, n, d)  # heads folded into the batch, as MultiHeadAttn does
            mask = allowed.double().repeat_interleave(h, dim=0)  # (b * h, n, n)
            o = attn(
                q.reshape(fold), k.reshape(fold), k.reshape(fold), v.reshape(fold),
                attn_mask=mask,
            )  # fmt: skip
        out.append(
            {
                "name": name,
                "source": "facebookresearch/RAM",
                "nodiv": nodiv,
                "q": as_list(q),
                "k": as_list(k),
                "v": as_list(v),
                "pos_emb": as_list(emb),
                "allowed": allowed.tolist(),
                "out": as_list(o.view(b, h, n, d)),
                "weights": as_list(attn.attn_saved.view(b, h, n, n)),
            }
        )
    return out


def main() -> None:
    ram_path = os.environ.get("RAM_COPE")
    if not ram_path:
        raise SystemExit(
            "set RAM_COPE to projects/cope/src/cope/context_position.py of a "
            "facebookresearch/RAM checkout"
        )
    g = torch.Generator().manual_seed(2024)
    cases = xtransformers_cases(g) + ram_cases(g, ram_path)
    doc = {
        "source": (
            f"x-transformers {importlib.metadata.version('x-transformers')} "
            "(x_transformers.x_transformers.CoPE); facebookresearch/RAM "
            "projects/cope/src/cope/context_position.py (ContextPosSelfAttn), torch "
            f"{torch.__version__}, float64"
        ),
        "layout": (
            "q/k/v/out (b, h, n, d); scores/bias/weights (b, h, i, j); pos_emb "
            "(n_positions, d); allowed (b, i, j), True = may attend. x-transformers "
            "cases: causal in token order, queries the last i of j keys; scores "
            "unmasked (the reference masked them with -finfo.max)"
        ),
        "cases": cases,
    }
    path = pathlib.Path(__file__).with_name("cope_ref.json")
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {path} ({len(cases)} cases, {path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

"""Produce tests/golden/tener_authors.json from the authors' TENER attention.

Reference: ``RelativeMultiHeadAttn`` and ``RelativeSinusoidalPositionalEmbedding`` of
fastnlp/TENER ``modules/relative_transformer.py`` (commit 7a3859e), copied into a file
(with ``forward`` also returning the pre-softmax scores) that REF points at:

    REF=/path/to/tener_relative_transformer_excerpt.py \\
        python tests/golden/make_tener_golden.py

Setting: unscaled (the default, ``scale=False``), no padding, float64 weights. The
authors' code differs from the paper's Eq. (17) (tensor2tensor sinusoids, R_{j-t} in the
query terms, an extra k_j . R_{t-j} term); ``posenc_lib``'s ``TENER(variant="code")``
reproduces it, and ``tests/test_tener.py`` compares the two.
"""

import importlib.util
import json
import os
import pathlib

import torch

BSZ, LEN, D_MODEL, N_HEAD = 2, 6, 16, 2


def main() -> None:
    spec = importlib.util.spec_from_file_location("tener_ref", os.environ["REF"])
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    torch.manual_seed(0)
    attn = ref.RelativeMultiHeadAttn(D_MODEL, N_HEAD, dropout=0.0).double().eval()
    x = torch.randn(BSZ, LEN, D_MODEL, dtype=torch.float64)
    mask = torch.ones(BSZ, LEN, dtype=torch.long)
    with torch.no_grad():
        out, scores = attn(x, mask)
    res = {
        "source": (
            "fastnlp/TENER modules/relative_transformer.py @ "
            "7a3859e79b9f29a59978d0040ed570dc7470cf56"
        ),
        "n_head": N_HEAD,
        "x": x.tolist(),
        "qv_linear": attn.qv_linear.weight.tolist(),
        "r_r_bias": attn.r_r_bias.tolist(),
        "r_w_bias": attn.r_w_bias.tolist(),
        "pos_embed": attn.pos_embed(mask).tolist(),
        "scores": scores.tolist(),
        "out": out.tolist(),
    }
    path = pathlib.Path(__file__).with_name("tener_authors.json")
    path.write_text(json.dumps(res))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

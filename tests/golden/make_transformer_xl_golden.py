"""Produce tests/golden/transformer_xl_authors.json from the authors'
Transformer-XL attention.

Reference: ``RelPartialLearnableMultiHeadAttn`` and ``PositionalEmbedding`` of
kimiyoung/transformer-xl ``pytorch/mem_transformer.py`` (commit 81b1b19). That file
cannot be imported on its own (it needs the repository's ``utils``), so copy those two
classes (plus ``RelMultiHeadAttn._rel_shift``, and have ``forward`` also return
``attn_vec`` before ``o_net``) into a file and point REF at it:

    REF=/path/to/xl_mem_transformer_excerpt.py \\
        python tests/golden/make_transformer_xl_golden.py

Setting: no memory, causal mask as in ``MemTransformerLM._forward``, R at offsets
klen-1 .. 0, float64, seeded random weights and biases. ``tests/test_transformer_xl.py``
maps the authors' [sin | cos] layout of R onto posenc_lib's interleaved one by permuting
W_R's columns.
"""

import importlib.util
import json
import os
import pathlib

import torch

QLEN, BSZ, N_HEAD, D_HEAD = 7, 2, 2, 4
D_MODEL = N_HEAD * D_HEAD


def main() -> None:
    spec = importlib.util.spec_from_file_location("xl_ref", os.environ["REF"])
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    torch.manual_seed(0)
    attn = ref.RelPartialLearnableMultiHeadAttn(N_HEAD, D_MODEL, D_HEAD).double().eval()
    pos_emb = ref.PositionalEmbedding(D_MODEL).double()
    r_w_bias = torch.randn(N_HEAD, D_HEAD, dtype=torch.float64)  # u
    r_r_bias = torch.randn(N_HEAD, D_HEAD, dtype=torch.float64)  # v
    w = torch.randn(QLEN, BSZ, D_MODEL, dtype=torch.float64)
    klen = QLEN
    r = pos_emb(torch.arange(klen - 1, -1, -1.0, dtype=torch.float64))  # (klen, 1, D)
    mask = torch.triu(torch.ones(QLEN, klen), diagonal=1).bool()[
        :, :, None
    ]  # True = hidden
    with torch.no_grad():
        _, attn_vec, attn_prob = attn(w, r, r_w_bias, r_r_bias, attn_mask=mask)
    out = {
        "source": (
            "kimiyoung/transformer-xl pytorch/mem_transformer.py @ "
            "81b1b1955b5729b311e1548998eb2a89cb528178"
        ),
        "n_head": N_HEAD,
        "d_head": D_HEAD,
        "w": w.tolist(),
        "qkv_net": attn.qkv_net.weight.tolist(),
        "r_net": attn.r_net.weight.tolist(),
        "r_w_bias": r_w_bias.tolist(),
        "r_r_bias": r_r_bias.tolist(),
        "r": r[:, 0].tolist(),
        "attn_vec": attn_vec.tolist(),
        "attn_prob": attn_prob.tolist(),
    }
    path = pathlib.Path(__file__).with_name("transformer_xl_authors.json")
    path.write_text(json.dumps(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

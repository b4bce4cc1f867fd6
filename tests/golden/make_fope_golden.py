"""Produce tests/golden/fope_vllm.json from vLLM's FoPE, ``FourierRotaryEmbedding`` in
``vllm/model_executor/layers/rotary_embedding/fope.py`` of github.com/vllm-project/vllm
(commit 151a2c744af6eb59678be10f3cc13a6eb0a138e3).

vLLM needs its whole package (and its distributed runtime) to import that module, so
the file is read as text and three of its class's methods, ``_compute_inv_freq``,
``_compute_cos_sin_cache`` and ``forward_native``, are taken out with ``ast`` and run
verbatim on a small ``nn.Module`` that holds the attributes they read (the ones
``RotaryEmbedding.__init__`` and ``FourierRotaryEmbedding.__init__`` set: head_size,
rotary_dim = head_size, max_position_embeddings, base, dtype, num_key_value_heads,
num_inv_freq, fope_sep_head, the buffers and the two coefficient matrices), with
``rotate_neox`` (``rotary_embedding/common.py``, commit 002d181a5: ``cat((-x2,
x1))`` of the two halves) supplied by transformers 5.24's identical ``rotate_half``
(``models/llama/modeling_llama.py``). The coefficients are drawn as Intern-S1-Pro's
remote code initialises them, ``xavier_normal_(gain=0.5)`` plus the identity (vLLM's
are loaded from the checkpoint).
Made with transformers 5.24.0 and torch 2.13.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_fope_golden.py --vllm-fope fope.py

``fope.py``: that file at that commit. Recorded per case: the configuration, the kept
``inv_freq``, the coefficients, positions, query and key ``(tokens, heads * head_size)``
and ``forward_native``'s rotated query and key. vLLM pads the sine of the dropped
channels with 0 (its comment: "Padding sin with 1 instead would mix in
rotate_neox()"); the remote code's padding with 1 is checked against
``tests/golden/models_2026_hf.json`` (``fope``).
"""

import argparse
import ast
import json
import pathlib
import textwrap

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import rotate_half as rotate_neox

OUT = pathlib.Path(__file__).with_name("fope_vllm.json")
COMMIT = "151a2c744af6eb59678be10f3cc13a6eb0a138e3"
METHODS = {"_compute_inv_freq", "_compute_cos_sin_cache", "forward_native"}


def f32(x: torch.Tensor) -> list:
    """A float32 tensor as nested lists of 9 significant digits (exact in float32)."""

    def short(a):
        return [short(e) for e in a] if isinstance(a, list) else float(f"{a:.9g}")

    return short(x.detach().float().tolist())


def vllm_class(path: pathlib.Path) -> type:
    """A module class whose methods are vLLM's, verbatim."""
    source = path.read_text()
    cls = next(
        node
        for node in ast.parse(source).body
        if getattr(node, "name", None) == "FourierRotaryEmbedding"
    )
    ns = {"torch": torch, "F": F, "nn": nn, "rotate_neox": rotate_neox}
    body = {}
    for node in cls.body:
        if getattr(node, "name", None) in METHODS:
            code = textwrap.dedent(ast.get_source_segment(source, node))
            exec(compile(code, "<vllm fope.py>", "exec"), ns)
            body[node.name] = ns[node.name]
    assert set(body) == METHODS, METHODS - set(body)
    return type("VllmFoPE", (nn.Module,), body)


def case(cls, seed, heads, kv_heads, sep_head, num_inv_freq=None, head=16):
    m = cls()
    m.head_size = m.rotary_dim = head
    m.max_position_embeddings, m.base, m.dtype = 64, 10000.0, torch.float32
    m.num_key_value_heads, m.num_inv_freq = kv_heads, num_inv_freq
    m.fope_sep_head = sep_head
    m.register_buffer("inv_freq", m._compute_inv_freq(m.base), persistent=False)
    k = m.inv_freq.shape[-1]
    g = torch.Generator().manual_seed(seed)
    coef = []
    for _ in range(2):  # sin, then cos, as the remote code draws them
        c = torch.empty((kv_heads, k, k) if sep_head else (k, k))
        nn.init.xavier_normal_(c, gain=0.5, generator=g)
        coef.append((c + torch.eye(k)).expand(kv_heads, k, k).clone())
    m.sin_coef, m.cos_coef = (nn.Parameter(c, requires_grad=False) for c in coef)
    m.register_buffer("cos_sin_cache", m._compute_cos_sin_cache(), persistent=False)
    m.update_cache = True
    positions = torch.tensor([0, 1, 2, 5, 17, 40, 63])
    query = torch.randn(len(positions), heads * head, generator=g)
    key = torch.randn(len(positions), kv_heads * head, generator=g)
    q_out, k_out = m.forward_native(positions, query, key)
    return {
        "head_size": head,
        "heads": heads,
        "kv_heads": kv_heads,
        "sep_head": sep_head,
        "num_inv_freq": num_inv_freq,
        "max_position_embeddings": 64,
        "base": 10000.0,
        "inv_freq": f32(m.inv_freq),
        "cos_coef": f32(m.cos_coef),
        "sin_coef": f32(m.sin_coef),
        "positions": positions.tolist(),
        "query": f32(query),
        "key": f32(key),
        "query_out": f32(q_out.flatten(-2)),
        "key_out": f32(k_out.flatten(-2)),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-fope", required=True, help="vLLM's fope.py")
    cls = vllm_class(pathlib.Path(parser.parse_args().vllm_fope))
    doc = {
        "source": "vllm-project/vllm vllm/model_executor/layers/rotary_embedding/"
        f"fope.py FourierRotaryEmbedding (commit {COMMIT})",
        "torch": torch.__version__,
        "cases": {
            "gqa": case(cls, 0, heads=4, kv_heads=2, sep_head=True),
            "per_head": case(cls, 1, heads=2, kv_heads=2, sep_head=True),
            "shared": case(cls, 2, heads=2, kv_heads=2, sep_head=False),
            "first_five": case(
                cls, 3, heads=2, kv_heads=2, sep_head=True, num_inv_freq=5
            ),  # fmt: skip
        },
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

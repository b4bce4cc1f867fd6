"""Produce tests/golden/layouts_llama.json: the two RoPE layouts of Llama, the weight
conversion between them, and Hugging Face's positions under left padding.

Run in the reference environment (the course depends on none of these packages); the
file was made with transformers 5.24.0 and torch 2.13.0:

    /work/ref/bin/python tests/golden/make_layouts_golden.py

Sources, and what is transcribed (a transcription names its file, function, commit):

* ``hf_permute``: ``permute`` inside ``write_model`` in
  huggingface/transformers ``src/transformers/models/llama/
  convert_llama_weights_to_hf.py`` (commit 01cc9cd9d804d368d553c093c4eb0646320545bb).
  The script is not in the transformers wheel, so it is transcribed verbatim, with
  its default ``dim1=dim2=dim`` made explicit.
* ``gptfast_permute``: ``permute`` inside ``convert_hf_checkpoint`` in
  pytorch-labs/gpt-fast ``scripts/convert_hf_checkpoint.py`` (commit
  091515ab5b06f91c0d6a3b92f9c27463f738cc9b), transcribed; ``config.dim`` and
  ``config.head_dim`` made arguments.
* ``meta_precompute_freqs_cis``, ``meta_reshape_for_broadcast``,
  ``meta_apply_rotary_emb``: meta-llama/llama ``llama/model.py`` (commit
  6c7fe276574e78057f917549435a2554000a876d, the lines quoted in
  huggingface/transformers#25199), transcribed.
* Imported from transformers 5.24.0: ``LlamaRotaryEmbedding`` and
  ``apply_rotary_pos_emb`` (``rotate_half``) from ``models/llama/modeling_llama.py``;
  ``GenerationMixin._prepare_position_ids_for_generation`` from
  ``generation/utils.py`` (positions from the attention mask's cumsum).

Every input is stored, so the tests never depend on a random generator.
"""

import json
import pathlib
from importlib.metadata import version

import torch
from transformers import GenerationMixin, LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

torch.manual_seed(0)
DT = torch.float64


def hf_permute(w, n_heads, dim1, dim2):
    return (
        w.view(n_heads, dim1 // n_heads // 2, 2, dim2)
        .transpose(1, 2)
        .reshape(dim1, dim2)
    )


def gptfast_permute(w, n_head, head_dim, dim):
    return (
        w.view(n_head, 2, head_dim // 2, dim)
        .transpose(1, 2)
        .reshape(head_dim * n_head, dim)
    )


def meta_precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def meta_reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def meta_apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = meta_reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def conversion_case(name, n_heads, n_kv_heads, d_head, dim, n, theta):
    """Meta weights (interleaved) -> Hugging Face weights (half), and the rotated
    q, k and scores each model computes from the same input x."""
    wq = torch.randn(n_heads * d_head, dim, dtype=DT)
    wk = torch.randn(n_kv_heads * d_head, dim, dtype=DT)
    x = torch.randn(1, n, dim, dtype=DT)  # (b, n, D)
    wq_hf = hf_permute(wq, n_heads, n_heads * d_head, dim)
    wk_hf = hf_permute(wk, n_kv_heads, n_kv_heads * d_head, dim)
    # Meta: (b, n, h, d), rotated in float32 by complex multiplication
    xq = (x @ wq.T).view(1, n, n_heads, d_head)
    xk = (x @ wk.T).view(1, n, n_kv_heads, d_head)
    freqs_cis = meta_precompute_freqs_cis(d_head, n, theta)
    mq, mk = meta_apply_rotary_emb(xq, xk, freqs_cis)
    mq, mk = mq.transpose(1, 2), mk.transpose(1, 2)  # (b, h, n, d)
    # Hugging Face: (b, h, n, d), rotate_half
    config = LlamaConfig(
        hidden_size=n_heads * d_head,
        num_attention_heads=n_heads,
        head_dim=d_head,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    rotary = LlamaRotaryEmbedding(config)
    hq = (x @ wq_hf.T).view(1, n, n_heads, d_head).transpose(1, 2)
    hk = (x @ wk_hf.T).view(1, n, n_kv_heads, d_head).transpose(1, 2)
    cos, sin = rotary(hq, torch.arange(n)[None])
    hq, hk = apply_rotary_pos_emb(hq, hk, cos.to(DT), sin.to(DT))
    rep = n_heads // n_kv_heads  # grouped-query attention: each k serves rep heads
    scores = lambda q, k: q @ k.repeat_interleave(rep, 1).transpose(-1, -2)  # noqa
    return {
        "name": name,
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "d_head": d_head,
        "theta": theta,
        "wq_meta": wq.tolist(),
        "wk_meta": wk.tolist(),
        "x": x.tolist(),
        "wq_hf": wq_hf.tolist(),
        "wk_hf": wk_hf.tolist(),
        "wq_back_gptfast": gptfast_permute(wq_hf, n_heads, d_head, dim).tolist(),
        "q_rot_meta": mq.tolist(),
        "k_rot_meta": mk.tolist(),
        "q_rot_hf": hq.tolist(),
        "k_rot_hf": hk.tolist(),
        "scores_meta": scores(mq, mk).tolist(),
        "scores_hf": scores(hq, hk).tolist(),
    }


def position_case(name, mask):
    mask = torch.tensor(mask)
    pos = GenerationMixin._prepare_position_ids_for_generation(
        None, mask, {"attention_mask": mask}
    )
    return {"name": name, "attention_mask": mask.tolist(), "position_ids": pos.tolist()}


golden = {
    "versions": {"transformers": version("transformers"), "torch": version("torch")},
    "conversion": [
        conversion_case("mha", 2, 2, 8, 12, 6, 10000.0),
        conversion_case("gqa_base500k", 4, 2, 6, 10, 5, 500000.0),
    ],
    "positions": [
        position_case(
            "left_padding", [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]
        ),
    ],
}
out = pathlib.Path(__file__).parent / "layouts_llama.json"
out.write_text(json.dumps(golden))
print(f"wrote {out}")

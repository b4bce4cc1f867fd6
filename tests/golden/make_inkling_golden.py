"""Produce tests/golden/inkling_hf.json from Inkling's own code in Hugging Face
transformers (the course depends on it nowhere else): the content-conditioned relative
logits, in a full-attention layer and a sliding one, over a whole sequence and in a
decoding step with a cache.

Made with transformers 5.24.0 and torch 2.13.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_inkling_golden.py

A tiny ``InklingTextModel`` (random weights, eager attention, two dense layers: layer 0
``"hybrid"``, full attention with ``rel_extent`` 6; layer 1 ``"hybrid_sliding"``, a
window of 4 and so an extent of 4), run on 10 tokens. Hooks on every layer's
``InklingAttention`` (its bank ``proj`` redrawn from N(0, 1), so that the bias moves
the weights) record its input (``x``, after the layer norm), the
``position_bias`` that ``rel_logits_proj`` returns, the queries and keys after their
norms, and the attention weights; with ``r_proj.weight``, ``proj`` and the attention's
``scaling``. Then the first 7 tokens go through the model with a cache and tokens 8
and 9 one at a time: the decoding steps' ``x`` (the new token only) and
``position_bias`` (one row against every cached key) are recorded too.
"""

import json
import pathlib
from importlib.metadata import version

import torch
from transformers.models.inkling.configuration_inkling import InklingTextConfig
from transformers.models.inkling.modeling_inkling import InklingTextModel

OUT = pathlib.Path(__file__).with_name("inkling_hf.json")
N, PROMPT = 10, 7


def t(x: torch.Tensor) -> list:
    return x.detach().double().tolist()


def main():
    torch.manual_seed(0)
    cfg = InklingTextConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        swa_num_attention_heads=2,
        swa_num_key_value_heads=2,
        swa_head_dim=8,
        sliding_window_size=4,
        d_rel=3,
        rel_extent=6,
        local_layer_ids=[1],
        dense_mlp_idx=2,
        intermediate_size=48,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = InklingTextModel(cfg).eval()
    with torch.no_grad():  # a bank of profiles large enough to move the weights
        for block in model.layers:
            block.self_attn.rel_logits_proj.proj.normal_()
    seen: dict[int, dict] = {}

    for n, block in enumerate(model.layers):
        attn = block.self_attn
        attn.register_forward_pre_hook(
            lambda m, args, kwargs, n=n: (
                seen.setdefault(n, {})
                .setdefault("x", [])
                .append(kwargs.get("hidden_states", args[0] if args else None))
            ),
            with_kwargs=True,
        )
        attn.rel_logits_proj.register_forward_hook(
            lambda m, a, out, n=n: seen[n].setdefault("bias", []).append(out)
        )
        attn.q_norm.register_forward_hook(
            lambda m, a, out, n=n: seen[n].setdefault("q", []).append(out)
        )
        attn.k_norm.register_forward_hook(
            lambda m, a, out, n=n: seen[n].setdefault("k", []).append(out)
        )
    ids = torch.randperm(50, generator=torch.Generator().manual_seed(1))[None, :N]
    with torch.no_grad():
        full = model(ids, output_attentions=True)
        out = model(ids[:, :PROMPT], use_cache=True)
        cache = out.past_key_values
        for step in range(PROMPT, N - 1):
            out = model(ids[:, step : step + 1], cache=cache, use_cache=True)
            cache = out.past_key_values
    layers = []
    for n, block in enumerate(model.layers):
        attn, rec = block.self_attn, seen[n]
        layers.append(
            {
                "layer_type": cfg.layer_types[n],
                "rel_extent": attn.rel_extent,
                "sliding_window": attn.sliding_window,
                "scaling": attn.scaling,
                "r_proj": t(attn.r_proj.weight),
                "proj": t(attn.rel_logits_proj.proj),
                # the whole sequence: input, bias, q and k after their norms, weights
                "x": t(rec["x"][0][0]),  # (n, D)
                "bias": t(rec["bias"][0][0]),  # (h, n, n)
                "q": t(rec["q"][0][0].transpose(0, 1)),  # (h, n, d)
                "k": t(rec["k"][0][0].transpose(0, 1)),  # (h, n, d)
                "weights": t(full.attentions[n][0]),  # (h, n, n)
                # decoding: the prompt, then one token per step
                "steps": [
                    {"x": t(rec["x"][s][0]), "bias": t(rec["bias"][s][0])}
                    for s in range(2, len(rec["x"]))
                ],
            }
        )
    doc = {
        "source": "transformers/models/inkling/modeling_inkling.py: InklingAttention, "
        "InklingRelativeLogits, eager_attention_forward",
        "transformers": version("transformers"),
        "torch": torch.__version__,
        "n": N,
        "prompt": PROMPT,
        "layers": layers,
    }
    OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

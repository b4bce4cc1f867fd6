"""Produce tests/golden/huang_m4_hf.json from Hugging Face BERT's
``relative_key_query`` attention.

Hugging Face documents ``position_embedding_type="relative_key_query"`` as Method 4 of
Huang et al. (2020). It was removed from BERT in transformers 5, so run this in a
separate environment with a 4.x release (the course does not depend on transformers):

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch "transformers<4.50"
    /tmp/ref/bin/python tests/golden/make_huang_golden.py

Hugging Face indexes its table by ``i - j + max_position_embeddings - 1`` (query - key),
with no clipping, and divides the sum of the three terms by sqrt(d).
``tests/test_huang.py`` maps that table onto posenc_lib's ``clip(j - i, -K, K) + K``
(key - query) by reversing its rows.
"""

import json
import pathlib

import torch
import transformers
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertSelfAttention

HIDDEN, HEADS, MAX_POS, N, BATCH = 16, 2, 8, 6, 2


def main() -> None:
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        max_position_embeddings=MAX_POS,
        position_embedding_type="relative_key_query",
        attention_probs_dropout_prob=0.0,
    )
    attn = BertSelfAttention(
        config, position_embedding_type="relative_key_query"
    ).eval()
    with torch.no_grad():
        attn.distance_embedding.weight.normal_(
            0, 0.5
        )  # make the position terms visible
    x = torch.randn(BATCH, N, HIDDEN)
    with torch.no_grad():
        _, probs = attn(x, output_attentions=True)[:2]  # (b, h, n, n)
    out = {
        "transformers_version": transformers.__version__,
        "hidden": HIDDEN,
        "heads": HEADS,
        "max_position_embeddings": MAX_POS,
        "x": x.tolist(),
        "w_q": attn.query.weight.tolist(),
        "b_q": attn.query.bias.tolist(),
        "w_k": attn.key.weight.tolist(),
        "b_k": attn.key.bias.tolist(),
        "distance_embedding": attn.distance_embedding.weight.tolist(),
        "probs": probs.tolist(),
    }
    path = pathlib.Path(__file__).with_name("huang_m4_hf.json")
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(
        f"wrote {path} ({path.stat().st_size} bytes) with transformers "
        f"{transformers.__version__}"
    )


if __name__ == "__main__":
    main()

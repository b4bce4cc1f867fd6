"""Produce tests/golden/t5_buckets_hf.json from Hugging Face's
``T5Attention._relative_position_bucket``.

Run in a separate environment that has ``transformers`` (the course does not depend
on it):

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers
    /tmp/ref/bin/python tests/golden/make_t5_golden.py

Hugging Face's function is a port of mesh-tensorflow's ``_relative_position_bucket``;
both take ``relative_position = memory_position - query_position`` (key - query). The
file stores, for several settings, the offsets -600..600 and the buckets Hugging Face
gives them, plus one full ``compute_bias`` table (query length 5 after 3 cached tokens,
key length 8) to pin the sign convention end to end.
"""

import json
import pathlib

import torch
import transformers
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

SETTINGS = [  # (bidirectional, num_buckets, max_distance)
    (True, 32, 128),
    (False, 32, 128),
    (True, 64, 256),
    (False, 16, 64),
    (True, 8, 20),
    (False, 4, 10),
    (True, 33, 128),
    (True, 32, 1000),
]
OFFSETS = list(range(-600, 601))


def main() -> None:
    rel = torch.tensor(OFFSETS)
    cases = [
        {
            "bidirectional": bi,
            "num_buckets": nb,
            "max_distance": md,
            "buckets": T5Attention._relative_position_bucket(rel, bi, nb, md).tolist(),
        }
        for bi, nb, md in SETTINGS
    ]
    torch.manual_seed(0)
    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        is_decoder=False,
    )
    attn = T5Attention(config, has_relative_attention_bias=True)
    table = attn.relative_attention_bias.weight.detach()  # (buckets, heads)
    bias = attn.compute_bias(5, 8, past_seen_tokens=3)[0]  # (heads, 5, 8)
    out = {
        "transformers_version": transformers.__version__,
        "offsets": OFFSETS,
        "cases": cases,
        "compute_bias": {
            "query_length": 5,
            "key_length": 8,
            "past_seen_tokens": 3,
            "bidirectional": True,
            "table": table.tolist(),
            "bias": bias.tolist(),
        },
    }
    path = pathlib.Path(__file__).with_name("t5_buckets_hf.json")
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(
        f"wrote {path} ({path.stat().st_size} bytes) with transformers "
        f"{transformers.__version__}"
    )


if __name__ == "__main__":
    main()

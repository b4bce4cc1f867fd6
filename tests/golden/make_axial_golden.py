"""Golden vectors for tests/test_axial.py from Hugging Face's Reformer
``AxialPositionEmbeddings``.

Run in a separate environment that has ``transformers`` (4.46.3 was used) and torch:

    python tests/golden/make_axial_golden.py  # writes tests/golden/axial_reformer.json

Hugging Face (like trax) stores ``axial_pos_shape = (n2, n1)`` with the first axis
varying slowest and concatenates ``[segment embedding | in-segment embedding]``; the
test maps this onto ``posenc_lib``'s ``[P1[r] | P2[s]]`` explicitly.
"""

import json
import pathlib

import torch
import transformers
from transformers import ReformerConfig
from transformers.models.reformer.modeling_reformer import AxialPositionEmbeddings

torch.manual_seed(0)
cases = []
for shape, dims in [((4, 3), (2, 3)), ((2, 5), (4, 4)), ((8, 8), (3, 5))]:
    config = ReformerConfig(
        axial_pos_shape=shape,
        axial_pos_embds_dim=dims,
        hidden_size=sum(dims),
        max_position_embeddings=shape[0] * shape[1],
        hidden_dropout_prob=0.0,
    )
    module = AxialPositionEmbeddings(config).eval()
    with torch.no_grad():
        for w in module.weights:
            w.normal_()  # axial_norm_std = 1.0, as HF initialises them
    n = shape[0] * shape[1]
    position_ids = torch.stack(
        [torch.arange(n), torch.randint(n, (n,))]
    )  # (2, n): in order, and shuffled
    with torch.no_grad():
        out = module(position_ids)  # (2, n, d)
    cases.append(
        {
            "axial_pos_shape": list(shape),
            "axial_pos_embds_dim": list(dims),
            "weights": [
                w.squeeze().reshape(-1, w.shape[-1]).tolist() for w in module.weights
            ],
            "position_ids": position_ids.tolist(),
            "output": out.tolist(),
        }
    )
path = pathlib.Path(__file__).with_name("axial_reformer.json")
path.write_text(
    json.dumps(
        {
            "source": f"transformers {transformers.__version__}, "
            "transformers.models.reformer.modeling_reformer.AxialPositionEmbeddings "
            "(eval mode)",
            "cases": cases,
        }
    )
)
print("wrote", path)

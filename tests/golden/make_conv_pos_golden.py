"""Produce tests/golden/conv_pos_wav2vec2.json from Hugging Face's wav2vec 2.0 layer.

Run in a throw-away folder (the course does not depend on transformers); the file was
made with transformers 5.23.0 and torch 2.13.0:

    pip install --target /tmp/ref_mrope transformers==5.23.0
    PYTHONPATH=/tmp/ref_mrope python tests/golden/make_conv_pos_golden.py

For an even and an odd kernel, it builds ``Wav2Vec2PositionalConvEmbedding`` (the
grouped convolution with ``weight_norm(dim=2)``, ``Wav2Vec2SamePadLayer`` and GELU),
gives it random weights, and records the weight-norm parameters (``original0`` = g,
``original1`` = v), the bias, an input ``(b, n, D)`` and the layer's output, which
wav2vec 2.0's encoder adds to its input (``Wav2Vec2Encoder.forward``).
"""

import json
import pathlib

import torch
import transformers
from transformers import Wav2Vec2Config
from transformers.models.wav2vec2.modeling_wav2vec2 import (
    Wav2Vec2PositionalConvEmbedding,
)

HERE = pathlib.Path(__file__).parent


def case(kernel, groups, d=8, n=11, seed=0):
    torch.manual_seed(seed)
    cfg = Wav2Vec2Config(
        hidden_size=d,
        num_conv_pos_embeddings=kernel,
        num_conv_pos_embedding_groups=groups,
        feat_extract_activation="gelu",
    )
    layer = Wav2Vec2PositionalConvEmbedding(cfg).double().eval()
    w = layer.conv.parametrizations.weight
    with torch.no_grad():
        w.original0.copy_(torch.rand_like(w.original0) + 0.5)
        w.original1.copy_(torch.randn_like(w.original1))
        layer.conv.bias.copy_(torch.randn_like(layer.conv.bias))
    x = torch.randn(2, n, d, dtype=torch.float64)
    with torch.no_grad():
        y = layer(x)
    return {
        "kernel_size": kernel,
        "groups": groups,
        "g": w.original0.tolist(),
        "v": w.original1.tolist(),
        "bias": layer.conv.bias.tolist(),
        "x": x.tolist(),
        "features": y.tolist(),
    }


golden = {
    "transformers": transformers.__version__,
    "torch": torch.__version__,
    "cases": [case(4, 2), case(5, 4, seed=1), case(16, 8, n=9, seed=2)],
}
(HERE / "conv_pos_wav2vec2.json").write_text(json.dumps(golden) + "\n")
print("wrote", HERE / "conv_pos_wav2vec2.json")

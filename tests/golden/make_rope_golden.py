"""Produce tests/golden/rope_hf.json from Hugging Face's RoPE code and Microsoft's
xPos code.

Run in a separate environment (the course depends on neither package); the file was made
with transformers 5.23.0, torchscale 0.3.0 and torch 2.13.0:

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch==2.13.0 transformers numpy
    /tmp/ref/bin/pip install --no-deps torchscale
    /tmp/ref/bin/python tests/golden/make_rope_golden.py

What it records (inputs included, so the tests never depend on a random generator):

* ``inv_freq``: ``ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=...)`` for every
  scaling, and ``LlamaRotaryEmbedding.compute_default_rope_parameters`` for plain RoPE.
  Hugging Face has no static "ntk" entry: its "dynamic" with ``factor=1`` at
  ``seq_len = s * L0`` is NTK scaling by s. Hugging Face's dynamic scaling calls the
  training length ``max_position_embeddings``; the course calls it
  ``original_max_position_embeddings``.
* ``half``: ``LlamaRotaryEmbedding`` (cos/sin times ``attention_scaling``) +
  ``apply_rotary_pos_emb`` (``rotate_half``) on q, k shaped (b, h, n, d), for every
  scaling.
* ``interleaved``: GPT-J's ``create_sinusoidal_positions`` + ``apply_rotary_pos_emb``
  (``rotate_every_two``) on (b, n, h, d), transposed back to (b, h, n, d). Base
  10000 only.
* ``xpos``: torchscale's ``XPOS`` (interleaved; q with ``downscale=False``, k with
  ``True``): the score matrix q k^T. torchscale centres positions on the window, which
  multiplies q and k by inverse constants; the scores do not see it, so the scores are
  what is compared.
"""

import json
import pathlib

import torch
import torchscale
import transformers
from importlib.metadata import version
from torchscale.component.xpos_relative_position import XPOS
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
from transformers.models.llama.modeling_llama import (
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

D_HEAD, N_HEADS, L0 = 16, 2, 32
SHORT = [[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]]  # all < L0
LONG = [[0, 1, 2, 3, 4, 5], [40, 41, 57, 58, 90, 100]]  # max + 1 = 101 > L0
LONG_FACTOR = [1.0, 1.0, 1.1, 1.3, 1.7, 2.2, 2.9, 3.6]
SHORT_FACTOR = [1.0, 1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.4]

# (name, Hugging Face rope_parameters, course parameters, positions);
# max_position_embeddings = 4 L0 except for "dynamic", where Hugging Face reads L0 from
# max_position_embeddings.
CASES = [
    ("none", {"rope_type": "default", "rope_theta": 10000.0}, {}, LONG),
    ("none_base500k", {"rope_type": "default", "rope_theta": 500000.0}, {}, LONG),
    (
        "linear",
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        {"factor": 4.0},
        LONG,
    ),
    (
        "dynamic",
        {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
        {"factor": 2.0, "original_max_position_embeddings": L0},
        LONG,
    ),
    (
        "dynamic_short",
        {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
        {"factor": 2.0, "original_max_position_embeddings": L0},
        SHORT,
    ),
    (
        "yarn",
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
        {
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
        LONG,
    ),
    (
        "yarn_beta",
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "original_max_position_embeddings": L0,
            "beta_fast": 4.0,
            "beta_slow": 0.5,
        },
        {
            "factor": 8.0,
            "original_max_position_embeddings": L0,
            "beta_fast": 4.0,
            "beta_slow": 0.5,
        },
        LONG,
    ),
    (
        "llama3",
        {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": L0,
        },
        {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": L0,
        },
        LONG,
    ),
    (
        "longrope",
        {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "short_factor": SHORT_FACTOR,
            "long_factor": LONG_FACTOR,
        },
        {
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "short_factor": SHORT_FACTOR,
            "long_factor": LONG_FACTOR,
        },
        LONG,
    ),
    (
        "longrope_short",
        {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "short_factor": SHORT_FACTOR,
            "long_factor": LONG_FACTOR,
        },
        {
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "short_factor": SHORT_FACTOR,
            "long_factor": LONG_FACTOR,
        },
        SHORT,
    ),
]
# Static NTK-aware scaling by s through Hugging Face's dynamic function (factor 1,
# seq_len = s L0).
NTK_FACTORS = [2.0, 8.0]


def config(rope_parameters: dict) -> LlamaConfig:
    max_pos = L0 if rope_parameters["rope_type"] == "dynamic" else 4 * L0
    return LlamaConfig(
        hidden_size=D_HEAD * N_HEADS,
        num_attention_heads=N_HEADS,
        head_dim=D_HEAD,
        max_position_embeddings=max_pos,
        rope_parameters=dict(rope_parameters),
    )


def rounded(t: torch.Tensor) -> list:
    return [float(f"{v:.9g}") for v in t.flatten().tolist()]


def main() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 1, 6, D_HEAD, generator=g)  # one head keeps the file small
    k = torch.randn(2, 1, 6, D_HEAD, generator=g)
    out = {
        "source": (
            f"transformers {transformers.__version__}, "
            f"torchscale {version('torchscale')}, "
            f"torch {torch.__version__}: modeling_rope_utils.ROPE_INIT_FUNCTIONS, "
            "llama LlamaRotaryEmbedding/rotate_half/apply_rotary_pos_emb, "
            "gptj rotate_every_two/apply_rotary_pos_emb, torchscale XPOS"
        ),
        "d_head": D_HEAD,
        "shape": list(q.shape),
        "q": rounded(q),
        "k": rounded(k),
        "cases": [],
    }
    for name, rope_parameters, params, positions in CASES:
        cfg = config(rope_parameters)
        rope = LlamaRotaryEmbedding(cfg)
        pos = torch.tensor(positions)
        cos, sin = rope(q, pos)  # (b, n, d), scaled
        q_rot, k_rot = apply_rotary_pos_emb(q, k, cos, sin)  # (b, h, n, d)
        seq_len = int(pos.max()) + 1
        out["cases"].append(
            {
                "name": name,
                "scaling": None
                if rope_parameters["rope_type"] == "default"
                else rope_parameters["rope_type"],
                "base": rope_parameters["rope_theta"],
                "params": params,
                "positions": positions,
                "seq_len": seq_len,
                "inv_freq": rounded(rope.inv_freq),
                "attention_factor": float(rope.attention_scaling),
                "q_half": rounded(q_rot),
                "k_half": rounded(k_rot),
            }
        )
    for s in NTK_FACTORS:
        cfg = config({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 1.0})
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["dynamic"](
            cfg, "cpu", seq_len=int(s * L0)
        )
        out["cases"].append(
            {
                "name": f"ntk_{s:g}",
                "scaling": "ntk",
                "base": 10000.0,
                "params": {"factor": s},
                "inv_freq": rounded(inv_freq),
                "attention_factor": float(attention_factor),
            }
        )

    # interleaved (GPT-J), base 10000
    table = create_sinusoidal_positions(128, D_HEAD)  # (P, d): [sin | cos]
    pos = torch.tensor(LONG)
    sin, cos = torch.split(table[pos], D_HEAD // 2, dim=-1)  # (b, n, d/2)
    q_int = gptj_apply(q.transpose(1, 2), sin, cos).transpose(1, 2)  # (b, h, n, d)
    k_int = gptj_apply(k.transpose(1, 2), sin, cos).transpose(1, 2)
    out["interleaved"] = {"positions": LONG, "q": rounded(q_int), "k": rounded(k_int)}

    # xPos (torchscale): positions 0 .. n-1, scale_base small enough that the
    # decay shows
    xpos = XPOS(D_HEAD, scale_base=8)
    qx = xpos(q.flatten(0, 1), offset=0, downscale=False)  # (b*h, n, d)
    kx = xpos(k.flatten(0, 1), offset=0, downscale=True)
    out["xpos"] = {
        "scale_base": 8,
        "gamma": 0.4,
        "scores": rounded(qx @ kx.transpose(1, 2)),
    }

    path = pathlib.Path(__file__).with_name("rope_hf.json")
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path} ({len(out['cases'])} cases, {path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

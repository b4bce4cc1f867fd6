"""Produce tests/golden/sparse_indexer_hf.json from the models' own indexer classes in
Hugging Face transformers (the course depends on it nowhere else).

Made with transformers 5.24.0 and torch 2.13.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_sparse_indexer_golden.py

Every indexer is built from its model's configuration class with tiny sizes (no
download), its weights drawn at random (seeded), and run in float64 on random
inputs at positions 3 .. 3 + n - 1, causally. What it records (inputs included, so
the tests need no random generator):

* ``dsa``: the indexers that score tokens as DeepSeek-V3.2's does (DeepSeek-V3.2,
  GLM-5, AXK2, HY-V4, HY-V4-VL, dots3 note, Mistral Large 4 with and without
  ``use_rope``): the layer input, the query latent ``q_resid`` (Mistral Large 4: none,
  its queries read the layer input), every weight, the frequencies of the rotary
  class the model hands the indexer, the scores the model ranks (its tensor at its
  ``topk`` call) and the indices it returns.
* ``rotations``: for the indexers that score otherwise (MiniMax M3, Qwen4-Exp,
  DeepSeek-V4), each call of the model's own rotary function inside the indexer:
  its input, its cos and sin, its output; and the indices the indexer returns.
* ``main``: for every model whose main attention rotates, the rotary function its
  attention's ``forward`` calls (the script checks the call is in the source), run on
  a probe: a head of 2r coordinates with the cos and sin of r rotated ones (base
  10000), its input and output. The layout (and, for the functions that rotate a
  slice themselves, the slice order) is read off the output by the tests.
* ``signatures``: the parameters of every indexer's ``forward`` (GLM-5.3-Flash's,
  ``Glm5NextTextIndexer``, takes no positions at all).

Mistral Large 4's query temperature (``MistralLarge4TextSoftmaxScaling``) is set to 1
(scale 0, bias 1) so that its golden isolates the indexer's RoPE and scoring.
"""

import inspect
import json
import pathlib
from importlib.metadata import version

import torch
import transformers.models.axk2.modeling_axk2 as axk2
import transformers.models.deepseek_v4.modeling_deepseek_v4 as dsv4
import transformers.models.deepseek_v32.modeling_deepseek_v32 as dsv32
import transformers.models.dots3_note.modeling_dots3_note as dots3
import transformers.models.glm5_next.modeling_glm5_next as glm5n
import transformers.models.glm_moe_dsa.modeling_glm_moe_dsa as glm
import transformers.models.hy_v4.modeling_hy_v4 as hyv4
import transformers.models.hy_v4_vl.modeling_hy_v4_vl as hyv4vl
import transformers.models.minimax_m3_vl.modeling_minimax_m3_vl as mm3
import transformers.models.mistral_large4.modeling_mistral_large4 as ml4
import transformers.models.qwen4_exp.modeling_qwen4_exp as qw4
from transformers.models.axk2.configuration_axk2 import AXK2Config
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
from transformers.models.deepseek_v32.configuration_deepseek_v32 import (
    DeepseekV32Config,
)
from transformers.models.dots3_note.configuration_dots3_note import (
    Dots3NoteTextConfig,
)
from transformers.models.glm_moe_dsa.configuration_glm_moe_dsa import GlmMoeDsaConfig
from transformers.models.hy_v4.configuration_hy_v4 import HYV4Config
from transformers.models.hy_v4_vl.configuration_hy_v4_vl import HYV4VLTextConfig
from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import (
    MiniMaxM3VLTextConfig,
)
from transformers.models.mistral_large4.configuration_mistral_large4 import (
    MistralLarge4TextConfig,
)
from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig

B, N, START = 2, 10, 3
D, R_Q, H, D_I, ROT, TOP_K = 24, 12, 4, 16, 8, 4
OUT = pathlib.Path(__file__).with_name("sparse_indexer_hf.json")


def t(x):
    """A tensor as ``[flat values, shape]``: 9 significant digits, -inf as None."""
    x = x.detach().double()
    flat = [
        None if v == float("-inf") else float(f"{v:.9g}") for v in x.flatten().tolist()
    ]
    return flat, list(x.shape)


def grid(x):
    """``x`` on a grid of 1e-6, so that the JSON holds the model's inputs exactly."""
    return (x * 1e6).round() / 1e6


def randn(*shape, generator):
    return grid(torch.randn(*shape, generator=generator, dtype=torch.float64))


def randomize(module, seed):
    """Every floating parameter drawn from N(0, 0.5) (norm weights around 1), on the
    grid of ``grid``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5
            norm = "norm" in name and name.endswith("weight")
            p.copy_(grid(1 + r * 0.2 if norm else r))


def positions():
    return torch.arange(START, START + N)[None]  # (1, n)


def causal_mask():
    return torch.ones(N, N, dtype=torch.bool).tril()[None].expand(B, N, N)


class Topk:
    """Records the tensor each ``Tensor.topk`` call ranks (the model's scores)."""

    def __enter__(self):
        self.calls, self.orig = [], torch.Tensor.topk
        calls, orig = self.calls, self.orig

        def topk(x, *args, **kwargs):
            calls.append(x.detach().clone())
            return orig(x, *args, **kwargs)

        torch.Tensor.topk = topk
        return self

    def __exit__(self, *exc):
        torch.Tensor.topk = self.orig


class Spy:
    """Records every call of ``module.name`` (inputs, cos, sin, output)."""

    def __init__(self, module, name):
        self.module, self.name, self.calls = module, name, []

    def __enter__(self):
        self.orig = getattr(self.module, self.name)
        orig, calls = self.orig, self.calls

        def spy(*args, **kwargs):
            out = orig(*args, **kwargs)
            calls.append((args, kwargs, out))
            return out

        setattr(self.module, self.name, spy)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.orig)


DSA_SIZES = dict(
    hidden_size=D, q_lora_rank=R_Q, index_n_heads=H, index_head_dim=D_I,
    qk_rope_head_dim=ROT, index_topk=TOP_K, num_attention_heads=4,
    num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, v_head_dim=8,
)  # fmt: skip

# name -> (module, config class, extra config arguments, rotary call)
DSA = {
    "DeepSeek-V3.2": (dsv32, DeepseekV32Config, {}, None),
    "GLM-5": (glm, GlmMoeDsaConfig, {}, None),
    "AXK2": (axk2, AXK2Config, {}, None),
    "HY-V4": (hyv4, HYV4Config, {}, None),
    "HY-V4-VL": (
        hyv4vl,
        HYV4VLTextConfig,
        {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 1, 1],
            }
        },  # sums to ROT / 2
        None,
    ),
    "dots3 note": (
        dots3,
        Dots3NoteTextConfig,
        # every layer indexed; partial_rotary_factor qk_rope_head_dim / head_dim
        {"head_dim": 2 * ROT, "use_sliding_window": False},
        "indexed_attention",
    ),
    "Mistral Large 4": (ml4, MistralLarge4TextConfig, {}, None),
}


def indexer_class(module):
    return next(
        getattr(module, n)
        for n in dir(module)
        if n.endswith("Indexer") and inspect.isclass(getattr(module, n))
    )


def rotary_class(module):
    names = [n for n in dir(module) if n.endswith("RotaryEmbedding")]
    name = next(n for n in names if "Vision" not in n and "Audio" not in n)
    return getattr(module, name)


def record_dsa(name, seed):
    module, config_cls, extra, layer_type = DSA[name]
    config = config_cls(**{**DSA_SIZES, **extra})
    cases = [dict(use_rope=True)]
    if name == "Mistral Large 4":
        cases = [dict(use_rope=True, layer=0), dict(use_rope=False, layer=3)]
    out = []
    for case in cases:
        layer = case.get("layer", 0)
        torch.manual_seed(seed)
        # dots3 hands its indexer the layer's own configuration (per_layer_config)
        own = config.per_layer_config[layer] if name == "dots3 note" else config
        idx = indexer_class(module)(own, layer).double()
        randomize(idx, seed)
        g = torch.Generator().manual_seed(seed + 1)
        x = randn(B, N, D, generator=g)
        q_resid = randn(B, N, R_Q, generator=g)
        rotary = rotary_class(module)(config).double()
        if name == "Mistral Large 4":
            with torch.no_grad():  # learned frequencies: exp(alpha) != 1
                rotary.alpha.copy_(grid(randn(*rotary.alpha.shape, generator=g) * 0.3))
                idx.softmax_scaling.scale.zero_()  # query temperature 1
                idx.softmax_scaling.bias.fill_(1.0)
        pos = positions()
        args = (x, pos) if layer_type is None else (x, pos, layer_type)
        cos, sin = rotary(*args)
        if layer_type is None:
            inv_freq, scaling = rotary.inv_freq, rotary.attention_scaling
        else:
            inv_freq = getattr(rotary, f"{layer_type}_inv_freq")
            scaling = getattr(rotary, f"{layer_type}_attention_scaling")
        if name == "Mistral Large 4":
            inv_freq = inv_freq * rotary.alpha.double().exp()
        with Topk() as rec, torch.no_grad():
            if name == "Mistral Large 4":
                chosen = idx(x, (cos, sin), causal_mask(), pos)
                assert idx.use_rope == case["use_rope"], (idx.use_rope, case)
            else:
                chosen = idx(x, q_resid, (cos, sin), causal_mask(), pos)
        weights = {k: t(v) for k, v in idx.state_dict().items()}
        out.append(
            {
                "model": name,
                "class": type(idx).__name__,
                "use_rope": case["use_rope"],
                "layer": layer,
                "k_norm_eps": idx.k_norm.eps,
                "x": t(x),
                "q_resid": t(q_resid) if name != "Mistral Large 4" else None,
                "positions": pos[0].tolist(),
                "inv_freq": t(inv_freq),
                "attention_scaling": float(scaling),
                "weights": weights,
                "scores": t(rec.calls[-1]),
                "indices": chosen.long().tolist(),
                "top_k": config.index_topk,
                "n_heads": config.index_n_heads,
                "head_dim": config.index_head_dim,
                "rope_dim": config.qk_rope_head_dim,
            }
        )
    return out


def spy_record(calls):
    """The (x, cos, sin, out) of each recorded rotary call."""
    rows = []
    for args, kwargs, out in calls:
        rows.append(
            {
                "args": [t(a) if isinstance(a, torch.Tensor) else a for a in args],
                "kwargs": {
                    k: t(v) if isinstance(v, torch.Tensor) else v
                    for k, v in kwargs.items()
                },
                "out": [
                    t(o)
                    for o in (out if isinstance(out, tuple) else (out,))
                    if o is not None
                ],  # fmt: skip
            }
        )
    return rows


def record_minimax(seed):
    config = MiniMaxM3VLTextConfig(
        hidden_size=D, num_attention_heads=4, num_key_value_heads=2, head_dim=D_I,
        index_n_heads=2, index_head_dim=D_I, index_block_size=2,
        index_topk_blocks=3, index_local_blocks=1,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                         "partial_rotary_factor": 0.5},
    )  # fmt: skip
    torch.manual_seed(seed)
    idx = mm3.MiniMaxM3VLIndexer(config, 0).double()
    randomize(idx, seed)
    rotary = mm3.MiniMaxM3VLRotaryEmbedding(config).double()
    g = torch.Generator().manual_seed(seed + 1)
    x = randn(B, N, D, generator=g)
    pos = torch.arange(N)[None].expand(B, N)  # blocks are key slots: start at 0
    cos, sin = rotary(x, pos)
    with Spy(mm3, "apply_rotary_pos_emb") as spy, torch.no_grad():
        chosen = idx(x, (cos, sin), None, pos)
    return {
        "model": "MiniMax M3",
        "class": type(idx).__name__,
        "positions": pos[0].tolist(),
        "inv_freq": t(rotary.inv_freq),
        "calls": spy_record(spy.calls),
        "indices": chosen.tolist(),
        "head_dim": D_I,
        "rope_dim": 2 * rotary.inv_freq.numel(),
    }


def record_qwen4(seed):
    config = Qwen4ExpTextConfig(
        hidden_size=D, num_attention_heads=4, num_key_value_heads=2, head_dim=D_I,
        indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=D_I,
        indexer_budget=4, indexer_compress_ratio=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
    )  # fmt: skip
    torch.manual_seed(seed)
    idx = qw4.Qwen4ExpTextQSAIndexer(config, 0).double()
    randomize(idx, seed)
    rotary = qw4.Qwen4ExpTextRotaryEmbedding(config).double()
    g = torch.Generator().manual_seed(seed + 1)
    x = randn(1, N, D, generator=g)
    pos = positions()
    cos, sin = rotary(x, pos)
    mask = causal_mask()[:1, None]  # (1, 1, n, n) bool
    with Spy(qw4, "apply_rotary_pos_emb") as spy, torch.no_grad():
        chosen = idx(x, (cos, sin), mask, None)
    return {
        "model": "Qwen4-Exp",
        "class": type(idx).__name__,
        "positions": pos[0].tolist(),
        "inv_freq": t(rotary.inv_freq),
        "calls": spy_record(spy.calls[:1] + spy.calls[-1:]),  # queries; last blocks
        "selected": chosen[0, 0].tolist(),
        "compress_ratio": config.indexer_compress_ratio,
        "head_dim": D_I,
        "rope_dim": 2 * rotary.inv_freq.numel(),
    }


def record_deepseek_v4(seed):
    config = DeepseekV4Config(
        hidden_size=D, num_attention_heads=4, head_dim=64, q_lora_rank=R_Q,
        index_n_heads=H, index_head_dim=D_I, index_topk=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    idx = dsv4.DeepseekV4Indexer(config).double()
    randomize(idx, seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = randn(B, N, D, generator=g)
    q_resid = randn(B, N, R_Q, generator=g)
    pos = positions().expand(B, N) - START  # the compressor counts from 0
    with Spy(dsv4, "apply_rotary_pos_emb") as spy, torch.no_grad():
        chosen = idx(x, q_resid, pos, None, 0)
    return {
        "model": "DeepSeek-V4",
        "class": type(idx).__name__,
        "positions": pos[0].tolist(),
        "compress_rate": idx.compress_rate,
        "inv_freq": t(getattr(idx.rotary_emb, "compress_inv_freq")),
        "main_inv_freq": t(getattr(idx.rotary_emb, "main_inv_freq")),
        "calls": spy_record(spy.calls),
        "indices": chosen.tolist(),
        "head_dim": D_I,
        "rope_dim": 2 * getattr(idx.rotary_emb, "compress_inv_freq").numel(),
    }


# model -> (module, attention class, the rotary function its forward calls)
MAIN = {
    "DeepSeek-V3.2": (dsv32, "DeepseekV32Attention", "apply_rotary_pos_emb_interleave"),
    "GLM-5": (glm, "GlmMoeDsaAttention", "apply_rotary_pos_emb_interleave"),
    "Mistral Large 4": (
        ml4, "MistralLarge4TextAttention", "apply_rotary_pos_emb_interleave"
    ),
    "AXK2": (axk2, "AXK2Attention", "apply_rotary_pos_emb_interleave"),
    "HY-V4": (hyv4, "HYV4Attention", "apply_rotary_pos_emb"),
    "HY-V4-VL": (hyv4vl, "HYV4VLAttention", "apply_rotary_pos_emb"),
    "dots3 note": (dots3, "Dots3NoteTextAttention", "apply_rotary_pos_emb_interleave"),
    "MiniMax M3": (mm3, "MiniMaxM3VLAttention", "apply_rotary_pos_emb"),
    "Qwen4-Exp": (qw4, "Qwen4ExpTextAttention", "apply_rotary_pos_emb"),
    "DeepSeek-V4": (dsv4, "DeepseekV4Attention", "apply_rotary_pos_emb"),
}  # fmt: skip


def record_main(seed):
    """Each main attention's rotary function on a probe (see the docstring)."""
    g = torch.Generator().manual_seed(seed)
    pos = positions()  # (1, n)
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, ROT, 2, dtype=torch.float64) / ROT)
    freqs = pos[..., None].double() * inv_freq  # (1, n, r/2)
    out = {}
    for name, (module, attention, fn) in MAIN.items():
        source = inspect.getsource(getattr(module, attention).forward)
        assert f"{fn}(" in source, (name, fn)
        # MiniMax, Qwen4 and DeepSeek-V4 rotate a slice themselves: give them 2r
        # coordinates; the MLA's functions rotate what they are given (its split)
        width = 2 * ROT if name in ("MiniMax M3", "Qwen4-Exp", "DeepSeek-V4") else ROT
        x = randn(1, 1, N, width, generator=g)
        if name == "DeepSeek-V4":  # cos, sin of one angle per pair, x alone
            y = getattr(module, fn)(x, freqs.cos(), freqs.sin())
        else:
            emb = torch.cat((freqs, freqs), -1)
            y = getattr(module, fn)(x, x, emb.cos(), emb.sin())[0]
        out[name] = {
            "function": fn,
            "x": t(x),
            "out": t(y),
            "positions": pos[0].tolist(),
        }
    return out


def signatures():
    modules = [dsv32, glm, axk2, hyv4, hyv4vl, dots3, ml4, mm3, qw4, glm5n, dsv4]
    out = {}
    for module in modules:
        cls = indexer_class(module)
        out[cls.__name__] = [
            p for p in inspect.signature(cls.forward).parameters if p != "self"
        ]
    return out


def main():
    torch.set_default_dtype(torch.float32)
    golden = {
        "made_with": {
            "transformers": version("transformers"),
            "torch": version("torch"),
        },
        "dsa": [row for i, name in enumerate(DSA) for row in record_dsa(name, 10 * i)],
        "rotations": [record_minimax(100), record_qwen4(200), record_deepseek_v4(300)],
        "main": record_main(400),
        "signatures": signatures(),
    }
    OUT.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

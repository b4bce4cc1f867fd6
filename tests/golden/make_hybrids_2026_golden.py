"""Produce tests/golden/hybrids_2026.json from the models' own code in Hugging Face
transformers (the course depends on it nowhere else).

Made with transformers 5.24.0 and torch 2.13.0 (CPU), in /work/ref:

    /work/ref/bin/python tests/golden/make_hybrids_2026_golden.py

Nothing is downloaded: every model is built from its configuration class, tiny, with
random weights. What it records (``tests/test_nope_sinks_2026.py`` compares the
transcriptions of ``posenc_lib/course/hybrids.py`` and ``pl.mistral_attn_scale`` with
it):

* ``configs``: for each model and each depth in ``DEPTHS`` (and the class's default
  depth), what the configuration class builds: ``layer_types``, the per-layer RoPE
  switch where the class has one (``no_rope_layers``, 1 = RoPE; ``layer_rope_theta``,
  0 = no RoPE), the window, chunk and RoPE fields (base, YaRN's factor and original
  window, the temperature's beta).
* ``probes``: for each model at two depths, a tiny model (``<Model>Model``) run on six
  tokens, with the module's rotation function (``apply_rotary_pos_emb``, Llama 4's
  ``apply_rotary_emb``, Mistral Large 4's ``apply_rotary_pos_emb_interleave``) wrapped
  to note which attention layer called it: ``attention`` lists the layers that hold an
  attention module, ``rotates`` those that rotated, and ``cos`` the cosine each
  rotating layer received at position 1, pair 1 (which base it rotated with). So the
  rule read in the configuration class is checked against what the model code does
  with it. ``shift_change``: the largest change of the model's output when the
  ``position_ids`` it is handed are shifted by 1000 (contiguous, so no packed
  sequences are inferred from them): 0 when nothing reads an absolute position from
  them (RoPE changes it only by rounding; a temperature read from them changes it).
* ``temperatures``: the query factor of Ministral 3's and Mistral Small 4's attention
  (``get_llama_4_attn_scale``, called in ``Ministral3Attention.forward`` and
  ``Mistral4Attention.forward``), recorded as the query that reaches the attention
  function when ``q_proj`` maps the all-ones input to all-ones and the rotation is the
  identity (cos = 1, sin = 0): at the default ``rope_parameters`` for chosen
  positions, at a small ``original_max_position_embeddings``, and with a cache that
  says it holds earlier tokens (the factor then still follows ``position_ids``). Also
  Mistral Large 4's learned ``MistralLarge4TextSoftmaxScaling`` (set weights, and the
  initial ones of a tiny model) and Beam's ``compute_attention_scaling``.
"""

import importlib
import json
import math
import pathlib
import types
from importlib.metadata import version

import torch
import transformers as T

OUT = pathlib.Path(__file__).with_name("hybrids_2026.json")
DEPTHS = [2, 3, 5, 7, 8, 10, 13]
TINY = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=64,
    intermediate_size=32,
)
MOE = dict(moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2)


# ---------------------------------------------------------------- configuration classes


def config_facts(key: str, config) -> dict:
    """What a configuration class decided, per layer."""
    facts = {"num_hidden_layers": config.num_hidden_layers}
    for name in (
        "layer_types",
        "no_rope_layers",
        "layer_rope_theta",
        "sliding_window",
        "sliding_window_size",
        "attention_chunk_size",
        "rel_extent",
        "qk_rope_head_dim",
        "position_embedding_type",
    ):
        value = getattr(config, name, None)
        if value is not None:
            facts[name] = list(value) if isinstance(value, (list, tuple)) else value
    rope = getattr(config, "rope_parameters", None)
    if key == "beam":  # keyed by layer type; None = no positional encoding
        facts["rope_by_layer_type"] = {t: rope[t] is not None for t in rope}
    elif isinstance(rope, dict):
        facts["rope_theta"] = rope.get("rope_theta")
        for name in (
            "rope_type",
            "factor",
            "original_max_position_embeddings",
            "llama_4_scaling_beta",
            "mscale",
            "mscale_all_dim",
        ):
            if rope.get(name) is not None:
                facts[name] = rope[name]
    return facts


CONFIGS = {
    "llama4": T.Llama4TextConfig,
    "mistral_large4": T.MistralLarge4TextConfig,
    "muse_spark": T.MuseSparkTextConfig,
    "muse_glimmer": T.MuseGlimmerTextConfig,
    "afmoe": T.AfmoeConfig,
    "flint": T.FlintConfig,
    "beam": T.BeamConfig,
    "kolibri1": T.Kolibri1Config,
    "olmo_hybrid": T.OlmoHybridConfig,
    "granitemoehybrid": T.GraniteMoeHybridConfig,
    "glm5_next": T.Glm5NextTextConfig,
    "inkling": T.InklingTextConfig,
    "granite_swa": T.GraniteSWAConfig,
    "ministral3": T.Ministral3Config,
    "mistral4": T.Mistral4Config,
}


def configs() -> dict:
    out = {}
    for key, cls in CONFIGS.items():
        default = cls()
        per_depth = {"default": config_facts(key, default)}
        for n in DEPTHS:
            per_depth[str(n)] = config_facts(key, cls(num_hidden_layers=n))
        out[key] = per_depth
    # Nemotron-H's depth is the length of its pattern (num_hidden_layers is ignored)
    out["nemotron_h"] = {"default": config_facts("nemotron_h", T.NemotronHConfig())}
    return out


# ---------------------------------------------------------------- the model code


def probe(key, module_name, config, model_cls, attn_cls, rot_names):
    """Run a tiny model; note which attention layers call the rotation function."""
    mod = importlib.import_module(
        f"transformers.models.{module_name}.modeling_{module_name}"
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(mod, model_cls)(config).eval()
    current, rotated = {}, {}
    originals = {name: getattr(mod, name) for name in rot_names}

    def wrap(fn):
        def recorded(*args, **kwargs):
            # the third argument is cos (b, n, d), in the half layout, or Llama 4's
            # complex freqs_cis (b, n, d / 2) whose real part is the cosine: entry
            # [position 1, frequency 1] is cos(omega_1)
            angles = args[2]
            c = angles.real if angles.is_complex() else angles
            c = c.reshape(-1, c.shape[-2], c.shape[-1])[0, 1]
            rotated.setdefault(current["layer"], float(c[1]))  # the first forward
            return fn(*args, **kwargs)

        return recorded

    attention = []
    for module in model.modules():
        if type(module).__name__ == attn_cls:
            attention.append(module.layer_idx)
            module.register_forward_pre_hook(
                lambda m, args, idx=module.layer_idx: current.__setitem__("layer", idx)
            )
    tokens = torch.randint(0, config.vocab_size, (1, 6))
    outputs = []
    try:
        for name, fn in originals.items():
            setattr(mod, name, wrap(fn))
        with torch.no_grad():
            for pos in (torch.arange(6), torch.arange(6) + 1000):
                out = model(input_ids=tokens, position_ids=pos[None])
                outputs.append(out.last_hidden_state)
    finally:
        for name, fn in originals.items():
            setattr(mod, name, fn)
    return {
        "num_hidden_layers": len(getattr(model, "layers")),
        "attention": sorted(set(attention)),
        "rotates": sorted(rotated),
        "cos": {str(k): v for k, v in sorted(rotated.items())},
        "shift_change": float((outputs[0] - outputs[1]).abs().max()),
    }


def with_tiny(cls, **kw):
    return cls(**{**TINY, **kw})


def probes() -> dict:
    out = {}
    muse = dict(
        moe_intermediate_size=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_hidden_size=16,
        head_dim=8,
    )
    mla = dict(
        kv_lora_rank=8,
        qk_rope_head_dim=4,
        qk_nope_head_dim=4,
        v_head_dim=8,
        moe_intermediate_size=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        index_head_dim=8,
        index_n_heads=2,
        index_topk=4,
        num_key_value_heads=4,
    )
    rope = ("apply_rotary_pos_emb",)
    for n in (7, 10):
        runs = {
            "llama4": (
                "llama4",
                with_tiny(
                    T.Llama4TextConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    intermediate_size_mlp=32,
                    num_local_experts=2,
                ),
                "Llama4TextModel",
                "Llama4TextAttention",
                ("apply_rotary_emb",),
            ),
            "mistral_large4": (
                "mistral_large4",
                with_tiny(T.MistralLarge4TextConfig, num_hidden_layers=n, **mla),
                "MistralLarge4TextModel",
                "MistralLarge4TextAttention",
                ("apply_rotary_pos_emb_interleave",),
            ),
            "muse_spark": (
                "muse_spark",
                with_tiny(
                    T.MuseSparkTextConfig,
                    num_hidden_layers=n,
                    bos_token_id=0,
                    eos_token_id=0,
                    **muse,
                ),
                "MuseSparkTextModel",
                "MuseSparkTextAttention",
                rope,
            ),
            "muse_glimmer": (
                "muse_glimmer",
                with_tiny(
                    T.MuseGlimmerTextConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    bos_token_id=0,
                    eos_token_id=0,
                ),
                "MuseGlimmerTextModel",
                "MuseGlimmerTextAttention",
                rope,
            ),
            "afmoe": (
                "afmoe",
                with_tiny(T.AfmoeConfig, num_hidden_layers=n, head_dim=8, **MOE),
                "AfmoeModel",
                "AfmoeAttention",
                rope,
            ),
            "flint": (
                "flint",
                with_tiny(
                    T.FlintConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    shared_expert_intermediate_size=16,
                    **MOE,
                ),
                "FlintModel",
                "FlintAttention",
                rope,
            ),
            "beam": (
                "beam",
                with_tiny(
                    T.BeamConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    n_group=1,
                    topk_group=1,
                    **MOE,
                ),
                "BeamModel",
                "BeamAttention",
                rope,
            ),
            "kolibri1": (
                "kolibri1",
                with_tiny(
                    T.Kolibri1Config,
                    num_hidden_layers=n,
                    head_dim=8,
                    shared_expert_intermediate_size=16,
                    **MOE,
                ),
                "Kolibri1Model",
                "Kolibri1Attention",
                rope,
            ),
            "olmo_hybrid": (
                "olmo_hybrid",
                with_tiny(
                    T.OlmoHybridConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    linear_num_key_heads=2,
                    linear_num_value_heads=2,
                    linear_key_head_dim=8,
                    linear_value_head_dim=8,
                    pad_token_id=0,
                ),
                "OlmoHybridModel",
                "OlmoHybridAttention",
                rope,
            ),
            # the configuration that the modeling file's comment says the released
            # checkpoints have: no rope_theta, so no rotary embedding is built
            "olmo_hybrid_no_theta": (
                "olmo_hybrid",
                with_tiny(
                    T.OlmoHybridConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    linear_num_key_heads=2,
                    linear_num_value_heads=2,
                    linear_key_head_dim=8,
                    linear_value_head_dim=8,
                    pad_token_id=0,
                    rope_parameters={"rope_type": "default", "rope_theta": None},
                ),
                "OlmoHybridModel",
                "OlmoHybridAttention",
                rope,
            ),
            "glm5_next": (
                "glm5_next",
                with_tiny(
                    T.Glm5NextTextConfig,
                    num_hidden_layers=n,
                    kv_lora_rank=8,
                    q_lora_rank=8,
                    qk_nope_head_dim=8,
                    v_head_dim=8,
                    moe_intermediate_size=16,
                    n_routed_experts=4,
                    num_experts_per_tok=2,
                    index_head_dim=8,
                    index_n_heads=2,
                    index_topk=16,
                    linear_head_dim=8,
                    linear_num_heads=4,
                    pad_token_id=0,
                    num_key_value_heads=4,
                ),
                "Glm5NextTextModel",
                "Glm5NextTextAttention",
                (),
            ),
            "inkling": (
                "inkling",
                with_tiny(
                    T.InklingTextConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    swa_num_attention_heads=4,
                    swa_num_key_value_heads=2,
                    swa_head_dim=8,
                    d_rel=4,
                    rel_extent=16,
                    sliding_window_size=8,
                    moe_intermediate_size=16,
                    n_routed_experts=4,
                    num_experts_per_tok=2,
                    n_shared_experts=1,
                ),
                "InklingTextModel",
                "InklingAttention",
                (),
            ),
            "ministral3": (
                "ministral3",
                with_tiny(T.Ministral3Config, num_hidden_layers=n, head_dim=8),
                "Ministral3Model",
                "Ministral3Attention",
                rope,
            ),
            "mistral4": (
                "mistral4",
                with_tiny(
                    T.Mistral4Config,
                    num_hidden_layers=n,
                    **{k: v for k, v in mla.items() if not k.startswith("index")},
                    q_lora_rank=None,
                    pad_token_id=0,
                ),
                "Mistral4Model",
                "Mistral4Attention",
                ("apply_rotary_pos_emb_interleave", "apply_rotary_pos_emb"),
            ),
        }
        if n == 7:
            # Muse Spark with a per-layer theta list that is not the default: which
            # base does each rotating layer use? And Granite SWA with the same list.
            thetas = [1e4, 0, 5e5, 1e4, 0, 1e4, 5e5]
            runs["muse_spark_thetas"] = (
                "muse_spark",
                with_tiny(
                    T.MuseSparkTextConfig,
                    num_hidden_layers=n,
                    bos_token_id=0,
                    eos_token_id=0,
                    layer_rope_theta=thetas,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                    **muse,
                ),
                "MuseSparkTextModel",
                "MuseSparkTextAttention",
                rope,
            )
            runs["granite_swa_thetas"] = (
                "granite_swa",
                with_tiny(
                    T.GraniteSWAConfig,
                    num_hidden_layers=n,
                    head_dim=8,
                    pad_token_id=0,
                    bos_token_id=0,
                    eos_token_id=0,
                    layer_rope_theta=thetas,
                ),
                "GraniteSWAModel",
                "GraniteSWAAttention",
                rope,
            )
        for key, (module_name, config, model_cls, attn_cls, rot_names) in runs.items():
            facts = probe(key, module_name, config, model_cls, attn_cls, rot_names)
            facts["config"] = config_facts(key, config)
            out.setdefault(key, {})[str(n)] = facts
    # Nemotron-H (Mamba-2, MoE, attention, MLP: its default pattern) and Granite 4.0-H
    # with one attention layer among Mamba-2 layers (its default has none)
    nemotron = with_tiny(
        T.NemotronHConfig,
        mamba_num_heads=4,
        mamba_head_dim=8,
        ssm_state_size=8,
        n_groups=1,
        moe_intermediate_size=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        head_dim=8,
    )
    granite_types = ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"]
    granite = with_tiny(
        T.GraniteMoeHybridConfig,
        num_hidden_layers=5,
        layer_types=granite_types,
        mamba_n_heads=4,
        mamba_d_state=8,
        mamba_d_head=16,
        num_local_experts=0,
        shared_intermediate_size=32,
        pad_token_id=0,
    )
    for key, module_name, config, model_cls, attn_cls in (
        ("nemotron_h", "nemotron_h", nemotron, "NemotronHModel", "NemotronHAttention"),
        (
            "granitemoehybrid",
            "granitemoehybrid",
            granite,
            "GraniteMoeHybridModel",
            "GraniteMoeHybridAttention",
        ),
    ):
        facts = probe(key, module_name, config, model_cls, attn_cls, rope)
        facts["config"] = config_facts(key, config)
        out[key] = {str(facts["num_hidden_layers"]): facts}
    return out


# ---------------------------------------------------------------- query temperatures


class Recorded(Exception):
    pass


def recorded_query(mod, attn, call):
    """Run ``call()``; return the query the attention function receives."""
    seen = {}

    def record(module, query, *args, **kwargs):
        seen["q"] = query
        raise Recorded

    original = mod.eager_attention_forward
    mod.eager_attention_forward = record
    try:
        call()
    except Recorded:
        pass
    finally:
        mod.eager_attention_forward = original
    return seen["q"]


def fake_cache(past: int):
    """A cache that says it holds ``past`` tokens (only its length is read)."""
    return types.SimpleNamespace(
        get_seq_length=lambda layer_idx=0: past,
        update=lambda k, v, *args, **kwargs: (k, v),
    )


def ministral3_scales(pos, rope_parameters=None, past=0):
    import transformers.models.ministral3.modeling_ministral3 as mod

    kw = {} if rope_parameters is None else {"rope_parameters": rope_parameters}
    config = T.Ministral3Config(
        hidden_size=4,
        head_dim=4,
        num_attention_heads=1,
        num_key_value_heads=1,
        num_hidden_layers=1,
        **kw,
    )
    config._attn_implementation = "eager"
    attn = mod.Ministral3Attention(config, layer_idx=0)
    with torch.no_grad():
        attn.q_proj.weight.copy_(torch.eye(4))
    n = len(pos)
    cos, sin = torch.ones(1, n, 4), torch.zeros(1, n, 4)  # the identity rotation
    q = recorded_query(
        mod,
        attn,
        lambda: attn(
            torch.ones(1, n, 4),
            (cos, sin),
            None,
            torch.tensor(pos)[None],
            cache=fake_cache(past) if past else None,
        ),
    )
    return q[0, 0, :, 0].double().tolist(), dict(config.rope_parameters)


def mistral4_scales(pos, rope_parameters=None):
    import transformers.models.mistral4.modeling_mistral4 as mod

    kw = {} if rope_parameters is None else {"rope_parameters": rope_parameters}
    config = T.Mistral4Config(
        hidden_size=4,
        num_attention_heads=1,
        num_key_value_heads=1,
        num_hidden_layers=1,
        q_lora_rank=None,
        kv_lora_rank=4,
        qk_rope_head_dim=2,
        qk_nope_head_dim=2,
        v_head_dim=4,
        n_routed_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=4,
        **kw,
    )
    config._attn_implementation = "eager"
    attn = mod.Mistral4Attention(config, layer_idx=0)
    with torch.no_grad():
        attn.q_proj.weight.fill_(1 / 4)  # all-ones input -> all-ones query
    n = len(pos)
    cos, sin = torch.ones(1, n, 2), torch.zeros(1, n, 2)
    q = recorded_query(
        mod,
        attn,
        lambda: attn(torch.ones(1, n, 4), (cos, sin), None, torch.tensor(pos)[None]),
    )
    assert torch.allclose(q[0, 0], q[0, 0, :, :1].expand_as(q[0, 0]))  # every column
    return q[0, 0, :, 0].double().tolist(), dict(config.rope_parameters)


def small(defaults: dict, original: int, beta: float) -> dict:
    return {
        **defaults,
        "original_max_position_embeddings": original,
        "llama_4_scaling_beta": beta,
    }


def temperatures() -> dict:
    import transformers.models.beam.modeling_beam as beam
    import transformers.models.mistral_large4.modeling_mistral_large4 as ml4

    m3_pos = [0, 1, 16382, 16383, 16384, 16385, 32767, 32768, 49151, 49152, 10**6]
    m4_pos = [0, 1, 8190, 8191, 8192, 8193, 16383, 16384, 24575, 24576, 10**6]
    m3_default, m3_rope = ministral3_scales(m3_pos)
    m4_default, m4_rope = mistral4_scales(m4_pos)
    out = {
        "ministral3": {
            "rope_parameters": m3_rope,
            "default": {"positions": m3_pos, "scales": m3_default},
        },
        "mistral4": {
            "rope_parameters": m4_rope,
            "default": {"positions": m4_pos, "scales": m4_default},
        },
    }
    for key, fn, rope in (
        ("ministral3", ministral3_scales, m3_rope),
        ("mistral4", mistral4_scales, m4_rope),
    ):
        pos = list(range(40))
        scales, _ = fn(pos, small(rope, 4, 0.25))
        out[key]["small"] = {
            "original_max_position_embeddings": 4,
            "llama_4_scaling_beta": 0.25,
            "positions": pos,
            "scales": scales,
        }
    # a cache that says it holds 13 tokens, position_ids 0 .. 5: the factor follows
    # position_ids, not the cache's length
    scales, _ = ministral3_scales(list(range(6)), small(m3_rope, 4, 0.25), past=13)
    out["ministral3"]["cached"] = {
        "past": 13,
        "original_max_position_embeddings": 4,
        "llama_4_scaling_beta": 0.25,
        "positions": list(range(6)),
        "scales": scales,
    }
    # Mistral Large 4: a learned a_h log(p + 1) + b_h per head, on every layer
    scaling = ml4.MistralLarge4TextSoftmaxScaling(2)
    with torch.no_grad():
        scaling.scale.copy_(torch.tensor([0.05, -0.02]))
        scaling.bias.copy_(torch.tensor([1.0, 0.9]))
    pos = torch.tensor([[0, 1, 2, 7, 100, 8191, 8192, 10**6]])
    q = scaling(torch.ones(1, 2, pos.shape[1], 1), pos, head_dim_first=True)
    model = ml4.MistralLarge4TextModel(
        with_tiny(
            T.MistralLarge4TextConfig,
            num_hidden_layers=1,
            kv_lora_rank=8,
            qk_rope_head_dim=4,
            qk_nope_head_dim=4,
            v_head_dim=8,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            index_head_dim=8,
            index_n_heads=2,
            index_topk=4,
            num_key_value_heads=4,
        )
    )
    init = model.layers[0].self_attn.softmax_scaling
    out["mistral_large4"] = {
        "scale": scaling.scale.tolist(),
        "bias": scaling.bias.tolist(),
        "positions": pos[0].tolist(),
        "factors": q[0, :, :, 0].double().tolist(),  # (h, n)
        "initial_scale": init.scale.tolist(),
        "initial_bias": init.bias.tolist(),
    }
    pos = torch.tensor([[0, 1, 2046, 2047, 2048, 8191, 10**6]])
    out["beam"] = {
        "positions": pos[0].tolist(),
        "factors": beam.compute_attention_scaling(pos)[0, 0, :, 0].double().tolist(),
    }
    return out


def main():
    golden = {
        "versions": {"transformers": T.__version__, "torch": version("torch")},
        "configs": configs(),
        "probes": probes(),
        "temperatures": temperatures(),
    }
    assert math.isfinite(golden["temperatures"]["ministral3"]["default"]["scales"][-1])
    OUT.write_text(json.dumps(golden, indent=1))
    print("wrote", OUT, f"({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

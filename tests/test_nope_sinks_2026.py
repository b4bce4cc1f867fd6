"""The 2026 hybrids of book/part7/nope_sinks.ipynb: the layer patterns transcribed in
``posenc_lib/course/hybrids.py`` and the query temperature of Ministral 3 and Mistral
Small 4 (``pl.mistral_attn_scale``). Properties first, then parity with what the
models' configuration classes build and what their code does with it
(``tests/golden/make_hybrids_2026_golden.py``, transformers 5.24)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.course import hybrids as hy

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "hybrids_2026.json").read_text()
)
CONFIGS, PROBES, TEMPS = GOLDEN["configs"], GOLDEN["probes"], GOLDEN["temperatures"]

# golden key -> the transcription at a depth
RULES = {
    "llama4": hy.llama4,
    "mistral_large4": hy.mistral_large4,
    "muse_spark": hy.muse,
    "muse_glimmer": hy.muse,
    "afmoe": hy.trinity,
    "flint": hy.flint,
    "beam": hy.beam,
    "kolibri1": hy.kolibri,
    "olmo_hybrid": hy.olmo_hybrid,
    "olmo_hybrid_no_theta": lambda n: hy.olmo_hybrid(n, rope_theta=False),
    "glm5_next": hy.glm5_flash,
    "inkling": hy.inkling,
    "granite_swa": hy.granite_swa,
    "granitemoehybrid": hy.granite_4_h,
    "nemotron_h": hy.nemotron_h,
    "ministral3": hy.all_rope,
    "mistral4": hy.all_rope,
}
WINDOWED = {"sliding_attention", "hybrid_sliding"}
NOT_ATTENTION = {"linear_attention", "moe", "mlp"}


# ---------------------------------------------------------------- properties


def test_patterns_use_only_the_legend():
    for row in hy.HYBRIDS_2026:
        for n in (1, 5, 8, row.depth):
            if row.module == "nemotron_h" and n != 4:
                continue
            pattern = row.pattern(n)
            assert len(pattern) == n and set(pattern) <= set(hy.LETTERS), row.name


def test_counted_from_the_last_differs_from_the_first_unless_four_divides():
    for n in range(1, 70):
        muse, llama = hy.without_rope(hy.muse(n)), hy.without_rope(hy.llama4(n))
        assert muse[-1] == n - 1  # the last layer is always global and NoPE
        assert len(muse) == math.ceil(n / 4) and len(llama) == n // 4
        assert (muse == llama) == (n % 4 == 0)
        # Muse's layers are Llama 4's shifted by n % 4 - 4 (mod 4)
        assert all((l - (n % 4)) % 4 == 3 for l in muse)


def test_the_rules_refuse_bad_depths_and_layer_lists():
    with pytest.raises(ValueError, match="n_layers must be > 0"):
        hy.muse(0)
    with pytest.raises(TypeError, match="n_layers must be an int"):
        hy.flint(4.0)
    with pytest.raises(ValueError, match="n_layers must be 4"):
        hy.nemotron_h(8)
    with pytest.raises(ValueError, match=r"attention must list layers in 0 \.\. 4"):
        hy.granite_4_h(5, attention=(5,))
    with pytest.raises(ValueError, match="one entry per layer"):
        hy.granite_swa(4, [1e4, 0])


def test_mistral_scale_is_one_inside_the_window_then_steps_at_multiples():
    p = torch.arange(40)
    s = pl.mistral_attn_scale(p, 8, beta=0.5)
    assert (s[:8] == 1).all()  # floor(p / 8) = 0 for p < 8
    assert_close(s[8:16], torch.full((8,), 1 + 0.5 * math.log(2)))
    assert_close(s[39], torch.tensor(1 + 0.5 * math.log(1 + 4)))
    assert (s.diff() >= 0).all()
    # Llama 4's counts p + 1: the same staircase, one position earlier
    assert_close(pl.llama4_attn_scale(p[:-1], 8, 0.5), s[1:])


def test_mistral_scale_refuses_bad_arguments():
    with pytest.raises(TypeError, match="pos must hold integer positions"):
        pl.mistral_attn_scale(torch.arange(3.0), 8)
    with pytest.raises(TypeError, match="pos must be an integer tensor"):
        pl.mistral_attn_scale([0, 1], 8)
    with pytest.raises(ValueError, match="pos must be >= 0, got a minimum of -1"):
        pl.mistral_attn_scale(torch.tensor([3, -1]), 8)
    with pytest.raises(ValueError, match="original_max_position_embeddings must be"):
        pl.mistral_attn_scale(torch.arange(3), 0)
    with pytest.raises(TypeError, match="original_max_position_embeddings must be an"):
        pl.mistral_attn_scale(torch.arange(3), 8.0)
    with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
        pl.mistral_attn_scale(torch.arange(3), 8, beta=math.nan)


# ---------------------------------------------------------------- configuration classes


def layer_facts(key: str, facts: dict) -> tuple[list, list, list | None]:
    """From what a configuration class built: the attention layers, the windowed
    layers, and the rotating layers where the class states them (else None)."""
    types = facts.get("layer_types") or ["full_attention"] * facts["num_hidden_layers"]
    attention = [l for l, t in enumerate(types) if t not in NOT_ATTENTION]
    windowed = [l for l, t in enumerate(types) if t in WINDOWED]
    rope = None
    if "no_rope_layers" in facts:  # 1 = RoPE
        rope = [l for l, x in enumerate(facts["no_rope_layers"]) if x]
    elif "layer_rope_theta" in facts:  # 0 = no RoPE
        rope = [l for l, x in enumerate(facts["layer_rope_theta"]) if x]
    elif "rope_by_layer_type" in facts:  # Beam: None = no RoPE
        rope = [l for l, t in enumerate(types) if facts["rope_by_layer_type"][t]]
    return attention, windowed, rope


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_each_rule_builds_what_the_configuration_class_builds(key):
    for depth, facts in CONFIGS[key].items():
        n = facts["num_hidden_layers"]
        pattern = RULES[key](n)
        attention, windowed, rope = layer_facts(key, facts)
        assert hy.attending(pattern) == attention, (key, depth)
        assert [l for l, c in enumerate(pattern) if c in "Ww"] == windowed, (key, depth)
        if rope is not None:
            assert hy.rotating(pattern) == rope, (key, depth)


def test_the_table_quotes_the_configuration_defaults():
    for row in hy.HYBRIDS_2026:
        key = row.module
        facts = CONFIGS[key]["default"]
        assert row.depth == facts["num_hidden_layers"], row.name
        window = facts.get("sliding_window_size", facts.get("sliding_window"))
        has_window = any(c in "Ww" for c in row.pattern())
        assert row.window == (window if has_window else None), row.name
        assert row.chunk == facts.get("attention_chunk_size"), row.name
    assert CONFIGS["llama4"]["default"]["attention_chunk_size"] == 8192
    assert CONFIGS["glm5_next"]["default"]["qk_rope_head_dim"] == 0


def test_olmo_hybrid_rotates_by_default_and_not_without_a_theta():
    assert CONFIGS["olmo_hybrid"]["default"]["rope_theta"] == 10000.0
    assert PROBES["olmo_hybrid"]["10"]["rotates"] == [3, 7]
    assert PROBES["olmo_hybrid_no_theta"]["10"]["rotates"] == []


def test_granite_4_h_has_no_attention_layer_by_default():
    facts = CONFIGS["granitemoehybrid"]["default"]
    assert set(facts["layer_types"]) == {"linear_attention"}
    assert (
        "position_embedding_type" not in facts
    )  # None: no RoPE if attention is listed
    assert hy.granite_4_h(facts["num_hidden_layers"]) == "S" * 32


# ---------------------------------------------------------------- the models' code


@pytest.mark.parametrize("key", sorted(PROBES))
def test_each_rule_rotates_the_layers_the_model_code_rotates(key):
    for depth, facts in PROBES[key].items():
        n = int(depth)
        if key == "granitemoehybrid":  # the probe listed one attention layer
            pattern = hy.granite_4_h(n, attention=(3,))
        elif key.endswith("_thetas"):
            thetas = facts["config"]["layer_rope_theta"]
            pattern = hy.granite_swa(n, thetas) if "granite" in key else None
            rope = [l for l, t in enumerate(thetas) if t]
            assert facts["rotates"] == rope, key
            if pattern is None:
                continue
        else:
            pattern = RULES[key](n)
        assert facts["attention"] == hy.attending(pattern), (key, depth)
        assert facts["rotates"] == hy.rotating(pattern), (key, depth)


def test_muse_uses_one_base_for_every_rotating_layer_granite_swa_each_its_own():
    """With layer_rope_theta [1e4, 0, 5e5, 1e4, 0, 1e4, 5e5]: both skip the 0 layers;
    Muse Spark rotates the others with the global theta, Granite SWA with their own."""
    muse, granite = PROBES["muse_spark_thetas"]["7"], PROBES["granite_swa_thetas"]["7"]
    thetas = muse["config"]["layer_rope_theta"]
    assert len(set(muse["cos"].values())) == 1
    by_theta = {}
    for layer, cos in granite["cos"].items():
        by_theta.setdefault(thetas[int(layer)], set()).add(cos)
    assert all(len(v) == 1 for v in by_theta.values()) and len(by_theta) == 2
    # the shared one is the global theta's: cos(1 * 1e4 ** (-2 / 8)) for head_dim 8
    assert math.isclose(muse["cos"]["0"], math.cos(1e4 ** (-2 / 8)), rel_tol=1e-5)
    assert math.isclose(by_theta[5e5].pop(), math.cos(5e5 ** (-2 / 8)), rel_tol=1e-5)


@pytest.mark.parametrize(
    "key",
    ["glm5_next", "inkling", "nemotron_h", "granitemoehybrid", "olmo_hybrid_no_theta"],
)
def test_the_all_nope_models_read_no_position(key):
    for facts in PROBES[key].values():
        assert facts["rotates"] == [] and facts["shift_change"] == 0.0


def test_beam_reads_the_position_in_its_layers_without_rope():
    assert PROBES["beam"]["7"]["shift_change"] > 1e-3  # its temperature


# ---------------------------------------------------------------- temperatures


@pytest.mark.parametrize(
    "model, case",
    [
        (m, c)
        for m in ("ministral3", "mistral4")
        for c in TEMPS[m]
        if c != "rope_parameters"
    ],
)
def test_mistral_scale_matches_the_models(model, case):
    g, rope = TEMPS[model][case], TEMPS[model]["rope_parameters"]
    original = g.get(
        "original_max_position_embeddings", rope["original_max_position_embeddings"]
    )
    beta = g.get("llama_4_scaling_beta", rope["llama_4_scaling_beta"])
    s = pl.mistral_attn_scale(torch.tensor(g["positions"]), original, beta)
    assert_close(s, torch.tensor(g["scales"], dtype=s.dtype), atol=1e-6, rtol=1e-6)


def test_the_mistral_defaults_and_where_they_step():
    assert TEMPS["ministral3"]["rope_parameters"][
        "original_max_position_embeddings"
    ] == (16384)
    assert TEMPS["mistral4"]["rope_parameters"]["original_max_position_embeddings"] == (
        8192
    )
    for model in ("ministral3", "mistral4"):
        g = TEMPS[model]["small"]  # L0 = 4: steps at 4, 8, 12, ... (p, not p + 1)
        s = torch.tensor(g["scales"])
        steps = (torch.nonzero(s[1:] > s[:-1]).flatten() + 1).tolist()
        assert steps == list(range(4, 40, 4))
    # the cached case: the cache holds 13 tokens, the factor follows position_ids
    assert (
        TEMPS["ministral3"]["cached"]["scales"]
        == TEMPS["ministral3"]["small"]["scales"][:6]
    )


def test_mistral_large4_and_beam_factors_match_their_transcriptions():
    g = TEMPS["mistral_large4"]
    got = hy.mistral_large4_scale(
        torch.tensor(g["positions"]),
        torch.tensor(g["scale"], dtype=torch.float64),
        torch.tensor(g["bias"], dtype=torch.float64),
    )
    assert_close(
        got, torch.tensor(g["factors"], dtype=torch.float64), rtol=1e-6, atol=0
    )
    assert g["initial_scale"] == [0.0] * 4 and g["initial_bias"] == [1.0] * 4
    g = TEMPS["beam"]
    got = hy.beam_scale(torch.tensor(g["positions"]))
    assert_close(
        got, torch.tensor(g["factors"], dtype=torch.float64), rtol=1e-6, atol=0
    )


def test_the_mistral_rope_defaults_match_the_configuration_classes():
    for name, key in [
        ("Ministral 3", "ministral3"),
        ("Mistral Small 4", "mistral4"),
        ("Mistral Large 4", "mistral_large4"),
    ]:
        facts = CONFIGS[key]["default"]
        original, beta, factor = hy.MISTRAL_ROPE[name]
        assert facts["rope_type"] == "yarn", name
        assert facts["original_max_position_embeddings"] == original, name
        assert facts.get("llama_4_scaling_beta") == beta, name
        assert facts["factor"] == factor, name
    # Ministral 3: mscale == mscale_all_dim, so YaRN's attention factor is 1
    facts = CONFIGS["ministral3"]["default"]
    assert facts["mscale"] == facts["mscale_all_dim"] == 1.0

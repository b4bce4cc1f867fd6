"""RoPE as deployed: partial rotary, p-RoPE ("proportional"), the model table; golden
vectors from the models' own code (tests/golden/make_rope_deployed_golden.py)."""

import json
import pathlib
import re

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.models_data import DEPLOYED_MODELS, spec_inv_freq

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "rope_deployed_hf.json").read_text()
)
APPLY = GOLDEN["apply"]


def f64(x):
    return torch.tensor(x, dtype=torch.float64)


# ---------------------------------------------------------------- properties


def test_partial_rotary_passes_the_tail_through_and_rotates_the_head():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 16, generator=g, dtype=torch.float64)
    pos = torch.arange(7)
    inv, _ = pl.rope_inv_freq(8)
    out = pl.apply_rope(x, pos, inv, rotary_dim=8)
    assert_close(out[..., 8:], x[..., 8:])
    assert_close(out[..., :8], pl.apply_rope(x[..., :8], pos, inv))


def test_rotary_dim_equal_to_d_is_plain_rope():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    inv, _ = pl.rope_inv_freq(8)
    for layout in ("half", "interleaved"):
        assert_close(
            pl.apply_rope(x, torch.arange(5), inv, layout, rotary_dim=8),
            pl.apply_rope(x, torch.arange(5), inv, layout),
        )


@pytest.mark.parametrize("scaling", [None, "proportional"])
def test_partial_and_proportional_scores_depend_only_on_offset(scaling):
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 32, generator=g, dtype=torch.float64)
    if scaling is None:
        inv, _ = pl.rope_inv_freq(8)
        kw = {"rotary_dim": 8}
    else:
        inv, _ = pl.rope_inv_freq(
            32, scaling="proportional", partial_rotary_factor=0.25
        )
        kw = {}

    def score(m, n):
        qm = pl.apply_rope(q[None], torch.tensor([m]), inv, **kw)
        kn = pl.apply_rope(k[None], torch.tensor([n]), inv, **kw)
        return (qm * kn).sum()

    assert_close(score(3, 10), score(103, 110))
    assert_close(score(0, 5), score(50, 55))


def test_proportional_keeps_the_fastest_frequencies_of_the_full_head():
    full, _ = pl.rope_inv_freq(64, 1e6)
    prop, _ = pl.rope_inv_freq(64, 1e6, "proportional", partial_rotary_factor=0.25)
    assert_close(prop[:8], full[:8])
    assert (prop[8:] == 0).all()
    partial, _ = pl.rope_inv_freq(16, 1e6)  # NeoX style: 16 of 64 rotated
    assert not torch.allclose(partial, prop[:8])  # same name, different frequencies


def test_rotary_class_with_rotary_dim_matches_apply_rope():
    pe = pl.Rotary(16, rotary_dim=8).double()
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 2, 2, 6, 16, generator=g, dtype=torch.float64)
    pos = torch.arange(6)[None].expand(2, 6)
    qo, ko = pe.transform_qk(q, k, pos, pos)
    assert_close(qo, pl.apply_rope(q, pos, pe.inv_freq, rotary_dim=8))
    assert_close(ko[..., 8:], k[..., 8:])
    model = pl.TinyTransformer(vocab_size=11, d_model=32, n_heads=2, pe=pe)
    tokens = torch.randint(0, 11, (2, 9), generator=g)
    assert model(tokens).shape == (2, 9, 11)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("r", [0, 3, 18, -2, 4.0, True])
def test_bad_rotary_dim_is_refused(r):
    x = torch.randn(5, 16)
    inv, _ = pl.rope_inv_freq(8)
    with pytest.raises(ValueError, match="rotary_dim"):
        pl.apply_rope(x, torch.arange(5), inv, rotary_dim=r)
    with pytest.raises(ValueError, match="rotary_dim"):
        pl.Rotary(16, rotary_dim=r)


def test_inv_freq_of_the_wrong_size_for_rotary_dim_is_refused():
    inv, _ = pl.rope_inv_freq(16)
    with pytest.raises(ValueError, match="rotary_dim = 8"):
        pl.apply_rope(torch.randn(5, 16), torch.arange(5), inv, rotary_dim=8)


@pytest.mark.parametrize("p", [-0.1, 1.5, "a", True])
def test_bad_partial_rotary_factor_is_refused(p):
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        pl.rope_inv_freq(16, scaling="proportional", partial_rotary_factor=p)
    with pytest.raises(ValueError, match="factor"):
        pl.rope_inv_freq(16, scaling="proportional", factor=0.5)


# ---------------------------------------------------------------- golden


@pytest.mark.parametrize("case", GOLDEN["proportional"], ids=lambda c: str(c["p"]))
def test_proportional_matches_hugging_face(case):
    inv, att = pl.rope_inv_freq(
        case["d_head"],
        case["base"],
        "proportional",
        partial_rotary_factor=case["p"],
        factor=case["factor"],
    )
    assert att == 1.0
    assert_close(inv, f64(case["inv_freq"]), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["neox", "phi3"])
def test_partial_rotary_matches_the_models_apply_rotary_pos_emb(name):
    c = APPLY[name]
    r = c["rotary_dim"]
    inv, _ = pl.rope_inv_freq(r, c["base"])
    for x, out in (("q", "q_out"), ("k", "k_out")):
        got = pl.apply_rope(f64(c[x]), torch.tensor(c["pos"]), inv, rotary_dim=r)
        assert_close(got, f64(c[out]), rtol=1e-5, atol=1e-5)


def test_proportional_matches_gemma4_apply_rotary_pos_emb():
    c = APPLY["gemma4_full"]
    inv, _ = pl.rope_inv_freq(
        32, c["base"], "proportional", partial_rotary_factor=c["p"]
    )
    for x, out in (("q", "q_out"), ("k", "k_out")):
        got = pl.apply_rope(f64(c[x]), torch.tensor(c["pos"]), inv)
        assert_close(got, f64(c[out]), rtol=1e-5, atol=1e-5)


def test_gpt_oss_yarn_matches_its_apply_rotary_pos_emb():
    c = APPLY["gpt_oss"]
    spec = next(m for m in DEPLOYED_MODELS if m.name == "gpt-oss").specs[0]
    inv, att = pl.rope_inv_freq(16, spec.base, spec.scaling, **spec.params)
    assert att == pytest.approx(c["attention"])
    for x, out in (("q", "q_out"), ("k", "k_out")):
        got = pl.apply_rope(f64(c[x]), torch.tensor(c["pos"]), inv, "half", att)
        assert_close(got, f64(c[out]), rtol=1e-5, atol=1e-5)


def test_deepseek_interleaved_rope_matches_up_to_deinterleaving():
    """DeepSeek-V3's apply_rotary_pos_emb_interleave rotates pairs (2i, 2i+1) and writes
    the result in half order: our interleaved RoPE followed by that permutation."""
    c = APPLY["deepseek"]
    spec = next(m for m in DEPLOYED_MODELS if m.name == "DeepSeek-V3").specs[0]
    inv, att = pl.rope_inv_freq(16, spec.base, spec.scaling, **spec.params)
    assert_close(inv, f64(c["inv_freq"]), rtol=1e-6, atol=0)
    assert att == pytest.approx(c["attention"])
    perm = torch.cat((torch.arange(0, 16, 2), torch.arange(1, 16, 2)))
    for x, out in (("q", "q_out"), ("k", "k_out")):
        got = pl.apply_rope(f64(c[x]), torch.tensor(c["pos"]), inv, "interleaved", att)
        assert_close(got[..., perm], f64(c[out]), rtol=1e-5, atol=1e-5)


def test_deepseek_softmax_scale_folds_mscale_squared():
    spec = next(m for m in DEPLOYED_MODELS if m.name == "DeepSeek-V3").specs[0]
    p = spec.params
    mscale = 0.1 * p["mscale_all_dim"] * torch.log(torch.tensor(p["factor"])) + 1
    d = GOLDEN["deepseek_scaling"]["qk_head_dim"]
    assert d == 128 + 64  # nope part + rope part
    want = GOLDEN["deepseek_scaling"]["scaling"]
    assert float(d**-0.5 * mscale**2) == pytest.approx(want, rel=1e-6)


ROWS_2024_25 = [m for m in DEPLOYED_MODELS if m.block == "2024-25"]


@pytest.mark.parametrize("model", ROWS_2024_25, ids=lambda m: m.name)
def test_model_table_row_matches_the_models_rotary_embedding(model):
    """Every row: the frequencies and attention factor of each kind of layer equal the
    buffers of the model's own rotary-embedding class (built from the DEFAULT config
    where the row says its numbers come from the code)."""
    g = GOLDEN["models"][model.name]
    assert (g["kwargs"] == {} or "head_dim" in g["kwargs"]) == (model.numbers == "code")
    assert len(g["specs"]) == len(model.specs)
    for spec, want in zip(model.specs, g["specs"]):
        inv, att = spec_inv_freq(spec)
        assert_close(inv, f64(want["inv_freq"]), rtol=1e-6, atol=0)
        assert att == pytest.approx(want["attention"])
    types = g["layer_types"]
    counts = re.findall(r"(\d+) (\w+)", model.pattern)
    if types and len(counts) == 2:  # "a X : b full": the first a + b layers
        (a, _), (b, _) = counts
        period = types[: int(a) + int(b)]
        assert period.count("full_attention") == int(b), (model.name, types)
        assert period[-1] == "full_attention"


def test_model_table_has_one_row_per_model_with_a_source():
    rows = pl.model_table()
    assert [r["model"] for r in rows] == [m.name for m in DEPLOYED_MODELS]
    assert all(".py " in r["source"] and r["numbers"] in ("code", "checkpoint")
               for r in rows if r["block"] == "2024-25")  # fmt: skip
    # the 2026 block adds "quoted": numbers read from third parties' copies of a
    # config.json, said in the row's note
    assert all(".py" in r["source"] for r in rows)
    quoted = [r for r in rows if r["numbers"] == "quoted"]
    assert quoted and all("quoted" in r["note"] for r in quoted)
    with pytest.raises(ValueError, match="block"):
        pl.model_table("2023")


def test_olmo3_row_prints_class_defaults_with_the_checkpoints_scaling_noted():
    row = next(r for r in pl.model_table() if r["model"] == "OLMo 3")
    assert row["encoding"].count("(class default)") == 3  # two bases, the scaling
    assert "YaRN x8 from 8192" in row["note"]


def test_mla_sizes_are_deepseek_v3_config_defaults():
    assert pl.models_data.MLA_DEEPSEEK_V3 == GOLDEN["deepseek_mla"]


def test_partial_rotary_is_proportional_with_base_to_the_d_over_r():
    """Exercise 1 of the chapter: p = r/d and base b^(d/r) give partial rotary's
    frequencies, padded with zeros."""
    d, r, b = 64, 16, 10000.0
    prop, _ = pl.rope_inv_freq(
        d, b ** (d / r), "proportional", partial_rotary_factor=r / d
    )
    part, _ = pl.rope_inv_freq(r, b)
    assert_close(prop[: r // 2], part)
    assert (prop[r // 2 :] == 0).all()


# ---------------------------------------------------------------- the 2026 block

GOLDEN_2026 = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "models_2026_hf.json").read_text()
)
RUNS = GOLDEN_2026["models"]
FUNCTIONS = GOLDEN_2026["functions"]
ROWS_2026 = [m for m in DEPLOYED_MODELS if m.block == "2026"]
IN_TRANSFORMERS = [m for m in ROWS_2026 if m.name in RUNS]


def plan_of_run(layers):
    """The layer plan a run shows: L where no attention ran, R/N (full) or r/n
    (sliding: the last query sees fewer keys than there are) by whether the layer
    called a rotary function."""
    plan = ""
    for rotates, seen in zip(layers["rotates"], layers["keys_seen"]):
        if seen is None:
            plan += "L"
        else:
            letter = "R" if rotates else "N"
            plan += letter if seen == layers["n"] else letter.lower()
    return plan


def test_the_table_has_both_blocks_and_every_2026_family():
    assert {m.block for m in DEPLOYED_MODELS} == {"2024-25", "2026"}
    names = {m.name for m in ROWS_2026}
    for family in (
        "GLM-5.x", "GLM-5.3-Flash", "Qwen3.5", "Qwen3.5-MoE", "Ministral 3",
        "Mistral Small 4", "Mistral Large 4", "Muse Glimmer", "Muse Spark",
        "MiMo-V2-Flash", "MiniMax-M2", "MiniMax-M3", "Nemotron-H", "OLMo Hybrid",
        "Granite 4.0-H", "Trinity", "Flint", "Beam", "Kolibri", "Inkling",
        "DeepSeek-V3.2", "DeepSeek-V4", "Qwen4-Exp", "Kimi K2.6", "Kimi Linear",
        "Intern-S1-Pro (FoPE)", "Qwen2.5-1M (DCA)",
    ):  # fmt: skip
        assert family in names, family
    assert [r["block"] for r in pl.model_table("2026")] == ["2026"] * len(ROWS_2026)


def test_every_2026_row_is_checked_against_a_golden_record():
    outside = {m.name for m in ROWS_2026} - {m.name for m in IN_TRANSFORMERS}
    assert outside == {"Intern-S1-Pro (FoPE)", "Qwen2.5-1M (DCA)"}
    # those two are checked in tests/test_frontier.py against their authors' code
    assert {"fope", "dual_chunk"} <= set(GOLDEN_2026)


@pytest.mark.parametrize("model", IN_TRANSFORMERS, ids=lambda m: m.name)
def test_2026_row_matches_the_models_classes(model):
    """Every 2026 row: frequencies and attention factor per kind of layer (the model's
    own rotary class, from its default configuration), learned frequencies, the layer
    plan, the window, sinks, the sigmoid gate and the indexer (a small model of the
    same class with the default layer pattern, run)."""
    g = RUNS[model.name]
    assert (g["kwargs"] == {}) == (model.numbers == "code")
    tables = {k: v for k, v in g["rotary"].items() if k != "alpha_shape"}
    assert len(tables) == len(model.specs), model.name
    for spec in model.specs:
        want = tables[spec.layer_type or "all"]
        inv, att = spec_inv_freq(spec)
        assert_close(inv, f64(want["inv_freq"]), rtol=1e-6, atol=0)
        assert att == pytest.approx(want["attention"])
    learned = any(s.learned_freq for s in model.specs)
    assert ("alpha_shape" in g["rotary"]) == learned
    if learned:
        assert g["rotary"]["alpha_shape"] == [len(tables["all"]["inv_freq"])]
    layers = g["layers"]
    if model.plan:
        assert model.plan == plan_of_run(layers), model.name
    config = g["config"]
    window = config.get("sliding_window", config.get("sliding_window_size"))
    assert model.window == window
    plan = plan_of_run(layers)
    sliding = [i for i, c in enumerate(plan) if c in "rn"]
    attention = [i for i, c in enumerate(plan) if c != "L"]
    # a sliding query sees exactly the window the tiny run set, itself included
    # (DeepSeek-V4 adds its compressed keys to the window)
    for i in sliding:
        seen, w = layers["keys_seen"][i], layers["window"]
        assert seen == w or (model.name == "DeepSeek-V4" and seen >= w), (i, seen)
    sinks = [i for i, s in enumerate(layers["sinks"]) if s]
    want_sinks = {"": [], "sliding layers": sliding, "every layer": attention}
    assert sinks == want_sinks[model.sinks], model.name
    assert bool(model.gate) == g["gate"], model.name
    indexed = [i for i, s in enumerate(layers["indexer"]) if s]
    if not model.indexer or "class default: none" in model.indexer:
        assert indexed == []
    else:
        assert indexed == attention, model.name


def test_2026_windows_are_the_configuration_defaults():
    for m in IN_TRANSFORMERS:
        if m.window:
            assert (
                f"{m.window} keys"
                == pl.model_table("2026")[ROWS_2026.index(m)]["window"]
            )
    # MiMo-V2-Flash's checkpoint field counts the earlier tokens: +1 for the query
    assert RUNS["MiMo-V2-Flash"]["config"]["sliding_window"] == 129
    tiny = RUNS["MiMo-V2-Flash"]["layers"]
    assert max(s for s in tiny["keys_seen"] if s < tiny["n"]) == tiny["window"]


def test_olmo_hybrid_checkpoint_and_granite_run_without_rope():
    """The released OLMo Hybrid (no rope_theta) and Granite 4.0-H (position embedding
    type None by default) rotate in no layer; their attention layers exist."""
    for name in ("OLMo Hybrid (checkpoint)", "Granite 4.0-H"):
        plan = plan_of_run(RUNS[name]["layers"])
        assert "N" in plan and not set(plan) & set("Rr"), (name, plan)
    assert RUNS["OLMo Hybrid (checkpoint)"]["kwargs"] == {"rope_theta": None}


def test_minimax_m3_rotary_dim_does_not_reach_its_rotary_class():
    g = RUNS["MiniMax-M3"]
    assert g["config"]["rotary_dim"] == 64 and g["config"]["head_dim"] == 128
    assert len(g["rotary"]["all"]["inv_freq"]) == 128 // 2  # the whole head


def test_source_lines_the_chapter_cites_are_transformers_5_24():
    quoted = GOLDEN_2026["quoted_lines"]
    for (path, line), text in pl.models_data.SOURCE_LINES.items():
        assert quoted[path][text] == line, (path, line)


# ---- the formulas of the 2026 rows, against the models' own functions

POS = torch.tensor(FUNCTIONS["positions"])


def test_log_floor_scale_is_ministral3_and_mistral4():
    md = pl.models_data
    close = {"rtol": 1e-6, "atol": 1e-6}
    got = md.log_floor_scale(POS, 0.1, 16384).double()
    assert_close(got, f64(FUNCTIONS["ministral3_scale"]), **close)
    got = md.log_floor_scale(POS, 0.1, 8192).double()
    assert_close(got, f64(FUNCTIONS["mistral4_scale"]), **close)
    # Llama 4's NoPE-layer temperature is the same family, counted from p + 1
    assert_close(
        md.log_floor_scale(POS, 0.1, 8192, offset=1), pl.llama4_attn_scale(POS)
    )


def test_power_scale_is_beams_compute_attention_scaling():
    want = f64(FUNCTIONS["beam_scale"])
    got = pl.models_data.power_scale(POS).double()
    assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_learned_log_scale_is_mistral_large4_softmax_scaling():
    c = FUNCTIONS["mistral_large4_softmax_scaling"]
    got = pl.models_data.learned_log_scale(POS, f64(c["scale"]), f64(c["bias"]))
    assert_close(got, f64(c["q_scale"]), rtol=1e-5, atol=1e-6)


def test_learned_frequencies_are_inv_freq_times_exp_alpha():
    """MistralLarge4TextRotaryEmbedding: cos and sin of p * inv_freq * exp(alpha),
    inv_freq the YaRN table of the row's numbers."""
    c = FUNCTIONS["mistral_large4_learned"]
    spec = next(m for m in DEPLOYED_MODELS if m.name == "Mistral Large 4").specs[0]
    inv, att = pl.rope_inv_freq(c["d_rope"], spec.base, spec.scaling, **spec.params)
    assert_close(inv, f64(c["inv_freq"]), rtol=1e-6, atol=0)
    theta = inv * torch.exp(f64(c["alpha"]))
    angles = torch.tensor(c["positions"])[:, None] * theta  # (n, d/2)
    emb = torch.cat((angles, angles), -1) * 1.0
    assert_close(att * emb.cos(), f64(c["cos"]), rtol=1e-4, atol=1e-4)
    assert_close(att * emb.sin(), f64(c["sin"]), rtol=1e-4, atol=1e-4)


def test_qwen3_5_text_rope_is_interleaved_mrope():
    c = FUNCTIONS["qwen3_5_mrope"]
    axes = pl.mrope_axes(c["mrope_section"], interleaved=True)  # (d/2,)
    pos = torch.tensor(c["positions"])  # (3, n)
    inv = f64(c["inv_freq"])
    angles = pos[axes].T * inv  # (n, d/2): pair i turns with axis axes[i]
    emb = torch.cat((angles, angles), -1)
    assert_close(emb.cos(), f64(c["cos"]), rtol=1e-4, atol=1e-4)
    spec = next(m for m in DEPLOYED_MODELS if m.name == "Qwen3.5").specs[0]
    assert tuple(c["mrope_section"]) == spec.mrope_section
    assert sum(spec.mrope_section) == spec.rotary_dim // 2


def test_inkling_relative_logits():
    c = FUNCTIONS["inkling_relative_logits"]
    r, proj = f64(c["relative_states"]), f64(c["proj"])
    got = pl.models_data.content_relative_bias(r, proj)
    assert_close(got, f64(c["bias"]), rtol=1e-5, atol=1e-6)


def test_olmo3_yarn_reaches_the_full_layers_only():
    c = FUNCTIONS["olmo3_yarn"]
    plain, _ = pl.rope_inv_freq(128, 500000.0)
    assert_close(f64(c["sliding_attention"]["inv_freq"]), plain.float().double())
    params = {k: v for k, v in c["rope_scaling"].items() if k != "rope_type"}
    yarn, att = pl.rope_inv_freq(128, 500000.0, "yarn", **params)
    assert_close(f64(c["full_attention"]["inv_freq"]), yarn, rtol=1e-6, atol=0)
    assert att == pytest.approx(c["full_attention"]["attention"])
    assert c["sliding_attention"]["attention"] == 1.0


def test_layer_plans_and_their_descriptions():
    md = pl.models_data
    assert md.layer_plan("rrrN", 6, from_last=True) == "rNrrrN"
    assert md.layer_plan("rNrr", 6, at={0: "N", -1: "N"}) == "NNrrrN"
    assert (
        md.describe_plan("rrrN" * 3)
        == "12 layers: 9 r, 3 N; N every 4th layer from layer 3"
    )
    assert md.describe_plan("R" * 5) == "5 layers, all R"
    spark = md.describe_plan(md.layer_plan("rrrN", 62, from_last=True))
    assert spark.endswith("N every 4th layer from layer 1")
    flint = md.describe_plan(md.layer_plan("rNrr", 49, at={0: "N", 48: "N"}))
    assert flint.endswith("from layer 1; except layer 0: N, layer 48: N")
    assert md.describe_plan("LLNL") == "4 layers: 1 N, 3 L"  # too short to repeat
    with pytest.raises(ValueError, match="unit"):
        md.layer_plan("x", 3)
    with pytest.raises(ValueError, match="at"):
        md.layer_plan("r", 3, at={5: "N"})


def test_model_block_fits_a_phone():
    for row in pl.model_table():
        block = pl.models_data.model_block(row, width=44)
        assert max(len(line) for line in block.splitlines()) <= 44, row["model"]


def test_temperature_and_bias_functions_refuse_bad_input():
    md = pl.models_data
    with pytest.raises(TypeError, match="integer positions"):
        md.log_floor_scale(torch.tensor([1.5]), 0.1, 8)
    with pytest.raises(ValueError, match=">= 0"):
        md.power_scale(torch.tensor([-1]))
    with pytest.raises(ValueError, match="length"):
        md.log_floor_scale(torch.tensor([1]), 0.1, 0)
    with pytest.raises(ValueError, match="scale and bias"):
        md.learned_log_scale(torch.tensor([1]), torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match="d_rel"):
        md.content_relative_bias(torch.ones(4, 2, 3), torch.ones(5, 6))


def test_fope_row_keeps_the_frequencies_its_note_says():
    """Intern-S1-Pro's row: base and head from its config.json; the count of kept
    frequencies in its note is fope_inv_freq's (checked against the remote code in
    tests/test_frontier.py)."""
    row = next(m for m in DEPLOYED_MODELS if m.name == "Intern-S1-Pro (FoPE)")
    spec = row.specs[0]
    kept = pl.frontier.fope_inv_freq(spec.d_head, spec.base, 262144)
    assert f"({len(kept)} of {spec.d_head // 2})" in row.note

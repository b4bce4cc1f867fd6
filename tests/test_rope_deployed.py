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


@pytest.mark.parametrize("model", DEPLOYED_MODELS, ids=lambda m: m.name)
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
               for r in rows)  # fmt: skip


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

"""posenc_lib.frontier: the transcription of which layers of the models of 2022-2026
compute a positional encoding (checked against transformers' source), the layer lists
of Llama 4 and SmolLM3 (against their configuration classes), and the future chapter's
toy mechanisms (SSMax, Dual Chunk Attention's offsets, also as vLLM serves them,
Intern-S1-Pro's FoPE, a decaying recurrence)."""

import importlib.util
import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

from posenc_lib.frontier import (
    CONFIG_DEFAULTS,
    MODEL_POSITION,
    QUOTED_LINES,
    dca_offsets,
    decay_recurrence,
    fope_cos_sin,
    fope_inv_freq,
    llama4_layers,
    smollm3_layers,
    ssmax_weights,
)

GOLDEN = pathlib.Path(__file__).with_name("golden")
REF_MODELS = pathlib.Path(
    "/work/ref/lib/python3.11/site-packages/transformers/models"
)  # the reference environment, where it exists


def _golden_script():
    spec = importlib.util.spec_from_file_location(
        "make_frontier_golden", GOLDEN / "make_frontier_golden.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_found(row):
    """The transcription in the shape the golden script extracts."""
    calls = [
        dict(
            name=name,
            guards=[]
            if guard is None
            else [guard]
            if isinstance(guard, str)
            else [*guard],
            per_layer=row["per_layer"] and guard is not None,
        )
        for name, guard in row["calls"]
    ]
    return dict(
        calls=calls,
        defines_apply_rotary=row["defines_rope"],
        sigmoid_gate=row["sigmoid_gate"],
    )


GOLDEN_2026 = json.loads((GOLDEN / "models_2026_hf.json").read_text())


def test_every_row_has_an_era():
    assert {r["era"] for r in MODEL_POSITION.values()} == {"2022-25", "2026"}
    years = [m for m, r in MODEL_POSITION.items() if r["era"] == "2022-25"]
    assert all("(20" in m for m in years)  # the history rows carry their years


def test_transcription_matches_golden():
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    assert golden["transformers"].startswith("5.")
    assert set(golden["models"]) == set(MODEL_POSITION)
    for model, row in MODEL_POSITION.items():
        found = golden["models"][model]
        assert (found["module"], found["cls"]) == (row["module"], row["cls"]), model
        expected = _as_found(row)
        assert found["calls"] == expected["calls"], model
        assert found["defines_apply_rotary"] == expected["defines_apply_rotary"], model
        assert found["sigmoid_gate"] == expected["sigmoid_gate"], model


@pytest.mark.skipif(not REF_MODELS.is_dir(), reason="transformers source not installed")
def test_transcription_matches_installed_transformers():
    extract = _golden_script().position_calls
    for model, row in MODEL_POSITION.items():
        path = REF_MODELS / row["module"] / f"modeling_{row['module']}.py"
        assert extract(path.read_text(), row["cls"]) == _as_found(row), model


def test_config_defaults_match_golden():
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    found = golden["config_defaults"]
    assert found == {f"{m}: {n}": v for (m, n), v in CONFIG_DEFAULTS.items()}


@pytest.mark.skipif(not REF_MODELS.is_dir(), reason="transformers source not installed")
def test_config_defaults_match_installed_transformers():
    read = _golden_script().config_default
    for (module, name), value in CONFIG_DEFAULTS.items():
        path = REF_MODELS / module / f"configuration_{module}.py"
        assert read(path.read_text(), name) == value, (module, name)


def test_quoted_lines_occur_in_the_models_code():
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    assert golden["quoted_lines"] == {
        module: {line: True for line in lines} for module, lines in QUOTED_LINES.items()
    }
    if REF_MODELS.is_dir():
        for module, lines in QUOTED_LINES.items():
            text = (REF_MODELS / module / f"modeling_{module}.py").read_text()
            present = {line.strip() for line in text.splitlines()}
            assert all(line in present for line in lines), module


def test_extractor_sees_guards_and_per_layer_attributes():
    source = (
        "def apply_rotary_pos_emb(q, k):\n    return q, k\n"
        "class A:\n"
        "    def __init__(self, config, layer_idx):\n"
        "        kind = config.layer_types[layer_idx]\n"
        "        self.rope = kind == 'x'\n"
        "        self.flag = config.flag\n"
        "    def forward(self, q, k):\n"
        "        if self.rope:\n"
        "            q, k = apply_rotary_pos_emb(q, k)\n"
        "        if self.flag:\n"
        "            q, k = apply_rotary_pos_emb(q, k)\n"
    )
    found = _golden_script().position_calls(source, "A")
    assert found["defines_apply_rotary"] and not found["sigmoid_gate"]
    assert found["calls"] == [
        dict(name="apply_rotary_pos_emb", guards=["self.rope"], per_layer=True),
        dict(name="apply_rotary_pos_emb", guards=["self.flag"], per_layer=False),
    ]


def test_every_layer_claims_follow_the_guards():
    # the correction: these apply RoPE in every layer, unconditionally per layer
    for model in (
        "DeepSeek-V3, Kimi K2 (2024-25)",
        "gpt-oss (2025)",
        "Qwen3-MoE (2025)",
    ):
        row = MODEL_POSITION[model]
        assert row["calls"] and not row["per_layer"], model
    for model in ("Llama 4 (2025)", "SmolLM3 (2025)", "Command R7B / A (2024-25)"):
        assert MODEL_POSITION[model]["per_layer"], model
    jamba = MODEL_POSITION["Jamba (2024)"]
    assert jamba["defines_rope"] and not jamba["calls"]


def test_ssmax_is_softmax_of_scaled_scores():
    torch.manual_seed(0)
    z = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    w = ssmax_weights(z, 0.5)
    n = torch.arange(1, 7, dtype=torch.float64)[:, None]
    keep = torch.ones(6, 6, dtype=torch.bool).tril()
    ref = torch.softmax((0.5 * n.log() * z).masked_fill(~keep, float("-inf")), -1)
    assert_close(w, ref)
    assert_close(w.sum(-1), torch.ones(2, 3, 6, dtype=torch.float64))
    w_full = ssmax_weights(z[..., :4, :], 0.5, causal=False)
    assert_close(
        w_full, torch.softmax(0.5 * torch.log(torch.tensor(6.0)) * z[..., :4, :], -1)
    )


def test_ssmax_keeps_a_needle_as_n_grows():
    # one score larger by delta = 2: softmax gives it e^2 / (e^2 + n - 1) -> 0, SSMax
    # with s = 1 gives it n^2 / (n^2 + n - 1) -> 1 (s * delta > 1)
    for n in (64, 4096):
        z = torch.zeros(1, n, dtype=torch.float64)
        z[0, 0] = 2.0
        assert ssmax_weights(z, 1.0, causal=False)[0, 0] > 0.98
        assert torch.softmax(z, -1)[0, 0] < 0.11


def test_ssmax_bad_input():
    with pytest.raises(ValueError, match="s must be"):
        ssmax_weights(torch.zeros(2, 2), 0.0)
    with pytest.raises(ValueError, match="square"):
        ssmax_weights(torch.zeros(2, 3), 1.0)
    with pytest.raises(ValueError, match="scores must have shape"):
        ssmax_weights(torch.zeros(3), 1.0)


def test_dca_offsets_stay_below_pretraining_length_and_are_exact_locally():
    pretrain, n = 64, 400
    off = dca_offsets(n, pretrain)
    chunk_size, w = pretrain * 3 // 4, pretrain // 16
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    seen = j <= i
    assert off[seen].min() >= 0
    assert off[seen].max() <= chunk_size < pretrain
    near = seen & (i - j <= w)
    assert torch.equal(off[near], (i - j).expand(n, n)[near])
    assert (off[~seen] == -1).all()
    # with n below a chunk, DCA is plain causal RoPE
    small = dca_offsets(chunk_size - w, pretrain)
    m = chunk_size - w
    ii, jj = torch.arange(m)[:, None], torch.arange(m)[None, :]
    assert torch.equal(small, torch.where(jj <= ii, ii - jj, -1))


def test_dca_bad_input():
    with pytest.raises(ValueError, match="pretrain_len"):
        dca_offsets(10, 0)
    with pytest.raises(ValueError, match="local_window"):
        dca_offsets(10, 16, local_window=12)


def test_decay_recurrence_equals_masked_parallel_form():
    torch.manual_seed(1)
    b, h, n, d, e = 2, 2, 7, 3, 4
    q, k = torch.randn(2, b, h, n, d, dtype=torch.float64)
    v = torch.randn(b, h, n, e, dtype=torch.float64)
    log_a = -torch.rand(b, h, n, dtype=torch.float64)
    out = decay_recurrence(q, k, v, log_a)
    cum = log_a.cumsum(-1)  # sum_{m<=t} log a_m
    decay = (cum[..., :, None] - cum[..., None, :]).exp().tril()  # prod_{m=j+1..t} a_m
    ref = torch.einsum("bhij,bhje->bhie", decay * (q @ k.transpose(-1, -2)), v)
    assert_close(out, ref)


def test_decay_recurrence_bad_input():
    q = torch.zeros(1, 1, 3, 2)
    with pytest.raises(ValueError, match="log_a must be <= 0"):
        decay_recurrence(q, q, q, torch.ones(1, 1, 3))
    with pytest.raises(ValueError, match="q and k"):
        decay_recurrence(q, q[..., :1], q, torch.zeros(1, 1, 3))


# ---------------------------------------------------------------- 2026 rows


def test_2026_rows_agree_with_the_models_run():
    """Where the transcription says a 2026 model calls no rotary function, or calls it
    in some layers only, a small model of the same class agrees
    (tests/golden/models_2026_hf.json records which layers called one)."""
    runs = GOLDEN_2026["models"]
    for model, row in MODEL_POSITION.items():
        if row["era"] != "2026" or model not in runs:
            continue
        rotates = runs[model]["layers"]["rotates"]
        seen = runs[model]["layers"]["keys_seen"]
        attention = [i for i, s in enumerate(seen) if s is not None]
        rotating = [i for i in attention if rotates[i]]
        if not row["calls"]:
            assert not rotating, model
        elif row["per_layer"]:
            assert 0 < len(rotating) < len(attention), model
        assert runs[model]["gate"] == row["sigmoid_gate"], model


# ---------------------------------------------------------------- layer lists


@pytest.mark.parametrize("case", range(4))
def test_llama4_layers_match_the_configuration_class(case):
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    want = golden["layer_lists"]["llama4"][case]
    got = llama4_layers(*want["args"])
    assert list(got[0]) == want["no_rope_layers"]
    assert list(got[1]) == want["layer_types"]


@pytest.mark.parametrize("case", range(3))
def test_smollm3_layers_match_the_configuration_class(case):
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    want = golden["layer_lists"]["smollm3"][case]
    got = smollm3_layers(*want["args"])
    assert list(got[0]) == want["no_rope_layers"]
    assert list(got[1]) == want["layer_types"]


def test_the_layer_list_cases_include_no_chunks_and_a_window():
    golden = json.loads((GOLDEN / "frontier_transformers.json").read_text())
    assert any(c["args"][2] is None for c in golden["layer_lists"]["llama4"])
    assert any(c["args"][2] and c["args"][3] for c in golden["layer_lists"]["smollm3"])


# ---------------------------------------------------------------- DCA as vLLM serves it


@pytest.mark.parametrize("case", sorted(GOLDEN_2026["dual_chunk"]["cases"]))
def test_dca_offsets_match_vllm_dual_chunk_rotary_embedding(case):
    """vLLM's caches give the positions it rotates by (the golden script reads them
    back from DualChunkRotaryEmbedding._compute_cos_sin_cache); forward_native picks
    q[p % s] (own chunk), qc[p % s] (the previous one), qc[s - 1] (earlier ones) and
    k[p]; the offsets equal dca_offsets with vLLM's chunk and local sizes."""
    c = GOLDEN_2026["dual_chunk"]["cases"][case]
    pos = c["positions"]
    chunk, local = c["chunk_size"], c["local_size"]
    s = chunk - local
    n = 3 * chunk
    q, qc, k = (torch.tensor(pos[name]) for name in ("q", "qc", "k"))
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    ci, cj = i // s, j // s
    q_pos = torch.where(
        ci == cj, q[i % s], torch.where(ci == cj + 1, qc[i % s], qc[s - 1])
    )
    want = torch.where(j <= i, q_pos - k[j], torch.full((n, n), -1))
    got = dca_offsets(n, pretrain_len=chunk, local_window=local, chunk_size=chunk)
    assert torch.equal(got, want)


def test_dca_chunk_size_bad_input():
    with pytest.raises(ValueError, match="chunk_size"):
        dca_offsets(10, 16, chunk_size=20)
    with pytest.raises(ValueError, match="local_window"):
        dca_offsets(10, 16, local_window=8, chunk_size=8)


# ---------------------------------------------------------------- FoPE as shipped


@pytest.mark.parametrize("case", sorted(GOLDEN_2026["fope"]["cases"]))
def test_fope_matches_intern_s1_pro_remote_code(case):
    c = GOLDEN_2026["fope"]["cases"][case]
    inv = fope_inv_freq(c["head_dim"], c["rope_theta"], c["max_position_embeddings"])
    assert_close(
        inv, torch.tensor(c["inv_freq"], dtype=torch.float64), rtol=1e-6, atol=0
    )
    pos = torch.tensor(c["positions"])
    cos_coef = torch.tensor(c["cos_coef"], dtype=torch.float64)
    sin_coef = torch.tensor(c["sin_coef"], dtype=torch.float64)
    cos, sin = fope_cos_sin(pos, inv, cos_coef, sin_coef, c["head_dim"])
    assert_close(cos, torch.tensor(c["cos"], dtype=torch.float64), rtol=1e-4, atol=1e-4)
    assert_close(sin, torch.tensor(c["sin"], dtype=torch.float64), rtol=1e-4, atol=1e-4)
    # applied as the remote code applies it: each key head's cos and sin, repeated
    # over the query heads of its group, in the half layout
    q = torch.tensor(c["q"], dtype=torch.float64)  # (h, n, d)
    k = torch.tensor(c["k"], dtype=torch.float64)  # (h_kv, n, d)
    group = q.shape[0] // k.shape[0]

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), -1)

    rep = (cos.repeat_interleave(group, 0), sin.repeat_interleave(group, 0))
    q_out = q * rep[0] + rotate_half(q) * rep[1]
    k_out = k * cos + rotate_half(k) * sin
    assert_close(
        q_out, torch.tensor(c["q_out"], dtype=torch.float64), rtol=1e-4, atol=1e-4
    )
    assert_close(
        k_out, torch.tensor(c["k_out"], dtype=torch.float64), rtol=1e-4, atol=1e-4
    )


def test_fope_keeps_the_frequencies_that_turn_within_the_window():
    inv = fope_inv_freq(128, 5000000.0, 262144)
    assert (2 * torch.pi / inv < 262144).all()
    full = pl.rope_inv_freq(128, 5000000.0)[0]
    assert_close(inv, full[: len(inv)])
    assert (2 * torch.pi / full[len(inv) :] >= 262144).all()
    assert len(fope_inv_freq(128, 5000000.0, 262144, num_inv_freq=10)) == 10


def test_fope_bad_input():
    with pytest.raises(ValueError, match="max_len"):
        fope_inv_freq(16, 1e4, 0)
    with pytest.raises(ValueError, match="num_inv_freq"):
        fope_inv_freq(16, 1e4, 100, num_inv_freq=9)
    inv = fope_inv_freq(16, 1e4, 100)
    with pytest.raises(ValueError, match="cos_coef"):
        fope_cos_sin(torch.arange(3), inv, torch.eye(2)[None], torch.eye(2)[None], 16)

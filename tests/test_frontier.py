"""posenc_lib.frontier: the transcription of which layers of today's models compute a
positional encoding (checked against transformers' source), and the future chapter's
toy mechanisms (SSMax, Dual Chunk Attention's offsets, a decaying recurrence)."""

import importlib.util
import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

from posenc_lib.frontier import (
    CONFIG_DEFAULTS,
    MODEL_POSITION,
    QUOTED_LINES,
    dca_offsets,
    decay_recurrence,
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
            guards=[] if guard is None else [guard],
            per_layer=row["per_layer"] and guard is not None,
        )
        for name, guard in row["calls"]
    ]
    return dict(
        calls=calls,
        defines_apply_rotary=row["defines_rope"],
        sigmoid_gate=row["sigmoid_gate"],
    )


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

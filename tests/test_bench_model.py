"""``tools/measure/bench_model.py``: the model-level benchmark runs (tiny sizes) and
writes a well-formed file; its baseline is the NoPE ``TinyTransformer``."""

import json
import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from tools.measure import bench_model

TINY = ["--vocab", "17", "--d-model", "16", "--n-heads", "2", "--n-layers", "2"]


def test_the_harness_runs_and_writes_a_well_formed_file(tmp_path, capsys):
    out = tmp_path / "model_bench_cpu.json"
    threads = torch.get_num_threads()
    argv = [*TINY, "--n", "24", "--repeats", "2", "--out", str(out)]
    assert bench_model.main([*argv, "--encodings", "t5", "alibi", "cope", "shaw"]) == 0
    assert torch.get_num_threads() == threads  # one thread while it measures
    data = json.loads(out.read_text())
    meta, rows = data["meta"], data["rows"]
    assert meta["device"] == "cpu" and meta["threads"] == 1 and meta["repeats"] == 2
    assert meta["config"] == dict(
        vocab=17, d_model=16, n_heads=2, n_layers=2, batch=1, n=24, dtype="float32"
    )
    assert meta["torch"] == torch.__version__ and meta["date"].endswith("UTC")
    names = [r["model"] for r in rows]
    assert names == [bench_model.BASELINE, "nope", "t5", "alibi", "cope", "shaw"]
    for row in rows:
        for key in ("fwd_ms", "fb_ms", "fb_peak_mib", "fb_x_sdpa", "fb_x_nope"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["model"], key)
    by_name = {r["model"]: r for r in rows}
    base, nope = by_name[bench_model.BASELINE], by_name["nope"]
    for row in rows:  # the ratios against the rows' own peaks (each reference's: 1)
        peak = row["fb_peak_mib"]
        assert row["fb_peak_x_sdpa"] == pytest.approx(peak / base["fb_peak_mib"])
        assert row["fb_peak_x_nope"] == pytest.approx(peak / nope["fb_peak_mib"])
    # the path a causal call takes: CoPE's causal_attention is on the fused path
    assert by_name["t5"]["path"] == by_name["cope"]["path"] == "fused"
    assert by_name["shaw"]["path"] == "reference"
    table = out.with_suffix(".md").read_text()
    assert all(f"| {name} |" in table for name in names)
    assert table == capsys.readouterr().out.strip() + "\n"


def test_a_time_budget_keeps_the_references_and_says_what_it_left_out(tmp_path):
    """Past ``--deadline-s`` (the GPU run's budget) no model but the two references
    is warmed up and no round but the first runs: the file says so, and every
    round's rows were written as they were measured."""
    out = tmp_path / "model_bench_cpu.json"
    argv = [*TINY, "--n", "16", "--repeats", "5", "--out", str(out)]
    assert bench_model.main([*argv, "--encodings", "t5", "--deadline-s", "0"]) == 0
    meta, rows = (lambda d: (d["meta"], d["rows"]))(json.loads(out.read_text()))
    assert meta["rounds"] == 1 and meta["complete"]
    assert meta["stopped"] == "time budget: 1 of 5 rounds (--deadline-s 0)"
    by_name = {r["model"]: r for r in rows}
    assert by_name["nope"]["fb_x_sdpa"] > 0
    assert by_name["t5"] == {
        "model": "t5",
        "note": "not run: past the time budget (--deadline-s)",
    }
    assert "medians of 1 interleaved rounds" in out.with_suffix(".md").read_text()
    assert not list(tmp_path.glob("*.part"))


def test_the_baseline_is_the_nope_tiny_transformer_on_the_fused_kernel():
    """The same parameters under the same names: the NoPE model's weights load into
    the baseline and give its logits."""
    torch.manual_seed(0)
    ours = pl.TinyTransformer(17, 16, 2, 2)
    base = bench_model.SDPAModel(17, 16, 2, 2)
    base.load_state_dict(ours.state_dict())
    tokens = torch.randint(0, 17, (2, 12))
    assert_close(base(tokens), ours(tokens))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--encodings", "sinks"], "--encodings: unknown ['sinks']"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--n", "0"], "--n must be >= 1"),
        (["--d-model", "10", "--n-heads", "4"], "must split into --n-heads"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(argv, says, capsys):
    with pytest.raises(SystemExit):
        bench_model.main(argv)
    assert says in capsys.readouterr().err

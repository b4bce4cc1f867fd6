"""The lab's command line (``python -m posenc_lib.lab``): it runs, a bad
configuration names its field, a resumed run is bit for bit the uninterrupted one,
the text splits do not overlap, and under torchrun two processes train as one."""

import json
import os
import subprocess
import sys

import pytest
import torch

from posenc_lib.course.lab import LabConfig, lab_source, load_results
from posenc_lib.course.lab import cli

# a run of a few seconds: 2 tiny encodings, 8 steps of the book's chain
TINY = [
    "--encodings", "alibi,rope",
    "--train-len", "8",
    "--factors", "1,2",
    "--steps", "8",
    "--batch-size", "4",
    "--d-model", "16",
    "--n-heads", "2",
    "--eval-sequences", "2",
    "--device", "cpu",
    "--no-progress",
]  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "POSENC_DEVICE": "cpu"}


def _cli(*args, torchrun: int = 0, check_rc=0):
    """Run the command line in a fresh process (under torchrun with that many
    processes); its completed process."""
    head = [sys.executable, "-m"]
    if torchrun:
        head += [
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={torchrun}",
            "-m",
        ]
    proc = subprocess.run(
        [*head, "posenc_lib.lab", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr[-3000:]
    return proc


def _losses(out, name="alibi", seed=0):
    return json.loads((out / "jobs" / f"{name}-seed{seed}.json").read_text())["losses"]


def test_cli_runs_and_writes_results_table_and_log(tmp_path):
    """The command itself, in a process of its own (the other tests call
    ``cli.main`` in this one: each process costs seconds of imports)."""
    out = tmp_path / "run"
    _cli(*TINY, "--out", str(out))
    results, record = load_results(out / "results.json")
    assert [r.encoding for r in results] == ["alibi", "rope"]
    assert all(r.lengths == (8, 16) for r in results)
    assert all(r.loss_in > 0 and r.loss_past[16] > 0 for r in results)
    assert record["config"]["steps"] == 8 and record["run"]["world_size"] == 1
    assert record["run"]["versions"]["torch"] == torch.__version__
    assert "rise@16" in (out / "table.txt").read_text()
    log = [json.loads(line) for line in open(out / "run_log.jsonl")]
    assert log[-1]["status"] == "finished" and log[-1]["device"] == "cpu"


def test_config_file_and_presets_in_process(tmp_path):
    toml = tmp_path / "lab.toml"
    toml.write_text('train-len = 32\nfactors = [1, 4]\nencodings = ["nope"]\n')
    cfg = cli.resolve_config("toy", cli.load_config_file(toml), {"steps": "7"})
    assert (cfg.train_len, cfg.factors, cfg.encodings, cfg.steps) == (
        32,
        (1, 4),
        ("nope",),
        7,
    )
    cfg = cli.resolve_config("cpu-small", {}, {"tokens": "10000"})
    assert cfg.steps == -(-10_000 // (cfg.batch_size * cfg.train_len))
    assert isinstance(cfg.lab(), LabConfig) and cfg.lab().train_len == 64
    for preset in cli.PRESETS:
        cli.resolve_config(preset)  # every preset is a valid configuration


@pytest.mark.parametrize(
    "flags, field, allowed",
    [
        (["--dataset", "wiki"], "dataset", "'markov', 'stdlib', 'text'"),
        (["--encodings", "rope,nonsense"], "encodings", "alibi"),
        (["--dtype", "float16"], "dtype", "auto, float32, bfloat16"),
        (["--preset", "huge"], "preset", "toy, cpu-small"),
        (["--steps", "many"], "steps", "must be an int"),
        (["--factors", "2,4"], "factors", "include 1"),
        (["--dataset", "text"], "data_dir", "folder"),
    ],
)
def test_bad_configuration_names_the_field(flags, field, allowed):
    with pytest.raises(ValueError) as err:
        args = dict(zip([f[2:].replace("-", "_") for f in flags[::2]], flags[1::2]))
        preset = args.pop("preset", "toy")
        cli.resolve_config(preset, {}, args)
    assert field in str(err.value) and allowed in str(err.value)


def test_bad_config_file_key_is_named(tmp_path, capsys):
    bad = tmp_path / "lab.json"
    bad.write_text(json.dumps({"d_modle": 64}))
    assert cli.main(["--config", str(bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown field 'd_modle'" in err and "d_model" in err


def test_resume_is_bit_for_bit(tmp_path, capsys):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert cli.main([*TINY, "--out", str(whole)]) == 0
    assert cli.main([*TINY, "--out", str(parts), "--stop-at", "3"]) == 75
    assert "resume with --resume" in capsys.readouterr().err
    assert (parts / "checkpoints" / "alibi-seed0.pt").exists()
    # flags that would change the results are refused on resume, by name
    assert cli.main(["--out", str(parts), "--resume", "--steps", "9"]) == 2
    assert "steps" in capsys.readouterr().err
    assert cli.main(["--out", str(parts), "--resume", "--no-progress"]) == 0
    for name in ("alibi", "rope"):
        assert _losses(whole, name) == _losses(parts, name)  # every step, exactly
    a, _ = load_results(whole / "results.json")
    b, _ = load_results(parts / "results.json")
    for x, y in zip(a, b):
        assert (x.loss_in, x.loss_past, x.per_position) == (
            y.loss_in,
            y.loss_past,
            y.per_position,
        )
    log = [json.loads(line) for line in open(parts / "run_log.jsonl")]
    assert [entry["resume"] for entry in log] == [False, True]


def test_text_folder_splits_do_not_overlap(tmp_path):
    # lines that never repeat: any shared window would be a shared position
    for k in range(3):
        (tmp_path / f"part{k}.txt").write_text(
            "".join(f"line {k}-{i:05d}\n" for i in range(400))
        )
    (tmp_path / ".hidden").write_text("never read")
    cfg = LabConfig(
        dataset="text", data_dir=str(tmp_path), data_glob="*.txt", train_len=16
    )
    source = lab_source(cfg)
    assert source.vocab_size == 256 and source.train_span[1] == source.eval_span[0]
    assert source.eval_span[1] == len(source.stream)
    text = bytes(source.stream.tolist()).decode()
    assert "never read" not in text and text.count("line ") == 1200
    train_text = bytes(source.stream[: source.split].tolist()).decode()
    data = cli.StreamData(cfg, seed=0)
    windows = [data.global_batch(s) for s in range(20)]
    for w in torch.cat(windows):  # every training window lies in the training part
        assert bytes(w.tolist()).decode() in train_text
    for w in data.eval:  # no evaluation window shares a line with the training part
        chunk = bytes(w.tolist()).decode()
        lines = [ln for ln in chunk.split("\n")[1:-1] if ln]
        assert lines and not any(ln + "\n" in train_text for ln in lines)


def test_stream_batches_shard_the_global_batch():
    cfg = LabConfig(train_len=8, batch_size=6, factors=(1, 2))
    one = cli.StreamData(cfg, 3)
    ranks = [cli.StreamData(cfg, 3, rank, 3) for rank in range(3)]
    for step in (0, 5):
        x, y, _ = one.batch(step)
        parts = [r.batch(step) for r in ranks]
        assert torch.equal(torch.cat([p[0] for p in parts]), x)
        assert torch.equal(torch.cat([p[1] for p in parts]), y)
    with pytest.raises(ValueError, match="batch_size .* must divide"):
        cli.StreamData(cfg, 0, 0, 4)


def _gloo() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


needs_gloo = pytest.mark.skipif(
    not _gloo(), reason="torch.distributed with gloo is not available"
)


ONE_ENCODING = [*TINY, "--encodings", "alibi"]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """A run under ``torchrun --nproc_per_node=2`` (gloo), shared by the tests."""
    if not _gloo():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("torchrun") / "two"
    _cli(*ONE_ENCODING, "--out", str(out), torchrun=2)
    return out


@needs_gloo
def test_torchrun_two_processes_train_as_one(tmp_path, two_processes):
    one = tmp_path / "one"
    assert cli.main([*ONE_ENCODING, "--out", str(one)]) == 0
    _, record = load_results(two_processes / "results.json")
    assert record["run"]["world_size"] == 2 and record["run"]["backend"] == "gloo"
    torch.testing.assert_close(
        torch.tensor(_losses(two_processes)),
        torch.tensor(_losses(one)),
        rtol=1e-5,
        atol=1e-5,
    )  # the same global batch: equal up to the order of float32 sums
    a, _ = load_results(one / "results.json")
    b, _ = load_results(two_processes / "results.json")
    assert a[0].loss_past[16] == pytest.approx(b[0].loss_past[16], rel=1e-4)


@needs_gloo
def test_torchrun_stopped_and_resumed_gives_the_same_result(tmp_path, two_processes):
    whole, parts = two_processes, tmp_path / "parts"
    stopped = _cli(
        *ONE_ENCODING, "--out", str(parts), "--stop-at", "4", torchrun=2, check_rc=None
    )
    assert stopped.returncode != 0  # torchrun reports the workers' status 75
    assert (parts / "checkpoints" / "alibi-seed0.pt").exists()
    assert not (parts / "results.json").exists()
    _cli("--out", str(parts), "--resume", "--no-progress", torchrun=2)
    assert _losses(whole) == _losses(parts)  # every step, exactly
    a, _ = load_results(whole / "results.json")
    b, _ = load_results(parts / "results.json")
    assert (a[0].loss_in, a[0].loss_past) == (b[0].loss_in, b[0].loss_past)


def test_sigterm_checkpoints_and_resume_continues(tmp_path, monkeypatch):
    """SIGTERM (a scheduler's notice) ends the step in progress, writes the
    checkpoint and exits with 75; --resume then ends where an unstopped run ends."""
    import signal

    whole, parts = tmp_path / "whole", tmp_path / "parts"
    args = [*TINY, "--encodings", "rope"]
    assert cli.main([*args, "--out", str(whole)]) == 0
    real, calls = cli.train_step, []

    def step_then_term(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)

    monkeypatch.setattr(cli, "train_step", step_then_term)
    assert cli.main([*args, "--out", str(parts)]) == 75
    state = torch.load(parts / "checkpoints" / "rope-seed0.pt", weights_only=False)
    assert state["step"] == 3
    monkeypatch.setattr(cli, "train_step", real)
    assert cli.main(["--out", str(parts), "--resume", "--no-progress"]) == 0
    assert _losses(whole, "rope") == _losses(parts, "rope")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_hugging_face_dataset_through_a_stand_in(monkeypatch):
    """--dataset hf reads the text column through `datasets` (a stand-in here: the
    tests never go online), and says what to install when it is missing."""
    import types

    rows = [{"text": f"row {i} é\n"} for i in range(300)]
    calls = []

    def load_dataset(path, config, split, streaming):
        calls.append((path, config, split, streaming))
        return iter(rows)

    fake = types.ModuleType("datasets")
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    cfg = cli.resolve_config(
        "toy", {}, {"dataset": "hf", "hf_dataset": "someone/corpus:en"}
    )
    cfg = LabConfig(**{**cfg.lab().__dict__, "corpus_chars": 1000})
    source = lab_source(cfg)
    assert calls == [("someone/corpus", "en", "train", True)]
    assert len(source.stream) == 1000 and source.vocab_size == 256
    assert bytes(source.stream[:12].tolist()).decode() == "row 0 é\n\nro"
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(ModuleNotFoundError, match=r"posenc_lib\[datasets\]"):
        lab_source(cfg)
    with pytest.raises(ValueError, match="hf_dataset must name"):
        cli.resolve_config("toy", {}, {"dataset": "hf"})

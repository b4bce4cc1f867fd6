"""Train once (tools/testing/train_once.py): the student run on the fake GPU reuses the
training nbval recorded, after running its first steps on the device, and the reuse
cannot hide a tensor on the wrong device: in the training's first steps, at a later
batch that brings a new shape or a larger position, or after the training; nor can it
return another training's result (other data, arguments, encoding or random state, or
a GPU code path that computes otherwise).
The last test (``-m build``: the test command's ``train-once`` stage) runs a planted
notebook as the test command does: under nbval, which records, then as a student
notebook on the fake GPU, which reuses.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
import torch

import posenc_lib as pl
from tools.testing import train_once
from tools.testing.fake_cuda import fake_cuda

ROOT = pathlib.Path(__file__).resolve().parents[1]
V, N, STEPS = 11, 8, 24
WRONG_DEVICE = "Expected all tensors to be on the same device"


def model_and_batches(pe="alibi", n_late=N, seed=0, lr_seed=0):
    """A tiny model built on the CPU (``pe``: a registered name or an encoding), and
    a batch function of a seeded generator whose batches are ``n_late`` long from
    step 12 on."""
    torch.manual_seed(seed)
    pe = pl.make_encoding(pe, 16, 2, 64) if isinstance(pe, str) else pe
    model = pl.TinyTransformer(V, 16, 2, 1, pe=pe)
    gen = torch.Generator().manual_seed(100 + lr_seed)

    def batches(step):
        n = N if step < 12 else n_late
        x = torch.randint(V, (4, n + 1), generator=gen)
        return x[:, :-1], x[:, 1:]

    return model, batches


class Steps:
    """Counts the forward passes a model starts in training (one per step)."""

    def __init__(self, model):
        self.n = 0
        model.register_forward_pre_hook(self.seen)

    def seen(self, module, args):
        self.n += module.training


@pytest.fixture
def records(tmp_path):
    yield tmp_path
    train_once.uninstall()


def record(folder, **kw) -> tuple[torch.nn.Module, list[float]]:
    model, batches = model_and_batches(**kw)
    train_once.install("record", folder, "test", "ctx")
    try:
        losses = pl.train(model, batches, STEPS, progress=False)
    finally:
        train_once.uninstall()
    return model, losses


def reuse(folder, model, batches, **kw):
    train_once.install("reuse", folder, "test", "ctx")
    try:
        return pl.train(model.to("cuda"), batches, STEPS, progress=False, **kw)
    finally:
        train_once.uninstall()


def outcomes(folder) -> list[str]:
    return [r["outcome"] for r in train_once.read_log(folder) if r["mode"] == "reuse"]


def test_the_student_run_reuses_the_recorded_training_after_its_first_steps(records):
    trained, losses = record(records)
    model, batches = model_and_batches()
    steps = Steps(model)
    with fake_cuda():
        got = reuse(records, model, batches)
        assert all(p.is_cuda for p in model.parameters())
        assert not model.training
    assert got == losses and len(got) == STEPS
    for (name, p), q in zip(model.named_parameters(), trained.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0, msg=name)
    assert steps.n == train_once.FIRST_STEPS  # no batch brought anything new
    assert outcomes(records) == ["reused"]
    assert train_once.read_log(records)[-1]["ran"] == train_once.FIRST_STEPS


def test_a_tensor_on_the_wrong_device_after_a_reused_training_fails(records):
    record(records)
    model, batches = model_and_batches()
    with fake_cuda():
        reuse(records, model, batches)
        with pytest.raises(ValueError, match="tokens is a tensor on cpu"):
            model(torch.randint(V, (2, N)))  # tokens left on the CPU
        pl.evaluate(model, batches(0))  # moved by the helper: fine
    assert outcomes(records) == ["reused"]


class CpuBiasAbove(pl.PositionalEncoding):
    """A bias made on the CPU for sequences longer than ``n`` (on the queries' device
    otherwise): a bug that only a long enough batch shows."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def score_bias(self, q, k, q_pos, k_pos):
        bias = torch.zeros(k.shape[-2], k.shape[-2])  # (i j), on the CPU
        return bias if k.shape[-2] > self.n else bias.to(q.device)


def record_training(folder, model, batches) -> list[float]:
    train_once.install("record", folder, "test", "ctx")
    try:
        return pl.train(model, batches, STEPS, progress=False)
    finally:
        train_once.uninstall()


def test_a_wrong_device_in_the_first_steps_fails_under_reuse(records):
    record_training(records, *model_and_batches(pe=CpuBiasAbove(0)))
    model, batches = model_and_batches(pe=CpuBiasAbove(0))
    with fake_cuda(), pytest.raises(RuntimeError, match=WRONG_DEVICE):
        reuse(records, model, batches)
    assert outcomes(records) == []  # it failed in the first steps


def test_a_wrong_device_that_only_a_later_longer_batch_shows_fails_under_reuse(
    records,
):
    """Batches of length 8, then 12 from step 12: the first longer batch is stepped
    for real although a record of this very training exists."""
    record_training(records, *model_and_batches(pe=CpuBiasAbove(N), n_late=12))
    model, batches = model_and_batches(pe=CpuBiasAbove(N), n_late=12)
    steps = Steps(model)
    with fake_cuda(), pytest.raises(RuntimeError, match=WRONG_DEVICE):
        reuse(records, model, batches)
    assert steps.n == train_once.FIRST_STEPS + 1  # the first steps, then the probe


def test_a_new_position_beyond_those_met_is_stepped_for_real(records):
    """Positions that grow past every earlier batch's (same shapes): stepped."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(V, 16, 2, 1, pe=pl.make_encoding("rope", 16, 2, 64))
    init = {k: v.clone() for k, v in model.state_dict().items()}

    def batches(step):
        x = torch.arange(N + 1).repeat(2, 1) % V
        return x[:, :-1], x[:, 1:], torch.arange(N) + (0 if step < 20 else 40)

    record_training(records, model, batches)
    model.load_state_dict(init)
    steps = Steps(model)
    with fake_cuda():
        reuse(records, model, batches)
    assert outcomes(records) == ["reused"]
    assert steps.n == train_once.FIRST_STEPS + 1


@pytest.mark.parametrize(
    "change",
    ["other data", "another learning rate", "another encoding", "another random state"],
)
def test_another_training_is_never_given_the_recorded_result(records, change):
    _, losses = record(records, pe="nope")
    kw = {
        "other data": {"pe": "nope", "lr_seed": 1},
        "another encoding": {"pe": "rope"},  # no parameters: the same weights
    }.get(change, {"pe": "nope"})
    model, batches = model_and_batches(**kw)
    if change == "another random state":
        torch.rand(1)
    steps = Steps(model)
    with fake_cuda():
        got = reuse(
            records, model, batches, **({"lr": 1e-3} if "rate" in change else {})
        )
    assert steps.n >= STEPS and outcomes(records)[-1].startswith("trained")
    if change != "another random state":  # these models draw no random numbers
        assert got != losses


def graph_model_and_batches(change_at=None, far_from=None):
    """A tiny Graphormer model and batches that carry side inputs, ``(tokens, targets,
    None, {"spd": ..., "degree": ...})``, drawn from a seeded pool of graphs; at step
    ``change_at`` the degrees are another tensor (values already met), from step
    ``far_from`` on the distances reach values beyond those met."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(V, 16, 2, 1, pe=pl.Graphormer(16, 2, max_dist=12))
    gen = torch.Generator().manual_seed(100)
    adj = pl.random_connected_graphs(16, N, 2, gen)
    pool = {"spd": pl.shortest_path_distances(adj), "degree": pl.node_degrees(adj)}

    def batches(step):
        idx = torch.randint(16, (4,), generator=gen)
        x = torch.randint(V, (4, N + 1), generator=gen)
        inputs = {name: t[idx] for name, t in pool.items()}
        if step == change_at:
            inputs["degree"] = inputs["degree"].clamp(max=1)
        if far_from is not None and step >= far_from:
            inputs["spd"] = inputs["spd"] + 4  # as far as Graphormer's table reaches
        return x[:, :-1], x[:, 1:], None, inputs

    return model, batches


def test_a_training_whose_batches_carry_side_inputs_is_reused(records):
    """The side inputs are hashed and fingerprinted with the rest of each batch: the
    same training is reused, one whose side inputs differ in one batch is not."""
    losses = record_training(records, *graph_model_and_batches())
    model, batches = graph_model_and_batches()
    steps = Steps(model)
    with fake_cuda():
        got = reuse(records, model, batches)
    assert got == losses and outcomes(records) == ["reused"]
    assert steps.n == train_once.read_log(records)[-1]["ran"] < STEPS
    plain = steps.n

    model, batches = graph_model_and_batches(change_at=STEPS - 1)
    steps = Steps(model)
    with fake_cuda():
        reuse(records, model, batches)
    assert outcomes(records)[-1] == "trained (other batches)"
    assert steps.n == train_once.FIRST_STEPS + STEPS

    # a side input's value beyond those the earlier batches met: stepped for real
    record_training(records, *graph_model_and_batches(far_from=20))
    model, batches = graph_model_and_batches(far_from=20)
    steps = Steps(model)
    with fake_cuda():
        reuse(records, model, batches)
    assert outcomes(records)[-1] == "reused" and steps.n == plain + 1


class GpuPathBug(pl.PositionalEncoding):
    """A learned linear bias whose GPU code path is wrong (scaled by 1.5): nbval on
    the CPU never takes it."""

    def __init__(self):
        super().__init__()
        self.slope = torch.nn.Parameter(torch.tensor(-0.1))

    def score_bias(self, q, k, q_pos, k_pos):
        d = (k_pos[:, None, :] - q_pos[:, :, None]).to(q.dtype)  # (b i j)
        return self.slope * (1.5 if q.device.type == "cuda" else 1.0) * d[:, None]


def test_a_gpu_code_path_that_computes_otherwise_is_trained_in_full(records):
    """The key is the same (same model, data, arguments); the fingerprint after the
    first steps is not: the training runs in full on the device."""
    record_training(records, *model_and_batches(pe=GpuPathBug()))
    model, batches = model_and_batches(pe=GpuPathBug())
    steps = Steps(model)
    with fake_cuda():
        reuse(records, model, batches)
    assert outcomes(records) == ["trained (another fingerprint)"]
    assert train_once.read_log(records)[-1]["differs"] > train_once.TOLERANCE
    assert steps.n == train_once.FIRST_STEPS + STEPS


def test_without_a_record_it_trains_in_full(records):
    model, batches = model_and_batches()
    steps = Steps(model)
    with fake_cuda():
        reuse(records, model, batches)
    assert steps.n == STEPS and outcomes(records) == ["trained (no record)"]


PLANTED = [
    "import torch\nimport posenc_lib as pl\n\ndevice = pl.book.setup()",
    (
        "torch.manual_seed(0)\n"
        "model = pl.TinyTransformer(11, 16, 2, 1, pe=pl.make_encoding('alibi', 16, 2))"
        "\nmodel = model.to(device)\n"
        "gen = torch.Generator().manual_seed(1)\n\n\n"
        "def batches(step):\n"
        "    x = torch.randint(11, (4, 9), generator=gen)\n"
        "    return x[:, :-1], x[:, 1:]\n\n\n"
        "losses = pl.train(model, batches, 40, progress=False)"
    ),
    "assert losses[-1] < losses[0]",
    "logits = model(torch.randint(11, (2, 8)))  # tokens left on the CPU",
]


@pytest.mark.build  # two kernels and a pytest: the test command's train-once stage
def test_a_planted_notebook_with_a_tensor_on_the_wrong_device_after_training_fails(
    tmp_path,
):
    """As the test command runs it: nbval records the notebook's training (it passes
    on the CPU), then its student run on the fake GPU reuses that training and fails
    at the cell that leaves a tensor on the CPU."""
    from tests.test_student_notebooks import run_student_notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in PLANTED]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = tmp_path / "planted.ipynb"
    nbformat.write(nb, path)
    records = tmp_path / "records"
    env = {
        **os.environ,
        "POSENC_TRAIN_ONCE": str(records),
        "POSENC_NBVAL_STAGE": str(tmp_path / "stage"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tools.build.nbval_cache"]
        + ["--nbval-lax", "--nbval-current-env", "-o", "addopts=", "-q"]
        + ["-p", "no:cacheprovider", "--rootdir", str(ROOT), str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [r["outcome"] for r in train_once.read_log(records)] == ["recorded"]
    entry = path.with_suffix("").as_posix()
    with pytest.raises(pytest.fail.Exception, match="tokens is a tensor on cpu"):
        run_student_notebook(path, entry, str(records))
    assert [r["outcome"] for r in train_once.read_log(records)] == [
        "recorded",
        "reused",
    ]

"""Every tensor on the model's device, tested on a machine without a GPU.

The tests run on a CUDA device that computes on the CPU
(``tools/testing/fake_cuda.py``): its tensors say ``cuda:0`` and refuse to meet a CPU
tensor, as a GPU's do, so a tensor left on the CPU fails here as it fails on a GPU.
Where a GPU is present the same tests also run on it. Covered: the registry contract
(every encoding's attention on every path, forward and backward), ``TinyTransformer``
(forward, backward, cached decoding, its probes), the training and evaluation helpers,
the lab, the position builders and the exercise checks that re-evaluate a reader's
model.

Each result on the device is compared with the same computation on the CPU, so a branch
that computes something else on a GPU is caught too.
"""

from __future__ import annotations

import contextlib
import copy
import sys

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from tools.testing.fake_cuda import fake_cuda, on_fake_cuda

D_MODEL, N_HEADS, MAX_LEN, VOCAB = 32, 4, 64, 13
NAMES = sorted(pl.REGISTRY)
# the real card's half, marked: make test-gpu runs it alone (-m cuda)
DEVICES = ["fake-cuda"] + (
    [pytest.param("cuda", marks=pytest.mark.cuda)] if torch.cuda.is_available() else []
)


@pytest.fixture(params=DEVICES)
def device(request):
    """The device under test, entered for the whole test: ``cuda`` either way."""
    with fake_cuda() if request.param == "fake-cuda" else contextlib.nullcontext():
        yield torch.device("cuda")


def build(name):
    return pl.make_encoding(name, d_model=D_MODEL, n_heads=N_HEADS, max_len=MAX_LEN)


def real_card() -> bool:
    """Whether ``cuda`` is a card here (the fake device is not)."""
    return torch.cuda.is_available() and not on_fake_cuda(torch.empty(0, device="cuda"))


FLOAT32 = dict(rtol=1e-5, atol=1e-5)
# TF32 keeps 10 bits of each factor's mantissa, so a product is good to about 1e-3;
# PyTorch's own tests compare TF32 results at 5e-3 (``tf32_on_and_off(0.005)``, the
# example of torch/testing/_internal/common_cuda.py)
TF32 = dict(rtol=5e-3, atol=5e-3)


def tolerance(module: torch.nn.Module) -> dict:
    """``assert_close``'s tolerance for ``module``'s result on the device against the
    CPU's: float32's, or TF32's where a real card computes in TF32 by default:
    cuDNN's convolutions (``torch.backends.cudnn.allow_tf32``, True unless set; the
    convolutional embedding's) and, where someone enabled it, matrix products
    (``torch.backends.cuda.matmul.allow_tf32``, False unless set)."""
    if not real_card():
        return FLOAT32
    convolves = any(
        isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules()
    )
    cudnn = torch.backends.cudnn.allow_tf32 and convolves
    return TF32 if cudnn or torch.backends.cuda.matmul.allow_tf32 else FLOAT32


def example(pe, b, n, shift=0, seed=0):
    """CPU positions and side inputs ``pe`` accepts for ``n`` tokens (seeded)."""
    g = torch.Generator().manual_seed(seed)
    pos = pe.example_positions(b, n, generator=g) + shift
    return pos, pe.example_inputs(b, n, generator=g)


def on(device, tree):
    """Every tensor and module of ``tree`` moved to ``device``."""
    if isinstance(tree, (torch.Tensor, torch.nn.Module)):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: on(device, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(on(device, v) for v in tree)
    return tree


def assert_on(device, *tensors):
    for t in tensors:
        assert t.device.type == device.type, f"{tuple(t.shape)} is on {t.device}"


def cpu(t):
    return t.detach().cpu()


# ---- the fake device refuses what a GPU refuses (else these tests prove nothing) ----


def test_the_fake_device_refuses_a_cpu_tensor_as_a_gpu_does():
    with fake_cuda():
        x = torch.randn(3, 4, device="cuda")
        assert x.device == torch.device("cuda", 0) and on_fake_cuda(x)
        for mixed in (
            lambda: x + torch.randn(3, 4),
            lambda: x @ torch.randn(4, 2),
            lambda: torch.cat([x, torch.randn(1, 4)]),
            lambda: torch.nn.Embedding(5, 4).cuda()(torch.tensor([1, 2])),
            lambda: torch.nn.Linear(4, 2)(x),
        ):
            with pytest.raises(RuntimeError, match="same device"):
                mixed()
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        with pytest.raises(RuntimeError, match="generator"):
            torch.randn(2, device="cuda", generator=torch.Generator())
        # what CUDA accepts: a 0-d CPU tensor, indexing with CPU indices, copies
        assert (x * torch.tensor(2.0)).device.type == "cuda"
        assert x[torch.tensor([0, 2])].shape == (2, 4)
        x[0] = torch.zeros(4)
        moved = torch.randn(3, 4).to("cuda")
        assert on_fake_cuda(moved) and not on_fake_cuda(moved.cpu())
        assert_close((x + moved).cpu(), x.cpu() + moved.cpu())
    assert not torch.cuda.is_available() or torch.cuda.device_count() > 0


def test_the_fake_device_moves_a_module_given_the_device_by_name():
    """``module.to(device="cuda", dtype=...)`` parses its arguments with a torch
    function of its own, which the fake device must not send to the CPU (the
    model benchmark builds its models so)."""
    with fake_cuda():
        layer = torch.nn.Linear(3, 3).to(
            device=torch.device("cuda"), dtype=torch.bfloat16
        )
        assert all(on_fake_cuda(p) for p in layer.parameters())
        assert layer.weight.dtype == torch.bfloat16
        assert on_fake_cuda(torch.nn.Linear(3, 3).to(device="cuda").weight)


def test_the_fake_device_copies_as_to_copy_true_asks():
    """``t.to(copy=True, dtype=..., device=...)``, as transformers' ``generate``
    calls it, gives a new tensor on the device asked for (a copy even in place)."""
    with fake_cuda():
        x = torch.randn(2, 3, device="cuda")
        same = x.to(copy=True, dtype=torch.float32, device=x.device)
        assert on_fake_cuda(same) and same is not x
        same.add_(1.0)
        assert not torch.equal(same.cpu(), x.cpu())  # a copy, not a view
        moved = x.to(copy=True, device="cpu")
        assert not on_fake_cuda(moved) and torch.equal(moved, x.cpu())


def test_the_fake_device_trains_a_module_on_real_values():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    twin = copy.deepcopy(model)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with fake_cuda():
        model.cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert_on(torch.device("cuda"), *model.parameters(), model.weight.grad)
        assert_on(torch.device("cuda"), *copy.deepcopy(model).parameters())
    opt = torch.optim.AdamW(twin.parameters(), lr=0.1)
    for _ in range(3):
        loss = ((twin(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert_close(cpu(model.weight), twin.weight.detach())


# ---- the registry contract on the device ----


@pytest.mark.parametrize("name", NAMES)
def test_attention_on_every_path_runs_on_the_device_as_on_the_cpu(name, device):
    torch.manual_seed(0)
    pe = build(name)
    host = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)
    gpu = copy.deepcopy(host).to(device)
    assert_on(device, *gpu.parameters(), *gpu.buffers())
    x = torch.randn(2, 10, D_MODEL)
    pos, inputs = example(pe, 2, 10, shift=3)
    paths = ["reference"] if pe.needs_score_path else ["reference", "fused"]
    for causal in (True,) if pe.causal_only else (False, True):
        for path in paths:
            want = host(x, pos, causal=causal, path=path, inputs=inputs)
            xd = x.to(device).requires_grad_()
            got = gpu(xd, on(device, pos), causal, path=path, inputs=on(device, inputs))
            assert_on(device, got)
            assert_close(cpu(got), want.detach(), **tolerance(gpu))
            got.square().sum().backward()
            assert_on(
                device,
                xd.grad,
                *(p.grad for p in gpu.parameters() if p.grad is not None),
            )
            gpu.zero_grad()


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_stays_on_the_device_and_loads_across_devices(name, device):
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build(name)).to(device)
    state = model.state_dict()
    assert_on(device, *state.values())
    host = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build(name))
    host.load_state_dict({k: v.cpu() for k, v in state.items()})
    tokens = torch.randint(VOCAB, (2, 9))
    pos, inputs = example(host.pe, 2, 9)
    want = host(tokens, pos, inputs=inputs)
    got = model(tokens.to(device), on(device, pos), inputs=on(device, inputs))
    assert_close(cpu(got), want.detach(), **tolerance(model))


# ---- TinyTransformer: forward, backward, cached decoding, probes ----


@pytest.mark.parametrize("name", NAMES)
def test_model_forward_backward_and_probes_on_the_device(name, device):
    torch.manual_seed(0)
    host = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build(name))
    model = copy.deepcopy(host).to(device)
    tokens = torch.randint(VOCAB, (2, 9))
    pos, inputs = example(host.pe, 2, 9, shift=2)
    causal = True
    want = host(tokens, pos, causal, inputs=inputs)
    tokens_d, pos_d, inputs_d = tokens.to(device), on(device, pos), on(device, inputs)
    got = model(tokens_d, pos_d, causal, inputs=inputs_d)
    assert_on(device, got)
    assert_close(cpu(got), want.detach(), **tolerance(model))
    got.logsumexp(-1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads
    assert_on(device, *grads)
    weights = model.attention_map(tokens_d, 1, pos_d, causal, inputs=inputs_d)
    inp = model.attention_input(tokens_d, 0, pos_d, causal, inputs=inputs_d)
    assert_on(device, weights, inp)
    assert_close(
        cpu(weights),
        host.attention_map(tokens, 1, pos, causal, inputs=inputs),
        **tolerance(model),
    )


def _decodes(pe) -> bool:
    return (
        getattr(pe, "no_cache_reason", None) is None
        and not pe.side_inputs
        and pe.coord_axes is None
    )


@pytest.mark.parametrize("name", [n for n in NAMES if _decodes(build(n))])
def test_cached_decoding_on_the_device_equals_the_full_forward(name, device):
    torch.manual_seed(0)
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build(name)).to(device)
    tokens = torch.randint(VOCAB, (2, 10), device=device)
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :6], cache=cache)]
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(6, 10)]
    decoded = torch.cat(steps, dim=1)
    assert_on(device, decoded, *(t for c in cache for t in (c.k, c.v, c.pos, c.x)))
    assert_close(cpu(decoded), cpu(full), rtol=1e-4, atol=1e-4)


def test_a_model_refuses_tokens_on_another_device_naming_both(device):
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build("rope")).to(device)
    refused = r"tokens is a tensor on cpu.*model is on cuda"
    with pytest.raises(ValueError, match=refused):
        model(torch.randint(VOCAB, (2, 5)))
    attn = pl.MultiHeadAttention(D_MODEL, N_HEADS, build("rope")).to(device)
    with pytest.raises(ValueError, match=r"x is a tensor on cpu.*layer is on cuda"):
        attn(torch.randn(2, 5, D_MODEL))


def test_positions_masks_and_side_inputs_from_the_cpu_are_moved(device):
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 2, pe=build("alibi")).to(device)
    tokens = torch.randint(VOCAB, (2, 6))
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    want = model.cpu()(tokens, torch.arange(6) + 4, mask=mask, causal=False)
    model.to(device)
    got = model(tokens.to(device), torch.arange(6) + 4, mask=mask, causal=False)
    assert_close(cpu(got), want.detach())
    graph = build("graphormer")
    pos, inputs = example(graph, 2, 6)
    gm = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=graph).to(device)
    out = gm(tokens.to(device), pos, causal=False, inputs=inputs)
    assert_on(device, out)


# ---- the training and evaluation helpers, the lab ----


def _batches(step):
    g = torch.Generator().manual_seed(step)
    t = torch.randint(VOCAB, (4, 9), generator=g)  # built on the CPU
    return t[:, :-1], t[:, 1:], None


def test_train_moves_each_batch_to_the_model_and_leaves_the_model_there(device):
    torch.manual_seed(0)
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=build("rope"))
    twin = copy.deepcopy(model)
    model.to(device)
    losses = pl.train(model, _batches, 5, progress=False)
    assert_on(device, *model.parameters())
    assert pl.evaluate(model, _batches(9)) == pytest.approx(
        pl.evaluate(model, [_batches(9)]), rel=1e-6
    )
    assert 0 <= pl.accuracy(model, _batches(9)) <= 1
    twin_losses = pl.train(twin.cpu(), _batches, 5, progress=False)
    assert losses == pytest.approx(twin_losses, rel=1e-4)


def _graph_batches(step):
    """A batch with side inputs (Graphormer's), built on the CPU."""
    g = torch.Generator().manual_seed(step)
    adj = pl.random_connected_graphs(4, 7, 2, g)
    spd = pl.shortest_path_distances(adj)  # (b, n, n)
    tokens = torch.randint(VOCAB, (4, 7), generator=g)
    inputs = {"spd": spd, "degree": pl.node_degrees(adj)}
    return tokens, spd[:, 0].clamp(max=VOCAB - 1), None, inputs


def test_train_moves_a_batchs_side_inputs_to_the_model(device):
    torch.manual_seed(0)
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=build("graphormer"))
    twin = copy.deepcopy(model)
    model.to(device)
    losses = pl.train(model, _graph_batches, 4, causal=False, progress=False)
    assert_on(device, *model.parameters())
    twin_losses = pl.train(twin, _graph_batches, 4, causal=False, progress=False)
    assert losses == pytest.approx(twin_losses, rel=1e-4)
    batch = _graph_batches(9)
    assert pl.evaluate(model, batch, causal=False) == pytest.approx(
        pl.evaluate(twin, batch, causal=False), rel=1e-4
    )
    assert pl.accuracy(model, batch, causal=False) == pl.accuracy(
        twin, batch, causal=False
    )


def test_helpers_never_move_a_model_the_reader_put_on_the_cpu(device):
    """With a GPU present, a model left on the CPU stays there: the tensors a chapter
    builds for it afterwards (on the CPU) must still meet it."""
    model = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=build("rope"))
    pl.train(model, _batches, 2, progress=False)
    pl.evaluate(model, _batches(3))
    pl.accuracy(model, _batches(3))
    assert all(p.device.type == "cpu" for p in model.parameters())
    model(torch.randint(VOCAB, (1, 5)))  # a CPU probe after training
    with pytest.raises(ValueError, match=r"device=cuda.*model is on cpu"):
        pl.train(model, _batches, 2, progress=False, device=device)


def test_the_lab_trains_and_evaluates_on_the_device(device):
    cfg = pl.lab.LabConfig(steps=3, factors=(1, 2), eval_sequences=4, batch_size=4)
    data = pl.lab.make_lab_data(cfg, seed=0)
    got = pl.lab.run_encoding("rope", cfg, data, seed=0, device=device)
    want = pl.lab.run_encoding("rope", cfg, data, seed=0, device=torch.device("cpu"))
    assert got.loss_in == pytest.approx(want.loss_in, rel=1e-4)


# ---- position builders ----


def test_position_builders_follow_their_inputs_device(device):
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool, device=device)
    assert_on(device, pl.positions_from_mask(mask), pl.padded_causal_mask(mask, 2))
    cache = pl.KVCache()
    assert_on(device, cache.next_positions(3, device))


# ---- the exercise checks that re-evaluate a reader's model ----


def _holds_a_model(answer) -> bool:
    if isinstance(answer, torch.nn.Module):
        return True
    if isinstance(answer, (list, tuple)):
        return any(_holds_a_model(a) for a in answer)
    if isinstance(answer, dict):
        return any(_holds_a_model(a) for a in answer.values())
    return False


MODEL_CHECKS = sorted(
    label
    for label, check in pl.exercises.all_checks().items()
    if any(_holds_a_model(answer) for answer, _ in check.planted)
)


def test_some_checks_take_a_model():
    assert len(MODEL_CHECKS) >= 5, MODEL_CHECKS


@pytest.mark.parametrize("label", MODEL_CHECKS)
def test_a_check_judges_a_model_on_the_device_as_on_the_cpu(label, device):
    check = pl.exercises.all_checks()[label]
    for answer, says in check.planted:
        if not _holds_a_model(answer):
            continue
        here = pl.exercises.verify(label, copy.deepcopy(answer))
        there = pl.exercises.verify(label, on(device, copy.deepcopy(answer)))
        # the judgement, not the wording: a message quotes numbers measured on the
        # device, which a real card rounds otherwise than the CPU
        assert there.passed == here.passed
        assert says in here.message and says in there.message


def test_a_real_card_is_compared_at_tf32_where_it_computes_in_tf32(monkeypatch):
    """On a card, cuDNN convolutions run in TF32 unless told otherwise: the model
    with the convolutional embedding is compared at TF32's tolerance there, the
    others (and every model on the fake device, which computes on the CPU) at
    float32's."""
    conv = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=build("conv_pos"))
    rope = pl.TinyTransformer(VOCAB, D_MODEL, N_HEADS, 1, pe=build("rope"))
    with fake_cuda():
        assert tolerance(conv) == tolerance(rope) == FLOAT32
    monkeypatch.setattr(sys.modules[__name__], "real_card", lambda: True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert tolerance(conv) == TF32 and tolerance(rope) == FLOAT32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert tolerance(conv) == FLOAT32
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    assert tolerance(rope) == TF32

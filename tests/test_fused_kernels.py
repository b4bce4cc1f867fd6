"""The fused path as a GPU runs it, checked on the CPU and on the fake CUDA device:
what reaches ``scaled_dot_product_attention`` is a width its fused kernels take, the
padding is exact, and the forms that keep attention linear in memory (ALiBi's and
FoX's key term, T5's band, the sinks) hold in half precision and under autocast.

Equality with the reference, gradients included, is the registry's contract
(``tests/test_registry.py``, every dtype and device); here, what it costs."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.backends import kernel, key_bias
from tools.testing.fake_cuda import fake_cuda

DEVICES = ["cpu", "fake-cuda"]


def on(device_name):
    return fake_cuda() if device_name == "fake-cuda" else contextlib.nullcontext()


def test_padding_to_the_kernels_width_is_exact():
    """Zero columns in q and k add nothing to q . k, and a zero column of v gives an
    output column that is dropped: the padded call equals the unpadded one, and so
    do the gradients of q, k and v."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 9, dtype=torch.float64) for _ in range(3))
    v = v[..., :5].clone()
    for t in (q, k, v):
        t.requires_grad_()
    grad = torch.randn(2, 3, 7, 5, dtype=torch.float64)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    wide = kernel.aligned(q, k, v)
    assert [t.shape[-1] for t in wide] == [16, 16, 16]
    padded = F.scaled_dot_product_attention(*wide, is_causal=True, scale=0.3)
    assert_close(padded[..., :5], plain)
    assert (padded[..., 5:] == 0).all()
    grads = torch.autograd.grad((plain * grad).sum(), (q, k, v))
    padded_grads = torch.autograd.grad((padded[..., :5] * grad).sum(), (q, k, v))
    for got, want in zip(padded_grads, grads):
        assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["alibi", "fox", "sink"])
def test_the_gpu_kernels_get_widths_they_take(name, dtype, monkeypatch):
    """On a GPU (the fake device takes its code paths) the key term and the sink
    are extra columns of q and k, d + 1 or d + 2 wide: every call reaches
    scaled_dot_product_attention padded to a multiple of 8, q, k and v alike, which
    the flash, memory-efficient and cuDNN kernels take (else the math kernel runs)."""
    widths = []
    real = F.scaled_dot_product_attention

    def recording(q, k, v, *args, **kwargs):
        widths.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    with fake_cuda():
        mha = pl.MultiHeadAttention(36, 4, name).to("cuda", dtype)  # d = 9
        x = torch.randn(2, 20, 36).to("cuda", dtype).requires_grad_()
        mha(x, causal=True).float().sum().backward()
        mask = torch.ones(20, 20, dtype=torch.bool).tril()  # not the key form
        if name == "sink":  # the sink's own form with a mask: padded too
            mha(x, causal=True, mask=mask).float().sum().backward()
    assert widths
    for width in widths:
        assert len(set(width)) == 1 and width[0] % kernel.ALIGN == 0, widths


def _peak(name, n, dtype, device, autocast=False):
    """Peak tensor bytes of a forward and backward pass of one attention layer."""
    torch.manual_seed(0)
    mha = pl.MultiHeadAttention(32, 2, name)
    mha = mha.to(device) if autocast else mha.to(device, dtype)
    x = torch.randn(1, n, 32).to(device)
    x = (x if autocast else x.to(dtype)).requires_grad_()

    def step():
        cast = torch.autocast("cpu", dtype=dtype) if autocast else None
        with cast or contextlib.nullcontext():
            out = mha(x, causal=True)
        out.float().square().mean().backward()

    return pl.tensor_memory(step)[1]


LINEAR = {  # encoding: the dtypes its form keeps linear in memory
    "alibi": (torch.float32, torch.bfloat16),
    "fox": (torch.float32, torch.bfloat16),
    "t5": (torch.float32, torch.bfloat16, torch.float16),
    "sink": (torch.float32, torch.bfloat16, torch.float16),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LINEAR))
def test_training_is_linear_in_memory_in_every_dtype_it_claims(name, device):
    """Quadrupling n quadruples a linear peak and multiplies an n x n one by 16:
    ALiBi and FoX (a key term), T5 (a band) and the sinks (one more key) stay
    linear, forward and backward, in float32 and bfloat16, T5 and the sinks in
    float16 too. In float16 ALiBi's and FoX's key term does not fit the dtype's
    range (largest 65504), so their bias reaches the kernel as an n x n float mask,
    as the cost chapter says."""
    with on(device):
        target = torch.device("cuda" if device == "fake-cuda" else "cpu")
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            growth = _peak(name, 512, dtype, target) / _peak(name, 128, dtype, target)
            if dtype in LINEAR[name]:
                assert growth < 6, (dtype, growth)
            else:
                assert growth > 10, (dtype, growth)  # the float mask: n x n


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_training_under_autocast_is_linear_in_memory(name):
    """Under ``torch.autocast`` to bfloat16 (float32 weights, bfloat16 q, k, v) each
    form is used as in bfloat16: the peak grows as n."""
    growth = _peak(name, 512, torch.bfloat16, "cpu", autocast=True) / _peak(
        name, 128, torch.bfloat16, "cpu", autocast=True
    )
    assert growth < 6, growth


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_keeps_the_key_term_to_about_16_bits(dtype):
    """bfloat16 keeps 8 bits: one column would round ALiBi's or FoX's term to 3
    digits. ``bias_columns`` gives it two, hi and what hi missed: their sum is the
    term to about 2^-16 of it, and a term past the dtype's range (a far key, weight
    0 either way) is -inf with a 0 beside it, never inf - inf."""
    rel = torch.linspace(-300, 300, 1001, dtype=torch.float64)
    one, columns = key_bias.bias_columns(rel, dtype, 0.125)
    assert one == 1.0 and columns.shape == (1001, 2) and columns.dtype == dtype
    back = columns.double().sum(-1) * one * 0.125
    assert ((back - rel).abs() <= rel.abs() * 2**-15 + 1e-12).all()
    single = (rel / 0.125).to(dtype).double() * 0.125  # one column: much worse
    assert (single - rel).abs().max() > 100 * (back - rel).abs().max()
    far = torch.tensor([-1e300], dtype=torch.float64)
    _, columns = key_bias.bias_columns(far, dtype, 0.125)
    assert columns[0, 0] == float("-inf") and columns[0, 1] == 0


@pytest.mark.parametrize("name", ["stick_breaking", "cope"])
def test_blocks_are_larger_for_a_large_call_off_the_cpu(name, monkeypatch):
    """64 queries a block on a CPU (measured there) and for a small call; off the
    CPU a large call (b h n >= LARGE) takes n / 8 queries, 64 to 256: fewer kernel
    launches, a block still an eighth of the scores. Here at small sizes (LARGE 1,
    blocks of 2 to 8: n = 40 gives 5, blocks that do not divide n) on the fake
    device, equal to the explicit path, gradients included."""
    module = getattr(pl.encodings, name)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert module.block_size(cpu, 2048, 64) == module.BLOCK == 64
    assert module.block_size(cuda, 2048, 4 * 16) == 256  # the model benchmark's
    assert module.block_size(cuda, 1024, 4) == 64  # a chapter's layer: small
    assert module.block_size(cuda, 2**20, 1) == module.BLOCK_OFF_CPU
    monkeypatch.setattr(module, "LARGE", 1)
    monkeypatch.setattr(module, "BLOCK", 2)
    monkeypatch.setattr(module, "BLOCK_OFF_CPU", 8)
    assert module.block_size(cuda, 40, 8) == 5 and module.block_size(cpu, 40, 8) == 2
    torch.manual_seed(0)
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=40)
    mha = pl.MultiHeadAttention(32, 4, pe)
    x = torch.randn(2, 40, 32, dtype=torch.float64, requires_grad=True)
    with fake_cuda():
        gpu = mha.double().to("cuda")
        results = []
        for path in ("reference", "fused"):
            xd = x.detach().to("cuda").requires_grad_()
            gpu.zero_grad()
            out = gpu(xd, causal=True, path=path)
            out.square().sum().backward()
            grads = [p.grad.cpu() for p in gpu.parameters() if p.grad is not None]
            results.append([out.detach().cpu(), xd.grad.cpu(), *grads])
    for slow, fast in zip(*results):
        assert_close(fast, slow)

"""Stick-breaking's own algorithm (``StickBreaking.causal_attention``): blocks of
queries against the keys they see, backward by hand; equal to the reference."""

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
import posenc_lib.encodings.stick_breaking as sb

CONFIGS = [
    (attend_current, leftover)
    for attend_current in (False, True)
    for leftover in ("value", None)
]
TOL = {torch.float64: {}, torch.float32: dict(atol=2e-5, rtol=1e-4)}


def qkv(b=2, h=3, i=11, j=11, d=5, e=6, dtype=torch.float64, seed=0, spread=1.0):
    """Random q ``(b, h, i, d)``, k ``(b, h, j, d)``, v ``(b, h, j, e)`` needing a
    gradient, and an output gradient ``(b, h, i, e)``."""
    g = torch.Generator().manual_seed(seed)
    q = spread * torch.randn(b, h, i, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, j, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, j, e, generator=g, dtype=dtype)
    grad = torch.randn(b, h, i, e, generator=g, dtype=dtype)
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), grad


def run(q, k, v, grad, pe, path):
    """The output and the gradients of q, k, v on ``path``."""
    out = pl.attention(q, k, v, pe, causal=True, path=path)
    return (out, *torch.autograd.grad((out * grad.to(out.dtype)).sum(), (q, k, v)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("i, j", [(11, 11), (5, 13), (1, 6)])
@pytest.mark.parametrize("attend_current, leftover", CONFIGS)
def test_blocks_equal_the_reference(attend_current, leftover, i, j, dtype, monkeypatch):
    """Outputs and gradients of q, k, v equal the explicit-score reference: every
    configuration, n not a multiple of the block (4 here, so a call spans several),
    and a KV cache (i < j: the queries are the last i keys); path="auto" takes it."""
    monkeypatch.setattr(sb, "BLOCK", 4)
    pe = pl.StickBreaking(attend_current, leftover)
    q, k, v, grad = qkv(i=i, j=j, dtype=dtype)
    slow = run(q, k, v, grad, pe, "reference")
    for path in ("fused", "auto"):
        fast = run(q, k, v, grad, pe, path)
        for got, want in zip(fast, slow):
            assert got.dtype == dtype
            assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("attend_current, leftover", CONFIGS)
def test_blocks_equal_the_reference_with_large_logits(attend_current, leftover):
    """Logits of tens: most weights underflow (the blocks set those below about
    1e-34 in float32, 1e-304 in float64, to exactly 0); outputs and gradients are
    still the reference's, over the default block size."""
    pe = pl.StickBreaking(attend_current, leftover)
    q, k, v, grad = qkv(b=1, h=2, i=300, j=300, d=8, e=4, spread=30.0)
    for got, want in zip(
        run(q, k, v, grad, pe, "fused"), run(q, k, v, grad, pe, "reference")
    ):
        assert torch.isfinite(got).all()
        assert_close(got, want)


@pytest.mark.parametrize("attend_current, leftover", CONFIGS)
def test_gradcheck(attend_current, leftover, monkeypatch):
    """The hand-written backward is the derivative of the forward (float64, blocks
    of 2 queries, a KV cache)."""
    monkeypatch.setattr(sb, "BLOCK", 2)
    pe = pl.StickBreaking(attend_current, leftover)
    q, k, v, _ = qkv(b=1, h=2, i=5, j=7, d=3, e=2)
    assert torch.autograd.gradcheck(
        lambda q, k, v: pe.causal_attention(q, k, v, 0.7), (q, k, v)
    )


def test_bfloat16_is_computed_in_float32(monkeypatch):
    """bfloat16 q, k, v: output and gradients in bfloat16, computed in float32 (the
    float32 answer for the same rounded inputs, up to bfloat16's rounding)."""
    monkeypatch.setattr(sb, "BLOCK", 4)
    pe = pl.StickBreaking()
    q, k, v, grad = qkv(i=10, j=13, dtype=torch.bfloat16)
    fast = run(q, k, v, grad, pe, "fused")
    exact = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = run(*exact, grad.float(), pe, "reference")
    for got, ref in zip(fast, want):
        assert got.dtype == torch.bfloat16
        assert_close(got.float(), ref, atol=2e-2, rtol=2e-2)


def test_trains_without_an_n_by_n_tensor():
    """Forward and backward at n = 1024 hold far less than one ``(b, h, n, n)``
    float32 tensor (the reference builds several), and grow like n, not n^2."""
    torch.manual_seed(0)
    pe = pl.StickBreaking()
    b, h, peaks = 1, 4, {}
    for n in (256, 1024):
        q, k, v, grad = qkv(b=b, h=h, i=n, j=n, d=16, e=16, dtype=torch.float32)
        _, peaks[n] = pl.tensor_memory(lambda: run(q, k, v, grad, pe, "fused"))
    one_score_tensor = b * h * 1024 * 1024 * 4
    assert peaks[1024] < one_score_tensor / 2, (peaks, one_score_tensor)
    assert peaks[1024] / peaks[256] < 8, peaks  # n^2 would be 16

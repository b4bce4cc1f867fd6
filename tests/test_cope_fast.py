"""CoPE's own causal attention (``CoPE.causal_attention``, blocks of queries with a
hand-written backward) against the reference: outputs, gradients, memory. Every test
runs twice: with the block's elementwise steps in torch's operations (the path off the
CPU) and in numba's compiled scan (the CPU's path when numba is installed)."""

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
import posenc_lib.encodings.cope as cope

F32 = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(autouse=True, params=["torch", "numba"])
def scan(request, monkeypatch):
    """Which of the two runs the blocks' elementwise steps."""
    if request.param == "numba":
        pytest.importorskip("numba")
    monkeypatch.setattr(cope, "COMPILED_SCAN", request.param == "numba")
    return request.param


def test_the_cpu_path_is_the_compiled_scan_when_numba_is_installed(scan):
    """The switch is read per call: the compiled scan on a CPU, torch's operations
    when it is off (and off the CPU, which ``_scan`` refuses by device)."""
    like = torch.zeros(1)
    assert (cope._scan(like) is not None) == (scan == "numba")
    assert cope._scan(like.to("meta")) is None


def test_a_scan_numba_cannot_compile_is_said_and_torch_does_the_work(scan, monkeypatch):
    """An older numba that fails on the scan: a warning naming it, and the blocks in
    torch's operations (the same numbers as the reference)."""
    if scan == "torch":
        pytest.skip("the compiled scan is switched off in this run")
    from posenc_lib.encodings import _cope_scan

    def broken(dtype):
        raise RuntimeError("cannot type this")

    monkeypatch.setattr(_cope_scan, "warm", broken)
    monkeypatch.setattr(cope, "_COMPILED", {})
    pe = layer(8, 6)
    q, k, v = qkv(1, 2, 7, 7, 8, 8)
    with pytest.warns(RuntimeWarning, match="compiled scan failed.*cannot type"):
        fast = pl.attention(q, k, v, pe, causal=True, path="fused")
    assert cope._COMPILED == {torch.float64: None}
    assert_close(fast, pl.attention(q, k, v, pe, causal=True, path="reference"))


def layer(d_head, n_positions, dtype=torch.float64, seed=0):
    """A CoPE with a random table (it starts at zeros, which hides the term)."""
    pe = pl.CoPE(d_head, n_positions).to(dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        pe.pos_emb.copy_(torch.randn(n_positions, d_head, generator=g))
    return pe


def qkv(b, h, i, j, d, e, dtype=torch.float64, seed=1, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    q = spread * torch.randn(b, h, i, d, generator=g)
    k = spread * torch.randn(b, h, j, d, generator=g)
    v = torch.randn(b, h, j, e, generator=g)
    return [t.to(dtype) for t in (q, k, v)]


def run(pe, q, k, v, path, grad_out):
    """Output and gradients of q, k, v and the table on ``path``."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    pe.zero_grad()
    out = pl.attention(q, k, v, pe, causal=True, path=path)
    (out.float() * grad_out).sum().backward()
    return [out, q.grad, k.grad, v.grad, pe.pos_emb.grad]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("n_positions", [3, 6, 64])  # clamped often, sometimes, never
@pytest.mark.parametrize("i, j", [(11, 11), (5, 13), (1, 9)])  # (i < j: a KV cache)
def test_blocks_equal_the_reference(i, j, n_positions, dtype, monkeypatch):
    """Output and gradients (q, k, v, the table) equal the reference's, b = 2, h = 3,
    in blocks of 4 queries (11 and 5 are not multiples of 4)."""
    monkeypatch.setattr(cope, "BLOCK", 4)
    pe = layer(8, n_positions, dtype)
    q, k, v = qkv(2, 3, i, j, 8, 5, dtype)
    grad_out = torch.randn(2, 3, i, 5, generator=torch.Generator().manual_seed(2))
    grad_out = grad_out.to(dtype)
    slow = run(pe, q, k, v, "reference", grad_out)
    for path in ("fused", "auto"):  # auto picks the fast path for this call
        fast = run(pe, q, k, v, path, grad_out)
        for name, a, b in zip(("out", "dq", "dk", "dv", "de"), fast, slow):
            assert_close(a, b, **({} if dtype == torch.float64 else F32), msg=name)


def test_the_default_block_and_a_longer_sequence_equal_the_reference():
    """n = 300 with the module's BLOCK: several blocks, the clamp at 40 reached by
    every far key, and a table larger than a block needs (n_positions = 301)."""
    for n_positions in (40, 301):
        pe = layer(16, n_positions)
        q, k, v = qkv(1, 2, 300, 300, 16, 16)
        grad_out = torch.randn(1, 2, 300, 16, dtype=torch.float64)
        for a, b in zip(
            run(pe, q, k, v, "fused", grad_out), run(pe, q, k, v, "reference", grad_out)
        ):
            assert_close(a, b)


def test_an_integer_position_has_the_references_subgradient(monkeypatch):
    """Gates of exactly 0 and 1 (sigmoid(+-inf) is exact: huge scores) make every
    position an integer, where the reference's lerp reads one row and its weight's
    gradient is 0; with the clamp too (n_positions = 4)."""
    monkeypatch.setattr(cope, "BLOCK", 4)
    pe = layer(4, 4)
    q, k, v = qkv(1, 2, 10, 10, 4, 3)
    q, k = q.sign() * 30, k.sign() * 30  # |s| >= 30 * 30 / 2: gates 0 or 1 exactly
    grad_out = torch.randn(1, 2, 10, 3, dtype=torch.float64)
    for a, b in zip(
        run(pe, q, k, v, "fused", grad_out), run(pe, q, k, v, "reference", grad_out)
    ):
        assert_close(a, b)


def test_gradcheck(monkeypatch):
    """Finite differences in float64 on tiny shapes: q, k, v and the table, a KV
    cache, the clamp reached (n_positions = 3)."""
    monkeypatch.setattr(cope, "BLOCK", 2)
    for n_positions, (i, j) in ((3, (5, 5)), (12, (3, 6))):
        pe = pl.CoPE(4, n_positions).double()
        q, k, v = qkv(1, 2, i, j, 4, 3)
        table = torch.randn(n_positions, 4, dtype=torch.float64)

        def f(q, k, v, table):
            q1, k1, v1 = (t.reshape(2, t.shape[2], t.shape[3]) for t in (q, k, v))
            out = cope._CoPEBlocks.apply(q1, k1, v1, table, 0.5)
            return out.view(1, 2, i, 3)

        args = [t.requires_grad_() for t in (q, k, v, table)]
        assert torch.autograd.gradcheck(f, args)
        # and the layer's own call is the reference
        with torch.no_grad():
            pe.pos_emb.copy_(table)
        out = pe.causal_attention(q, k, v, 0.5)
        ref = pl.attention(q, k, v, pe, causal=True, path="reference")
        assert_close(out, ref)


def test_bfloat16_is_computed_in_float32_and_returned_in_bfloat16(monkeypatch):
    """bfloat16 q, k, v and table: the answer in bfloat16, within bfloat16's rounding
    of the float32 result; gradients of every input, in their dtypes."""
    monkeypatch.setattr(cope, "BLOCK", 4)
    pe = layer(8, 8, torch.float32)
    q, k, v = qkv(2, 3, 11, 11, 8, 8, torch.float32, spread=1.0)
    ref = pl.attention(q, k, v, pe, causal=True, path="fused")
    half = layer(8, 8, torch.bfloat16)
    q, k, v = (t.to(torch.bfloat16).requires_grad_() for t in (q, k, v))
    out = pl.attention(q, k, v, half, causal=True, path="fused")
    assert out.dtype == torch.bfloat16
    assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    out.float().square().sum().backward()
    for t in (q, k, v, half.pos_emb):
        assert t.grad.dtype == torch.bfloat16 and torch.isfinite(t.grad).all()


def test_a_head_size_other_than_the_layers_is_named():
    pe = pl.CoPE(8, 10)
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="head dimension 8"):
        pe.causal_attention(q, q, q, 0.5)


def test_trains_without_an_n_by_n_tensor():
    """Forward and backward at n = 1024 hold far less than one ``(b, h, n, n)``
    float32 tensor (the reference builds several), and the peak grows about like n
    from n = 256 to 1024 (n^2 would be 16 times)."""
    torch.manual_seed(0)
    b, h, d = 1, 4, 32
    peaks = {}
    for n in (256, 1024):
        pe = layer(d, n + 1, torch.float32)
        q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))

        def step():
            pl.attention(
                q, k, v, pe, causal=True, path="fused"
            ).square().mean().backward()

        _, peaks[n] = pl.tensor_memory(step)
    # about ten (b h, BLOCK, n) blocks at once (gates, weights, positions, indices,
    # their gradients) and the reversed k, v and their gradients: 0.74 of one score
    # tensor at BLOCK = 64 with torch's operations, 0.55 with the compiled scan (no
    # positions or indices kept); the reference: 17
    one_score_tensor = b * h * 1024 * 1024 * 4
    assert peaks[1024] < 0.8 * one_score_tensor, (peaks, one_score_tensor)
    assert peaks[1024] / peaks[256] < 8, peaks

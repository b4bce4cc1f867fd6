"""The attention paths: what each one builds and reuses, and that they agree.

The registry contract test (``tests/test_registry.py``) holds every path equal to the
slow reference for every registered encoding; this file checks the machinery behind
the fused backend (the kernel's causal mode, blocks of queries,
what is reused within one forward pass and nothing across calls), the flex path's
refusals, and ``score_mod`` on its own.
"""

import copy
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.backends.flex import evaluate
from posenc_lib.positions import relative_offsets


def qkv(b=2, h=4, i=9, j=9, d=8, dtype=torch.float64, grad=False):
    return tuple(
        torch.randn(b, h, n, d, dtype=dtype, requires_grad=grad) for n in (i, j, j)
    )


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Every scaled_dot_product_attention call: (q shape, k shape, mask, is_causal)."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, is_causal=False, **kwargs):
        calls.append((tuple(q.shape), tuple(k.shape), attn_mask, is_causal))
        return real(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


class FloatMaskALiBi(pl.ALiBi):
    """ALiBi without its key form (``key_bias``): the fused path takes its bias as a
    float mask, as it takes any bias it has no other form of."""

    key_bias = pl.PositionalEncoding.key_bias


class FloatMaskT5(pl.T5RelativeBias):
    """T5 without its band form (``band_bias``): a learned float mask."""

    band_bias = pl.PositionalEncoding.band_bias


class CountingALiBi(FloatMaskALiBi):
    """ALiBi (as a float mask) that counts how often its bias is built."""

    def __init__(self, n_heads):
        super().__init__(n_heads)
        self.built = 0

    def score_bias(self, q, k, q_pos, k_pos):
        self.built += 1
        return super().score_bias(q, k, q_pos, k_pos)


# ---- causal in token order: the kernel's causal mode, nothing n x n ------------------


@pytest.mark.parametrize(
    "pos",
    [None, torch.arange(9), torch.arange(9) + 40, torch.arange(9)[None].repeat(2, 1)],
    ids=["default", "arange", "arange+40", "per-row arange"],
)
@pytest.mark.parametrize("name", ["nope", "rope"])
def test_runs_of_positions_use_the_kernels_causal_mode(sdpa_calls, name, pos):
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64).double()
    q, k, v = qkv()
    out = pl.attention(q, k, v, pe, pos, pos, causal=True)
    assert [(c[2], c[3]) for c in sdpa_calls] == [(None, True)]
    assert_close(
        out, pl.attention(q, k, v, pe, pos, pos, causal=True, path="reference")
    )


def test_coordinates_are_causal_in_token_order_without_a_mask(sdpa_calls):
    pe = pl.make_encoding("sincos_2d", d_model=32, n_heads=4, max_len=64).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    mha = pl.MultiHeadAttention(32, 4, pe, input_encoded=True).double()
    pos = pe.example_positions(2, 9)
    out = mha(x, pos, causal=True)
    assert [(c[2], c[3]) for c in sdpa_calls] == [(None, True)]
    assert_close(out, mha(x, pos, causal=True, path="reference"))


def test_a_kv_cache_run_is_aligned_to_the_last_key(sdpa_calls):
    """Queries 7, 8 of keys 0..8 (top-left causal mode would be wrong here)."""
    q, k, v = qkv(i=2, j=9)
    out = pl.attention(q, k, v, causal=True, q_pos=torch.tensor([7, 8]))
    assert not sdpa_calls[0][3]  # not is_causal: a lower-right (i, j) mask instead
    full = pl.attention(torch.cat([k[:, :, :7], q], 2), k, v, causal=True)
    assert_close(out, full[:, :, 7:])


def test_positions_with_gaps_get_a_mask_from_the_positions(sdpa_calls):
    pos = torch.tensor([0, 1, 2, 5, 6, 7, 20, 21, 22])
    q, k, v = qkv()
    out = pl.attention(q, k, v, q_pos=pos, k_pos=pos, causal=True)
    assert sdpa_calls[0][2] is not None and not sdpa_calls[0][3]
    assert_close(
        out, pl.attention(q, k, v, q_pos=pos, k_pos=pos, causal=True, path="reference")
    )


def test_a_causal_bias_runs_in_blocks_that_skip_unseen_keys(sdpa_calls):
    pe = FloatMaskALiBi(4).double()
    q, k, v = qkv(b=1, i=600, j=600, d=4)
    out = pl.attention(q, k, v, pe, causal=True)
    keys = [c[1][2] for c in sdpa_calls]
    assert keys == [256, 512, 600]  # block ends: each block sees only keys up to it
    assert_close(out, pl.attention(q, k, v, pe, causal=True, path="reference"))


@pytest.mark.parametrize("i", [600, 300], ids=["self", "kv cache"])
def test_a_learned_causal_bias_trains_in_blocks_on_a_cpu(sdpa_calls, i):
    """A bias that needs a gradient: PyTorch's CPU kernels do not differentiate a
    mask, so the fused backend does the kernel's maths itself, in the same blocks;
    output and every gradient equal the reference's."""
    pe = FloatMaskT5(4).double()
    q, k, v = qkv(b=2, i=i, j=600, d=4, grad=True)
    leaves = (q, k, v, pe.bias)
    w = torch.randn(2, 4, i, 4, dtype=torch.float64)
    fast = pl.attention(q, k, v, pe, causal=True)
    assert sdpa_calls == []  # explicit: no kernel call would differentiate the bias
    slow = pl.attention(q, k, v, pe, causal=True, path="reference")
    assert_close(fast, slow)
    for got, want in zip(
        torch.autograd.grad((fast * w).sum(), leaves),
        torch.autograd.grad((slow * w).sum(), leaves),
    ):
        assert_close(got, want)


# ---- reuse: once per forward pass, nothing across calls ---------------------------


def test_layers_of_a_model_share_one_build():
    pe = CountingALiBi(4)
    model = pl.TinyTransformer(13, 32, 4, n_layers=3, pe=pe)
    with torch.no_grad():
        model(torch.randint(13, (2, 9)), causal=True)
    assert pe.built == 1
    model(torch.randint(13, (2, 9)), causal=True).sum().backward()  # training too
    assert pe.built == 2


def test_nothing_outlives_a_call_unless_the_caller_shares_positions():
    """Two calls build twice (no cache to go stale); calls that share one
    ``Positions`` (a benchmark's repeats, a model's layers) build once."""
    pe = CountingALiBi(4).double()
    q, k, v = qkv()
    first = pl.attention(q, k, v, pe, causal=True)
    pl.attention(q, k, v, pe, causal=True)
    assert pe.built == 2
    shared = pl.prepare(pe, 2, 4, 9, 9, causal=True)
    for _ in range(3):
        assert_close(pl.attention(q, k, v, pe, positions=shared), first)
    assert pe.built == 3
    with pytest.raises(ValueError, match="either positions= or"):
        pl.attention(q, k, v, pe, causal=True, positions=shared)


def test_a_parameter_update_is_seen_by_the_next_call():
    """T5's table: an in-place update (an optimiser step, load_state_dict) is seen."""
    pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64).double()
    q, k, v = qkv()
    with torch.no_grad():
        before = pl.attention(q, k, v, pe, causal=True)
        pe.bias.add_(torch.randn_like(pe.bias))  # what optimizer.step() does
        after = pl.attention(q, k, v, pe, causal=True)
        assert not torch.allclose(before, after)
        assert_close(after, pl.attention(q, k, v, pe, causal=True, path="reference"))


def test_a_side_input_edited_in_place_is_seen_by_the_next_call():
    """Written through its NumPy view (or ``.data``), a tensor's version counter does
    not move; a cache keyed on it returned the previous call's bias (off by 0.0096).
    With nothing kept across calls, the next call reads the new distances."""
    pe = pl.make_encoding("graphormer", d_model=32, n_heads=4, max_len=64).double()
    mha = pl.MultiHeadAttention(32, 4, pe, input_encoded=True).double()
    inputs = pe.example_inputs(2, 9, torch.Generator().manual_seed(0))
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        before = mha(x, causal=True, inputs=inputs)
        inputs["spd"].numpy()[:, 3:, :] = 0  # queries 3.. now see every key at 0 hops
        fresh = {key: t.clone() for key, t in inputs.items()}
        after = mha(x, causal=True, inputs=inputs)
        assert not torch.allclose(before, after)
        assert_close(after, mha(x, causal=True, inputs=fresh))


def test_reusing_the_bias_across_layers_gives_the_same_gradients():
    """A learned bias built once per forward and shared by three layers gets the
    gradient of all three, as if each layer had built its own."""
    grads = []
    for shared in (True, False):
        torch.manual_seed(0)
        pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64)
        if not shared:
            pe.reuse = frozenset()  # this instance: build in every layer
        model = pl.TinyTransformer(13, 32, 4, n_layers=3, pe=pe)
        model(torch.randint(13, (2, 9), generator=torch.Generator().manual_seed(1)))
        model(torch.randint(13, (2, 9))).sum().backward()
        grads.append(pe.bias.grad.clone())
    assert grads[0].abs().sum() > 0
    assert_close(grads[0], grads[1])


def test_training_gets_gradients_on_every_step_without_a_stale_graph():
    """With grad enabled the learned bias is rebuilt each call (it carries the graph):
    two backward passes without a step between them (gradient accumulation) work, and
    the table's gradient equals the slow path's."""
    grads = {}
    for path in ("fused", "reference"):
        torch.manual_seed(0)
        pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64)
        layers = [
            pl.MultiHeadAttention(32, 4, pe, input_encoded=True) for _ in range(2)
        ]  # one table
        x = torch.randn(2, 9, 32)
        for _ in range(2):  # accumulate
            h = x
            for layer in layers:
                h = layer(h, causal=True, path=path)
            h.sum().backward()
        grads[path] = pe.bias.grad
    assert grads["fused"].abs().sum() > 0
    assert_close(grads["fused"], grads["reference"])


# ---- score_mod -----------------------------------------------------------------------


class ModScoreBias(pl.PositionalEncoding):
    def score_bias(self, q, k, q_pos, k_pos, ctx):
        return ctx.x.sum(-1)[:, None, None, :]  # (b, 1, 1, j)


class ModReadsCtx(ModScoreBias):
    def score_mod(self, q_pos, k_pos, ctx=None):
        x = ctx.need("x", "ModReadsCtx")  # (b, i, D): one number per key
        gate = x.sum(-1)  # (b, j)

        def mod(score, b, h, q_idx, kv_idx):
            return score + gate[b, kv_idx]

        return mod


def test_a_score_mod_that_reads_ctx_gets_it():
    pe = ModReadsCtx()
    x = torch.randn(2, 9, 5)
    q, k, v = qkv(dtype=torch.float32)
    gate = x.sum(-1)[:, None, None, :]  # (b, 1, 1, j)
    mod = pe.call_hook("score_mod", None, None, ctx=pl.Context(x=x))
    s = torch.randn(2, 4, 9, 9)
    assert_close(evaluate(mod, (2, 4, 9, 9), s), s + gate)
    with torch.no_grad():
        try:
            flex = pl.attention(q, k, v, ModReadsCtx(), causal=True, x=x, path="flex")
        except RuntimeError as error:
            pytest.skip(str(error))
    plain = pl.attention(q, k, v, ModScoreBias(), causal=True, x=x, path="reference")
    assert_close(flex, plain)


@pytest.mark.parametrize(
    "q_pos, k_pos",
    [
        (torch.arange(9), torch.arange(9)),
        (torch.arange(7, 9) + 3, torch.arange(9) + 3),  # a KV cache
        (torch.tensor([[0, 2, 5], [1, 2, 3]]), torch.tensor([[0, 2, 5], [1, 2, 3]])),
    ],
    ids=["run", "kv-cache run", "gaps"],
)
def test_relative_offsets_are_key_minus_query(q_pos, k_pos):
    q_pos, k_pos = q_pos.expand(2, -1), k_pos.expand(2, -1)
    off, lo, hi = relative_offsets(q_pos, k_pos)
    i, j = q_pos.shape[1], k_pos.shape[1]
    b_, q_, k_ = (torch.arange(n).view(s) for n, s in ((2, (-1, 1, 1)), (i, (1, -1, 1)),
                                                       (j, (1, 1, -1))))  # fmt: skip
    expected = k_pos[:, None, :] - q_pos[:, :, None]  # (b, i, j)
    assert torch.equal(off(b_, q_, k_).expand(2, i, j), expected)
    assert lo <= expected.min() and expected.max() <= hi


# ---- the flex path -------------------------------------------------------------------


def test_flex_refuses_what_it_cannot_do_with_a_clear_error():
    q, k, v = qkv(dtype=torch.float32)
    shaw = pl.make_encoding("shaw", d_model=32, n_heads=4, max_len=64)
    with pytest.raises(ValueError, match="path=.flex. cannot be used with Shaw"):
        pl.attention(q, k, v, shaw, path="flex")
    txl = pl.make_encoding("transformer_xl", d_model=32, n_heads=4, max_len=64)
    with pytest.raises(ValueError, match="overrides .'score_bias'. but defines no"):
        pl.attention(q, k, v, txl, path="flex")  # would silently drop its bias
    with pytest.raises(ValueError, match="return_weights"):
        pl.attention(q, k, v, path="flex", return_weights=True)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        pl.attention(q.double(), k.double(), v.double(), path="flex")
    with pytest.raises(ValueError, match="forward only on CPU"):
        pl.attention(q.requires_grad_(), k, v, path="flex")


def test_flex_equals_slow_for_runs_gaps_kv_caches_and_masks():
    """ALiBi through every kind of call (T5 shares the offsets; the registry test
    runs every encoding once): each kind compiles its own graph, so keep it short."""
    pe = pl.ALiBi(4)
    q, k, v = qkv(dtype=torch.float32, i=12, j=12)
    gaps = torch.tensor([0, 1, 2, 5, 6, 7, 20, 21, 22, 23, 40, 41])
    cases = [
        dict(causal=True),
        dict(causal=False),
        dict(causal=True, q_pos=gaps, k_pos=gaps),
        dict(causal=True, q_pos=torch.arange(9, 12) + 5, k_pos=torch.arange(12) + 5),
        dict(
            causal=True,
            mask=(torch.rand(2, 1, 12, 12) < 0.8) | torch.eye(12, dtype=torch.bool),
        ),
    ]
    with torch.no_grad():
        for kwargs in cases:
            q_ = q[:, :, -3:] if "k_pos" in kwargs and len(kwargs["q_pos"]) == 3 else q
            try:
                out = pl.attention(q_, k, v, pe, path="flex", **kwargs)
            except RuntimeError as error:  # no compiler here: say so, do not fail
                pytest.skip(str(error))
            assert_close(out, pl.attention(q_, k, v, pe, path="reference", **kwargs))


def test_flex_refuses_to_run_unfused_past_the_recompile_limit(monkeypatch):
    """Past torch's recompile limit dynamo would run FlexAttention eagerly, unfused
    (the n x n scores built), with one log line: the flex path raises instead, and
    says how to start again."""
    flex = sys.modules["posenc_lib.backends.flex"]
    monkeypatch.setattr(flex, "RECOMPILE_LIMIT", 1)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    torch._dynamo.reset()
    pe = pl.ALiBi(4)
    try:
        with torch.no_grad():
            q, k, v = qkv(dtype=torch.float32, i=8, j=8)
            try:
                pl.attention(q, k, v, pe, causal=True, path="flex")  # one graph
            except RuntimeError as error:  # no compiler here: say so, do not fail
                pytest.skip(str(error))
            q, k, v = qkv(dtype=torch.float32, i=12, j=12)  # a second shape
            with pytest.raises(RuntimeError, match="recompile limit .* unfused"):
                pl.attention(q, k, v, pe, causal=True, path="flex")
    finally:
        torch._dynamo.reset()


def test_flex_in_token_order_uses_the_block_mask_even_when_a_hook_reads_ctx(
    monkeypatch,
):
    """FoX reads the data (so nothing is cached) but not the mask: the flex path
    states causality as a block mask, whose unseen blocks the kernel skips, instead of
    an n x n boolean tensor read inside the score_mod."""
    flex = sys.modules["posenc_lib.backends.flex"]
    pe = pl.make_encoding("fox", d_model=32, n_heads=4, max_len=64)
    x = torch.randn(2, 12, 32)
    q, k, v = qkv(dtype=torch.float32, i=12, j=12)
    masked = []
    real = flex.masked
    monkeypatch.setattr(flex, "masked", lambda *a: masked.append(1) or real(*a))
    with torch.no_grad():
        try:
            out = pl.attention(q, k, v, pe, causal=True, x=x, path="flex")
        except RuntimeError as error:
            pytest.skip(str(error))
        assert_close(out, pl.attention(q, k, v, pe, causal=True, x=x, path="reference"))
    assert not masked


def test_a_score_mod_that_does_not_fit_the_call_is_refused_before_compiling():
    """An index past a table would read garbage inside the compiled kernel."""

    class PerHead(pl.PositionalEncoding):
        def score_mod(self, q_pos, k_pos):
            slopes = torch.ones(2)  # built for 2 heads

            def mod(score, b, h, q_idx, kv_idx):
                return score + slopes[h]

            return mod

    q, k, v = qkv(dtype=torch.float32)  # 4 heads
    with pytest.raises(ValueError, match=r"PerHead.score_mod does not fit this call"):
        pl.attention(q, k, v, PerHead(), causal=True, path="flex")


def test_a_bias_that_needs_a_gradient_runs_without_the_kernel_on_a_cpu(sdpa_calls):
    """In training, a learned bias (T5's table) makes the mask need a gradient,
    which PyTorch's CPU kernels do not compute (the kernel's math route would, over
    every (i, j)): the backend does that maths itself, in the blocks. Without a
    gradient (inference) the kernel runs the blocks."""
    pe = FloatMaskT5(4, init_std=16**-0.5).double()
    q, k, v = qkv(b=1, i=600, j=600, d=4)
    out = pl.attention(q, k, v, pe, causal=True)
    assert len(sdpa_calls) == 0
    out.sum().backward()
    assert pe.bias.grad is not None
    with torch.no_grad():
        pl.attention(q, k, v, pe, causal=True)
    assert len(sdpa_calls) == 3  # 256, 512, 600
    assert_close(out, pl.attention(q, k, v, pe, causal=True, path="reference"))


# ---- second forms the fused kernel runs: key_bias (FoX), sink_logits (gpt-oss) ------


def test_fox_trains_without_an_n_by_n_tensor():
    """FoX's bias ``c_i - c_j`` goes to the kernel as one more dimension of q and k:
    forward and backward of a layer at n = 1024 hold far less than one ``(b, h, n,
    n)`` float32 tensor (what the bias alone took before), and the result is the
    reference's."""
    torch.manual_seed(0)
    b, n, D, h = 1, 1024, 64, 4
    mha = pl.MultiHeadAttention(D, h, "fox")
    x = torch.randn(b, n, D, requires_grad=True)

    def step(path):
        x.grad = None
        mha.zero_grad()
        mha(x, causal=True, path=path).square().mean().backward()
        return x.grad.clone()

    fast, fast_peak = pl.tensor_memory(lambda: step("fused"))
    slow, slow_peak = pl.tensor_memory(lambda: step("reference"))
    one_score_tensor = b * h * n * n * 4
    assert fast_peak < one_score_tensor / 2, (fast_peak, one_score_tensor)
    assert slow_peak > 2 * one_score_tensor  # the reference: scores, bias, weights
    assert_close(fast, slow, atol=1e-6, rtol=1e-4)


def test_t5_trains_without_an_n_by_n_tensor_on_the_cpu():
    """T5's bucket bias goes to the CPU kernel as a mask of one band (``band_bias``),
    and its gradient is summed over the band's diagonals only: forward and backward
    of a layer at n = 1024, the table's gradient included, hold less than one ``(b,
    h, n, n)`` float32 tensor, and agree with the reference."""
    torch.manual_seed(0)
    b, n, D, h = 1, 1024, 64, 4
    mha = pl.MultiHeadAttention(D, h, "t5")
    with torch.no_grad():
        mha.pe.bias.normal_()  # a table away from its small initial values
    x = torch.randn(b, n, D, requires_grad=True)

    def step(path):
        x.grad = None
        mha.zero_grad()
        mha(x, causal=True, path=path).square().mean().backward()
        return x.grad.clone(), mha.pe.bias.grad.clone()

    fast, fast_peak = pl.tensor_memory(lambda: step("fused"))
    slow, slow_peak = pl.tensor_memory(lambda: step("reference"))
    one_score_tensor = b * h * n * n * 4
    assert fast_peak < one_score_tensor, (fast_peak, one_score_tensor)
    assert slow_peak > 2 * one_score_tensor  # the reference: scores, bias, weights
    for got, want in zip(fast, slow):
        assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_the_key_bias_column_is_w_minus_the_blocks_middle(monkeypatch):
    """What ``key_bias_blocks`` hands the kernel, block by block: the queries get
    ``1/scale`` and key j gets ``w_j - w_m`` (m: the key at the block's middle
    query), so the kernel's scaled score is ``q_i . k_j * scale + w_j - w_m``, and
    its softmax over the keys a row sees is that of ``q_i . k_j * scale + w_j``."""
    from posenc_lib.backends import key_bias

    monkeypatch.setattr(key_bias, "BLOCK", 4)
    torch.manual_seed(0)
    b, h, i, j, d, scale, size = 2, 3, 10, 13, 4, 0.37, 4
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for n in (i, j, j))
    w = torch.randn(b, h, j, dtype=torch.float64) * 5
    full = torch.einsum("bhid,bhjd->bhij", q, k) * scale + w[:, :, None, :]
    starts = range(0, i, size)
    on_cpu = key_bias.KeyBiasOnCpu  # the CPU kernel's blocks
    by_flash = on_cpu.calls(on_cpu.prepare(q, k, v, w, scale), q, k, v, w, scale)
    for start, (_, q2, k2, _, mask) in zip(starts, by_flash):
        stop = min(start + size, i)
        seen, m = stop + j - i, (start + stop) // 2 + j - i
        q1, k1, _ = key_bias.block_inputs(q, k, v, w, start, stop, scale)
        for qq, kk in ((q1, k1), (q2[..., : d + 1], k2[..., : d + 1])):
            assert_close(qq[..., d], torch.full_like(qq[..., d], 1 / scale))
            assert_close(kk[..., d], w[..., :seen] - w[..., m : m + 1])
            kernel = torch.einsum("bhid,bhjd->bhij", qq, kk) * scale
            want = full[:, :, start:stop, :seen] - w[:, :, None, m : m + 1]
            assert_close(kernel, want)
        rows = full[:, :, start:stop, :seen] + mask  # mask: 0 or -inf (token order)
        assert_close((kernel + mask).softmax(-1), rows.softmax(-1))


@pytest.mark.parametrize("flushing", [False, True])
def test_the_cpu_kernel_leaves_the_callers_subnormal_setting(flushing):
    """The key_bias blocks run the CPU kernel with subnormals flushed (they are where
    x86 arithmetic crawls), forward and backward, and hand the thread back as it was."""
    from posenc_lib.backends import kernel, key_bias

    torch.set_flush_denormal(flushing)
    try:
        q, k, v = qkv(b=1, i=40, j=40, d=8, dtype=torch.float32, grad=True)
        w = torch.randn(1, 4, 40, dtype=torch.float64) * 30
        out = key_bias.key_bias_blocks(q, k, v, w, 8**-0.5)
        assert kernel.flushing() == flushing
        out.sum().backward()
        assert kernel.flushing() == flushing
    finally:
        torch.set_flush_denormal(False)


def test_a_sink_is_the_plain_attention_rescaled_by_its_log_sum_exp():
    """``sum_j e^z_ij v_j / (e^s + sum_j e^z_ij) = o_i * sigmoid(L_i - s)`` with
    ``o_i`` the plain attention and ``L_i = log sum_j e^z_ij``: the fused path (one
    more key) equals that rescale, and the reference."""
    torch.manual_seed(0)
    pe = pl.LearnedSink(4).double()
    with torch.no_grad():
        pe.sinks.copy_(torch.tensor([-2.0, 0.0, 1.5, 4.0]))
    q, k, v = qkv(b=2, i=300, j=300, d=8)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * 8**-0.5
    seen = torch.ones(300, 300, dtype=torch.bool).tril()
    scores = scores.masked_fill(~seen, float("-inf"))
    lse = scores.logsumexp(-1, keepdim=True)  # (b, h, i, 1)
    plain = scores.softmax(-1) @ v  # (b, h, i, e)
    rescaled = plain * torch.sigmoid(lse - pe.sinks[None, :, None, None])
    fast = pl.attention(q, k, v, pe, causal=True)
    assert_close(fast, rescaled)
    assert_close(fast, pl.attention(q, k, v, pe, causal=True, path="reference"))


@pytest.mark.parametrize("name", ["fox", "t5"])
def test_the_blocks_off_the_cpu_kernel_recompute_and_agree(monkeypatch, name):
    """Where the CPU's flash kernel is not used (a GPU; here by hiding it), each block
    of FoX's key form and T5's band goes through scaled_dot_product_attention and is
    recomputed in the backward pass: the reference's output and gradients (the
    learned parameters' too), and memory that grows like n, not n^2."""
    from posenc_lib.backends import band_bias, kernel, key_bias

    monkeypatch.setattr(kernel, "CPU_FLASH", "no_such_kernel")
    monkeypatch.setattr(key_bias, "BLOCK", 64)
    monkeypatch.setattr(band_bias, "BLOCK", 64)
    torch.manual_seed(0)
    mha = pl.MultiHeadAttention(16, 2, name).double()
    learned = next(mha.pe.parameters())
    grads, peaks = [], {}
    for n in (256, 512, 1024):
        x = torch.randn(1, n, 16, dtype=torch.float64, requires_grad=True)
        for path in ("fused", "reference"):
            x.grad = None
            mha.zero_grad()

            def step():
                mha(x, causal=True, path=path).square().mean().backward()

            _, peaks[n, path] = pl.tensor_memory(step)
            grads.append((x.grad.clone(), learned.grad.clone()))
        for fast, slow in zip(grads[-2], grads[-1]):
            assert_close(fast, slow)
    growth = peaks[1024, "fused"] / peaks[256, "fused"]
    assert growth < 8, peaks  # n^2 would be 16


@pytest.mark.parametrize("e", [4, 9, 16], ids=["narrower", "d+1", "wider"])
@pytest.mark.parametrize(
    "name", ["alibi", "t5", "fox", "sink", "stick_breaking", "cope"]
)
def test_the_fused_forms_take_values_of_another_width(name, e):
    """The CPU flash kernel wants q, k and v equally wide; the fused forms pad them
    (zeros change no dot product): values narrower or wider than the queries give the
    reference's output and gradients (a wider v was a bare kernel error)."""
    torch.manual_seed(0)
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64).double()
    with torch.no_grad():
        for t in pe.parameters():
            t.add_(0.3 * torch.randn_like(t))
    q, k = (torch.randn(2, 4, 20, 8, dtype=torch.float64, requires_grad=True)
            for _ in range(2))  # fmt: skip
    v = torch.randn(2, 4, 20, e, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 20, 32, dtype=torch.float64)  # FoX's gates
    leaves = [q, k, v, *pe.parameters()]
    fast = pl.attention(q, k, v, pe, causal=True, path="fused", x=x)
    slow = pl.attention(q, k, v, pe, causal=True, path="reference", x=x)
    assert_close(fast, slow)
    for got, want in zip(
        torch.autograd.grad(fast.sum(), leaves), torch.autograd.grad(slow.sum(), leaves)
    ):
        assert_close(got, want)

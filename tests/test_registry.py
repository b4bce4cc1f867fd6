"""The contract every registered encoding keeps, on both attention paths."""

import copy
import re

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.backends.flex import evaluate
from posenc_lib.backends.forms import FORMS
from posenc_lib.base import overrides

D_MODEL, N_HEADS, MAX_LEN = 32, 4, 64
NAMES = sorted(pl.REGISTRY)
# second forms the fused backend runs: the hooks of its table's rows
FUSED_FORMS = tuple(row.form.HOOK for row in FORMS if row.form.HOOK is not None)


def build(name):
    return pl.make_encoding(name, d_model=D_MODEL, n_heads=N_HEADS, max_len=MAX_LEN)


def test_the_foundation_encodings_are_registered():
    assert {"nope", "sinusoidal"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_is_a_positional_encoding_with_a_four_term_row(name):
    pe = build(name)
    assert isinstance(pe, pl.PositionalEncoding)
    assert set(type(pe).four_terms) == set(pl.FOUR_TERMS)


def example(pe, b, n, shift=0, seed=0):
    """Positions and side inputs that ``pe`` accepts for ``n`` tokens (seeded)."""
    g = torch.Generator().manual_seed(seed)
    pos = pe.example_positions(b, n, generator=g) + shift
    return pos, pe.example_inputs(b, n, generator=g)


@pytest.mark.parametrize("name", NAMES)
def test_hook_shapes_and_dtype(name):
    pe = build(name).double()
    b, h, n, d = 2, N_HEADS, 10, D_MODEL // N_HEADS
    pos, inputs = example(pe, b, n)
    x = torch.randn(b, n, D_MODEL, dtype=torch.float64)
    y = pe.call_hook("encode_input", x, pos, ctx=pl.Context(x=x, inputs=inputs))
    assert y.shape == x.shape and y.dtype == torch.float64
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    ctx = pl.Context(x=x, q=q, k=k, v=v, causal=True, inputs=inputs)
    q2, k2 = pe.call_hook("transform_qk", q, k, pos, pos, ctx=ctx)
    assert q2.shape == q.shape and k2.shape == k.shape
    bias = pe.call_hook("score_bias", q2, k2, pos, pos, ctx=ctx)
    if bias is not None:
        torch.broadcast_shapes(bias.shape, (b, h, n, n))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_fast_path_equals_slow_path(name, causal):
    """Where both paths exist they agree; the table of fast forms says when not
    (``pl.explain_path``), only ever for an encoding that ``needs_score_path``."""
    pe = build(name).double()
    if pe.causal_only and not causal:
        pytest.skip(f"{name} is defined causally only (refusal tested below)")
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).double()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    pos, inputs = example(pe, 2, 12, shift=3)
    slow = mha(x, pos, causal=causal, path="reference", inputs=inputs)
    assert torch.isfinite(slow).all()
    positions = pl.prepare(pe, 2, N_HEADS, 12, 12, pos, pos, causal, None, inputs)
    choice = pl.explain_path(mha, positions)
    assert choice.path == "fused" or pe.needs_score_path, choice
    if choice.path != "fused":
        with pytest.raises(ValueError, match="overrides a hook past score_bias"):
            mha(x, pos, causal=causal, path="fused", inputs=inputs)
        return
    assert_close(mha(x, pos, causal=causal, path="fused", inputs=inputs), slow)
    assert_close(mha(x, pos, causal=causal, inputs=inputs), slow)  # auto == fast


def positions(pe, b, n, kind, seed=0):
    """Positions of ``kind``: "run" (shifted by 3) or "gaps" (increasing with holes;
    coordinates keep their example layout, which has repeats)."""
    pos, inputs = example(pe, b, n, shift=3, seed=seed)
    if kind == "gaps" and pe.coord_axes is None:
        g = torch.Generator().manual_seed(seed)
        pos = torch.randint(1, 4, (b, n), generator=g).cumsum(1)
    return pos, inputs


def perturb_(pe):
    """What a training step does to every floating parameter and buffer: in place."""
    with torch.no_grad():
        for t in [*pe.parameters(), *pe.buffers()]:
            if t.is_floating_point():
                t.mul_(1.5).add_(0.01)


@pytest.mark.parametrize("kind", ["run", "gaps"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_fast_path_equals_slow_path_for_gaps_and_after_a_training_step(
    name, causal, kind
):
    """The fast path equals the reference for runs and gapped positions, twice, then
    again after the parameters change (nothing outlives a call)."""
    pe = build(name).double()
    if pe.causal_only and not causal:
        pytest.skip(f"{name} is defined causally only")
    if pe.needs_score_path:
        pytest.skip(f"{name} has no fast path (overrides a hook past score_bias)")
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).double()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    pos, inputs = positions(pe, 2, 12, kind)
    for _ in range(2):
        with torch.no_grad():
            fast = mha(x, pos, causal=causal, inputs=inputs)
            assert_close(
                fast, mha(x, pos, causal=causal, inputs=inputs, path="reference")
            )
        perturb_(pe)


@pytest.mark.parametrize("kind", ["run", "gaps"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_flex_path_equals_slow_path_or_is_refused_with_the_reason(name, causal, kind):
    """FlexAttention (float32, forward: its CPU kernel has no backward) equals the slow
    path for runs and gapped positions, causal or not, before and after the
    parameters change."""
    pe = build(name)
    if pe.causal_only and not causal:
        pytest.skip(f"{name} is defined causally only")
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)
    x = torch.randn(2, 12, D_MODEL)
    pos, inputs = positions(pe, 2, 12, kind)
    for _ in range(2):
        with torch.no_grad():
            slow = mha(x, pos, causal=causal, inputs=inputs, path="reference")
            try:
                flex = mha(x, pos, causal=causal, inputs=inputs, path="flex")
            except ValueError as error:
                assert "path='flex' cannot be used" in str(error)
                pytest.skip(str(error))
            except RuntimeError as error:  # no compiler: the library says so
                assert "path='flex'" in str(error)
                pytest.skip(str(error))
        assert_close(flex, slow)
        perturb_(pe)


# FlexAttention's backward runs on a GPU only: the flex path in training, on a card
CARD_NAMES = (
    [pytest.param(n, marks=pytest.mark.cuda) for n in NAMES]
    if torch.cuda.is_available()
    else []
)


@pytest.mark.parametrize("name", CARD_NAMES)
def test_flex_path_trains_on_a_card_as_the_slow_path(name):
    """On a card the flex path (FlexAttention, compiled) runs forward and backward:
    output and every gradient equal the slow path's, or the call is refused with
    the reason."""
    from tools.testing.fake_cuda import on_fake_cuda

    if on_fake_cuda(torch.empty(0, device="cuda")):
        pytest.skip("the fake device runs no torch.compile")
    torch._dynamo.reset()  # a fresh compile cache: the recompile limit is per process
    torch.manual_seed(0)
    pe = build(name)
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).cuda()
    x = torch.randn(2, 12, D_MODEL, device="cuda", requires_grad=True)
    pos, inputs = positions(pe, 2, 12, "run")
    pos, inputs = pos.cuda(), {k: t.cuda() for k, t in inputs.items()}
    causal = True
    results = []
    for path in ("reference", "flex"):
        x.grad = None
        mha.zero_grad()
        try:
            out = mha(x, pos, causal=causal, inputs=inputs, path=path)
        except ValueError as error:
            assert "path='flex' cannot be used" in str(error)
            pytest.skip(str(error))
        out.square().sum().backward()
        grads = [p.grad for p in mha.parameters() if p.grad is not None]
        results.append([out.detach(), x.grad.clone(), *(g.clone() for g in grads)])
    for slow, flex in zip(*results):
        assert_close(flex, slow, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["run", "gaps"])
@pytest.mark.parametrize(
    "name",
    [
        n
        for n in NAMES
        if type(build(n)).score_mod is not pl.PositionalEncoding.score_mod
    ],
)
def test_score_mod_agrees_with_score_bias_and_transform_scores(name, kind):
    """``mod(s) == transform_scores(s + score_bias)`` entry by entry, and on zero
    scores the mod is ``score_bias`` itself: the two forms cannot drift apart."""
    pe = build(name).double()
    b, h, n, d = 2, N_HEADS, 10, D_MODEL // N_HEADS
    pos, inputs = positions(pe, b, n, kind)
    x = torch.randn(b, n, D_MODEL, dtype=torch.float64)
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    ctx = pl.Context(x=x, q=q, k=k, v=v, causal=True, inputs=inputs)
    mod = pe.call_hook("score_mod", pos, pos, ctx=ctx)
    bias = pe.call_hook("score_bias", q, k, pos, pos, ctx=ctx)
    bias = torch.zeros(()) if bias is None else bias
    s = torch.randn(b, h, n, n, dtype=torch.float64)
    expected = pe.call_hook("transform_scores", s + bias, pos, pos, ctx=ctx)
    assert_close(evaluate(mod, (b, h, n, n), s).expand(b, h, n, n), expected)
    if type(pe).transform_scores is pl.PositionalEncoding.transform_scores:
        zero = torch.zeros((), dtype=torch.float64)
        on_zero = evaluate(mod, (b, h, n, n), zero).expand(b, h, n, n)
        assert_close(on_zero, bias.expand(b, h, n, n))


@pytest.mark.parametrize("name", NAMES)
def test_needs_score_path_follows_the_overridden_hooks(name):
    cls = type(build(name))
    # the hooks after score_bias, but the output's transform (per token, after it)
    after_bias = pl.HOOKS[pl.HOOKS.index("score_bias") + 1 :]
    late = [
        h
        for h in after_bias
        if h != "transform_out"
        and getattr(cls, h) is not getattr(pl.PositionalEncoding, h)
    ]
    # an attention_weights that sink_logits restates runs on the kernel (one more key)
    on_the_kernel = late == ["attention_weights"] and overrides(cls, "sink_logits")
    assert build(name).needs_score_path == (bool(late) and not on_the_kernel)


# the fused forms on every device they run on: the CPU, the fake CUDA device (the
# GPU's code paths, computed on the CPU) and a real card (make test-gpu: -m cuda)
DEVICES = ["cpu", "fake-cuda"] + (
    [pytest.param("cuda", marks=pytest.mark.cuda)] if torch.cuda.is_available() else []
)
HALF = (torch.bfloat16, torch.float16)


@pytest.fixture(params=DEVICES)
def device(request):
    """The device under test, entered for the whole test."""
    from tools.testing.fake_cuda import fake_cuda

    if request.param == "fake-cuda":
        with fake_cuda():
            yield torch.device("cuda")
    else:
        yield torch.device(request.param)


def _close(fast, slow, dtype):
    """Equal to the dtype: float64 exactly as assert_close's default, float32 to
    2e-5, half precision to 4 eps of the larger entries (both paths round)."""
    if dtype == torch.float64:
        assert_close(fast, slow)
    elif dtype == torch.float32:
        assert_close(fast, slow, atol=2e-5, rtol=1e-4)
    else:
        tol = 4 * torch.finfo(dtype).eps * float(slow.float().abs().max())
        assert_close(fast.float(), slow.float(), atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, *HALF], ids=str)
@pytest.mark.parametrize(
    "name", [n for n in NAMES if any(overrides(build(n), f) for f in FUSED_FORMS)]
)
def test_fused_forms_equal_the_hooks_forward_and_backward(
    name, dtype, device, monkeypatch
):
    """``key_bias``, ``band_bias``, ``sink_logits`` and ``causal_attention``, as the
    fused backend runs them on each device (in blocks of 4 queries here, so that a
    call spans several), equal the reference: outputs and the gradients of the input
    and of every parameter, causal in token order (where the forms are used), then
    with gaps and a caller's mask (where they are not, or the call is refused).
    Half precision included: the key term in two columns (``bias_columns``)."""
    from posenc_lib.backends import band_bias, key_bias

    monkeypatch.setattr(key_bias, "BLOCK", 4)
    monkeypatch.setattr(band_bias, "BLOCK", 4)
    for module in (pl.encodings.stick_breaking, pl.encodings.cope, pl.encodings.wall):
        monkeypatch.setattr(module, "BLOCK", 4, raising=False)
        monkeypatch.setattr(module, "BLOCK_OFF_CPU", 4, raising=False)
    torch.manual_seed(0)
    pe = build(name).to(dtype)
    with torch.no_grad():  # parameters away from their initial values
        for t in pe.parameters():
            t.add_(torch.randn_like(t))
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)
    mha = mha.to(device, dtype)
    x = torch.randn(2, 11, D_MODEL, dtype=dtype).to(device).requires_grad_()
    grad = torch.randn(2, 11, D_MODEL, dtype=dtype).to(device)
    calls = [dict(), dict(pos=torch.arange(11) * 2)]
    if not pe.causal_only:
        # every query keeps its own key, so that no row is left empty
        calls.append(dict(mask=(torch.rand(2, 1, 11, 11) > 0.3) | torch.eye(11).bool()))
    for number, kw in enumerate(calls):
        results = []
        if pe.needs_score_path and number > 0:  # not its calls: refused by name
            with pytest.raises(ValueError, match="causal_attention serves"):
                mha(x, causal=True, path="fused", **kw)
            continue
        for path in ("reference", "fused"):
            x.grad = None
            mha.zero_grad()
            (mha(x, causal=True, path=path, **kw) * grad).sum().backward()
            results.append(
                [x.grad.clone(), *(p.grad.clone() for p in mha.parameters())]
            )
        for slow, fast in zip(*results):
            assert fast.device.type == device.type
            _close(fast, slow, dtype)


@pytest.mark.parametrize("kind", ["run", "gaps"])
@pytest.mark.parametrize(
    "name",
    [
        n
        for n in NAMES
        if any(overrides(build(n), h) for h in ("transform_v", "transform_out"))
    ],
)
def test_value_and_output_transforms_run_around_the_fused_kernel(name, kind):
    """``transform_v`` and ``transform_out`` act per token, around the kernel: the
    fused path equals the reference, outputs and the gradients of the input and of
    every parameter (float64), causal or not, for runs and gapped positions."""
    torch.manual_seed(0)
    pe = build(name).double()
    with torch.no_grad():  # parameters away from their initial values
        for t in pe.parameters():
            t.add_(torch.randn_like(t))
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).double()
    x = torch.randn(2, 11, D_MODEL, dtype=torch.float64, requires_grad=True)
    pos, inputs = positions(pe, 2, 11, kind)
    for causal in (True,) if pe.causal_only else (False, True):
        results = []
        for path in ("reference", "fused"):
            x.grad = None
            mha.zero_grad()
            out = mha(x, pos, causal=causal, path=path, inputs=inputs)
            out.square().sum().backward()
            results.append(
                [
                    out.detach(),
                    x.grad.clone(),
                    *(p.grad.clone() for p in mha.parameters()),
                ]
            )
        for slow, fast in zip(*results):
            assert_close(fast, slow)


@pytest.mark.parametrize("name", [n for n in NAMES if overrides(build(n), "key_bias")])
def test_key_bias_is_the_score_bias_up_to_a_term_of_the_query(name):
    """On every key a query sees (causal, token order), ``score_bias - key_bias``
    does not depend on the key: the softmax cannot tell the two apart."""
    pe = build(name).double()
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    q, k = (
        torch.randn(2, N_HEADS, 9, D_MODEL // N_HEADS, dtype=torch.float64)
        for _ in range(2)
    )
    pos = torch.arange(9)[None]
    ctx = pl.Context(x=x, q=q, k=k, causal=True)
    bias = pe.call_hook("score_bias", q, k, pos, pos, ctx=ctx)  # (b, h, i, j)
    w = pe.call_hook("key_bias", q, k, pos, pos, ctx=ctx)  # (b, h, j)
    rest = bias - w[..., None, :]  # u_i where j <= i
    seen = torch.ones(9, 9, dtype=torch.bool).tril()
    u = rest.diagonal(dim1=-2, dim2=-1)[..., None]  # (b, h, i, 1)
    assert_close(rest.masked_fill(~seen, 0), u.expand_as(rest).masked_fill(~seen, 0))


@pytest.mark.parametrize("name", [n for n in NAMES if overrides(build(n), "band_bias")])
def test_band_bias_is_the_score_bias_up_to_a_term_of_the_query(name):
    """On every key a query sees (causal, token order, a run of positions), the
    ``score_bias`` is ``u_i + c[:, i - j]`` within the band and ``u_i + c[:, W]``
    beyond it, over a sequence long enough to reach beyond the band."""
    pe = build(name).double()
    q, k = (
        torch.randn(1, N_HEADS, 2, D_MODEL // N_HEADS, dtype=torch.float64)
        for _ in range(2)
    )
    c = pe.call_hook("band_bias", q, k, None, None)  # (h|1, W + 1)
    n = c.shape[-1] + 20
    pos = torch.arange(n)[None] + 7
    q, k = (
        torch.randn(1, N_HEADS, n, D_MODEL // N_HEADS, dtype=torch.float64)
        for _ in range(2)
    )
    ctx = pl.Context(q=q, k=k, causal=True)
    bias = pe.call_hook("score_bias", q, k, pos, pos, ctx=ctx)[0]  # (h, i, j)
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).clamp(
        max=c.shape[-1] - 1
    )
    expected = c[:, distance.clamp(min=0)]  # (h, i, j)
    seen = torch.ones(n, n, dtype=torch.bool).tril()
    rest = (bias - expected).masked_fill(~seen, 0)
    u = rest.diagonal(dim1=-2, dim2=-1)[..., None]  # (h, i, 1)
    assert_close(rest, u.expand_as(rest).masked_fill(~seen, 0))


@pytest.mark.parametrize("name", [n for n in NAMES if build(n).causal_only])
def test_causal_only_encodings_refuse_bidirectional_attention(name):
    pe = build(name)
    x = torch.randn(1, 6, D_MODEL)
    pos, inputs = example(pe, 1, 6)
    with pytest.raises(ValueError, match="causal attention only"):
        pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)(
            x, pos, causal=False, inputs=inputs
        )


@pytest.mark.parametrize("name", [n for n in NAMES if build(n).side_inputs])
def test_missing_side_inputs_are_named(name):
    pe = build(name)
    x = torch.randn(1, 6, D_MODEL)
    pos, _ = example(pe, 1, 6)
    missing = next(iter(pe.side_inputs))
    with pytest.raises(ValueError, match=f"needs the side input.*{missing}"):
        pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)(
            x, pos, causal=True
        )


@pytest.mark.parametrize("name", NAMES)
def test_positions_of_the_wrong_kind_are_refused(name):
    """A sequence encoding refuses coordinates and a coordinate encoding sequences."""
    pe = build(name)
    x = torch.randn(1, 6, D_MODEL)
    _, inputs = example(pe, 1, 6)
    wrong = torch.zeros(1, 6, 2, dtype=torch.long) if pe.coord_axes is None else None
    wrong = torch.arange(6)[None] if pe.coord_axes is not None else wrong
    with pytest.raises(ValueError, match="pos must have shape"):
        pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True)(
            x, wrong, causal=True, inputs=inputs
        )


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_and_dtype_move(name):
    torch.manual_seed(1)
    a = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=build(name))
    torch.manual_seed(2)
    b = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=build(name))
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    tokens = torch.randint(13, (2, 9))
    pos, inputs = example(a.pe, 2, 9)
    assert_close(a(tokens, pos, inputs=inputs), b(tokens, pos, inputs=inputs))
    a64 = a.to(torch.float64)
    assert a64(tokens, pos, inputs=inputs).dtype == torch.float64
    assert all(
        t.dtype == torch.float64
        for t in a64.state_dict().values()
        if t.is_floating_point()
    )


@pytest.mark.parametrize("name", NAMES)
def test_model_runs_causal_and_bidirectional_with_offsets(name):
    pe = build(name)
    model = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=pe)
    tokens = torch.randint(13, (2, 9))
    pos, inputs = example(pe, 2, 9, shift=5)
    for causal in (False, True) if not pe.causal_only else (True,):
        out = model(tokens, pos=pos, causal=causal, inputs=inputs)
        assert out.shape == (2, 9, 13) and torch.isfinite(out).all()


def test_make_encoding_rejects_unknown_names_and_bad_sizes():
    with pytest.raises(KeyError, match="unknown encoding 'nope2'"):
        pl.make_encoding("nope2", d_model=8, n_heads=2, max_len=8)
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.make_encoding("nope", d_model=8, n_heads=0, max_len=8)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        pl.make_encoding("nope", d_model=8, n_heads=3, max_len=8)


def test_four_term_table_has_a_row_per_encoding():
    rows = pl.four_term_table()
    assert [r["encoding"] for r in rows] == list(pl.REGISTRY)
    assert (
        next(r for r in rows if r["encoding"] == "sinusoidal")["hooks"]
        == "encode_input"
    )


@pytest.mark.parametrize("name", NAMES)
def test_tables_are_buffers_so_to_device_moves_them(name):
    """A plain tensor attribute would be left behind by .to(device) and missing
    from state_dict."""
    pe = build(name)
    for module in pe.modules():
        plain = [k for k, v in vars(module).items() if isinstance(v, torch.Tensor)]
        assert not plain, (
            f"{name}: tensors {plain} should be registered buffers or parameters"
        )
    device = pl.get_device()
    model = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=pe).to(device)
    assert all(
        t.device.type == device.type for t in [*model.parameters(), *model.buffers()]
    )
    pos, inputs = example(pe, 2, 9, shift=2)
    inputs = {key: t.to(device) for key, t in inputs.items()}
    tokens = torch.randint(13, (2, 9), device=device)
    out = model(tokens, pos=pos.to(device), inputs=inputs)
    assert out.device.type == device.type


def test_share_pe_false_gives_each_block_its_own_tables():
    shared = pl.TinyTransformer(13, D_MODEL, N_HEADS, 3, pe=build("t5"))
    own = pl.TinyTransformer(13, D_MODEL, N_HEADS, 3, pe=build("t5"), share_pe=False)
    assert all(block.attn.pe is shared.pe for block in shared.blocks)
    assert len({id(block.attn.pe) for block in own.blocks}) == 3
    table = sum(p.numel() for p in shared.pe.parameters())
    assert own.blocks[0].attn.pe is own.pe  # no table left without a gradient
    assert own.n_params() - shared.n_params() == 2 * table  # one table per block
    assert own(torch.randint(13, (2, 9))).shape == (2, 9, 13)


@pytest.mark.parametrize("name", NAMES)
def test_a_causal_model_never_reads_later_tokens(name):
    """In a causal model, the output at position t does not move when the tokens after
    t change, for every encoding (encode_input included: a centred convolution over
    the embeddings would leak the very tokens a language model must predict)."""
    torch.manual_seed(0)
    pe = build(name)
    b, n, t = 2, 12, 6
    pos, inputs = example(pe, b, n)
    model = pl.TinyTransformer(11, d_model=D_MODEL, n_heads=N_HEADS, pe=pe).eval()
    tokens = torch.randint(0, 11, (b, n))
    changed = tokens.clone()
    changed[:, t + 1 :] = (tokens[:, t + 1 :] + 1) % 11
    with torch.no_grad():
        out = model(tokens, pos, causal=True, inputs=inputs)
        out_changed = model(changed, pos, causal=True, inputs=inputs)
    torch.testing.assert_close(out[:, : t + 1], out_changed[:, : t + 1])


def _reorder(inputs: dict, index: torch.Tensor, n: int) -> dict:
    """Side inputs for the tokens ``index``: per token ``(b, n, ...)`` on axis 1,
    pairwise ``(b, n, n, ...)`` on axes 1 and 2."""
    out = {}
    for key, t in inputs.items():
        t = t[:, index]
        if t.dim() >= 3 and t.shape[2] == n:
            t = t[:, :, index]
        out[key] = t
    return out


@pytest.mark.parametrize("kind", ["queries in the middle", "decreasing positions"])
@pytest.mark.parametrize("name", NAMES)
def test_causal_calls_follow_the_positions_or_refuse(name, kind):
    """Causal attention is defined by positions: queries that are not the last keys
    (rows 2-4 of 8) get rows 2-4 of the full call, and tokens stored in decreasing
    position order get the answer of the same tokens in increasing order. An
    encoding that cannot follow the positions refuses with the reason, never
    answers silently wrong (issue: stick-breaking, CoPE and FoX did)."""
    pe = build(name).double()
    if pe.coord_axes is not None:
        pytest.skip("coordinates are causal in token order (KV-cache aligned)")
    torch.manual_seed(0)
    b, n, h, d = 2, 8, N_HEADS, D_MODEL // N_HEADS
    pos, inputs = example(pe, b, n, shift=2)
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    x = torch.randn(b, n, D_MODEL, dtype=torch.float64)
    full = pl.attention(q, k, v, pe, pos, pos, causal=True, x=x, inputs=inputs)
    if kind == "queries in the middle":
        rows = torch.arange(2, 5)
        args = (q[:, :, rows], k, v, pe, pos[:, rows], pos)
        kwargs = dict(x=x[:, rows], inputs=inputs)
        expected = full[:, :, rows]
    else:
        rev = torch.arange(n - 1, -1, -1)
        args = (q[:, :, rev], k[:, :, rev], v[:, :, rev], pe, pos[:, rev], pos[:, rev])
        kwargs = dict(x=x[:, rev], inputs=_reorder(inputs, rev, n))
        expected = full[:, :, rev]
    for path in ("reference", "auto"):
        try:
            out = pl.attention(*args, causal=True, path=path, **kwargs)
        except ValueError as error:  # a refusal must say what it assumes
            assert re.search(r"position|order|quer|key", str(error)), str(error)
            continue
        assert_close(out, expected)


@pytest.mark.parametrize("name", sorted(pl.REGISTRY))
def test_max_len_is_needed_only_where_it_is_used(name):
    """``make_encoding(name, d_model, n_heads)`` builds every encoding that is not
    sized by the training length, and refuses (naming max_len) those that are; a
    factory that reads max_len without declaring it fails here."""
    if name in pl.NEEDS_MAX_LEN:
        with pytest.raises(TypeError, match=f"encoding '{name}' needs max_len"):
            pl.make_encoding(name, 32, 4)
        assert isinstance(pl.make_encoding(name, 32, 4, 16), pl.PositionalEncoding)
    else:
        built = pl.make_encoding(name, 32, 4)
        sized = pl.make_encoding(name, 32, 4, max_len=16)
        assert type(built) is type(sized)
        assert [p.shape for p in built.parameters()] == [
            p.shape for p in sized.parameters()
        ]


def test_the_names_readers_look_for():
    assert pl.RoPE is pl.Rotary
    assert type(pl.make_encoding("rope", 64, 4, 128)) is pl.RoPE


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="FlexAttention differentiates on a GPU only: runs where CUDA is present",
)
@pytest.mark.parametrize("path", ["fused", "flex"])
@pytest.mark.parametrize("name", NAMES)
def test_every_path_equals_the_reference_in_training_on_a_gpu(name, path):
    """On CUDA, each path an encoding runs (the fused kernel, FlexAttention) equals the
    reference, output and the gradients of the input and of every parameter, causal
    in token order, float32 (FlexAttention's CPU kernel has no backward, so this part
    of the contract needs a GPU)."""
    torch.manual_seed(0)
    device = torch.device("cuda")
    pe = build(name).to(device)
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe, input_encoded=True).to(device)
    x = torch.randn(2, 12, D_MODEL, device=device, requires_grad=True)
    pos, inputs = example(pe, 2, 12)
    grad = torch.randn(2, 12, D_MODEL, device=device)
    results = []
    for p in ("reference", path):
        x.grad = None
        mha.zero_grad()
        try:
            out = mha(x, pos, causal=True, inputs=inputs, path=p)
        except ValueError as error:  # a path the encoding does not run: refused
            assert "cannot be used" in str(error)
            pytest.skip(str(error))
        (out * grad).sum().backward()
        params = [q.grad for q in mha.parameters() if q.grad is not None]
        results.append([out.detach(), x.grad.clone(), *params])
    for slow, fast in zip(*results):
        assert_close(fast, slow, atol=1e-4, rtol=1e-4)

"""Bad input to posenc_lib is answered with a clear error that names the argument and
the constraint: never a silent wrong answer, NaN, zeros or a bare framework error.

One row per case from the review of Parts 0-III: (what is called, expected error type,
a fragment of the message that names the argument)."""

import itertools
import math

import numpy as np
import pytest
import torch

import posenc_lib as pl


def _rope(d_model=16, n_heads=2):
    return pl.make_encoding("rope", d_model=d_model, n_heads=n_heads, max_len=16)


def _attention_with_nan_query():
    q = torch.randn(1, 1, 4, 8)
    q[0, 0, 0, 0] = float("nan")
    return pl.attention(q, q.nan_to_num(), q.nan_to_num())


CASES = {
    "apply_rope on integer x": (
        lambda: pl.apply_rope(
            torch.ones(1, 1, 4, 8, dtype=torch.long),
            torch.arange(4),
            pl.rope_inv_freq(8)[0],
        ),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "Rotary on integer q and k": (
        lambda: _rope().transform_qk(
            *(torch.ones(1, 2, 4, 8, dtype=torch.long),) * 2,
            torch.arange(4)[None],
            torch.arange(4)[None],
        ),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "Rotary with q and k of different head dims": (
        lambda: _rope().transform_qk(
            torch.randn(1, 2, 4, 8),
            torch.randn(1, 2, 4, 6),
            torch.arange(4)[None],
            torch.arange(4)[None],
        ),
        ValueError,
        "k has head dimension 6",
    ),
    "Sinusoidal.encode_input on integer x": (
        lambda: pl.make_encoding(
            "sinusoidal", d_model=8, n_heads=1, max_len=16
        ).encode_input(torch.ones(1, 4, 8, dtype=torch.long), torch.arange(4)[None]),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "attention with a NaN query": (
        _attention_with_nan_query,
        ValueError,
        "q holds NaN or infinite values",
    ),
    "attention on integer tensors": (
        lambda: pl.attention(*(torch.ones(1, 1, 4, 8, dtype=torch.long),) * 3),
        TypeError,
        "q must be a floating-point tensor",
    ),
    "attention with a wrongly shaped mask": (
        lambda: pl.attention(
            *(torch.randn(1, 1, 4, 8),) * 3, mask=torch.ones(3, 3, dtype=torch.bool)
        ),
        ValueError,
        "mask must be broadcastable",
    ),
    "MarkovSource(temperature=0)": (
        lambda: pl.MarkovSource(temperature=0),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "MarkovSource(temperature=nan)": (
        lambda: pl.MarkovSource(temperature=math.nan),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "MarkovSource(temperature=-1)": (
        lambda: pl.MarkovSource(temperature=-1),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "axial past max_len (its grid holds more rows)": (
        lambda: pl.make_encoding(
            "axial", d_model=8, n_heads=2, max_len=10
        ).encode_input(torch.zeros(1, 11, 8), torch.arange(11)[None]),
        ValueError,
        "pos must lie in [0, max_len) = [0, 10)",
    ),
    "stdlib_corpus with a missing module": (
        lambda: pl.stdlib_corpus(modules=("os", "no_such_module")),
        ValueError,
        "no_such_module",
    ),
    "HuangMethod3(d_head=0)": (
        lambda: pl.HuangMethod3(d_head=0, max_distance=4),
        ValueError,
        "d_head",
    ),
    "setup(threads=0)": (
        lambda: pl.book.setup(threads=0),
        ValueError,
        "threads must be a positive int",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_a_clear_error(case):
    call, error, fragment = CASES[case]
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value), f"{case}: {info.value}"


def test_setup_still_accepts_none_and_one():
    pl.book.setup(threads=None)
    pl.book.setup(threads=1)
    assert torch.get_num_threads() == 1


# ---- the classes of the whole-API review (issue 19): one or more cases per class ----
def _q(h=4, n=5, d=8):
    return torch.randn(1, h, n, d)


def _make(name, d_model=32, n_heads=4):
    return pl.make_encoding(name, d_model=d_model, n_heads=n_heads, max_len=16)


def _lab_config(**kw):
    from posenc_lib.lab import LabConfig

    return LabConfig(**kw)


def _ids_decoded(ids):
    corpus = pl.stdlib_corpus(modules=("os",))
    return corpus.decode(torch.tensor(ids))


def _with(t, value):
    """``t`` with one entry set to ``value`` (NaN, inf)."""
    t = t.clone(memory_format=torch.contiguous_format)
    t.view(-1)[t.numel() // 2] = value
    return t


def _laplacian_model_with(value):
    pe = _make("laplacian", 16, 2)
    inputs = pe.example_inputs(1, 5)
    inputs["eigvecs"] = _with(inputs["eigvecs"], value)
    model = pl.TinyTransformer(8, 16, 2, 1, pe=pe)
    return model(torch.zeros(1, 5).long(), inputs=inputs)


CLASSES = {
    # shapes that would broadcast where they should be refused
    "positions of batch 2 for a call of batch 1": (
        lambda: pl.attention(*(_q(),) * 3, pl.ALiBi(4), q_pos=torch.zeros(2, 5).long()),
        ValueError,
        "q_pos must have shape",
    ),
    "q with 1 head for a 4-head table (fast)": (
        lambda: pl.attention(*(_q(h=1),) * 3, pl.ALiBi(4), path="fused"),
        ValueError,
        "built for n_heads=4",
    ),
    "q with 1 head for a 4-head table (slow)": (
        lambda: pl.attention(*(_q(h=1),) * 3, _make("t5"), path="reference"),
        ValueError,
        "built for n_heads=4",
    ),
    # empty or degenerate input
    "attention over no keys": (
        lambda: pl.attention(_q(), torch.randn(1, 4, 0, 8), torch.randn(1, 4, 0, 8)),
        ValueError,
        "j",
    ),
    "a batch of no sequences": (
        lambda: pl.TinyTransformer(8, 16, 2, 1)(torch.zeros(0, 5).long()),
        ValueError,
        "tokens",
    ),
    "a model with d_ff=0": (
        lambda: pl.TinyTransformer(8, 16, 2, 1, d_ff=0),
        ValueError,
        "d_ff must be > 0",
    ),
    "lr=inf in the lab": (lambda: _lab_config(lr=math.inf), ValueError, "lr must be"),
    "a batch of one tensor in evaluate": (
        lambda: pl.evaluate(
            pl.TinyTransformer(8, 16, 2, 1), [(torch.zeros(1, 4).long(),)]
        ),
        ValueError,
        "a batch must be (tokens, targets), (tokens, targets, pos) or (tokens, "
        "targets, pos, inputs)",
    ),
    "a batch whose inputs are a list in train": (
        lambda: pl.train(
            pl.TinyTransformer(8, 16, 2, 1),
            lambda s: (torch.zeros(1, 4).long(), torch.zeros(1, 4).long(), None, [1]),
            1,
            progress=False,
        ),
        TypeError,
        "inputs (a batch's fourth element) must be None or a dict of named tensors",
    ),
    "a batch whose inputs hold a number in accuracy": (
        lambda: pl.accuracy(
            pl.TinyTransformer(8, 16, 2, 1),
            (torch.zeros(1, 4).long(), torch.zeros(1, 4).long(), None, {"spd": 1}),
        ),
        TypeError,
        "got {'spd': 'int'}",
    ),
    "lr=inf in train": (
        lambda: pl.train(torch.nn.Linear(1, 1), None, 1, lr=math.inf),
        ValueError,
        "lr must be a finite number",
    ),
    # non-finite values passed on
    "RoPE base=inf": (
        lambda: pl.Rotary(8, base=math.inf),
        ValueError,
        "base must be a finite number",
    ),
    "YaRN attention_factor=0": (
        lambda: pl.rope_inv_freq(
            8,
            scaling="yarn",
            factor=4.0,
            original_max_position_embeddings=16,
            attention_factor=0.0,
        ),
        ValueError,
        "attention_factor must be a finite number > 0",
    ),
    # wrong dtypes taken
    "rotate_half on integer x": (
        lambda: pl.rotate_half(torch.arange(8)),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "complex positions": (
        lambda: pl.attention(*(_q(),) * 3, q_pos=torch.arange(5) + 0j),
        TypeError,
        "q_pos must hold integer positions",
    ),
    "a uint8 mask": (
        lambda: pl.attention(*(_q(),) * 3, mask=torch.ones(5, 5, dtype=torch.uint8)),
        TypeError,
        "mask must be a bool tensor",
    ),
    "causal='False' (a truthy string)": (
        lambda: pl.attention(*(_q(),) * 3, causal="False"),
        TypeError,
        "causal must be a bool",
    ),
    # registry and helpers
    "rotate_half on odd d": (
        lambda: pl.rotate_half(torch.randn(3, 7)),
        ValueError,
        "must be even",
    ),
    "an encoding registered under an empty name": (
        lambda: pl.register("  "),
        ValueError,
        "non-empty string",
    ),
    "an encoding registered under a number": (
        lambda: pl.register(3),
        ValueError,
        "non-empty string",
    ),
    "a negative id decoded": (
        lambda: _ids_decoded([0, -1]),
        ValueError,
        "ids must be in [0,",
    ),
    # shapes that would enlarge the call (issue 33)
    "a mask with a larger batch than q (slow)": (
        lambda: pl.attention(
            *(_q(),) * 3,
            path="reference",
            mask=torch.ones(3, 1, 5, 5, dtype=torch.bool),
        ),
        ValueError,
        "mask must be broadcastable to (b, h, i, j) = (1, 4, 5, 5)",
    ),  # fmt: skip
    "a mask with more heads than q (fast)": (
        lambda: pl.attention(
            *(_q(h=1),) * 3, path="fused", mask=torch.ones(1, 4, 5, 5, dtype=torch.bool)
        ),
        ValueError,
        "mask must be broadcastable to (b, h, i, j) = (1, 1, 5, 5)",
    ),  # fmt: skip
    "a 5-D mask": (
        lambda: pl.attention(
            *(_q(),) * 3, mask=torch.ones(1, 1, 1, 5, 5, dtype=torch.bool)
        ),
        ValueError,
        "mask must be broadcastable to (b, h, i, j)",
    ),  # fmt: skip
    "a stick-breaking mask with a larger batch than the scores": (
        lambda: pl.StickBreaking().attention_weights(
            torch.randn(1, 2, 5, 5), torch.ones(3, 1, 5, 5, dtype=torch.bool).tril()
        ),
        ValueError,
        "mask must be broadcastable to scores",
    ),
    # an infinite RoPE scaling factor: every frequency 0 (or NaN) (issue 33)
    "linear RoPE scaling factor=inf": (
        lambda: pl.rope_inv_freq(8, scaling="linear", factor=math.inf),
        ValueError,
        "factor must be a finite number >= 1, got inf",
    ),
    "proportional RoPE scaling factor=inf": (
        lambda: pl.rope_inv_freq(8, scaling="proportional", factor=math.inf),
        ValueError,
        "factor must be a finite number >= 1, got inf",
    ),
    "dynamic RoPE scaling factor=inf": (
        lambda: pl.rope_inv_freq(
            8,
            scaling="dynamic",
            factor=math.inf,
            original_max_position_embeddings=16,
            seq_len=32,
        ),
        ValueError,
        "factor must be a finite number >= 1, got inf",
    ),  # fmt: skip
    "dynamic RoPE scaling factor=nan": (
        lambda: pl.rope_inv_freq(
            8,
            scaling="dynamic",
            factor=math.nan,
            original_max_position_embeddings=16,
            seq_len=32,
        ),
        ValueError,
        "factor must be a finite number >= 1, got nan",
    ),  # fmt: skip
    "linear RoPE scaling factor=0": (
        lambda: pl.rope_inv_freq(8, scaling="linear", factor=0),
        ValueError,
        "factor must be a finite number >= 1, got 0",
    ),
    "proportional RoPE scaling factor=-2": (
        lambda: pl.rope_inv_freq(8, scaling="proportional", factor=-2.0),
        ValueError,
        "factor must be a finite number >= 1, got -2.0",
    ),
    "llama3 RoPE scaling factor=inf": (
        lambda: pl.rope_inv_freq(
            8, scaling="llama3", factor=math.inf, original_max_position_embeddings=16
        ),
        ValueError,
        "factor must be a finite number >= 1, got inf",
    ),
    "the rope_dynamic encoding with factor=inf": (
        lambda: pl.DynamicRotary(8, 16, factor=math.inf),
        ValueError,
        "factor must be a finite number >= 1, got inf",
    ),
    # NaN or inf parameters and inputs of the small helpers (issue 33)
    "sinusoidal_encoding base=inf": (
        lambda: pl.sinusoidal_encoding(torch.arange(3), 8, base=math.inf),
        ValueError,
        "base must be a finite number > 1, got inf",
    ),
    "sinusoidal_table base=inf": (
        lambda: pl.sinusoidal_table(4, 8, base=math.inf),
        ValueError,
        "base must be a finite number > 1, got inf",
    ),
    "Sinusoidal(base=nan)": (
        lambda: pl.Sinusoidal(8, base=math.nan),
        ValueError,
        "base must be a finite number > 1, got nan",
    ),
    "sinusoidal_encoding at a NaN position": (
        lambda: pl.sinusoidal_encoding(torch.tensor([0.0, math.nan]), 8),
        ValueError,
        "pos must be finite",
    ),
    "rbf_expand gamma=nan": (
        lambda: pl.rbf_expand(torch.ones(3), torch.linspace(0, 1, 4), math.nan),
        ValueError,
        "gamma must be a finite number > 0, got nan",
    ),
    "rbf_expand gamma=-1": (
        lambda: pl.rbf_expand(torch.ones(3), torch.linspace(0, 1, 4), -1.0),
        ValueError,
        "gamma must be a finite number > 0, got -1.0",
    ),
    "rbf_expand with a NaN center": (
        lambda: pl.rbf_expand(torch.ones(3), torch.tensor([0.0, math.nan]), 1.0),
        ValueError,
        "centers must be finite",
    ),
    "fourier_features with a NaN frequency": (
        lambda: pl.fourier_features(
            torch.ones(3, 2), _with(torch.randn(4, 2), math.nan)
        ),
        ValueError,
        "B must be finite",
    ),
    "great_circle_angle at a NaN latitude": (
        lambda: pl.great_circle_angle(
            *(torch.tensor([math.nan]),) + (torch.zeros(1),) * 3
        ),
        ValueError,
        "lat1 must be finite",
    ),
    "great_circle_angle at an infinite longitude": (
        lambda: pl.great_circle_angle(*(torch.zeros(1),) * 3, torch.tensor([math.inf])),
        ValueError,
        "lon2 must be finite",
    ),
    "great_circle_angle at latitude 200": (
        lambda: pl.great_circle_angle(
            *(torch.zeros(1),) * 2, torch.tensor([200.0]), torch.zeros(1)
        ),
        ValueError,
        "lat2 must lie in [-90, 90]",
    ),
    "canonical_sign of NaN vectors": (
        lambda: pl.canonical_sign(torch.tensor([[1.0], [math.nan], [2.0]])),
        ValueError,
        "vectors must be finite",
    ),
    "canonical_sign with rtol=nan": (
        lambda: pl.canonical_sign(torch.randn(3, 1), rtol=math.nan),
        ValueError,
        "rtol must be a number in [0, 1), got nan",
    ),
    "random_sign_flip of NaN vectors": (
        lambda: pl.random_sign_flip(torch.tensor([[[1.0], [math.nan]]])),
        ValueError,
        "vectors must be finite",
    ),
    "llama4_attn_scale at a negative position": (
        lambda: pl.llama4_attn_scale(torch.tensor([3, -5]), floor_scale=4),
        ValueError,
        "pos must be >= 0, got a minimum of -5",
    ),
    "a float32 layer on a float64 x": (
        lambda: pl.MultiHeadAttention(16, 2)(
            torch.randn(1, 5, 16, dtype=torch.float64)
        ),
        TypeError,
        "x is torch.float64 but this MultiHeadAttention holds torch.float32",
    ),
    "a layer input x of another dtype than q": (
        lambda: pl.attention(
            *(_q(h=2),) * 3,
            _make("fox", 16, 2),
            causal=True,
            x=torch.randn(1, 5, 16, dtype=torch.float64),
        ),
        TypeError,
        "x must have q's dtype torch.float32",
    ),  # fmt: skip
    # non-finite data reaching an encoding (issue 33)
    "FoX with NaN in its layer input x": (
        lambda: pl.attention(
            *(_q(h=2),) * 3,
            _make("fox", 16, 2),
            causal=True,
            x=_with(torch.randn(1, 5, 16), math.nan),
        ),
        ValueError,
        "x holds NaN or infinite values",
    ),  # fmt: skip
    "FoX with inf in its layer input x": (
        lambda: pl.attention(
            *(_q(h=2),) * 3,
            _make("fox", 16, 2),
            causal=True,
            x=_with(torch.randn(1, 5, 16), math.inf),
        ),
        ValueError,
        "x holds NaN or infinite values",
    ),  # fmt: skip
    "FoX's bias asked for on its own, of a NaN layer input": (
        lambda: _make("fox", 16, 2).call_hook(
            "score_bias",
            *(_q(h=2),) * 2,
            *(torch.arange(5)[None],) * 2,
            ctx=pl.Context(x=_with(torch.randn(1, 5, 16), math.nan), causal=True),
        ),  # fmt: skip
        ValueError,
        "x holds NaN or infinite values",
    ),
    "LaplacianPE with NaN eigenvectors": (
        lambda: _laplacian_model_with(math.nan),
        ValueError,
        "inputs['eigvecs'] must be finite",
    ),
    "LaplacianPE with inf eigenvectors": (
        lambda: _laplacian_model_with(-math.inf),
        ValueError,
        "inputs['eigvecs'] must be finite",
    ),
}


@pytest.mark.parametrize("case", sorted(CLASSES))
def test_each_class_of_the_review_gets_a_clear_error(case):
    call, error, fragment = CLASSES[case]
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value), f"{case}: {info.value}"


def test_half_precision_keeps_rope_frequencies_exact():
    """After .half() / .to(bfloat16) the frequencies stay float64: position 2000
    rotated in half precision is as close to float32 as the input's own rounding."""
    q = torch.randn(1, 1, 2001, 64)
    pos = torch.arange(2001)[None]
    ref = pl.Rotary(64).transform_qk(q, q, pos, pos)[0][..., -1, :]
    for dtype in (torch.float16, torch.bfloat16):
        rope = pl.Rotary(64).to(dtype)
        assert rope.inv_freq.dtype == torch.float64
        out = rope.transform_qk(q.to(dtype), q.to(dtype), pos, pos)[0][..., -1, :]
        rounding = (q.to(dtype).float() - q).abs().max()
        assert (out.float() - ref).abs().max() < 2 * rounding + 1e-3


def test_negative_positions_are_valid_rotations():
    """Not an error: RoPE at -m rotates by -m theta (finite, and the relative
    property holds across zero)."""
    inv_freq = pl.rope_inv_freq(8)[0]
    q, k = torch.randn(2, 1, 8)  # (n=1, d)

    def s(m, n):
        qm = pl.apply_rope(q, torch.tensor([m]), inv_freq)
        return (qm * pl.apply_rope(k, torch.tensor([n]), inv_freq)).sum()

    torch.testing.assert_close(s(-5, -2), s(3, 6))


@pytest.mark.parametrize("name", ["alibi", "t5", "graphormer", "distance_rbf"])
def test_one_call_gets_one_answer_on_every_path(name):
    """A 4-head table called with 1 or 2 heads: the same refusal from the reference,
    the fused kernel and FlexAttention (not 4 heads, an error and head 0 only; for
    Graphormer and the distance bias: 4 heads on the slow path, head 0 on flex)."""
    pe = _make(name)
    inputs = pe.example_inputs(1, 5) or None
    for h, path in itertools.product((1, 2), ("reference", "fused", "flex")):
        q = torch.randn(1, h, 5, 8)
        with torch.no_grad(), pytest.raises(ValueError, match="built for n_heads=4"):
            pl.attention(q, q, q, pe, path=path, inputs=inputs)


def _pos_callers():
    """The model and the layer take one ``pos``; each way of calling them."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(8, 16, 2, 1, pe="rope")
    mha = pl.MultiHeadAttention(16, 2, "rope")
    coords = pl.TinyTransformer(8, 16, 2, 1, pe="rope_2d")
    tokens, x = torch.zeros(2, 5).long(), torch.randn(2, 5, 16)
    return {
        "model": lambda pos: model(tokens, pos),
        "model, bidirectional": lambda pos: model(tokens, pos, causal=False),
        "layer": lambda pos: mha(x, pos),
        "layer with a cache": lambda pos: mha(x, pos, causal=True, cache=pl.KVCache()),
        "model with a cache": lambda pos: model(tokens, pos, cache=model.new_cache()),
        "coordinates model": lambda pos: coords(tokens, pos),
    }


BAD_POS = {
    "negative": (torch.tensor([[-1, 0, 1, 2, 3]]), ValueError),
    "too short": (torch.arange(4), ValueError),
    "float": (torch.arange(5.0), TypeError),
    "batch of 3": (torch.zeros(3, 5).long(), ValueError),
}


@pytest.mark.parametrize("bad", sorted(BAD_POS))
@pytest.mark.parametrize("caller", sorted(_pos_callers()))
def test_a_caller_who_passed_pos_is_told_about_pos(caller, bad):
    """The model and the layer take ``pos``: their errors name ``pos``, not the
    ``q_pos``/``k_pos`` of the attention function they call."""
    pos, error = BAD_POS[bad]
    if caller == "coordinates model":
        pos = None if bad == "negative" else pos  # coordinates: pos is required
    with pytest.raises((error, ValueError)) as info:
        _pos_callers()[caller](pos)
    message = str(info.value)
    assert "pos" in message and "q_pos" not in message and "k_pos" not in message, (
        f"{caller}, {bad}: {message}"
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(pl.REGISTRY))
def test_an_input_of_another_dtype_than_the_encoding_is_computed_or_named(name, dtype):
    """A float32 encoding called on float64 or bfloat16 q, k, v, x (attention on
    every path it allows, and its input term): the answer in the input's dtype when
    the encoding holds no parameters of another dtype, else a TypeError naming the
    dtype it holds; never torch's "mat1 and mat2 must have the same dtype" from inside
    a hook (21 places before)."""
    pe = _make(name, 32, 4)
    g = torch.Generator().manual_seed(0)
    pos = pe.example_positions(2, 6, generator=g)
    inputs = pe.example_inputs(2, 6, generator=g) or None
    q = torch.randn(2, 4, 6, 8, generator=g).to(dtype)
    x = torch.randn(2, 6, 32, generator=g).to(dtype)
    held = {p.dtype for p in pe.parameters()} - {dtype}
    ctx = pl.Context(x=x, causal=True, inputs=inputs)
    calls = {"encode_input": lambda: pe.call_hook("encode_input", x, pos, ctx=ctx)}
    for path in ("reference",) if pe.needs_score_path else ("reference", "fused"):
        calls[path] = lambda path=path: pl.attention(
            q, q, q, pe, pos, pos, causal=True, inputs=inputs, x=x, path=path
        )
    for what, call in calls.items():
        try:
            with torch.no_grad():
                out = call()
        except TypeError as error:
            message = str(error)
            named = any(f"holds {d}" in message for d in held) or "dtype" in message
            assert held and named, f"{name}, {what}: {message}"
            continue
        assert out.dtype == dtype, f"{name}, {what}: came back in {out.dtype}"


# ---- NaN and shapes in the encodings' public helpers (a probe of every helper that
# takes a float tensor: these passed NaN through, or failed inside broadcasting) -----


NAN = float("nan")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pl.linear_bias(torch.tensor([NAN, 0.5]), torch.arange(4.0)), "slope"),
        (lambda: pl.linear_bias(torch.ones(2), torch.ones(1, 4)), "broadcast"),
        (
            lambda: pl.alibi_bias(torch.tensor([NAN, 0.5]), torch.arange(3)[None],
                                  torch.arange(3)[None]),
            "slopes",
        ),
        (
            lambda: pl.cope_bias(torch.full((1, 1, 3, 4), NAN), torch.zeros(1, 1, 3, 3),
                                 torch.zeros(4, 4)),
            "q holds",
        ),
        (
            lambda: pl.cope_bias(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 3),
                                 torch.full((4, 4), NAN)),
            "pos_emb holds",
        ),
        (lambda: pl.da_sigmoid(torch.tensor([0.0, NAN]), 1.0), "x holds NaN"),
        (lambda: pl.da_sigmoid(torch.zeros(3), NAN), "v holds NaN"),
        (lambda: pl.da_sigmoid(torch.zeros(3), float("inf")), "v must be finite"),
        (lambda: pl.commutator(torch.full((3, 3), NAN), torch.eye(3)), "a holds"),
        (lambda: pl.commutator(torch.eye(3), torch.eye(4)), "one size"),
        (lambda: pl.commutator(torch.ones(3, 2), torch.ones(2, 3)), "square"),
    ],
)  # fmt: skip
def test_helpers_refuse_nan_and_shapes_that_do_not_fit(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_helpers_still_take_what_they_document():
    """Masked logits for CoPE, an infinite x for the DA sigmoid, broadcast slopes."""
    logits = torch.zeros(1, 1, 3, 3).masked_fill(~torch.ones(3, 3).tril().bool(), -1e9)
    assert torch.isfinite(
        pl.cope_bias(torch.ones(1, 1, 3, 4), logits, torch.ones(4, 4))
    ).all()
    torch.testing.assert_close(
        pl.da_sigmoid(torch.tensor([float("inf")]), 0.0), torch.tensor([2.0])
    )
    bias = pl.linear_bias(
        torch.tensor([1.0, 0.5])[:, None, None], torch.arange(3.0)[None]
    )
    assert bias.shape == (2, 1, 3)


# ---- round 5: names, targets, devices ------------------------------------------------


def test_attention_takes_an_encodings_name_as_the_layers_do():
    """``pl.attention(q, k, v, pe="rope")`` raised AttributeError ('str' object has
    no attribute 'scale'); the sizes come from q's shape (h heads of d)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 5, 8)
    by_name = pl.attention(q, k, v, pe="rope", causal=True)
    built = pl.attention(q, k, v, pl.make_encoding("rope", 16, 2), causal=True)
    torch.testing.assert_close(by_name, built)
    # a learned encoding by name would be a new random table at every call
    with pytest.raises(TypeError, match="learned parameters"):
        pl.attention(q, k, v, pe="t5")
    with pytest.raises(KeyError, match="not a registered encoding"):
        pl.attention(q, k, v, pe="ropes")
    with pytest.raises(TypeError, match="pe must be a PositionalEncoding"):
        pl.attention(q, k, v, pe=3)


@pytest.mark.parametrize(
    "bad, says",
    [
        (-1, r"targets must lie in \[0, 11\) or be -100"),
        (11, r"targets must lie in \[0, 11\) or be -100"),
    ],
)
def test_accuracy_and_evaluate_refuse_the_same_targets(bad, says):
    """-1 padding or an id outside the vocabulary: ``pl.accuracy`` counted it as a
    wrong prediction (a silent, lower score) while ``pl.evaluate`` raised PyTorch's
    "Target -1 is out of bounds"; both now refuse it with one message."""
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, 16, 2, 1)
    tokens = torch.randint(0, 11, (2, 5))
    targets = tokens.roll(-1, 1)
    targets[0, -1] = -100  # ignored, as documented
    assert 0 <= pl.accuracy(model, (tokens, targets)) <= 1
    assert pl.evaluate(model, (tokens, targets)) > 0
    targets[1, 2] = bad
    for helper in (pl.accuracy, pl.evaluate):
        with pytest.raises(ValueError, match=says):
            helper(model, (tokens, targets))
    for wrong, message in [
        (targets.float(), "targets must be an integer tensor"),
        (targets[:, :4], r"targets must have tokens' shape \(2, 5\)"),
    ]:
        for helper in (
            pl.accuracy,
            pl.evaluate,
            lambda m, b: pl.train(m, lambda s: b, 1),
        ):
            with pytest.raises((TypeError, ValueError), match=message):
                helper(model, (tokens, wrong))


@pytest.mark.parametrize("device", ["gpu", "cuda:x", 3.5])
def test_a_wrong_device_is_named_where_it_enters(device):
    """A device string torch cannot read ("gpu", "cuda:x") or a device of another
    type: PyTorch's "Expected one of cpu, cuda, ipu, xpu, ... device type" or
    "arange() received an invalid combination of arguments" came from deep inside
    each helper that takes a device; now one check names the argument."""
    model = pl.TinyTransformer(11, 16, 2, 1)
    batch = (torch.randint(0, 11, (1, 4)), torch.randint(0, 11, (1, 4)))
    calls = {
        "get_device": lambda: pl.get_device(device),
        "evaluate": lambda: pl.evaluate(model, batch, device=device),
        "accuracy": lambda: pl.accuracy(model, batch, device=device),
        "train": lambda: pl.train(model, lambda s: batch, 1, device=device),
        "as_positions": lambda: pl.as_positions(None, 1, 4, device=device),
        "prepare": lambda: pl.prepare(pl.PositionalEncoding(), 1, 1, 4, 4,
                                      device=device),
    }  # fmt: skip
    for name, call in calls.items():
        with pytest.raises((TypeError, ValueError), match="must be a device") as info:
            call()
        assert "'cpu', 'cuda'" in str(info.value), (name, info.value)


def _freq8():
    return pl.rope_inv_freq(8)[0]


def _coords3():
    return torch.zeros(3, 3, dtype=torch.long)


def _unit(w):
    return torch.nn.functional.normalize(w, dim=-1)


# Round 5's sweep of the public helpers with wrong types and shapes (a list or an
# array where a tensor is expected, one axis too few, another dtype, a negative
# size): each answered with a raw framework error (AttributeError "'list' object
# has no attribute 'dim'", IndexError, RuntimeError) from inside the helper.
RAW_ROUND_5 = {
    "alibi_bias on list positions": (
        lambda: pl.alibi_bias(pl.alibi_slopes(2), [[0, 1, 2]], torch.arange(3)[None]),
        "q_pos must be a torch.Tensor",
    ),
    "alibi_bias on array positions": (
        lambda: pl.alibi_bias(pl.alibi_slopes(2), torch.arange(3)[None],
                              torch.arange(3)[None].numpy()),
        "k_pos must be a torch.Tensor",
    ),
    "augment_coords on a list": (
        lambda: pl.augment_coords([[0.0, 1.0]], shift=0.1),
        "coords must be a torch.Tensor",
    ),
    "apply_mrope with list frequencies": (
        lambda: pl.apply_mrope(torch.randn(1, 1, 3, 8), _coords3(), _freq8().tolist(),
                               pl.mrope_axes([2, 1, 1])),
        "inv_freq must be a torch.Tensor",
    ),
    "apply_mrope with float axes": (
        lambda: pl.apply_mrope(torch.randn(1, 1, 3, 8), _coords3(), _freq8(),
                               pl.mrope_axes([2, 1, 1]).float()),
        "axes must hold integer",
    ),
    "path_attention with integer v": (
        lambda: pl.path_attention(*torch.randn(3, 1, 1, 4, 4)[:2],
                                  torch.ones(1, 1, 4, 4, dtype=torch.long),
                                  _unit(torch.randn(1, 1, 4, 4)), torch.rand(1, 1, 4)),
        "v must have q's dtype",
    ),
    "rope_cos_sin on list positions": (
        lambda: pl.rope_cos_sin([0, 1, 2], _freq8()),
        "positions must be a torch.Tensor",
    ),
    "rope_cos_sin on a 0-d position": (
        lambda: pl.rope_cos_sin(torch.tensor(3), _freq8()),
        "positions must have at least one axis",
    ),
    "rope_cos_sin with list frequencies": (
        lambda: pl.rope_cos_sin(torch.arange(3), _freq8().tolist()),
        "inv_freq must be a torch.Tensor",
    ),
    "rotary_angles with list frequencies": (
        lambda: pl.rotary_angles(torch.zeros(1, 3, 2, dtype=torch.long),
                                 pl.axial_frequencies(8).tolist()),
        "freqs must be a torch.Tensor",
    ),
    "apply_rotary_angles on a list": (
        lambda: pl.apply_rotary_angles(torch.randn(1, 1, 4, 8).tolist(),
                                       torch.zeros(4, 4)),
        "x must be a torch.Tensor",
    ),
    "apply_rotary_angles with list angles": (
        lambda: pl.apply_rotary_angles(torch.randn(1, 1, 4, 8),
                                       torch.zeros(4, 4).tolist()),
        "angles must be a torch.Tensor",
    ),
    "relative_index_2d on 1-D positions": (
        lambda: pl.relative_index_2d(torch.arange(4), torch.arange(4), 4, 4),
        "q_pos must be (row, column) coordinates",
    ),
    "relative_index_2d on float coordinates (float indices, silently)": (
        lambda: pl.relative_index_2d(torch.zeros(4, 2), torch.zeros(4, 2), 4, 4),
        "q_pos must hold integer",
    ),
    "Shaw's score_bias on a 3-D q": (
        lambda: pl.Shaw(8).score_bias(torch.randn(2, 4, 8), torch.randn(2, 4, 8),
                                      torch.arange(4)[None], torch.arange(4)[None]),
        "q must have shape (b, h, i, d)",
    ),
    "HuangMethod3's score_bias on a 3-D q": (
        lambda: pl.HuangMethod3(4, 8).score_bias(
            torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.arange(4)[None],
            torch.arange(4)[None]),
        "q must have shape (b, h, i, d)",
    ),
    "as_positions with a negative batch": (
        lambda: pl.as_positions(None, -2, 4),
        "b must be >= 0",
    ),
    "copy_offset_batch with a negative batch": (
        lambda: pl.copy_offset_batch(-3, 6, 2, 5, torch.Generator().manual_seed(0)),
        "batch must be > 0",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(RAW_ROUND_5))
def test_wrong_types_and_shapes_are_named_not_raw(case):
    call, fragment = RAW_ROUND_5[case]
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert fragment in str(info.value), f"{case}: {info.value}"


# the rest of the sweep: the course's and the decoding helpers
RAW_ROUND_5_HELPERS = {
    "heatmap of a 3-D list": (lambda: pl.heatmap([[[1.0]]]), "2-D matrix"),
    "color_for of a number": (lambda: pl.color_for(3), "name must be a string"),
    "spec_inv_freq of a name": (
        lambda: pl.spec_inv_freq("llama"),
        "spec must be a RopeSpec",
    ),
    "forward_with_cache without a model": (
        lambda: pl.forward_with_cache(None, torch.zeros(1, 2, dtype=torch.long),
                                      None, torch.ones(1, 2)),
        "model must be a TinyTransformer",
    ),
    "forward_with_cache on list tokens": (
        lambda: pl.forward_with_cache(pl.TinyTransformer(5, 8, 2, 1, pe=pl.Rotary(4)),
                                      [[1, 2]], None, torch.ones(1, 2)),
        "tokens must be a torch.Tensor",
    ),
    "CharCorpus of a number": (lambda: pl.CharCorpus(3), "text must be a string"),
    "positions_from_mask of a list": (
        lambda: pl.positions_from_mask([[1, 1, 0]]),
        "attention_mask must be a torch.Tensor",
    ),
    "interleaved_to_half of a list": (
        lambda: pl.interleaved_to_half([[1.0] * 8] * 8, 2),
        "tensor, got a list",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(RAW_ROUND_5_HELPERS))
def test_the_helpers_name_wrong_types_too(case):
    call, fragment = RAW_ROUND_5_HELPERS[case]
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert fragment in str(info.value), f"{case}: {info.value}"


def test_heatmap_takes_a_nested_list_or_an_array():
    import matplotlib.pyplot as plt

    ax = pl.heatmap([[0.0, 1.0], [1.0, 0.0]])
    pl.heatmap(np.eye(3), ax=ax)
    plt.close("all")

"""The attention core: properties first, then golden numbers, then bad input."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.base import overrides


def qkv(b=2, h=3, i=5, j=5, d=8, dtype=torch.float64):
    return (
        torch.randn(b, h, i, d, dtype=dtype),
        torch.randn(b, h, j, d, dtype=dtype),
        torch.randn(b, h, j, d, dtype=dtype),
    )


# ---- properties ----------------------------------------------------------------------


def test_attention_without_pe_is_permutation_equivariant():
    mha = pl.MultiHeadAttention(16, 4).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    perm = torch.randperm(7)
    assert_close(mha(x)[:, perm], mha(x[:, perm]), rtol=1e-12, atol=1e-12)


def test_model_without_pe_is_permutation_equivariant_but_causal_is_not():
    model = pl.TinyTransformer(11, d_model=16, n_heads=2).double()
    tokens = torch.randint(11, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert_close(
        model(tokens, causal=False)[:, perm],
        model(tokens[:, perm], causal=False),
        rtol=1e-12,
        atol=1e-12,
    )
    assert not torch.allclose(
        model(tokens, causal=True)[:, perm], model(tokens[:, perm], causal=True)
    )


def test_sinusoidal_breaks_permutation_equivariance():
    model = pl.TinyTransformer(11, d_model=16, n_heads=2, pe=pl.Sinusoidal(16)).double()
    tokens = torch.randint(11, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    diff = (
        (model(tokens, causal=False)[:, perm] - model(tokens[:, perm], causal=False))
        .abs()
        .max()
    )
    assert diff > 1e-3


def test_causal_attention_ignores_the_future():
    q, k, v = qkv()
    out = pl.attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3:] += 10.0
    v2[:, :, 3:] -= 5.0
    assert_close(pl.attention(q, k2, v2, causal=True)[:, :, :3], out[:, :, :3])


def test_shorter_query_block_matches_the_tail_of_the_full_attention():
    """A KV cache: the last 2 queries against all 5 keys equal rows 3, 4 of the full
    result."""
    q, k, v = qkv(i=5, j=5)
    full = pl.attention(q, k, v, causal=True)
    tail = pl.attention(q[:, :, 3:], k, v, causal=True)
    assert_close(tail, full[:, :, 3:])


@pytest.mark.parametrize("causal", [False, True])
def test_fast_and_slow_paths_agree(causal):
    q, k, v = qkv(i=4, j=6)
    assert_close(
        pl.attention(q, k, v, causal=causal, path="fused"),
        pl.attention(q, k, v, causal=causal, path="reference"),
    )


def test_weights_are_a_distribution_and_respect_the_mask():
    q, k, v = qkv()
    _, w = pl.attention(q, k, v, causal=True, return_weights=True)
    assert_close(w.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64))
    assert (w.triu(1) == 0).all()


# ---- golden numbers ------------------------------------------------------------------


def test_golden_two_token_example():
    """Worked by hand: q = (1, 0), keys (1, 0) and (0, 1), d = 2, so scores
    (1, 0)/sqrt 2."""
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[10.0], [20.0]]]], dtype=torch.float64)
    a = 1 / (1 + math.exp(-1 / math.sqrt(2)))  # softmax((1, 0)/sqrt 2)[0]
    out, w = pl.attention(q, k, v, q_pos=torch.tensor([1]), return_weights=True)
    assert_close(w.flatten(), torch.tensor([a, 1 - a], dtype=torch.float64))
    assert_close(
        out.flatten(), torch.tensor([10 * a + 20 * (1 - a)], dtype=torch.float64)
    )


def test_parity_with_a_plain_reference_implementation():
    """Independent implementation: softmax(Q K^T / sqrt(d) + causal mask) V, written
    with matmul."""
    q, k, v = qkv(i=6, j=6)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(
        torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf")
    )
    assert_close(pl.attention(q, k, v, causal=True), scores.softmax(-1) @ v)


# ---- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=16, n_heads=0), "n_heads must be > 0"),
        (dict(d_model=16, n_heads=-2), "n_heads must be > 0"),
        (dict(d_model=16, n_heads=3), "divisible by n_heads"),
        (dict(d_model=0, n_heads=1), "d_model must be > 0"),
        (dict(d_model=16, n_heads=2.0), "n_heads must be an int"),
    ],
)
def test_bad_module_arguments_name_the_argument(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        pl.MultiHeadAttention(**kwargs)


def test_bad_attention_inputs_name_the_argument():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="k must have shape"):
        pl.attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="v must have shape"):
        pl.attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="4-D"):
        pl.attention(q[0], k[0], v[0])
    with pytest.raises(TypeError, match="q_pos must hold integer positions"):
        pl.attention(q, k, v, q_pos=torch.arange(5.0))
    with pytest.raises(ValueError, match="q_pos must have shape"):
        pl.attention(q, k, v, q_pos=torch.arange(4))
    with pytest.raises(ValueError, match="k_pos must be >= 0"):
        pl.attention(q, k, v, k_pos=torch.arange(-1, 4))
    with pytest.raises(ValueError, match="no key to attend to"):
        pl.attention(q, k, v, mask=torch.zeros(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="must not outnumber"):
        pl.attention(q, k[:, :, :2], v[:, :, :2])
    with pytest.raises(ValueError, match="path must be"):
        pl.attention(q, k, v, path="bogus")
    mha = pl.MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"x must have shape \(b, n, 16\)"):
        mha(torch.randn(2, 5, 12))


def test_model_rejects_tokens_outside_the_vocabulary():
    model = pl.TinyTransformer(5, d_model=8, n_heads=2)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 5\)"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.randn(1, 3))


# ---- the hook order ------------------------------------------------------------------


class Recorder(pl.PositionalEncoding):
    """Overrides every hook; records the order they are called in and checks what each
    receives."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def transform_qk(self, q, k, q_pos, k_pos):
        self.calls.append("transform_qk")
        return 2 * q, k

    def transform_v(self, v, k_pos):
        self.calls.append("transform_v")
        return 3 * v

    def score_bias(self, q, k, q_pos, k_pos):
        self.calls.append("score_bias")
        return (k_pos[:, None, None, :] - q_pos[:, None, :, None]).to(
            q.dtype
        )  # (b, 1, i, j)

    def transform_scores(self, scores, q_pos, k_pos):
        self.calls.append("transform_scores")
        return scores * 0.5

    def attention_weights(self, scores, mask):
        self.calls.append("attention_weights")
        return super().attention_weights(scores, mask)

    def value_bias(self, weights, q_pos, k_pos):
        self.calls.append("value_bias")
        return weights.sum(-1, keepdim=True)  # (b, h, i, 1) == 1

    def transform_out(self, out, q_pos):
        self.calls.append("transform_out")
        return 2 * out


def test_hooks_are_called_in_the_fixed_order_and_compose_as_documented():
    q, k, v = qkv(i=4, j=4)
    pe = Recorder()
    assert pe.needs_score_path
    out = pl.attention(q, k, v, pe, causal=True)
    assert pe.calls == [
        "transform_qk",
        "transform_v",
        "score_bias",
        "transform_scores",
        "attention_weights",
        "value_bias",
        "transform_out",
    ]
    assert tuple(pe.calls) == pl.HOOKS[1:]  # every hook past encode_input, in order
    rel = (torch.arange(4)[None, :] - torch.arange(4)[:, None]).double()
    scores = (0.5 * ((2 * q) @ k.transpose(-1, -2) / math.sqrt(8) + rel)).masked_fill(
        torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")
    )
    # transform_out last: 2 (sum_j a_ij (3 v_j) + 1), not 2 sum_j a_ij (3 v_j) + 1
    assert_close(out, 2 * (scores.softmax(-1) @ (3 * v) + 1.0))
    with pytest.raises(ValueError, match="path='fused' cannot be used"):
        pl.attention(q, k, v, pe, path="fused")


def test_score_bias_only_encodings_take_the_fast_path_with_the_same_result():
    class Bias(pl.PositionalEncoding):
        def score_bias(self, q, k, q_pos, k_pos):
            return -0.3 * (q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(
                q.dtype
            )

    assert not Bias().needs_score_path
    q, k, v = qkv(i=3, j=6)
    for causal in (False, True):
        assert_close(
            pl.attention(q, k, v, Bias(), causal=causal, path="fused"),
            pl.attention(q, k, v, Bias(), causal=causal, path="reference"),
        )


# ---- the context, side inputs and coordinates (the interface of Parts IV and V) ------


class _GateFromInput(pl.PositionalEncoding):
    """A toy data-dependent bias: key j gets w . x_j (reads the layer input)."""

    def __init__(self, d_model):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d_model))

    def score_bias(self, q, k, q_pos, k_pos, *, ctx):
        x = ctx.need("x", "_GateFromInput")
        return torch.einsum("bjD,D->bj", x, self.w)[:, None, None, :]


class _PairwiseBias(pl.PositionalEncoding):
    """A toy structural bias read from a pairwise side input ``dist`` (b, n, n)."""

    side_inputs = {"dist": "(b, n, n) integer distances"}

    def score_bias(self, q, k, q_pos, k_pos, ctx):
        return -ctx.inputs["dist"][:, None].to(q.dtype)


class _GridBias(pl.PositionalEncoding):
    """A toy 2-D encoding: bias -|d row| - |d col| from (b, n, 2) coordinates."""

    coord_axes = 2

    def score_bias(self, q, k, q_pos, k_pos):
        rel = (q_pos[:, :, None] - k_pos[:, None, :]).abs().sum(-1)  # (b, i, j)
        return -rel[:, None].to(q.dtype)


class _Spy(pl.PositionalEncoding):
    """Records the context every hook receives."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def transform_scores(self, scores, q_pos, k_pos, ctx=None):
        self.seen["transform_scores"] = ctx
        return scores

    def value_bias(self, weights, q_pos, k_pos, ctx=None):
        self.seen["value_bias"] = ctx
        return None


def test_hooks_without_ctx_are_called_as_before_and_with_ctx_get_it():
    """Behaviour, not the bookkeeping: a hook whose signature has no ``ctx`` is called
    without it (it would raise TypeError otherwise); one with ``ctx`` receives the
    call's Context, as a keyword-only or an ordinary parameter."""
    q, k, v = qkv(i=4, j=4)
    coords = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    for path in ("reference", "fused"):
        out = pl.attention(q, k, v, _GridBias(), q_pos=coords, k_pos=coords, path=path)
        assert out.shape == v.shape
        spy = _Spy()
        pl.attention(q, k, v, spy, path="reference")
        assert set(spy.seen) == {"transform_scores", "value_bias"}
        assert all(isinstance(c, pl.Context) for c in spy.seen.values())
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    gate = _GateFromInput(6).double()  # an encoding's parameters have q's dtype
    with_x = pl.attention(q, k, v, gate, x=x)
    plain = pl.attention(q, k, v, pl.NoPE())
    assert not torch.allclose(with_x, plain)  # the gate read x through ctx
    with pytest.raises(ValueError, match="_GateFromInput"):
        pl.attention(q, k, v, gate)  # no x: ctx.need names the encoding


def test_context_carries_x_v_the_combined_mask_and_inputs():
    spy = _Spy()
    q, k, v = qkv(i=4, j=4)
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    user = torch.tensor([True, True, False, True])
    pl.attention(q, k, v, spy, causal=True, mask=user, x=x, inputs={"z": x})
    ctx = spy.seen["value_bias"]
    assert ctx.x is x and ctx.v is v and ctx.causal and ctx.inputs["z"] is x
    expected = torch.ones(4, 4, dtype=torch.bool).tril() & user
    assert torch.equal(ctx.mask.expand(2, 1, 4, 4), expected.expand(2, 1, 4, 4))


def test_a_data_dependent_bias_reads_the_layer_input_on_both_paths():
    torch.manual_seed(0)
    mha = pl.MultiHeadAttention(8, 2, _GateFromInput(8)).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    fast = mha(x, causal=True, path="fused")
    assert_close(fast, mha(x, causal=True, path="reference"))
    x2 = x.clone()
    x2[:, 0] += 1.0  # a change to token 0 changes the bias every later query sees
    assert not torch.allclose(mha(x2, causal=True)[:, 1:], fast[:, 1:])


def test_attention_without_x_tells_the_encoding_that_reads_it():
    q, k, v = qkv(b=1, h=2, d=4)
    with pytest.raises(ValueError, match="_GateFromInput reads ctx.x, which this call"):
        pl.attention(q, k, v, _GateFromInput(8).double())


def test_a_pairwise_side_input_reaches_the_hooks_and_is_required():
    torch.manual_seed(0)
    model = pl.TinyTransformer(7, d_model=8, n_heads=2, pe=_PairwiseBias()).double()
    tokens = torch.randint(7, (2, 5))
    dist = torch.randint(0, 4, (2, 5, 5))
    out = model(tokens, causal=False, inputs={"dist": dist})
    assert out.shape == (2, 5, 7)
    assert not torch.allclose(
        out, model(tokens, causal=False, inputs={"dist": 0 * dist})
    )
    with pytest.raises(ValueError, match=r"needs the side input\(s\) \['dist'\]"):
        model(tokens, causal=False)


def test_coordinates_reach_the_hooks_and_causal_follows_token_order():
    q, k, v = qkv(b=1, h=2, i=6, j=6)
    grid = torch.tensor(
        [[r, c] for r in range(2) for c in range(3)]
    )  # (6, 2) row-major
    out = pl.attention(q, k, v, _GridBias(), grid, grid, causal=True)
    # by hand: bias -(|dr| + |dc|), token order causal
    bias = -(grid[:, None] - grid[None]).abs().sum(-1).double()
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(8) + bias
    scores = scores.masked_fill(
        ~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf")
    )
    assert_close(out, scores.softmax(-1) @ v)


def test_coordinate_positions_are_checked():
    q, k, v = qkv(b=1, h=2, i=4, j=4)
    with pytest.raises(ValueError, match=r"k_pos is required: this encoding reads 2"):
        pl.attention(q, k, v, _GridBias())
    with pytest.raises(
        ValueError, match=r"k_pos must have shape \(4, 2\) or \(1, 4, 2\)"
    ):
        pl.attention(
            q, k, v, _GridBias(), torch.zeros(4, 2).long(), torch.zeros(4, 3).long()
        )
    with pytest.raises(ValueError, match=r"q_pos must have shape \(4,\) or \(1, 4\)"):
        pl.attention(q, k, v, None, torch.zeros(4, 2).long(), torch.arange(4))


def test_bad_tensors_and_masks_name_the_argument():
    q, k, v = qkv(b=1, h=2, i=4, j=4)
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        pl.attention(q.long(), k, v)
    with pytest.raises(
        ValueError, match=r"mask must be broadcastable to \(b, h, i, j\)"
    ):
        pl.attention(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))


@pytest.mark.parametrize("path", ["fused", "reference"])
@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_inputs_are_refused_the_same_way_on_every_path(path, name, value):
    """The fused kernel turns a NaN query into zeros where explicit scores give NaN:
    rather than two different silent answers, both paths refuse it."""
    tensors = dict(zip("qkv", qkv()))
    tensors[name][0, 1, 2, 3] = value
    with pytest.raises(ValueError, match=f"{name} holds NaN or infinite values"):
        pl.attention(**tensors, causal=True, path=path)


def test_scores_that_would_overflow_are_refused_not_zeroed():
    """Finite q and k whose product overflows float32: the fused kernel returned
    all-zero rows (1.95 from a float64 reference) and the explicit path NaN. Now
    refused at the boundary, with the bound that was exceeded."""
    q, k, v = (t.float() for t in qkv())
    assert torch.isfinite(pl.attention(q * 0 + 1, k, v)).all()
    for path in ("fused", "reference"):
        with pytest.raises(ValueError, match="q.k may overflow torch.float32"):
            pl.attention(q * 1e20, k * 1e20, v, path=path)


def test_half_precision_scores_are_computed_in_float32_on_the_explicit_path():
    """|q|.|k| ~ 9e4 overflows float16 (max 65504): the explicit path gave 56 of 64
    NaN where the fused kernel, which scores in float32, was finite. Both now agree
    with a float64 reference."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    q = q / q.norm(dim=-1, keepdim=True) * 300.0
    k = k / k.norm(dim=-1, keepdim=True) * 300.0 * 8**0.5  # q.k*scale up to 9e4
    ref = pl.attention(q.double(), k.double(), v.double(), causal=True)
    for path in ("reference", "fused"):
        out = pl.attention(q.half(), k.half(), v.half(), causal=True, path=path)
        assert torch.isfinite(out).all(), path
        assert_close(out.double(), ref, atol=2e-2, rtol=0)


def test_integer_tensors_and_bad_masks_are_still_clear_errors():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        pl.attention(q.long(), k, v)
    with pytest.raises(ValueError, match="mask must be broadcastable"):
        pl.attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool), path="fused")
    with pytest.raises(ValueError, match="path must be one of"):
        pl.attention(q, k, v, path="sdpa")


# ---- no silent no-ops: what pe= accepts, and where an input term goes ----


def test_pe_takes_a_registered_name_built_with_the_layers_sizes():
    torch.manual_seed(0)
    by_name = pl.MultiHeadAttention(64, 4, pe="rope")
    assert isinstance(by_name.pe, pl.RoPE) and by_name.pe.d_head == 16
    by_object = pl.MultiHeadAttention(64, 4, pe=pl.make_encoding("rope", 64, 4))
    by_object.load_state_dict(by_name.state_dict())
    x = torch.randn(2, 7, 64)
    assert_close(by_name(x, causal=True), by_object(x, causal=True))
    model = pl.TinyTransformer(20, 64, 4, 2, pe="alibi")
    assert isinstance(model.pe, pl.ALiBi) and model(torch.zeros(1, 5).long()).shape
    hybrid = pl.TinyTransformer(20, 64, 4, 2, pe=["rope", "nope"])
    assert [type(b.attn.pe).__name__ for b in hybrid.blocks] == ["Rotary", "NoPE"]


@pytest.mark.parametrize(
    "pe, error, says",
    [
        ("rope2", KeyError, "not a registered encoding"),
        ("learned", TypeError, "max_len"),
        (3, TypeError, "PositionalEncoding, a registered name"),
        (pl.RoPE, TypeError, "PositionalEncoding, a registered name"),
    ],
)
def test_pe_refuses_anything_else_at_construction(pe, error, says):
    with pytest.raises(error, match=says):
        pl.MultiHeadAttention(64, 4, pe=pe)
    with pytest.raises(error, match=says):
        pl.TinyTransformer(20, 64, 4, 2, pe=pe)


INPUT_ENCODINGS = sorted(
    name
    for name in pl.REGISTRY
    if overrides(pl.make_encoding(name, 32, 4, max_len=64), "encode_input")
)


def test_some_encodings_add_an_input_term():
    assert {"sinusoidal", "learned", "axial"} <= set(INPUT_ENCODINGS)


@pytest.mark.parametrize("name", INPUT_ENCODINGS)
def test_a_lone_layer_refuses_an_input_encoding_and_says_where_it_goes(name):
    """A layer never adds an input term (it acts on the embeddings): such an encoding
    used to be accepted and ignored, the layer then equal to NoPE."""
    pe = pl.make_encoding(name, 32, 4, max_len=64)
    with pytest.raises(ValueError, match=r"encode_input.*input_encoded=True.*Tiny"):
        pl.MultiHeadAttention(32, 4, pe=pe)
    layer = pl.MultiHeadAttention(32, 4, pe=pe, input_encoded=True)
    assert layer.pe is pe
    model = pl.TinyTransformer(20, 32, 4, 1, pe=pe)  # the model adds it, once
    assert model.pe is pe

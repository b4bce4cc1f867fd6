"""The attention core: properties first, then golden numbers, then bad input."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def qkv(b=2, h=3, i=5, j=5, d=8, dtype=torch.float64):
    return (torch.randn(b, h, i, d, dtype=dtype), torch.randn(b, h, j, d, dtype=dtype),
            torch.randn(b, h, j, d, dtype=dtype))


# ---- properties -------------------------------------------------------------------------

def test_attention_without_pe_is_permutation_equivariant():
    mha = pl.MultiHeadAttention(16, 4).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    perm = torch.randperm(7)
    assert_close(mha(x)[:, perm], mha(x[:, perm]), rtol=1e-12, atol=1e-12)


def test_model_without_pe_is_permutation_equivariant_but_causal_is_not():
    model = pl.TinyTransformer(11, d_model=16, n_heads=2).double()
    tokens = torch.randint(11, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert_close(model(tokens, causal=False)[:, perm], model(tokens[:, perm], causal=False), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(model(tokens, causal=True)[:, perm], model(tokens[:, perm], causal=True))


def test_sinusoidal_breaks_permutation_equivariance():
    model = pl.TinyTransformer(11, d_model=16, n_heads=2, pe=pl.Sinusoidal(16)).double()
    tokens = torch.randint(11, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    diff = (model(tokens, causal=False)[:, perm] - model(tokens[:, perm], causal=False)).abs().max()
    assert diff > 1e-3


def test_causal_attention_ignores_the_future():
    q, k, v = qkv()
    out = pl.attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3:] += 10.0
    v2[:, :, 3:] -= 5.0
    assert_close(pl.attention(q, k2, v2, causal=True)[:, :, :3], out[:, :, :3])


def test_shorter_query_block_matches_the_tail_of_the_full_attention():
    """A KV cache: the last 2 queries against all 5 keys equal rows 3, 4 of the full result."""
    q, k, v = qkv(i=5, j=5)
    full = pl.attention(q, k, v, causal=True)
    tail = pl.attention(q[:, :, 3:], k, v, causal=True)
    assert_close(tail, full[:, :, 3:])


@pytest.mark.parametrize("causal", [False, True])
def test_fast_and_slow_paths_agree(causal):
    q, k, v = qkv(i=4, j=6)
    assert_close(pl.attention(q, k, v, causal=causal, path="fast"), pl.attention(q, k, v, causal=causal, path="slow"))


def test_weights_are_a_distribution_and_respect_the_mask():
    q, k, v = qkv()
    _, w = pl.attention(q, k, v, causal=True, return_weights=True)
    assert_close(w.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64))
    assert (w.triu(1) == 0).all()


# ---- golden numbers ---------------------------------------------------------------------

def test_golden_two_token_example():
    """Worked by hand: q = (1, 0), keys (1, 0) and (0, 1), d = 2, so scores (1, 0)/sqrt 2."""
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[10.0], [20.0]]]], dtype=torch.float64)
    a = 1 / (1 + math.exp(-1 / math.sqrt(2)))          # softmax((1, 0)/sqrt 2)[0]
    out, w = pl.attention(q, k, v, q_pos=torch.tensor([1]), return_weights=True)
    assert_close(w.flatten(), torch.tensor([a, 1 - a], dtype=torch.float64))
    assert_close(out.flatten(), torch.tensor([10 * a + 20 * (1 - a)], dtype=torch.float64))


def test_parity_with_a_plain_reference_implementation():
    """Independent implementation: softmax(Q K^T / sqrt(d) + causal mask) V written with matmul."""
    q, k, v = qkv(i=6, j=6)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(pl.attention(q, k, v, causal=True), scores.softmax(-1) @ v)


# ---- bad input --------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=16, n_heads=0), "n_heads must be > 0"),
    (dict(d_model=16, n_heads=-2), "n_heads must be > 0"),
    (dict(d_model=16, n_heads=3), "divisible by n_heads"),
    (dict(d_model=0, n_heads=1), "d_model must be > 0"),
    (dict(d_model=16, n_heads=2.0), "n_heads must be an int"),
])
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
        pl.attention(q, k, v, path="fused")
    mha = pl.MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"x must have shape \(b, n, 16\)"):
        mha(torch.randn(2, 5, 12))


def test_model_rejects_tokens_outside_the_vocabulary():
    model = pl.TinyTransformer(5, d_model=8, n_heads=2)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 5\)"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.randn(1, 3))


# ---- the hook order --------------------------------------------------------------------

class Recorder(pl.PositionalEncoding):
    """Overrides every hook; records the order they are called in and checks what each receives."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def transform_qk(self, q, k, q_pos, k_pos):
        self.calls.append("transform_qk")
        return 2 * q, k

    def score_bias(self, q, k, q_pos, k_pos):
        self.calls.append("score_bias")
        return (k_pos[:, None, None, :] - q_pos[:, None, :, None]).to(q.dtype)     # (b, 1, i, j)

    def transform_scores(self, scores, q_pos, k_pos):
        self.calls.append("transform_scores")
        return scores * 0.5

    def attention_weights(self, scores, mask):
        self.calls.append("attention_weights")
        return super().attention_weights(scores, mask)

    def value_bias(self, weights, q_pos, k_pos):
        self.calls.append("value_bias")
        return weights.sum(-1, keepdim=True)                                     # (b, h, i, 1) == 1


def test_hooks_are_called_in_the_fixed_order_and_compose_as_documented():
    q, k, v = qkv(i=4, j=4)
    pe = Recorder()
    assert pe.needs_score_path
    out = pl.attention(q, k, v, pe, causal=True)
    assert pe.calls == ["transform_qk", "score_bias", "transform_scores", "attention_weights", "value_bias"]
    rel = (torch.arange(4)[None, :] - torch.arange(4)[:, None]).double()
    scores = (0.5 * ((2 * q) @ k.transpose(-1, -2) / math.sqrt(8) + rel)).masked_fill(
        torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(out, scores.softmax(-1) @ v + 1.0)
    with pytest.raises(ValueError, match="path='fast' cannot be used"):
        pl.attention(q, k, v, pe, path="fast")


def test_score_bias_only_encodings_take_the_fast_path_with_the_same_result():
    class Bias(pl.PositionalEncoding):
        def score_bias(self, q, k, q_pos, k_pos):
            return -0.3 * (q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(q.dtype)

    assert not Bias().needs_score_path
    q, k, v = qkv(i=3, j=6)
    for causal in (False, True):
        assert_close(pl.attention(q, k, v, Bias(), causal=causal, path="fast"),
                     pl.attention(q, k, v, Bias(), causal=causal, path="slow"))

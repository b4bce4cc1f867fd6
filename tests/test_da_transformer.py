"""DA-Transformer: the learnable sigmoid's five properties, the score formula, per-head
behaviour."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def reference_f(x, v):
    """Independent implementation: the paper's formula, one Python float at a time."""
    return (1 + math.exp(v)) / (1 + math.exp(v - x))


@pytest.mark.parametrize("v", [-2.0, -1.0, 0.0, 0.5, 1.0, 3.0])
def test_sigmoid_matches_the_formula_and_its_five_properties(v):
    x = torch.linspace(-8, 8, 81, dtype=torch.float64)
    f = pl.da_sigmoid(x, v)
    assert_close(
        f, torch.tensor([reference_f(float(t), v) for t in x], dtype=torch.float64)
    )
    assert_close(
        pl.da_sigmoid(torch.tensor(0.0, dtype=torch.float64), v),
        torch.tensor(1.0, dtype=torch.float64),
    )  # 1
    assert pl.da_sigmoid(torch.tensor(-60.0, dtype=torch.float64), v) < 1e-20  # 2
    top = pl.da_sigmoid(torch.tensor(60.0, dtype=torch.float64), v)
    assert_close(top, torch.tensor(1 + math.exp(v), dtype=torch.float64)) and (
        f < 1 + math.exp(v)
    ).all()  # 3, 4
    assert (f.diff() > 0).all()  # 5


def test_sigmoid_is_stable_for_large_arguments():
    f = pl.da_sigmoid(torch.tensor([-1e4, 0.0, 1e4]), torch.tensor(50.0))
    assert torch.isfinite(f).all() and f[0] == 0 and f[1] == 1


def test_scores_match_the_formula():
    pe = pl.DATransformer(3).double()
    with torch.no_grad():
        pe.w.copy_(torch.tensor([-1.0, 0.3, 2.0]))
        pe.v.copy_(torch.tensor([1.0, -1.0, 0.0]))
    q, k, v = (torch.randn(1, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(6)[None] + 9
    _, weights = pl.attention(q, k, v, pe, pos, pos, return_weights=True)
    omega = torch.empty(3, 6, 6, dtype=torch.float64)
    for h in range(3):
        for i in range(6):
            for j in range(6):
                r_hat = reference_f(
                    float(pe.w[h].detach()) * abs(i - j), float(pe.v[h].detach())
                )
                omega[h, i, j] = (
                    max(float(q[0, h, i] @ k[0, h, j]), 0.0) * r_hat / 2.0
                )  # / sqrt(4)
    assert_close(weights[0], omega.softmax(-1))


def test_starts_as_relu_attention_and_coefficients_are_symmetric_per_head():
    pe = pl.make_encoding("da_transformer", d_model=16, n_heads=4, max_len=8).double()
    pos = torch.arange(7)[None]
    assert_close(pe.coefficients(pos, pos), torch.ones(1, 4, 7, 7, dtype=torch.float64))
    with torch.no_grad():
        pe.w.copy_(torch.tensor([-1.0, -0.1, 0.1, 1.0]))
    c = pe.coefficients(pos, pos)[0]
    assert_close(c, c.transpose(-1, -2))  # |i - j|: no direction
    assert (c[0, 0].diff() < 0).all() and (
        c[3, 0].diff() > 0
    ).all()  # w < 0 local, w > 0 distant
    assert_close(pe.coefficients(pos + 50, pos + 50), pe.coefficients(pos, pos))


def test_negative_scores_are_zeroed_not_excluded():
    pe = pl.DATransformer(1).double()
    q = torch.ones(1, 1, 1, 2, dtype=torch.float64)
    k = torch.tensor([[[[1.0, 1.0], [-3.0, -3.0], [0.0, 0.0]]]], dtype=torch.float64)
    _, w = pl.attention(
        q,
        k,
        torch.zeros_like(k),
        pe,
        torch.tensor([[2]]),
        torch.arange(3)[None],
        return_weights=True,
    )
    assert_close(w[0, 0, 0, 1], w[0, 0, 0, 2])  # score -6 and score 0 weigh the same
    assert w[0, 0, 0, 1] > 0.1


def test_causal_mask_still_applies_after_the_rescaling():
    pe = pl.DATransformer(2)
    mha = pl.MultiHeadAttention(8, 2, pe)
    _, w = mha(torch.randn(1, 5, 8), causal=True, return_weights=True)
    assert (w[0].triu(1) == 0).all()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.DATransformer(0)
    with pytest.raises(ValueError, match="built for n_heads=2"):
        pl.DATransformer(2).transform_scores(
            torch.zeros(1, 3, 4, 4), torch.arange(4)[None], torch.arange(4)[None]
        )

"""Sinusoidal encoding: properties, golden values, parity with an independent implementation."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def reference_table(n, d, base=10000.0):
    """Independent implementation: the paper's two formulas, one Python float at a time."""
    return torch.tensor([[math.sin(p / base ** (c / d)) if c % 2 == 0 else math.cos(p / base ** ((c - 1) / d))
                          for c in range(d)] for p in range(n)], dtype=torch.float64)


def test_sinusoid_shift_is_linear():
    """PE(p + k) = T(k) PE(p) with T(k) block-diagonal 2x2 rotations that do not depend on p."""
    d, k = 16, 5
    pe = pl.sinusoidal_encoding(torch.arange(40), d, dtype=torch.float64)
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    c, s = torch.cos(k * inv_freq), torch.sin(k * inv_freq)
    blocks = [torch.tensor([[ci, si], [-si, ci]]) for ci, si in zip(c.tolist(), s.tolist())]
    t = torch.block_diag(*blocks).double()                     # (sin, cos) pair -> shifted pair
    assert_close(pe[k:] , pe[:-k] @ t.T)


def test_each_pair_has_unit_norm_so_every_row_has_norm_sqrt_d_over_2():
    pe = pl.sinusoidal_table(100, 32).double()
    assert_close(pe.norm(dim=-1), torch.full((100,), math.sqrt(16), dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_dot_product_depends_only_on_offset_and_is_symmetric():
    pe = pl.sinusoidal_encoding(torch.arange(64), 32, dtype=torch.float64)
    gram = pe @ pe.T
    for k in range(-10, 11):
        diag = torch.diagonal(gram, offset=k)
        assert_close(diag, diag[:1].expand_as(diag))
    assert_close(gram, gram.T)


def test_golden_values():
    pe = pl.sinusoidal_table(3, 4)
    # p = 1: (sin 1, cos 1, sin 0.01, cos 0.01)
    expected = torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    assert_close(pe[1], expected)
    assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))


@pytest.mark.parametrize("n, d, base", [(50, 8, 10000.0), (17, 64, 10000.0), (9, 6, 100.0)])
def test_parity_with_reference(n, d, base):
    assert_close(pl.sinusoidal_table(n, d, base).double(), reference_table(n, d, base), rtol=1e-6, atol=1e-6)


def test_encoding_adds_the_table_at_the_given_positions():
    pe = pl.Sinusoidal(8)
    x = torch.randn(2, 4, 8)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    table = pl.sinusoidal_table(14, 8)
    assert_close(pe.encode_input(x, pos), x + table[pos])


@pytest.mark.parametrize("d_model", [7, 1, 33])
def test_odd_d_model_is_a_clear_error(d_model):
    with pytest.raises(ValueError, match="d_model must be even"):
        pl.sinusoidal_table(10, d_model)
    with pytest.raises(ValueError, match="d_model must be even"):
        pl.Sinusoidal(d_model)


def test_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="n_positions must be > 0"):
        pl.sinusoidal_table(0, 8)
    with pytest.raises(ValueError, match="base must be > 1"):
        pl.sinusoidal_table(4, 8, base=1.0)
    with pytest.raises(ValueError, match="built for d_model=8"):
        pl.Sinusoidal(8).encode_input(torch.randn(1, 3, 6), torch.arange(3)[None])

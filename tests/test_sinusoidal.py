"""Sinusoidal encoding: properties, golden values, parity with an independent
implementation."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def reference_table(n, d, base=10000.0):
    """Independent implementation: the paper's two formulas, one Python float at
    a time."""
    return torch.tensor(
        [
            [
                math.sin(p / base ** (c / d))
                if c % 2 == 0
                else math.cos(p / base ** ((c - 1) / d))
                for c in range(d)
            ]
            for p in range(n)
        ],
        dtype=torch.float64,
    )


def test_sinusoid_shift_is_linear():
    """PE(p + k) = T(k) PE(p) with T(k) block-diagonal 2x2 rotations that do not
    depend on p."""
    d, k = 16, 5
    pe = pl.sinusoidal_encoding(torch.arange(40), d, dtype=torch.float64)
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    c, s = torch.cos(k * inv_freq), torch.sin(k * inv_freq)
    blocks = [
        torch.tensor([[ci, si], [-si, ci]]) for ci, si in zip(c.tolist(), s.tolist())
    ]
    t = torch.block_diag(*blocks).double()  # (sin, cos) pair -> shifted pair
    assert_close(pe[k:], pe[:-k] @ t.T)


def test_each_pair_has_unit_norm_so_every_row_has_norm_sqrt_d_over_2():
    pe = pl.sinusoidal_table(100, 32).double()
    assert_close(
        pe.norm(dim=-1),
        torch.full((100,), math.sqrt(16), dtype=torch.float64),
        rtol=1e-6,
        atol=1e-6,
    )


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


@pytest.mark.parametrize(
    "n, d, base", [(50, 8, 10000.0), (17, 64, 10000.0), (9, 6, 100.0)]
)
def test_parity_with_reference(n, d, base):
    assert_close(
        pl.sinusoidal_table(n, d, base).double(),
        reference_table(n, d, base),
        rtol=1e-6,
        atol=1e-6,
    )


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
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        pl.sinusoidal_table(4, 8, base=1.0)
    with pytest.raises(ValueError, match="built for d_model=8"):
        pl.Sinusoidal(8).encode_input(torch.randn(1, 3, 6), torch.arange(3)[None])


# --- shift_matrix: T(k) with PE(p + k) = T(k) PE(p) -----------------------------------


@pytest.mark.parametrize("k", [0, 1, 5, 17, -3])
@pytest.mark.parametrize("d, base", [(16, 10000.0), (6, 100.0), (64, 10000.0)])
def test_shift_matrix_moves_every_row_of_the_table_by_k(k, d, base):
    n = 60
    pe = pl.sinusoidal_encoding(torch.arange(n), d, base, dtype=torch.float64)  # (n, D)
    t = pl.shift_matrix(k, d, base, dtype=torch.float64)
    src = torch.arange(max(0, -k), min(n, n - k))
    assert_close(pe[src + k], pe[src] @ t.T)  # row p+k = T(k) @ row p


def test_shift_matrix_on_the_float32_table_as_the_issue_states_it():
    table, t = pl.sinusoidal_table(50, 32), pl.shift_matrix(7, 32)
    for p in (0, 3, 42):
        assert_close(table[p + 7], t @ table[p], rtol=1e-5, atol=1e-5)


def test_shift_matrix_is_a_group_of_rotations():
    d = 12
    t = lambda k: pl.shift_matrix(k, d, dtype=torch.float64)  # noqa: E731
    assert_close(t(0), torch.eye(d, dtype=torch.float64))
    assert_close(t(3) @ t(4), t(7))  # T(a) T(b) = T(a + b)
    assert_close(t(5).T, t(-5))  # T(k)^T = T(-k)
    assert_close(t(5).T @ t(5), torch.eye(d, dtype=torch.float64))  # orthogonal
    assert_close(torch.linalg.det(t(2.5)), torch.tensor(1.0, dtype=torch.float64))


def test_shift_matrix_is_block_diagonal_and_works_for_real_offsets():
    t = pl.shift_matrix(0.5, 8, dtype=torch.float64)
    mask = torch.block_diag(*[torch.ones(2, 2)] * 4).bool()
    assert (t[~mask] == 0).all()
    x = torch.tensor([0.3, 2.0])
    assert_close(
        pl.sinusoidal_encoding(x + 0.5, 8, dtype=torch.float64),
        pl.sinusoidal_encoding(x, 8, dtype=torch.float64) @ t.T,
    )


def test_shift_matrix_golden_values():
    c, s = math.cos(1.0), math.sin(1.0)
    assert_close(
        pl.shift_matrix(1, 2, dtype=torch.float64),
        torch.tensor([[c, s], [-s, c]], dtype=torch.float64),
    )
    t = pl.shift_matrix(3, 4, dtype=torch.float64)
    c3, s3, c03, s03 = math.cos(3), math.sin(3), math.cos(0.03), math.sin(0.03)
    expected = torch.tensor(
        [[c3, s3, 0, 0], [-s3, c3, 0, 0], [0, 0, c03, s03], [0, 0, -s03, c03]],
        dtype=torch.float64,
    )
    assert_close(t, expected)


@pytest.mark.parametrize("k, d, base", [(4, 8, 10000.0), (-2, 6, 100.0)])
def test_shift_matrix_parity_with_least_squares_on_the_reference_table(k, d, base):
    """Independent route: the unique linear map sending reference rows p to rows p + k,
    found by lstsq."""
    ref = reference_table(40, d, base)
    src = torch.arange(max(0, -k), min(40, 40 - k))
    fitted = torch.linalg.lstsq(
        ref[src], ref[src + k]
    ).solution.T  # rows: ref[p] @ T^T = ref[p+k]
    assert_close(
        pl.shift_matrix(k, d, base, dtype=torch.float64), fitted, rtol=1e-9, atol=1e-9
    )


def test_shift_matrix_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="d_model must be even"):
        pl.shift_matrix(1, 7)
    with pytest.raises(ValueError, match="d_model must be > 0"):
        pl.shift_matrix(1, 0)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        pl.shift_matrix(1, 8, base=0.5)
    with pytest.raises(TypeError, match="k must be a number"):
        pl.shift_matrix("3", 8)
    with pytest.raises(TypeError, match="k must be a number"):
        pl.shift_matrix(True, 8)
    with pytest.raises(ValueError, match="k must be finite"):
        pl.shift_matrix(float("inf"), 8)

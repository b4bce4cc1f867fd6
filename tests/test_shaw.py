"""Shaw et al. (2018): properties, golden values, parity with an independent
implementation.

There is no runnable reference package here (the authors' tensor2tensor needs
TensorFlow), so parity is with ``reference_attention``: the paper's Eqs. (3)-(4) written
one pair (i, j) at a time in plain Python loops, sharing no code with the library.
"""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def reference_attention(q, k, v, rel_k, rel_v, max_distance, q_pos, k_pos):
    """One head, loops: e_ij = q_i (k_j + a^K_ij)^T / sqrt(d),
    z_i = sum_j alpha_ij (v_j + a^V_ij)."""
    d = q.shape[-1]
    out = torch.zeros(len(q_pos), v.shape[-1], dtype=q.dtype)
    for i, p in enumerate(q_pos):
        a = [
            min(max(kp - p, -max_distance), max_distance) + max_distance for kp in k_pos
        ]
        e = torch.stack(
            [q[i] @ (k[j] + rel_k[a[j]]) / math.sqrt(d) for j in range(len(k_pos))]
        )
        alpha = e.softmax(0)
        out[i] = sum(alpha[j] * (v[j] + rel_v[a[j]]) for j in range(len(k_pos)))
    return out


def make(max_distance=3, d=4, **kw):
    pe = pl.Shaw(d, max_distance=max_distance, **kw).double()
    with torch.no_grad():
        for table in (pe.rel_k, pe.rel_v):
            if table is not None:
                table.normal_()
    return pe


def test_index_is_clipped_key_minus_query():
    idx = pl.shaw_relative_index(4, 6, 2)
    for i in range(4):
        for j in range(6):
            assert idx[i, j] == min(max(j - i, -2), 2) + 2
    assert sorted(idx.unique().tolist()) == list(range(5))  # 2k+1 = 5 vectors


def test_index_golden():
    expected = torch.tensor([[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]])
    assert torch.equal(pl.shaw_relative_index(4, 4, 2), expected)


def test_scores_depend_only_on_clipped_offset():
    """Same content at every position: the bias is constant along diagonals and
    beyond +-k."""
    pe, n, k = make(max_distance=2), 9, 2
    q = torch.randn(1, 1, 1, 4, dtype=torch.float64).expand(1, 1, n, 4)
    pos = torch.arange(n)[None]
    bias = pe.score_bias(q, q, pos, pos)[0, 0]
    for off in range(-n + 1, n):
        diag = torch.diagonal(bias, offset=off)
        assert_close(diag, diag[:1].expand_as(diag))
    assert_close(bias[0, 5], bias[0, k])  # j - i = 5 clipped to k
    assert_close(bias[6, 0], bias[2, 0])  # j - i = -6 and -2 both clip to -k


def test_shift_of_all_positions_changes_nothing():
    mha = pl.MultiHeadAttention(8, 2, make()).double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    assert_close(mha(x, torch.arange(7)), mha(x, torch.arange(7) + 40))


@pytest.mark.parametrize("value", [True, False])
def test_efficient_equals_direct(value):
    eff = make(value=value)
    direct = make(value=value, direct=True)
    direct.load_state_dict(eff.state_dict())
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    kv_q = torch.randn(2, 3, 2, 4, dtype=torch.float64)
    for qq, q_pos, k_pos in [
        (q, None, None),
        (q, torch.tensor([0, 2, 3, 7, 8, 20]), torch.tensor([0, 2, 3, 7, 8, 20])),
        (kv_q, torch.tensor([4, 5]), None),
    ]:
        a = pl.attention(qq, k, v, eff, q_pos=q_pos, k_pos=k_pos)
        b = pl.attention(qq, k, v, direct, q_pos=q_pos, k_pos=k_pos)
        assert_close(a, b)


def test_value_term_off_returns_none():
    assert (
        make(value=False).value_bias(
            torch.ones(1, 1, 2, 2), torch.arange(2)[None], torch.arange(2)[None]
        )
        is None
    )


@pytest.mark.parametrize(
    "q_pos, k_pos",
    [
        (list(range(6)), list(range(6))),
        ([3, 4], list(range(6))),
        ([0, 1, 5, 9, 10, 11], [0, 1, 5, 9, 10, 11]),
    ],
)
def test_parity_with_loop_reference(q_pos, k_pos):
    pe = make(max_distance=2)
    q = torch.randn(1, 1, len(q_pos), 4, dtype=torch.float64)
    k, v = (torch.randn(1, 1, len(k_pos), 4, dtype=torch.float64) for _ in range(2))
    ours = pl.attention(
        q, k, v, pe, q_pos=torch.tensor(q_pos), k_pos=torch.tensor(k_pos)
    )[0, 0]
    ref = reference_attention(
        q[0, 0], k[0, 0], v[0, 0], pe.rel_k.detach(), pe.rel_v.detach(), 2, q_pos, k_pos
    )
    assert_close(ours, ref)


def test_golden_bias():
    """k = 1, d = 4, q = (1, 2, 0, 0): bias_ij = q . a^K[clip(j-i)+1] / 2."""
    pe = pl.Shaw(4, max_distance=1).double()
    with torch.no_grad():
        pe.rel_k.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]))
    q = torch.tensor([1.0, 2.0, 0, 0], dtype=torch.float64).expand(1, 1, 3, 4)
    pos = torch.arange(3)[None]
    expected = torch.tensor(
        [[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.5, 0.5, 1.0]], dtype=torch.float64
    )
    assert_close(pe.score_bias(q, q, pos, pos)[0, 0], expected)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="max_distance must be >= 0"):
        pl.shaw_relative_index(3, 3, -1)
    with pytest.raises(TypeError, match="max_distance must be an int"):
        pl.Shaw(4, max_distance=2.5)
    with pytest.raises(ValueError, match="n_q must be > 0"):
        pl.shaw_relative_index(0, 3, 1)
    with pytest.raises(ValueError, match="built for d_head=4"):
        pl.Shaw(4).score_bias(
            torch.randn(1, 1, 2, 6),
            torch.randn(1, 1, 2, 6),
            torch.arange(2)[None],
            torch.arange(2)[None],
        )

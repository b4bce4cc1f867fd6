"""Huang et al. (2020) methods 1-4: index, each formula against loops, parity with HF
(method 4)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "huang_m4_hf.json").read_text()
)


def randomise(pe):
    with torch.no_grad():
        pe.w.copy_(torch.randn_like(pe.w))
    return pe


def loop_scores(method, q, k, w, q_pos, k_pos, K):
    """Independent implementation: the paper's four formulas, one (h, i, j) at a time
    (one batch row)."""
    h, n_i, d = q.shape
    n_j = k.shape[1]
    out = torch.empty(h, n_i, n_j, dtype=q.dtype)
    for hh in range(h):
        for i in range(n_i):
            for j in range(n_j):
                r = int(k_pos[j] - q_pos[i])
                qk = float(q[hh, i] @ k[hh, j])
                if method == 1:
                    val = qk * float(w[min(abs(r), K), 0])
                elif method == 2:
                    val = qk * float(w[max(-K, min(K, r)) + K, 0])
                elif method == 3:
                    val = float((q[hh, i] * k[hh, j] * w[max(-K, min(K, r)) + K]).sum())
                else:
                    a = w[max(-K, min(K, r)) + K]
                    val = qk + float(q[hh, i] @ a) + float(k[hh, j] @ a)
                out[hh, i, j] = val / math.sqrt(d)
    return out


def test_relative_index_clips_key_minus_query():
    pos = torch.arange(6)[None]
    idx = pl.huang_relative_index(pos, pos, 2)[0]
    assert idx[0].tolist() == [
        2,
        3,
        4,
        4,
        4,
        4,
    ]  # j - i = 0, 1, 2, 3.. -> clipped at +2
    assert idx[5].tolist() == [0, 0, 0, 0, 1, 2]
    sym = pl.huang_relative_index(pos, pos, 2, directional=False)[0]
    assert_close(sym, sym.T) and sym[0].tolist() == [0, 1, 2, 2, 2, 2]


@pytest.mark.parametrize("method", [1, 2, 3, 4])
def test_scores_match_the_formula(method):
    d, h, n, K = 4, 2, 7, 3
    pe = randomise(pl.huang_method(method, d_head=d, max_distance=K).double())
    q, k, v = (torch.randn(1, h, n, d, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(n)[None] + 5
    _, weights = pl.attention(q, k, v, pe, pos, pos, return_weights=True)
    expected = loop_scores(
        method, q[0], k[0], pe.w.detach(), pos[0], pos[0], K
    ).softmax(-1)
    assert_close(weights[0], expected)


@pytest.mark.parametrize("method", [1, 2, 3, 4])
def test_scores_depend_only_on_offsets(method):
    pe = randomise(pl.huang_method(method, d_head=4, max_distance=3).double())
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(6)[None]
    _, w1 = pl.attention(q, k, v, pe, pos, pos, return_weights=True)
    _, w2 = pl.attention(q, k, v, pe, pos + 100, pos + 100, return_weights=True)
    assert_close(w1, w2)


@pytest.mark.parametrize("method", [1, 2, 3])
def test_multiplicative_methods_start_as_plain_attention(method):
    pe = pl.make_encoding(f"huang_m{method}", d_model=16, n_heads=2, max_len=8).double()
    q, k, v = (torch.randn(2, 2, 8, 8, dtype=torch.float64) for _ in range(3))
    assert_close(pl.attention(q, k, v, pe), pl.attention(q, k, v))


def test_method_1_cannot_tell_left_from_right_and_method_2_can():
    pos = torch.arange(5)[None]
    for method, symmetric in ((1, True), (2, False)):
        pe = randomise(pl.huang_method(method, d_head=4, max_distance=4).double())
        ones = torch.zeros(1, 1, 5, 5, dtype=torch.float64) + 1.0
        factor = pe.transform_scores(ones, pos, pos)[0, 0]
        assert torch.allclose(factor, factor.T) == symmetric


def test_method_4_lookup_equals_the_direct_n_n_d_form_with_per_batch_positions():
    pe = randomise(pl.huang_method(4, d_head=4, max_distance=3).double())
    q, k = (
        torch.randn(2, 3, 5, 4, dtype=torch.float64),
        torch.randn(2, 3, 6, 4, dtype=torch.float64),
    )
    q_pos, k_pos = (
        torch.tensor([[1, 2, 3, 4, 5], [0, 4, 8, 9, 10]]),
        torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 8, 9, 10]]),
    )
    a = pe.w[pl.huang_relative_index(q_pos, k_pos, 3)]  # (b, i, j, d)
    direct = (
        torch.einsum("bhid,bijd->bhij", q, a) + torch.einsum("bhjd,bijd->bhij", k, a)
    ) / 2.0
    assert_close(pe.score_bias(q, k, q_pos, k_pos), direct)


def test_method_4_parity_with_hugging_face_relative_key_query():
    g = GOLDEN
    hidden, heads, max_pos = g["hidden"], g["heads"], g["max_position_embeddings"]
    d = hidden // heads
    x = torch.tensor(g["x"], dtype=torch.float64)
    lin = lambda w, b: (
        x @ torch.tensor(w, dtype=torch.float64).T
        + torch.tensor(b, dtype=torch.float64)
    )
    split = lambda t: t.view(t.shape[0], t.shape[1], heads, d).transpose(
        1, 2
    )  # (b, h, n, d)
    q, k = split(lin(g["w_q"], g["b_q"])), split(lin(g["w_k"], g["b_k"]))
    pe = pl.huang_method(4, d_head=d, max_distance=max_pos - 1).double()
    with (
        torch.no_grad()
    ):  # HF row (i - j) + P - 1  <->  ours (j - i) + K with K = P - 1: reversed rows
        pe.w.copy_(torch.tensor(g["distance_embedding"], dtype=torch.float64).flip(0))
    _, weights = pl.attention(q, k, torch.zeros_like(q), pe, return_weights=True)
    assert_close(
        weights, torch.tensor(g["probs"], dtype=torch.float64), rtol=1e-5, atol=1e-6
    )


def test_registry_names_methods_and_shared_table():
    for m in (1, 2, 3, 4):
        pe = pl.make_encoding(f"huang_m{m}", d_model=32, n_heads=4, max_len=16)
        assert pe.method == m and pe.max_distance == 15
        assert pe.w.shape == ((16, 1) if m == 1 else (31, 1) if m == 2 else (31, 8))
    assert pl.HuangMethod3.four_terms["content-content"].startswith(
        "kept, each dimension"
    )
    assert (
        not pl.HuangMethod3(3, 4).needs_score_path
        and pl.HuangMethod1(3).needs_score_path
    )


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="method must be 1, 2, 3 or 4"):
        pl.huang_method(5, d_head=4, max_distance=3)
    with pytest.raises(ValueError, match="max_distance must be >= 0"):
        pl.huang_method(2, d_head=4, max_distance=-1)
    with pytest.raises(TypeError, match="max_distance must be an int"):
        pl.huang_method(2, d_head=4, max_distance="3")
    with pytest.raises(TypeError, match="max_distance must be an int"):
        pl.huang_relative_index(torch.arange(3)[None], torch.arange(3)[None], "3")
    with pytest.raises(ValueError, match="built for d_head=4"):
        pe = pl.huang_method(4, d_head=4, max_distance=3)
        pe.score_bias(
            torch.zeros(1, 1, 3, 6),
            torch.zeros(1, 1, 3, 6),
            torch.arange(3)[None],
            torch.arange(3)[None],
        )
    with pytest.raises(TypeError, match="q_pos must hold integer positions"):
        pl.huang_relative_index(torch.arange(3.0)[None], torch.arange(3)[None], 2)

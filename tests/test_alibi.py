"""ALiBi: properties, golden values, parity with Hugging Face's BLOOM
(golden vectors)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "alibi_bloom.json").read_text()
)


def bias_of(pe, n, start=0, b=1):
    """The ``(b, h, n, n)`` bias an encoding adds for positions
    ``start .. start+n-1``."""
    pos = (torch.arange(n) + start).expand(b, n)
    q = torch.zeros(b, pe.n_heads, n, 8, dtype=torch.float64)
    return pe.double().score_bias(q, q, pos, pos)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("symmetric", [False, True])
def test_bias_depends_only_on_the_offset(symmetric):
    bias = bias_of(pl.ALiBi(4, symmetric=symmetric), 20)[0]  # (h, i, j)
    for k in range(-19, 20):
        diag = torch.diagonal(bias, offset=k, dim1=-2, dim2=-1)  # (h, n - |k|)
        assert_close(diag, diag[:, :1].expand_as(diag))
    # shifting every position leaves the bias unchanged
    assert_close(bias_of(pl.ALiBi(4, symmetric=symmetric), 20, start=100)[0], bias)


def test_bias_is_minus_slope_times_distance_and_zero_on_the_diagonal():
    pe = pl.ALiBi(8)
    bias = bias_of(pe, 6)[0]
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    assert_close(bias, -pe.slopes.double()[:, None, None] * (i - j))
    assert_close(
        torch.diagonal(bias, dim1=-2, dim2=-1), torch.zeros(8, 6, dtype=torch.float64)
    )
    sym = bias_of(pl.ALiBi(8, symmetric=True), 6)[0]
    assert_close(sym, sym.transpose(-1, -2))
    assert_close(sym, -pe.slopes.double()[:, None, None] * (i - j).abs())


def test_causal_and_symmetric_agree_on_every_key_a_causal_query_sees():
    causal, sym = (
        bias_of(pl.ALiBi(4), 12)[0],
        bias_of(pl.ALiBi(4, symmetric=True), 12)[0],
    )
    seen = torch.ones(12, 12, dtype=torch.bool).tril()
    assert_close(causal[:, seen], sym[:, seen])
    assert (causal[:, ~seen] > 0).all()  # unmasked, the causal form rewards the future


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8, 16, 32, 64])
def test_power_of_two_slopes_are_geometric_from_two_to_the_minus_8_over_h(n_heads):
    m = pl.alibi_slopes(n_heads, dtype=torch.float64)
    start = 2.0 ** (-8.0 / n_heads)
    assert_close(m, start ** torch.arange(1, n_heads + 1, dtype=torch.float64))
    assert m[-1].item() == 2.0**-8  # the last head always gets 1/256
    assert (m[1:] < m[:-1]).all()


@pytest.mark.parametrize("n_heads", [3, 5, 6, 7, 12, 20, 24, 40, 96])
def test_other_head_counts_extend_the_nearest_smaller_power_of_two(n_heads):
    m = pl.alibi_slopes(n_heads, dtype=torch.float64)
    c = 2 ** int(math.floor(math.log2(n_heads)))
    assert_close(
        m[:c], pl.alibi_slopes(c, dtype=torch.float64)
    )  # first c heads: as for c heads
    assert_close(
        m[c:], pl.alibi_slopes(2 * c, dtype=torch.float64)[0::2][: n_heads - c]
    )  # then every other of 2c
    assert len(set(m.tolist())) == n_heads  # all distinct, all in (0, 1)
    assert ((m > 0) & (m < 1)).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
def test_fast_sdpa_path_equals_the_slow_path(causal, symmetric):
    mha = pl.MultiHeadAttention(32, 4, pl.ALiBi(4, symmetric=symmetric)).double()
    x = torch.randn(2, 15, 32, dtype=torch.float64)
    pos = torch.arange(15) + 7
    assert_close(
        mha(x, pos, causal=causal, path="fused"),
        mha(x, pos, causal=causal, path="reference"),
    )


def test_slopes_are_a_non_persistent_buffer_that_follows_the_module():
    pe = pl.ALiBi(6)
    assert "slopes" in dict(pe.named_buffers()) and "slopes" not in pe.state_dict()
    assert list(pe.parameters()) == []  # parameter-free
    assert pe.double().slopes.dtype == torch.float64


# ---------------------------------------------------------------- golden values


def test_golden_values_from_the_paper():
    # Press et al. (2022), section 3: 8 heads -> 1/2^1 .. 1/2^8;
    # 16 heads -> 1/2^0.5, 1/2^1, .., 1/2^8
    assert pl.alibi_slopes(8, dtype=torch.float64).tolist() == [
        2.0**-k for k in range(1, 9)
    ]
    assert_close(
        pl.alibi_slopes(16, dtype=torch.float64),
        torch.tensor([2.0 ** (-k / 2) for k in range(1, 17)], dtype=torch.float64),
    )
    # the authors' rule for 6 heads: 4-head slopes, then 1/2^1 and 1/2^3 from the
    # 8-head ones
    assert pl.alibi_slopes(6, dtype=torch.float64).tolist() == [
        2**-2,
        2**-4,
        2**-6,
        2**-8,
        2**-1,
        2**-3,
    ]
    bias = bias_of(pl.ALiBi(2), 3)[0]
    expected = torch.tensor([[[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]], dtype=torch.float64)
    assert_close(
        bias,
        torch.tensor([1 / 16, 1 / 256], dtype=torch.float64)[:, None, None] * expected,
    )


# ---------------------------------------------------------------- parity with BLOOM


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"h{c['n_heads']}")
def test_slopes_match_hugging_face_bloom(case):
    assert_close(
        pl.alibi_slopes(case["n_heads"]),
        torch.tensor(case["slopes"]),
        rtol=1e-6,
        atol=0,
    )


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"h{c['n_heads']}")
def test_bias_matches_bloom_up_to_a_per_row_constant(case):
    """BLOOM adds m_h * j; ALiBi's -m_h (i - j) = m_h * j - m_h * i: same softmax on
    every row."""
    h = case["n_heads"]
    mask = torch.tensor(
        GOLDEN["attention_mask"], dtype=torch.bool
    )  # (b, n), left padding
    bloom = torch.tensor(case["alibi"], dtype=torch.float64)  # (b, h, n): m_h * j
    b, n = mask.shape
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)  # positions over real tokens
    pe = pl.ALiBi(h).double()
    ours = pe.score_bias(
        torch.zeros(b, h, n, 8, dtype=torch.float64), None, pos, pos
    )  # (b, h, i, j)
    row_constant = pe.slopes[None, :, None, None] * pos[:, None, :, None]  # m_h * i
    real = (mask[:, None, :, None] & mask[:, None, None, :]).expand(b, h, n, n)
    assert_close(
        (ours + row_constant)[real],
        bloom[:, :, None, :].expand(b, h, n, n)[real],
        rtol=1e-6,
        atol=1e-6,
    )
    # and the attention weights agree under the causal mask
    scores = torch.randn(b, h, n, n, dtype=torch.float64)
    allowed = (
        mask[:, None, None, :]
        & (pos[:, None, None, :] <= pos[:, None, :, None])
        & mask[:, None, :, None]
    )
    allowed = allowed | torch.eye(n, dtype=torch.bool)  # padding rows see themselves
    w_ours = (scores + ours).masked_fill(~allowed, float("-inf")).softmax(-1)
    w_bloom = (
        (scores + bloom[:, :, None, :]).masked_fill(~allowed, float("-inf")).softmax(-1)
    )
    assert_close(w_ours, w_bloom, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [0, -3])
def test_non_positive_head_counts_are_clear_errors(bad):
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.alibi_slopes(bad)
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.ALiBi(bad)


def test_bad_types_and_shapes_are_clear_errors():
    with pytest.raises(TypeError, match="n_heads must be an int"):
        pl.alibi_slopes(4.0)
    with pytest.raises(TypeError, match="symmetric must be a bool"):
        pl.ALiBi(4, symmetric="yes")
    with pytest.raises(ValueError, match=r"shape \(b, 4, n, d\)"):
        pl.ALiBi(4).score_bias(
            torch.zeros(1, 2, 3, 8), None, torch.arange(3)[None], torch.arange(3)[None]
        )
    with pytest.raises(ValueError, match="slopes must be 1-D"):
        pl.alibi_bias(torch.ones(2, 2), torch.arange(3)[None], torch.arange(3)[None])


def test_registry_builds_alibi_with_the_model_head_count():
    pe = pl.make_encoding("alibi", d_model=48, n_heads=6, max_len=16)
    assert isinstance(pe, pl.ALiBi) and pe.n_heads == 6 and not pe.symmetric

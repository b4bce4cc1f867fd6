"""T5 relative bias: bucket properties, parity with Hugging Face (committed golden
vectors), the encoding."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "t5_buckets_hf.json").read_text()
)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_are_monotone_in_distance_on_each_side(bidirectional):
    past = pl.t5_relative_bucket(
        -torch.arange(0, 1000), bidirectional
    )  # offsets 0, -1, -2, ...
    assert (past.diff() >= 0).all()
    if bidirectional:
        future = pl.t5_relative_bucket(torch.arange(1, 1000), bidirectional)
        assert (future.diff() >= 0).all() and past.max() == 15
        # bucket 16 ("future, distance 0") is never used: offset 0 sits in the
        # lower half
        assert future.min() == 17


@pytest.mark.parametrize("bidirectional, exact", [(True, 8), (False, 16)])
def test_small_offsets_are_exact_then_buckets_widen_logarithmically(
    bidirectional, exact
):
    n = torch.arange(0, 200)
    buckets = pl.t5_relative_bucket(-n, bidirectional)
    assert_close(buckets[:exact], n[:exact])  # one bucket per distance
    assert (
        buckets[exact] == exact and buckets[exact + 1] == exact
    )  # then shared buckets
    half = 16 if bidirectional else 32
    # the first distance of each log bucket b is about
    # max_exact * (max_distance/max_exact)^((b-max_exact)/(half-max_exact))
    for b in range(exact + 1, half):
        first = int(n[buckets == b][0])
        predicted = exact * (128 / exact) ** ((b - exact) / (half - exact))
        assert math.ceil(predicted - 1e-4) == first
    widths = torch.bincount(buckets)[exact : half - 1]  # widths of the log buckets
    assert widths[-1] > 4 * widths[0]  # (rounding makes them only roughly monotone)


@pytest.mark.parametrize("bidirectional, last_start", [(True, 91), (False, 113)])
def test_saturates_at_max_distance_and_a_little_before(bidirectional, last_start):
    half = 16 if bidirectional else 32
    far = pl.t5_relative_bucket(-torch.arange(128, 100_000, 97), bidirectional)
    assert (far == half - 1).all()
    assert pl.t5_relative_bucket(torch.tensor(-last_start), bidirectional) == half - 1
    assert (
        pl.t5_relative_bucket(torch.tensor(-(last_start - 1)), bidirectional)
        == half - 2
    )


def test_causal_mode_sends_the_future_to_bucket_zero_and_bidirectional_separates_it():
    future = torch.arange(0, 50)
    assert (pl.t5_relative_bucket(future, bidirectional=False) == 0).all()
    both = pl.t5_relative_bucket(torch.tensor([-3, 3]), bidirectional=True)
    assert both.tolist() == [3, 19]


@pytest.mark.parametrize(
    "case",
    GOLDEN["cases"],
    ids=lambda c: (
        f"bi={c['bidirectional']}-nb={c['num_buckets']}-md={c['max_distance']}"
    ),
)
def test_parity_with_hugging_face(case):
    ours = pl.t5_relative_bucket(
        torch.tensor(GOLDEN["offsets"]),
        case["bidirectional"],
        case["num_buckets"],
        case["max_distance"],
    )
    assert ours.tolist() == case["buckets"]


def test_bias_matches_hugging_face_compute_bias_with_a_kv_cache():
    g = GOLDEN["compute_bias"]
    pe = pl.T5RelativeBias(n_heads=4).double()
    with torch.no_grad():
        pe.bias.copy_(torch.tensor(g["table"], dtype=torch.float64))
    q_pos = torch.arange(
        g["past_seen_tokens"], g["past_seen_tokens"] + g["query_length"]
    )[None]
    k_pos = torch.arange(g["key_length"])[None]
    q = torch.zeros(1, 4, g["query_length"], 4, dtype=torch.float64)
    k = torch.zeros(1, 4, g["key_length"], 4, dtype=torch.float64)
    assert_close(
        pe.score_bias(q, k, q_pos, k_pos)[0],
        torch.tensor(g["bias"], dtype=torch.float64),
    )


def test_bias_depends_only_on_the_offset_and_is_added_to_unscaled_scores():
    pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64).double()
    assert pe.scale == 1.0
    q, k, v = (torch.randn(1, 4, 10, 8, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(10)[None]
    bias = pe.score_bias(q, k, pos, pos)
    assert_close(bias, pe.score_bias(q, k, pos + 37, pos + 37))  # shift-invariant
    _, w = pl.attention(q, k, v, pe, pos, pos, return_weights=True)
    assert_close(w, (q @ k.transpose(-1, -2) + bias).softmax(-1))  # no 1/sqrt(d)


def test_per_batch_positions_give_per_batch_biases():
    pe = pl.T5RelativeBias(n_heads=2)
    q = k = torch.zeros(2, 2, 3, 4)
    pos = torch.tensor([[0, 1, 2], [0, 5, 40]])
    bias = pe.score_bias(q, k, pos, pos)
    assert bias.shape == (2, 2, 3, 3)
    assert_close(bias[1, :, 0, 2], pe.bias[pl.t5_relative_bucket(torch.tensor(40))])


def test_one_table_is_shared_by_every_layer():
    pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64)
    model = pl.TinyTransformer(11, 32, 4, n_layers=3, pe=pe)
    names = [n for n, _ in model.named_parameters() if n.endswith("bias") and "pe" in n]
    assert names == ["pe.bias"] and all(b.attn.pe is pe for b in model.blocks)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="integer offsets"):
        pl.t5_relative_bucket(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="num_buckets must be >= 4"):
        pl.t5_relative_bucket(torch.tensor([1]), num_buckets=3)
    with pytest.raises(ValueError, match="max_distance must exceed"):
        pl.t5_relative_bucket(torch.tensor([1]), num_buckets=32, max_distance=8)
    with pytest.raises(ValueError, match="num_buckets must be > 0"):
        pl.t5_relative_bucket(torch.tensor([1]), num_buckets=0)
    with pytest.raises(TypeError, match="bidirectional must be a bool"):
        pl.t5_relative_bucket(torch.tensor([1]), bidirectional="yes")
    with pytest.raises(ValueError, match="built for n_heads=4"):
        pl.T5RelativeBias(4).score_bias(
            torch.zeros(1, 2, 3, 4),
            torch.zeros(1, 2, 3, 4),
            torch.arange(3)[None],
            torch.arange(3)[None],
        )


def _bias_by_buckets(pe, q_pos, k_pos):
    """The formula itself: ``b_h[bucket(j - i)]`` over the ``(i, j)`` grid of
    buckets, ``(b|1, h, i, j)``."""
    return pe.bias[pe.buckets(q_pos, k_pos)].permute(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(
    "case", ["run", "shifted run", "kv cache", "gaps", "per batch", "more queries"]
)
def test_bias_from_the_offset_table_equals_the_bucket_grid_and_its_gradient(
    case, bidirectional, dtype
):
    """``fast_score_bias`` reads a per-offset table (a Toeplitz view for runs, a
    gather otherwise); forward and the gradient of the bucket table equal the
    formula's, which ``score_bias`` computes."""
    g = torch.Generator().manual_seed(0)
    n = 300  # past max_distance: every bucket, the last one shared by many offsets
    q_pos = k_pos = torch.arange(n)[None]
    if case == "shifted run":
        q_pos = k_pos = torch.arange(n)[None] + 1000
    elif case == "kv cache":  # 7 new queries, the last of the keys
        q_pos, k_pos = torch.arange(n - 7, n)[None], torch.arange(n)[None]
    elif case == "gaps":
        k_pos = torch.randint(0, 5, (1, n), generator=g).cumsum(-1)
        q_pos = k_pos[:, ::3]
    elif case == "per batch":
        k_pos = torch.randint(0, 4, (2, n), generator=g).cumsum(-1)
        q_pos = k_pos.flip(-1)[:, :50]
    elif case == "more queries":
        q_pos, k_pos = torch.arange(n)[None], torch.arange(40, 140)[None]
    pe = pl.T5RelativeBias(4, bidirectional=bidirectional).to(dtype)
    b = max(q_pos.shape[0], k_pos.shape[0])
    q = torch.zeros(b, 4, q_pos.shape[1], 8, dtype=dtype)
    k = torch.zeros(b, 4, k_pos.shape[1], 8, dtype=dtype)
    bias = pe.fast_score_bias(q, k, q_pos, k_pos)
    want = _bias_by_buckets(pe, q_pos, k_pos)
    assert torch.equal(pe.score_bias(q, k, q_pos, k_pos), want)  # the formula
    assert bias.shape == want.shape and bias.dtype == dtype
    assert torch.equal(bias.detach(), want.detach())  # a gather: bit for bit
    grad = torch.randn(bias.shape, generator=g, dtype=dtype)
    (got,) = torch.autograd.grad(bias, pe.bias, grad)
    (expected,) = torch.autograd.grad(want, pe.bias, grad)
    # the same sums, in another order: float32 rounds them differently, within a
    # few units of its epsilon of the largest sum (tens of thousands of terms)
    if dtype == torch.float64:
        assert_close(got, expected)
    else:
        assert_close(got, expected, atol=1e-5 * float(expected.abs().max()), rtol=1e-5)


def test_bias_inside_attention_equals_the_bucket_grid_on_every_path():
    """The model's calls hand ``score_bias`` their ``Positions`` (no host sync):
    causal and bidirectional, default and explicit positions."""
    pe = pl.make_encoding("t5", d_model=32, n_heads=4, max_len=64).double()
    q, k, v = (torch.randn(2, 4, 20, 8, dtype=torch.float64) for _ in range(3))
    for pos in (None, torch.tensor([[0, 2, 3, 9, 10] * 4]).cumsum(-1)):
        for causal in (False, True):
            p = torch.arange(20)[None] if pos is None else pos
            want = (q @ k.transpose(-1, -2) + _bias_by_buckets(pe, p, p)).masked_fill(
                causal & (p[:, None, :] > p[:, :, None])[:, None], float("-inf")
            )
            for path in ("fused", "reference"):
                out = pl.attention(q, k, v, pe, pos, pos, causal=causal, path=path)
                assert_close(out, want.softmax(-1) @ v)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("path", ["reference", "auto"])
def test_rows_that_start_at_different_positions_are_each_right(causal, path):
    """Left-padded prompts: each row a run of its own (3 .. 8 and 0 .. 5, queries
    the whole row or its last 2). The batch's attention equals the one of each row
    alone (the offset table was taken over the whole batch's range and read as a
    Toeplitz matrix: a raw size error on the reference path, every non-causal call
    and attention_map)."""
    torch.manual_seed(0)
    pe = pl.T5RelativeBias(2, init_std=1.0).double()
    q, k, v = torch.randn(3, 2, 2, 6, 4, dtype=torch.float64)
    pos = torch.stack([torch.arange(3, 9), torch.arange(6)])
    for q_pos, n_q in [(pos, 6), (pos[:, 4:], 2)]:
        qq = q[:, :, -n_q:]
        args = dict(causal=causal, path=path)
        batch = pl.attention(qq, k, v, pe, q_pos, pos, **args)
        rows = torch.cat(
            [
                pl.attention(qq[r : r + 1], k[r : r + 1], v[r : r + 1], pe,
                             q_pos[r : r + 1], pos[r : r + 1], **args)
                for r in range(2)
            ]
        )  # fmt: skip
        assert_close(batch, rows)


def test_attention_map_of_left_padded_rows():
    torch.manual_seed(0)
    model = pl.TinyTransformer(11, 16, 2, 1, pe="t5").eval()
    tokens = torch.randint(0, 11, (2, 6))
    pos = torch.stack([torch.arange(3, 9), torch.arange(6)])
    weights = model.attention_map(tokens, 0, pos)
    alone = torch.cat(
        [model.attention_map(tokens[r : r + 1], 0, pos[r]) for r in (0, 1)]
    )
    assert_close(weights, alone)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(
    "num_buckets, max_distance", [(32, 128), (64, 256), (16, 64), (48, 200)]
)
def test_the_band_starts_where_the_last_bucket_does(
    num_buckets, max_distance, bidirectional
):
    """``T5RelativeBias.band`` (W) against the closed form of the first distance of
    the past's last bucket b = B' - 1: n_b = ceil(E (M / E)^((b - E) / (B' - E))),
    with B' the buckets of the past and E = B' / 2 of them exact (the T5 chapter
    derives it); T5's own causal table (32 buckets, M = 128) has W = 113, the
    bidirectional one 91."""
    half = num_buckets // 2 if bidirectional else num_buckets  # B'
    exact = half // 2  # E
    start = exact * (max_distance / exact) ** ((half - 1 - exact) / (half - exact))
    pe = pl.T5RelativeBias(2, num_buckets, max_distance, bidirectional)
    assert pe.band == math.ceil(start - 1e-9)
    if (num_buckets, max_distance) == (32, 128):
        assert pe.band == (91 if bidirectional else 113)

"""Convolutional positional embedding (wav2vec 2.0): properties, parity with Hugging
Face's ``Wav2Vec2PositionalConvEmbedding`` (golden vectors made by
``tests/golden/make_conv_pos_golden.py``; the weight-norm parameters map one to one:
``original0`` = g, ``original1`` = v)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "conv_pos_wav2vec2.json").read_text()
)


def layer(d=8, k=6, g=2, causal=False, seed=0):
    torch.manual_seed(seed)
    return pl.ConvPositionalEmbedding(d, k, g, causal=causal).double()


def x_of(b=2, n=20, d=8, seed=1):
    return torch.randn(b, n, d, generator=torch.Generator().manual_seed(seed)).double()


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("k", [5, 6])
def test_translation_equivariant_away_from_the_edges(k):
    """Prepending s tokens shifts every feature whose window stays inside by s."""
    pe, x = layer(k=k), x_of(n=24)
    s = 3
    shifted = torch.cat([x_of(n=s, seed=9), x], dim=1)  # (b, s + n, D)
    a, b = pe.features(x), pe.features(shifted)
    left, right = k // 2, (k - 1) // 2  # window p - left .. p + right
    inner = slice(left, 24 - right)
    assert_close(b[:, s:][:, inner], a[:, inner])
    # near the start the zero padding shows: the first feature differs
    assert (b[:, s] - a[:, 0]).abs().max() > 1e-6


@pytest.mark.parametrize("k", [4, 5, 6])
def test_window_is_p_minus_k_over_2_to_p_plus_k_over_2_minus_1(k):
    """Changing token j changes exactly the features whose window holds j."""
    pe, x = layer(k=k), x_of(n=15)
    j = 7
    x2 = x.clone()
    x2[:, j] += 1.0
    changed = (pe.features(x2) - pe.features(x)).abs().amax((0, 2)) > 1e-12  # (n,)
    lo, hi = j - (k - 1) // 2, j + k // 2  # p with p - k//2 <= j <= p + (k-1)//2
    assert changed.nonzero().flatten().tolist() == list(range(lo, hi + 1))


def test_even_kernel_drops_the_last_frame_of_the_padded_convolution():
    pe, x = layer(k=6), x_of(n=10)
    h = pe.conv(torch.nn.functional.pad(x.transpose(1, 2), (3, 3)))  # (b, D, n + 1)
    assert h.shape[-1] == 11
    assert_close(pe.features(x), torch.nn.functional.gelu(h[..., :-1]).transpose(1, 2))


def test_causal_variant_reads_no_later_token():
    pe, x = layer(k=6, causal=True), x_of(n=12)
    x2 = x.clone()
    x2[:, 8:] += 1.0
    assert_close(pe.features(x2)[:, :8], pe.features(x)[:, :8])
    sym = layer(k=6)
    assert (sym.features(x2)[:, 5:8] - sym.features(x)[:, 5:8]).abs().max() > 1e-6


def test_positions_are_not_read_and_output_is_x_plus_features():
    pe, x = layer(), x_of(n=9)
    a = pe.encode_input(x, torch.arange(9).expand(2, 9))
    b = pe.encode_input(x, torch.arange(100, 109).expand(2, 9))
    assert_close(a, b)
    assert_close(a, x + pe.features(x))


def test_weight_norm_keeps_one_magnitude_per_kernel_tap():
    pe = layer(d=8, k=6, g=2)
    w = pe.conv.parametrizations.weight
    assert w.original0.shape == (1, 1, 6)  # g: one per tap (dim=2)
    weight = pe.conv.weight  # (D, D/G, K)
    assert_close(weight.norm(dim=(0, 1)), w.original0.flatten())


def test_initial_weight_scale_is_fairseq_s():
    torch.manual_seed(0)
    pe = pl.ConvPositionalEmbedding(64, 32, 16)
    std = pe.conv.parametrizations.weight.original1.std().item()
    assert abs(std - (4 / (32 * 64)) ** 0.5) < 0.1 * std
    assert (pe.conv.bias == 0).all()


def test_float32_input_with_a_float64_layer_keeps_the_input_dtype():
    pe, x = layer(), x_of(n=5).float()
    assert pe.encode_input(x, None).dtype == torch.float32


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("index", range(len(GOLDEN["cases"])))
def test_matches_hugging_face_wav2vec2(index):
    case = GOLDEN["cases"][index]
    x = torch.tensor(case["x"], dtype=torch.float64)
    pe = layer(d=x.shape[-1], k=case["kernel_size"], g=case["groups"])
    w = pe.conv.parametrizations.weight
    with torch.no_grad():
        w.original0.copy_(torch.tensor(case["g"]))
        w.original1.copy_(torch.tensor(case["v"]))
        pe.conv.bias.copy_(torch.tensor(case["bias"]))
    want = torch.tensor(case["features"], dtype=torch.float64)
    assert_close(pe.features(x), want)
    assert_close(pe.encode_input(x, None), x + want)  # Wav2Vec2Encoder adds it


# ---------------------------------------------------------------- bad input


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"groups \(3\) must divide d_model \(8\)"):
        pl.ConvPositionalEmbedding(8, 4, 3)
    with pytest.raises(ValueError, match="kernel_size must be > 0"):
        pl.ConvPositionalEmbedding(8, 0, 2)
    with pytest.raises(TypeError, match="causal must be a bool"):
        pl.ConvPositionalEmbedding(8, 4, 2, causal="yes")
    with pytest.raises(ValueError, match=r"x must have shape \(b, n, 8\)"):
        layer().encode_input(torch.randn(2, 5, 4), None)

"""TENER: direction awareness, unscaled scores, golden values, parity with the
authors' code.

Parity: ``golden/tener_authors.json`` holds scores and outputs of the authors'
``RelativeMultiHeadAttn`` (fastnlp/TENER), produced by ``golden/make_tener_golden.py``;
``TENER(variant="code")`` reproduces that code, whose conventions differ from
the paper's.
"""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = pathlib.Path(__file__).parent / "golden" / "tener_authors.json"


def make(d=8, h=2, **kw):
    return pl.TENER(d, h, **kw).double()


def test_r_of_minus_x_flips_only_the_sines():
    x = torch.arange(-20, 21)
    r, r_neg = pl.tener_relative_sinusoid(x, 8), pl.tener_relative_sinusoid(-x, 8)
    flip = torch.tensor([-1.0, 1.0] * 4)
    assert_close(r_neg, r * flip)


def test_bias_tells_left_from_right_but_sinusoid_dot_product_does_not():
    pe = make()
    q = torch.randn(1, 2, 1, 8, dtype=torch.float64).expand(1, 2, 21, 8)
    pos = torch.arange(21)[None]
    bias = pe.score_bias(q, torch.zeros_like(q), pos, pos)[0]  # (h, i, j)
    t = 10
    left, right = bias[:, t, t - 3], bias[:, t, t + 3]
    assert (left - right).abs().min() > 1e-3
    p = pl.sinusoidal_encoding(torch.arange(21), 8, dtype=torch.float64)
    assert_close(p[t] @ p[t - 3], p[t] @ p[t + 3])  # absolute sinusoids: symmetric


def test_scores_depend_only_on_offset():
    pe = make()
    q = torch.randn(1, 2, 1, 8, dtype=torch.float64).expand(1, 2, 9, 8)
    pos = torch.arange(9)[None] + 5
    bias = pe.score_bias(q, q, pos, pos)[0]
    for off in range(-8, 9):
        diag = torch.diagonal(bias, offset=off, dim1=-2, dim2=-1)
        assert_close(diag, diag[..., :1].expand_as(diag))


def test_attention_is_unscaled():
    pe = make()
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(5)[None]
    _, weights = pl.attention(q, k, v, pe, return_weights=True)
    assert pe.scale == 1.0
    assert_close(
        weights, (q @ k.transpose(-1, -2) + pe.score_bias(q, k, pos, pos)).softmax(-1)
    )
    scaled = make(scaled=True)
    scaled.load_state_dict(pe.state_dict())
    _, w_scaled = pl.attention(q, k, v, scaled, return_weights=True)
    assert_close(
        w_scaled,
        (
            (q @ k.transpose(-1, -2) + pe.score_bias(q, k, pos, pos)) / math.sqrt(8)
        ).softmax(-1),
    )


def test_paper_terms_by_hand():
    pe = make(d=4, h=1)
    q, k = (
        torch.randn(1, 1, 3, 4, dtype=torch.float64),
        torch.randn(1, 1, 3, 4, dtype=torch.float64),
    )
    pos = torch.arange(3)[None]
    bias = pe.score_bias(q, k, pos, pos)[0, 0]
    for t in range(3):
        for j in range(3):
            x = t - j
            r = torch.tensor(
                [math.sin(x), math.cos(x), math.sin(x / 100), math.cos(x / 100)],
                dtype=torch.float64,
            )
            assert_close(
                bias[t, j],
                (q[0, 0, t] @ r + pe.u[0] @ k[0, 0, j] + pe.v[0] @ r).detach(),
            )


def test_golden_sinusoids():
    assert_close(
        pl.tener_relative_sinusoid(torch.tensor(1), 4, dtype=torch.float64),
        torch.tensor(
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            dtype=torch.float64,
        ),
    )
    # the authors' code: [sin | cos], c_i = 10000^(-i/(d/2-1)) -> c = (1, 1e-4)
    # for d = 4
    assert_close(
        pl.tener_relative_sinusoid(
            torch.tensor(1), 4, variant="code", dtype=torch.float64
        ),
        torch.tensor(
            [math.sin(1), math.sin(1e-4), math.cos(1), math.cos(1e-4)],
            dtype=torch.float64,
        ),
    )


def test_parity_with_the_authors_code():
    g = {
        key: torch.tensor(val, dtype=torch.float64) if isinstance(val, list) else val
        for key, val in json.loads(GOLDEN.read_text()).items()
    }
    x, n_head = g["x"], g["n_head"]
    b, n, d_model = x.shape
    d = d_model // n_head
    wq, wv = g["qv_linear"].chunk(2, dim=0)
    split = lambda t: t.unflatten(-1, (n_head, d)).transpose(1, 2)  # (b, h, n, d)
    q, k, v = split(x @ wq.T), split(x), split(x @ wv.T)  # keys unprojected
    # their table: rows are offsets -n .. n-1
    assert_close(
        g["pos_embed"],
        pl.tener_relative_sinusoid(
            torch.arange(-n, n), d, variant="code", dtype=torch.float64
        ),
        rtol=1e-6,
        atol=1e-6,
    )
    pe = pl.TENER(d, n_head, variant="code").double()
    with torch.no_grad():
        pe.u.copy_(g["r_r_bias"])  # their r_r_bias multiplies the keys (our u)
        pe.v.copy_(g["r_w_bias"])  # their r_w_bias multiplies R (our v)
    pos = torch.arange(n)[None]
    scores = q @ k.transpose(-1, -2) + pe.score_bias(q, k, pos, pos)
    assert_close(scores, g["scores"], rtol=1e-6, atol=1e-6)  # their R is float32
    out = pl.attention(q, k, v, pe)
    assert_close(out.transpose(1, 2).flatten(2), g["out"], rtol=1e-6, atol=1e-6)
    paper = pl.TENER(d, n_head).double()
    paper.load_state_dict(pe.state_dict())
    assert (
        paper.score_bias(q, k, pos, pos) - pe.score_bias(q, k, pos, pos)
    ).abs().max() > 1e-2  # the two differ


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="d_head must be even"):
        pl.TENER(5, 2)
    with pytest.raises(ValueError, match="variant must be 'paper' or 'code'"):
        pl.TENER(4, 2, variant="fastnlp")
    with pytest.raises(ValueError, match="needs d_head >= 4"):
        pl.tener_relative_sinusoid(torch.arange(3), 2, variant="code")
    with pytest.raises(ValueError, match="built for n_heads=2, d_head=8"):
        make().score_bias(
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 3, 4),
            torch.arange(3)[None],
            torch.arange(3)[None],
        )

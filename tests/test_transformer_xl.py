"""Transformer-XL relative attention: rel_shift, properties, golden values, parity with
the authors' code.

Parity: ``golden/transformer_xl_authors.json`` holds the output of the authors'
``RelPartialLearnableMultiHeadAttn`` (kimiyoung/transformer-xl), produced by
``golden/make_transformer_xl_golden.py``.
"""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = pathlib.Path(__file__).parent / "golden" / "transformer_xl_authors.json"


def make(d_model=8, n_heads=2, **kw):
    pe = pl.TransformerXL(d_model, n_heads, **kw).double()
    with torch.no_grad():
        pe.u.normal_()
        pe.v.normal_()
    return pe


@pytest.mark.parametrize("n, length", [(5, 5), (4, 9), (3, 7), (1, 4)])
def test_rel_shift_equals_direct_indexing(n, length):
    """out[i, j] = x[i, j + n - 1 - i] wherever that column exists (j <= i + L - n)."""
    x = torch.randn(2, 3, n, length)
    out = pl.rel_shift(x)
    assert out.shape == x.shape
    for i in range(n):
        for j in range(length):
            if j + n - 1 - i < length:
                assert torch.equal(out[..., i, j], x[..., i, j + n - 1 - i])


def test_rel_shift_equals_gather_on_the_causal_triangle():
    """The authors' case: L = klen, offsets klen-1 .. 0 in the columns, keep j <= i."""
    n = 6
    x = torch.randn(n, n)
    gathered = x.gather(
        -1,
        (n - 1 - (torch.arange(n)[:, None] - torch.arange(n)[None, :])).clamp(0, n - 1),
    )
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool))
    assert torch.equal(pl.rel_shift(x)[keep], gathered[keep])


def test_rel_shift_golden():
    x = torch.arange(9.0).reshape(3, 3)
    assert torch.equal(
        pl.rel_shift(x),
        torch.tensor([[2.0, 0.0, 3.0], [4.0, 5.0, 0.0], [6.0, 7.0, 8.0]]),
    )


def test_scores_depend_only_on_offset():
    pe, n = make(), 8
    q = torch.randn(1, 2, 1, 4, dtype=torch.float64).expand(1, 2, n, 4)
    pos = torch.arange(n)[None]
    bias = pe.score_bias(q, q, pos, pos)[0]
    for off in range(-n + 1, n):
        diag = torch.diagonal(bias, offset=off, dim1=-2, dim2=-1)
        assert_close(diag, diag[..., :1].expand_as(diag))


def test_shift_path_gather_path_and_direct_agree():
    pe = make()
    direct = make(direct=True)
    direct.load_state_dict(pe.state_dict())
    q, k = (
        torch.randn(2, 2, 5, 4, dtype=torch.float64),
        torch.randn(2, 2, 5, 4, dtype=torch.float64),
    )
    consecutive = torch.arange(3, 8)[None].expand(2, 5)
    scattered = torch.tensor([[0, 2, 3, 9, 10], [1, 2, 4, 8, 30]])
    for q_pos, k_pos in [
        (consecutive, consecutive),
        (scattered, scattered),
        (consecutive[:, 3:], consecutive),
    ]:
        qq = q[:, :, : q_pos.shape[1]]
        assert_close(
            pe.score_bias(qq, k, q_pos, k_pos), direct.score_bias(qq, k, q_pos, k_pos)
        )


def test_rows_that_start_at_different_positions_are_each_right():
    """Left-padded prompts: each row a run of its own (3 .. 8 and 0 .. 5, queries
    the whole row or its last 2). The batch's attention equals the one of each row
    alone (the offset range was taken over the whole batch: 0.33 off)."""
    pe = make()
    q, k, v = torch.randn(3, 2, 2, 6, 4, dtype=torch.float64)
    pos = torch.stack([torch.arange(3, 9), torch.arange(6)])
    for q_pos, n_q in [(pos, 6), (pos[:, 4:], 2)]:
        qq = q[:, :, -n_q:]
        with torch.no_grad():
            batch = pl.attention(qq, k, v, pe, q_pos, pos)
            rows = torch.cat(
                [
                    pl.attention(qq[r : r + 1], k[r : r + 1], v[r : r + 1], pe,
                                 q_pos[r : r + 1], pos[r : r + 1])
                    for r in range(2)
                ]
            )  # fmt: skip
        assert_close(batch, rows)


def test_terms_b_c_d_by_hand():
    """bias_ij = (q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}) / sqrt(d), one pair
    at a time."""
    pe = make()
    q, k = (
        torch.randn(1, 2, 4, 4, dtype=torch.float64),
        torch.randn(1, 2, 4, 4, dtype=torch.float64),
    )
    pos = torch.arange(4)[None]
    bias = pe.score_bias(q, k, pos, pos)
    w_r = pe.w_r.weight.detach()
    for h in range(2):
        for i in range(4):
            for j in range(4):
                r = w_r @ pl.sinusoidal_encoding(
                    torch.tensor(i - j), 8, dtype=torch.float64
                )  # W_R R_{i-j}
                r = r[h * 4 : (h + 1) * 4]
                expected = (q[0, h, i] @ r + pe.u[h] @ k[0, h, j] + pe.v[h] @ r) / 2.0
                assert_close(bias[0, h, i, j], expected.detach())


def test_parity_with_the_authors_code():
    g = {
        key: torch.tensor(val, dtype=torch.float64) if isinstance(val, list) else val
        for key, val in json.loads(GOLDEN.read_text()).items()
    }
    n_head, d_head = g["n_head"], g["d_head"]
    d_model = n_head * d_head
    w = g["w"].transpose(0, 1)  # (b, n, D): theirs is (n, b, D)
    wq, wk, wv = g["qkv_net"].chunk(3, dim=0)
    split = lambda t: t.unflatten(-1, (n_head, d_head)).transpose(1, 2)  # (b, h, n, d)
    q, k, v = split(w @ wq.T), split(w @ wk.T), split(w @ wv.T)
    pe = pl.TransformerXL(d_model, n_head).double()
    # Their R is [sin | cos]; ours interleaves (sin, cos) pairs:
    # R_theirs = R_ours[:, perm].
    perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    assert_close(
        g["r"],
        pl.sinusoidal_encoding(
            torch.arange(w.shape[1] - 1, -1, -1), d_model, dtype=torch.float64
        )[:, perm],
    )
    w_r = torch.empty_like(g["r_net"])
    w_r[:, perm] = g["r_net"]
    with torch.no_grad():
        pe.w_r.weight.copy_(w_r)
        pe.u.copy_(g["r_w_bias"])
        pe.v.copy_(g["r_r_bias"])
    out, weights = pl.attention(q, k, v, pe, causal=True, return_weights=True)
    assert_close(weights, g["attn_prob"].permute(2, 3, 0, 1))  # theirs: (i, j, b, h)
    assert_close(out.transpose(1, 2).flatten(2), g["attn_vec"].transpose(0, 1))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="at least 2 non-empty axes"):
        pl.rel_shift(torch.ones(4))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        pl.rel_shift([[1.0]])
    with pytest.raises(ValueError, match="d_model must be even"):
        pl.TransformerXL(7, 7)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        pl.TransformerXL(8, 3)
    with pytest.raises(ValueError, match="built for n_heads=2, d_head=4"):
        make().score_bias(
            torch.randn(1, 4, 2, 2),
            torch.randn(1, 4, 2, 2),
            torch.arange(2)[None],
            torch.arange(2)[None],
        )

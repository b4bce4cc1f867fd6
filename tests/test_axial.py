"""Axial position embeddings: properties, golden values, parity with Hugging Face's
Reformer (golden vectors)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.encodings.axial import axial_shape

GOLDEN = (
    pathlib.Path(__file__).parent / "golden" / "axial_reformer.json"
)  # from golden/make_axial_golden.py


@pytest.mark.parametrize("n1, n2", [(3, 4), (1, 5), (7, 1), (16, 8)])
def test_position_to_r_s_is_a_bijection(n1, n2):
    n = torch.arange(n1 * n2)
    r, s = pl.axial_indices(n, n1)
    assert ((0 <= r) & (r < n1)).all() and ((0 <= s) & (s < n2)).all()
    assert_close(r + n1 * s, n)  # the inverse map
    assert len(set(zip(r.tolist(), s.tolist()))) == n1 * n2  # onto [0, n1) x [0, n2)


@pytest.mark.parametrize("mode", ["concat", "sum"])
def test_every_position_gets_a_different_vector_so_axial_is_absolute(mode):
    pe = pl.AxialPositionalEncoding(4, 5, 3, 3, mode=mode)
    table = pe.table().detach()
    assert table.shape == (20, 3 if mode == "sum" else 6)
    assert torch.cdist(table, table).add(torch.eye(20)).min() > 1e-3


def test_concat_columns_repeat_every_n1_and_are_constant_inside_a_segment():
    n1, n2, d1, d2 = 3, 4, 2, 5
    pe = pl.AxialPositionalEncoding(n1, n2, d1, d2)
    table = pe.table().detach()  # (12, 7)
    assert_close(table[n1:, :d1], table[:-n1, :d1])  # P1[r]: period n1
    assert_close(
        table[:, d1:].view(n2, n1, d2), table[::n1, d1:][:, None].expand(n2, n1, d2)
    )  # P2[s]
    assert_close(table[:, :d1], pe.p1.detach().repeat(n2, 1))
    assert_close(table[:, d1:], pe.p2.detach().repeat_interleave(n1, 0))


def test_sum_mode_adds_the_two_tables():
    pe = pl.AxialPositionalEncoding(3, 2, 4, 4, mode="sum")
    n = torch.arange(6)
    assert_close(pe.table().detach(), (pe.p1[n % 3] + pe.p2[n // 3]).detach())


@pytest.mark.parametrize(
    "mode, expected", [("concat", 3 * 2 + 4 * 6), ("sum", 3 * 5 + 4 * 5)]
)
def test_parameter_count(mode, expected):
    pe = pl.AxialPositionalEncoding(
        3, 4, 2 if mode == "concat" else 5, 6 if mode == "concat" else 5, mode=mode
    )
    assert pe.n_params() == expected == sum(p.numel() for p in pe.parameters())


def test_encode_input_adds_the_embeddings_at_the_given_positions():
    pe = pl.AxialPositionalEncoding(4, 4, 3, 5)
    x = torch.randn(2, 3, 8)
    pos = torch.tensor([[0, 5, 15], [9, 9, 1]])
    assert_close(pe.encode_input(x, pos), x + pe.table().detach()[pos])


@pytest.mark.parametrize("max_len", [1, 2, 7, 12, 16, 17, 64, 100, 1000, 4097])
def test_factory_factorisation_covers_max_len_and_is_near_square(max_len):
    n1, n2 = axial_shape(max_len)
    assert n1 * n2 >= max_len and n1 * (n2 - 1) < max_len  # covers it, no spare segment
    assert abs(n1 - n2) <= 1 or n1 * n2 - max_len < n1
    pe = pl.make_encoding("axial", d_model=10, n_heads=2, max_len=max_len)
    assert (pe.n1, pe.n2, pe.d1 + pe.d2, pe.mode) == (n1, n2, 10, "concat")
    pe.encode_input(torch.zeros(1, max_len, 10), torch.arange(max_len)[None])


def test_positions_past_n1_n2_are_a_clear_error():
    pe = pl.AxialPositionalEncoding(3, 4, 2, 2)
    x = torch.zeros(1, 13, 4)
    with pytest.raises(ValueError, match=r"pos must lie in \[0, max_len\) = \[0, 12\)"):
        pe.encode_input(x, torch.arange(13)[None])
    with pytest.raises(ValueError, match="pos must be >= 0"):
        pe.encode_input(x[:, :1], torch.tensor([[-1]]))
    with pytest.raises(TypeError, match="integer positions"):
        pe.encode_input(x[:, :1], torch.tensor([[0.5]]))
    model = pl.TinyTransformer(
        5,
        d_model=16,
        n_heads=2,
        n_layers=1,
        pe=pl.make_encoding("axial", d_model=16, n_heads=2, max_len=16),
    )
    with pytest.raises(ValueError, match=r"\[0, max_len\) = \[0, 16\)"):
        model(torch.randint(5, (1, 17)))
    # a max_len that the grid over-covers is still the limit, as for a learned table
    pe = pl.make_encoding("axial", d_model=8, n_heads=2, max_len=10)  # 4 x 3 grid
    assert (pe.n1 * pe.n2, pe.max_len) == (12, 10)
    with pytest.raises(ValueError, match=r"\[0, max_len\) = \[0, 10\)"):
        pe.encode_input(torch.zeros(1, 11, 8), torch.arange(11)[None])


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        pl.AxialPositionalEncoding(2, 2, 2, 2, mode="product")
    with pytest.raises(ValueError, match="d1 must equal d2"):
        pl.AxialPositionalEncoding(2, 2, 2, 3, mode="sum")
    with pytest.raises(ValueError, match="n1 must be > 0"):
        pl.AxialPositionalEncoding(0, 2, 2, 2)
    with pytest.raises(TypeError, match="d2 must be an int"):
        pl.AxialPositionalEncoding(2, 2, 2, 2.5)
    with pytest.raises(ValueError, match="gives d_model=5"):
        pl.AxialPositionalEncoding(2, 2, 2, 3).encode_input(
            torch.zeros(1, 2, 4), torch.arange(2)[None]
        )
    with pytest.raises(ValueError, match="d_model >= 2"):
        pl.make_encoding("axial", d_model=1, n_heads=1, max_len=4)


def test_golden_values_of_the_seed_example():
    """n1 = 3, d1 = d2 = 1 (D = 2), as in the slide deck's example:
    P[n] = (P1[n mod 3], P2[n // 3])."""
    pe = pl.AxialPositionalEncoding(3, 2, 1, 1)
    with torch.no_grad():
        pe.p1.copy_(torch.tensor([[10.0], [11.0], [12.0]]))
        pe.p2.copy_(torch.tensor([[0.0], [1.0]]))
    expected = torch.tensor(
        [[10.0, 0.0], [11.0, 0.0], [12.0, 0.0], [10.0, 1.0], [11.0, 1.0], [12.0, 1.0]]
    )
    assert_close(pe.table().detach(), expected)


def test_unused_rows_get_no_gradient():
    pe = pl.AxialPositionalEncoding(4, 4, 2, 2)
    pe.encode_input(torch.zeros(1, 6, 4), torch.arange(6)[None]).pow(2).sum().backward()
    assert (pe.p2.grad[2:] == 0).all() and (pe.p2.grad[:2] != 0).any(
        -1
    ).all()  # segments 0 and 1 only
    assert (pe.p1.grad != 0).any(-1).all()  # every in-segment place is used


def test_parity_with_huggingface_reformer():
    """HF: axial_pos_shape = (n2, n1), axial_pos_embds_dim = (d2, d1), output
    [P2[s] | P1[r]]."""
    golden = json.loads(GOLDEN.read_text())
    for case in golden["cases"]:
        (n2, n1), (d2, d1) = case["axial_pos_shape"], case["axial_pos_embds_dim"]
        w_slow, w_fast = (
            torch.tensor(w) for w in case["weights"]
        )  # (n2, d2), (n1, d1)
        pe = pl.AxialPositionalEncoding(n1, n2, d1, d2)
        with torch.no_grad():
            pe.p1.copy_(w_fast)
            pe.p2.copy_(w_slow)
        pos = torch.tensor(case["position_ids"])
        ours = pe.embed(pos).detach()  # [P1[r] | P2[s]]
        hf = torch.tensor(case["output"])
        assert_close(
            torch.cat((ours[..., d1:], ours[..., :d1]), -1), hf
        )  # reorder columns to HF's
        # The Hugging Face documentation's formula indexes its *first* table by j mod
        # n_s^1 with n_s^1 = axial_pos_shape[0]; the code indexes it by
        # j // axial_pos_shape[1].
        j = pos[0]
        assert_close(hf[0, :, :d2], w_slow[j // n1])
        assert not torch.allclose(hf[0, :, :d2], w_slow[j % n2])

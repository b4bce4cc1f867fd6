"""Learned absolute table: properties, golden values, parity with GPT-2's ``wpe``
(committed golden vectors)."""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = (
    pathlib.Path(__file__).parent / "golden" / "learned_gpt2.json"
)  # from golden/make_learned_golden.py


def test_registered_as_learned_with_a_table_of_max_len_rows():
    pe = pl.make_encoding("learned", d_model=16, n_heads=4, max_len=32)
    assert isinstance(pe, pl.LearnedAbsolute)
    assert pe.table.shape == (32, 16) and pe.table.requires_grad
    assert sum(p.numel() for p in pe.parameters()) == 32 * 16  # N x D parameters


def test_encoding_adds_row_p_to_token_p_at_any_positions_inside_the_table():
    pe = pl.LearnedAbsolute(10, 4)
    x = torch.randn(2, 3, 4)
    pos = torch.tensor([[0, 1, 2], [7, 3, 9]])
    assert_close(pe.encode_input(x, pos), x + pe.table[pos].detach())


def test_positions_past_max_len_are_a_clear_error_not_an_index_error():
    pe = pl.LearnedAbsolute(8, 4)
    x = torch.randn(1, 9, 4)
    with pytest.raises(ValueError, match=r"pos must lie in \[0, max_len\) = \[0, 8\)"):
        pe.encode_input(x, torch.arange(9)[None])
    with pytest.raises(ValueError, match="max_len"):
        pe.encode_input(x[:, :2], torch.tensor([[3, 8]]))
    with pytest.raises(ValueError, match="pos must lie in"):
        pe.encode_input(x[:, :1], torch.tensor([[-1]]))
    with pytest.raises(TypeError, match="integer positions"):
        pe.encode_input(x[:, :1], torch.tensor([[1.0]]))


def test_a_model_with_a_learned_table_refuses_sequences_longer_than_max_len():
    model = pl.TinyTransformer(
        5,
        d_model=16,
        n_heads=2,
        n_layers=1,
        pe=pl.make_encoding("learned", d_model=16, n_heads=2, max_len=12),
    )
    model(torch.randint(5, (1, 12)))  # fits exactly
    with pytest.raises(ValueError, match="max_len"):
        model(torch.randint(5, (1, 13)))
    with pytest.raises(ValueError, match="max_len"):
        model(
            torch.randint(5, (1, 4)), pos=torch.arange(4) + 10
        )  # short, but shifted past the table


def test_rows_that_training_never_reaches_get_exactly_zero_gradient():
    pe = pl.LearnedAbsolute(16, 4)
    pe.encode_input(torch.randn(3, 6, 4), torch.arange(6).expand(3, 6)).pow(
        2
    ).sum().backward()
    assert (pe.table.grad[6:] == 0).all()
    assert (pe.table.grad[:6].abs().sum(-1) > 0).all()


def test_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="max_len must be > 0"):
        pl.LearnedAbsolute(0, 4)
    with pytest.raises(TypeError, match="d_model must be an int"):
        pl.LearnedAbsolute(4, 2.0)
    with pytest.raises(ValueError, match="init_std must be >= 0"):
        pl.LearnedAbsolute(4, 2, init_std=-1.0)
    with pytest.raises(ValueError, match="built for d_model=4"):
        pl.LearnedAbsolute(4, 4).encode_input(
            torch.randn(1, 2, 3), torch.arange(2)[None]
        )


def test_init_std_sets_the_scale_and_the_table_is_in_the_state_dict():
    torch.manual_seed(0)
    pe = pl.LearnedAbsolute(4096, 8, init_std=0.02)
    assert abs(pe.table.std().item() - 0.02) < 0.001
    assert "table" in pe.state_dict()


def test_golden_values():
    pe = pl.LearnedAbsolute(3, 2)
    with torch.no_grad():
        pe.table.copy_(torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]))
    out = pe.encode_input(torch.full((1, 3, 2), 10.0), torch.tensor([[2, 0, 1]]))
    assert_close(out, torch.tensor([[[14.0, 15.0], [10.0, 11.0], [12.0, 13.0]]]))


def test_parity_with_gpt2_wpe():
    """GPT-2 adds wpe[position_ids] to the token embeddings; so does LearnedAbsolute
    with the same table."""
    golden = json.loads(GOLDEN.read_text())
    wte, wpe = torch.tensor(golden["wte"]), torch.tensor(golden["wpe"])
    pe = pl.LearnedAbsolute(golden["n_positions"], wpe.shape[1])
    with torch.no_grad():
        pe.table.copy_(wpe)
    tokens = torch.tensor(golden["tokens"])
    for position_ids, hidden in zip(golden["position_ids"], golden["hidden"]):
        b, n = tokens.shape
        pos = pl.as_positions(
            None if position_ids is None else torch.tensor(position_ids), b, n
        )
        assert_close(pe.encode_input(wte[tokens], pos), torch.tensor(hidden))
    # GPT-2 fails past its table with a bare IndexError; the library says what is wrong.
    assert golden["past_n_positions_raises"] == "IndexError"
    with pytest.raises(ValueError, match="max_len"):
        pe.encode_input(wte[tokens], torch.tensor(golden["position_ids"][1]) + 1)

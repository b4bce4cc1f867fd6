"""The contract every registered encoding keeps, on both attention paths."""

import copy

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

D_MODEL, N_HEADS, MAX_LEN = 32, 4, 64
NAMES = sorted(pl.REGISTRY)


def build(name):
    return pl.make_encoding(name, d_model=D_MODEL, n_heads=N_HEADS, max_len=MAX_LEN)


def test_the_foundation_encodings_are_registered():
    assert {"nope", "sinusoidal"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_is_a_positional_encoding_with_a_four_term_row(name):
    pe = build(name)
    assert isinstance(pe, pl.PositionalEncoding)
    assert set(type(pe).four_terms) == set(pl.FOUR_TERMS)


@pytest.mark.parametrize("name", NAMES)
def test_hook_shapes_and_dtype(name):
    pe = build(name).double()
    b, h, n, d = 2, N_HEADS, 10, D_MODEL // N_HEADS
    pos = torch.arange(n).expand(b, n)
    x = torch.randn(b, n, D_MODEL, dtype=torch.float64)
    y = pe.encode_input(x, pos)
    assert y.shape == x.shape and y.dtype == torch.float64
    q, k = torch.randn(b, h, n, d, dtype=torch.float64), torch.randn(b, h, n, d, dtype=torch.float64)
    q2, k2 = pe.transform_qk(q, k, pos, pos)
    assert q2.shape == q.shape and k2.shape == k.shape
    bias = pe.score_bias(q2, k2, pos, pos)
    if bias is not None:
        torch.broadcast_shapes(bias.shape, (b, h, n, n))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_fast_path_equals_slow_path(name, causal):
    pe = build(name).double()
    if pe.needs_score_path:
        pytest.skip(f"{name} overrides a hook past score_bias: it has no fast path by design")
    mha = pl.MultiHeadAttention(D_MODEL, N_HEADS, pe).double()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    pos = torch.arange(12) + 3
    assert_close(mha(x, pos, causal=causal, path="fast"), mha(x, pos, causal=causal, path="slow"))


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_and_dtype_move(name):
    torch.manual_seed(1)
    a = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=build(name))
    torch.manual_seed(2)
    b = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=build(name))
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    tokens = torch.randint(13, (2, 9))
    assert_close(a(tokens), b(tokens))
    a64 = a.to(torch.float64)
    assert a64(tokens).dtype == torch.float64
    assert all(t.dtype == torch.float64 for t in a64.state_dict().values() if t.is_floating_point())


@pytest.mark.parametrize("name", NAMES)
def test_model_runs_causal_and_bidirectional_with_offsets(name):
    model = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=build(name))
    tokens = torch.randint(13, (2, 9))
    for causal in (False, True):
        out = model(tokens, pos=torch.arange(9) + 5, causal=causal)
        assert out.shape == (2, 9, 13) and torch.isfinite(out).all()


def test_make_encoding_rejects_unknown_names_and_bad_sizes():
    with pytest.raises(KeyError, match="unknown encoding 'nope2'"):
        pl.make_encoding("nope2", d_model=8, n_heads=2, max_len=8)
    with pytest.raises(ValueError, match="n_heads must be > 0"):
        pl.make_encoding("nope", d_model=8, n_heads=0, max_len=8)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        pl.make_encoding("nope", d_model=8, n_heads=3, max_len=8)


def test_four_term_table_has_a_row_per_encoding():
    rows = pl.four_term_table()
    assert [r["encoding"] for r in rows] == list(pl.REGISTRY)
    assert next(r for r in rows if r["encoding"] == "sinusoidal")["hooks"] == "encode_input"


@pytest.mark.parametrize("name", NAMES)
def test_tables_are_buffers_so_to_device_moves_them(name):
    """A plain tensor attribute would be left behind by .to(device) and missing from state_dict."""
    pe = build(name)
    for module in pe.modules():
        plain = [k for k, v in vars(module).items() if isinstance(v, torch.Tensor)]
        assert not plain, f"{name}: tensors {plain} should be registered buffers or parameters"
    device = pl.get_device()
    model = pl.TinyTransformer(13, D_MODEL, N_HEADS, 2, pe=pe).to(device)
    assert all(t.device.type == device.type for t in [*model.parameters(), *model.buffers()])
    out = model(torch.randint(13, (2, 9), device=device), pos=torch.arange(9, device=device) + 2)
    assert out.device.type == device.type


def test_share_pe_false_gives_each_block_its_own_tables():
    shared = pl.TinyTransformer(13, D_MODEL, N_HEADS, 3, pe=build("t5"))
    own = pl.TinyTransformer(13, D_MODEL, N_HEADS, 3, pe=build("t5"), share_pe=False)
    assert all(block.attn.pe is shared.pe for block in shared.blocks)
    assert len({id(block.attn.pe) for block in own.blocks}) == 3
    table = sum(p.numel() for p in shared.pe.parameters())
    assert own.blocks[0].attn.pe is own.pe                          # no table left without a gradient
    assert own.n_params() - shared.n_params() == 2 * table          # one table per block
    assert own(torch.randint(13, (2, 9))).shape == (2, 9, 13)

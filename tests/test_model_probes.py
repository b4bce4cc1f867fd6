"""``TinyTransformer.attention_input`` and ``attention_map``: what one block's
attention reads and computes inside a forward pass, for the chapters that look into a
trained model (FoX's gates, the attention sinks).

Checked against the model run block by block by hand, on every sequence encoding the
fused-path core test covers, and on shifted positions (a relative encoding's weights do
not move, an absolute one's do).
"""

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

ENCODINGS = ["nope", "rope", "alibi", "t5", "fox", "sinusoidal", "learned", "xpos"]


def model(name: str, n_layers: int = 3) -> pl.TinyTransformer:
    torch.manual_seed(0)
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64)
    return pl.TinyTransformer(20, 32, 4, n_layers, pe=pe).eval()


def by_hand(m: pl.TinyTransformer, tokens: torch.Tensor, layer: int):
    """The normalised input of block ``layer`` and its weights, running the blocks one
    at a time (each attention call prepares its own positions)."""
    with torch.no_grad():
        x = m.embed(tokens)
        pos = torch.arange(tokens.shape[1])
        x = m.pe.call_hook("encode_input", x, pos, ctx=pl.Context(x=x, causal=True))
        for block in m.blocks[:layer]:
            x = x + block.attn(block.ln1(x), causal=True)
            x = x + block.mlp(block.ln2(x))
        a = m.blocks[layer].ln1(x)
        _, w = m.blocks[layer].attn(a, causal=True, return_weights=True)
    return a, w


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("layer", [0, 2, -1])
def test_probes_equal_the_blocks_run_by_hand(name, layer):
    m = model(name)
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(1))
    a, w = by_hand(m, tokens, layer % len(m.blocks))
    assert_close(m.attention_input(tokens, layer), a)
    got = m.attention_map(tokens, layer)  # (b h i j)
    assert got.shape == (2, 4, 12, 12)
    assert_close(got, w)
    assert_close(got.sum(-1), torch.ones(2, 4, 12))
    assert (got.triu(1) == 0).all()  # causal: no weight on a later key
    assert not got.requires_grad


def test_weights_follow_the_positions_passed():
    """RoPE's weights do not move when every position shifts by 5 (relative); the
    learned table's do (absolute): the probe hands ``pos`` to the forward pass."""
    tokens = torch.randint(0, 20, (1, 10), generator=torch.Generator().manual_seed(2))
    shifted = torch.arange(10) + 5
    rope, learned = model("rope"), model("learned")
    assert_close(
        rope.attention_map(tokens, 1, pos=shifted),
        rope.attention_map(tokens, 1),
    )
    moved = learned.attention_map(tokens, 1, pos=shifted)
    assert (moved - learned.attention_map(tokens, 1)).abs().max() > 1e-3


def test_probes_leave_the_model_without_hooks():
    m = model("fox")
    tokens = torch.zeros(1, 4, dtype=torch.long)
    m.attention_map(tokens, 0)
    m.attention_input(tokens, 1)
    assert all(not b.attn._forward_pre_hooks for b in m.blocks)


@pytest.mark.parametrize(
    "layer, error, words",
    [
        (3, ValueError, "layer must index one of the 3 blocks"),
        (-4, ValueError, "layer must index one of the 3 blocks"),
        (1.0, TypeError, "layer must be an int"),
        (True, TypeError, "layer must be an int"),
    ],
)
def test_a_bad_layer_is_named(layer, error, words):
    with pytest.raises(error, match=words):
        model("nope").attention_map(torch.zeros(1, 4, dtype=torch.long), layer)

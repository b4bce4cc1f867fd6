"""What a library user meets after a slip, said in the library's words: the argument,
what it takes, and what to do instead (never a bare ``AttributeError`` or torch's
"missing forward").

- integer positions passed as ``positions=`` (which takes a prepared ``Positions``);
- an input encoding given to a lone layer: ``input_encoded`` belongs to the layer's
  constructor, not to its call;
- an encoding called like a layer (``pe(x)``);
- a registered name in the wrong case, or misspelt: the closest names first;
- q and k in Hugging Face's ``(b, n, h, d)`` layout, where positions tell.
"""

from __future__ import annotations

import pytest
import torch

import posenc_lib as pl

B, N, H, D = 2, 10, 4, 16


@pytest.mark.parametrize("call", ["layer", "attention"])
def test_integer_positions_given_as_positions_name_pos(call):
    pos = torch.arange(N)
    with pytest.raises(TypeError, match="positions= takes the Positions") as info:
        if call == "layer":
            pl.MultiHeadAttention(H * D, H, pe="rope")(
                torch.randn(B, N, H * D), positions=pos
            )
        else:
            q = torch.randn(B, H, N, D)
            pl.attention(q, q, q, "rope", positions=pos)
    said = str(info.value)
    assert ("pos=" if call == "layer" else "q_pos=") in said and "Tensor" in said


def test_the_input_encoding_refusal_says_input_encoded_is_the_layers_argument():
    pe = pl.make_encoding("sinusoidal", H * D, H, max_len=N)
    with pytest.raises(ValueError) as info:
        pl.MultiHeadAttention(H * D, H, pe=pe)
    said = str(info.value)
    assert "pl.MultiHeadAttention(d_model, n_heads, pe, input_encoded=True)" in said
    assert "not of its call" in said
    # what it says works
    layer = pl.MultiHeadAttention(H * D, H, pe=pe, input_encoded=True)
    x = torch.randn(B, N, H * D)
    x = pe.call_hook("encode_input", x, torch.arange(N)[None])
    assert layer(x).shape == (B, N, H * D)


@pytest.mark.parametrize(
    "name, hooks", [("sinusoidal", "encode_input"), ("rope", "transform_qk")]
)
def test_calling_an_encoding_says_how_it_is_used(name, hooks):
    pe = pl.make_encoding(name, H * D, H, max_len=N)
    with pytest.raises(TypeError) as info:
        pe(torch.randn(B, N, H * D))
    said = str(info.value)
    assert "not called on its own" in said and hooks in said
    assert "pl.MultiHeadAttention(d_model, n_heads, pe=pe)" in said
    assert "forward" not in said


@pytest.mark.parametrize(
    "wrong, right",
    [("RoPE", "rope"), ("Alibi", "alibi"), ("sinusiodal", "sinusoidal"), ("T5", "t5")],
)
def test_a_wrong_name_suggests_the_closest_first(wrong, right):
    for build in (
        lambda: pl.make_encoding(wrong, H * D, H),
        lambda: pl.MultiHeadAttention(H * D, H, pe=wrong),
    ):
        with pytest.raises(KeyError) as info:
            build()
        said = str(info.value)
        assert f"did you mean {right!r}" in said
        assert said.index(f"{right!r}") < said.index("registered:")
    with pytest.raises(KeyError, match="registered: ") as info:
        pl.make_encoding("xyzzy", H * D, H)
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("name", ["rope", "nope"])
@pytest.mark.parametrize("which", ["q_pos", "k_pos"])
def test_hugging_faces_layout_is_refused_when_positions_tell(name, which):
    """q, k, v ``(b, n, h, d)`` (a Hugging Face projection before ``.transpose(1,
    2)``) with positions of length n: refused, naming the transpose; transposed, the
    same call runs."""
    q = torch.randn(B, N, H, D)  # (b, n, h, d)
    pos = {which: torch.arange(N)}
    with pytest.raises(ValueError) as info:
        pl.attention(q, q, q, name, causal=True, **pos)
    said = str(info.value)
    assert "(b, n, h, d)" in said and f"{which[0]}.transpose(1, 2)" in said
    t = q.transpose(1, 2)
    assert pl.attention(t, t, t, name, causal=True, **pos).shape == (B, H, N, D)


def test_apply_rope_names_hugging_faces_layout():
    x = torch.randn(B, N, H, D)
    inv_freq = pl.rope_inv_freq(D)[0]
    with pytest.raises(ValueError, match=r"x.transpose\(1, 2\)"):
        pl.apply_rope(x, torch.arange(N), inv_freq)
    assert pl.apply_rope(x.transpose(1, 2), torch.arange(N), inv_freq).shape == (
        B,
        H,
        N,
        D,
    )


def test_the_attention_docstring_says_how_to_tell_the_layouts_apart():
    doc = pl.attention.__doc__
    assert "(b, n, h, d)" in doc and "q.shape[2]" in doc

"""DeepSeek-V4's compressed attention: rotated values (``ValueRotary``), compressed
keys (``pool_blocks``, ``block_positions``, ``block_visible``, ``Compressor``,
``CompressedAttention``) and their rotation (``compress_inv_freq``). Properties
first, then parity with Hugging Face transformers' model code
(tests/golden/make_compressed_golden.py: DeepSeek-V4 and Qwen4-Exp)."""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "compressed_hf.json").read_text()
)
T = dict(dtype=torch.float64)


def rotation(d: int, angle: torch.Tensor, layout: str = "interleaved"):
    """The (..., d, d) matrix R that ``apply_rope`` applies for these angles (one per
    pair, ``angle`` (..., d/2)): built from 2x2 blocks, independently of the library."""
    c, s = angle.cos(), angle.sin()
    rot = torch.zeros(*angle.shape[:-1], d, d, dtype=angle.dtype)
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
        rot[..., a, a], rot[..., a, b] = c[..., i], -s[..., i]
        rot[..., b, a], rot[..., b, b] = s[..., i], c[..., i]
    return rot


# ------------------------------------------------------- rotated values: properties


@pytest.mark.parametrize("rope_at", ["first", "last"])
def test_rotated_values_mix_by_offset_only(rope_at):
    """out_i = sum_j a_ij R_{p_j - p_i} v_j: each value enters through its offset,
    with the attention's own weights (explicit rotation matrices, not the library's
    rotation)."""
    g = torch.Generator().manual_seed(0)
    b, h, n, d, r = 2, 3, 7, 12, 8
    pe = pl.SinkValueRotary(d, h, rotary_dim=r, rope_at=rope_at).double()
    with torch.no_grad():
        pe.sinks.copy_(torch.randn(h, generator=g))
    q, k, v = (torch.randn(b, h, n, d, generator=g, **T) for _ in range(3))
    pos = torch.randint(0, 50, (b, n), generator=g).sort(-1).values
    out, w = pl.attention(q, k, v, pe, pos, pos, causal=True, return_weights=True)
    offset = (pos[:, None, :] - pos[:, :, None]).to(torch.float64)  # (b, i, j): j - i
    angles = offset[..., None] * pe.inv_freq  # (b, i, j, r/2)
    rot = torch.eye(d, **T).repeat(b, n, n, 1, 1)  # (b, i, j, d, d)
    cut = slice(d - r, d) if rope_at == "last" else slice(0, r)
    rot[..., cut, cut] = rotation(r, angles)
    # sum_j a_ij R_{p_j - p_i} v_j
    expected = torch.einsum("bhij,bijde,bhje->bhid", w, rot, v)
    assert_close(out, expected)


def test_rotated_values_are_shift_invariant_and_plain_rotated_ones_are_not():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g, **T) for _ in range(3))
    pos = torch.arange(9)[None] * 2
    pe = pl.ValueRotary(8).double()
    out = pl.attention(q, k, v, pe, pos, pos, causal=True)
    for shift in (1, 37, 1000):
        moved = pl.attention(q, k, v, pe, pos + shift, pos + shift, causal=True)
        assert_close(moved, out)

    class NotBack(pl.ValueRotary):  # values rotated, the output left as it is
        def transform_out(self, out, q_pos, ctx=None):
            return out

    absolute = NotBack(8).double()
    a0 = pl.attention(q, k, v, absolute, pos, pos, causal=True)
    a1 = pl.attention(q, k, v, absolute, pos + 37, pos + 37, causal=True)
    assert (a0 - a1).abs().max() > 0.1  # it carries the absolute position


def test_the_output_rotation_undoes_the_value_rotation_at_one_key():
    """One visible key, at the query's own position: out = v exactly."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 1, 8, generator=g, **T) for _ in range(3))
    pe = pl.ValueRotary(8).double()
    for p in (0, 5, 123):
        at = torch.tensor([[p]])
        assert_close(pl.attention(q, k, v, pe, at, at), v)


@pytest.mark.parametrize("path", ["fused", "reference"])
def test_rotated_values_decode_with_a_cache_as_the_full_pass(path):
    torch.manual_seed(3)
    layer = pl.MultiHeadAttention(16, 2, pl.SinkValueRotary(8, 2)).double()
    x = torch.randn(1, 7, 16, **T)
    full = layer(x, causal=True, path=path)
    cache = pl.KVCache()
    steps = [
        layer(x[:, t : t + 1], causal=True, cache=cache, path=path) for t in range(7)
    ]
    assert_close(torch.cat(steps, 1), full)


def test_gradients_agree_on_the_fast_and_the_slow_path():
    torch.manual_seed(4)
    pe = pl.SinkValueRotary(8, 2, rotary_dim=4).double()
    with torch.no_grad():
        pe.sinks.normal_()
    layer = pl.MultiHeadAttention(16, 2, pe).double()
    x = torch.randn(2, 9, 16, **T, requires_grad=True)
    grads = []
    for path in ("reference", "fused"):
        x.grad = None
        layer.zero_grad()
        layer(x, torch.arange(9) * 3, causal=True, path=path).square().sum().backward()
        grads.append([x.grad.clone(), *(p.grad.clone() for p in layer.parameters())])
    for slow, fast in zip(*grads):
        assert_close(fast, slow)


def test_flex_runs_rotated_values_between_its_transforms():
    """FlexAttention (forward, float32) with rotated values and no sinks equals the
    reference; with sinks it refuses, naming the hook it cannot take."""
    torch.manual_seed(10)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))
    pos = torch.arange(12)[None] * 2 + 3
    pe = pl.ValueRotary(8)
    with torch.no_grad():
        slow = pl.attention(q, k, v, pe, pos, pos, causal=True, path="reference")
        try:
            flex = pl.attention(q, k, v, pe, pos, pos, causal=True, path="flex")
        except RuntimeError as error:  # no C++ compiler here: the library says so
            assert "path='flex'" in str(error)
            pytest.skip(str(error))
    assert_close(flex, slow, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="attention_weights"):
        pl.attention(q, k, v, pl.SinkValueRotary(8, 2), pos, pos, path="flex")


# ---------------------------------------------------- compressed keys: properties


def test_pooling_is_a_per_channel_softmax_over_the_block():
    g = torch.Generator().manual_seed(5)
    b, n, d, m = 2, 11, 6, 4
    kv, gate = (torch.randn(b, n, d, generator=g, **T) for _ in range(2))
    bias = torch.randn(m, d, generator=g, **T)
    got = pl.pool_blocks(kv, gate, m, bias)
    assert got.shape == (b, n // m, d)  # the open block (tokens 8-10) waits
    for w in range(n // m):
        block = slice(w * m, (w + 1) * m)
        # C_w = sum_s softmax_s(Z_{wm+s} + B_s) * K_{wm+s}, channel by channel
        weights = torch.softmax(gate[:, block] + bias, dim=1)  # (b, m, d)
        assert_close(got[:, w], (weights * kv[:, block]).sum(1))
    # constant gates and no bias: the mean of the block (Qwen4-Exp's pooling)
    assert_close(
        pl.pool_blocks(kv, torch.zeros_like(kv), m), kv[:, :8].view(b, 2, m, d).mean(2)
    )


def test_block_positions_place_each_entry_inside_its_block():
    pos = torch.arange(10)[None] + 100
    assert pl.block_positions(pos, 4, "first").tolist() == [[100, 104]]
    assert pl.block_positions(pos, 4, "middle").tolist() == [[102, 106]]
    assert pl.block_positions(pos, 4, "last").tolist() == [[103, 107]]
    assert pl.block_positions(torch.arange(3), 4).shape == (1, 0)  # no whole block


@pytest.mark.parametrize("m", [1, 3, 4, 128])
def test_closed_blocks_are_v4s_causal_threshold(m):
    """last_w <= t  <=>  w < (t + 1) // m  (DeepseekV4HCACompressor's rule)."""
    n = 3 * m + 2
    pos = torch.arange(n)[None]
    last = pl.block_positions(pos, m, "last")
    seen = pl.block_visible(pos, last)[0, 0]  # (i, w)
    w = torch.arange(last.shape[1])
    assert torch.equal(seen, w[None, :] < (pos[0, :, None] + 1) // m)


@pytest.mark.parametrize("place", pl.PLACES)
def test_no_compressed_key_reveals_a_token_after_the_query(place):
    """Whatever the placement, a query's output does not move when later tokens do:
    the blocks it sees are closed."""
    torch.manual_seed(6)
    layer = pl.CompressedAttention(16, 2, window=3, m=4, place=place).double()
    x = torch.randn(2, 17, 16, **T)
    out = layer(x)
    for t in range(16):
        y = x.clone()
        y[:, t + 1 :] = torch.randn_like(y[:, t + 1 :])
        assert_close(layer(y)[:, : t + 1], out[:, : t + 1])


def test_a_plain_causal_rule_on_the_first_position_leaks_the_block():
    """Seeing a block once its placed position is <= the query's (the rule a plain
    causal mask would apply) reads later tokens when the entry sits first, and no
    later token when it sits last."""

    class ByPlace(pl.CompressedAttention):
        def block_mask(self, q_pos, block_pos, block_last):
            return block_pos[:, None, None, :] <= q_pos[:, None, :, None]

    torch.manual_seed(7)
    x = torch.randn(1, 12, 16, **T)
    y = x.clone()
    y[:, 5:] += 1.0  # tokens 5.. change; query 4 sits first in block 1 (4..7)
    for place, leaks in (("first", True), ("last", False)):
        layer = ByPlace(16, 2, window=2, m=4, place=place).double()
        moved = (layer(x)[:, 4] - layer(y)[:, 4]).abs().max()
        assert (moved > 1e-3) == leaks, (place, moved)


def test_compressed_attention_is_shift_invariant():
    """Blocks are cut by token index and placed at their tokens' positions, and
    every rotation is relative: shifting every position changes nothing."""
    torch.manual_seed(8)
    layer = pl.CompressedAttention(16, 2, window=3, m=4).double()
    x = torch.randn(2, 13, 16, **T)
    out = layer(x)
    for shift in (1, 5, 1000):
        assert_close(layer(x, torch.arange(13) + shift), out)


def test_compressed_attention_runs_the_same_on_every_path():
    torch.manual_seed(9)
    layer = pl.CompressedAttention(16, 2, window=3, m=4, rotary_dim=4).double()
    with torch.no_grad():
        layer.pe.sinks.normal_()
        layer.compressor.position_bias.normal_()
    x = torch.randn(2, 13, 16, **T, requires_grad=True)
    grads = []
    for path in ("reference", "fused"):
        x.grad = None
        layer.zero_grad()
        layer(x, path=path).square().sum().backward()
        grads.append([x.grad.clone(), *(p.grad.clone() for p in layer.parameters())])
    for slow, fast in zip(*grads):
        assert_close(fast, slow)


def test_compress_inv_freq_is_yarn_with_attention_factor_one():
    inv_freq, factor = pl.compress_inv_freq(
        64, factor=16.0, original_max_position_embeddings=65536
    )
    yarn, yarn_factor = pl.rope_inv_freq(
        64, 160000.0, "yarn", factor=16.0, original_max_position_embeddings=65536
    )
    assert factor == 1.0 and yarn_factor == pytest.approx(0.1 * math.log(16) + 1)
    assert_close(inv_freq, yarn)
    plain, one = pl.compress_inv_freq(64)
    assert one == 1.0 and plain[1] == pytest.approx(160000.0 ** (-2 / 64))


def test_bad_arguments_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="place must be one of"):
        pl.block_positions(torch.arange(8), 4, "end")
    with pytest.raises(ValueError, match="m must be"):
        pl.block_positions(torch.arange(8), 0)
    with pytest.raises(TypeError, match="pos must hold integer"):
        pl.block_positions(torch.arange(8.0), 4)
    with pytest.raises(ValueError, match=r"position_bias must be \(m, d\)"):
        pl.pool_blocks(torch.randn(1, 8, 4), torch.randn(1, 8, 4), 4, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="one shape"):
        pl.pool_blocks(torch.randn(1, 8, 4), torch.randn(1, 8, 3), 4)
    with pytest.raises(ValueError, match="pure rotation"):
        pl.ValueRotary(8, scaling="yarn", factor=4.0,
                       original_max_position_embeddings=32)  # fmt: skip
    with pytest.raises(ValueError, match="rope_at"):
        pl.ValueRotary(8, rope_at="middle")
    with pytest.raises(ValueError, match="n_heads"):
        pl.SinkValueRotary(8, 0)
    q = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match="values must be as wide"):
        pl.attention(q, q, torch.randn(1, 1, 3, 4), pl.ValueRotary(8))


# ------------------------------------------------- golden values: DeepSeek-V4 (HF)

V4 = GOLDEN["deepseek_v4"]
CFG = V4["config"]


def v4_rotary():
    """The rotation of V4's compressed layers in the golden configuration."""
    yarn = dict(CFG["rope_parameters"]["compress"])
    return pl.SinkValueRotary(
        CFG["head_dim"], CFG["n_heads"], base=CFG["compress_rope_theta"],
        rotary_dim=CFG["rope_dim"], rope_at="last", scaling="yarn",
        factor=yarn["factor"],
        original_max_position_embeddings=yarn["original_max_position_embeddings"],
        beta_fast=yarn["beta_fast"], beta_slow=yarn["beta_slow"],
        attention_factor=yarn["attention_factor"],
    ).double()  # fmt: skip


def test_the_library_restates_deepseek_v4s_defaults():
    defaults = dict(GOLDEN["deepseek_v4_defaults"])
    layer_types = defaults.pop("layer_types")
    assert pl.DEEPSEEK_V4_DEFAULTS == defaults
    # the default schedule: HCA twice, then HCA and CSA alternating
    assert layer_types[:2] == ["heavily_compressed_attention"] * 2
    assert layer_types[2::2] == ["heavily_compressed_attention"] * len(
        layer_types[2::2]
    )
    assert set(layer_types[3::2]) == {"compressed_sparse_attention"}


def test_v4_rotaries_match_transformers():
    r = CFG["rope_dim"]
    yarn = CFG["rope_parameters"]["compress"]
    inv_freq, factor = pl.compress_inv_freq(
        r, CFG["compress_rope_theta"], yarn["factor"],
        yarn["original_max_position_embeddings"],
        beta_fast=yarn["beta_fast"], beta_slow=yarn["beta_slow"],
    )  # fmt: skip
    assert_close(
        inv_freq, torch.tensor(V4["compress_inv_freq"], **T), rtol=1e-6, atol=0
    )
    assert factor == V4["compress_attention_factor"] == 1.0
    unforced = pl.rope_inv_freq(
        r, CFG["compress_rope_theta"], "yarn", factor=yarn["factor"],
        original_max_position_embeddings=yarn["original_max_position_embeddings"],
    )[1]  # fmt: skip
    assert unforced == pytest.approx(V4["yarn_attention_factor_unforced"])
    main, one = pl.rope_inv_freq(r, CFG["rope_theta"])
    assert_close(main, torch.tensor(V4["main_inv_freq"], **T), rtol=1e-6, atol=0)
    assert one == V4["main_attention_factor"] == 1.0


def v4_compressor():
    c = V4["compressor"]
    d = CFG["head_dim"]
    comp = pl.Compressor(len(c["kv_proj"][0]), d, CFG["m"], CFG["rms_norm_eps"])
    with torch.no_grad():
        comp.kv_proj.weight.copy_(torch.tensor(c["kv_proj"]))
        comp.gate_proj.weight.copy_(torch.tensor(c["gate_proj"]))
        comp.position_bias.copy_(torch.tensor(c["position_bias"]))
        comp.norm_weight.copy_(torch.tensor(c["norm_weight"]))
    return comp.double()


def test_v4_compressor_pools_places_and_rotates_as_transformers():
    c = V4["compressor"]
    x = torch.tensor(V4["hidden"], **T)  # (b, n, D)
    n = x.shape[1]
    entries, where, last = v4_compressor()(x, torch.arange(n))
    assert_close(entries, torch.tensor(c["pooled"], **T), rtol=1e-5, atol=1e-5)
    assert where.tolist()[0] == c["positions"][0]  # the blocks' first tokens: 0, m, ..
    seen = pl.block_visible(torch.arange(n)[None], last)[0, 0]  # (i, w)
    assert seen.tolist() == [[bool(v) for v in row] for row in c["visible"][0]]
    pe = v4_rotary()
    turned, _ = pe.transform_qk(entries[:, None], entries[:, None], where, where)
    assert_close(turned[:, 0], torch.tensor(c["rotated"], **T), rtol=1e-5, atol=1e-5)


def test_v4_attention_matches_transformers():
    """Window keys and compressed entries, rotated values, learned sinks and the
    de-rotated output: pl.attention with ValueRotary gives V4's attention output,
    and without the output rotation the output before it."""
    q = torch.tensor(V4["q"], **T)  # (b, h, n, d), before RoPE
    kv = torch.tensor(V4["kv"], **T)  # (b, n, d), before RoPE
    entries = torch.tensor(V4["compressor"]["pooled"], **T)  # (b, w, d)
    b, h, n, d = q.shape
    pos = torch.arange(n)[None]
    where = pl.block_positions(pos, CFG["m"])
    offset = pos[0, :, None] - pos[0, None, :]
    window = (offset >= 0) & (offset < CFG["window"])
    assert window.tolist() == [[bool(v) for v in row] for row in V4["mask"][0]]
    seen = pl.block_visible(pos, pl.block_positions(pos, CFG["m"], "last"))[0, 0]
    keys = torch.cat([kv, entries], 1)[:, None].expand(b, h, -1, d)
    k_pos = torch.cat([pos, where], 1)
    mask = torch.cat([window, seen], -1)
    pe = v4_rotary()
    with torch.no_grad():
        pe.sinks.copy_(torch.tensor(V4["sinks"]))
    assert 1 / math.sqrt(d) == pytest.approx(CFG["scaling"])
    for path in ("reference", "fused"):
        out = pl.attention(q, keys, keys, pe, pos, k_pos, mask=mask, path=path)
        assert_close(out, torch.tensor(V4["out"], **T), rtol=1e-4, atol=1e-5)

    class Unturned(pl.SinkValueRotary):
        def transform_out(self, out, q_pos, ctx=None):
            return out

    pe.__class__ = Unturned  # the same rotation and sinks, no output rotation
    out = pl.attention(q, keys, keys, pe, pos, k_pos, mask=mask)
    assert_close(out, torch.tensor(V4["rotated_out"], **T), rtol=1e-4, atol=1e-5)


# --------------------------------------------------- golden values: Qwen4-Exp (HF)


@pytest.mark.parametrize("case", GOLDEN["qwen4_exp"], ids=lambda c: str(c["starts"]))
def test_qwen4_exp_mean_pools_and_places_at_the_first_visible_token(case):
    """Qwen4-Exp's indexer cuts the query's VISIBLE tokens into blocks of m, pools
    each by its mean (pool_blocks with constant gates) and rotates it at the block's
    first token (half layout, the first rotary_dim coordinates)."""
    m = CFG["m"]
    keys = torch.tensor(case["raw_keys"], **T)  # (n, d)
    visible = torch.arange(case["hidden_first"], keys.shape[0])  # the last query's
    pooled = pl.pool_blocks(
        keys[visible][None], torch.zeros_like(keys[visible][None]), m
    )
    assert_close(pooled[0], torch.tensor(case["pooled"], **T), rtol=1e-5, atol=1e-6)
    starts = pl.block_positions(visible, m, "first")[0]
    assert starts.tolist() == case["starts"]
    normed = torch.tensor(case["normed"], **T)  # (w, d)
    r = len(case["cos"][0])
    inv_freq, _ = pl.rope_inv_freq(r, 10000.0)
    turned = pl.apply_rope(normed, starts, inv_freq, "half", rotary_dim=r)
    assert_close(turned, torch.tensor(case["rotated"], **T), rtol=1e-5, atol=1e-5)

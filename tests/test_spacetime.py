"""Factorised space-time embedding (TimeSformer): the sum structure, table lookups,
and clear errors. TimeSformer's and MAE-ST's code add the two tables exactly as
``encode_input`` does; the lookup is checked against an explicit loop."""

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl


def build(t=3, h=2, w=4, d=6, seed=0):
    torch.manual_seed(seed)
    return pl.SpaceTimeEmbedding(d, t, h, w).double()


def grid(t, h, w):
    """All (t, h, w) of a T x H x W video, frames outer: (1, T*H*W, 3)."""
    pos = torch.cartesian_prod(torch.arange(t), torch.arange(h), torch.arange(w))
    return pos[None]


# ---------------------------------------------------------------- properties


def test_embedding_is_time_row_plus_place_row():
    pe = build()
    pos = grid(3, 2, 4)
    x = torch.zeros(1, 24, 6, dtype=torch.float64)
    out = pe.encode_input(x, pos)[0]
    for n, (t, h, w) in enumerate(pos[0].tolist()):
        assert_close(out[n], pe.time[t] + pe.space[h, w])
    assert_close(pe.spacetime_table().reshape(24, 6), out)


def test_difference_between_frames_is_the_same_at_every_place():
    """P[t] - P[t'] = E_time[t] - E_time[t'] for every (h, w): the sum's constraint."""
    table = build().spacetime_table()  # (T, H, W, D)
    diff = table[2] - table[0]  # (H, W, D)
    assert_close(diff, (build().time[2] - build().time[0]).expand_as(diff))
    # a generic joint table has no such structure
    joint = torch.randn(3, 2, 4, 6, dtype=torch.float64)
    assert (joint[2] - joint[0]).std(dim=(0, 1)).min() > 0.1


def test_a_joint_table_tiled_from_the_spatial_one_is_the_sum_with_zero_time():
    """ViViT's initialisation (repeat the image table over frames) = this sum with
    E_time = 0."""
    pe = build()
    with torch.no_grad():
        pe.time.zero_()
    tiled = pe.space[None].expand(3, 2, 4, 6)
    assert_close(pe.spacetime_table(), tiled)


def test_parameter_count_is_t_plus_h_w_rows():
    pe = pl.SpaceTimeEmbedding(16, 8, 14, 14)
    assert sum(p.numel() for p in pe.parameters()) == (8 + 14 * 14) * 16


def test_input_is_added_to_and_gradients_reach_both_tables():
    pe = build()
    x = torch.randn(2, 24, 6, dtype=torch.float64)
    pos = grid(3, 2, 4).expand(2, 24, 3)
    out = pe.encode_input(x, pos)
    assert_close(out - x, pe.encode_input(torch.zeros_like(x), pos))
    out.sum().backward()
    assert pe.time.grad.abs().sum() > 0 and pe.space.grad.abs().sum() > 0


def test_runs_in_a_model_with_video_coordinates():
    pe = pl.make_encoding("spacetime", d_model=32, n_heads=4, max_len=16)
    model = pl.TinyTransformer(11, 32, 4, 2, pe=pe)
    out = model(torch.randint(11, (2, 16)), pos=grid(4, 2, 2)[0], causal=False)
    assert out.shape == (2, 16, 11)


# ---------------------------------------------------------------- bad input


def test_coordinates_past_a_table_are_named():
    pe = build()
    x = torch.zeros(1, 1, 6, dtype=torch.float64)
    with pytest.raises(
        ValueError, match=r"pos\[\.\.\., 0\] \(t\) must lie in \[0, 3\)"
    ):
        pe.encode_input(x, torch.tensor([[[3, 0, 0]]]))
    with pytest.raises(ValueError, match=r"\(w\) must lie in \[0, 4\)"):
        pe.encode_input(x, torch.tensor([[[0, 0, 4]]]))
    with pytest.raises(ValueError, match=r"\(h\) must lie in \[0, 2\)"):
        pe.encode_input(x, torch.tensor([[[0, -1, 0]]]))


def test_bad_shapes_and_sizes():
    pe = build()
    with pytest.raises(TypeError, match="integer coordinates"):
        pe.encode_input(torch.zeros(1, 1, 6), torch.zeros(1, 1, 3))
    with pytest.raises(ValueError, match=r"shape \(b, n, 3\)"):
        pe.encode_input(torch.zeros(1, 1, 6), torch.zeros(1, 1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have shape \(b, n, 6\)"):
        pe.encode_input(torch.zeros(1, 1, 5), torch.zeros(1, 1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="height must be > 0"):
        pl.SpaceTimeEmbedding(6, 3, 0, 4)
    with pytest.raises(ValueError, match="init_std must be a finite number >= 0"):
        pl.SpaceTimeEmbedding(6, 3, 2, 4, init_std=-1.0)

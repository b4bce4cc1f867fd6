"""Video and diffusion rotary layouts: properties, and parity with the models' code.

Parity runs without transformers or diffusers: ``tests/golden/video_rope.json`` holds
the reference outputs, produced by ``tests/golden/make_video_rope_golden.py`` (which
states the versions and, for VideoRoPE and RIFLEx, the transcribed commits).
"""

import json
import math
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "video_rope.json").read_text()
)


def segments_of(case):
    return [(k, tuple(s) if isinstance(s, list) else s) for k, s in case["segments"]]


def cos_sin(angles, layout):
    """(n, d/2) angles -> (n, d) cos, sin in the given pair layout."""
    full = angles.repeat_interleave(2, -1) if layout == "interleaved" else angles
    if layout == "half":
        full = torch.cat([angles, angles], -1)
    return full.cos(), full.sin()


# ---------------------------------------------------------------- VideoRoPE


@pytest.mark.parametrize("case", GOLDEN["videorope"]["cases"], ids=lambda c: c["name"])
def test_videorope_ids_match_get_t_scale_rope_index(case):
    ids = pl.videorope_position_ids(
        segments_of(case),
        case["spatial_merge_size"],
        GOLDEN["videorope"]["scale_factor"],
    )
    assert ids.dtype == torch.int64
    assert ids.tolist() == torch.tensor(case["ids"]).long().tolist()


@pytest.mark.parametrize("key", ["columns", "columns_128"])
def test_videorope_axes_match_the_recomposed_columns(key):
    ref = GOLDEN["videorope"][key]
    axes = pl.videorope_axes(ref["section"])
    assert torch.cat([axes, axes]).tolist() == ref["axis"]  # rotate_half: i, i + d/2


def test_videorope_puts_time_on_the_slowest_pairs():
    axes = pl.videorope_axes([16, 24, 24])
    assert axes[48:].tolist() == [0] * 16 and set(axes[:48].tolist()) == {1, 2}
    # M-RoPE (Qwen2-VL) puts time on the fastest
    assert pl.mrope_axes([16, 24, 24])[:16].tolist() == [0] * 16


def test_videorope_is_rope_on_text_and_relative():
    pe = pl.VideoRotary(16)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 6, 16, generator=g, dtype=torch.float64) for _ in "qk")
    p = torch.tensor([[0, 2, 3, 7, 8, 20]])
    text = p[..., None].expand(1, 6, 3)
    assert_close(
        pe.transform_qk(q, k, text, text), pl.Rotary(16).transform_qk(q, k, p, p)
    )
    c = pl.videorope_position_ids([("video", (2, 2, 3))])[:6][None]
    a, b = pe.transform_qk(q, k, c, c)
    a2, b2 = pe.transform_qk(
        q, k, c + torch.tensor([4, -2, 9]), c + torch.tensor([4, -2, 9])
    )
    assert_close(a @ b.mT, a2 @ b2.mT)


@pytest.mark.parametrize("first", [("video", (2, 3, 3)), ("image", (4, 5))])
def test_videorope_a_sequence_that_starts_with_a_visual_segment(first):
    """The authors' layout puts h = t + eta - (H'-1)//2 below 0 when the sequence
    starts with a video or an image (their RoPE rotates by negative angles); the
    library's positions are >= 0, so the ids are shifted by one constant on every
    axis: every offset, hence every score, is the authors'. Attention with
    VideoRotary then runs (it refused h, w = -1)."""
    segments = [first, ("text", 2)]
    ids = pl.videorope_position_ids(segments)
    assert int(ids.min()) == 0
    # the authors' ids: with nothing before it, the segment starts at s = 0
    grid = first[1] if first[0] == "video" else (1, *first[1])
    tau, eta, omega = torch.meshgrid(*(torch.arange(s) for s in grid), indexing="ij")
    t = 2 * tau  # temporal_spacing 2
    hh, ww = grid[1:]
    visual = torch.stack([t, t + eta - (hh - 1) // 2, t + omega - (ww - 1) // 2], -1)
    text = int(t.max()) + 1 + torch.arange(2)[:, None].expand(2, 3)
    authors = torch.cat([visual.reshape(-1, 3), text])
    assert (ids - authors).unique(dim=0).shape[0] == 1  # one shift for every id
    assert (ids - authors)[0].unique().numel() == 1  # the same on every axis
    pe = pl.VideoRotary(16)
    g = torch.Generator().manual_seed(0)
    n = len(ids)
    q, k, v = (
        torch.randn(1, 2, n, 16, generator=g, dtype=torch.float64) for _ in "qkv"
    )
    a, b = pe.transform_qk(q, k, ids[None], ids[None])
    a2, b2 = pe.transform_qk(q, k, authors[None], authors[None])
    assert_close(a @ b.mT, a2 @ b2.mT)  # the authors' scores
    out = pl.attention(q, k, v, pe, ids, ids, causal=True)
    assert torch.isfinite(out).all()


def test_videorope_temporal_spacing_and_float_ids():
    ids = pl.videorope_position_ids([("video", (3, 1, 1)), ("text", 1)], 1, 1.5)
    assert ids.dtype == torch.float64 and ids[:, 0].tolist() == [0, 1.5, 3, 4]


# ---------------------------------------------------------------- FLUX, Wan


def test_flux_frequencies_match_flux_pos_embed():
    ref = GOLDEN["flux"]
    assert ref["axes_dims_rope"] == [16, 56, 56]
    ids = torch.tensor(ref["ids"]).long()
    freqs = pl.flux_rope_frequencies()
    angles = pl.rotary_angles(ids[None], freqs)[0, 0]  # (n, 64)
    cos, sin = cos_sin(angles, "interleaved")
    assert_close(cos.float(), torch.tensor(ref["cos"]), atol=1e-5, rtol=0)
    assert_close(sin.float(), torch.tensor(ref["sin"]), atol=1e-5, rtol=0)
    q = torch.tensor(ref["q"])
    q_rot, _ = pl.AxesRotary((16, 56, 56)).transform_qk(q, q, ids[None], ids[None])
    assert_close(q_rot, torch.tensor(ref["q_rot"]), atol=2e-5, rtol=1e-5)


def test_wan_split_and_table_match_wan_rotary_pos_embed():
    ref = GOLDEN["wan"]
    assert list(pl.wan_rope_split(128)) == ref["split"] == [44, 42, 42]
    t, h, w = ref["grid"]
    coords = torch.cartesian_prod(torch.arange(t), torch.arange(h), torch.arange(w))
    angles = pl.rotary_angles(coords[None], pl.axes_rope_frequencies(ref["split"]))
    cos, sin = cos_sin(angles[0, 0], "interleaved")
    assert_close(cos.float(), torch.tensor(ref["cos"]), atol=1e-5, rtol=0)
    assert_close(sin.float(), torch.tensor(ref["sin"]), atol=1e-5, rtol=0)


def test_axes_rope_scores_depend_on_offsets_only():
    pe = pl.AxesRotary((4, 6, 6))
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 1, 5, 16, generator=g, dtype=torch.float64) for _ in "qk")
    c = torch.randint(0, 30, (1, 5, 3), generator=g)
    a, b = pe.transform_qk(q, k, c, c)
    a2, b2 = pe.transform_qk(q, k, c + 7, c + 7)
    assert_close(a @ b.mT, a2 @ b2.mT)


# ---------------------------------------------------------------- RIFLEx


@pytest.mark.parametrize("case", GOLDEN["riflex"]["identify_k"], ids=str)
def test_riflex_intrinsic_index_matches_identify_k(case):
    k_nk = pl.riflex_intrinsic_index(case["b"], case["d"], case["N"])
    assert list(k_nk) == case["k_Nk"]


@pytest.mark.parametrize("case", GOLDEN["riflex"]["frequencies"], ids=str)
def test_riflex_frequencies_match_the_reference(case):
    freqs = pl.riflex_frequencies(case["dim"], case["theta"], case["k"], case["L"])
    assert_close(freqs.float(), torch.tensor(case["freqs"]), atol=1e-6, rtol=1e-6)
    # L frames now stay inside 0.9 of one period of the k-th frequency
    assert case["L"] * freqs[case["k"] - 1] == pytest.approx(0.9 * 2 * math.pi)


def test_riflex_hunyuan_numbers():
    """RIFLEx's README runs HunyuanVideo with k = 4, N_k = 50: theta 256, t block 16."""
    ref = GOLDEN["hunyuan"]
    assert ref == {"rope_theta": 256.0, "rope_axes_dim": [16, 56, 56]}
    assert pl.riflex_intrinsic_index(256, 16, 50) == (4, 50)


# ---------------------------------------------------------------- SD3


@pytest.mark.parametrize("crop", GOLDEN["sd3"]["crops"], ids=lambda c: str(c["hw"]))
def test_sd3_crop_matches_cropped_pos_embed(crop):
    ref = GOLDEN["sd3"]
    assert (ref["pos_embed_max_size"], ref["base_size"]) == (96, 64)
    table = pl.sd3_cropped_sincos(ref["dim"], *crop["hw"], 96, 64)
    assert_close(table.float(), torch.tensor(crop["table"]), atol=1e-5, rtol=0)


def test_sd3_crop_is_centred():
    rc = pl.sd3_patch_coordinates(64, 64)  # a 1024-px image: 64 x 64 patches
    assert rc[0].tolist() == pytest.approx([16 * 2 / 3, 16 * 2 / 3])
    small = pl.sd3_patch_coordinates(32, 32)  # its centre 32 x 32 patches
    big = rc.reshape(64, 64, 2)[16:48, 16:48].reshape(-1, 2)
    assert_close(small, big)


# ---------------------------------------------------------------- Qwen


@pytest.mark.parametrize(
    "case", GOLDEN["qwen25_5_24"]["cases"], ids=lambda c: c["name"]
)
def test_qwen25_video_times_match_and_text_resumes_differently(case):
    ours = pl.mrope_position_ids(
        segments_of(case), case["spatial_merge_size"], case["time_interval"]
    )
    ref = torch.tensor(case["ids"])
    n_text = case["segments"][-1][1]
    assert torch.equal(ours[:-n_text], ref[:-n_text])  # text before, the video
    # transformers 5.24 resumes at s + max(H', W'), inside the video's times
    assert ref[-n_text, 0] < ours[-n_text, 0]


def test_qwen3_frames_are_one_frame_segments_between_timestamps():
    ref = GOLDEN["qwen3"]
    frames, side = ref["grid"][0], ref["grid"][1] // 2
    segs = [("text", 3)]
    for _ in range(frames):  # <t seconds> + <|vision_start|>, a frame, <|vision_end|>
        segs += [
            ("text", ref["timestamp_tokens"]),
            ("image", (side, side)),
            ("text", 1),
        ]
    segs[-1] = ("text", 3)  # <|vision_end|> and the two final text tokens
    ids = pl.mrope_position_ids(segs)
    assert ids.tolist() == ref["ids"]
    ts = ref["timestamps"]
    assert pl.qwen3vl_timestamps(ts["frames"], ts["fps"], ts["merge"]) == ts["seconds"]


# ---------------------------------------------------------------- vision towers


def test_pixtral_and_qwen2vl_vision_frequencies():
    for key, freqs in [
        ("pixtral", pl.pixtral_frequencies(16)),
        ("qwen2vl_vision", pl.axial_frequencies(16, 2, 10000.0)),
    ]:
        ref = GOLDEN[key]
        assert ref["theta"] == 10000.0
        angles = pl.rotary_angles(torch.tensor(ref["coords"])[None], freqs)[0, 0]
        cos, sin = cos_sin(angles, "half")
        assert_close(cos.float(), torch.tensor(ref["cos"]), atol=1e-5, rtol=0)
        assert_close(sin.float(), torch.tensor(ref["sin"]), atol=1e-5, rtol=0)


def test_dinov3_rope_uses_normalised_patch_centres():
    """Transcribed check: angles 2 pi c base^(-4k/d), c in [-1, 1] (patch centres)."""
    ref = GOLDEN["dinov3"]
    d, (hh, ww) = ref["d"], ref["grid"]
    rows = 2 * (torch.arange(hh, dtype=torch.float64) + 0.5) / hh - 1
    cols = 2 * (torch.arange(ww, dtype=torch.float64) + 0.5) / ww - 1
    rc = torch.cartesian_prod(rows, cols)  # (n, 2)
    inv = ref["theta"] ** (-torch.arange(0, 1, 4 / d, dtype=torch.float64))
    angles = (2 * math.pi * rc[:, :, None] * inv).flatten(1)  # (n, d/2): rows, cols
    assert_close(
        torch.cat([angles, angles], -1).cos().float(), torch.tensor(ref["cos"])
    )


def test_vjepa2_three_equal_blocks_from_the_token_index():
    ref = GOLDEN["vjepa2"]
    assert ref["head"] == 64 and ref["dims"] == [20, 20, 20]  # 4 dims not rotated
    g = ref["grid_size"]
    tok = torch.tensor(ref["tokens"])
    assert [(tok // g**2).tolist(), (tok % g**2 // g).tolist(), (tok % g).tolist()] == (
        ref["fhw"]
    )


# ---------------------------------------------------------------- bad input


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="temporal_spacing"):
        pl.videorope_position_ids([("text", 1)], temporal_spacing=0)
    with pytest.raises(ValueError, match="kinds are"):
        pl.videorope_position_ids([("audio", 2)])
    with pytest.raises(ValueError, match="axes_dim"):
        pl.AxesRotary((16, 55, 56))
    with pytest.raises(ValueError, match="even and >= 6"):
        pl.wan_rope_split(4)
    with pytest.raises(ValueError, match="1 <= k <= dim/2"):
        pl.riflex_frequencies(16, 1e4, 9, 30)
    with pytest.raises(ValueError, match="exceeds pos_embed_max_size"):
        pl.sd3_patch_coordinates(97, 4)
    with pytest.raises(ValueError, match="fps"):
        pl.qwen3vl_timestamps([0, 1], 0)
    pe = pl.AxesRotary((4, 6, 6))
    q = torch.randn(1, 1, 3, 16)
    with pytest.raises(ValueError, match="built for 3 axes"):
        pe.transform_qk(q, q, torch.zeros(1, 3, 2).long(), torch.zeros(1, 3, 2).long())
    with pytest.raises(ValueError, match="sum\\(axes_dim\\) = 16"):
        pe.transform_qk(q[..., :8], q[..., :8], torch.zeros(1, 3, 3).long(), None)

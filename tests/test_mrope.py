"""M-RoPE: properties, golden values, parity with the Qwen models' Hugging Face code.

Parity runs without transformers: ``tests/golden/mrope_qwen.json`` holds the reference
outputs, produced by ``tests/golden/make_mrope_golden.py`` (which documents the
versions). Conventions map one to one: Hugging Face's position ids ``(3, b, n)`` are
the course's coordinates ``(b, n, 3)`` transposed; both use the ``rotate_half`` layout.
"""

import json
import pathlib

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "mrope_qwen.json").read_text()
)
CASES = {c["name"]: c for c in GOLDEN["position_ids"]}


def segments_of(case):
    return [(k, tuple(s) if isinstance(s, list) else s) for k, s in case["segments"]]


def qk(b=2, h=2, n=9, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in "qk")


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("interleaved", [False, True])
def test_on_text_mrope_is_one_dimensional_rope(interleaved):
    """t = h = w = p for every token: every angle is p * theta_i, as in RoPE."""
    section = [4, 2, 2] if interleaved else [2, 3, 3]
    pe = pl.MultimodalRotary(16, section, interleaved=interleaved)
    q, k = qk()
    p = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 9, 30, 31, 40, 41, 42, 100]])
    coords = p[..., None].expand(2, 9, 3)
    assert_close(
        pe.transform_qk(q, k, coords, coords), pl.Rotary(16).transform_qk(q, k, p, p)
    )


@pytest.mark.parametrize("interleaved", [False, True])
def test_scores_depend_only_on_the_coordinate_offsets(interleaved):
    pe = pl.MultimodalRotary(
        24, [4, 4, 4] if interleaved else None, interleaved=interleaved
    )
    q, k = qk(b=1, h=1, n=1, d=24)
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        cq, ck = torch.randint(0, 50, (2, 1, 1, 3), generator=g)
        shift = torch.randint(-20, 80, (1, 1, 3), generator=g)
        a, b = pe.transform_qk(q, k, cq, ck)
        a2, b2 = pe.transform_qk(q, k, cq + shift + 20, ck + shift + 20)
        assert_close(a @ b.mT, a2 @ b2.mT)


def test_each_axis_rotates_only_its_own_section():
    """Moving along w changes only the pairs of w's section (i and i + d/2)."""
    pe = pl.MultimodalRotary(16, [2, 3, 3])
    q, _ = qk(b=1, h=1, n=1)
    base = torch.tensor([[[4, 7, 1]]])
    moved = base + torch.tensor([[[0, 0, 5]]])
    diff = pe.transform_qk(q, q, base, base)[0] - pe.transform_qk(q, q, moved, moved)[0]
    changed = diff[0, 0, 0].abs() > 1e-12
    w_dims = torch.zeros(16, dtype=torch.bool)
    w_dims[5:8] = w_dims[13:16] = True
    assert torch.equal(changed, w_dims)


def test_rotation_preserves_the_norm():
    pe = pl.MultimodalRotary(16)
    q, k = qk()
    coords = torch.randint(0, 99, (2, 9, 3))
    q2, _ = pe.transform_qk(q, k, coords, coords)
    assert_close(q2.norm(dim=-1), q.norm(dim=-1))


def test_default_sections_follow_qwen2_vl_proportions():
    assert pl.default_mrope_section(128) == [16, 24, 24]
    assert pl.default_mrope_section(16) == [2, 3, 3]
    assert pl.default_mrope_section(8) == [2, 1, 1]
    assert pl.default_mrope_section(4) == [0, 1, 1]  # two pairs: t gets none
    assert pl.mrope_axes([16, 24, 24]).tolist() == [0] * 16 + [1] * 24 + [2] * 24
    inter = pl.mrope_axes([24, 20, 20], interleaved=True).tolist()
    assert inter[:6] == [0, 1, 2, 0, 1, 2] and inter[60:] == [0] * 4
    assert [inter.count(a) for a in range(3)] == [24, 20, 20]


def test_position_ids_text_counts_and_vision_grids():
    ids = pl.mrope_position_ids([("text", 2), ("image", (2, 3)), ("text", 2)])
    assert ids.shape == (10, 3) and ids.dtype == torch.int64
    assert ids[:2].tolist() == [[0, 0, 0], [1, 1, 1]]
    assert ids[2:8, 0].tolist() == [2] * 6  # one frame
    assert ids[2:8, 1].tolist() == [2, 2, 2, 3, 3, 3]  # rows
    assert ids[2:8, 2].tolist() == [2, 3, 4, 2, 3, 4]  # columns
    assert ids[8:].tolist() == [[5, 5, 5], [6, 6, 6]]  # past max(2+0, 2+1, 2+2)
    # an image given as (1, H, W) is the same image
    same = pl.mrope_position_ids([("text", 2), ("image", (1, 2, 3)), ("text", 2)])
    assert torch.equal(ids, same)


def test_text_after_a_video_continues_past_its_longest_axis():
    ids = pl.mrope_position_ids([("video", (6, 2, 2)), ("text", 2)])
    assert ids[-2:].tolist() == [[6, 6, 6], [7, 7, 7]]  # max t = 5, so 6 next


# ---------------------------------------------------------------- golden values


def test_hugging_face_docstring_example():
    """The worked example in Qwen2-VL's ``get_rope_index`` docstring (transformers
    4.45): a 3 x 2 x 2 video, then five text tokens."""
    ids = pl.mrope_position_ids([("video", (3, 2, 2)), ("text", 5)])
    assert ids[:12, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert ids[:12, 1].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
    assert ids[:12, 2].tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    assert ids[12:].T.tolist() == [[3, 4, 5, 6, 7]] * 3


def test_qwen25_docstring_example_with_seconds():
    """Qwen2.5-VL's docstring: fps 1, temporal patch 2, 25 tokens per second give an
    interval of 50; text starts at 101."""
    ids = pl.mrope_position_ids([("video", (3, 2, 2)), ("text", 5)], time_interval=50)
    assert ids[:12, 0].tolist() == [0] * 4 + [50] * 4 + [100] * 4
    assert ids[12:, 0].tolist() == [101, 102, 103, 104, 105]


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("name", sorted(CASES))
def test_position_ids_match_get_rope_index(name):
    case = CASES[name]
    ids = pl.mrope_position_ids(
        segments_of(case), case["spatial_merge_size"], case["time_interval"]
    )
    assert ids.tolist() == case["ids"], case["reference"]


def test_transformers_5_23_starts_text_after_a_long_video_earlier():
    """Recorded, not followed: transformers 5.23's refactored Qwen2-VL index advances
    by max(H, W) after a visual segment, ignoring T, so text after a video with more
    frames than rows or columns overlaps the video's times. 4.45 (the Qwen team's
    code) and this library continue past max(T, H, W)."""
    case = CASES["long_video"]  # 8 frames of 2 x 2 merged patches, at start 2
    ours, new = torch.tensor(case["ids"]), torch.tensor(case["ids_hf_5_23"])
    assert torch.equal(ours[:-3], new[:-3])
    assert ours[-3:, 0].tolist() == [10, 11, 12] and new[-3:, 0].tolist() == [4, 5, 6]
    for other in ("text_image_text", "text_image_text_video", "two_images"):
        assert CASES[other]["ids"] == CASES[other]["ids_hf_5_23"]


@pytest.mark.parametrize(
    "key,interleaved", [("rotation", False), ("rotation_interleaved", True)]
)
def test_rotation_matches_hugging_face(key, interleaved):
    ref = GOLDEN[key]
    q, k = torch.tensor(ref["q"]), torch.tensor(ref["k"])
    pe = pl.MultimodalRotary(q.shape[-1], ref["mrope_section"], interleaved=interleaved)
    coords = torch.tensor(ref["coords"])
    q2, k2 = pe.transform_qk(q, k, coords, coords)
    assert_close(q2, torch.tensor(ref["q_rot"]), atol=2e-5, rtol=1e-5)
    assert_close(k2, torch.tensor(ref["k_rot"]), atol=2e-5, rtol=1e-5)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "segments,match",
    [
        ([], "non-empty list"),
        ([("audio", 3)], "kinds are"),
        ([("text", 0)], "positive int count"),
        ([("text", 2.5)], "positive int count"),
        ([("image", (2, 3, 4))], r"\(H, W\) / \(1, H, W\)"),
        ([("video", (2, 3))], r"\(T, H, W\)"),
        ([("video", (2, 0, 4))], "positive ints"),
        (["text"], r"\(kind, size\) pair"),
    ],
)
def test_bad_segments_are_named(segments, match):
    with pytest.raises(ValueError, match=match):
        pl.mrope_position_ids(segments)


def test_bad_merge_and_interval():
    with pytest.raises(ValueError, match="divisible by spatial_merge_size"):
        pl.mrope_position_ids([("image", (3, 4))], spatial_merge_size=2)
    with pytest.raises(ValueError, match="spatial_merge_size must be > 0"):
        pl.mrope_position_ids([("text", 1)], spatial_merge_size=0)
    with pytest.raises(ValueError, match="time_interval must be a finite number > 0"):
        pl.mrope_position_ids([("text", 1)], time_interval=0)


def test_bad_sections_and_coordinates():
    with pytest.raises(ValueError, match="must sum to d_head/2"):
        pl.MultimodalRotary(16, [2, 2, 2])
    with pytest.raises(ValueError, match="three ints >= 0"):
        pl.MultimodalRotary(16, [9, -1, 0])
    with pytest.raises(ValueError, match="three ints >= 0"):
        pl.MultimodalRotary(16, [4, 4])
    with pytest.raises(ValueError, match="cannot be interleaved"):
        pl.mrope_axes([2, 5, 1], interleaved=True)
    with pytest.raises(ValueError, match="even and >= 4"):
        pl.default_mrope_section(2)
    pe = pl.MultimodalRotary(16)
    q, k = qk()
    with pytest.raises(TypeError, match="integer coordinates"):
        pe.transform_qk(q, k, torch.zeros(2, 9, 3), torch.zeros(2, 9, 3))
    with pytest.raises(ValueError, match=r"shape \(n, 3\) or \(b, n, 3\)"):
        pe.transform_qk(
            q,
            k,
            torch.zeros(2, 9, 2, dtype=torch.long),
            torch.zeros(2, 9, 3, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="built for d_head=16"):
        q8, k8 = qk(d=8)
        pe.transform_qk(
            q8,
            k8,
            torch.zeros(2, 9, 3, dtype=torch.long),
            torch.zeros(2, 9, 3, dtype=torch.long),
        )


def test_attention_refuses_one_dimensional_positions():
    mha = pl.MultimodalRotary(8)
    x = torch.randn(1, 5, 32)
    with pytest.raises(ValueError, match="pos must have shape"):
        pl.MultiHeadAttention(32, 4, mha)(x, torch.arange(5), causal=True)

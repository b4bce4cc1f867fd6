"""Produce tests/golden/mrope_qwen.json from Qwen's M-RoPE code in transformers.

The course depends on none of it. Three versions of transformers are used, each in a
throw-away folder (the file was made with torch 2.13.0):

    pip install --target /tmp/ref_mrope_4450 transformers==4.45.0  # Qwen2-VL, as the
        # Qwen team contributed it (get_rope_index, apply_multimodal_rotary_pos_emb)
    pip install --target /tmp/ref_mrope_4513 transformers==4.51.3  # Qwen2.5-VL's
        # get_rope_index (second_per_grid_ts * tokens_per_second)
    pip install --target /tmp/ref_mrope transformers==5.23.0       # Qwen3-VL's
        # interleaved sections; Qwen2-VL's refactored get_rope_index
    python tests/golden/make_mrope_golden.py

The script runs itself once per version (``--part``, with that folder on PYTHONPATH;
override the folders with REF_4450, REF_4513, REF_523) and writes what the three
children print. What it records (inputs included):

* ``position_ids``: for each case, the course's segment list, the token ids built from
  it (text tokens 100, the last token of a text segment before a visual one
  ``<|vision_start|>``, then one image/video pad token per merged patch), and the ids
  ``(n, 3)`` that ``get_rope_index`` returns: Qwen2-VL's (4.45) for ``time_interval``
  1, Qwen2.5-VL's (4.51.3, ``second_per_grid_ts`` and ``tokens_per_second``)
  otherwise. ``qwen2vl_5_23``: Qwen2-VL's ids from transformers 5.23 for the same
  cases, which differ after a video with more frames than rows or columns.
* ``rotation``: q, k ``(b, h, n, d)``, coordinates ``(b, n, 3)`` and the rotated q, k:
  Qwen2-VL's ``Qwen2VLRotaryEmbedding`` + ``apply_multimodal_rotary_pos_emb`` (4.45,
  contiguous sections) and Qwen3-VL's ``Qwen3VLTextRotaryEmbedding`` +
  ``apply_rotary_pos_emb`` (5.23, interleaved sections).
"""

import functools
import json
import os
import pathlib
import subprocess
import sys
import types

import torch

TEXT, VISION_START, IMAGE, VIDEO = 100, 151652, 151655, 151656
HERE = pathlib.Path(__file__).parent
REFS = {
    "qwen2vl_4_45": os.environ.get("REF_4450", "/tmp/ref_mrope_4450"),
    "qwen25vl_4_51": os.environ.get("REF_4513", "/tmp/ref_mrope_4513"),
    "hf_5_23": os.environ.get("REF_523", "/tmp/ref_mrope"),
}

# (name, segments, spatial_merge_size, second_per_grid_t or None, tokens_per_second)
CASES = [
    ("text_image_text", [["text", 3], ["image", [1, 4, 6]], ["text", 4]], 2, None, 2),
    (
        "text_image_text_video",
        [["text", 5], ["image", [1, 4, 6]], ["text", 3], ["video", [2, 4, 4]]],
        2,
        None,
        2,
    ),  # fmt: skip
    ("long_video", [["text", 2], ["video", [8, 4, 4]], ["text", 3]], 2, None, 2),
    (
        "two_images",
        [
            ["text", 1],
            ["image", [1, 6, 2]],
            ["text", 2],
            ["image", [1, 2, 8]],
            ["text", 2],
        ],
        2,
        None,
        2,
    ),  # fmt: skip
    ("no_merge", [["text", 2], ["video", [3, 2, 2]], ["text", 5]], 1, None, 2),
    ("seconds_2", [["text", 2], ["video", [3, 2, 2]], ["text", 2]], 1, 1.0, 2),
    ("seconds_half", [["text", 2], ["video", [5, 2, 2]], ["text", 2]], 2, 0.25, 2),
    ("seconds_1_5", [["text", 1], ["video", [4, 2, 4]], ["text", 3]], 2, 0.75, 2),
]


def build(segments, merge):
    """Token ids and grids (as Qwen's processor lays them out) for a segment list."""
    ids, images, videos = [], [], []
    for k, (kind, size) in enumerate(segments):
        if kind == "text":
            ids += [TEXT] * size
            if k + 1 < len(segments) and segments[k + 1][0] != "text":
                ids[-1] = VISION_START
        else:
            t, h, w = size
            (images if kind == "image" else videos).append([t, h, w])
            ids += [IMAGE if kind == "image" else VIDEO] * (t * h * w // merge**2)
    return ids, images, videos


def config(merge, tokens_per_second=2):
    vision = types.SimpleNamespace(
        spatial_merge_size=merge, tokens_per_second=tokens_per_second
    )
    return types.SimpleNamespace(
        vision_config=vision,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
    )


def grids(images, videos):
    return (
        torch.tensor(images) if images else None,
        torch.tensor(videos) if videos else None,
    )


def part_qwen2vl_4_45():
    import transformers
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m

    out = {"version": transformers.__version__, "position_ids": {}}
    for name, segments, merge, seconds, tps in CASES:
        if seconds is not None:
            continue
        ids, images, videos = build(segments, merge)
        self = types.SimpleNamespace(config=config(merge))
        input_ids = torch.tensor([ids])
        pos, _ = m.Qwen2VLForConditionalGeneration.get_rope_index(
            self, input_ids, *grids(images, videos), torch.ones_like(input_ids)
        )
        out["position_ids"][name] = pos[:, 0].T.tolist()  # (n, 3)
    torch.manual_seed(0)
    d, section = 16, [2, 3, 3]
    q, k = torch.randn(2, 2, 7, d), torch.randn(2, 2, 7, d)
    coords = torch.randint(0, 40, (2, 7, 3))
    rope = m.Qwen2VLRotaryEmbedding(dim=d, base=10000)
    cos, sin = rope(q, coords.permute(2, 0, 1))  # position_ids (3, b, n)
    q2, k2 = m.apply_multimodal_rotary_pos_emb(q, k, cos, sin, section)
    out["rotation"] = {
        "mrope_section": section, "q": q.tolist(), "k": k.tolist(),
        "coords": coords.tolist(), "q_rot": q2.tolist(), "k_rot": k2.tolist(),
    }  # fmt: skip
    return out


def part_qwen25vl_4_51():
    import transformers
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    out = {"version": transformers.__version__, "position_ids": {}}
    for name, segments, merge, seconds, tps in CASES:
        if seconds is None:
            continue
        ids, images, videos = build(segments, merge)
        self = types.SimpleNamespace(config=config(merge, tps))
        input_ids = torch.tensor([ids])
        pos, _ = m.Qwen2_5_VLForConditionalGeneration.get_rope_index(
            self, input_ids, *grids(images, videos),
            torch.tensor([seconds] * len(videos)), torch.ones_like(input_ids),
        )  # fmt: skip
        out["position_ids"][name] = pos[:, 0].T.tolist()
    return out


def part_hf_5_23():
    import transformers
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m2
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m3

    out = {"version": transformers.__version__, "position_ids": {}}
    for name, segments, merge, seconds, tps in CASES:
        if seconds is not None:
            continue
        ids, images, videos = build(segments, merge)
        kinds = {IMAGE: 1, VIDEO: 2}
        self = types.SimpleNamespace(config=config(merge))
        self.get_vision_position_ids = functools.partial(
            m2.Qwen2VLModel.get_vision_position_ids, self
        )
        input_ids = torch.tensor([ids])
        types_ = torch.tensor([[kinds.get(i, 0) for i in ids]])
        pos, _ = m2.Qwen2VLModel.get_rope_index(
            self, input_ids, types_, *grids(images, videos),
            attention_mask=torch.ones_like(input_ids),
        )  # fmt: skip
        out["position_ids"][name] = pos[:, 0].T.tolist()
    torch.manual_seed(1)
    d, section = 16, [4, 2, 2]
    cfg = m3.Qwen3VLTextConfig(
        head_dim=d, hidden_size=32, num_attention_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "mrope_section": section, "mrope_interleaved": True},
    )  # fmt: skip
    q, k = torch.randn(2, 2, 7, d), torch.randn(2, 2, 7, d)
    coords = torch.randint(0, 40, (2, 7, 3))
    cos, sin = m3.Qwen3VLTextRotaryEmbedding(cfg)(q, coords.permute(2, 0, 1))
    q2, k2 = m3.apply_rotary_pos_emb(q, k, cos, sin)
    out["rotation_interleaved"] = {
        "mrope_section": section, "q": q.tolist(), "k": k.tolist(),
        "coords": coords.tolist(), "q_rot": q2.tolist(), "k_rot": k2.tolist(),
    }  # fmt: skip
    return out


PARTS = {
    "qwen2vl_4_45": part_qwen2vl_4_45,
    "qwen25vl_4_51": part_qwen25vl_4_51,
    "hf_5_23": part_hf_5_23,
}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--part":
        print(json.dumps(PARTS[sys.argv[2]]()))
        return
    results = {}
    for part, folder in REFS.items():
        env = {**os.environ, "PYTHONPATH": folder}
        run = subprocess.run(
            [sys.executable, __file__, "--part", part],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        results[part] = json.loads(run.stdout.strip().splitlines()[-1])
    cases = []
    for name, segments, merge, seconds, tps in CASES:
        ref = "qwen2vl_4_45" if seconds is None else "qwen25vl_4_51"
        case = {
            "name": name,
            "segments": segments,
            "spatial_merge_size": merge,
            "time_interval": 1.0 if seconds is None else seconds * tps,
            "reference": f"{ref} (transformers {results[ref]['version']})",
            "ids": results[ref]["position_ids"][name],
        }
        if seconds is None:
            case["ids_hf_5_23"] = results["hf_5_23"]["position_ids"][name]
        cases.append(case)
    golden = {
        "versions": {p: r["version"] for p, r in results.items()},
        "torch": torch.__version__,
        "position_ids": cases,
        "rotation": results["qwen2vl_4_45"]["rotation"],
        "rotation_interleaved": results["hf_5_23"]["rotation_interleaved"],
    }
    (HERE / "mrope_qwen.json").write_text(json.dumps(golden) + "\n")
    print("wrote", HERE / "mrope_qwen.json")


if __name__ == "__main__":
    main()

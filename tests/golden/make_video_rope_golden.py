"""Produce tests/golden/video_rope.json: the video and diffusion rotary layouts.

The course depends on none of this. Run with the reference environment (the file was
made with transformers 5.24.0, diffusers 0.42.1, torch 2.15.0):

    /work/ref/bin/python tests/golden/make_video_rope_golden.py

What it records (inputs included), and from where:

* ``flux``: diffusers ``FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])``
  (``models/transformers/transformer_flux.py``; the values of
  ``FluxTransformer2DModel.__init__``) on ids built as ``FluxPipeline`` builds them
  (text ids zeros; ``_prepare_latent_image_ids``: (0, row, col)); cos, sin, and q
  rotated by diffusers' ``apply_rotary_emb`` (``use_real_unbind_dim=-1``).
* ``wan``: diffusers ``WanRotaryPosEmbed(128, (1, 2, 2), 1024)``
  (``models/transformers/transformer_wan.py``): the split and cos/sin for a 3 x 4 x 6
  latent video.
* ``hunyuan``: ``HunyuanVideoTransformer3DModel``'s default ``rope_theta`` and
  ``rope_axes_dim`` (diffusers), the model RIFLEx's README runs with k = 4, N_k = 50.
* ``sd3``: diffusers ``PatchEmbed(height=128, width=128, patch_size=2,
  pos_embed_max_size=96)`` (the defaults of ``SD3Transformer2DModel``) and its
  ``cropped_pos_embed`` for two latent sizes.
* ``riflex``: a transcription (no package exists) of ``get_1d_rotary_pos_embed_riflex``
  and ``identify_k`` from ``thu-ml/RIFLEx``, ``riflex_utils.py`` (commit 18e0bc34).
* ``videorope``: a transcription of ``get_t_scale_rope_index`` (positions) and
  ``apply_m_modify_multimodal_rotary_pos_emb`` (pairs to axes) from
  ``Wiselnn570/VideoRoPE``, ``videorope-transformer/modeling_videorope.py`` (commit
  7712ca3); the file imports transformers 4.4x internals, so it is transcribed line by
  line, fed with token ids as Qwen's processor lays them out.
* ``qwen25_5_24`` and ``qwen3``: ``get_rope_index`` of Qwen2.5-VL and Qwen3-VL in
  transformers 5.24 (``second_per_grid_ts``; Qwen3-VL's one-frame segments with text
  timestamps between them) and Qwen3-VL's ``_calculate_timestamps``.
* ``pixtral``, ``qwen2vl_vision``, ``dinov3``, ``vjepa2``: the vision towers' rotary
  tables (``PixtralVisionRotaryEmbedding``, ``Qwen2VLVisionRotaryEmbedding``,
  ``DINOv3ViTRopePositionEmbedding``, ``VJEPA2RopeAttention.get_position_ids``).
"""

import functools
import inspect
import json
import pathlib
import types

import diffusers
import torch
import transformers

HERE = pathlib.Path(__file__).parent
TEXT, VISION_START, VISION_END, IMAGE, VIDEO = 100, 151652, 151653, 151655, 151656


def tl(x):
    return x.tolist()


def flux():
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import (
        FluxPosEmbed,
        FluxTransformer2DModel,
    )
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline

    sig = inspect.signature(FluxTransformer2DModel.__init__).parameters
    axes = list(sig["axes_dims_rope"].default)
    text_ids = torch.zeros(3, 3)
    img_ids = FluxPipeline._prepare_latent_image_ids(1, 2, 3, "cpu", torch.float32)
    ids = torch.cat([text_ids, img_ids])
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=axes)(ids)
    torch.manual_seed(0)
    q = torch.randn(1, 1, len(ids), sum(axes))
    q_rot = apply_rotary_emb(q, (cos, sin), use_real_unbind_dim=-1)
    return {
        "axes_dims_rope": axes, "ids": tl(ids), "cos": tl(cos), "sin": tl(sin),
        "q": tl(q), "q_rot": tl(q_rot),
    }  # fmt: skip


def wan():
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    rope = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    cos, sin = rope(torch.zeros(1, 16, 3, 4, 6))  # 3 frames of 2 x 3 patches
    return {
        "split": [rope.t_dim, rope.h_dim, rope.w_dim],
        "grid": [3, 2, 3], "cos": tl(cos[0, :, 0]), "sin": tl(sin[0, :, 0]),
    }  # fmt: skip


def hunyuan():
    from diffusers.models.transformers.transformer_hunyuan_video import (
        HunyuanVideoTransformer3DModel,
    )

    sig = inspect.signature(HunyuanVideoTransformer3DModel.__init__).parameters
    return {
        "rope_theta": sig["rope_theta"].default,
        "rope_axes_dim": list(sig["rope_axes_dim"].default),
    }


def sd3():
    from diffusers.models.embeddings import PatchEmbed
    from diffusers.models.transformers.transformer_sd3 import SD3Transformer2DModel

    sig = inspect.signature(SD3Transformer2DModel.__init__).parameters
    size, patch, max_size = (
        sig[k].default for k in ("sample_size", "patch_size", "pos_embed_max_size")
    )
    embed = PatchEmbed(
        height=size, width=size, patch_size=patch, in_channels=4, embed_dim=32,
        pos_embed_max_size=max_size,
    )  # fmt: skip
    crops = []
    for h, w in [(4, 6), (3, 5)]:  # patches
        table = embed.cropped_pos_embed(h * patch, w * patch)[0]
        crops.append({"hw": [h, w], "table": tl(table)})
    return {
        "sample_size": size, "patch_size": patch, "pos_embed_max_size": max_size,
        "base_size": embed.base_size, "dim": 32, "crops": crops,
    }  # fmt: skip


# -- thu-ml/RIFLEx, riflex_utils.py (commit 18e0bc34), transcribed
def get_1d_rotary_pos_embed_riflex(dim, pos, theta=10000.0, k=None, L_test=None):
    pos = torch.arange(pos)
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    if k is not None:
        freqs[k - 1] = 0.9 * 2 * torch.pi / L_test
    return freqs, torch.outer(pos, freqs)


def identify_k(b, d, N):
    periods = []
    for j in range(1, d // 2 + 1):
        theta_j = 1.0 / (b ** (2 * (j - 1) / d))
        periods.append(round(2 * torch.pi / theta_j))
    diffs = [abs(N_j - N) for N_j in periods]
    k = diffs.index(min(diffs)) + 1
    return k, periods[k - 1]


def riflex():
    cases = []
    for dim, theta, k, L in [
        (16, 256.0, 4, 66),
        (16, 10000.0, 2, 25),
        (44, 1e4, 3, 30),
    ]:
        freqs, _ = get_1d_rotary_pos_embed_riflex(dim, 8, theta, k, L)
        cases.append({"dim": dim, "theta": theta, "k": k, "L": L, "freqs": tl(freqs)})
    ks = [
        {"b": b, "d": d, "N": n, "k_Nk": list(identify_k(b, d, n))}
        for b, d, n in [(256, 16, 50), (10000, 16, 20), (10000, 44, 21), (1e4, 44, 81)]
    ]
    return {"frequencies": cases, "identify_k": ks}


# -- Wiselnn570/VideoRoPE, videorope-transformer/modeling_videorope.py, transcribed
def get_t_scale_rope_index(input_ids, image_grid_thw, video_grid_thw, merge, scale):
    input_tokens = input_ids.tolist()
    vision_start_indices = torch.argwhere(input_ids == VISION_START).squeeze(1)
    vision_tokens = input_ids[vision_start_indices + 1]
    image_nums = (vision_tokens == IMAGE).sum()
    video_nums = (vision_tokens == VIDEO).sum()
    llm_pos_ids_list, st = [], 0
    image_index, video_index = 0, 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        if IMAGE in input_tokens and remain_images > 0:
            ed_image = input_tokens.index(IMAGE, st)
        else:
            ed_image = len(input_tokens) + 1
        if VIDEO in input_tokens and remain_videos > 0:
            ed_video = input_tokens.index(VIDEO, st)
        else:
            ed_video = len(input_tokens) + 1
        if ed_image < ed_video:
            t, h, w = image_grid_thw[image_index]
            image_index += 1
            remain_images -= 1
            ed = ed_image
        else:
            t, h, w = video_grid_thw[video_index]
            video_index += 1
            remain_videos -= 1
            ed = ed_video
        gt, gh, gw = t.item(), h.item() // merge, w.item() // merge
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(
            torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx
        )
        t_index = torch.arange(gt).view(-1, 1).expand(-1, gh * gw).flatten()
        h_index = (
            torch.arange(gh).view(1, -1, 1).expand(gt, -1, gw).flatten() - (gh - 1) // 2
        )
        w_index = (
            torch.arange(gw).view(1, 1, -1).expand(gt, gh, -1).flatten() - (gw - 1) // 2
        )
        t_index = t_index * scale
        t_index = t_index + text_len + st_idx
        h_index = h_index + t_index
        w_index = w_index + t_index
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]))
        st = ed + gt * gh * gw
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(
            torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx
        )
    return torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1).float()


def apply_m_modify_multimodal_rotary_pos_emb(cos, sin, mrope_section):
    """The cos/sin recomposition of VideoRoPE (its q/k update is Qwen2-VL's)."""
    mrope_section = [mrope_section[0], mrope_section[1] + mrope_section[2]]
    mrope_section = (mrope_section * 2)[::-1]
    index, result_cos, result_sin = 0, [], []
    for i, section in enumerate(mrope_section):
        if i % 2 == 0:
            for j in range(section):
                row = 1 if j % 2 == 0 else 2
                result_cos.append(cos[row, ..., index : index + 1])
                result_sin.append(sin[row, ..., index : index + 1])
                index += 1
        else:
            result_cos.append(cos[0, ..., index : index + section])
            result_sin.append(sin[0, ..., index : index + section])
            index += section
    return torch.cat(result_cos, dim=-1), torch.cat(result_sin, dim=-1)


def build(segments, merge, start_token=VISION_START):
    """Token ids and grids as Qwen's processor lays them out: the last token of a text
    segment before a visual one is <|vision_start|>."""
    ids, images, videos = [], [], []
    for k, (kind, size) in enumerate(segments):
        if kind == "text":
            ids += [TEXT] * size
            if k + 1 < len(segments) and segments[k + 1][0] != "text":
                ids[-1] = start_token
        else:
            t, h, w = size
            (images if kind == "image" else videos).append([t, h, w])
            ids += [IMAGE if kind == "image" else VIDEO] * (t * h * w // merge**2)
    grids = (
        torch.tensor(images) if images else None,
        torch.tensor(videos) if videos else None,
    )
    return torch.tensor(ids), grids


VIDEOROPE_CASES = [
    ("video_text", [["text", 3], ["video", [4, 6, 6]], ["text", 3]], 2),
    (
        "image_video",
        [
            ["text", 2],
            ["image", [1, 4, 6]],
            ["text", 2],
            ["video", [2, 2, 4]],
            ["text", 2],
        ],
        2,
    ),  # fmt: skip
    ("no_merge_even", [["text", 1], ["video", [3, 4, 2]], ["text", 2]], 1),
]


def videorope():
    cases = []
    for name, segments, merge in VIDEOROPE_CASES:
        ids, (images, videos) = build(segments, merge)
        pos = get_t_scale_rope_index(ids, images, videos, merge, 2.0)
        cases.append(
            {
                "name": name,
                "segments": segments,
                "spatial_merge_size": merge,
                "ids": tl(pos.T),
            }  # fmt: skip
        )
    # which axis each cos/sin column comes from: feed cos = axis index per column
    section, d = [2, 3, 3], 16
    marker = torch.arange(3.0)[:, None, None, None].expand(3, 1, 1, d)
    axis_of_column, _ = apply_m_modify_multimodal_rotary_pos_emb(
        marker, marker, section
    )
    section_128 = [16, 24, 24]
    marker = torch.arange(3.0)[:, None, None, None].expand(3, 1, 1, 128)
    axis_128, _ = apply_m_modify_multimodal_rotary_pos_emb(marker, marker, section_128)
    return {
        "scale_factor": 2.0, "cases": cases,
        "columns": {"section": section, "axis": tl(axis_of_column.flatten().long())},
        "columns_128": {"section": section_128, "axis": tl(axis_128.flatten().long())},
    }  # fmt: skip


def qwen_config(merge, tokens_per_second=2):
    vision = types.SimpleNamespace(
        spatial_merge_size=merge, tokens_per_second=tokens_per_second
    )
    return types.SimpleNamespace(
        vision_config=vision,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
    )


def qwen25_5_24():
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    cases = []
    for name, segments, merge, seconds in [
        ("interval_2", [["text", 2], ["video", [3, 2, 2]], ["text", 2]], 1, 1.0),
        ("interval_1_5", [["text", 1], ["video", [4, 2, 4]], ["text", 3]], 2, 0.75),
    ]:
        ids, grids = build(segments, merge)
        self = types.SimpleNamespace(config=qwen_config(merge))
        self.get_vision_position_ids = functools.partial(
            m.Qwen2_5_VLModel.get_vision_position_ids, self
        )
        types_ = torch.tensor([[{IMAGE: 1, VIDEO: 2}.get(int(i), 0) for i in ids]])
        pos, _ = m.Qwen2_5_VLModel.get_rope_index(
            self, ids[None], types_, *grids, torch.tensor([seconds]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        )  # fmt: skip
        cases.append(
            {
                "name": name,
                "segments": segments,
                "spatial_merge_size": merge,
                "time_interval": seconds * 2,
                "ids": tl(pos[:, 0].T),
            }  # fmt: skip
        )
    return {"cases": cases}


def qwen3():
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    # a video of 3 temporal patches of 4 x 4 patches (2 x 2 tokens), each frame
    # preceded by a 4-token timestamp; the processor's layout: <t> <vs> frame <ve>
    ids = [TEXT] * 3
    for _ in range(3):
        ids += [TEXT] * 3 + [VISION_START] + [VIDEO] * 4 + [VISION_END]
    ids += [TEXT] * 2
    ids = torch.tensor(ids)
    self = types.SimpleNamespace(config=qwen_config(2))
    self.get_vision_position_ids = functools.partial(
        m.Qwen3VLModel.get_vision_position_ids, self
    )
    types_ = torch.tensor([[2 if int(i) == VIDEO else 0 for i in ids]])
    pos, _ = m.Qwen3VLModel.get_rope_index(
        self, ids[None], types_, None, torch.tensor([[3, 4, 4]]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
    )  # fmt: skip
    stamps = Qwen3VLProcessor._calculate_timestamps(None, list(range(0, 10, 2)), 4.0, 2)
    return {
        "timestamp_tokens": 4, "grid": [3, 4, 4], "spatial_merge_size": 2,
        "ids": tl(pos[:, 0].T),
        "timestamps": {"frames": list(range(0, 10, 2)), "fps": 4.0, "merge": 2,
                       "seconds": stamps},
    }  # fmt: skip


def vision_towers():
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dv
    from transformers.models.pixtral import modeling_pixtral as px
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qv
    from transformers.models.vjepa2 import modeling_vjepa2 as vj

    coords = torch.tensor([[0, 0], [0, 1], [2, 3], [5, 1]])
    cfg = px.PixtralVisionConfig(hidden_size=64, num_attention_heads=4, head_dim=16)
    cos, sin = px.PixtralVisionRotaryEmbedding(cfg)(torch.zeros(1), coords)
    theta = cfg.rope_parameters["rope_theta"]
    pixtral = {"d": 16, "theta": theta, "coords": tl(coords), "cos": tl(cos),
               "sin": tl(sin)}  # fmt: skip
    qcfg = qv.Qwen2VLVisionConfig(embed_dim=64, num_heads=4)
    cos, sin = qv.Qwen2VLVisionRotaryEmbedding(qcfg)(torch.zeros(1), coords)
    qwen = {"d": 16, "theta": qcfg.rope_parameters["rope_theta"], "coords": tl(coords),
            "cos": tl(cos), "sin": tl(sin)}  # fmt: skip
    dcfg = dv.DINOv3ViTConfig(hidden_size=64, num_attention_heads=4, patch_size=16)
    rope = dv.DINOv3ViTRopePositionEmbedding(dcfg).eval()
    cos, sin = rope(torch.zeros(1, 3, 48, 64))  # 3 x 4 patches
    dino = {"d": 16, "theta": dcfg.rope_theta, "grid": [3, 4], "cos": tl(cos),
            "sin": tl(sin)}  # fmt: skip
    vcfg = vj.VJEPA2Config()
    att = vj.VJEPA2RopeAttention(vcfg, vcfg.hidden_size, vcfg.num_attention_heads)
    tokens = torch.tensor([0, 1, 15, 16, 255, 256, 256 + 17])
    f, h, w = att.get_position_ids(torch.zeros(1, 300, 8))
    vjepa = {
        "head": att.attention_head_size, "dims": [att.d_dim, att.h_dim, att.w_dim],
        "grid_size": att.grid_size, "tokens": tl(tokens),
        "fhw": [tl(f[tokens]), tl(h[tokens]), tl(w[tokens])],
    }  # fmt: skip
    return {"pixtral": pixtral, "qwen2vl_vision": qwen, "dinov3": dino, "vjepa2": vjepa}


def main():
    golden = {
        "versions": {
            "transformers": transformers.__version__,
            "diffusers": diffusers.__version__,
            "torch": torch.__version__,
            "RIFLEx": "thu-ml/RIFLEx@18e0bc34d5a68cae5753a6e33e35313bec89c1db",
            "VideoRoPE": "Wiselnn570/VideoRoPE@7712ca3",
        },
        "flux": flux(),
        "wan": wan(),
        "hunyuan": hunyuan(),
        "sd3": sd3(),
        "riflex": riflex(),
        "videorope": videorope(),
        "qwen25_5_24": qwen25_5_24(),
        "qwen3": qwen3(),
        **vision_towers(),
    }
    (HERE / "video_rope.json").write_text(json.dumps(golden) + "\n")
    print("wrote", HERE / "video_rope.json")


if __name__ == "__main__":
    main()

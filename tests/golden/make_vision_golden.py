"""Golden vectors for the vision encodings (tests/test_vision_*.py), from the authors'
code and from the libraries people load their weights with.

Run in a throw-away environment with torch, numpy, scipy, timm and transformers, and
with local checkouts of the authors' repositories (none of it is pip-installable, and
none of it is copied here: the reference functions are read from the checkouts and run
unmodified)::

    mkdir /tmp/vision_refs && cd /tmp/vision_refs
    git clone https://github.com/facebookresearch/mae
    git clone https://github.com/facebookresearch/detr
    git clone https://github.com/fundamentalvision/Deformable-DETR deformable-detr
    git clone https://github.com/microsoft/Swin-Transformer swin
    git clone https://github.com/naver-ai/rope-vit
    git clone https://github.com/google-research/vision_transformer
    python tests/golden/make_vision_golden.py /tmp/vision_refs

The files were made with torch 2.13.0, timm 1.0.31, transformers 5.23.0, scipy 1.17.1
and the checkouts' commits recorded in each JSON file. (timm imports torchvision when
it is imported; no torchvision code is used.) Each function or class is taken from its
file by name (``ast``) and executed in a namespace holding only its imports, so the
rest of a repository (training scripts, CUDA ops) is not needed; MAE's code gets the
alias ``np.float`` (``float``) that NumPy 1.24 removed.

* ``vision_sincos.json``: 2-D sinusoidal tables from Hugging Face
  (``build_2d_sinusoidal_position_embedding``, and ``ViTMAEEmbeddings``' initial table,
  which swaps the halves to MAE's layout), MAE (``get_2d_sincos_pos_embed``), timm
  (``build_sincos2d_pos_embed``, both orders), DETR and Deformable DETR
  (``PositionEmbeddingSine``, normalised and not).
* ``vision_resize.json``: a table with a class token resized by timm's
  ``resample_abs_pos_embed`` (antialias on and off, up and down) and by ViT's
  ``interpolate_posembed`` (``scipy.ndimage.zoom``, order 1).
* ``vision_swin.json``: ``relative_position_index`` of Swin's ``WindowAttention`` and
  timm's ``get_relative_position_index`` for three window shapes.
* ``vision_rope.json``: RoPE-ViT's axial and mixed rotations (``compute_axial_cis``,
  ``init_random_2d_freqs``, ``compute_mixed_cis``, ``apply_rotary_emb``) of fixed q, k.
"""

import ast
import json
import math
import pathlib
import subprocess
import sys
import types

import numpy as np
import torch

OUT = pathlib.Path(__file__).parent


def commit(repo: pathlib.Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def load(path: pathlib.Path, names: list[str], namespace: dict) -> dict:
    """Execute the top-level definitions ``names`` of ``path`` in ``namespace``."""
    tree = ast.parse(path.read_text())
    nodes = [
        n for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names
    ]  # fmt: skip
    missing = set(names) - {n.name for n in nodes}
    assert not missing, f"{path}: {missing} not found"
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    return namespace


def tolist(t) -> list:
    return np.asarray(t, dtype=np.float64).tolist()


def sincos(refs: pathlib.Path) -> dict:
    from timm.layers import build_sincos2d_pos_embed
    from transformers import ViTMAEConfig
    from transformers.models.vit_mae import modeling_vit_mae as hf_mae

    h, w, d = 3, 5, 16
    hf = hf_mae.build_2d_sinusoidal_position_embedding(h, w, d, dtype=torch.float64)
    config = ViTMAEConfig(hidden_size=d, image_size=16, patch_size=4)  # 4 x 4 grid
    emb = hf_mae.ViTMAEEmbeddings(config)
    emb.initialize_weights()
    hf_mae_table = emb.position_embeddings[0]  # (1 + 16, D): class row first

    # MAE's code predates NumPy 1.24, which removed the alias np.float (= float64)
    np_old = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np)}, float=float)
    mae = load(
        refs / "mae/util/pos_embed.py",
        ["get_2d_sincos_pos_embed", "get_2d_sincos_pos_embed_from_grid",
         "get_1d_sincos_pos_embed_from_grid"],
        {"np": np_old},
    )  # fmt: skip
    mae_table = mae["get_2d_sincos_pos_embed"](d, 4, cls_token=True)  # square only

    detr = {}
    for name, folder in (("detr", "detr"), ("deformable_detr", "deformable-detr")):
        ns = load(
            refs / folder / "models/position_encoding.py",
            ["PositionEmbeddingSine"],
            {"torch": torch, "nn": torch.nn, "math": math, "NestedTensor": object},
        )
        for normalize in (False, True):
            module = ns["PositionEmbeddingSine"](d // 2, normalize=normalize)
            mask = torch.zeros(1, h, w, dtype=torch.bool)  # no padding
            nested = type(
                "Nested", (), {"tensors": torch.zeros(1, 1, h, w), "mask": mask}
            )
            pos = module(nested)[0]  # (D, H, W)
            detr[f"{name}_normalize_{normalize}"] = tolist(pos.flatten(1).T)  # (H W, D)
        detr[f"{name}_commit"] = commit(refs / folder)
    return {
        "height": h, "width": w, "dim": d,
        "hf_build_2d": tolist(hf),
        "hf_vit_mae_init_4x4_with_cls": tolist(hf_mae_table.detach()),
        "mae_4x4_with_cls": tolist(mae_table),
        "mae_commit": commit(refs / "mae"),
        "timm_default": tolist(build_sincos2d_pos_embed([h, w], d)),
        "timm_interleave_sin_cos": tolist(
            build_sincos2d_pos_embed([h, w], d, interleave_sin_cos=True)
        ),
        **detr,
    }  # fmt: skip


def resize(refs: pathlib.Path) -> dict:
    import scipy.ndimage
    from timm.layers import resample_abs_pos_embed

    torch.manual_seed(0)
    table = torch.randn(1, 1 + 4 * 4, 6)  # class row + a 4 x 4 grid, D = 6
    out = {"table_1_cls_4x4": tolist(table[0])}
    for new in ((6, 5), (3, 3)):
        for antialias in (True, False):
            res = resample_abs_pos_embed(
                table, list(new), old_size=[4, 4], num_prefix_tokens=1,
                antialias=antialias,
            )  # fmt: skip
            out[f"timm_{new[0]}x{new[1]}_antialias_{antialias}"] = tolist(res[0])
    vit = load(
        refs / "vision_transformer/vit_jax/checkpoint.py",
        ["interpolate_posembed"],
        {"np": np, "jnp": np, "scipy": scipy,
         "logging": type("L", (), {"info": staticmethod(print)})},
    )  # fmt: skip
    res = vit["interpolate_posembed"](table.numpy(), 1 + 6 * 6, has_class_token=True)
    out["vit_zoom_6x6"] = tolist(res[0])
    out["vit_commit"] = commit(refs / "vision_transformer")
    return out


def swin(refs: pathlib.Path) -> dict:
    from timm.layers import to_2tuple, trunc_normal_
    from timm.models.swin_transformer import get_relative_position_index

    ns = load(
        refs / "swin/models/swin_transformer.py",
        ["WindowAttention"],
        {"torch": torch, "nn": torch.nn, "to_2tuple": to_2tuple,
         "trunc_normal_": trunc_normal_},
    )  # fmt: skip
    out = {"swin_commit": commit(refs / "swin")}
    for wh, ww in ((2, 3), (3, 2), (7, 7)):
        attn = ns["WindowAttention"](dim=8, window_size=(wh, ww), num_heads=2)
        out[f"swin_{wh}x{ww}"] = attn.relative_position_index.tolist()
        out[f"timm_{wh}x{ww}"] = get_relative_position_index(wh, ww).tolist()
    return out


def rope(refs: pathlib.Path) -> dict:
    ns = load(
        refs / "rope-vit/models/vit_rope.py",
        ["init_random_2d_freqs", "compute_mixed_cis", "compute_axial_cis",
         "init_t_xy", "reshape_for_broadcast", "apply_rotary_emb"],
        {"torch": torch},
    )  # fmt: skip
    end_x, end_y, heads, dim = 5, 3, 2, 16  # a 3-row, 5-column grid
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, heads, end_x * end_y, dim).unbind(0)  # (1, h, N, d)
    axial = ns["compute_axial_cis"](dim, end_x, end_y, theta=100.0)  # (N, d/2) complex
    qa, ka = ns["apply_rotary_emb"](q, k, axial)
    freqs = ns["init_random_2d_freqs"](dim, heads, theta=10.0)  # (2, h, d/2): x, y
    flat = freqs.view(2, 1, -1)  # (2, depth = 1, h d/2), as rope_vit_models stores it
    t_x, t_y = ns["init_t_xy"](end_x, end_y)
    mixed = ns["compute_mixed_cis"](flat, t_x, t_y, heads)[0]  # (h, N, d/2) complex
    qm, km = ns["apply_rotary_emb"](q, k, mixed)
    return {
        "rope_vit_commit": commit(refs / "rope-vit"),
        "end_x": end_x, "end_y": end_y, "heads": heads, "dim": dim,
        "q": tolist(q[0]), "k": tolist(k[0]),
        "axial_theta": 100.0, "axial_q": tolist(qa[0]), "axial_k": tolist(ka[0]),
        "mixed_theta": 10.0, "mixed_freqs_xy": tolist(freqs),
        "mixed_q": tolist(qm[0]), "mixed_k": tolist(km[0]),
        "unrotated_freqs_xy": tolist(
            ns["init_random_2d_freqs"](dim, heads, theta=10.0, rotate=False)
        ),
    }  # fmt: skip


def main() -> None:
    import timm
    import transformers

    refs = pathlib.Path(sys.argv[1])
    versions = {
        "torch": torch.__version__, "timm": timm.__version__,
        "transformers": transformers.__version__,
    }  # fmt: skip
    for name, make in (("sincos", sincos), ("resize", resize), ("swin", swin),
                       ("rope", rope)):  # fmt: skip
        path = OUT / f"vision_{name}.json"
        path.write_text(json.dumps({"versions": versions, **make(refs)}) + "\n")
        print("wrote", path)


if __name__ == "__main__":
    main()

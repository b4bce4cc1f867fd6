"""Golden vectors for tests/test_lie.py, from timm's 2-D rotary embeddings.

Run in a throw-away environment with torch and timm (the course does not depend on
timm)::

    python tests/golden/make_lie_golden.py

The file was made with timm 1.0.31 and torch 2.15.0 (recorded in the JSON). Both
classes live in ``timm/layers/pos_embed_sincos.py`` and are run unmodified:

* ``RotaryEmbeddingMixed`` (RoPE-Mixed, Heo et al. 2024): learned frequencies
  ``freqs`` ``(2, depth, heads, head_dim/2)``, ``[0]`` multiplying the column
  (``grid_indexing="xy"``) and ``[1]`` the row; ``get_embed(shape)`` gives sin and
  cos per block and head, applied by ``apply_rot_embed_cat`` (interleaved pairs).
* ``RotaryEmbeddingDinoV3`` (DINOv3): ``get_embed(shape)`` in eval mode, with
  ``normalize_coords`` "separate" and "max", and in training mode with shift, jitter
  and rescale augmentations after ``torch.manual_seed(0)``; applied with
  ``apply_rot_embed_cat(..., half=True)``. ``make_coords_dinov3`` gives the
  coordinates.
"""

import json
import pathlib

import numpy as np
import torch

OUT = pathlib.Path(__file__).parent / "lie_timm.json"


def tolist(t) -> list:
    return np.asarray(t.detach(), dtype=np.float64).tolist()


def main() -> None:
    import timm
    from timm.layers.pos_embed_sincos import (
        RotaryEmbeddingDinoV3,
        RotaryEmbeddingMixed,
        apply_rot_embed_cat,
        make_coords_dinov3,
    )

    h, w, heads, head_dim, depth = 3, 5, 2, 16, 2
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, heads, h * w, head_dim).unbind(0)  # (1, h, N, d)
    out = {
        "versions": {"torch": torch.__version__, "timm": timm.__version__},
        "height": h, "width": w, "heads": heads, "head_dim": head_dim,
        "q": tolist(q[0]), "k": tolist(k[0]),
    }  # fmt: skip

    mixed = RotaryEmbeddingMixed(head_dim * heads, depth, heads, temperature=10.0)
    embed = mixed.get_embed([h, w])  # (depth, heads, N, 2 d)
    block = 1
    out["mixed_freqs"] = tolist(mixed.freqs[:, block])  # (2, heads, d/2): x, y
    out["mixed_q"] = tolist(apply_rot_embed_cat(q, embed[block])[0])
    out["mixed_k"] = tolist(apply_rot_embed_cat(k, embed[block])[0])

    for normalize in ("separate", "max"):
        rope = RotaryEmbeddingDinoV3(head_dim, temperature=100.0,
                                     normalize_coords=normalize).eval()  # fmt: skip
        emb = rope.get_embed([h, w])  # (N, 2 d): sin, cos
        out[f"dinov3_{normalize}_q"] = tolist(apply_rot_embed_cat(q, emb, half=True)[0])
        out[f"dinov3_{normalize}_coords"] = tolist(
            make_coords_dinov3(h, w, normalize_coords=normalize)
        )
    aug = dict(shift=0.25, jitter=1.5, rescale=2.0)
    rope = RotaryEmbeddingDinoV3(
        head_dim, temperature=100.0, shift_coords=aug["shift"],
        jitter_coords=aug["jitter"], rescale_coords=aug["rescale"],
    ).train()  # fmt: skip
    torch.manual_seed(0)
    emb = rope.get_embed([h, w])
    out["dinov3_aug"] = aug
    out["dinov3_aug_seed"] = 0
    out["dinov3_aug_q"] = tolist(apply_rot_embed_cat(q, emb, half=True)[0])
    OUT.write_text(json.dumps(out) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()

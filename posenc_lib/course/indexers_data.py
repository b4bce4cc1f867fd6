"""How the sparse-attention indexers of 2025-26 position their tokens: the data behind
the table of the chapter "Sparse attention: an indexer with its own RoPE", one
``IndexerSpec`` per model that has an ``*Indexer`` class in Hugging Face transformers
5.24.

Each row was read in ``models/<module>/modeling_<module>.py`` (``function``, the line
``line`` of that file in 5.24 rotates the indexer's queries and keys), and names the
main attention's RoPE beside the indexer's. Sizes (``d_index``, ``heads``,
``rope_dim``, the top-k) and bases are the defaults of the model's configuration class,
which a released checkpoint's ``config.json`` may override (not read by the course).
``tests/test_sparse_indexer.py`` checks every layout and slice order against golden
values recorded from the models' own indexer classes
(``tests/golden/make_sparse_indexer_golden.py``): the key ``golden`` says which part
of that file a row is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IndexerSpec", "INDEXERS", "indexer_table"]

HF = "huggingface/transformers"


@dataclass(frozen=True)
class IndexerSpec:
    model: str
    module: str  # transformers/models/<module>/modeling_<module>.py
    function: str  # the indexer's method that rotates (or scores)
    line: int  # the rotation's line in transformers 5.24 (the forward's, without)
    layout: str | None  # "half", "interleaved", None: no RoPE in the indexer
    slice_order: str | None  # "rot_first" [rot | pass], "rot_last" [pass | rot]
    rope_dim: str  # rotated coordinates, of d_index (class defaults)
    d_index: int | None  # the indexer's head size (None: no class default)
    heads: int | None  # indexer query heads
    top_k: str
    theta: str  # where the base comes from
    main: tuple  # the main attention's (layout, slice order, line); None: no RoPE
    golden: str  # the golden case that checks the row ("dsa", "rotations", ...)
    note: str = ""

    @property
    def source(self) -> str:
        return f"{HF} models/{self.module}/modeling_{self.module}.py:{self.line}"


SHARED = "the main attention's cos, sin"  # handed to the indexer by the layer

INDEXERS: tuple[IndexerSpec, ...] = (
    IndexerSpec(
        "DeepSeek-V3.2", "deepseek_v32", "DeepseekV32Indexer.forward", 221,
        "half", "rot_first", "64 of 128", 128, 64, "2048 tokens",
        f"{SHARED} (base 10000)", ("interleaved", "rot_last", 426), "dsa",
    ),
    IndexerSpec(
        "GLM-5", "glm_moe_dsa", "GlmMoeDsaIndexer.forward", 222,
        "interleaved", "rot_first", "64 of 128", 128, 32, "2048 tokens",
        f"{SHARED} (base 10000)", ("interleaved", "rot_last", 395), "dsa",
        "'shared' layers reuse the last indexer's top-k (indexer_types)",
    ),
    IndexerSpec(
        "Mistral Large 4", "mistral_large4", "MistralLarge4TextIndexer.forward", 258,
        "interleaved", "rot_first", "64 of 128", 128, 32, "2048 tokens",
        f"{SHARED} (YaRN x2048, learned exp(alpha))",
        ("interleaved", "rot_last", 438), "dsa",
        "rotates only if use_rope (:255): every 4th layer is NoPE; queries from "
        "LayerNorm(x), with a learned log-position temperature",
    ),
    IndexerSpec(
        "AXK2", "axk2", "AXK2Indexer.forward", 257,
        "half", "rot_first", "32 of 128", 128, 16, "2048 tokens",
        f"{SHARED} (base 10000)", ("interleaved", "rot_last", 605), "dsa",
    ),
    IndexerSpec(
        "HY-V4", "hy_v4", "HYV4Indexer.forward", 233,
        "half", "rot_last", "64 of 128", 128, 16, "2048 tokens",
        f"{SHARED} (base 10000)", ("half", "rot_last", 424), "dsa",
        "the indexer's RoPE is its MLA's; 'shared' layers reuse a top-k",
    ),
    IndexerSpec(
        "HY-V4-VL", "hy_v4_vl", "HYV4VLIndexer.forward", 182,
        "interleaved", "rot_last", "64 of 128", 128, 32, "2048 tokens",
        f"{SHARED} (M-RoPE, base 10000)", ("interleaved", "rot_last", 377), "dsa",
        "its apply_rotary_pos_emb is interleaved (:71), unlike HY-V4's",
    ),
    IndexerSpec(
        "dots3 note", "dots3_note", "Dots3NoteTextIndexer.forward", 261,
        "interleaved", "rot_first", "64 of 128", 128, 64, "2048 tokens",
        f"{SHARED} (base 8e7; sliding layers 5e4)",
        ("interleaved", "rot_last", 560), "dsa",
    ),
    IndexerSpec(
        "MiniMax M3", "minimax_m3_vl", "MiniMaxM3VLIndexer.forward", 567,
        "half", "rot_first", "the main's (128 of 128)", 128, 4,
        "16 blocks of 128 keys + 1 local, per head",
        f"{SHARED} (base 5e6)", ("half", "rot_first", 449), "rotations",
        "per head, the max of q.k over a block; no ReLU, no head weights",
    ),
    IndexerSpec(
        "Qwen4-Exp", "qwen4_exp", "Qwen4ExpTextQSAIndexer.forward", 730,
        "half", "rot_first", "the main's (256 x partial_rotary_factor)", None, None,
        "budget / compress_ratio blocks + tail",
        f"{SHARED} (M-RoPE, base 10000)", ("half", "rot_first", 891), "rotations",
        "a block's mean key is rotated at its first token (:762)",
    ),
    IndexerSpec(
        "GLM-5.3-Flash", "glm5_next", "Glm5NextTextIndexer.forward", 811,
        None, None, "0 of 128", 128, 32, "2048 tokens as pools of 16 + tail",
        "none: its forward takes no positions", (None, None, 1101),
        "signature",
        "pooled keys; a learned per-slot term in the pooling gate",
    ),
    IndexerSpec(
        "DeepSeek-V4", "deepseek_v4", "DeepseekV4Indexer.forward", 576,
        "interleaved", "rot_last", "64 of 128", 128, 64, "512 blocks of 4 tokens",
        "its own rotary: compress_rope_theta 160000", ("interleaved", "rot_last", 830),
        "rotations",
        "compressed keys rotated at their block's start (:566); the CSA layers' "
        "main attention uses the same base, the sliding layers 10000",
    ),
)  # fmt: skip


def indexer_table() -> list[dict[str, str]]:
    """One row per model: its indexer's RoPE (layout, slice order, rotated
    dimensions), the base, the main attention's RoPE, the selection and the source."""
    return [
        {
            "model": s.model,
            "indexer RoPE": (
                "none" if s.layout is None
                else f"{s.layout}, {s.slice_order}, {s.rope_dim}"
            ),
            "base": s.theta,
            "main attention": (
                "none" if s.main[0] is None
                else f"{s.main[0]}, {s.main[1]} (:{s.main[2]})"
            ),
            "selection": s.top_k,
            "source": f"{s.module}: {s.function} (:{s.line})",
            "note": s.note,
        }
        for s in INDEXERS
    ]  # fmt: skip

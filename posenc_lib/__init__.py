"""posenc_lib: every positional encoding of the course behind one interface.

>>> import posenc_lib as pl
>>> pe = pl.make_encoding("sinusoidal", d_model=64, n_heads=4, max_len=128)
>>> model = pl.TinyTransformer(vocab_size=10, d_model=64, n_heads=4, pe=pe)

Shape legend: b batch, h heads, n length, i/j query/key positions, d head dim,
D model dim.
"""

from . import lab  # noqa: F401  (the length-extrapolation harness: pl.lab)
from .attention import (
    MultiHeadAttention,
    as_positions,
    attention,
    prepare,
    reference_attention,
)
from . import book, exercises
from .base import FOUR_TERMS, HOOKS, Context, PositionalEncoding
from .decoding import (
    forward_with_cache,
    padded_causal_mask,
    positions_from_mask,
    rope_attention_step,
)
from .data import CharCorpus, MarkovSource, copy_offset_batch, stdlib_corpus
from .encodings import *  # noqa: F401,F403  (every encoding module registers itself)
from .encodings import __all__ as _encodings_all
from .cache import KVCache
from .layouts import half_to_interleaved, interleaved_to_half, layout_permutation
from .measure import (
    BENCH_DIR,
    attention_benchmark,
    best_time,
    count_host_syncs,
    tensor_memory,
)
from .model import TinyTransformer
from .models_data import DEPLOYED_MODELS, model_table, spec_inv_freq
from .positions import Positions
from .plotting import (
    COLORS,
    color_for,
    heatmap,
    label_points,
    overlapping_labels,
    set_plot_style,
)
from .registry import NEEDS_MAX_LEN, REGISTRY, make_encoding, register
from .taxonomy import four_term_table
from .train import accuracy, evaluate, train
from .utils import (
    check_nonnegative_int,
    check_positive_int,
    check_shape,
    get_device,
    seed_everything,
)

__version__ = "0.1.0"

__all__ = [
    "book",
    "exercises",
    "MultiHeadAttention",
    "attention",
    "as_positions",
    "prepare",
    "reference_attention",
    "Positions",
    "count_host_syncs",
    "PositionalEncoding",
    "Context",
    "HOOKS",
    "FOUR_TERMS",
    "CharCorpus",
    "MarkovSource",
    "copy_offset_batch",
    "stdlib_corpus",
    "forward_with_cache",
    "padded_causal_mask",
    "positions_from_mask",
    "rope_attention_step",
    "interleaved_to_half",
    "half_to_interleaved",
    "layout_permutation",
    "TinyTransformer",
    "DEPLOYED_MODELS",
    "model_table",
    "spec_inv_freq",
    "best_time",
    "tensor_memory",
    "attention_benchmark",
    "BENCH_DIR",
    "COLORS",
    "color_for",
    "heatmap",
    "label_points",
    "overlapping_labels",
    "set_plot_style",
    "REGISTRY",
    "KVCache",
    "NEEDS_MAX_LEN",
    "make_encoding",
    "register",
    "four_term_table",
    "accuracy",
    "evaluate",
    "train",
    "check_nonnegative_int",
    "check_positive_int",
    "check_shape",
    "get_device",
    "seed_everything",
    *_encodings_all,
]

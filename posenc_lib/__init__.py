"""posenc_lib: every positional encoding of the course behind one interface.

>>> import posenc_lib as pl
>>> pe = pl.make_encoding("sinusoidal", d_model=64, n_heads=4, max_len=128)
>>> model = pl.TinyTransformer(vocab_size=10, d_model=64, n_heads=4, pe=pe)

The library is what a model uses: the encodings (``encodings/``, ``registry.py``),
attention and its backends, the model, positions, the KV cache, training helpers. It
needs torch, numpy and tqdm only. The course's own code (the chapters' helpers, the
exercise checks, the lab, plotting, interactive figures, the model tables) lives in
``posenc_lib.course`` and is loaded on first use: ``pl.book``, ``pl.exercises``,
``pl.lab``, ``pl.heatmap``, ... work as before, and ``import posenc_lib`` loads no
plotting library. Its dependencies are the ``course`` extra
(``pip install "posenc_lib[course]"``).

Shape legend: b batch, h heads, n length, i/j query/key positions, d head dim,
D model dim.
"""

from .attention import (
    as_positions,
    attention,
    prepare,
    reference_attention,
)
from .backends import explain_path
from .layer import MultiHeadAttention
from .base import FOUR_TERMS, HOOKS, Context, PositionalEncoding
from .cache import KVCache
from .data import CharCorpus, MarkovSource, copy_offset_batch, stdlib_corpus
from .decoding import (
    forward_with_cache,
    padded_causal_mask,
    positions_from_mask,
    rope_attention_step,
)
from .encodings import *  # noqa: F401,F403  (every encoding module registers itself)
from .encodings import __all__ as _encodings_all
from .layouts import half_to_interleaved, interleaved_to_half, layout_permutation
from .measure import (
    BENCH_DIR,
    attention_benchmark,
    benchmark_devices,
    benchmark_machine,
    model_benchmark,
    best_time,
    count_host_syncs,
    tensor_memory,
)
from .model import TinyTransformer
from .positions import Positions
from .registry import NEEDS_MAX_LEN, REGISTRY, make_encoding, register
from .train import accuracy, evaluate, train
from .utils import (
    check_nonnegative_int,
    check_positive_int,
    check_shape,
    get_device,
    seed_everything,
)
from .lazy import course_attribute, install_aliases

install_aliases()  # posenc_lib.book, posenc_lib.exercises.rope, ...: posenc_lib.lazy


def __getattr__(name: str):
    """The course's modules and names, loaded on first use (``pl.book``,
    ``pl.exercises``, ``pl.lab``, ``pl.heatmap``, ...): see ``posenc_lib.lazy``."""
    return course_attribute(name)


__version__ = "0.1.0"

__all__ = [
    "book",
    "exercises",
    "MultiHeadAttention",
    "attention",
    "as_positions",
    "prepare",
    "reference_attention",
    "explain_path",
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
    "benchmark_devices",
    "benchmark_machine",
    "model_benchmark",
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

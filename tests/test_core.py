"""The core's promises to a GPU and to torch.compile: an eval forward of a model reads
tensor values into Python a fixed number of times, whatever its depth, and compiles
as one graph that matches eager.

The encodings below are every registered sequence encoding whose default path is
the fused kernel (held to the registry below, so a new one is covered).
"""

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl

FUSED_DEFAULT = [
    "nope", "rope", "rope_dynamic", "alibi", "t5", "fox", "learned", "sinusoidal",
    "axial", "xpos", "conv_pos", "tener", "transformer_xl", "huang_m3", "huang_m4",
    "path", "path_fox",
    "rope_chunked", "nope_tempered", "sink", "dsa", "rope_values",
    "lerope", "inkling_bias", "ddrope", "fope",
]  # fmt: skip


def model(name: str, n_layers: int) -> pl.TinyTransformer:
    torch.manual_seed(0)
    pe = pl.make_encoding(name, d_model=64, n_heads=4, max_len=64)
    return pl.TinyTransformer(32, 64, 4, n_layers, pe=pe).eval()


def test_the_list_is_every_sequence_encoding_on_the_fused_path():
    built = {
        n: pl.make_encoding(n, d_model=64, n_heads=4, max_len=64) for n in pl.REGISTRY
    }
    fused = {
        n for n, pe in built.items()
        if pe.coord_axes is None and not pe.side_inputs and not pe.needs_score_path
    }  # fmt: skip
    assert fused == set(FUSED_DEFAULT)


@pytest.mark.parametrize("name", FUSED_DEFAULT)
def test_host_syncs_do_not_grow_with_depth(name):
    """At most 2 in all (the vocabulary check; a learned table's range check), at 2
    layers and at 8: was 14 and 50-74 (six per layer) before the core was split."""
    tokens = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(1))
    counts = []
    for n_layers in (2, 8):
        m = model(name, n_layers)
        with torch.no_grad():
            m(tokens)  # warm-up
            _, syncs = pl.count_host_syncs(lambda: m(tokens))
        counts.append(syncs)
    assert counts[0] == counts[1] <= 2, counts


def test_the_sync_counter_counts():
    t = torch.arange(4)
    _, n = pl.count_host_syncs(
        lambda: (bool(t.any()), t.tolist(), int(t[0]), t.sum().item())
    )
    assert n == 4


@pytest.mark.parametrize("name", FUSED_DEFAULT)
def test_compiles_as_one_graph_and_matches_eager(name):
    torch._dynamo.reset()  # each model is a new graph, not a recompile of the last
    m = model(name, 2)
    tokens = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(2))
    try:
        compiled = torch.compile(m, fullgraph=True)
        with torch.no_grad():
            out = compiled(tokens)
    except Exception as error:  # no C++ compiler: say so instead of failing
        if "compiler" in str(error).lower() and "cxx" in str(error).lower():
            pytest.skip(f"torch.compile cannot build here: {error}")
        raise
    with torch.no_grad():
        assert_close(out, m(tokens), atol=1e-4, rtol=0)

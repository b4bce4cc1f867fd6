"""Bad input to posenc_lib is answered with a clear error that names the argument and
the constraint: never a silent wrong answer, NaN, zeros or a bare framework error.

One row per case from the review of Parts 0-III: (what is called, expected error type,
a fragment of the message that names the argument)."""

import math

import pytest
import torch

import posenc_lib as pl


def _rope(d_model=16, n_heads=2):
    return pl.make_encoding("rope", d_model=d_model, n_heads=n_heads, max_len=16)


def _attention_with_nan_query():
    q = torch.randn(1, 1, 4, 8)
    q[0, 0, 0, 0] = float("nan")
    return pl.attention(q, q.nan_to_num(), q.nan_to_num())


CASES = {
    "apply_rope on integer x": (
        lambda: pl.apply_rope(
            torch.ones(1, 1, 4, 8, dtype=torch.long),
            torch.arange(4),
            pl.rope_inv_freq(8)[0],
        ),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "Rotary on integer q and k": (
        lambda: _rope().transform_qk(
            *(torch.ones(1, 2, 4, 8, dtype=torch.long),) * 2,
            torch.arange(4)[None],
            torch.arange(4)[None],
        ),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "Rotary with q and k of different head dims": (
        lambda: _rope().transform_qk(
            torch.randn(1, 2, 4, 8),
            torch.randn(1, 2, 4, 6),
            torch.arange(4)[None],
            torch.arange(4)[None],
        ),
        ValueError,
        "k has head dimension 6",
    ),
    "Sinusoidal.encode_input on integer x": (
        lambda: pl.make_encoding(
            "sinusoidal", d_model=8, n_heads=1, max_len=16
        ).encode_input(torch.ones(1, 4, 8, dtype=torch.long), torch.arange(4)[None]),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "attention with a NaN query": (
        _attention_with_nan_query,
        ValueError,
        "q holds NaN or infinite values",
    ),
    "attention on integer tensors": (
        lambda: pl.attention(*(torch.ones(1, 1, 4, 8, dtype=torch.long),) * 3),
        TypeError,
        "q must be a floating-point tensor",
    ),
    "attention with a wrongly shaped mask": (
        lambda: pl.attention(
            *(torch.randn(1, 1, 4, 8),) * 3, mask=torch.ones(3, 3, dtype=torch.bool)
        ),
        ValueError,
        "mask must be broadcastable",
    ),
    "MarkovSource(temperature=0)": (
        lambda: pl.MarkovSource(temperature=0),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "MarkovSource(temperature=nan)": (
        lambda: pl.MarkovSource(temperature=math.nan),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "MarkovSource(temperature=-1)": (
        lambda: pl.MarkovSource(temperature=-1),
        ValueError,
        "temperature must be a finite number > 0",
    ),
    "axial past max_len (its grid holds more rows)": (
        lambda: pl.make_encoding(
            "axial", d_model=8, n_heads=2, max_len=10
        ).encode_input(torch.zeros(1, 11, 8), torch.arange(11)[None]),
        ValueError,
        "pos must lie in [0, max_len) = [0, 10)",
    ),
    "stdlib_corpus with a missing module": (
        lambda: pl.stdlib_corpus(modules=("os", "no_such_module")),
        ValueError,
        "no_such_module",
    ),
    "HuangMethod3(d_head=0)": (
        lambda: pl.HuangMethod3(d_head=0, max_distance=4),
        ValueError,
        "d_head",
    ),
    "setup(threads=0)": (
        lambda: pl.setup(threads=0),
        ValueError,
        "threads must be a positive int",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_a_clear_error(case):
    call, error, fragment = CASES[case]
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value), f"{case}: {info.value}"


def test_setup_still_accepts_none_and_one():
    pl.setup(threads=None)
    pl.setup(threads=1)
    assert torch.get_num_threads() == 1

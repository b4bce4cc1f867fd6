"""Checks for the exercises of book/part7/rope_deployed.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import Wrong, call, exercise, expect, plant
from posenc_lib.course.exercises._values import close, number, numbers

CHAPTER = "part7/rope_deployed"

# ---------------------------------------------------------------- ex-deployed-1

CONVERT_STUB = '''\
def to_proportional(d, r, b):
    """Run a partial-rotary checkpoint (r of d coordinates rotated, base b) as
    rope_type "proportional": return (partial_rotary_factor, base, perm), where perm
    (d,) is the permutation of the rows of every head's W_q and W_k (new row j is
    old row perm[j])."""
    ...  # your code
'''

CONVERT_CASES = [(16, 8, 10000.0), (32, 8, 500.0), (64, 48, 1e6)]


def _scores_partial(q, k, pos, r, b):
    theta = pl.rope_inv_freq(r, b)[0]
    rq = pl.apply_rope(q, pos, theta, rotary_dim=r)
    rk = pl.apply_rope(k, pos, theta, rotary_dim=r)
    return rq @ rk.T  # (n, n)


@exercise("ex-deployed-1", chapter=CHAPTER, stub=CONVERT_STUB)
def _(answer):
    gen = torch.Generator().manual_seed(0)
    for d, r, b in CONVERT_CASES:
        desc = f"d = {d}, r = {r}, b = {b:g}"
        out = call(answer, d, r, b, desc=desc)
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise Wrong(
                f"on {desc}, return a tuple (partial_rotary_factor, base, perm)"
            )
        p = number(out[0], "partial_rotary_factor")
        base = number(out[1], "base")
        perm = torch.as_tensor(out[2]).long().flatten()
        expect(
            int(p * d // 2) == r // 2,
            f"on {desc}, partial_rotary_factor {p:g} rotates {int(p * d // 2)} pairs "
            f"of the head, not {r // 2}",
        )
        want = torch.zeros(d // 2, dtype=torch.float64)
        want[: r // 2] = pl.rope_inv_freq(r, b)[0]
        got = pl.rope_inv_freq(d, base, "proportional", partial_rotary_factor=p)[0]
        if not torch.allclose(got.double(), want, rtol=1e-6):
            hint = (
                "the same base gives pair i the frequency b^(-2i/d), not b^(-2i/r)"
                if close(base, b)
                else f"pair 1 turns at {float(got[1]):.4g} instead of "
                f"{float(want[1]):.4g}"
            )
            raise Wrong(f"on {desc}, base {base:.6g} gives other frequencies: {hint}")
        expect(
            perm.shape == (d,) and torch.equal(perm.sort().values, torch.arange(d)),
            f"on {desc}, perm is not a permutation of 0 .. {d - 1}",
        )
        n = 6
        q = torch.randn(n, d, generator=gen, dtype=torch.float64)
        k = torch.randn(n, d, generator=gen, dtype=torch.float64)
        pos = torch.randint(0, 50, (n,), generator=gen)
        theta = pl.rope_inv_freq(d, base, "proportional", partial_rotary_factor=p)[0]
        qp, kp = q[:, perm], k[:, perm]  # rows of W_q, W_k permuted
        s_prop = pl.apply_rope(qp, pos, theta) @ pl.apply_rope(kp, pos, theta).T
        s_part = _scores_partial(q, k, pos, r, b)
        if not torch.allclose(s_prop, s_part, atol=1e-8):
            raise Wrong(
                f"on {desc}, the scores of the permuted weights under p-RoPE differ "
                "from the checkpoint's (largest gap "
                f"{float((s_prop - s_part).abs().max()):.3g}): partial rotary pairs "
                "coordinates (i, i + r/2), p-RoPE pairs (i, i + d/2)"
            )
    return (
        "same frequencies as pl.rope_inv_freq(r, b) padded with zeros, and the "
        "permuted q, k give the checkpoint's scores, for (d, r, b) = "
        + ", ".join(f"({d}, {r}, {b:g})" for d, r, b in CONVERT_CASES)
        + "."
    )


def _perm(d, r):
    rest = list(range(r, d))
    first, second = list(range(r // 2)), list(range(r // 2, r))
    return first + rest[: d // 2 - r // 2] + second + rest[d // 2 - r // 2 :]


plant(
    "ex-deployed-1",
    lambda d, r, b: (r / d, b, _perm(d, r)),
    says="not b^(-2i/r)",
)
plant(
    "ex-deployed-1",
    lambda d, r, b: (r / d, b ** (r / d), _perm(d, r)),
    says="gives other frequencies",
)
plant(
    "ex-deployed-1",
    lambda d, r, b: (r / d, b ** (d / r), list(range(d))),
    says="pairs coordinates (i, i + r/2)",
)
plant(
    "ex-deployed-1",
    lambda d, r, b: (r / (2 * d), b ** (d / r), _perm(d, r)),
    says="rotates",
)
plant("ex-deployed-1", lambda d, r, b: (r / d, b ** (d / r)), says="return a tuple")

# ---------------------------------------------------------------- ex-deployed-2

GEMMA_STUB = """\
# Gemma 4's global layers: coordinates of a query with no position at all, and the
# longest rotated wavelength in tokens
gemma4_global = ...  # your answer: (position_free, longest_wavelength)
"""


@exercise("ex-deployed-2", chapter=CHAPTER, stub=GEMMA_STUB)
def _(answer):
    free, wave = numbers(
        answer, ["position_free", "longest_wavelength"], "gemma4_global"
    )
    spec = {m.name: m for m in pl.DEPLOYED_MODELS}["Gemma 4"].specs[1]
    d, base = spec.d_head, spec.base
    theta = pl.rope_inv_freq(d, base, spec.scaling, **spec.params)[0]  # (d/2,)
    rotated = theta > 0
    want_free = d - 2 * int(rotated.sum())
    want_wave = float(2 * math.pi / theta[rotated].min())
    if free == d - int(rotated.sum()):
        raise Wrong(
            f"`position_free` is {free:.0f}: each rotated pair holds two coordinates"
        )
    expect(free == want_free, f"`position_free` is {free:.0f} of {d} coordinates")
    k = int(rotated.sum())
    if close(wave, 2 * math.pi * base ** (2 * (k - 1) / (2 * k)), rel=1e-3):
        raise Wrong(
            f"`longest_wavelength` is {wave:.4g}: p-RoPE keeps the full head's "
            "frequencies base^(-2i/d) for the pairs it rotates"
        )
    if close(wave, want_wave / (2 * math.pi), rel=1e-3):
        raise Wrong(
            f"`longest_wavelength` is {wave:.4g}, 1 / theta: a turn is 2 pi radians"
        )
    expect(
        close(wave, want_wave, rel=1e-3),
        f"`longest_wavelength` is {wave:.4g} tokens, not the period of the slowest "
        "rotated pair",
    )
    return (
        f"{want_free} position-free coordinates and a longest rotated wavelength of "
        f"{want_wave:.0f} tokens (pl.rope_inv_freq with Gemma 4's global spec)."
    )


plant("ex-deployed-2", (448, 6.5e4), says="two coordinates")
plant("ex-deployed-2", (384, 2 * math.pi * 1e6 ** (126 / 128)), says="full head's")
plant("ex-deployed-2", (384, 1e6 ** (126 / 512)), says="2 pi radians")
plant("ex-deployed-2", (384,), says="should be a tuple")

# ---------------------------------------------------------------- ex-deployed-3

MLA_STUB = """\
# numbers DeepSeek-V3 caches per token and layer: with one shared rotated key, and
# if each of the 128 heads had its own 64-coordinate rotated key
mla_cache_sizes = ...  # your answer: (shared, per_head)
"""


@exercise("ex-deployed-3", chapter=CHAPTER, stub=MLA_STUB)
def _(answer):
    shared, per_head = numbers(answer, ["shared", "per_head"], "mla_cache_sizes")
    cfg = pl.models_data.MLA_DEEPSEEK_V3
    latent, rope, heads = (
        cfg["kv_lora_rank"],
        cfg["qk_rope_head_dim"],
        cfg["num_attention_heads"],
    )
    if shared == latent:
        raise Wrong(
            f"`shared` is {shared:.0f}: the shared rotated key is cached with the "
            "latent"
        )
    expect(shared == latent + rope, f"`shared` is {shared:.0f} numbers")
    if per_head == heads * rope:
        raise Wrong(
            f"`per_head` is {per_head:.0f}: the latent c is still cached beside "
            "the rotated keys"
        )
    if per_head == latent + heads * (rope + cfg["qk_nope_head_dim"]):
        raise Wrong(
            f"`per_head` is {per_head:.0f}: only the rotated part of each key would "
            "be per head; the rest is still rebuilt from the latent"
        )
    expect(per_head == latent + heads * rope, f"`per_head` is {per_head:.0f} numbers")
    return (
        f"{latent + rope} and {latent + heads * rope} numbers per token and layer, "
        "from DeepseekV3Config's defaults (pl.models_data.MLA_DEEPSEEK_V3)."
    )


plant("ex-deployed-3", (512, 512 + 128 * 64), says="cached with the latent")
plant("ex-deployed-3", (576, 128 * 64), says="still cached beside")
plant("ex-deployed-3", (576, 512 + 128 * 192), says="only the rotated part")
plant("ex-deployed-3", None, says="No answer yet")

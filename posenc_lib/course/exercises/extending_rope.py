"""Checks for the exercises of book/part3/extending_rope.ipynb."""

from __future__ import annotations

import math

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import (
    Wrong,
    call,
    exercise,
    expect,
    expect_close,
    plant,
)
from posenc_lib.course.exercises._values import as_float
from posenc_lib.utils import module_device

NTK_STUB = '''\
def ntk_base(base, s, d):
    """The base of NTK-aware scaling by a factor s for head size d (a float)."""
    ...  # your code
'''

NTK_CASES = [(10_000.0, 8.0, 16), (10_000.0, 4.0, 64), (500_000.0, 2.0, 128)]


@exercise("ex-extrope-ntk-exponent", chapter="part3/extending_rope", stub=NTK_STUB)
def _(answer):
    for base, s, d in NTK_CASES:
        desc = f"base {base:g}, s = {s:g}, d = {d}"
        got = call(answer, base, s, d, desc=desc)
        new_base = as_float(got, desc)
        expect(
            math.isfinite(new_base) and new_base > 1,
            f"on {desc}, your base is {new_base:g}: a RoPE base must be > 1",
        )
        plain, _ = pl.rope_inv_freq(d, base)
        scaled, _ = pl.rope_inv_freq(d, new_base)
        ratio = float(scaled[-1] / plain[-1])  # the slowest pair's change
        if math.isclose(new_base, base * s, rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your base is base * s (exponent 1): the slowest pair is "
                f"divided by s^((d-2)/d) = {1 / ratio:.4g}, not by s = {s:g}"
            )
        if math.isclose(new_base, base * s ** ((d - 2) / d), rel_tol=1e-9):
            raise Wrong(
                f"on {desc}, your exponent is (d-2)/d, upside down: the slowest pair "
                f"is divided by {1 / ratio:.4g}, not by s = {s:g}"
            )
        expect_close(
            ratio,
            1 / s,
            desc=desc,
            what="the slowest pair's frequency, relative to plain RoPE,",
            rtol=1e-9,
        )
        want, _ = pl.rope_inv_freq(d, base, "ntk", factor=s)
        expect_close(scaled, want, desc=desc, what="the frequencies", rtol=1e-9)
    return (
        "the slowest pair is divided by exactly s and the frequencies equal "
        "pl.rope_inv_freq(d, base, 'ntk', factor=s) for (base, s, d) = "
        + ", ".join(f"({b:g}, {s:g}, {d})" for b, s, d in NTK_CASES)
        + "."
    )


plant("ex-extrope-ntk-exponent", lambda base, s, d: base * s, says="exponent 1")
plant(
    "ex-extrope-ntk-exponent",
    lambda base, s, d: base * s ** ((d - 2) / d),
    says="upside down",
)
plant(
    "ex-extrope-ntk-exponent",
    lambda base, s, d: base * s**2,
    says="relative to plain RoPE",
)
plant("ex-extrope-ntk-exponent", lambda base, s, d: 1 / s, says="must be > 1")
plant("ex-extrope-ntk-exponent", lambda base, s, d: None, says="returned None")


RAMP_STUB = '''\
def llama3_by_ramp(d_head, base, factor, L0, low, high):
    """Llama 3's scaled frequencies (d_head/2,), computed with YaRN's paper ramp
    (alpha = low, beta = high) instead of Llama 3's own rule."""
    ...  # your code
'''

RAMP_CASES = [
    (128, 500_000.0, 8.0, 8192, 1.0, 4.0),  # Llama 3.1
    (64, 10_000.0, 4.0, 2048, 2.0, 16.0),
    (16, 10_000.0, 2.0, 32, 1.0, 4.0),
]


@exercise("ex-extrope-llama3", chapter="part3/extending_rope", stub=RAMP_STUB)
def _(answer):
    for d, base, factor, L0, low, high in RAMP_CASES:
        desc = (
            f"d_head = {d}, base {base:g}, factor {factor:g}, L0 = {L0}, "
            f"low {low:g}, high {high:g}"
        )
        got = call(answer, d, base, factor, L0, low, high, desc=desc)
        want, _ = pl.rope_inv_freq(
            d,
            base,
            "llama3",
            factor=factor,
            original_max_position_embeddings=L0,
            low_freq_factor=low,
            high_freq_factor=high,
        )
        theta, _ = pl.rope_inv_freq(d, base)
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g = got.detach().double()
            # the ramp the other way round: keep the slow pairs, scale the fast
            turns = L0 * theta / (2 * math.pi)
            gamma = ((turns - low) / (high - low)).clamp(0, 1)
            if torch.allclose(g, gamma * theta / factor + (1 - gamma) * theta):
                raise Wrong(
                    f"on {desc}, your ramp is the wrong way round: pairs that turn "
                    "many times over L0 keep their frequency, slow pairs are divided"
                )
            wl = 2 * math.pi / theta  # wavelengths instead of turns
            gamma = ((wl - low) / (high - low)).clamp(0, 1)
            if torch.allclose(g, (1 - gamma) * theta / factor + gamma * theta):
                raise Wrong(
                    f"on {desc}, your ramp reads the wavelength 2 pi / theta_i; r_i "
                    "counts turns over L0 tokens, L0 theta_i / (2 pi)"
                )
        expect_close(got, want, desc=desc, what="your inv_freq", rtol=1e-6)
    return (
        "equals pl.rope_inv_freq(..., 'llama3') for Llama 3.1's values and two other "
        "settings: the ramp in turns r_i = L0 theta_i / (2 pi) is Llama 3's rule."
    )


def _ramp(d, base, factor, L0, low, high, *, turns_of=None, flip=False):
    theta, _ = pl.rope_inv_freq(d, base)
    r = turns_of(theta) if turns_of else L0 * theta / (2 * math.pi)
    gamma = ((r - low) / (high - low)).clamp(0, 1)
    if flip:
        gamma = 1 - gamma
    return (1 - gamma) * theta / factor + gamma * theta


plant(
    "ex-extrope-llama3",
    lambda *a: _ramp(*a, flip=True),
    says="wrong way round",
)
plant(
    "ex-extrope-llama3",
    lambda *a: _ramp(*a, turns_of=lambda t: 2 * math.pi / t),
    says="wavelength",
)
plant(
    "ex-extrope-llama3",
    lambda *a: _ramp(*a, turns_of=lambda t: a[3] * t),
    says="your inv_freq differs",
)
plant("ex-extrope-llama3", lambda *a: None, says="returned None")


# ---- ex-extrope-finetune: the fine-tuned model and its loss -------------------------

FINETUNE_STUB = """\
# the chapter's model after 50 steps of fine-tuning at length 128 with position
# interpolation (s = 4), its loss on evals[128], and YaRN's zero-shot loss
# results["yarn", 128]
finetuned = {"model": ..., "loss_128": ..., "yarn_128": ...}  # your answer
"""

_L, _D_HEAD = 32, 16  # the chapter's training length and head size


def _evals_128() -> torch.Tensor:
    """The chapter's ``evals[128]``: 16 sequences of 129 tokens from the same chain."""
    source = pl.MarkovSource(n_states=8, order=2, seed=0)
    g = torch.Generator().manual_seed(1000)
    source.sample(16, 33, g), source.sample(16, 65, g)  # evals[32], evals[64]
    return source.sample(16, 129, g), source.loss_floor


@exercise("ex-extrope-finetune", chapter="part3/extending_rope", stub=FINETUNE_STUB)
def _(answer):
    keys = {"model", "loss_128", "yarn_128"}
    if not isinstance(answer, dict) or not keys <= set(answer):
        raise Wrong(
            'finetuned must be a dict with keys "model", "loss_128", "yarn_128"'
        )
    blank = [key for key in ("model", "loss_128", "yarn_128") if answer[key] is ...]
    if blank:
        raise Wrong(
            "not attempted yet: "
            + ", ".join(f'"{key}"' for key in blank)
            + " still "
            + ("holds" if len(blank) == 1 else "hold")
            + " the stub's `...`"
        )
    model = answer["model"]
    if not isinstance(model, pl.TinyTransformer):
        raise Wrong(f"the model is a {type(model).__name__}, not a pl.TinyTransformer")
    reported = as_float(answer["loss_128"], "the loss at 128")
    yarn = as_float(answer["yarn_128"], "YaRN's loss at 128")
    for k, block in enumerate(model.blocks):
        if block.attn.pe is not model.pe:
            raise Wrong(
                f"block {k} attends with another encoding than model.pe: switch the "
                "encoding of every block (use_encoding does)"
            )
    pe = model.pe
    if not isinstance(pe, pl.Rotary) or pe.scaling != "linear":
        what = getattr(pe, "scaling", None) or type(pe).__name__
        raise Wrong(
            f"the model's encoding is {what}; position interpolation is "
            "pl.Rotary(d_head, scaling='linear', factor=4.0)"
        )
    base = pl.rope_inv_freq(_D_HEAD)[0].to(pe.inv_freq)
    s = (base[0] / pe.inv_freq[0]).item()
    if not math.isclose(s, 4.0, rel_tol=1e-6):
        raise Wrong(f"the model interpolates positions by s = {s:.3g}; 128 / 32 = 4")
    evals, floor = _evals_128()
    device = module_device(model)  # judge the model where it is
    with torch.no_grad():
        x = evals.to(device)
        logits = model(x[:, :-1])
        got = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:]).item()
    if abs(got - reported) > 0.03:
        raise Wrong(
            f"you report a loss of {reported:.3f} at 128, but the model's loss on the "
            f"chapter's evals[128] is {got:.3f}: is this the model you fine-tuned?"
        )
    if got > floor + 0.4:
        raise Wrong(
            f"the model's loss at 128 is {got:.3f}, {got - floor:.2f} above the loss "
            f"floor {floor:.3f}; in our runs 50 steps of fine-tuning bring it within "
            "0.16 of the floor (zero-shot PI is 0.7 to 0.9 above): did the fine-tune "
            "run on batches of length 128?"
        )
    than = "below" if got < yarn else "above"
    return (
        f"the model interpolates positions by s = 4; after fine-tuning its loss on "
        f"evals[128] is {got:.3f} (loss floor {floor:.3f}), as you report, {than} "
        f"YaRN's zero-shot {yarn:.3f} (in our runs, seeds 0-3: 1.30 to 1.31 against "
        "1.31 to 1.37)."
    )


def _finetune_plant(scaling="linear", factor=4.0, shared=True):
    torch.manual_seed(0)
    model = pl.TinyTransformer(
        8, 64, 4, 2, pe=pl.make_encoding("rope", d_model=64, n_heads=4, max_len=_L)
    )
    kw = {"original_max_position_embeddings": _L} if scaling == "yarn" else {}
    pe = pl.Rotary(_D_HEAD, scaling=scaling, factor=factor, **kw)
    model.pe = pe
    if shared:
        for block in model.blocks:
            block.attn.pe = pe
    return {"model": model, "loss_128": 1.30, "yarn_128": 1.36}


_FT = "ex-extrope-finetune"
plant(_FT, _finetune_plant(shared=False), "every block")
plant(_FT, _finetune_plant(factor=2.0), "s = 2")
plant(_FT, _finetune_plant(scaling="yarn"), "encoding is yarn")
plant(_FT, _finetune_plant(), "is this the model")
plant(_FT, 1.30, "must be a dict")

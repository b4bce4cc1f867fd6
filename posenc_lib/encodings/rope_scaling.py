"""RoPE frequency scalings: a registry of pure functions and ``rope_inv_freq``.

Plain RoPE rotates pair i of a query or key at position m by m * theta_i with

    theta_i = base^(-2i/d),   i = 0 .. d/2 - 1

(see ``posenc_lib.encodings.rope``). A scaling replaces these inverse frequencies,
e.g. to extend the context beyond the training length L0.

Scalings (``rope_inv_freq``) form a registry of pure functions with one signature,
``(d_head, base, **params) -> (inv_freq, attention_factor)``, the design of Hugging
Face's ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``) without its config object;
the parameter names are its ``rope_scaling`` keys. ``attention_factor`` multiplies the
rotated q and k (Hugging Face multiplies cos and sin by it), so the scores are
multiplied by its square.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable

import torch

from ..utils import check_positive_int

__all__ = ["ROPE_SCALINGS", "rope_inv_freq"]


def _check_d_head(d_head: int) -> int:
    check_positive_int(d_head, "d_head")
    if d_head % 2:
        raise ValueError(
            "d_head must be even for RoPE (coordinates are rotated in pairs), got "
            f"{d_head}"
        )
    return d_head


def _default_inv_freq(d_head: int, base: float) -> torch.Tensor:
    # theta_i = base^(-2i/d),  i = 0 .. d/2-1
    return base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (d/2,)


def _check_factor(factor: float, name: str = "factor") -> float:
    if (
        isinstance(factor, bool)
        or not isinstance(factor, (int, float))
        or not 1 <= factor < math.inf  # inf: every frequency 0 or NaN
    ):
        raise ValueError(f"{name} must be a finite number >= 1, got {factor!r}")
    return float(factor)


# ---- the registry ----
# (d_head, base, **params) -> (inv_freq (d/2,) float64, attention_factor)


def _none(d_head: int, base: float) -> tuple[torch.Tensor, float]:
    """Plain RoPE."""
    return _default_inv_freq(d_head, base), 1.0


def _linear(d_head: int, base: float, *, factor: float) -> tuple[torch.Tensor, float]:
    """Position interpolation (Chen et al. 2023): position m -> m / factor, i.e.
    theta_i / factor."""
    return _default_inv_freq(d_head, base) / _check_factor(factor), 1.0


def _ntk(d_head: int, base: float, *, factor: float) -> tuple[torch.Tensor, float]:
    """NTK-aware scaling (bloc97, 2023): base' = base * factor^(d/(d-2)).

    The exponent makes the lowest frequency exactly theta_(d/2-1) / factor
    (interpolated) while theta_0 = 1 is untouched (extrapolated). Hugging Face has no
    static "ntk" entry: its "dynamic" with factor=1 and seq_len = factor * L is
    this function.
    """
    factor = _check_factor(factor)
    if d_head < 4:
        raise ValueError(
            f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}"
        )
    # base' = base * s^(d/(d-2))
    return _default_inv_freq(d_head, base * factor ** (d_head / (d_head - 2))), 1.0


def _dynamic(
    d_head: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (emozilla, 2023; Hugging Face "dynamic"): NTK scaling recomputed for
    the current length.

    base' = base * (factor * L / L0 - (factor - 1))^(d/(d-2)),  L = max(seq_len, L0)

    so nothing changes up to the training length L0. Hugging Face names L0
    ``max_position_embeddings``.
    """
    factor = _check_factor(factor)
    l0 = check_positive_int(
        original_max_position_embeddings, "original_max_position_embeddings"
    )
    length = l0 if seq_len is None else max(check_positive_int(seq_len, "seq_len"), l0)
    if d_head < 4:
        raise ValueError(
            "d_head must be >= 4 for dynamic NTK scaling (exponent d/(d-2)), got "
            f"{d_head}"
        )
    scaled_base = base * (factor * length / l0 - (factor - 1)) ** (
        d_head / (d_head - 2)
    )
    return _default_inv_freq(d_head, scaled_base), 1.0


def _yarn(
    d_head: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    truncate: bool = True,
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2024): "NTK-by-parts" interpolation plus an attention
    temperature.

    Pair i makes r_i = L0 / lambda_i = L0 theta_i / (2 pi) turns over the training
    length. Pairs with r_i > beta_fast keep theta_i, pairs with r_i < beta_slow get
    theta_i / factor, and in between a ramp mixes the two. As in Hugging Face and the
    authors' code, the ramp is linear in the pair index i (the paper writes it linear in
    r) and its ends are rounded outwards (``truncate``).
    attention_factor = 0.1 ln(factor) + 1 (the paper's sqrt(1/t)).
    """
    factor = _check_factor(factor)
    l0 = check_positive_int(
        original_max_position_embeddings, "original_max_position_embeddings"
    )
    if not beta_fast > beta_slow > 0:
        raise ValueError(
            f"need beta_fast > beta_slow > 0, got beta_fast={beta_fast}, "
            f"beta_slow={beta_slow}"
        )

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(
                factor, mscale_all_dim
            )
        else:
            attention_factor = get_mscale(factor)

    def pair_with_turns(turns: float) -> float:
        # solve L0 * base^(-2i/d) / (2 pi) = turns for i (a real number)
        return d_head * math.log(l0 / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_with_turns(beta_fast), pair_with_turns(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_head - 1)
    if low == high:
        high += 0.001  # as in the reference code
    # gamma_i = 1 keeps theta_i (fast pairs), gamma_i = 0 interpolates theta_i / s
    # (slow pairs)
    gamma = 1 - (
        (torch.arange(d_head // 2, dtype=torch.float64) - low) / (high - low)
    ).clamp(0, 1)  # (d/2,)
    theta = _default_inv_freq(d_head, base)
    # h(theta_i) = (1 - gamma_i) theta_i / s + gamma_i theta_i
    return (1 - gamma) * theta / factor + gamma * theta, float(attention_factor)


def _llama3(
    d_head: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1 frequency scaling (Meta's released code; defaults factor 8, low 1,
    high 4, L0 8192).

    Wavelengths lambda_i = 2 pi / theta_i shorter than L0 / high_freq_factor are kept,
    those longer than L0 / low_freq_factor are divided by ``factor`` (as in position
    interpolation), and in between theta_i is mixed with weight
    s_i = (L0 / lambda_i - low) / (high - low).
    """
    factor = _check_factor(factor)
    l0 = check_positive_int(
        original_max_position_embeddings, "original_max_position_embeddings"
    )
    if not high_freq_factor > low_freq_factor > 0:
        raise ValueError(
            f"need high_freq_factor > low_freq_factor > 0, got {high_freq_factor}, "
            f"{low_freq_factor}"
        )
    theta = _default_inv_freq(d_head, base)
    wavelen = 2 * math.pi / theta  # (d/2,)
    smooth = (l0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = (1 - smooth) * theta / factor + smooth * theta
    out = torch.where(wavelen > l0 / low_freq_factor, theta / factor, theta)
    return torch.where(
        (wavelen >= l0 / high_freq_factor) & (wavelen <= l0 / low_freq_factor),
        mixed,
        out,
    ), 1.0


def _longrope(
    d_head: int,
    base: float,
    *,
    short_factor: list[float],
    long_factor: list[float],
    factor: float,
    original_max_position_embeddings: int,
    attention_factor: float | None = None,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """LongRoPE (Ding et al. 2024): one searched rescale factor lambda_i per pair,
    theta_i / lambda_i.

    ``long_factor`` is used when ``seq_len`` exceeds L0, else ``short_factor`` (Phi-3's
    rule, as in Hugging Face). Default attention_factor sqrt(1 + ln(factor) / ln(L0)) is
    Hugging Face's and Phi-3's.
    """
    factor = _check_factor(factor)
    l0 = check_positive_int(
        original_max_position_embeddings, "original_max_position_embeddings"
    )
    use_long = seq_len is not None and check_positive_int(seq_len, "seq_len") > l0
    name, lam = (
        ("long_factor", long_factor) if use_long else ("short_factor", short_factor)
    )
    lam = torch.as_tensor(lam, dtype=torch.float64)
    if lam.shape != (d_head // 2,) or not (lam > 0).all():
        raise ValueError(
            f"{name} must hold d_head/2 = {d_head // 2} positive numbers, got shape "
            f"{tuple(lam.shape)}"
        )
    if attention_factor is None:
        attention_factor = (
            1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(l0))
        )
    return _default_inv_freq(d_head, base) / lam, float(attention_factor)


def _proportional(
    d_head: int,
    base: float,
    *,
    partial_rotary_factor: float = 1.0,
    factor: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """p-RoPE (Barbero et al. 2025; Hugging Face "proportional", Gemma 4's global
    layers): keep the k = floor(p d / 2) fastest frequencies of the full head and set
    the d/2 - k slowest to zero, so their pairs are never rotated.

    theta_i = base^(-2i/d) / factor  for i < k,   theta_i = 0  for k <= i < d/2

    The exponent's denominator is the whole head d, not the rotated part 2k: unlike
    partial rotary (GPT-NeoX, ``apply_rope(..., rotary_dim=r)`` with
    ``rope_inv_freq(r, base)``), the kept frequencies are exactly those of full RoPE.
    The result has d/2 entries, so ``apply_rope`` rotates the whole head (a zero
    frequency is the identity).
    """
    p = partial_rotary_factor
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise ValueError(f"partial_rotary_factor must be a number in [0, 1], got {p!r}")
    factor = _check_factor(factor)
    # k = floor(p d / 2), Hugging Face's int(p * d // 2)
    k = int(p * d_head // 2)
    theta = _default_inv_freq(d_head, base)  # (d/2,)
    # theta_i for i < k, 0 for the d/2 - k slowest pairs, all divided by the factor
    return torch.where(torch.arange(d_head // 2) < k, theta, 0.0) / factor, 1.0


ROPE_SCALINGS: dict[str | None, Callable[..., tuple[torch.Tensor, float]]] = {
    None: _none,
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "llama3": _llama3,
    "longrope": _longrope,
    "proportional": _proportional,
}


def rope_inv_freq(
    d_head: int, base: float = 10000.0, scaling: str | None = None, **params
) -> tuple[torch.Tensor, float]:
    """``(inv_freq (d_head/2,) float64, attention_factor)`` for plain RoPE or one of
    ``ROPE_SCALINGS``.

    >>> inv_freq, attention_factor = rope_inv_freq(
    ...     64, scaling="yarn", factor=4.0, original_max_position_embeddings=2048
    ... )
    """
    _check_d_head(d_head)
    if (
        isinstance(base, bool)
        or not isinstance(base, (int, float))
        or not 1 < base < float("inf")
    ):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    if scaling not in ROPE_SCALINGS:
        names = ", ".join(repr(k) for k in ROPE_SCALINGS)
        raise ValueError(f"scaling must be one of {names}; got {scaling!r}")
    fn = ROPE_SCALINGS[scaling]
    sig = inspect.signature(fn)
    allowed = [p for p in sig.parameters if p not in ("d_head", "base")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TypeError(
            f"scaling {scaling!r} does not take {unknown}; its parameters are {allowed}"
        )
    missing = [
        p
        for p in allowed
        if sig.parameters[p].default is inspect.Parameter.empty and p not in params
    ]
    if missing:
        raise TypeError(f"scaling {scaling!r} needs the parameters {missing}")
    inv_freq, attention_factor = fn(d_head, float(base), **params)
    # a zero or infinite temperature makes every score 0 or inf: uniform or NaN weights
    if not 0 < attention_factor < float("inf"):
        raise ValueError(
            f"attention_factor must be a finite number > 0, got {attention_factor!r} "
            f"(scaling {scaling!r} with {params})"
        )
    return inv_freq, attention_factor

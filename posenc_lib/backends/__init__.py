"""Backends: the same attention as ``posenc_lib.attention.reference_attention``,
computed fast. Each says what it supports (``refuses(pe, return_weights, pos)``
returns the reason it cannot run an encoding's call, or None) and runs it
(``attend``); the registry
contract test holds every backend equal to the reference for every encoding.

* ``fused``: PyTorch's ``scaled_dot_product_attention``, in the fast form that the
  table ``forms.FORMS`` chooses (one module each: ``own``, ``key_bias``,
  ``band_bias``, ``sinks``, ``fast_bias``, ``sdpa``; their block loop is
  ``blocks.query_blocks``).
* ``flex``: FlexAttention, compiled, with the encoding's ``score_mod``.

``explain_path`` says which of them runs a call, and why each other does not.
"""

from . import flex, forms, fused
from .explain import PATHS, SAME_PATH, PathChoice, explain_path

BACKENDS = {"fused": fused, "flex": flex}

__all__ = [
    "BACKENDS", "PATHS", "SAME_PATH", "PathChoice", "explain_path", "flex", "forms",
    "fused",
]  # fmt: skip

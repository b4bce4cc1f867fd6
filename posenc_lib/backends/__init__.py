"""Backends: the same attention as ``posenc_lib.attention.reference_attention``,
computed fast. Each says what it supports (``refuses(pe, return_weights, pos)``
returns the reason it cannot run an encoding's call, or None) and runs it
(``attend``); the registry
contract test holds every backend equal to the reference for every encoding.

* ``fused``: PyTorch's ``scaled_dot_product_attention`` with the bias as a float mask.
* ``flex``: FlexAttention, compiled, with the encoding's ``score_mod``.
"""

from . import flex, fused

BACKENDS = {"fast": fused, "flex": flex}

__all__ = ["BACKENDS", "flex", "fused"]

"""CoPE's position scan on a CPU, compiled by numba: the elementwise half of a block of
``_CoPEBlocks`` in one pass over its keys instead of ten.

The matrix products stay in torch; what is left of a block is a chain of elementwise
steps with a cumulative sum and a table read in the middle (positions, floor, weight,
two reads of z, the sum), and in the backward pass two scatters, a cumulative sum
backwards and the gates' derivative. In eager torch each is a pass of its own over
the ``(b h, block, keys)`` block, several of them scalar loops (cumsum, the int
conversion, gather, scatter); here each row is one loop over its keys, newest first.

Both functions read and write numpy views of the block's torch tensors (no copies).
Rows are ``r`` (b h times the block's queries), keys newest first are ``c``; ``z``
``(rows, width)`` holds ``z_r[k] = q_r . e[k]`` for the table rows the block reads,
its last column the padded table's zero row where the block reaches the table's end.

They reproduce the eager block's numbers: the positions are summed in float64 and
rounded to the block's dtype at every key, as torch's CPU ``cumsum`` does, so ``floor
p`` and ``w = p - floor p`` are the same numbers; the rest is computed in float64 and
rounded once when stored.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def scan_forward(s, g, z, p_max, omega):  # pragma: no cover - compiled
    """``omega_rc = s_rc + z_r[floor p_rc] + w_rc (z_r[floor p_rc + 1] - z_r[floor
    p_rc])``, ``p_rc = min(sum_{c' <= c} g_rc', p_max)``, ``w = p - floor p``.

    ``s``, ``g``, ``omega`` ``(rows, keys)`` (``omega`` may be ``s``), ``z`` ``(rows,
    width)``, all one dtype, and ``p_max`` (the last table row) a scalar of it."""
    pos = np.empty(s.shape[1], s.dtype)  # one row's positions
    for r in range(s.shape[0]):
        total = 0.0  # float64, rounded at every key into pos, as torch's cumsum
        g_r = g[r]
        for c in range(s.shape[1]):
            total += g_r[c]
            pos[c] = total
        # the rest of the row has no dependence between keys: numba vectorises it
        # (32-bit unsigned indices into the row of z, arithmetic in the dtype)
        s_r, z_r, omega_r = s[r], z[r], omega[r]
        for c in range(s.shape[1]):
            p = min(pos[c], p_max)
            floor = np.floor(p)
            k = np.uint32(floor)
            low = z_r[k]
            omega_r[c] = s_r[c] + low + (p - floor) * (z_r[k + np.uint32(1)] - low)


@numba.njit(cache=True, nogil=True)
def scan_backward(g, d_omega, z, p_max, d_z, d_s):  # pragma: no cover - compiled
    """The gradients of ``scan_forward`` and of the gates ``g = sigmoid(s)``.

    ``d_z[r, floor] += d_omega (1 - w)``, ``d_z[r, floor + 1] += d_omega w``
    (``d_z`` ``(rows, width)`` zeroed by the caller); ``dp = d_omega (z[floor + 1] -
    z[floor])`` where ``w > 0`` and 0 at an integer p (the reference's lerp reads one
    row there, and the clamp leaves an integer); ``dg_c = sum_{c' >= c} dp_c'`` (p_c'
    sums the gates of the keys up to c'); ``d_s = d_omega + dg g (1 - g)``."""
    pos = np.empty(g.shape[1], g.dtype)
    for r in range(g.shape[0]):
        total = 0.0
        g_r = g[r]
        for c in range(g.shape[1]):
            total += g_r[c]
            pos[c] = total
        d_omega_r, z_r, d_z_r, d_s_r = d_omega[r], z[r], d_z[r], d_s[r]
        for c in range(g.shape[1]):
            p = min(pos[c], p_max)
            floor = np.floor(p)
            w = p - floor
            k = np.uint32(floor)
            grad = d_omega_r[c]
            d_z_r[k] += grad - grad * w
            d_z_r[k + np.uint32(1)] += grad * w
            step = z_r[k + np.uint32(1)] - z_r[k]
            d_s_r[c] = grad * step if w > 0 else 0  # dp
        d_g = 0.0
        for c in range(g.shape[1] - 1, -1, -1):
            d_g += d_s_r[c]
            gate = g_r[c]
            d_s_r[c] = d_omega_r[c] + d_g * (1 - gate) * gate


def warm(dtype: np.dtype) -> None:
    """Compile (or load from numba's cache) both scans for ``dtype``."""
    a = np.zeros((1, 2), dtype)
    z = np.zeros((1, 3), dtype)
    one = np.dtype(dtype).type(1)
    scan_forward(a, a, z, one, a.copy())
    scan_backward(a, a, z, one, z.copy(), a.copy())

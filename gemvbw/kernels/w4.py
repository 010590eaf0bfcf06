"""w4 kernels: nibble halves (byte j of a block holds codes j and j + Lp/2)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gemvbw.kernels._common import FASTMATH, block_sums, load_meta


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w4_ref(codes, scale, offset, x, block, y):
    """Reference loop over the packed nibbles, low halves then high halves of each block."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    xsum = block_sums(x, block, nb)
    block_bytes = block // 2
    for r in prange(M):
        row = codes[r]
        acc = np.float32(0.0)
        for b in range(nb):
            k0 = b * block
            n = min(block, K - k0)
            half = (n + 1) // 2
            q = row[b * block_bytes:b * block_bytes + half]
            x_lo = x[k0:k0 + half]
            x_hi = x[k0 + half:k0 + n]
            s = np.float32(0.0)
            for j in range(half):
                s += np.float32(q[j] & 15) * x_lo[j]
            for j in range(x_hi.shape[0]):
                s += np.float32(q[j] >> 4) * x_hi[j]
            acc += load_meta(scale, r, b) * s + load_meta(offset, r, b) * xsum[b]
        y[r] = acc

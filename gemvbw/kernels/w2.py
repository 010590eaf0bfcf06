"""w2 kernels: 2-bit planes (byte j of a block holds codes j + p*Lp/4 in bits 2p..2p+1)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gemvbw.kernels._common import FASTMATH, block_sums, load_meta


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w2_ref(codes, scale, offset, x, block, y):
    """Reference loop, plane by plane."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    xsum = block_sums(x, block, nb)
    block_bytes = block // 4
    for r in prange(M):
        row = codes[r]
        acc = np.float32(0.0)
        for b in range(nb):
            k0 = b * block
            n = min(block, K - k0)
            quarter = (n + 3) // 4
            q = row[b * block_bytes:b * block_bytes + quarter]
            s = np.float32(0.0)
            for p in range(4):
                shift = 2 * p
                xp = x[k0 + p * quarter:k0 + min(n, (p + 1) * quarter)]
                for j in range(xp.shape[0]):
                    s += np.float32((q[j] >> shift) & 3) * xp[j]
            acc += load_meta(scale, r, b) * s + load_meta(offset, r, b) * xsum[b]
        y[r] = acc

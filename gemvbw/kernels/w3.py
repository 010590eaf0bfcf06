"""w3 kernels: a 2-bit plane of the low bits, then a 1-bit plane of the high bit (3 bits per weight)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gemvbw.kernels._common import FASTMATH, block_sums, load_meta


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w3_ref(codes, scale, offset, x, block, y):
    """Reference loop: sum(q*x) = sum(low*x) + 4*sum(high*x), each plane read directly."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    xsum = block_sums(x, block, nb)
    block_bytes = 3 * block // 8
    for r in prange(M):
        row = codes[r]
        acc = np.float32(0.0)
        for b in range(nb):
            k0 = b * block
            n = min(block, K - k0)
            padded = (n + 7) // 8 * 8
            quarter = padded // 4
            eighth = padded // 8
            base = b * block_bytes
            low = row[base:base + quarter]
            high = row[base + quarter:base + quarter + eighth]
            s_low = np.float32(0.0)
            for p in range(4):
                shift = 2 * p
                xp = x[k0 + p * quarter:k0 + min(n, (p + 1) * quarter)]
                for j in range(xp.shape[0]):
                    s_low += np.float32((low[j] >> shift) & 3) * xp[j]
            s_high = np.float32(0.0)
            for p in range(8):
                xp = x[k0 + p * eighth:k0 + min(n, (p + 1) * eighth)]
                for j in range(xp.shape[0]):
                    s_high += np.float32((high[j] >> p) & 1) * xp[j]
            acc += load_meta(scale, r, b) * (s_low + np.float32(4.0) * s_high) + load_meta(offset, r, b) * xsum[b]
        y[r] = acc

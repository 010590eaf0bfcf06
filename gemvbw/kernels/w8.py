"""w8 kernels: one byte per code."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gemvbw.kernels._common import FASTMATH, block_sums, load_meta


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w8_ref(codes, scale, offset, x, block, y):
    """Reference loop: per row and block, sum q*x, then scale it and add offset*sum(x)."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    xsum = block_sums(x, block, nb)
    for r in prange(M):
        row = codes[r]
        acc = np.float32(0.0)
        for b in range(nb):
            # slices indexed from 0: numba drops its negative-index check and vectorizes
            q = row[b * block:min(b * block + block, K)]
            xb = x[b * block:min(b * block + block, K)]
            s = np.float32(0.0)
            for j in range(q.shape[0]):
                s += np.float32(q[j]) * xb[j]
            acc += load_meta(scale, r, b) * s + load_meta(offset, r, b) * xsum[b]
        y[r] = acc

"""int8 activations, prepared once per call: quantized per block, then permuted for block pairs.

Per call, x is quantized per block to int8 (scale d_b = max|x| / 127), as MNN's sdot/i8mm
and ggml's q8 paths do. The kernels are exact against the reference computed with these
same activations; the error the quantization itself brings is reported apart
(``act_quant_err``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gemvbw.kernels._common import FASTMATH

SUPPORTED_BLOCK = 64  # the int8 kernels work on 64-weight blocks; other blocks use the f32 kernels


# No fastmath: nothing here needs reassociation (the max and the sum are integer), and with it LLVM
# folds x * (1 / d) back into a division, a vdivps per 8 activations instead of a vmulps.
@njit(cache=True)
def quantize_activations(x, block, nb):
    """Per block: d = max|x| / 127, xq = round(x / d) as int8; also d * sum(xq) and the dequantized x.

    xq is padded to whole blocks with zeros. Returns (xq, d, d*sum(xq) per block, xq*d).
    """
    K = x.shape[0]
    xq = np.zeros(nb * block, np.int8)
    d = np.empty(nb, np.float32)
    xs = np.empty(nb, np.float32)
    xdq = np.empty(K, np.float32)
    bits = x.view(np.uint32)
    amax_bits = np.empty(1, np.uint32)
    amax_of = amax_bits.view(np.float32)
    for b in range(nb):
        # slices counted from 0: an index from range(lo, hi) keeps numba's wraparound check, which
        # stops LLVM from vectorizing (measured here: 41 -> 25 us at K=14336)
        lo = b * block
        hi = min(lo + block, K)
        xb = x[lo:hi]
        # max |x| taken on the bits with the sign cleared: for floats other than NaN they order as the
        # values do, and an integer max vectorizes where numba's float max() (Python's NaN rules) does not
        xi = bits[lo:hi]
        m = np.uint32(0)
        for k in range(xi.shape[0]):
            v = xi[k] & np.uint32(0x7FFFFFFF)
            if v > m:
                m = v
        amax_bits[0] = m
        amax = amax_of[0]
        scale = amax / np.float32(127.0) if amax > 0 else np.float32(1.0)
        inv = np.float32(1.0) / scale
        qb, db = xq[lo:hi], xdq[lo:hi]
        total = np.int32(0)
        for k in range(xb.shape[0]):
            q = np.int32(np.rint(xb[k] * inv))
            qb[k] = q
            db[k] = np.float32(q) * scale
            total += q
        d[b] = scale
        xs[b] = scale * np.float32(total)
    return xq, d, xs, xdq


def dequantized_activations(x: np.ndarray, block: int) -> np.ndarray:
    """The activations an int8 kernel really multiplies with: the reference for its verification."""
    nb = -(-x.shape[0] // block)
    return quantize_activations(np.ascontiguousarray(x, dtype=np.float32), block, nb)[3]


@njit(cache=True, fastmath=FASTMATH)
def permuted_activations(xq, d, xs, npairs, order, half):
    """Per call: activations permuted for block pairs (vector p of pair q holds positions
    order[p]..order[p]+half-1 of block 2q, then the same of block 2q+1), and d, d*sum(xq) spread
    over the 8 lanes [4 x block 2q | 4 x block 2q+1]."""
    nvec = order.shape[0]
    acts = np.empty(npairs * 2 * SUPPORTED_BLOCK, xq.dtype)
    dd = np.empty(npairs * 8, np.float32)
    xss = np.empty(npairs * 8, np.float32)
    for q in range(npairs):
        for h in range(2):
            b = 2 * q + h
            for p in range(nvec):
                src = xq[b * SUPPORTED_BLOCK + order[p]:b * SUPPORTED_BLOCK + order[p] + half]
                start = (2 * q * nvec + 2 * p + h) * half
                dst = acts[start:start + half]
                for j in range(half):  # an explicit loop: slice assignment measured slower (18 vs 10 us)
                    dst[j] = src[j]
            for k in range(4):
                dd[q * 8 + 4 * h + k] = d[b]
                xss[q * 8 + 4 * h + k] = xs[b]
    return acts, dd, xss

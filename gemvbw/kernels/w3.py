"""w3 kernels: a 2-bit plane of the low bits, then a 1-bit plane of the high bit (3 bits per weight)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from gemvbw.kernels._common import FASTMATH, ROWS, block_sums, load_meta, group_meta, row_chunks
from gemvbw.kernels.w2 import plane_activations


@njit(cache=True, fastmath=FASTMATH)
def _dot_block(row, x, b, block):
    """sum(q * x) = sum(low * x) + 4 * sum(high * x) over block b of one row, each plane read directly."""
    K = x.shape[0]
    k0 = b * block
    n = min(block, K - k0)
    padded = (n + 7) // 8 * 8
    quarter = padded // 4
    eighth = padded // 8
    base = b * (3 * block // 8)
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
    return s_low + np.float32(4.0) * s_high


@njit(cache=True, fastmath=FASTMATH)
def _row_ref(codes, scale, offset, x, xsum, block, r):
    acc = np.float32(0.0)
    for b in range(scale.shape[1]):
        acc += load_meta(scale, r, b) * _dot_block(codes[r], x, b, block) + load_meta(offset, r, b) * xsum[b]
    return acc


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w3_ref(codes, scale, offset, x, block, y):
    """Reference loop: sum(q*x) = sum(low*x) + 4*sum(high*x), each plane read directly."""
    xsum = block_sums(x, block, scale.shape[1])
    for r in prange(codes.shape[0]):
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w3_rows4(codes, scale, offset, x, block, y, chunks):
    """Four rows per step; both planes unpacked in float against per-call activation vectors
    (low plane as w2; high plane: seven floors and eight FMAs per byte of eight high bits)."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xsum = block_sums(x, block, nb)
    quarter = block // 4
    eighth = block // 8
    L = plane_activations(x, block, full, 0, quarter, 4)
    H = plane_activations(x, block, full, 0, eighth, 2) * np.float32(4.0)  # the high bit weighs 4
    L0 = L[0]
    L1 = L[1]
    L2 = L[2]
    L3 = L[3]
    H0 = H[0]
    H1 = H[1]
    H2 = H[2]
    H3 = H[3]
    H4 = H[4]
    H5 = H[5]
    H6 = H[6]
    H7 = H[7]
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    uq = uint64(quarter)
    ue = uint64(eighth)
    ubytes = uint64(3 * block // 8)
    d2 = np.float32(0.5)
    d4 = np.float32(0.25)
    d8 = np.float32(0.125)
    d16 = np.float32(0.0625)
    d32 = np.float32(0.03125)
    d64 = np.float32(0.015625)
    d128 = np.float32(0.0078125)
    for c in prange(nchunks):
        tmp = np.empty(nb, np.uint32)
        s = np.empty((ROWS, nb), np.float32)
        o = np.empty((ROWS, nb), np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            group_meta(scale, offset, r, tmp, s, o)
            c0 = codes[r]
            c1 = codes[r + 1]
            c2 = codes[r + 2]
            c3 = codes[r + 3]
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for b in range(full):
                cb = uint64(b) * ubytes
                lb = uint64(b) * uq
                hb = uint64(b) * ue
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for j in range(uq):
                    k = lb + j
                    q = cb + j
                    v0 = L0[k]
                    v1 = L1[k]
                    v2 = L2[k]
                    v3 = L3[k]
                    f = np.float32(c0[q])
                    s0 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c1[q])
                    s1 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c2[q])
                    s2 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c3[q])
                    s3 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                for j in range(ue):
                    k = hb + j
                    q = cb + uq + j
                    f = np.float32(c0[q])
                    s0 += (f * H0[k] + np.floor(f * d2) * H1[k] + np.floor(f * d4) * H2[k] + np.floor(f * d8) * H3[k]
                           + np.floor(f * d16) * H4[k] + np.floor(f * d32) * H5[k] + np.floor(f * d64) * H6[k]
                           + np.floor(f * d128) * H7[k])
                    f = np.float32(c1[q])
                    s1 += (f * H0[k] + np.floor(f * d2) * H1[k] + np.floor(f * d4) * H2[k] + np.floor(f * d8) * H3[k]
                           + np.floor(f * d16) * H4[k] + np.floor(f * d32) * H5[k] + np.floor(f * d64) * H6[k]
                           + np.floor(f * d128) * H7[k])
                    f = np.float32(c2[q])
                    s2 += (f * H0[k] + np.floor(f * d2) * H1[k] + np.floor(f * d4) * H2[k] + np.floor(f * d8) * H3[k]
                           + np.floor(f * d16) * H4[k] + np.floor(f * d32) * H5[k] + np.floor(f * d64) * H6[k]
                           + np.floor(f * d128) * H7[k])
                    f = np.float32(c3[q])
                    s3 += (f * H0[k] + np.floor(f * d2) * H1[k] + np.floor(f * d4) * H2[k] + np.floor(f * d8) * H3[k]
                           + np.floor(f * d16) * H4[k] + np.floor(f * d32) * H5[k] + np.floor(f * d64) * H6[k]
                           + np.floor(f * d128) * H7[k])
                a0 += s[0, b] * s0 + o[0, b] * xsum[b]
                a1 += s[1, b] * s1 + o[1, b] * xsum[b]
                a2 += s[2, b] * s2 + o[2, b] * xsum[b]
                a3 += s[3, b] * s3 + o[3, b] * xsum[b]
            if full < nb:
                a0 += s[0, full] * _dot_block(c0, x, full, block) + o[0, full] * xsum[full]
                a1 += s[1, full] * _dot_block(c1, x, full, block) + o[1, full] * xsum[full]
                a2 += s[2, full] * _dot_block(c2, x, full, block) + o[2, full] * xsum[full]
                a3 += s[3, full] * _dot_block(c3, x, full, block) + o[3, full] * xsum[full]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)

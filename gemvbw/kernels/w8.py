"""w8 kernels: one byte per code."""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from gemvbw.kernels._common import FASTMATH, ROWS, block_sums, load_meta, group_meta, row_chunks


@njit(cache=True, fastmath=FASTMATH)
def _dot_block(row, x, b, block):
    """sum(q * x) over block b of one row (the last block may be shorter)."""
    K = x.shape[0]
    # slices indexed from 0: numba drops its negative-index check and vectorizes
    q = row[b * block:min(b * block + block, K)]
    xb = x[b * block:min(b * block + block, K)]
    s = np.float32(0.0)
    for j in range(q.shape[0]):
        s += np.float32(q[j]) * xb[j]
    return s


@njit(cache=True, fastmath=FASTMATH)
def _row_ref(codes, scale, offset, x, xsum, block, r):
    acc = np.float32(0.0)
    for b in range(scale.shape[1]):
        acc += load_meta(scale, r, b) * _dot_block(codes[r], x, b, block) + load_meta(offset, r, b) * xsum[b]
    return acc


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w8_ref(codes, scale, offset, x, block, y):
    """Reference loop: per row and block, sum q*x, then scale it and add offset*sum(x)."""
    xsum = block_sums(x, block, scale.shape[1])
    for r in prange(codes.shape[0]):
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w8_rows4(codes, scale, offset, x, block, y, chunks):
    """Four rows per step sharing each activation load; metadata converted a row at a time."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xsum = block_sums(x, block, nb)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    ublock = uint64(block)
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
                # unsigned column index: no negative-index check in the hot loop
                base = uint64(b) * ublock
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for j in range(ublock):
                    k = base + j
                    xv = x[k]
                    s0 += np.float32(c0[k]) * xv
                    s1 += np.float32(c1[k]) * xv
                    s2 += np.float32(c2[k]) * xv
                    s3 += np.float32(c3[k]) * xv
                a0 += s[0, b] * s0 + o[0, b] * xsum[b]
                a1 += s[1, b] * s1 + o[1, b] * xsum[b]
                a2 += s[2, b] * s2 + o[2, b] * xsum[b]
                a3 += s[3, b] * s3 + o[3, b] * xsum[b]
            if full < nb:  # a shorter last block
                a0 += s[0, full] * _dot_block(c0, x, full, block) + o[0, full] * xsum[full]
                a1 += s[1, full] * _dot_block(c1, x, full, block) + o[1, full] * xsum[full]
                a2 += s[2, full] * _dot_block(c2, x, full, block) + o[2, full] * xsum[full]
                a3 += s[3, full] * _dot_block(c3, x, full, block) + o[3, full] * xsum[full]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):  # rows left over after the groups
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)

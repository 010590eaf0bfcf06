"""w4 kernels: nibble halves (byte j of a block holds codes j and j + Lp/2)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from gemvbw.kernels._common import FASTMATH, ROWS, block_sums, load_meta, group_meta, row_chunks


@njit(cache=True, fastmath=FASTMATH)
def _dot_block(row, x, b, block):
    """sum(q * x) over block b of one row, low nibbles then high nibbles (the last block may be shorter)."""
    K = x.shape[0]
    k0 = b * block
    n = min(block, K - k0)
    half = (n + 1) // 2
    q = row[b * (block // 2):b * (block // 2) + half]
    x_lo = x[k0:k0 + half]
    x_hi = x[k0 + half:k0 + n]
    s = np.float32(0.0)
    for j in range(half):
        s += np.float32(q[j] & 15) * x_lo[j]
    for j in range(x_hi.shape[0]):
        s += np.float32(q[j] >> 4) * x_hi[j]
    return s


@njit(cache=True, fastmath=FASTMATH)
def _row_ref(codes, scale, offset, x, xsum, block, r):
    acc = np.float32(0.0)
    for b in range(scale.shape[1]):
        acc += load_meta(scale, r, b) * _dot_block(codes[r], x, b, block) + load_meta(offset, r, b) * xsum[b]
    return acc


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w4_ref(codes, scale, offset, x, block, y):
    """Reference loop over the packed nibbles, low halves then high halves of each block."""
    xsum = block_sums(x, block, scale.shape[1])
    for r in prange(codes.shape[0]):
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)


@njit(cache=True, fastmath=FASTMATH)
def _activations(x, block, full):
    """Per call: x of the low-nibble positions, and x_hi - 16 x_lo, block after block."""
    half = block // 2
    x_lo = np.empty(full * half, np.float32)
    x_d = np.empty(full * half, np.float32)
    for b in range(full):
        for j in range(half):
            lo = x[b * block + j]
            x_lo[b * half + j] = lo
            x_d[b * half + j] = x[b * block + half + j] - np.float32(16.0) * lo
    return x_lo, x_d


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w4_rows4(codes, scale, offset, x, block, y, chunks):
    """Four rows per step; nibbles unpacked in float: with f the byte and h = floor(f/16),
    lo*x_lo + hi*x_hi = f*x_lo + h*(x_hi - 16 x_lo), so the loop is convert, floor and two FMAs."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xsum = block_sums(x, block, nb)
    x_lo, x_d = _activations(x, block, full)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    uhalf = uint64(block // 2)
    sixteenth = np.float32(0.0625)
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
                base = uint64(b) * uhalf  # bytes and activation entries share the index
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for j in range(uhalf):
                    k = base + j
                    xl = x_lo[k]
                    xd = x_d[k]
                    f = np.float32(c0[k])
                    s0 += f * xl + np.floor(f * sixteenth) * xd
                    f = np.float32(c1[k])
                    s1 += f * xl + np.floor(f * sixteenth) * xd
                    f = np.float32(c2[k])
                    s2 += f * xl + np.floor(f * sixteenth) * xd
                    f = np.float32(c3[k])
                    s3 += f * xl + np.floor(f * sixteenth) * xd
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

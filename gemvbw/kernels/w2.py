"""w2 kernels: 2-bit planes (byte j of a block holds codes j + p*Lp/4 in bits 2p..2p+1)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from gemvbw.kernels._common import FASTMATH, ROWS, block_sums, load_meta, group_meta, row_chunks


@njit(cache=True, fastmath=FASTMATH)
def _dot_block(row, x, b, block):
    """sum(q * x) over block b of one row, plane by plane (the last block may be shorter)."""
    K = x.shape[0]
    k0 = b * block
    n = min(block, K - k0)
    quarter = (n + 3) // 4
    q = row[b * (block // 4):b * (block // 4) + quarter]
    s = np.float32(0.0)
    for p in range(4):
        shift = 2 * p
        xp = x[k0 + p * quarter:k0 + min(n, (p + 1) * quarter)]
        for j in range(xp.shape[0]):
            s += np.float32((q[j] >> shift) & 3) * xp[j]
    return s


@njit(cache=True, fastmath=FASTMATH)
def _row_ref(codes, scale, offset, x, xsum, block, r):
    acc = np.float32(0.0)
    for b in range(scale.shape[1]):
        acc += load_meta(scale, r, b) * _dot_block(codes[r], x, b, block) + load_meta(offset, r, b) * xsum[b]
    return acc


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w2_ref(codes, scale, offset, x, block, y):
    """Reference loop, plane by plane."""
    xsum = block_sums(x, block, scale.shape[1])
    for r in prange(codes.shape[0]):
        y[r] = _row_ref(codes, scale, offset, x, xsum, block, r)


@njit(cache=True, fastmath=FASTMATH)
def plane_activations(x, block, full, first, stride, width):
    """Activation vectors for a plane of 2-bit fields (width 4) or 1-bit fields (width 2).

    For the bytes of a plane, field p of byte j multiplies x[b*block + first + p*stride + j]. With
    f the byte and h_i = floor(f / width**i), field_p = h_p - width*h_{p+1}, so
    sum_p field_p x_p = f*A_0 + sum_{i>=1} h_i * A_i with A_0 = x_0 and A_i = x_i - width*x_{i-1}.
    Returned as (fields, full*stride).
    """
    fields = 4 if width == 4 else 8
    out = np.empty((fields, full * stride), np.float32)
    for b in range(full):
        for j in range(stride):
            prev = np.float32(0.0)
            for p in range(fields):
                cur = x[b * block + first + p * stride + j]
                out[p, b * stride + j] = cur - np.float32(width) * prev
                prev = cur
    return out


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w2_rows4(codes, scale, offset, x, block, y, chunks):
    """Four rows per step; fields unpacked in float (convert, three floors, four FMAs per byte)
    against per-call activation vectors A_i = x_i - 4 x_{i-1}."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xsum = block_sums(x, block, nb)
    quarter = block // 4
    A = plane_activations(x, block, full, 0, quarter, 4)
    A0 = A[0]
    A1 = A[1]
    A2 = A[2]
    A3 = A[3]
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    uq = uint64(quarter)
    d4 = np.float32(0.25)
    d16 = np.float32(0.0625)
    d64 = np.float32(0.015625)
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
                base = uint64(b) * uq
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for j in range(uq):
                    k = base + j
                    v0 = A0[k]
                    v1 = A1[k]
                    v2 = A2[k]
                    v3 = A3[k]
                    f = np.float32(c0[k])
                    s0 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c1[k])
                    s1 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c2[k])
                    s2 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
                    f = np.float32(c3[k])
                    s3 += f * v0 + np.floor(f * d4) * v1 + np.floor(f * d16) * v2 + np.floor(f * d64) * v3
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

"""int8-activation kernels on a repacked layout: one sequential stream per row group (AVX2, block 64).

The ``rows4`` i8 kernels read a row group's four rows where quantize() put them: four
streams a row apart, plus the scale and offset arrays, converted and transposed per
group. Here the weights are repacked once, when the kernel is bound to a matrix
(as MNN and llama.cpp repack weights when a model is loaded, untimed), so that a row
group reads two sequential streams, block pair after block pair:

- codes: the four rows' code bytes of blocks 2q and 2q+1, ordered so that every load
  is a full vector (w4: [lows of block 2q | of 2q+1], w3: [low planes | high planes]);
- metadata: the eight scales then the eight offsets of that block pair, block-major,
  in their stored type (fp16 is converted in the kernel by vcvtph2ps).

The bytes are exactly those of the packed matrix, reordered; blocks left over (an
odd last full block, a shorter last block) are read from the matrix as stored.
Measured against ``rows4`` i8, same run (w2, 4096x14336, 2 threads; the layout alone,
before prefetching was added): cold 2682 -> 2054 us, warm 2447 -> 1474 us.

w8 codes are stored as c - 128 (the byte c ^ 0x80), so that vpmaddubsw takes them as
llama.cpp's q8 path does: |c - 128| <= 128 as the unsigned operand and x with the sign of
c - 128 moved onto it (vpsignb), pairs at most 2 * 128 * 127 < 32767, no saturation; the
128 * sum(x) this leaves out is added back through the offset (offset + 128 * scale).
Measured against 8-bit codes widened to 16 bits for vpmaddwd (same run, 4096x14336, 2
threads, median of 9): cold 5376 -> 5165 us, warm 5538 -> 4951 us.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from gemvbw.kernels import w2 as _w2
from gemvbw.kernels import w3 as _w3
from gemvbw.kernels import w4 as _w4
from gemvbw.kernels import w8 as _w8
from gemvbw.kernels._common import FASTMATH, ROWS, load_meta, row_chunks
from gemvbw.kernels.i8 import (_NIBBLE_ORDER, _PLANE_ORDER, I8, I16, I32, SUPPORTED_BLOCK, V8F, V8x32, V16x8,
                               V16x16, V32x8, _fn, _load, _madd_u8s8, _off, _pair_w2, _ptr, _splat,
                               accumulate_pair, permuted_activations, quantize_activations)

V8I16 = ir.VectorType(I16, 8)
V8H = ir.VectorType(ir.HalfType(), 8)


def _meta8(context, builder, mty, meta, mofs):
    """Eight metadata values as <8 x float>: fp16 bits through fpext (vcvtph2ps), or float32 as is."""
    if mty.dtype == types.uint16:
        raw = _load(context, builder, mty, meta, mofs, V8I16)
        return builder.fpext(builder.bitcast(raw, V8H), V8F)
    return _load(context, builder, mty, meta, mofs, V8F)


def _acts(context, builder, aty, acts, aofs):
    """A block pair's permuted int8 activations: four <32 x i8>."""
    return [_load(context, builder, aty, acts, _off(builder, aofs, 32 * p), V32x8) for p in range(4)]


def _packed_w8(context, builder, cty, codes, cofs, acts):
    """Four 32-byte chunks [16 codes of block 2q | 16 of 2q+1], stored as c - 128: |c - 128| times
    x carrying the sign of c - 128, each product pair summed by vpmaddubsw and widened by vpmaddwd
    (four int16 sums of up to 32512 would overflow if added first)."""
    absb = _fn(builder, "llvm.abs.v32i8", V32x8, [V32x8, ir.IntType(1)])
    sign = _fn(builder, "llvm.x86.avx2.psign.b", V32x8, [V32x8, V32x8])
    ubsw = _fn(builder, "llvm.x86.avx2.pmadd.ub.sw", V16x16, [V32x8, V32x8])
    wd = _fn(builder, "llvm.x86.avx2.pmadd.wd", V8x32, [V16x16, V16x16])
    acc = None
    for p in range(4):
        c = _load(context, builder, cty, codes, _off(builder, cofs, 32 * p), V32x8)
        pairs = builder.call(ubsw, [builder.call(absb, [c, ir.Constant(ir.IntType(1), 0)]),
                                    builder.call(sign, [acts[p], c])])
        w = builder.call(wd, [pairs, _splat(V16x16, 1)])
        acc = w if acc is None else builder.add(acc, w)
    return acc


def _packed_w4(context, builder, cty, codes, cofs, acts):
    a = _load(context, builder, cty, codes, cofs, V32x8)
    b = _load(context, builder, cty, codes, _off(builder, cofs, 32), V32x8)
    lo, hi = _splat(V32x8, 15), _splat(V32x8, 4)
    return _madd_u8s8(builder, [(builder.and_(a, lo), acts[0]), (builder.lshr(a, hi), acts[1]),
                                (builder.and_(b, lo), acts[2]), (builder.lshr(b, hi), acts[3])])


def _packed_w3(context, builder, cty, codes, cofs, acts):
    """32 low-plane bytes (block 2q, then 2q+1), then 16 high-plane bytes re-bitted at repacking: bit p
    of byte m is the high bit of position 16p + m of block 2q, bit 4 + p that of block 2q+1. Loaded
    into both halves and shifted by 4 in the upper one, every lane finds its field p's high bit at
    bit p: one shift and one mask per field give 4 * high, OR-ed onto the low field."""
    low = _load(context, builder, cty, codes, cofs, V32x8)
    hh = _load(context, builder, cty, codes, _off(builder, cofs, 32), V16x8)
    both = builder.shuffle_vector(hh, hh, ir.Constant(ir.VectorType(ir.IntType(32), 32), list(range(16)) * 2))
    v8i32 = ir.VectorType(ir.IntType(32), 8)
    high = builder.bitcast(builder.lshr(builder.bitcast(both, v8i32), ir.Constant(v8i32, [0] * 4 + [4] * 4)), V32x8)
    pairs = []
    for p in range(4):
        field = builder.and_(builder.lshr(low, _splat(V32x8, 2 * p)), _splat(V32x8, 3))
        moved = builder.shl(high, _splat(V32x8, 2 - p)) if p < 2 else (
            high if p == 2 else builder.lshr(high, _splat(V32x8, 1)))
        pairs.append((builder.or_(field, builder.and_(moved, _splat(V32x8, 4))), acts[p]))
    return _madd_u8s8(builder, pairs)


def _prefetch(context, builder, arrty, arr, offset, nbytes):
    """Ask for the cache lines of arr[offset:offset+nbytes] (a hint: never faults, even past the end)."""
    fn = _fn(builder, "llvm.prefetch.p0", ir.VoidType(), [I8.as_pointer(), I32, I32, I32])
    for line in range(0, nbytes, 64):  # read, no temporal locality (prefetchnta: used once), data cache
        ptr = _ptr(context, builder, arrty, arr, _off(builder, offset, line), I8)
        builder.call(fn, [ptr, ir.Constant(I32, 0), ir.Constant(I32, 0), ir.Constant(I32, 1)])


def _intrinsic_packed(partial, row_bytes, prefetch=True, code_bias=0):
    def packed4(typingctx, pc, cofs, pm, mofs, acts, aofs, dd, xss, lanes, acc, ahead):
        """acc[0:8] += isum * scale * d + offset * d * sum(xq): one block pair of a row group, lanes
        [4 rows of block 2q | 4 rows of block 2q+1]; the codes ``ahead`` bytes further are prefetched."""
        sig = types.none(pc, cofs, pm, mofs, acts, aofs, dd, xss, lanes, acc, ahead)

        def codegen(context, builder, sig, args):
            if prefetch:
                _prefetch(context, builder, sig.args[0], args[0], builder.add(args[1], args[10]), ROWS * row_bytes)
            a = _acts(context, builder, sig.args[4], args[4], args[5])  # loaded once for four rows
            parts = [partial(context, builder, sig.args[0], args[0], _off(builder, args[1], row_bytes * i), a)
                     for i in range(ROWS)]

            def factors():
                s = _meta8(context, builder, sig.args[2], args[2], args[3])
                o = _meta8(context, builder, sig.args[2], args[2], _off(builder, args[3], 8))
                if code_bias:  # codes stored as c - bias: sum(c x) = sum((c - bias) x) + bias * sum(x)
                    o = builder.fadd(o, builder.fmul(s, ir.Constant(V8F, [float(code_bias)] * 8)))
                d = builder.load(_ptr(context, builder, sig.args[6], args[6], args[8], V8F), align=4)
                x = builder.load(_ptr(context, builder, sig.args[7], args[7], args[8], V8F), align=4)
                return s, o, d, x

            accp = _ptr(context, builder, sig.args[9], args[9], ir.Constant(args[8].type, 0), V8F)
            accumulate_pair(builder, parts, factors, accp)
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(packed4)


_packed4_w8 = _intrinsic_packed(_packed_w8, 128, prefetch=False, code_bias=128)  # prefetch: 0.87-0.96x
_packed4_w4 = _intrinsic_packed(_packed_w4, 64)
_packed4_w3 = _intrinsic_packed(_packed_w3, 48)
_packed4_w2 = _intrinsic_packed(_pair_w2, 32)


# --- repacking (once per matrix) ------------------------------------------------------------------
# PAIR_ORDER[bits][j]: which byte of a row's two stored blocks goes to byte j of its packed pair
# (then w3's 16 high-plane bytes are re-bitted, see _packed_w3, and w8 codes stored as c - 128).

def _w8_order():
    # chunk p of a row pair: bytes 16p..16p+15 of block 2q, then the same of block 2q+1
    return [64 * ((j % 32) // 16) + 16 * (j // 32) + j % 16 for j in range(128)]


PAIR_ORDER = {
    8: np.array(_w8_order(), np.int64),
    4: np.array(list(range(0, 16)) + list(range(32, 48)) + list(range(16, 32)) + list(range(48, 64)), np.int64),
    3: np.array(list(range(0, 16)) + list(range(24, 40)) + list(range(16, 24)) + list(range(40, 48)), np.int64),
    2: np.arange(32, dtype=np.int64),
}


@njit(cache=True)
def _w3_high_bits(src):
    """16 stored high-plane bytes of a block pair (8 per block: bit i of byte j is position 8i + j)
    -> the kernel's: bit p of byte m for position 16p + m of the first block, bit 4 + p of the second."""
    out = np.zeros(16, np.uint8)
    for m in range(16):
        v = 0
        for h in range(2):
            for p in range(4):
                pos = 16 * p + m
                v |= ((np.int64(src[8 * h + pos % 8]) >> (pos // 8)) & 1) << (4 * h + p)
        out[m] = v
    return out


@njit(parallel=True, cache=True)
def repack(codes, scale, offset, order, npairs, bits):
    """(codes, metadata) of the first 2*npairs blocks, row group by row group, block pair by block pair."""
    groups = codes.shape[0] // ROWS
    pair_bytes = order.shape[0]
    pc = np.empty(groups * npairs * ROWS * pair_bytes, np.uint8)
    pm = np.empty(groups * npairs * 16, scale.dtype)
    for g in prange(groups):
        for q in range(npairs):
            k = g * npairs + q
            for i in range(ROWS):
                row = codes[g * ROWS + i]
                dst = (k * ROWS + i) * pair_bytes
                for j in range(pair_bytes):
                    pc[dst + j] = row[q * pair_bytes + order[j]]
                if bits == 3:
                    pc[dst + 32:dst + 48] = _w3_high_bits(pc[dst + 32:dst + 48])
                elif bits == 8:
                    for j in range(pair_bytes):
                        pc[dst + j] ^= np.uint8(0x80)
            for h in range(2):
                for i in range(ROWS):
                    pm[k * 16 + 4 * h + i] = scale[g * ROWS + i, 2 * q + h]
                    pm[k * 16 + 8 + 4 * h + i] = offset[g * ROWS + i, 2 * q + h]
    return pc, pm


# --- the kernels: one per width (a width branch or a passed-in intrinsic costs speed; see i8.py) ---
# They repeat one skeleton on purpose. Sharing what surrounds the hot loop (activation preparation,
# the leftover blocks, the last M % 4 rows) through helpers measured 1-8% slower in 15 of 16 A/B
# pairs (two runs, same process, 4096x14336 and 1024x1024, 2 threads, cold, median of 7 x 30 calls).

@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w8_packed(pc, pm, npairs, codes, scale, offset, x, block, y, chunks, ahead):
    """w8, int8 activations on the repacked layout: one stream per row group, two blocks per call
    (codes stored as c - 128, multiplied by vpmaddubsw through the sign trick). Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    acts, dd, xss = permuted_activations(xq, d, xs, npairs, _PLANE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            acc[:] = 0
            for q in range(npairs):
                k = g * npairs + q
                _packed4_w8(pc, k * 512, pm, k * 16, acts, q * 128, dd, xss, q * 8, acc, ahead)
            r = g * ROWS
            for i in range(ROWS):
                a = acc[i] + acc[4 + i]
                for b in range(2 * npairs, nb):  # an odd last full block, a shorter last block
                    a += load_meta(scale, r + i, b) * _w8._dot_block(codes[r + i], xdq, b, block) \
                        + load_meta(offset, r + i, b) * xs[b]
                y[r + i] = a
    for r in range(groups * ROWS, M):
        y[r] = _w8._row_ref(codes, scale, offset, xdq, xs, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w4_packed(pc, pm, npairs, codes, scale, offset, x, block, y, chunks, ahead):
    """w4, int8 activations on the repacked layout: one stream per row group, two blocks per call.
    Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    acts, dd, xss = permuted_activations(xq, d, xs, npairs, _NIBBLE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            acc[:] = 0
            for q in range(npairs):
                k = g * npairs + q
                _packed4_w4(pc, k * 256, pm, k * 16, acts, q * 128, dd, xss, q * 8, acc, ahead)
            r = g * ROWS
            for i in range(ROWS):
                a = acc[i] + acc[4 + i]
                for b in range(2 * npairs, nb):
                    a += load_meta(scale, r + i, b) * _w4._dot_block(codes[r + i], xdq, b, block) \
                        + load_meta(offset, r + i, b) * xs[b]
                y[r + i] = a
    for r in range(groups * ROWS, M):
        y[r] = _w4._row_ref(codes, scale, offset, xdq, xs, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w3_packed(pc, pm, npairs, codes, scale, offset, x, block, y, chunks, ahead):
    """w3, int8 activations on the repacked layout: one stream per row group, two blocks per call.
    Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    acts, dd, xss = permuted_activations(xq, d, xs, npairs, _PLANE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            acc[:] = 0
            for q in range(npairs):
                k = g * npairs + q
                _packed4_w3(pc, k * 192, pm, k * 16, acts, q * 128, dd, xss, q * 8, acc, ahead)
            r = g * ROWS
            for i in range(ROWS):
                a = acc[i] + acc[4 + i]
                for b in range(2 * npairs, nb):
                    a += load_meta(scale, r + i, b) * _w3._dot_block(codes[r + i], xdq, b, block) \
                        + load_meta(offset, r + i, b) * xs[b]
                y[r + i] = a
    for r in range(groups * ROWS, M):
        y[r] = _w3._row_ref(codes, scale, offset, xdq, xs, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w2_packed(pc, pm, npairs, codes, scale, offset, x, block, y, chunks, ahead):
    """w2, int8 activations on the repacked layout: one stream per row group, two blocks per call.
    Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    acts, dd, xss = permuted_activations(xq, d, xs, npairs, _PLANE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            acc[:] = 0
            for q in range(npairs):
                k = g * npairs + q
                _packed4_w2(pc, k * 128, pm, k * 16, acts, q * 128, dd, xss, q * 8, acc, ahead)
            r = g * ROWS
            for i in range(ROWS):
                a = acc[i] + acc[4 + i]
                for b in range(2 * npairs, nb):
                    a += load_meta(scale, r + i, b) * _w2._dot_block(codes[r + i], xdq, b, block) \
                        + load_meta(offset, r + i, b) * xs[b]
                y[r + i] = a
    for r in range(groups * ROWS, M):
        y[r] = _w2._row_ref(codes, scale, offset, xdq, xs, block, r)


# How far ahead in the codes stream to prefetch, in bytes (w8 does not prefetch). Measured, one
# run, 4096x14336, 2 threads, cold, median of 7 x 30 calls, against prefetching the lines being
# loaded: w4 1.12/1.16/1.16/1.09x at 1024/2048/4096/8192, w3 1.09/1.09/1.12/1.08x, w2 1.13/1.17/
# 1.15/1.14x; w8 0.96/0.87/0.93x at 1024/2048/4096. The sequential stream alone does not keep the
# hardware prefetcher far enough ahead when a byte holds two to four weights.
PREFETCH_AHEAD = {8: 0, 4: 2048, 3: 2048, 2: 2048}
KERNELS = {8: gemv_w8_packed, 4: gemv_w4_packed, 3: gemv_w3_packed, 2: gemv_w2_packed}


def pack(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, K: int):
    """The repacked (codes, metadata, block pairs) of a matrix: done once, when a kernel is bound."""
    npairs = (K // SUPPORTED_BLOCK) // 2
    pc, pm = repack(codes, scale, offset, PAIR_ORDER[bits], npairs, bits)
    return pc, pm, npairs

"""Kernels with int8 activations (--act i8), for x86 CPUs with AVX2.

Per call, x is quantized per block to int8 (scale d_b = max|x| / 127), as MNN's
sdot/i8mm and ggml's q8 paths do. Each block's integer dot products sum(q * xq), for
four rows at once, are computed with AVX2's integer multiply-adds through numba
intrinsics that emit LLVM vector IR directly (numba's own integer arithmetic widens to
int64 and cannot reach these instructions):

- vpmaddubsw multiplies unsigned 8-bit codes by signed 8-bit activations and adds
  pairs into int16. That saturates for 8-bit codes (255*127*2 > 32767), so w8 uses
  vpmaddwd on 16-bit values instead; 4-, 3- and 2-bit codes are safe.
- vpmaddwd against ones then adds int16 pairs into int32; one vphaddd tree reduces
  the four rows' partial sums together and converts them to float in one step.

y[r] = sum_b scale[r,b] * d_b * sum(q * xq) + offset[r,b] * d_b * sum(xq), so the
kernel is exact against the reference computed with the same quantized
activations; the error the int8 activations themselves bring is reported apart
(``act_quant_err``).

Layout match: the packed layouts put the codes of contiguous activations into the
same vector lanes once unpacked: w4 low nibbles <-> x[0:32], high <-> x[32:64];
w2 fields 0,1 <-> x[0:32], fields 2,3 <-> x[32:64]; w3 likewise for its low plane,
with bit p of the high plane byte j belonging to position 8p + j.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from gemvbw.kernels import w2 as _w2
from gemvbw.kernels import w3 as _w3
from gemvbw.kernels import w4 as _w4
from gemvbw.kernels import w8 as _w8
from gemvbw.kernels._common import FASTMATH, ROWS, group_meta, row_chunks

I8, I16, I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
V8x8, V16x8, V32x8 = ir.VectorType(I8, 8), ir.VectorType(I8, 16), ir.VectorType(I8, 32)
V16x16, V8x32 = ir.VectorType(I16, 16), ir.VectorType(I32, 8)

SUPPORTED_BLOCK = 64  # the intrinsics work on one 64-weight block; other blocks use the f32 kernels


def _fn(builder, name, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


def _load(context, builder, arrty, arr, offset, vty):
    """An unaligned vector load from arr.data + offset (in elements)."""
    a = context.make_array(arrty)(context, builder, arr)
    ptr = builder.bitcast(builder.gep(a.data, [offset]), vty.as_pointer())
    return builder.load(ptr, align=1)


def _splat(vty, value):
    return ir.Constant(vty, [value] * vty.count)


def _concat(builder, a, b):
    n = a.type.count
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n))))


def _madd_u8s8(builder, pairs):
    """<8 x i32> partial sums over (u8 codes, s8 activations) <32 x i8> pairs: vpmaddubsw, then vpmaddwd by ones."""
    ubsw = _fn(builder, "llvm.x86.avx2.pmadd.ub.sw", V16x16, [V32x8, V32x8])
    acc = None
    for codes, acts in pairs:
        p = builder.call(ubsw, [codes, acts])
        acc = p if acc is None else builder.add(acc, p)
    wd = _fn(builder, "llvm.x86.avx2.pmadd.wd", V8x32, [V16x16, V16x16])
    return builder.call(wd, [acc, _splat(V16x16, 1)])


def _off(builder, base, k):
    return builder.add(base, ir.Constant(base.type, k))


def _acts16(context, builder, arrty, arr, xofs):
    """The block's 64 activations as four <16 x i16> (w8 multiplies in 16 bits: no saturation)."""
    return [_load(context, builder, arrty, arr, _off(builder, xofs, 16 * part), V16x16) for part in range(4)]


def _partial_w8(context, builder, cty, codes, cofs, acts16):
    wd = _fn(builder, "llvm.x86.avx2.pmadd.wd", V8x32, [V16x16, V16x16])
    acc = None
    for part in range(4):
        c = _load(context, builder, cty, codes, _off(builder, cofs, 16 * part), V16x8)
        s = builder.call(wd, [builder.zext(c, V16x16), acts16[part]])
        acc = s if acc is None else builder.add(acc, s)
    return acc




def _reduce4_f32(builder, s0, s1, s2, s3):
    """Four rows' <8 x i32> partials -> their four sums as float32, with one vphaddd tree:
    hadd(hadd(s0, s1), hadd(s2, s3)) holds [s0 s1 s2 s3] in each 128-bit half; add the halves."""
    hadd = _fn(builder, "llvm.x86.avx2.phadd.d", V8x32, [V8x32, V8x32])
    t = builder.call(hadd, [builder.call(hadd, [s0, s1]), builder.call(hadd, [s2, s3])])
    v4 = ir.VectorType(I32, 4)
    low = builder.shuffle_vector(t, t, ir.Constant(v4, [0, 1, 2, 3]))
    high = builder.shuffle_vector(t, t, ir.Constant(v4, [4, 5, 6, 7]))
    f = builder.sitofp(builder.add(low, high), ir.VectorType(ir.FloatType(), 4))
    return [builder.extract_element(f, ir.Constant(I32, i)) for i in range(4)]


def _intrinsic4(partial, acts_of):
    def dot4(typingctx, c0, c1, c2, c3, cofs, xq, xofs):
        sig = types.UniTuple(types.float32, 4)(c0, c1, c2, c3, cofs, xq, xofs)

        def codegen(context, builder, sig, args):
            acts = acts_of(context, builder, sig.args[5], args[5], args[6])  # loaded once for four rows
            parts = [partial(context, builder, sig.args[i], args[i], args[4], acts) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, _reduce4_f32(builder, *parts))

        return sig, codegen

    return intrinsic(dot4)


# w8: one block of 64 weights, four rows at once: their sums of q * xq, as float32
_dot4_w8 = _intrinsic4(_partial_w8, _acts16)


@njit(cache=True, fastmath=FASTMATH)
def quantize_activations(x, block, nb):
    """Per block: d = max|x| / 127, xq = round(x / d) as int8; also d * sum(xq) and the dequantized x.

    xq is padded to whole blocks with zeros. Returns (xq, xq as int16, d, d*sum(xq) per block, xq*d).
    """
    K = x.shape[0]
    xq = np.zeros(nb * block, np.int8)
    xq16 = np.zeros(nb * block, np.int16)
    d = np.empty(nb, np.float32)
    xs = np.empty(nb, np.float32)
    xdq = np.empty(K, np.float32)
    for b in range(nb):
        # slices counted from 0: an index from range(lo, hi) keeps numba's wraparound check, which
        # stops LLVM from vectorizing (measured here: 41 -> 25 us at K=14336)
        lo = b * block
        hi = min(lo + block, K)
        xb = x[lo:hi]
        amax = np.float32(0.0)
        for k in range(xb.shape[0]):
            amax = max(amax, abs(xb[k]))
        scale = amax / np.float32(127.0) if amax > 0 else np.float32(1.0)
        inv = np.float32(1.0) / scale
        qb, q16b, db = xq[lo:hi], xq16[lo:hi], xdq[lo:hi]
        total = np.int32(0)
        for k in range(xb.shape[0]):
            q = np.int32(np.rint(xb[k] * inv))
            qb[k] = q
            q16b[k] = q
            db[k] = np.float32(q) * scale
            total += q
        d[b] = scale
        xs[b] = scale * np.float32(total)
    return xq, xq16, d, xs, xdq


def dequantized_activations(x: np.ndarray, block: int) -> np.ndarray:
    """The activations an i8 kernel really multiplies with: the reference for its verification."""
    nb = -(-x.shape[0] // block)
    return quantize_activations(np.ascontiguousarray(x, dtype=np.float32), block, nb)[4]


# One loop over a row group's full blocks per width (the width branch is taken once per group,
# outside the loop: inside it, four branches per block cost about 3x in speed).

@njit(cache=True, fastmath=FASTMATH)
def _blocks_w8(c0, c1, c2, c3, s, o, xq16, d, xs, full):
    a0 = a1 = a2 = a3 = np.float32(0.0)
    for b in range(full):
        cb, xb, db, xsb = b * 64, b * 64, d[b], xs[b]
        i0, i1, i2, i3 = _dot4_w8(c0, c1, c2, c3, cb, xq16, xb)
        a0 += s[0, b] * db * i0 + o[0, b] * xsb
        a1 += s[1, b] * db * i1 + o[1, b] * xsb
        a2 += s[2, b] * db * i2 + o[2, b] * xsb
        a3 += s[3, b] * db * i3 + o[3, b] * xsb
    return a0, a1, a2, a3


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w8_i8(codes, scale, offset, x, block, y, chunks):
    """w8, int8 activations: four rows per step, each full 64-weight block one intrinsic for the four rows
    (16-bit multiply-adds, one reduction tree), then y += scale * d_b * isum + offset * d_b * sum(xq).
    Blocks of 64 only."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
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
            a0, a1, a2, a3 = _blocks_w8(c0, c1, c2, c3, s, o, xq16, d, xs, full)
            if full < nb:
                a0 += s[0, full] * _w8._dot_block(c0, xdq, full, block) + o[0, full] * xs[full]
                a1 += s[1, full] * _w8._dot_block(c1, xdq, full, block) + o[1, full] * xs[full]
                a2 += s[2, full] * _w8._dot_block(c2, xdq, full, block) + o[2, full] * xs[full]
                a3 += s[3, full] * _w8._dot_block(c3, xdq, full, block) + o[3, full] * xs[full]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):
        y[r] = _w8._row_ref(codes, scale, offset, xdq, xs, block, r)


# --- w4, w3, w2: two blocks per call --------------------------------------------------------------
# A w2 block is 16 code bytes and a w3 block's low plane too: half a vector. Two blocks fill one,
# and with the activations permuted once per call (vector p of block pair q: 16 activations of
# block 2q, then the same 16 positions of block 2q+1) each 128-bit half of the products belongs to
# one block, so the vphaddd tree yields [4 rows x block 2q | 4 rows x block 2q+1] and the
# scale/offset math runs on 8 lanes at once, against the row group's scales laid out block-major.
# w4 pairs the halves of its 32-byte blocks the same way. Measured against one block per call
# (same run, 4096x14336, 2 threads, cold): w2 7.1-7.8 vs 5.7-6.3 GB/s, w3 7.6-9.6 vs 5.8-6.3,
# w4 11.2-13.6 vs 10.1-12.5.

F32 = ir.FloatType()
V8F = ir.VectorType(F32, 8)


def _ptr(context, builder, arrty, arr, offset, vty):
    a = context.make_array(arrty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [offset]), vty.as_pointer())


def _pair_w2(context, builder, cty, codes, cofs, acts):
    c = _load(context, builder, cty, codes, cofs, V32x8)
    return _madd_u8s8(builder, [(builder.and_(builder.lshr(c, _splat(V32x8, 2 * p)), _splat(V32x8, 3)), acts[p])
                                for p in range(4)])


def _pair_w3(context, builder, cty, codes, cofs, acts):
    """Block layout: 16 low-plane bytes then 8 high-plane bytes (24 per block). Position 16p + j of a
    block has its high bit in bit 2p + j//8 of high byte j%8: selected by a per-lane mask and icmp."""
    low = _concat(builder, _load(context, builder, cty, codes, cofs, V16x8),
                  _load(context, builder, cty, codes, _off(builder, cofs, 24), V16x8))
    h0 = _load(context, builder, cty, codes, _off(builder, cofs, 16), V8x8)
    h1 = _load(context, builder, cty, codes, _off(builder, cofs, 40), V8x8)
    high = _concat(builder, _concat(builder, h0, h0), _concat(builder, h1, h1))
    pairs = []
    for p in range(4):
        field = builder.and_(builder.lshr(low, _splat(V32x8, 2 * p)), _splat(V32x8, 3))
        mask = ir.Constant(V32x8, ([1 << (2 * p)] * 8 + [1 << (2 * p + 1)] * 8) * 2)
        set_ = builder.icmp_unsigned("==", builder.and_(high, mask), mask)
        pairs.append((builder.add(field, builder.select(set_, _splat(V32x8, 4), _splat(V32x8, 0))), acts[p]))
    return _madd_u8s8(builder, pairs)


def accumulate_pair(builder, parts, factors, accp):
    """acc[0:8] += isum * s * d + o * x: the four rows' <8 x i32> partials of a block pair reduced by one
    vphaddd tree to [4 rows x block 2q | 4 rows x block 2q+1], then scaled 8 lanes at once. factors()
    emits the loads of (s, o, d, x) after the tree (emitted before it, LLVM's schedule had one more
    instruction in the rows4 loops)."""
    hadd = _fn(builder, "llvm.x86.avx2.phadd.d", V8x32, [V8x32, V8x32])
    t = builder.call(hadd, [builder.call(hadd, [parts[0], parts[1]]), builder.call(hadd, [parts[2], parts[3]])])
    s, o, d, x = factors()
    total = builder.fadd(builder.fmul(builder.sitofp(t, V8F), builder.fmul(s, d)), builder.fmul(o, x))
    builder.store(builder.fadd(builder.load(accp, align=4), total), accp, align=4)


def _intrinsic_pair(partial):
    def pair4(typingctx, c0, c1, c2, c3, cofs, xqp, xofs, st, ot, lanes, dd, xss, acc):
        """acc[0:8] += isum * scale * d + offset * d * sum(xq) for one block pair of four rows."""
        sig = types.none(c0, c1, c2, c3, cofs, xqp, xofs, st, ot, lanes, dd, xss, acc)

        def codegen(context, builder, sig, args):
            acts = [_load(context, builder, sig.args[5], args[5], _off(builder, args[6], 32 * p), V32x8)
                    for p in range(4)]
            parts = [partial(context, builder, sig.args[i], args[i], args[4], acts) for i in range(4)]
            accp = _ptr(context, builder, sig.args[12], args[12], ir.Constant(args[9].type, 0), V8F)
            accumulate_pair(builder, parts, lambda: [builder.load(_ptr(context, builder, sig.args[k], args[k],
                                                                       args[9], V8F), align=4)
                                                     for k in (7, 8, 10, 11)], accp)
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(pair4)


def _pair_w4(context, builder, cty, codes, cofs, acts):
    """Two w4 blocks (64 bytes): [block0 bytes 0-15 | block1 bytes 0-15] and [bytes 16-31 | 16-31];
    their low nibbles are positions 0-15 and 16-31, their high nibbles 32-47 and 48-63."""
    a = _concat(builder, _load(context, builder, cty, codes, cofs, V16x8),
                _load(context, builder, cty, codes, _off(builder, cofs, 32), V16x8))
    b = _concat(builder, _load(context, builder, cty, codes, _off(builder, cofs, 16), V16x8),
                _load(context, builder, cty, codes, _off(builder, cofs, 48), V16x8))
    lo, hi = _splat(V32x8, 15), _splat(V32x8, 4)
    return _madd_u8s8(builder, [(builder.and_(a, lo), acts[0]), (builder.lshr(a, hi), acts[1]),
                                (builder.and_(b, lo), acts[2]), (builder.lshr(b, hi), acts[3])])


_pair4_w2 = _intrinsic_pair(_pair_w2)
_pair4_w3 = _intrinsic_pair(_pair_w3)
_pair4_w4 = _intrinsic_pair(_pair_w4)
# which 16 positions of a block each of the four activation vectors of a pair holds
_PLANE_ORDER = np.array([0, 16, 32, 48], dtype=np.int64)  # w2, w3: fields 0..3 (packed w8: chunks 0..3)
_NIBBLE_ORDER = np.array([0, 32, 16, 48], dtype=np.int64)  # w4: low a, high a, low b, high b


@njit(cache=True, fastmath=FASTMATH)
def permuted_activations(xq, d, xs, npairs, order):
    """Per call: activations permuted for block pairs (vector p of pair q holds positions
    order[p]..order[p]+15 of block 2q, then of block 2q+1), and d, d*sum(xq) spread over the
    8 lanes [4 x block 2q | 4 x block 2q+1]."""
    half = SUPPORTED_BLOCK // order.shape[0]
    acts = np.empty(npairs * 2 * SUPPORTED_BLOCK, xq.dtype)
    dd = np.empty(npairs * 8, np.float32)
    xss = np.empty(npairs * 8, np.float32)
    for q in range(npairs):
        for h in range(2):
            b = 2 * q + h
            for p in range(order.shape[0]):
                src = xq[b * SUPPORTED_BLOCK + order[p]:b * SUPPORTED_BLOCK + order[p] + half]
                start = (2 * q * order.shape[0] + 2 * p + h) * half
                dst = acts[start:start + half]
                for j in range(half):  # an explicit loop: slice assignment measured slower (18 vs 10 us)
                    dst[j] = src[j]
            for k in range(4):
                dd[q * 8 + 4 * h + k] = d[b]
                xss[q * 8 + 4 * h + k] = xs[b]
    return acts, dd, xss


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w2_i8(codes, scale, offset, x, block, y, chunks):
    """w2, int8 activations: two blocks per intrinsic call for four rows. Blocks of 64 only."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    xqp, dd, xss = permuted_activations(xq, d, xs, full // 2, _PLANE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        tmp = np.empty(nb, np.uint32)
        s = np.empty((ROWS, nb), np.float32)
        o = np.empty((ROWS, nb), np.float32)
        st = np.empty(nb * ROWS, np.float32)
        ot = np.empty(nb * ROWS, np.float32)
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            group_meta(scale, offset, r, tmp, s, o)
            for b in range(nb):
                for i in range(ROWS):
                    st[b * ROWS + i] = s[i, b]
                    ot[b * ROWS + i] = o[i, b]
            c0 = codes[r]
            c1 = codes[r + 1]
            c2 = codes[r + 2]
            c3 = codes[r + 3]
            acc[:] = 0
            for q in range(full // 2):
                _pair4_w2(c0, c1, c2, c3, q * 32, xqp, q * 128, st, ot, q * 8, dd, xss, acc)
            a0, a1, a2, a3 = acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]
            for b in range(full - full % 2, nb):  # an odd last full block, a shorter last block
                a0 += s[0, b] * _w2._dot_block(c0, xdq, b, block) + o[0, b] * xs[b]
                a1 += s[1, b] * _w2._dot_block(c1, xdq, b, block) + o[1, b] * xs[b]
                a2 += s[2, b] * _w2._dot_block(c2, xdq, b, block) + o[2, b] * xs[b]
                a3 += s[3, b] * _w2._dot_block(c3, xdq, b, block) + o[3, b] * xs[b]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):
        y[r] = _w2._row_ref(codes, scale, offset, xdq, xs, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w3_i8(codes, scale, offset, x, block, y, chunks):
    """w3, int8 activations: two blocks per intrinsic call for four rows. Blocks of 64 only."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    xqp, dd, xss = permuted_activations(xq, d, xs, full // 2, _PLANE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        tmp = np.empty(nb, np.uint32)
        s = np.empty((ROWS, nb), np.float32)
        o = np.empty((ROWS, nb), np.float32)
        st = np.empty(nb * ROWS, np.float32)
        ot = np.empty(nb * ROWS, np.float32)
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            group_meta(scale, offset, r, tmp, s, o)
            for b in range(nb):
                for i in range(ROWS):
                    st[b * ROWS + i] = s[i, b]
                    ot[b * ROWS + i] = o[i, b]
            c0 = codes[r]
            c1 = codes[r + 1]
            c2 = codes[r + 2]
            c3 = codes[r + 3]
            acc[:] = 0
            for q in range(full // 2):
                _pair4_w3(c0, c1, c2, c3, q * 48, xqp, q * 128, st, ot, q * 8, dd, xss, acc)
            a0, a1, a2, a3 = acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]
            for b in range(full - full % 2, nb):  # an odd last full block, a shorter last block
                a0 += s[0, b] * _w3._dot_block(c0, xdq, b, block) + o[0, b] * xs[b]
                a1 += s[1, b] * _w3._dot_block(c1, xdq, b, block) + o[1, b] * xs[b]
                a2 += s[2, b] * _w3._dot_block(c2, xdq, b, block) + o[2, b] * xs[b]
                a3 += s[3, b] * _w3._dot_block(c3, xdq, b, block) + o[3, b] * xs[b]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):
        y[r] = _w3._row_ref(codes, scale, offset, xdq, xs, block, r)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w4_i8(codes, scale, offset, x, block, y, chunks):
    """w4, int8 activations: two blocks per intrinsic call for four rows. Blocks of 64 only."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    full = K // block
    xq, xq16, d, xs, xdq = quantize_activations(x, block, nb)
    xqp, dd, xss = permuted_activations(xq, d, xs, full // 2, _NIBBLE_ORDER)
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        tmp = np.empty(nb, np.uint32)
        s = np.empty((ROWS, nb), np.float32)
        o = np.empty((ROWS, nb), np.float32)
        st = np.empty(nb * ROWS, np.float32)
        ot = np.empty(nb * ROWS, np.float32)
        acc = np.zeros(8, np.float32)
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            group_meta(scale, offset, r, tmp, s, o)
            for b in range(nb):
                for i in range(ROWS):
                    st[b * ROWS + i] = s[i, b]
                    ot[b * ROWS + i] = o[i, b]
            c0 = codes[r]
            c1 = codes[r + 1]
            c2 = codes[r + 2]
            c3 = codes[r + 3]
            acc[:] = 0
            for q in range(full // 2):
                _pair4_w4(c0, c1, c2, c3, q * 64, xqp, q * 128, st, ot, q * 8, dd, xss, acc)
            a0, a1, a2, a3 = acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]
            for b in range(full - full % 2, nb):  # an odd last full block, a shorter last block
                a0 += s[0, b] * _w4._dot_block(c0, xdq, b, block) + o[0, b] * xs[b]
                a1 += s[1, b] * _w4._dot_block(c1, xdq, b, block) + o[1, b] * xs[b]
                a2 += s[2, b] * _w4._dot_block(c2, xdq, b, block) + o[2, b] * xs[b]
                a3 += s[3, b] * _w4._dot_block(c3, xdq, b, block) + o[3, b] * xs[b]
            y[r] = a0
            y[r + 1] = a1
            y[r + 2] = a2
            y[r + 3] = a3
    for r in range(groups * ROWS, M):
        y[r] = _w4._row_ref(codes, scale, offset, xdq, xs, block, r)

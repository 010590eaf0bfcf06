"""int8 activations, prepared once per call: quantized per block, then permuted for block pairs.

Per call, x is quantized per block to int8 (scale d_b = max|x| / 127), as MNN's sdot/i8mm
and ggml's q8 paths do. The kernels are exact against the reference computed with these
same activations; the error the quantization itself brings is reported apart
(``act_quant_err``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from gemvbw.kernels._common import FASTMATH
from gemvbw.kernels.isa.common import F32, I8, I32, broadcast, fn, load, ptr, splat, vec

SUPPORTED_BLOCK = 64  # the int8 kernels work on 64-weight blocks; other blocks use the f32 kernels


# --- a whole block in vectors --------------------------------------------------------------------
# numba's loops over a 64-activation block took 7.0 us per call at K=14336, warm (AMD Zen 5, 1 thread; 13.5 us
# after a 64 MiB flush): the max of the magnitudes vectorized on 64-bit lanes (numba widens 32-bit integer
# arithmetic) and a float max not at all. A whole block as one <64 x float> of generic IR, which every backend
# splits into its registers (four zmm, eight ymm, sixteen NEON q), took 2.2 us warm and 8.2 us cold, with the
# same bits (the same operations on the same values, in IEEE order: no fast-math flags). The kernels call this
# once per call before their rows, so it was 1-3 % of a 4096x14336 w2 call at one thread.

_BLOCK_F32 = vec(F32, SUPPORTED_BLOCK)
_BLOCK_I32 = vec(I32, SUPPORTED_BLOCK)


@intrinsic
def _block_absmax(typingctx, x, lo):
    """max |x[lo:lo + 64]| as float32, taken on the bits with the sign cleared (an unsigned max: for floats
    other than NaN they order as the values do, and a NaN wins, as it does in the loop below)."""
    sig = types.float32(x, lo)

    def codegen(context, builder, sig, args):
        xty, loty = sig.args
        start = context.cast(builder, args[1], loty, types.intp)
        bits = builder.bitcast(load(context, builder, xty, args[0], start, _BLOCK_F32), _BLOCK_I32)
        magnitude = builder.and_(bits, splat(_BLOCK_I32, 0x7FFFFFFF))
        umax = fn(builder, f"llvm.vector.reduce.umax.v{SUPPORTED_BLOCK}i32", I32, [_BLOCK_I32])
        return builder.bitcast(builder.call(umax, [magnitude]), F32)

    return sig, codegen


@intrinsic
def _quantize_block(typingctx, x, lo, inv, xq):
    """xq[lo:lo + 64] = rint(x[lo:lo + 64] * inv) as int8; returns their sum as int32."""
    sig = types.int32(x, lo, inv, xq)

    def codegen(context, builder, sig, args):
        xty, loty, _, xqty = sig.args
        start = context.cast(builder, args[1], loty, types.intp)
        scaled = builder.fmul(load(context, builder, xty, args[0], start, _BLOCK_F32),
                              broadcast(builder, args[2], _BLOCK_F32))
        rounded = builder.call(fn(builder, f"llvm.rint.v{SUPPORTED_BLOCK}f32", _BLOCK_F32, [_BLOCK_F32]), [scaled])
        q = builder.fptosi(rounded, _BLOCK_I32)  # within -127..127: |x| * inv rounds to at most 127
        dst = ptr(context, builder, xqty, args[3], start, vec(I8, SUPPORTED_BLOCK))
        builder.store(builder.trunc(q, vec(I8, SUPPORTED_BLOCK)), dst, align=1)
        total = fn(builder, f"llvm.vector.reduce.add.v{SUPPORTED_BLOCK}i32", I32, [_BLOCK_I32])
        return builder.call(total, [q])

    return sig, codegen


@njit(cache=True)
def _scale_of(amax):
    return amax / np.float32(127.0) if amax > 0 else np.float32(1.0)


# No fastmath: nothing here needs reassociation (the max and the sum are integer), and with it LLVM
# folds x * (1 / d) back into a division, a vdivps per 8 activations instead of a vmulps.
@njit(cache=True)
def quantize_into(x, block, nb, xq, d, xs, xdq, with_xdq):
    """Per block: d = max|x| / 127, xq = round(x / d) as int8, d * sum(xq); and, when ``with_xdq``,
    the dequantized x (xq * d) into xdq.

    Written into arrays the caller keeps (a kernel's workspace, allocated when it is bound): after a
    cache flush each allocation of a call costs its allocator's cold state (measured on Zen 4, K=1024,
    1 thread, cold: 4.9 us quantizing into new arrays, 1.2 us into kept ones). xq must hold nb * block
    bytes whose tail after x's length is zero; d one more element than nb (its last a scratch word).
    Whole blocks of 64 go through the vector intrinsics above, the rest (a shorter last block, other
    block sizes) through the loops below: both give the same bits.
    """
    K = x.shape[0]
    whole = K // block if block == SUPPORTED_BLOCK else 0
    for b in range(whole):
        lo = b * block
        scale = _scale_of(_block_absmax(x, lo))
        total = _quantize_block(x, lo, np.float32(1.0) / scale, xq)
        d[b] = scale
        xs[b] = scale * np.float32(total)
    bits = x.view(np.uint32)
    amax_bits = d[nb:nb + 1].view(np.uint32)
    amax_of = d[nb:nb + 1]
    for b in range(whole, nb):
        # slices counted from 0: an index from range(lo, hi) keeps numba's wraparound check, which
        # stops LLVM from vectorizing (measured here: 41 -> 25 us at K=14336)
        lo = b * block
        hi = min(lo + block, K)
        xb = x[lo:hi]
        # max |x| taken on the bits with the sign cleared (see _block_absmax)
        xi = bits[lo:hi]
        m = np.uint32(0)
        for k in range(xi.shape[0]):
            v = xi[k] & np.uint32(0x7FFFFFFF)
            if v > m:
                m = v
        amax_bits[0] = m
        scale = _scale_of(amax_of[0])
        inv = np.float32(1.0) / scale
        qb = xq[lo:hi]
        total = np.int32(0)
        for k in range(xb.shape[0]):
            q = np.int32(np.rint(xb[k] * inv))
            qb[k] = q
            total += q
        d[b] = scale
        xs[b] = scale * np.float32(total)
    if with_xdq:  # from the int8 codes just written: the same values as q * d
        for b in range(nb):
            lo = b * block
            hi = min(lo + block, K)
            qb = xq[lo:hi]
            db = xdq[lo:hi]
            scale = d[b]
            for k in range(qb.shape[0]):
                db[k] = np.float32(qb[k]) * scale


@njit(cache=True)
def quantize_activations(x, block, nb):
    """:func:`quantize_into` new arrays: (xq padded to whole blocks with zeros, d, d*sum(xq) per block, xq*d)."""
    xq = np.zeros(nb * block, np.int8)
    d = np.empty(nb + 1, np.float32)
    xs = np.empty(nb, np.float32)
    xdq = np.empty(x.shape[0], np.float32)
    quantize_into(x, block, nb, xq, d, xs, xdq, True)
    return xq, d[:nb], xs, xdq


def dequantized_activations(x: np.ndarray, block: int) -> np.ndarray:
    """The activations an int8 kernel really multiplies with: the reference for its verification."""
    nb = -(-x.shape[0] // block)
    return quantize_activations(np.ascontiguousarray(x, dtype=np.float32), block, nb)[3]


@njit(cache=True, fastmath=FASTMATH)
def permute_into(xq, d, xs, npairs, order, half, acts, dd, xss):
    """Activations permuted for block pairs into acts (vector p of pair q holds positions
    order[p]..order[p]+half-1 of block 2q, then the same of block 2q+1), and d, d*sum(xq) spread
    over the 8 lanes [4 x block 2q | 4 x block 2q+1] into dd and xss (npairs * 8 each): per call, into
    a kernel's workspace."""
    nvec = order.shape[0]
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

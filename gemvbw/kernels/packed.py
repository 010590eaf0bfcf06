"""The row-chunk int8-activation kernels (packed-4x2): the layout and each width's unpacking, for every tier.

A kernel runs on weights repacked once, when it is bound to a matrix (untimed, as MNN and
llama.cpp repack a model when they load it), so that a group of four rows reads two
sequential streams, block pair after block pair:

- codes: each row's bytes of blocks 2q and 2q+1, ordered so that every load is a full vector
  of the tier and each vector holds half its bytes from block 2q and half from block 2q+1
  (the products of each half then sum into int32 lanes of one block);
- metadata: that pair's eight scales then eight offsets, [4 rows x block 2q | 4 rows x block
  2q+1], in their stored type (fp16 is converted in the kernel, 8 lanes at once).

The bytes are exactly those of the packed matrix, reordered (w3's high-plane bits regrouped
so each vector lane finds its bits by one test; w8 codes stored as c - 128 where the tier
multiplies signed codes); blocks left over (an odd last full block, a shorter last block) and
the last M % 4 rows are read from the matrix as stored, by the width's f32 loop.

Per block pair and row group, one intrinsic (:func:`_block_pair`) unpacks the four rows'
codes, takes the tier's integer dot products against the activations (quantized per block and
permuted once per call, see gemvbw.kernels.activations), reduces them to eight int32 sums,
and adds ``isum * scale * d + offset * d * sum(xq)`` to eight float accumulators. The threads,
their two streams of row groups and the leftovers are the skeleton shared with the column tiles
(gemvbw.kernels.streams).

The tier and width are compile-time parameters: the kernel's first argument is a
:class:`KernelTag`, whose numba type carries them, so each (tier, width) compiles to its own
machine code with no branch left at run time, and numba caches each under its own signature.
The type's name also carries a fingerprint of the kernels' sources, because numba's cache
would otherwise keep code compiled from an older version of a primitive in another file.
"""

from __future__ import annotations

import weakref

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import (NativeValue, intrinsic, models, overload, register_model, typeof_impl,
                             unbox)

from gemvbw.kernels import FINGERPRINT, streams
from gemvbw.kernels._common import ROWS, aligned_empty
from gemvbw.kernels.activations import SUPPORTED_BLOCK, permute_into
from gemvbw.kernels.isa import PRIMITIVES
from gemvbw.kernels.isa.common import HINTS, I8, I32, V8F, const, halves, load, meta, off, prefetch, ptr, splat, vec

# code bytes of one row's block pair (two blocks of 64)
PAIR_BYTES = {8: 128, 4: 64, 3: 48, 2: 32}


# --- the compile-time tag -------------------------------------------------------------------------

class KernelTag:
    """Which tier and width a packed-4x2 kernel compiles for, how far ahead in the codes it prefetches and
    with which locality hint (default: the tier's; its numba type carries them all, so a benchmark can
    compare them in one process)."""

    def __init__(self, tier: str, bits: int, ahead: int | None = None, locality: int | None = None):
        prim = PRIMITIVES.get(tier)
        if (prim is None or bits not in PAIR_BYTES or (ahead is not None and ahead < 0)
                or (locality is not None and locality not in HINTS)):
            raise ValueError(f"no packed kernel for tier {tier!r}, w{bits}, prefetch {ahead} bytes ahead, "
                             f"locality {locality}")
        self.tier, self.bits = tier, bits
        self.ahead = prim.prefetch_ahead[bits] if ahead is None else ahead
        self.locality = prim.prefetch_locality if locality is None else locality


class KernelTagType(types.Type):
    def __init__(self, tier: str, bits: int, ahead: int, locality: int):
        self.tier, self.bits, self.ahead, self.locality = tier, bits, ahead, locality
        super().__init__(name=f"KernelTag({tier},w{bits},ahead {ahead},locality {locality},{FINGERPRINT})")


@typeof_impl.register(KernelTag)
def _typeof_tag(val, c):
    return KernelTagType(val.tier, val.bits, val.ahead, val.locality)


register_model(KernelTagType)(models.OpaqueModel)


@unbox(KernelTagType)
def _unbox_tag(typ, obj, c):
    return NativeValue(c.context.get_dummy_value())  # nothing to pass at run time: the type is the value


# --- layout: which stored byte goes where, per tier vector size -----------------------------------
# A vector of V bytes holds H = V/2 bytes of block 2q then H of block 2q+1; vector c of a row's pair
# takes bytes c*H .. c*H+H-1 of each block's codes (of its low plane, for w3).

def pair_order(bits: int, V: int) -> np.ndarray:
    """order[j]: the byte of a row's two stored blocks (block 2q's bytes, then 2q+1's) that goes to byte j
    of its repacked pair. For w3, the 16 high-plane bytes follow the 32 low-plane ones as stored (they
    are then re-bitted, see w3_high_table)."""
    H = V // 2
    block_bytes = {8: 64, 4: 32, 3: 24, 2: 16}[bits]
    plane = {8: 64, 4: 32, 3: 16, 2: 16}[bits]  # bytes per block that the vectors tile
    out = [(l // H) * block_bytes + c * H + l % H for c in range(2 * plane // V) for l in range(V)]
    if bits == 3:
        out += [h * 24 + 16 + m for h in range(2) for m in range(8)]
    return np.array(out, np.int64)


def act_order(bits: int, V: int, compute: int | None = None) -> np.ndarray:
    """The first position (in a block) of each activation vector of a pair (V/2 positions of block 2q, then of
    2q+1), in the order the kernel multiplies them: one per code vector of w8, per nibble half of w4, per 2-bit
    field of w2 and w3. ``compute``: the vector size of a tier computing on two layout vectors at once; its w4
    takes the low nibbles of both halves of a vector against one activation vector, then the high ones."""
    H = V // 2
    if bits == 4 and compute == 2 * V:
        return np.array([c * H for c in range(128 // V)], np.int64)
    if bits == 8:
        starts = [c * H for c in range(128 // V)]
    elif bits == 4:
        starts = [s for c in range(64 // V) for s in (c * H, 32 + c * H)]
    else:
        starts = [16 * p + c * H for c in range(32 // V) for p in range(4)]
    return np.array(starts, np.int64)


def w3_high_table(V: int) -> np.ndarray:
    """table[j, t]: for bit t of repacked high-plane byte j, the bit (8 * byte + bit) of the pair's 16
    stored high-plane bytes it takes, or -1. Stored: bit i of byte j of a block is position 8i + j.
    Repacked: a V-lane vector of the pair's high bits, 128 // V bits per lane, lane l's bit for tile
    t = 4c + p (c its code vector, p its 2-bit field) being the high bit of position 16p + c*H + l % H of
    block l // H; for V = 32, two lanes share a byte (l and l + 16: the kernel shifts the upper half)."""
    H = V // 2
    per_lane = 128 // V
    table = np.full((16, 8), -1, np.int64)
    for j in range(16):
        for t in range(8):
            lane = j + 16 * (t // per_lane)
            tile = t % per_lane
            c, p = tile // 4, tile % 4
            pos = 16 * p + c * H + lane % H
            h = lane // H
            table[j, t] = 8 * (8 * h + pos % 8) + pos // 8
    return table


@njit(parallel=True, cache=True)
def repack(codes, scale, offset, order, high, npairs, bits, flip, pc, pm):
    """Fill pc and pm with the (codes, metadata) of the first 2*npairs blocks, row group by row group, block
    pair by block pair. flip: XOR w8's code bytes with it (0x80: stored as c - 128)."""
    groups = codes.shape[0] // ROWS
    pair_bytes = order.shape[0]
    for g in prange(groups):
        stored = np.empty(16, np.uint8)
        for q in range(npairs):
            k = g * npairs + q
            for i in range(ROWS):
                row = codes[g * ROWS + i]
                dst = pc[(k * ROWS + i) * pair_bytes:(k * ROWS + i + 1) * pair_bytes]
                for j in range(pair_bytes):
                    dst[j] = row[q * pair_bytes + order[j]]
                if bits == 3:  # regroup the high-plane bits for the kernel's lanes
                    for j in range(16):
                        stored[j] = dst[32 + j]
                    for j in range(16):
                        v = 0
                        for t in range(8):
                            src = high[j, t]
                            if src >= 0:
                                v |= ((np.int64(stored[src // 8]) >> (src % 8)) & 1) << t
                        dst[32 + j] = v
                if flip and bits == 8:
                    for j in range(pair_bytes):
                        dst[j] ^= np.uint8(flip)
            for h in range(2):
                for i in range(ROWS):
                    pm[k * 16 + 4 * h + i] = scale[g * ROWS + i, 2 * q + h]
                    pm[k * 16 + 8 + 4 * h + i] = offset[g * ROWS + i, 2 * q + h]


def layout_bytes(prim) -> int:
    """The vector size the tier's layout is made for (a tier may compute on wider vectors over it)."""
    return getattr(prim, "layout_bytes", prim.vector_bytes)


def code_bias(prim, bits: int) -> int:
    """What the tier's dot product sees subtracted from each code: 128 for w8 stored as c - 128, else 0."""
    return 128 if bits == 8 and prim.w8_codes == "s8" else 0


def pack(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, K: int, tier: str):
    """The repacked (codes, metadata, block pairs) of a matrix for a tier: done once, when a kernel is bound."""
    V = layout_bytes(PRIMITIVES[tier])
    npairs = (K // SUPPORTED_BLOCK) // 2
    high = w3_high_table(V) if bits == 3 else np.full((16, 8), -1, np.int64)
    order = pair_order(bits, V)
    groups = codes.shape[0] // ROWS
    # allocated by numpy, which asks Linux for transparent huge pages on large arrays (numba's allocator does
    # not): fewer TLB misses while the kernel streams the copy from DRAM. Measured, 4096x14336 w8, cold, one
    # process, interleaved: 56 -> 76% of a plain read of the same bytes with 1 thread, 77 -> 87% with 2.
    pc = aligned_empty(groups * npairs * ROWS * order.shape[0])  # on a cache line: see aligned_empty
    pm = aligned_empty(groups * npairs * 16, scale.dtype)
    flip = 0x80 if code_bias(PRIMITIVES[tier], bits) else 0
    repack(codes, scale, offset, order, high, npairs, bits, flip, pc, pm)
    return pc, pm, npairs


# --- each width's unpacking, against the tier's dot product -----------------------------------------

def bit_field(builder, v, shift: int, width: int, byte_shifts: bool):
    """(v >> shift) & (2**width - 1) in every byte. x86 has no byte shift: there the shift runs on 16-bit lanes
    and the mask drops what crossed from the neighbouring byte (LLVM would otherwise shift bytes with GFNI's
    vgf2p8affineqb, which on Zen 4 takes the ports vpdpbusd needs). NEON shifts bytes, and a top field needs
    no mask there."""
    if shift:
        if byte_shifts:
            v = builder.lshr(v, splat(v.type, shift))
            if shift + width == 8:
                return v
        else:
            wide = vec(ir.IntType(16), v.type.count // 2)
            v = builder.bitcast(builder.lshr(builder.bitcast(v, wide), splat(wide, shift)), v.type)
    return builder.and_(v, splat(v.type, (1 << width) - 1))


def _terms(builder, bits, chunks, acts, byte_shifts: bool):
    """Each width's unpacking, for any vector width: (codes, activations) pairs from the code vectors of a
    row's pair and the activation vectors, in the order the layout puts them, and the largest code."""
    if bits == 8:
        return [(v, acts[c]) for c, v in enumerate(chunks)], 255
    if bits == 4:
        return [t for c, v in enumerate(chunks)
                for t in ((bit_field(builder, v, 0, 4, byte_shifts), acts[2 * c]),
                          (bit_field(builder, v, 4, 4, byte_shifts), acts[2 * c + 1]))], 15
    if bits == 2:
        return [(bit_field(builder, v, 2 * p, 2, byte_shifts), acts[4 * c + p])
                for c, v in enumerate(chunks) for p in range(4)], 3
    raise ValueError(f"w{bits} has terms of its own (_w3_isum)")


def _w3_isum(prim, builder, lows_v, high16, acts):
    """w3: the 2-bit low field plus 4 times the high bit, from the low-plane vectors and the 16 high-plane bytes."""
    VT = lows_v[0].type
    if hasattr(prim, "insert_high"):
        # each 3-bit code built whole by the tier (NEON's sli): the field, with the tile's high bit (regrouped at
        # repacking) isolated as 0/1 and put above it. A test of the bit (cmtst) instead is one instruction less
        # per 16 weights but needs eight mask constants, which LLVM rematerializes in the loop: measured 0.39
        # against 0.38 instructions per weight (a -1/0 term in a second dot product, earlier: 0.45-0.48)
        assert VT.count == 16
        terms = []
        for c, v in enumerate(lows_v):
            for p in range(4):
                t = 4 * c + p
                field = v if p == 0 else builder.lshr(v, splat(VT, 2 * p))  # bits above the field are dropped
                terms.append((prim.insert_high(builder, field, bit_field(builder, high16, t, 1, True)), acts[t]))
        return prim.dot(builder, terms, 7)
    lows = [(c, p, bit_field(builder, v, 2 * p, 2, prim.byte_shifts)) for c, v in enumerate(lows_v) for p in range(4)]
    # x86: the high bits loaded into both 16-byte halves, the upper half shifted by 4, so
    # every lane finds field p's high bit at bit p; moved to bit 2 and or-ed onto the field
    assert VT.count == 32
    both = builder.shuffle_vector(high16, high16, ir.Constant(vec(I32, 32), list(range(16)) * 2))
    v8 = vec(I32, 8)
    high = builder.bitcast(builder.lshr(builder.bitcast(both, v8), ir.Constant(v8, [0] * 4 + [4] * 4)), VT)
    terms = []
    for c, p, f in lows:
        moved = builder.shl(high, splat(VT, 2 - p)) if p < 2 else (
            high if p == 2 else builder.lshr(high, splat(VT, 1)))
        terms.append((builder.or_(f, builder.and_(moved, splat(VT, 4))), acts[4 * c + p]))
    return prim.dot(builder, terms, 7)


def _code_max(prim, bits, code_max):
    return None if bits == 8 and prim.w8_codes == "s8" else code_max


def _group_isum(prim, bits, context, builder, pcty, pcv, cofs, aty, av, aofs):
    """The four rows' block-pair sums, <8 x i32> [4 rows x block 2q | 4 rows x block 2q+1]."""
    L = layout_bytes(prim)
    W = prim.compute_bytes(bits) if hasattr(prim, "compute_bytes") else L
    row_bytes = PAIR_BYTES[bits]

    def code(byte, nbytes):
        return load(context, builder, pcty, pcv, off(builder, cofs, byte), vec(I8, nbytes))

    def acts_of(width):  # loaded once for the four rows
        return [load(context, builder, aty, av, off(builder, aofs, width * p), vec(I8, width))
                for p in range(2 * SUPPORTED_BLOCK // width)]

    if W == L:  # a vector of the layout per chunk of a row
        acts = acts_of(L)
        parts = []
        for i in range(ROWS):
            if bits == 3:
                lows = [code(row_bytes * i + c * L, L) for c in range(32 // L)]
                parts.append(_w3_isum(prim, builder, lows, code(row_bytes * i + 32, 16), acts))
            else:
                chunks = [code(row_bytes * i + c * L, L) for c in range(row_bytes // L)]
                terms, cmax = _terms(builder, bits, chunks, acts, prim.byte_shifts)
                parts.append(prim.dot(builder, terms, _code_max(prim, bits, cmax)))
        return prim.reduce4(builder, parts)
    # wider vectors than the layout's (AVX-512 on the 256-bit layout): two of its vectors at once
    assert W == 2 * L
    parts = []
    if row_bytes >= W:  # w8, w4: two chunks of one row; fold the halves, which hold the same lanes
        acts = acts_of(W)
        for i in range(ROWS):
            chunks = [code(row_bytes * i + c * W, W) for c in range(row_bytes // W)]
            terms, cmax = _terms(builder, bits, chunks, acts, prim.byte_shifts)
            lo, hi = halves(builder, prim.dot(builder, terms, _code_max(prim, bits, cmax)))
            parts.append(builder.add(lo, hi))
    else:  # w2: a row's pair is half a vector: two rows at once against the activations in both halves
        acts = [builder.shuffle_vector(a, a, ir.Constant(vec(I32, W), list(range(L)) * 2)) for a in acts_of(L)]
        for i in range(0, ROWS, 2):
            terms, cmax = _terms(builder, bits, [code(row_bytes * i, W)], acts, prim.byte_shifts)
            parts += list(halves(builder, prim.dot(builder, terms, cmax)))
    return prim.reduce4(builder, parts)


@intrinsic
def _block_pair(typingctx, tag, pc, k, pm, acts, q, dd, xss, acc):
    """acc[0:8] += isum * scale * d + offset * d * sum(xq) for block pair q of row group pair-index k,
    lanes [4 rows of block 2q | 4 rows of block 2q+1]."""
    if not isinstance(tag, KernelTagType):
        return None
    sig = types.none(tag, pc, k, pm, acts, q, dd, xss, acc)

    def codegen(context, builder, sig, args):
        ttag, pcty, _, pmty, aty, _, ddty, xsty, accty = sig.args
        _, pcv, kv, pmv, av, qv, ddv, xsv, accv = args
        prim, bits = PRIMITIVES[ttag.tier], ttag.bits
        row_bytes = PAIR_BYTES[bits]
        kv = context.cast(builder, kv, sig.args[2], types.intp)
        qv = context.cast(builder, qv, sig.args[5], types.intp)
        cofs = builder.mul(kv, ir.Constant(kv.type, ROWS * row_bytes))
        if ttag.ahead:
            prefetch(context, builder, pcty, pcv, off(builder, cofs, ttag.ahead), ROWS * row_bytes, ttag.locality)
        aofs = builder.mul(qv, ir.Constant(qv.type, 2 * SUPPORTED_BLOCK))
        isum = _group_isum(prim, bits, context, builder, pcty, pcv, cofs, aty, av, aofs)
        # the factors are loaded after the reduction: loaded before it, LLVM's schedule had one more
        # instruction in the AVX2 loops
        mofs = builder.mul(kv, ir.Constant(kv.type, 16))
        s = meta(context, builder, pmty, pmv, mofs)
        o = meta(context, builder, pmty, pmv, off(builder, mofs, 8))
        bias = code_bias(prim, bits)
        if bias:  # codes multiplied as c - bias: sum(c x) = sum((c - bias) x) + bias sum(x)
            o = builder.fadd(o, builder.fmul(s, ir.Constant(V8F, [float(bias)] * 8)))
        lanes = builder.mul(qv, ir.Constant(qv.type, 8))
        d = builder.load(ptr(context, builder, ddty, ddv, lanes, V8F), align=4)
        x = builder.load(ptr(context, builder, xsty, xsv, lanes, V8F), align=4)
        total = builder.fadd(builder.fmul(builder.sitofp(isum, V8F), builder.fmul(s, d)), builder.fmul(o, x))
        accp = ptr(context, builder, accty, accv, const(0, kv.type), V8F)
        builder.store(builder.fadd(builder.load(accp, align=4), total), accp, align=4)
        return context.get_dummy_value()

    return sig, codegen


# --- packed-4x2 on the shared skeleton (gemvbw.kernels.streams) ----------------------------------
# lay = (codes, block pairs, metadata, activation order, half a layout vector)
@njit(cache=True)
def _scratch_sections(npairs):
    """Where in the workspace's scratch (bytes) the 8 lanes of d and of d * sum(xq) per block pair start,
    after the pairs' permuted activations (two blocks of int8 each), and the scratch's size: the one
    formula for the kernel (which carves the scratch) and for Python (which allocates it)."""
    o_dd = npairs * 2 * SUPPORTED_BLOCK
    o_xss = o_dd + npairs * 8 * 4
    return o_dd, o_xss, o_xss + npairs * 8 * 4

def _is_packed(tag):
    return isinstance(tag, KernelTagType)


@overload(streams.group_rows)
def _group_rows(tag):
    if _is_packed(tag):
        return lambda tag: ROWS


@overload(streams.acc_lanes)
def _acc_lanes(tag):
    if _is_packed(tag):
        return lambda tag: 2 * ROWS  # [4 rows x block 2q | 4 rows x block 2q+1]


def _order(tag):
    prim = PRIMITIVES[tag.tier]
    return act_order(tag.bits, layout_bytes(prim), prim.compute_bytes(tag.bits) if hasattr(prim, "compute_bytes")
                     else None)


@overload(streams.layout)
def _layout(tag, copy, meta, K):
    if _is_packed(tag):
        order = _order(tag)  # a constant of the machine code
        half = layout_bytes(PRIMITIVES[tag.tier]) // 2
        return lambda tag, copy, meta, K: (copy, (K // SUPPORTED_BLOCK) // 2, meta, order, half)


@overload(streams.scratch_bytes)
def _scratch_bytes(tag, K):
    if _is_packed(tag):
        return lambda tag, K: _scratch_sections((K // SUPPORTED_BLOCK) // 2)[2]


@njit(cache=True)
def _permute(lay, xq, d, xs, scratch):
    npairs = lay[1]
    o_dd, o_xss, size = _scratch_sections(npairs)
    acts = scratch[:o_dd].view(np.int8)
    dd = scratch[o_dd:o_xss].view(np.float32)
    xss = scratch[o_xss:size].view(np.float32)
    permute_into(xq, d, xs, npairs, lay[3], lay[4], acts, dd, xss)
    return acts, dd, xss


@overload(streams.prepare)
def _prepare(tag, lay, xq, d, xs, scratch):
    if _is_packed(tag):
        return lambda tag, lay, xq, d, xs, scratch: _permute(lay, xq, d, xs, scratch)


# inlined by numba, not left to LLVM: on aarch64 without dotprod LLVM kept the neon tier's step (smull,
# sadalp) out of line: a call per block pair, with its error check, in the hot loop (benchmarks/asm_check.py)
@overload(streams.step, inline="always")
def _step(tag, lay, k, s, act, acc):
    if _is_packed(tag):
        return lambda tag, lay, k, s, act, acc: _block_pair(tag, lay[0], k, lay[2], act[0], s, act[1], act[2], acc)


@overload(streams.row_sum)
def _row_sum(tag, accs, k, i):
    if _is_packed(tag):
        return lambda tag, accs, k, i: accs[k, i] + accs[k, ROWS + i]


@overload(streams.first_leftover)
def _first_leftover(tag, lay):
    if _is_packed(tag):
        return lambda tag, lay: 2 * lay[1]  # an odd last full block, a shorter last block


STREAMS = 2  # groups of rows each thread reads at once (see gemvbw.kernels.streams)


@overload(streams.stream_count)
def _stream_count(tag):
    if _is_packed(tag):
        return lambda tag: STREAMS


@overload(streams.stream_turn)
def _stream_turn(tag):
    if _is_packed(tag):
        return lambda tag: 1  # the groups take turns step by step


# repacked copies, kept while their matrix lives, one per layout (a matrix's arrays are not changed once
# it is bound: the copy would go stale). Tiers with the same vector size and w8 storage share one.
_PACKED: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def kernel_args(tier: str, qm, x: np.ndarray, y: np.ndarray, chunks: int, **options) -> tuple:
    """The arguments of :func:`gemvbw.kernels.streams.gemv_streams` for ``qm`` on a tier (repacked now if not yet,
    untimed), with a new workspace. ``options``: :class:`KernelTag`'s ahead and locality."""
    if qm.block != SUPPORTED_BLOCK:
        raise ValueError(f"int8-activation kernels handle block {SUPPORTED_BLOCK} only")
    prim = PRIMITIVES[tier]
    V = layout_bytes(prim)
    layout = ("4x2", V, code_bias(prim, qm.bits))
    copies = _PACKED.setdefault(qm, {})
    if layout not in copies:  # verification, calibration and the timed run share one copy
        copies[layout] = pack(qm.codes, qm.scale_raw, qm.offset_raw, qm.bits, qm.K, tier)
    pc, pm, npairs = copies[layout]
    work = streams.new_work(qm.K, qm.scale_raw.shape[1], 2 * ROWS, chunks, _scratch_sections(npairs)[2], STREAMS)
    tag = KernelTag(tier, qm.bits, **options)
    return tag, pc, pm, work, qm.codes, qm.scale_raw, qm.offset_raw, x, qm.block, y, chunks


def bind(tier: str, qm, chunks: int, **options):
    """run(x, y) of the tier's kernel for ``qm`` (repacked now, untimed; block 64 only). Not reentrant: its
    calls share one workspace. ``options``: :class:`KernelTag`'s ahead and locality."""
    from gemvbw.kernels import typed_like

    return streams.bind(kernel_args(tier, qm, *typed_like(qm), chunks, **options))

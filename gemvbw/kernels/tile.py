"""The int8 kernels of the VNNI tiers on column tiles: R rows per vector, four activations broadcast.

A tile is R rows x one block of 64 weights, R = the tier's vector bytes / 4 (16 on 512-bit registers,
8 on 256-bit ones). Each 32-bit lane of a vector belongs to one row and holds four consecutive weights
of it, so ``vpdpbusd`` against four activations broadcast to every lane adds each row's four products
into that row's own lane (XNNPACK calls this layout "c4"; MNN's AVX-512 int8 kernels multiply the
same way). Against the row-chunk layout of :mod:`gemvbw.kernels.packed`:

- no horizontal reduction per block: a tile's sums are already R lanes, and its R scales and
  offsets apply with one multiply-add;
- the activations are read in their natural order (no permutation per call), four bytes broadcast
  per instruction, once for all R rows;
- the narrow widths are not shifted down: vpdpbusd sums into int32 without saturating, so field p
  of a byte is masked in place (a multiple of 2**(bits*p)) and its accumulator shifted back once
  per tile, exactly.

Byte t of row r's lane in vector s of a tile holds the codes of weights 4*(P*s + p) + t of the
block, field p (bits*p .. bits*p + bits - 1) for p < P = 8 / bits: w8 one code per byte, w4 two
nibbles, w2 four 2-bit fields. The bytes are exactly those of the packed matrix, reordered; w3 stays
on packed-4x2 (its high plane does not split into whole fields of a byte). Blocks shorter than 64
(the last one when 64 does not divide K) and the last M % R rows are read as stored, by the width's
f32 loop, as in packed-4x2.

Measured on Zen 4 (AVX-512 VNNI), 4096x14336, cold, interleaved in one process with packed-4x2 and a plain
read of the same bytes: 1 thread w8 1.27x, w4 1.13-1.27x, w2 1.19x faster than packed-4x2-avx512vnni-zmm;
2 threads w4 98-100 % of the read against 90-92 %, w2 93-95 % against 81-86 %, w8 level. The 512-bit tile
(16 rows) is ahead of the 256-bit one (8 rows) at 2 threads on every width. Hot-loop instructions per weight:
0.048 / 0.058 / 0.055 (w8 / w4 / w2) against 0.082 / 0.106 / 0.091.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import NativeValue, intrinsic, models, overload, register_model, typeof_impl, unbox

from gemvbw.kernels import FINGERPRINT
from gemvbw.kernels._common import FASTMATH, load_meta, row_chunks
from gemvbw.kernels.activations import SUPPORTED_BLOCK, quantize_activations
from gemvbw.kernels.isa import PRIMITIVES
from gemvbw.kernels.isa.common import F16, F32, I8, I16, I32, const, load, off, prefetch, ptr, splat, vec
from gemvbw.kernels.packed import _leftover_dot, _row_ref

WIDTHS = (8, 4, 2)
ACCUMULATORS = 4  # independent vpdpbusd chains per tile: one chain would wait on its latency
# bytes ahead in the tile stream to prefetch, per width (0: none). Measured on Zen 4, 4096x14336, cold, interleaved
# against ahead=0: at 2 threads every distance from 512 B to 4 KiB was slower (w4 98 -> 80-81 % of a plain read,
# w2 93 -> 81-90 %); at 1 thread w2 gained (87 -> 90-96 %) and w4 lost. So none: a distance chosen by thread
# count was not built.
PREFETCH_AHEAD = {8: 0, 4: 0, 2: 0}


def tile_tiers() -> list[str]:
    """The tiers with a column-tile kernel: those whose dot product adds into int32 lanes unsaturated."""
    from gemvbw.tiers import TIERS

    return [t.name for t in TIERS if t.tile_rows]


def tile_rows(tier: str) -> int:
    from gemvbw.tiers import by_name

    return by_name(tier).tile_rows


def tile_bytes(bits: int, rows: int) -> int:
    return rows * SUPPORTED_BLOCK * bits // 8


# --- the compile-time tag -------------------------------------------------------------------------

class TileTag:
    """Which tier and width a call of :func:`gemv_tiles` compiles for, and how far ahead it prefetches (its numba
    type carries all three: a benchmark can compare distances in one process)."""

    def __init__(self, tier: str, bits: int, ahead: int | None = None):
        if tier not in tile_tiers() or bits not in WIDTHS:
            raise ValueError(f"no column-tile kernel for tier {tier!r}, w{bits}")
        self.tier, self.bits = tier, bits
        self.ahead = PREFETCH_AHEAD[bits] if ahead is None else ahead


class TileTagType(types.Type):
    def __init__(self, tier: str, bits: int, ahead: int):
        self.tier, self.bits, self.ahead = tier, bits, ahead
        self.rows = tile_rows(tier)
        super().__init__(name=f"TileTag({tier},w{bits},ahead {ahead},{FINGERPRINT})")


@typeof_impl.register(TileTag)
def _typeof_tag(val, c):
    return TileTagType(val.tier, val.bits, val.ahead)


register_model(TileTagType)(models.OpaqueModel)


@unbox(TileTagType)
def _unbox_tag(typ, obj, c):
    return NativeValue(c.context.get_dummy_value())  # the type is the value


def _rows(tag):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(_rows)
def _rows_impl(tag):
    rows = tag.rows
    return lambda tag: rows


# --- layout ---------------------------------------------------------------------------------------

@njit(cache=True)
def _stored_code(row, b, k, bits):
    """Code k of block b of a row as the packed matrix stores it (see gemvbw.quant)."""
    if bits == 8:
        return np.int64(row[b * 64 + k])
    if bits == 4:  # byte j holds codes j and j + 32
        v = np.int64(row[b * 32 + k % 32])
        return v & 15 if k < 32 else v >> 4
    return (np.int64(row[b * 16 + k % 16]) >> (2 * (k // 16))) & 3  # w2: byte j holds j + 16p at bits 2p


@njit(parallel=True, cache=True)
def repack(codes, scale, offset, bits, rows, nfull, pc, pm):
    """Fill pc and pm with the tiles of the first nfull blocks, tile (group g, block b) at g * nfull + b:
    its codes (vector s, lane r, byte t: the P fields of weights 4*(P*s + p) + t), then its rows' scales
    and offsets [rows x scale | rows x offset] in their stored type."""
    groups = codes.shape[0] // rows
    P = 8 // bits
    size = rows * 64 * bits // 8
    nvec = 64 // (4 * P)
    for g in prange(groups):
        for b in range(nfull):
            t = g * nfull + b
            for s in range(nvec):
                for r in range(rows):
                    row = codes[g * rows + r]
                    for j in range(4):
                        v = np.int64(0)
                        for p in range(P):
                            v |= _stored_code(row, b, 4 * (P * s + p) + j, bits) << (bits * p)
                        pc[t * size + (s * rows + r) * 4 + j] = v
            for r in range(rows):
                pm[t * 2 * rows + r] = scale[g * rows + r, b]
                pm[t * 2 * rows + rows + r] = offset[g * rows + r, b]


def pack(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, K: int, rows: int):
    """The tiles (codes, metadata, full blocks) of a matrix: done once, when a kernel is bound."""
    nfull = K // SUPPORTED_BLOCK
    groups = codes.shape[0] // rows
    # numpy's allocation, for its transparent huge pages (see gemvbw.kernels.packed.pack)
    pc = np.empty(groups * nfull * tile_bytes(bits, rows), np.uint8)
    pm = np.empty(groups * nfull * 2 * rows, scale.dtype)
    repack(codes, scale, offset, bits, rows, nfull, pc, pm)
    return pc, pm, nfull


# --- one tile -------------------------------------------------------------------------------------

def _broadcast4(context, builder, arrty, arr, offset, nbytes: int):
    """Four int8 activations at arr[offset] as one i32 in every lane, as <nbytes x i8> (an embedded
    broadcast of vpdpbusd's memory operand, where LLVM folds it)."""
    word = builder.load(ptr(context, builder, arrty, arr, offset, I32), align=1)
    lanes = vec(I32, nbytes // 4)
    one = builder.insert_element(ir.Constant(lanes, ir.Undefined), word, const(0))
    return builder.bitcast(builder.shuffle_vector(one, one, ir.Constant(lanes, [0] * lanes.count)), vec(I8, nbytes))


def _meta(context, builder, mty, meta, mofs, rows: int):
    """rows metadata values as <rows x float> (fp16 bits through fpext, or float32 as they are)."""
    if mty.dtype == types.uint16:
        raw = load(context, builder, mty, meta, mofs, vec(I16, rows))
        return builder.fpext(builder.bitcast(raw, vec(F16, rows)), vec(F32, rows))
    return load(context, builder, mty, meta, mofs, vec(F32, rows))


def _scalar(context, builder, arrty, arr, index, rows: int):
    v = builder.load(ptr(context, builder, arrty, arr, index, F32), align=4)
    lanes = vec(F32, rows)
    one = builder.insert_element(ir.Constant(lanes, ir.Undefined), v, const(0))
    return builder.shuffle_vector(one, one, ir.Constant(vec(I32, rows), [0] * rows))


@intrinsic
def _tile(typingctx, tag, pc, t, pm, xq, b, d, xs, acc):
    """acc[0:R] += isum * scale * d[b] + offset * xs[b] for tile t (its rows, block b)."""
    if not isinstance(tag, TileTagType):
        return None
    sig = types.none(tag, pc, t, pm, xq, b, d, xs, acc)

    def codegen(context, builder, sig, args):
        ttag, pcty, tty, pmty, xqty, bty, dty, xsty, accty = sig.args
        _, pcv, tv, pmv, xqv, bv, dv, xsv, accv = args
        prim, bits, rows = PRIMITIVES[ttag.tier], ttag.bits, ttag.rows
        width = 4 * rows
        tv = context.cast(builder, tv, tty, types.intp)
        bv = context.cast(builder, bv, bty, types.intp)
        cofs = builder.mul(tv, ir.Constant(tv.type, tile_bytes(bits, rows)))
        aofs = builder.mul(bv, ir.Constant(bv.type, SUPPORTED_BLOCK))
        if ttag.ahead:
            prefetch(context, builder, pcty, pcv, off(builder, cofs, ttag.ahead), tile_bytes(bits, rows))

        P = 8 // bits
        nvec = SUPPORTED_BLOCK // (4 * P)
        per_field = ACCUMULATORS // P
        chains: list[list] = [[] for _ in range(ACCUMULATORS)]
        for s in range(nvec):
            v = load(context, builder, pcty, pcv, off(builder, cofs, s * width), vec(I8, width))
            for p in range(P):
                field = v if P == 1 else builder.and_(v, splat(v.type, ((1 << bits) - 1) << (bits * p)))
                x = _broadcast4(context, builder, xqty, xqv, off(builder, aofs, 4 * (P * s + p)), width)
                chains[p * per_field + s % per_field].append((field, x))
        isum = None
        for i, terms in enumerate(chains):
            part = prim.dot(builder, terms, None)
            shift = bits * (i // per_field)  # field p was multiplied in place, as 2**(bits*p) times its code
            if shift:
                part = builder.ashr(part, splat(part.type, shift))
            isum = part if isum is None else builder.add(isum, part)

        mofs = builder.mul(tv, ir.Constant(tv.type, 2 * rows))
        s = _meta(context, builder, pmty, pmv, mofs, rows)
        o = _meta(context, builder, pmty, pmv, off(builder, mofs, rows), rows)
        dd = _scalar(context, builder, dty, dv, bv, rows)
        xsum = _scalar(context, builder, xsty, xsv, bv, rows)
        lanes = vec(F32, rows)
        total = builder.fadd(builder.fmul(builder.sitofp(isum, lanes), builder.fmul(s, dd)), builder.fmul(o, xsum))
        accp = ptr(context, builder, accty, accv, const(0, tv.type), lanes)
        builder.store(builder.fadd(builder.load(accp, align=4), total), accp, align=4)
        return context.get_dummy_value()

    return sig, codegen


# --- the skeleton ---------------------------------------------------------------------------------

@njit(cache=True, fastmath=FASTMATH)
def _finish(tag, acc, r0, nfull, codes, scale, offset, xdq, xs, block, y):
    """A group's R sums into y, plus the short last block if any."""
    nb = scale.shape[1]
    for i in range(acc.shape[0]):
        a = acc[i]
        for b in range(nfull, nb):
            a += load_meta(scale, r0 + i, b) * _leftover_dot(tag, codes[r0 + i], xdq, b, block) \
                + load_meta(offset, r0 + i, b) * xs[b]
        y[r0 + i] = a


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_tiles(tag, pc, pm, nfull, codes, scale, offset, x, block, y, chunks):
    """int8 activations on column tiles: R rows per vector, a block of 64 per intrinsic call, four
    activations broadcast per vpdpbusd; each thread streams two groups of R rows at once (one from each
    half of its chunk), as packed-4x2 does. Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    R = _rows(tag)
    xq, d, xs, xdq = quantize_activations(x, block, nb)
    groups = M // R
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(R, np.float32)
        acc2 = np.zeros(R, np.float32)
        lo, hi = c * per, min(groups, (c + 1) * per)
        h = (hi - lo + 1) // 2  # the second stream starts half-way through the chunk
        for j in range(h):
            g, g2 = lo + j, lo + h + j
            acc[:] = 0
            if g2 < hi:
                acc2[:] = 0
                for b in range(nfull):
                    _tile(tag, pc, g * nfull + b, pm, xq, b, d, xs, acc)
                    _tile(tag, pc, g2 * nfull + b, pm, xq, b, d, xs, acc2)
                _finish(tag, acc2, g2 * R, nfull, codes, scale, offset, xdq, xs, block, y)
            else:  # an odd number of groups: the last one alone
                for b in range(nfull):
                    _tile(tag, pc, g * nfull + b, pm, xq, b, d, xs, acc)
            _finish(tag, acc, g * R, nfull, codes, scale, offset, xdq, xs, block, y)
    for r in range(groups * R, M):
        y[r] = _row_ref(tag, codes, scale, offset, xdq, xs, block, r)


def bind(tier: str, qm, chunks: int, ahead: int | None = None):
    """run(x, y) of the tier's column-tile kernel for ``qm`` (repacked now, untimed; block 64 only)."""
    from gemvbw.kernels import check_xy, compiled, typed_like
    from gemvbw.kernels.packed import _PACKED

    if qm.block != SUPPORTED_BLOCK:
        raise ValueError(f"int8-activation kernels handle block {SUPPORTED_BLOCK} only")
    rows = tile_rows(tier)
    copies = _PACKED.setdefault(qm, {})
    layout = ("c4", rows)
    if layout not in copies:
        copies[layout] = pack(qm.codes, qm.scale_raw, qm.offset_raw, qm.bits, qm.K, rows)
    pc, pm, nfull = copies[layout]
    x0, y0 = typed_like(qm)
    head = (TileTag(tier, qm.bits, ahead), pc, pm, nfull, qm.codes, qm.scale_raw, qm.offset_raw)
    call = compiled(gemv_tiles, *head, x0, qm.block, y0, chunks)
    block = qm.block

    def run(x: np.ndarray, y: np.ndarray) -> None:
        check_xy(x, y)
        call(*head, x, block, y, chunks)

    return run

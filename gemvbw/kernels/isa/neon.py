"""aarch64 NEON primitives of the int8 kernels (128-bit vectors).

Both NEON dot products multiply signed by signed 8-bit values, so w8 codes are stored as
c - 128 and multiplied directly (the 128 * sum(x) left out is added back through the offset),
and w3's high bit can enter as a -1/0 term of its own (see gemvbw.kernels.packed).

A vector of a block pair holds 8 bytes of block 2q then 8 of block 2q+1, so int32 lanes 0-1
of a row's partial sums belong to block 2q and lanes 2-3 to block 2q+1.
"""

from __future__ import annotations

from llvmlite import ir

from gemvbw.kernels.isa.common import I8, I16, I32, fn, halves, vec

V16I8, V8I8, V8I16, V4I32 = vec(I8, 16), vec(I8, 8), vec(I16, 8), vec(I32, 4)
INT16_MAX = 32767
ACT_MAX = 127


def _reduce4(builder, parts):
    """Four rows' <4 x i32> partials ([b0 b0 b1 b1] each) -> [4 rows x block 2q | 4 rows x block 2q+1]:
    addp(p0, p1) = [r0b0 r0b1 r1b0 r1b1], addp(p2, p3) likewise, then the even and odd lanes (uzp1, uzp2)."""
    addp = fn(builder, "llvm.aarch64.neon.addp.v4i32", V4I32, [V4I32, V4I32])
    a = builder.call(addp, [parts[0], parts[1]])
    b = builder.call(addp, [parts[2], parts[3]])
    return builder.shuffle_vector(a, b, ir.Constant(vec(I32, 8), [0, 2, 4, 6, 1, 3, 5, 7]))


# Prefetch distances: not measured on ARM hardware (emulation cannot time them); the x86 figures, whose
# reason (a byte holds two to four weights, so the stream runs ahead of the loads) holds here too.
_PREFETCH = {8: 0, 4: 2048, 3: 2048, 2: 2048}


def _insert_high(builder, field, high):
    """A w3 code from its 2-bit field (whatever lies above it) and a byte to put above it: sli #2 keeps the
    field's two low bits and shifts the byte in above them, one instruction."""
    sli = fn(builder, "llvm.aarch64.neon.vsli.v16i8", V16I8, [V16I8, V16I8, I32])
    return builder.call(sli, [field, high, ir.Constant(I32, 2)])


class NeonDotprod:
    """NEON with the dot-product extension (ARMv8.2 asimddp): sdot adds four int8 products into each int32 lane."""

    tier = "neon-dotprod"
    vector_bytes = 16
    w8_codes = "s8"
    signed_codes = True
    byte_shifts = True  # ushr on .16b
    insert_high = staticmethod(_insert_high)
    prefetch_ahead = _PREFETCH
    prefetch_locality = 0  # prfm pldl1strm

    def dot(self, builder, terms, code_max):
        sdot = fn(builder, "llvm.aarch64.neon.sdot.v4i32.v16i8", V4I32, [V4I32, V16I8, V16I8])
        acc = ir.Constant(V4I32, [0] * 4)
        for c, x in terms:
            acc = builder.call(sdot, [acc, c, x])
        return acc

    def reduce4(self, builder, parts):
        return _reduce4(builder, parts)


class Neon:
    """Baseline NEON (Cortex-A53/A73 class, no dotprod): smull/smlal multiply 8 int8 pairs into int16
    lanes (several products summed in int16 while they cannot overflow), addp pairs them, sadalp widens
    into int32."""

    tier = "neon"
    vector_bytes = 16
    w8_codes = "s8"
    signed_codes = True
    byte_shifts = True  # ushr on .16b
    insert_high = staticmethod(_insert_high)
    prefetch_ahead = _PREFETCH
    prefetch_locality = 0  # prfm pldl1strm

    def dot(self, builder, terms, code_max):
        smull = fn(builder, "llvm.aarch64.neon.smull.v8i16", V8I16, [V8I8, V8I8])
        addp = fn(builder, "llvm.aarch64.neon.addp.v8i16", V8I16, [V8I16, V8I16])
        saddlp = fn(builder, "llvm.aarch64.neon.saddlp.v4i32.v8i16", V4I32, [V8I16])
        # products of up to 128 * 127 (w8 as c - 128); after addp each int16 lane holds 2n products
        per = max(1, INT16_MAX // (2 * (code_max or 128) * ACT_MAX))
        acc = None
        for i in range(0, len(terms), per):
            lo = hi = None
            for c, x in terms[i:i + per]:
                (clo, chi), (xlo, xhi) = halves(builder, c), halves(builder, x)
                plo, phi = builder.call(smull, [clo, xlo]), builder.call(smull, [chi, xhi])  # smull, smull2
                lo = plo if lo is None else builder.add(lo, plo)  # smlal
                hi = phi if hi is None else builder.add(hi, phi)  # smlal2
            # [pairs of block 2q | pairs of block 2q+1] -> int32 lanes [b0 b0 b1 b1]
            s32 = builder.call(saddlp, [builder.call(addp, [lo, hi])])
            acc = s32 if acc is None else builder.add(acc, s32)  # sadalp
        return acc

    def reduce4(self, builder, parts):
        return _reduce4(builder, parts)

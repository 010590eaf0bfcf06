"""x86 primitives of the int8 kernels.

Both dot-product instructions here multiply unsigned 8-bit codes by signed 8-bit activations.
vpmaddubsw (AVX2) saturates its int16 pair sums, so w8 codes, which use all 8 bits, are stored
as c - 128 and multiplied through llama.cpp's sign trick: |c - 128| as the unsigned operand, x
with the sign of c - 128 moved onto it (vpsignb). vpdpbusd (VNNI) adds four products straight
into int32 lanes without saturating, so it takes w8 codes as they are.
"""

from __future__ import annotations

from gemvbw.kernels.isa.common import I1, I8, I16, I32, V8I32, const, fn, splat, vec

V32I8 = vec(I8, 32)
INT16_MAX = 32767
ACT_MAX = 127  # |x| of an int8 activation (x / d with d = max|x| / 127)
# vpmaddubsw and vpmaddwd by the bytes of a vector: AVX2's on 256-bit registers, AVX-512BW's on 512-bit ones
_MADD = {32: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
         64: ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512")}


def _signed_like(builder, x, c):
    """x with the sign of c in each byte (where c is 0, its |c| = 0 makes the product 0 whatever this is):
    AVX2's vpsignb; AVX-512 has no vpsignb, so there a negation under the mask of c's sign bits."""
    n = x.type.count
    if n == 32:
        return builder.call(fn(builder, "llvm.x86.avx2.psign.b", V32I8, [V32I8, V32I8]), [x, c])
    negative = builder.icmp_signed("<", c, splat(c.type, 0))
    return builder.select(negative, builder.sub(splat(x.type, 0), x), x)


class Avx2:
    """AVX2: vpmaddubsw (u8 x s8 pairs into int16, saturating) then vpmaddwd by ones (int16 pairs into int32)."""

    tier = "avx2"
    vector_bytes = 32
    w8_codes = "s8"  # stored as c - 128, for the sign trick
    signed_codes = False  # the codes operand is unsigned: no -1/0 terms
    byte_shifts = False  # x86 shifts 16-bit lanes at the narrowest
    # bytes ahead in the codes stream to prefetch, per width (0: none). Measured on a Zen 3, 4096x14336,
    # 2 threads, cold, against prefetching the lines being loaded: w4 1.12-1.16x, w3 1.09-1.27x, w2 1.13-1.25x,
    # flat from 1 to 8 KiB; w8 lost (0.87-0.96x).
    prefetch_ahead = {8: 0, 4: 2048, 3: 2048, 2: 2048}
    # the hint: prefetcht0. The distances above were measured with prefetchnta on that Zen 3. On an Intel Xeon
    # (Sapphire Rapids class, 2 GHz; benchmarks/tile_variants.py --format 4x2 --tier avx2, 4096x14336 cold,
    # 2026-12-03, % of the fastest read) prefetchnta was slower than no prefetch at all and prefetcht0 2 KiB
    # ahead the fastest: 1 thread w4 65 -> 99 %, w3 38 -> 78, w2 40 -> 79 (no prefetch 92/56/76); 2 threads
    # 53 -> 89, 33 -> 59, 41 -> 84 (no prefetch 78/47/76). prefetcht0 on a Zen is not measured.
    prefetch_locality = 3

    def dot(self, builder, terms, code_max):
        """<n/4 x i32>: the products of (codes, activations) <n x i8> pairs (n = 32, or 64 on AVX-512BW), each
        lane the sum of four neighbouring bytes' products. code_max None: s8 codes (w8, c - 128), through the
        sign trick."""
        n = terms[0][0].type.count
        v8, v16, v32 = vec(I8, n), vec(I16, n // 2), vec(I32, n // 4)
        ubsw_name, wd_name = _MADD[n]
        ubsw = fn(builder, ubsw_name, v16, [v8, v8])
        wd = fn(builder, wd_name, v32, [v16, v16])
        ones = splat(v16, 1)
        if code_max is None:
            absb = fn(builder, f"llvm.abs.v{n}i8", v8, [v8, I1])
            # a pair sum reaches 2 * 128 * 127 = 32512: each vpmaddubsw is widened on its own
            groups = [[(builder.call(absb, [c, const(0, I1)]), _signed_like(builder, x, c))] for c, x in terms]
        else:
            # int16 sums of several vpmaddubsw results stay exact while they cannot exceed 32767
            per = max(1, INT16_MAX // (2 * code_max * ACT_MAX))
            groups = [terms[i:i + per] for i in range(0, len(terms), per)]
        acc = None
        for group in groups:
            s16 = None
            for c, x in group:
                p = builder.call(ubsw, [c, x])
                s16 = p if s16 is None else builder.add(s16, p)
            s32 = builder.call(wd, [s16, ones])
            acc = s32 if acc is None else builder.add(acc, s32)
        return acc

    def reduce4(self, builder, parts):
        """Four rows' <8 x i32> partials (lanes 0-3 block 2q, 4-7 block 2q+1) -> [4 rows x block 2q |
        4 rows x block 2q+1], by one vphaddd tree: hadd(hadd(p0, p1), hadd(p2, p3))."""
        hadd = fn(builder, "llvm.x86.avx2.phadd.d", V8I32, [V8I32, V8I32])
        return builder.call(hadd, [builder.call(hadd, [parts[0], parts[1]]), builder.call(hadd, [parts[2], parts[3]])])


class Vnni:
    """AVX-512 VNNI on 256-bit registers (EVEX vpdpbusd; needs AVX512VL): four u8 x s8 products added into
    each int32 lane, one instruction where AVX2 needs vpmaddubsw, vpmaddwd and vpaddd, and no saturation,
    so w8 codes need no sign trick."""

    tier = "avx512vnni"
    vector_bytes = 32
    w8_codes = "u8"
    signed_codes = False
    byte_shifts = False
    prefetch_ahead = Avx2.prefetch_ahead
    prefetch_locality = Avx2.prefetch_locality

    def dot(self, builder, terms, code_max):
        lanes = terms[0][0].type.count // 4  # 8 on 256-bit registers, 16 on 512-bit ones
        vt = vec(I32, lanes)
        dpbusd = fn(builder, f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", vt, [vt, vt, vt])
        acc = splat(vt, 0)
        for c, x in terms:  # the intrinsic takes the bytes as i32 lanes
            acc = builder.call(dpbusd, [acc, builder.bitcast(c, vt), builder.bitcast(x, vt)])
        return acc

    reduce4 = Avx2.reduce4


class AvxVnni(Vnni):
    """AVX-VNNI (Alder Lake and later clients, Zen 5): the same vpdpbusd, VEX-encoded, on CPUs without AVX-512.
    LLVM picks the encoding from the target: this tier is Vnni's code where only avxvnni is present."""

    tier = "avxvnni"


class Vnni512(Vnni):
    """AVX-512 VNNI on 512-bit registers over the 256-bit layout: two of its vectors per instruction (w8, w4:
    two chunks of a row, their halves folded after; w2: two rows at once). w3, whose row pair is 48 bytes,
    stays on 256-bit registers. On Zen 4 a 512-bit operation issues as two 256-bit halves, so it saves
    instructions, not ALU work; on Intel's server cores it does both."""

    tier = "avx512vnni-zmm"
    layout_bytes = 32
    vector_bytes = 32

    @staticmethod
    def compute_bytes(bits: int) -> int:
        return 32 if bits == 3 else 64


class Avx512Bw(Avx2):
    """AVX-512BW without VNNI (Skylake-X and -SP): AVX2's vpmaddubsw + vpmaddwd, on 512-bit registers over the
    256-bit layout, two of its vectors per instruction as Vnni512 does (w3, whose row pair is 48 bytes, on 256-bit
    registers). The same int16 saturation as AVX2's: w8 codes stored as c - 128 and multiplied through the sign
    trick, and no column tiles. On Skylake-SP a 512-bit vpmaddubsw takes the fused ports 0+1 or port 5, so it does
    the work of two 256-bit ones where the core has the second 512-bit unit (not measured: no such CPU here)."""

    tier = "avx512bw"
    layout_bytes = 32
    vector_bytes = 32
    compute_bytes = staticmethod(Vnni512.compute_bytes)


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
- the narrow widths are not shifted down: vpdpbusd sums into int32 without saturating, so a field
  of a byte is masked in place (a multiple of 2**pos, pos its lowest bit) and its accumulator shifted
  back once per tile, exactly.

A tile stores its codes in 2 * bits vectors of fields (:func:`fields`): byte t of row r's lane in
vector s holds, in each field, some bits of weight 4q + t of the block for that field's group q of four
weights. w8 one code per byte, w4 two nibbles, w2 four 2-bit fields (group P*s + p in field p, P = 8 / bits);
w3 two whole 3-bit codes per byte (bits 0-2 and 3-5) and, in the two bits left, a quarter of the groups
split: their low two bits in one byte, their high bit in another, each half its own field, shifted back to
its place in the code. 20 dot products per tile for w3, where storing its low two bits and its high bit as
two bit planes took 32 (16 + 16; 0.126 hot-loop instructions per weight against 0.077 now, 16c4 on an Intel
Xeon). w2's plain tile is stacked (:data:`W2_STACK`): its four fields hold four rows, a tile 4R rows by 64
weights in 16 vectors, one per group, and each row set's sum comes from masks of 2, 4, 6 and 8 low bits by
differences. The bytes are exactly those of the packed matrix, reordered. Blocks shorter than 64
(the last one when 64 does not divide K) and the last M % R rows (M % 4R for stacked w2) are read as stored, by the width's
f32 loop, on the skeleton packed-4x2 runs on (gemvbw.kernels.streams: several streams of row groups per
thread, as many as the CPU was measured to want, :func:`plain_streams`).

Measured on Zen 4 (AVX-512 VNNI), 4096x14336, cold, interleaved in one process with packed-4x2 and a plain
read of the same bytes: 1 thread w8 1.27x, w4 1.13-1.27x, w2 1.19x faster than packed-4x2-avx512vnni-zmm;
2 threads w4 98-100 % of the read against 90-92 %, w2 93-95 % against 81-86 %, w8 level. The 512-bit tile
(16 rows) is ahead of the 256-bit one (8 rows) at 2 threads on every width. Hot-loop instructions per weight:
0.048 / 0.058 / 0.055 (w8 / w4 / w2) against 0.082 / 0.106 / 0.091.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import NativeValue, intrinsic, models, overload, register_model, typeof_impl, unbox

from gemvbw.kernels import FINGERPRINT, streams
from gemvbw.kernels._common import aligned_empty
from gemvbw.kernels.activations import SUPPORTED_BLOCK
from gemvbw.kernels.isa import PRIMITIVES
from gemvbw.kernels.isa.common import F32, HINTS, I8, I32, broadcast, const, load, meta, off, prefetch, ptr, splat, vec

WIDTHS = (8, 4, 3, 2)
ACCUMULATORS = 4  # independent vpdpbusd chains per tile: one chain would wait on its latency
# bytes ahead in the tile stream to prefetch (one line per line of the tile, with the hint PREFETCH_LOCALITY),
# per width, 0: none. Whether it pays depends on the CPU, so each tile tier has two variants and --kernel auto
# measures both: the plain one (no prefetch) and "-prfm" (PRFM_AHEAD). Measured, 4096x14336, cold, each variant
# interleaved in one process against a plain read of the same bytes (16c4-zmm, medians of 9-11 rounds, % of
# the fastest read; benchmarks/tile_variants.py):
# - Zen 4, prefetchnta: at 2 threads every distance from 512 B to 4 KiB was slower (w4 98 -> 80-81 %, w2 93 ->
#   81-90 %); at 1 thread it helped w2 (87 -> 90-96 %) and slowed w4.
# - Zen 5 (2026-12-02; three runs at 1 thread, two at 2), prefetchnta 4 KiB ahead: 1 thread w3 77-81 -> 93-97 %,
#   w2 76-80 -> 84-92 %, w4 mixed (90 -> 84, 89 -> 89, 64 -> 84 %); 2 threads w4 74-76 -> 89-95 %, w3 42-55 ->
#   91-97 %, w2 77-79 -> 88-90 %. 8 and 16 KiB, and prefetcht0, did about as well. w8 lost (1 thread 97-107 ->
#   92-102 %, 2 threads 90-100 -> 82-95 %).
# - Intel Xeon, Sapphire Rapids class (2026-12-03, one run at each thread count), 4 KiB ahead: prefetchnta lost
#   everywhere (1 thread w8 104 -> 69 %, w4 99 -> 57, w3 74 -> 34, w2 64 -> 36; 2 threads 95/78/75/71 ->
#   66/55/38/38 %) while prefetcht0 won everywhere (1 thread -> 111/127/93/92 %, 2 threads -> 113/100/92/100 %;
#   prefetcht1 close behind, 2 and 8 KiB about the same). So the twins use prefetcht0, and w8 has one too.
# - Zen 5 (2026-12-04, 2 KiB against 4 KiB ahead, prefetcht0): at 1 thread, three readings (one of 9 rounds, two of
#   15), w4 89/92/92 vs 93/92/92 %, w3 86/85/85 vs 89/91/92, w2 82/77/81 vs 89/90/93, w8 (15 rounds) 99/99 vs 92/94;
#   1 and 8 KiB were behind (w4/w3/w2 84/79/72 and 88/86/86 % against 93/89/89). At 2 threads the answer follows the
#   bandwidth the host gives that minute (two reads at once: 40-50 GB/s most minutes, 56-83 in others). Where the
#   read was slow, the two were within 3 points, 2 KiB up to 5 ahead (four readings before 02:00 UTC: w4
#   101/103/95/103 vs 96/100/92/100 %, w3 99/98/92/101 vs 95/99/93/95, w2 102/96/98/105 vs 98/97/95/104; at
#   11:42-11:48 UTC, 61 rounds each, w4 100/97/97 vs 99/98/96, w3 100/98/99 vs 98/101/98, w2 99 vs 98); where it was
#   fast (56-68 GB/s, 11:40-11:48 UTC, 61 rounds each) 4 KiB was ahead in ten readings of eleven, by 4-11 points (w4
#   85/95/86 vs 92/93/91 %, w3 88/86/90 vs 95/97/97, w2 90/92/87/86/91 vs 98/98/96/93/95), and 6 KiB about level with
#   4. There each core has the bandwidth one thread has alone, and wants the distance one thread wants. So the twins
#   prefetch PRFM_AHEAD at any thread count; w8's, whose demand loads are denser, 2 KiB.
PREFETCH_AHEAD = {8: 0, 4: 0, 3: 0, 2: 0}
PRFM_AHEAD = {8: 2048, 4: 4096, 3: 4096, 2: 4096}
# the twins' distance per CPU where it differs from PRFM_AHEAD. On Intel w3's and w2's twins prefetch 2 KiB ahead:
# on a 2-vCPU Xeon VM (AVX-512 VNNI, AMX; 2026-12-06, tile_variants.py, 4096x14336, 512 MiB flush, 4 groups, % of
# the fastest read, 2 KiB against 4 KiB, 9-11 rounds each):
# - w2, eight readings: 2 threads 95 vs 91 (8c4-avx512vnni), 102 vs 102 (8c4-avxvnni), 93 vs 86, 91 vs 91, 89 vs 82
#   (16c4-zmm); 1 thread 102 vs 98 (8c4-avxvnni), 88 vs 83, 101 vs 96 (16c4-zmm): ahead or level every time.
# - w3, four readings at 02:55 UTC mixed (86 vs 84, 86 vs 89, 95 vs 94, 92 vs 91); then twelve at 07:05-07:20 UTC,
#   8c4-avx512vnni and 16c4-zmm alternating, 2 KiB ahead in all twelve, latency 1-4 % lower: 2 threads 98 vs 97,
#   92 vs 90, 99 vs 96, 92 vs 91, 86 vs 83, 89 vs 87; 1 thread 90 vs 87, 91 vs 90, 91 vs 89, 93 vs 92, 93 vs 90,
#   90 vs 87. (A twin reading one group per thread, like the fastest plain read here, was 6-25 points behind.)
# On Zen 5 4 KiB was ahead for w3 and w2 at 1 thread (w2 89-93 % against 77-82), so the distance is the CPU's.
PRFM_AHEAD_BY_CPU = {"GenuineIntel": {**PRFM_AHEAD, 3: 2048, 2: 2048}}


# groups of rows each thread reads at once (see gemvbw.kernels.streams), by default and on most CPUs. 3 and 4 were
# tried on an Intel Xeon (2 GHz, AVX-512 VNNI) where a plain read gains 3-23 % from 4-8 streams
# (benchmarks/tile_variants.py, 16c4-zmm, 4096x14336 cold, 2026-12-02, 4 against 2: per width from 8 % slower to
# 50 % faster, the sign of each width changing between runs on that noisy host). No reading either way: kept at 2.
STREAMS = 2
# groups per thread of the plain tile (no prefetch), per CPU: 2 (STREAMS), except on AMD family 25, where every
# width reads 4. Family 25 is Zen 3 and Zen 4, and only Zen 4 has a VNNI tier, so among tile CPUs the key means
# "Zen 4". Measured on Zen 4 (EPYC, family 25 model 17), where a plain read is fastest with 8 streams per thread
# (benchmarks/tile_variants.py, 4096x14336 cold, interleaved with reads of the same bytes, medians of 9 rounds,
# % of the fastest read, 2 groups -> 4):
# - 16c4-zmm, 1 thread, five readings (2026-12-04, three at 23:00 UTC: every width 8-20 % faster, 64-96 % ->
#   73-112 %; at 23:44 and 23:48): w8 82 -> 92, 73 -> 80 %; w4 75 -> 96, 72 -> 94; w3 88 -> 101, 64 -> 79;
#   w2 71 -> 86, 57 -> 62. 2 threads, three readings: w8 1277 -> 1070 us, 62 -> 71 %, level; w4 850 -> 798 us,
#   82 -> 92 %, 86 -> 88; w3 level, 79 -> 91, 58 -> 70; w2 -5 %, 67 -> 79, 54 -> 64.
# - 8c4 (256-bit), two readings (23:47, 23:49): 1 thread w8 87 -> 97, 84 -> 93 %; w4 83 -> 91, 80 -> 86; w3
#   57 -> 60, 69 -> 71; w2 50 -> 46, 69 -> 64 (behind; 16c4's w2 with 4 is faster than either); 2 threads w8
#   level twice, w4 80 -> 88 twice, w3 53 -> 55, 91 -> 96, w2 66 -> 70, 73 -> 78.
# - 6 and 8 groups (16c4-zmm; 8 in two readings, 2026-12-04 23:46 and 2026-12-05 01:43 UTC) were behind 4 at
#   1 thread but for w2 once (75 % against 70); at 2 threads 8 was ahead of 4 for w2 in both (71 vs 63, 92 vs
#   84 %), for w4 and w3 in one, and behind for w8 in both. At 1 thread 4 stays; at 2 threads see below.
# On a Zen 5 (family 26) 4 groups lost everywhere (see PRFM_STREAMS_BY_CPU), and elsewhere 4 is not measured.
PLAIN_STREAMS_BY_CPU = {("AuthenticAMD", 25): dict.fromkeys(WIDTHS, 4)}
# the same where two or more threads share the memory (a CPU without an entry here keeps its 1-thread counts).
# On Zen 4, w2 reads 8 groups per thread there: 8 against 4 at 2 threads (16c4-zmm, 4096x14336 cold, % of the
# fastest read), seven readings of w2: 71 vs 63, 92 vs 84 (2026-12-04/05, above), 85 vs 74, 78 vs 79 (11 rounds,
# 2026-12-05 03:06 UTC), 97 vs 92, 89 vs 80, 68 vs 67 (15 rounds, 03:08-03:10 UTC): ahead by 8 points in the
# median, never behind by more than 1. Not the others: w8 was behind in all five of its readings (73 vs 85, 60 vs
# 75, 85 vs 91 % in the last three), w4 level (91 vs 90, 90 vs 93, 82 vs 83), w3 mixed (97 vs 84, 85 vs 87, 92 vs
# 97, 93 vs 81, 87 vs 90). On 8c4 (256-bit) w2 with 8 was level with 4 (73 vs 75, 76 vs 77 %, 03:15 UTC): the
# count is the CPU's, not the tier's. Only measured at 2 threads, on 2 cores. asm_check: the same hot loop with 8
# as with 4 (58 instructions per 16c4 tile, 0.057 per weight), so the gain is the memory's.
# (These w2 counts are for its tile with one row per lane, as tile_variants.py's stack=0 binds it: since
# 2026-12-07 w2's plain tile is stacked and reads STACKED_STREAMS groups, see W2_STACK.)
PLAIN_STREAMS_SHARED_BY_CPU = {("AuthenticAMD", 25): {**dict.fromkeys(WIDTHS, 4), 2: 8}}
# groups per thread of each width's -prfm twin: 2 (STREAMS), except on Intel, where w3's and w2's twins read 4.
# Whether more streams pay is the memory system's call, measured on two CPUs, each against a plain read of the
# same bytes (benchmarks/tile_variants.py, 16c4-zmm, 4096x14336 cold, prefetcht0 4 KiB ahead, 4 groups against 2):
# - Intel Xeon (Sapphire Rapids class, 2026-12-03), where a plain read gains from more streams: w2 2 threads 94 vs
#   86, 96 vs 86, 100 vs 92 %, 1 thread 92 vs 85 %; w3 (split codes, 17:12 UTC) 2 threads 103 vs 91, 99 vs 93,
#   96 vs 87 %, 1 thread 113 vs 98, 125 vs 109; 8c4-avxvnni 2 threads 101 vs 93. w8 and w4 not tried.
# - AMD Zen 5 (family 26 model 2, 2026-12-03 23:20 UTC), where a plain read with 4 or 8 streams per thread
#   mostly got 26-53 % of one stream (w8's with 4 at 1 thread 95 %): 4 groups lost everywhere, 1 thread
#   w8/w4/w3/w2 70/61/68/60 % against 95/94/93/94 %, 2 threads 87/62/67/72 against 106/98/101/100 % (prefetchnta
#   with 2 groups: 98/95/95/94 and 105/88/98/98).
# - AMD Zen 4 (2026-12-04 23:44 UTC, one reading): the twins lose to the plain tile either way; with 4 groups w8's
#   lost more (85 -> 55 % at 1 thread), w4's was level, w3's and w2's gained 2-9 points. Kept at 2.
# Other CPUs (ARM included) are not measured with 4 and keep the 2 every tile reads.
DEFAULT_STREAMS = dict.fromkeys(WIDTHS, STREAMS)  # every width's count where a table has no entry, plain or twin
PRFM_STREAMS_BY_CPU = {"GenuineIntel": {**DEFAULT_STREAMS, 3: 4, 2: 4}}


def plain_streams(bits: int, cpu: tuple[str | None, int | None] | None = None, threads: int | None = None,
                  w2_stack: bool = True, tier: str | None = None) -> int:
    """Groups of rows per thread of width ``bits``' plain column tile on ``cpu``, a (vendor_id, cpu family) pair
    of /proc/cpuinfo's (by default this machine's; (None, None) off x86), at ``threads`` threads (by default
    numba's count in force now, the one a kernel bound now runs on); w2's in its stacked layout unless
    ``w2_stack`` is false, whose count depends on the ``tier``'s tile (required then)."""
    lanes = _stacked_lanes(bits, w2_stack, tier)
    if lanes:
        return STACKED_STREAMS[lanes]
    alone = _for_cpu(PLAIN_STREAMS_BY_CPU, cpu)
    if (_threads_now() if threads is None else threads) > 1:
        return _for_cpu(PLAIN_STREAMS_SHARED_BY_CPU, cpu, alone)[bits]
    return alone[bits]


def plain_turn(bits: int, w2_stack: bool = True, tier: str | None = None) -> int:
    """Tiles of a group that width ``bits``' plain column tile reads before the next group's turn: 1, but for
    stacked w2 (unless ``w2_stack`` is false) its ``tier``'s (required then; :data:`STACKED_TURN`)."""
    lanes = _stacked_lanes(bits, w2_stack, tier)
    return STACKED_TURN[lanes] if lanes else 1


def _stacked_lanes(bits: int, w2_stack: bool, tier: str | None) -> int | None:
    """The lanes of ``tier``'s tile where width ``bits`` is read stacked (w2 unless ``w2_stack`` is false), whose
    groups per thread and turn go by them (a ValueError without a tier); None for every other tile."""
    if not (bits == 2 and w2_stack and W2_STACK):
        return None
    if tier is None:
        raise ValueError("stacked w2's groups per thread and turn depend on the tier's tile: give tier")
    return tile_rows(tier)


def prfm_ahead(bits: int, cpu: tuple[str | None, int | None] | None = None) -> int:
    """Bytes ahead that width ``bits``' -prfm twin prefetches on ``cpu`` (as :func:`plain_streams`)."""
    return _for_cpu(PRFM_AHEAD_BY_CPU, cpu, PRFM_AHEAD)[bits]


def prfm_streams(bits: int, cpu: tuple[str | None, int | None] | None = None) -> int:
    """Groups of rows per thread of width ``bits``' -prfm twin on ``cpu`` (as :func:`plain_streams`)."""
    return _for_cpu(PRFM_STREAMS_BY_CPU, cpu)[bits]


def _for_cpu(table: dict, cpu: tuple[str | None, int | None] | None, default: dict = DEFAULT_STREAMS) -> dict:
    """The entry for (vendor, family), else for the vendor, else ``default`` (never changed, only read)."""
    vendor, family = _this_cpu() if cpu is None else cpu
    return table.get((vendor, family), table.get(vendor, default))


def _threads_now() -> int:
    return numba.get_num_threads()


@functools.lru_cache(maxsize=1)
def _this_cpu() -> tuple[str | None, int | None]:
    from gemvbw import system

    return system.cpu_vendor(), system.cpu_family()


# the prefetch's locality hint (0: prefetchnta ... 3: prefetcht0; see PRFM_AHEAD)
PREFETCH_LOCALITY = 3
# w3's codes as two whole codes and a split one to a byte (20 dot products per tile), not as two bit planes (32):
# see fields(). Measured on the Intel Xeon (benchmarks/tile_variants.py --bits 3 --variants
# ";split=0;ahead=4096,locality=3;ahead=4096,locality=3,split=0", 4096x14336 cold, 2026-12-03, % of the fastest
# read, split against planes): 16c4-zmm, three readings, -prfm twin at 2 threads 101/96/89 vs 85/94/86 %, at
# 1 thread 102/108/111 vs 104/108/108 (at the wall either way); the plain tile at 1 thread 81/81/81 vs 77/78/77,
# at 2 threads 69/75/75 vs 69/77/75. 8c4-avxvnni, one reading: 2 threads 90 vs 80 % (-prfm), 76 vs 72 (plain);
# 1 thread 104 vs 103, 95 vs 87. Never behind by more than the noise; ahead where the dot products showed.
W3_SPLIT = True
# w2's plain tile "stacked": the four 2-bit fields of a byte hold four rows' codes of one group of weights (rows r,
# r + R, r + 2R, r + 3R of a tile of 4R rows), not four groups of one row's. The four dot products of a vector then
# share its group's activations, and masks keeping the low 2, 4 and 6 bits (and none) give each row set's sum by
# differences (_stacked_sums): 12 masks per 1024 weights instead of 16, and 3 shifts and subtractions per 4096
# instead of 6 per 1024. asm_check (znver4): 193 instructions per 16c4-zmm tile of 4096 weights, 0.047 per weight,
# against 0.057 (0.094 against 0.113 on 8c4). Measured on Zen 4 (EPYC family 25 model 17, 2026-12-07 03:05-03:35
# UTC): hot_loop.py (ns per 1024 weights from L1, 1 thread, three alternating runs) 6.45 / 6.12 / 6.19 against
# 7.72 / 7.69 / 7.22, w8 level beside it; cold at 4096x14336 (tile_variants.py, 9-11 rounds each, % of the
# fastest read, stacked with one group per thread against gemvbw's tile until then, 4 groups at 1 thread and 8 at
# 2): 16c4-zmm 1 thread 98 vs 99, 97 vs 81, 93 vs 90, 93 vs 92, 92 vs 84 %; 2 threads 102 vs 87, 97 vs 99, 96 vs
# 95, 97 vs 72; 8c4 1 thread 83 vs 75, 2 threads 96 vs 96; after runs 54-55 (05:03-05:05 UTC, 11 rounds), 1
# thread 92 vs 91, 93 vs 91, 93 vs 88, 2 threads 97 vs 97, 93 vs 92, 89 vs 94, 92 vs 96, 95 vs 95 (three of those
# in the host's fast mode, reads at 55-60 GB/s): ahead at 1 thread, level at 2. The 512-bit tile's groups per
# thread: with more than one, taking turns tile by tile, it lost (1 thread, 16c4-zmm: 2 groups 81 and 54 %, 4: 81,
# 8: 47, against 97-98 with 1), and so did reading ahead (prefetcht0 4 KiB: 61 % with 1 group, 54 with 2). The
# 256-bit tile (8c4, 32 rows, 640 B a step) is the other way: it gains from groups as the other tiles do (2026-12-07
# 07:40-07:50 UTC, 1 thread, % of the fastest read, 1 / 2 / 4 / 8 groups: 82 / 90 / 95, 82 / 89 / 92, 84 / - / 95 /
# 87; 2 threads 83 / 93 / 93 / 90); it read 4 until a Zen 5 VM, where a read with 4 streams gets 38-52 % of one,
# put 4 groups at 35-41 % of the fastest read and 2 at 86-100 (1 thread; 2 threads 36-38 against 80-98), so it
# reads 2 (STACKED_STREAMS): 3-5 points behind 4 at 1 thread on Zen 4, level at 2, 50 ahead on Zen 5 (README).
# Why the 64-row tile loses with more is open:
# not the cost of a step, nor its size (half-steps lost more), nor the accumulators' stores, nor streams starting at
# one offset of a 4 KiB page (README); taking turns of two tiles, two groups gain (STACKED_TURN, below). Its -prfm
# twin stays one row's codes per lane (the twin Intel and Zen 5 were measured to want); --kernel auto weighs both.
# Tiles of 4R rows leave up to 4R - 1 rows of M to the width's f32 loop (M a multiple of 64 leaves none).
W2_STACK = True
# groups of rows per thread of stacked w2 (a group: one tile's 4R rows) by the tile's lanes R, on every CPU (measured
# on Zen 4, and 8c4's on Zen 5: above), and the tiles of a group each reads before the next group's turn
# (gemvbw.kernels.streams.steps_of_groups). The 512-bit tile reads 2 groups in turns of two tiles (2560 B): measured on Zen 4 (EPYC family
# 25 model 17, 2026-12-07 10:15-10:21 UTC, 4096x14336 cold, an ad hoc copy of this turn in gemvbw's skeleton, y bit
# for bit gemvbw's, interleaved with reads of the same bytes, 11 rounds each, % of the fastest read), 2 groups in
# turns of two against 1 group: 1 thread 98 vs 94, 95 vs 91, 96 vs 92; 2 threads 97 vs 96, 95 vs 91, 93 vs 83 (the
# last two in the host's fast mode, reads at 60-64 GB/s). 4 groups in turns of two: 96, 93, 92 (1 thread); 1
# group in turns of two lost (78-81 %), and so did turns of four (75-85 %) and half-tile turns (README).
# The 256-bit tile's 2 groups in turns of two lost to turns of one on the Zen 5 (2026-12-07 19:39 UTC, 7 rounds,
# 86 vs 89 % at 1 thread, 95 vs 98 at 2).
STACKED_STREAMS = {16: 2, 8: 2}
STACKED_TURN = {16: 2, 8: 1}
# Every count above was measured where a plain read gains from more streams per thread. Where it does not, one group
# per thread wins, and no per-CPU table can say so ahead of time: it is the memory's state, not the CPU's. Seen on a
# Zen 5 VM whose reads with 4 or 8 streams got 26-53 % of one (see PRFM_STREAMS_BY_CPU), and on the Zen 4 VM of these
# tables in spells of tens of minutes (2026-12-07 ~11:25 and 13:50-14:20 UTC: 1-thread reads at 22-26 GB/s instead
# of 33-36, one stream the fastest read at 1 and 2 threads). In such a spell (tile_variants.py, 16c4-zmm, 9 rounds,
# % of the fastest read, 1 group / 2 / the plain tile's count): 2 threads w4 89 / 80 / 76 (4 groups), w2 89 / 87 /
# 86 (2 in turns of two); 1 thread w4 86 / 85 / 86, w2 93 / 89 / 85; at 11:25, w2 2 threads 94 against 75, w4 1
# thread 91 against 73. Outside them one group loses: 1 thread w8 88 against 95, w4 83 against 98 (the counts
# above), 2 threads w2 93 against 97, w8 96 against 98 (13:16 UTC). So every plain tile that reads more than one
# group has a -1stream twin (gemvbw.kernels.ONE_STREAM_SUFFIX) reading ONE_STREAM, in turns of one tile, and
# --kernel auto calibrates both on the machine as it is.
ONE_STREAM = 1


def tile_tiers() -> list[str]:
    """The tiers with a column-tile kernel: those whose dot product adds into int32 lanes unsaturated."""
    from gemvbw.tiers import TIERS

    return [t.name for t in TIERS if t.tile_rows]


def tile_rows(tier: str) -> int:
    from gemvbw.tiers import by_name

    return by_name(tier).tile_rows


def layout_key(tier: str, bits: int, w3_split: bool = W3_SPLIT, w2_stack: bool = W2_STACK) -> tuple:
    """The key of a repacked copy in a matrix's copies (and a variant spec's ``layout``): variants with one key
    share one copy, so the registry's memory estimate and the copies bound count the same thing."""
    return ("c4", tile_rows(tier), bool(w3_split) and bits == 3, bool(w2_stack) and bits == 2)


def group_rows(tier: str, bits: int, w2_stack: bool = W2_STACK) -> int:
    """Rows of a tile (and of a group of rows of the skeleton): the tier's lanes, four times that for stacked w2."""
    return tile_rows(tier) * (4 if w2_stack and bits == 2 else 1)


def code_bytes(bits: int, rows: int) -> int:
    """A tile's code bytes."""
    return rows * SUPPORTED_BLOCK * bits // 8


def tile_bytes(bits: int, rows: int, meta_bytes: int) -> int:
    """A tile's bytes: its codes, then its rows' scales and offsets."""
    return code_bytes(bits, rows) + 2 * rows * meta_bytes


class Field(NamedTuple):
    """Where a tile keeps one group of a row's codes: in byte t of lane r of code vector ``vector``, bits ``pos`` ..
    ``pos + width - 1`` hold bits ``start`` .. ``start + width - 1`` of weight 4 * group + t's code of the tile's
    row ``rowset`` * R + r (R: the tier's lanes)."""
    vector: int
    pos: int
    width: int
    start: int
    group: int
    rowset: int = 0


def fields(bits: int, w3_split: bool = W3_SPLIT, w2_stack: bool = W2_STACK) -> tuple[Field, ...]:
    """The fields of a tile's code vectors (2 * bits of them; 16 for stacked w2), covering every bit of the block's
    16 groups of four weights (of each of its row sets).

    w8, w4 and w2: 8 / bits whole codes to a byte, group q in field q % P of vector q // P (P = 8 / bits). w3 split
    (the default): two whole codes to a byte (bits 0-2: groups 0, 2, .., 10 of vectors 0-5; bits 3-5: groups 1, 3,
    .., 11), and groups 12-15 in the two bits left in each byte: their low two bits at bits 6-7 of vectors 0-3,
    their high bits at bit 6 and 7 of vectors 4 and 5. 20 fields, each one masked operand of a dot product. w3 as
    two bit planes (w3_split False): its low two bits as w2 stores its codes (vectors 0-3), then its high bits
    eight 1-bit fields to a byte (vectors 4-5): 32 fields. w2 stacked (w2_stack, the default): vector q holds group
    q of four row sets, row set p in field p (16 vectors of a tile of 4R rows)."""
    if bits == 2 and w2_stack:
        return tuple(Field(q, 2 * p, 2, 0, q, p) for q in range(16) for p in range(4))
    if bits != 3:
        P = 8 // bits
        return tuple(Field(q // P, bits * (q % P), bits, 0, q) for q in range(16))
    if not w3_split:
        low = [Field(q // 4, 2 * (q % 4), 2, 0, q) for q in range(16)]
        return tuple(low + [Field(4 + q // 8, q % 8, 1, 2, q) for q in range(16)])
    whole = [Field(q // 2, 3 * (q % 2), 3, 0, q) for q in range(12)]
    low = [Field(v, 6, 2, 0, 12 + v) for v in range(4)]
    high = [Field(4 + i // 2, 6 + i % 2, 1, 2, 12 + i) for i in range(4)]
    return tuple(whole + low + high)


# --- the compile-time tag -------------------------------------------------------------------------

class TileTag:
    """Which tier, width and metadata size a column-tile kernel compiles for, how far ahead it prefetches and
    with which locality hint, how many groups of rows each thread reads at once and in turns of how many tiles,
    and for w3 and w2 which of their layouts it reads (its numba type carries them all: a benchmark can compare
    them in one process)."""

    def __init__(self, tier: str, bits: int, meta_bytes: int, ahead: int | None = None, nstreams: int | None = None,
                 locality: int = PREFETCH_LOCALITY, w3_split: bool = W3_SPLIT, w2_stack: bool = W2_STACK,
                 turn: int | None = None):
        if bits in WIDTHS and tier in tile_tiers():
            # the plain tile's count on this CPU at the threads in force, and its turn: gemvbw's own
            if nstreams is None:
                nstreams = plain_streams(bits, w2_stack=w2_stack, tier=tier)
            if turn is None:
                turn = plain_turn(bits, w2_stack, tier)
        if (tier not in tile_tiers() or bits not in WIDTHS or meta_bytes not in (2, 4) or nstreams < 1
                or locality not in HINTS or turn not in streams.TURNS):
            raise ValueError(f"no column-tile kernel for tier {tier!r}, w{bits}, {meta_bytes}-byte metadata, "
                             f"{nstreams} streams in turns of {turn} tile(s) (1 or 2), prefetch locality {locality}")
        self.tier, self.bits, self.meta_bytes, self.nstreams, self.turn = tier, bits, meta_bytes, nstreams, turn
        self.ahead = PREFETCH_AHEAD[bits] if ahead is None else ahead
        self.locality = locality
        self.w3_split = bool(w3_split) and bits == 3  # the other widths have one layout
        self.w2_stack = bool(w2_stack) and bits == 2


class TileTagType(types.Type):
    def __init__(self, tier: str, bits: int, meta_bytes: int, ahead: int, nstreams: int, locality: int,
                 w3_split: bool, w2_stack: bool, turn: int):
        self.tier, self.bits, self.meta_bytes, self.ahead, self.nstreams = tier, bits, meta_bytes, ahead, nstreams
        self.turn = turn
        self.locality, self.w3_split, self.w2_stack = locality, w3_split, w2_stack
        self.lanes = tile_rows(tier)
        self.rows = group_rows(tier, bits, w2_stack)
        layout = 'split,' if w3_split else 'planes,' if bits == 3 else 'stacked,' if w2_stack else ''
        super().__init__(name=f"TileTag({tier},w{bits},meta {meta_bytes},ahead {ahead},locality {locality},"
                              f"streams {nstreams},turn {turn},{layout}{FINGERPRINT})")


@typeof_impl.register(TileTag)
def _typeof_tag(val, c):
    return TileTagType(val.tier, val.bits, val.meta_bytes, val.ahead, val.nstreams, val.locality, val.w3_split,
                       val.w2_stack, val.turn)


register_model(TileTagType)(models.OpaqueModel)


@unbox(TileTagType)
def _unbox_tag(typ, obj, c):
    return NativeValue(c.context.get_dummy_value())  # the type is the value


# --- layout ---------------------------------------------------------------------------------------

@njit(cache=True)
def _stored_code(row, b, k, bits):
    """Code k of block b of a row as the packed matrix stores it (see gemvbw.quant)."""
    if bits == 8:
        return np.int64(row[b * 64 + k])
    if bits == 4:  # byte j holds codes j and j + 32
        v = np.int64(row[b * 32 + k % 32])
        return v & 15 if k < 32 else v >> 4
    if bits == 3:  # 16 bytes as w2's (the low two bits), then 8 of high bits: byte j holds j + 8p at bit p
        low = (np.int64(row[b * 24 + k % 16]) >> (2 * (k // 16))) & 3
        return low | ((np.int64(row[b * 24 + 16 + k % 8]) >> (k // 8)) & 1) << 2
    return (np.int64(row[b * 16 + k % 16]) >> (2 * (k // 16))) & 3  # w2: byte j holds j + 16p at bits 2p


@njit(parallel=True, cache=True)
def repack(codes, scale, offset, bits, layout, rows, lanes, nfull, mb, pc):
    """Fill pc with the tiles of the first nfull blocks, tile (group g, block b) at g * nfull + b: its code vectors
    (vector s, lane r, byte t at (s * lanes + r) * 4 + t, holding the fields of :func:`fields`, given as the rows
    of ``layout``: vector, pos, width, start, group, rowset), then its rows' scales and offsets [rows x scale |
    rows x offset] as stored, mb bytes each (scale and offset given as their bytes, mb per block)."""
    groups = codes.shape[0] // rows
    ncode = rows * 64 * bits // 8
    size = ncode + 2 * rows * mb
    for g in prange(groups):
        for b in range(nfull):
            t = g * nfull + b
            base = t * size
            pc[base:base + ncode] = 0
            for i in range(layout.shape[0]):
                s, pos, width, start, q = layout[i, 0], layout[i, 1], layout[i, 2], layout[i, 3], layout[i, 4]
                for r in range(lanes):
                    row = codes[g * rows + layout[i, 5] * lanes + r]
                    for j in range(4):
                        field = (_stored_code(row, b, 4 * q + j, bits) >> start) & ((1 << width) - 1)
                        pc[base + (s * lanes + r) * 4 + j] |= field << pos
            base += ncode
            for r in range(rows):
                for q in range(mb):
                    pc[base + r * mb + q] = scale[g * rows + r, b * mb + q]
                    pc[base + (rows + r) * mb + q] = offset[g * rows + r, b * mb + q]


def pack(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray, bits: int, K: int, lanes: int,
         w3_split: bool = W3_SPLIT, w2_stack: bool = W2_STACK):
    """The tiles (their bytes, full blocks) of a matrix: done once, when a kernel is bound. Each tile's codes
    and then its metadata, so a group of rows is one sequential stream: measured on Zen 4, 4096x14336, cold,
    interleaved against the metadata in a second array (three runs of 9-15 rounds, % of a plain read of the
    same bytes): 1 thread w4 89-95 -> 92-105, w3 71-73 -> 83-88, w2 83-89 -> 86-91, w8 99-101 -> 98-109;
    2 threads w4 84-85 -> 87-97, w3 78-89 -> 84-95, w2 75-83 -> 86-88, w8 91-101 -> 95-99."""
    nfull = K // SUPPORTED_BLOCK
    rows = lanes * (4 if w2_stack and bits == 2 else 1)
    groups = codes.shape[0] // rows
    mb = scale.itemsize
    # numpy's allocation, for its transparent huge pages, on a cache line (see aligned_empty)
    pc = aligned_empty(groups * nfull * tile_bytes(bits, rows, mb))
    layout = np.array(fields(bits, w3_split, w2_stack), np.int64)
    repack(codes, scale.view(np.uint8), offset.view(np.uint8), bits, layout, rows, lanes, nfull, mb, pc)
    return pc, nfull


# --- one tile -------------------------------------------------------------------------------------

def _broadcast4(context, builder, arrty, arr, offset, nbytes: int):
    """Four int8 activations at arr[offset] as one i32 in every lane, as <nbytes x i8> (an embedded
    broadcast of vpdpbusd's memory operand, where LLVM folds it)."""
    word = builder.load(ptr(context, builder, arrty, arr, offset, I32), align=1)
    return builder.bitcast(broadcast(builder, word, vec(I32, nbytes // 4)), vec(I8, nbytes))


def _field_sums(context, builder, prim, ttag, pcty, pcv, cofs, xqty, xqv, aofs):
    """[isum]: the int32 dot products of a tile of :func:`fields`' layout (one row set, R lanes)."""
    width = 4 * ttag.lanes
    # a field's bits were multiplied in place, as 2**pos times themselves, and they stand for 2**start times as
    # much in the code: fields of one shift (pos - start) share a chain, shifted back once (right, exactly, as
    # every term is a multiple of 2**pos; or left); a long class is split so that no chain is longer than the
    # tile's dot products spread over ACCUMULATORS chains, each waiting on the latency of the one before
    layout = fields(ttag.bits, ttag.w3_split, False)
    longest = -(-len(layout) // ACCUMULATORS)
    classes: dict[int, list[Field]] = {}
    for f in layout:
        classes.setdefault(f.pos - f.start, []).append(f)
    vectors = [load(context, builder, pcty, pcv, off(builder, cofs, v * width), vec(I8, width))
               for v in range(2 * ttag.bits)]
    isum = None
    for shift, members in classes.items():
        nchains = -(-len(members) // longest)
        for c in range(nchains):
            terms = []
            for f in members[c::nchains]:
                v = vectors[f.vector]
                field = v if f.width == 8 else builder.and_(v, splat(v.type, ((1 << f.width) - 1) << f.pos))
                terms.append((field, _broadcast4(context, builder, xqty, xqv, off(builder, aofs, 4 * f.group),
                                                 width)))
            part = prim.dot(builder, terms, None)
            if shift > 0:
                part = builder.ashr(part, splat(part.type, shift))
            elif shift < 0:
                part = builder.shl(part, splat(part.type, -shift))
            isum = part if isum is None else builder.add(isum, part)
    return [isum]


def _stacked_sums(context, builder, prim, ttag, pcty, pcv, cofs, xqty, xqv, aofs):
    """[isum of row set p for p in 0..3]: the int32 dot products of a stacked w2 tile (see :func:`fields`). Chain p
    sums each vector's low 2p + 2 bits (all 8 for p = 3) against its group's activations: row sets 0..p at once,
    set j's codes counted 4**j times; so set p's sum is chain p less chain p - 1, shifted right by 2p, exactly."""
    width = 4 * ttag.lanes
    per = max(1, ACCUMULATORS // 4)  # chains per row set
    terms: list[list] = [[] for _ in range(4 * per)]
    for q in range(16):
        v = load(context, builder, pcty, pcv, off(builder, cofs, q * width), vec(I8, width))
        x = _broadcast4(context, builder, xqty, xqv, off(builder, aofs, 4 * q), width)
        for p in range(4):
            field = v if p == 3 else builder.and_(v, splat(v.type, (1 << (2 * p + 2)) - 1))
            terms[p * per + q % per].append((field, x))
    chains = [prim.dot(builder, t, None) for t in terms]
    low = [functools.reduce(builder.add, chains[p * per:(p + 1) * per]) for p in range(4)]
    return [low[0]] + [builder.ashr(builder.sub(low[p], low[p - 1]), splat(low[p].type, 2 * p)) for p in (1, 2, 3)]


@intrinsic
def _tile(typingctx, tag, pc, t, xq, b, d, xs, acc):
    """acc[0:R] += isum * scale * d[b] + offset * xs[b] for tile t (its rows, block b)."""
    if not isinstance(tag, TileTagType):
        return None
    sig = types.none(tag, pc, t, xq, b, d, xs, acc)

    def codegen(context, builder, sig, args):
        ttag, pcty, tty, xqty, bty, dty, xsty, accty = sig.args
        _, pcv, tv, xqv, bv, dv, xsv, accv = args
        prim, bits, rows, R = PRIMITIVES[ttag.tier], ttag.bits, ttag.rows, ttag.lanes
        tv = context.cast(builder, tv, tty, types.intp)
        bv = context.cast(builder, bv, bty, types.intp)
        mb = ttag.meta_bytes
        stride = tile_bytes(bits, rows, mb)
        cofs = builder.mul(tv, ir.Constant(tv.type, stride))
        aofs = builder.mul(bv, ir.Constant(bv.type, SUPPORTED_BLOCK))
        if ttag.ahead:
            prefetch(context, builder, pcty, pcv, off(builder, cofs, ttag.ahead), stride, ttag.locality)
        sums = (_stacked_sums if ttag.w2_stack else _field_sums)(context, builder, prim, ttag, pcty, pcv, cofs, xqty,
                                                                   xqv, aofs)

        # each row set's R sums times its R scales (d[b] for the activations), plus its offsets times xs[b]
        mofs = off(builder, cofs, code_bytes(bits, rows))  # right after the tile's codes (a byte offset)
        lanes = vec(F32, R)
        dd = broadcast(builder, builder.load(ptr(context, builder, dty, dv, bv, F32), align=4), lanes)
        xsum = broadcast(builder, builder.load(ptr(context, builder, xsty, xsv, bv, F32), align=4), lanes)
        for p, isum in enumerate(sums):
            s = meta(context, builder, pcty, pcv, off(builder, mofs, p * R * mb), R, mb == 2)
            o = meta(context, builder, pcty, pcv, off(builder, mofs, (rows + p * R) * mb), R, mb == 2)
            total = builder.fadd(builder.fmul(builder.sitofp(isum, lanes), builder.fmul(s, dd)),
                                 builder.fmul(o, xsum))
            accp = ptr(context, builder, accty, accv, const(p * R, tv.type), lanes)
            builder.store(builder.fadd(builder.load(accp, align=4), total), accp, align=4)
        return context.get_dummy_value()

    return sig, codegen


# --- column tiles on the shared skeleton (gemvbw.kernels.streams) ----------------------------------
# lay = (tiles, full blocks); the tiles hold their own metadata

def _is_tile(tag):
    return isinstance(tag, TileTagType)


@overload(streams.group_rows)
def _group_rows(tag):
    if _is_tile(tag):
        rows = tag.rows
        return lambda tag: rows


@overload(streams.acc_lanes)
def _acc_lanes(tag):
    if _is_tile(tag):
        rows = tag.rows
        return lambda tag: rows


@overload(streams.layout)
def _layout(tag, copy, meta, K):
    if _is_tile(tag):
        return lambda tag, copy, meta, K: (copy, K // SUPPORTED_BLOCK)


_SCRATCH_BYTES = 0  # the tiles read the quantized activations where they are: no scratch, for any K


@overload(streams.scratch_bytes)
def _scratch_bytes(tag, K):
    if _is_tile(tag):
        return lambda tag, K: _SCRATCH_BYTES


@overload(streams.prepare)
def _prepare(tag, lay, xq, d, xs, scratch):
    if _is_tile(tag):  # activations in their natural order
        return lambda tag, lay, xq, d, xs, scratch: (xq, d, xs)


# inlined by numba, not left to LLVM's inliner (which kept a large step out of line: see gemvbw.kernels.packed)
@overload(streams.step, inline="always")
def _step(tag, lay, k, s, act, acc):
    if _is_tile(tag):
        return lambda tag, lay, k, s, act, acc: _tile(tag, lay[0], k, act[0], s, act[1], act[2], acc)


@overload(streams.row_sum)
def _row_sum(tag, accs, k, i):
    if _is_tile(tag):
        return lambda tag, accs, k, i: accs[k, i]


@overload(streams.first_leftover)
def _first_leftover(tag, lay):
    if _is_tile(tag):
        return lambda tag, lay: lay[1]  # a shorter last block


@overload(streams.stream_count)
def _stream_count(tag):
    if _is_tile(tag):
        n = tag.nstreams
        return lambda tag: n


@overload(streams.stream_turn)
def _stream_turn(tag):
    if _is_tile(tag):
        n = tag.turn
        return lambda tag: n


def kernel_args(tier: str, qm, x: np.ndarray, y: np.ndarray, chunks: int, ahead: int | None = None,
                **options) -> tuple:
    """The arguments of :func:`gemvbw.kernels.streams.gemv_streams` for ``qm`` on a tier's column tiles (repacked
    now if not yet, untimed; block 64 only), with a new workspace. ``options``: :class:`TileTag`'s nstreams,
    locality, w3_split, w2_stack and turn."""
    from gemvbw.kernels.packed import _PACKED

    if qm.block != SUPPORTED_BLOCK:
        raise ValueError(f"int8-activation kernels handle block {SUPPORTED_BLOCK} only")
    copies = _PACKED.setdefault(qm, {})
    tag = TileTag(tier, qm.bits, qm.meta_bytes, ahead, **options)
    layout = layout_key(tier, qm.bits, tag.w3_split, tag.w2_stack)
    if layout not in copies:
        copies[layout] = pack(qm.codes, qm.scale_raw, qm.offset_raw, qm.bits, qm.K, tile_rows(tier), tag.w3_split,
                              tag.w2_stack)
    pc, _ = copies[layout]
    rows = group_rows(tier, qm.bits, tag.w2_stack)
    work = streams.new_work(qm.K, qm.scale_raw.shape[1], rows, chunks, _SCRATCH_BYTES, tag.nstreams)
    return tag, pc, pc, work, qm.codes, qm.scale_raw, qm.offset_raw, x, qm.block, y, chunks


def bind(tier: str, qm, chunks: int, ahead: int | None = None, **options):
    """run(x, y) of the tier's column-tile kernel for ``qm`` (repacked now, untimed; block 64 only). Not
    reentrant: its calls share one workspace. ``options``: :class:`TileTag`'s nstreams, locality, w3_split, w2_stack
    and turn."""
    from gemvbw.kernels import typed_like

    return streams.bind(kernel_args(tier, qm, *typed_like(qm), chunks, ahead, **options))

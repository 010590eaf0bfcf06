"""What an int8 kernel's hot loop costs when memory costs nothing: its steps timed from L1, per 1024 weights.

    python benchmarks/hot_loop.py [--tier avx512vnni-zmm] [--format c4|4x2] [--bits 8,4,3,2] [--K 256]
                                  [--shape 4096x14336] [--rounds 9] [--read] [--md PATH]

A kernel reads each weight once, so at one thread its time is at best the longer of two: reading the bytes
from DRAM, and doing the work on them (unpacking, dot products, scales). A cold sweep shows their sum as
far as the core fails to overlap them; this script shows the second alone. For each int8 tier this CPU
runs (its column tiles, its packed-4x2 kernels; ``--tier`` and ``--format`` pick one) it binds the plain
kernel, gemvbw's own tag, to a matrix of one group of rows per stream and K columns (K=256: 17 KiB of 16c4
w8 tiles, within a 32 KiB L1), checks the kernel against the numpy reference and the loop below against the
kernel (bit for bit), then runs the kernel's own steps over those same groups many times in one compiled
loop, in the skeleton's order (step s of every stream, then s + 1, or two steps at a time where the tag
reads its groups in turns of two: gemvbw.kernels.streams.steps_of_groups), with nothing else: no activation
quantizing, no leftovers, no call. It prints, per width, the median over ``--rounds`` of the nanoseconds
per 1024 weights, and what that makes for the whole of ``--shape`` at one thread: the compute floor of a
cold call there. With ``--read`` it also times a plain read of each width's bytes at that shape at one
thread (after the sweep's default flush, the fastest of the read roofline's 1, 4 and 8 streams, median of
``--rounds``), to set the two side by side. Where the floor is near the read, the kernel cannot reach the
wall at one thread on this core whatever its memory access, and the figure to improve is the loop's; at T
threads each core has 1/T of the rows, so the floor divides by T (cores do not share their vector units).

Nothing is asserted; the figures are the core's (and its clock's, which this script does not know).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit

from gemvbw import system
from gemvbw.kernels import packed, streams, tile
from gemvbw.kernels._common import FASTMATH
from gemvbw.quant import random_activations, random_quantized
from gemvbw.verify import reference_gemv, relative_error
from wall import interleaved_medians, read_runs  # benchmarks/, on sys.path when this script runs


@njit(fastmath=FASTMATH)  # the skeleton's flags, so that its float sums are the same bit for bit
def _hot_steps(tag, copy, meta, work, K, nb, accs, reps):
    """The steps of groups 0 .. S-1 (S: the tag's streams), ``reps`` times over, into accs (S x lanes), as
    gemv_streams runs them for one chunk of S groups; returns the weights one pass covers."""
    lay = streams.layout(tag, copy, meta, K)
    steps = lay[1]
    S = streams.stream_count(tag)
    o_d, o_xs, o_xdq, o_acc, o_scratch, size = streams.work_layout(K, nb, streams.acc_lanes(tag), 1,
                                                                   streams.scratch_bytes(tag, K), S)
    xq = work[:nb * 64].view(np.int8)
    d = work[o_d:o_d + 4 * (nb + 1)].view(np.float32)
    xs = work[o_xs:o_xs + 4 * nb].view(np.float32)
    act = streams.prepare(tag, lay, xq, d, xs, work[o_scratch:size])
    for _ in range(reps):
        accs[:] = 0
        streams.steps_of_groups(tag, lay, 0, 1, steps, act, accs)
    return S * streams.group_rows(tag) * streams.first_leftover(tag, lay) * 64


@njit
def _shape(tag):
    """(rows per group, accumulator lanes per group, streams) of a kernel tag, as the skeleton finds them."""
    return streams.group_rows(tag), streams.acc_lanes(tag), streams.stream_count(tag)


@njit
def _row_sums(tag, accs, rows):
    S = accs.shape[0]
    out = np.empty(S * rows, np.float32)
    for k in range(S):
        for i in range(rows):
            out[k * rows + i] = streams.row_sum(tag, accs, k, i)
    return out


def prepared(fmt: str, tier: str, bits: int, K: int):
    """(tag, copy, meta, work, blocks, accs, weights a pass covers) of the tier's plain kernel for width ``bits``
    on a matrix of one group of rows per stream and K columns, its workspace filled by one call; exits, naming
    the width, if the kernel is off the numpy reference or the hot loop off the kernel (bit for bit)."""
    from gemvbw import kernels

    kernel_args = {"c4": tile.kernel_args, "4x2": packed.kernel_args}[fmt]
    R, lanes, S = _shape(tile.TileTag(tier, bits, 2) if fmt == "c4" else packed.KernelTag(tier, bits))
    qm = random_quantized(S * R, K, bits, seed=bits)
    x = random_activations(K, 0)
    y = np.empty(S * R, np.float32)
    args = kernel_args(tier, qm, x, y, 1)
    tag, copy, meta, work = args[:4]
    streams.bind(args)(x, y)  # fills the workspace's quantized activations, as every call does first
    spec = kernels.variants(bits, "i8")[0]  # the int8 kernels' reference: x quantized per block, and tolerance
    err = relative_error(y, *reference_gemv(qm, spec.reference_x(x, qm.block)))
    if not err <= spec.tolerance:
        raise SystemExit(f"w{bits}: the {fmt} kernel of {tier} is off the reference (max rel err {err:.2e}); "
                         "not timed")
    nb = qm.scale_raw.shape[1]
    accs = np.zeros((S, lanes), np.float32)
    weights = _hot_steps(tag, copy, meta, work, K, nb, accs, 1)
    if not np.array_equal(_row_sums(tag, accs, R), y):
        raise SystemExit(f"w{bits}: the hot loop's sums differ from the {fmt} kernel's y on {tier}; not timed")
    return tag, copy, meta, work, nb, accs, weights


def measure(fmt: str, tier: str, bits: int, K: int, rounds: int) -> float:
    """Median ns per 1024 weights of the tier's hot loop for width ``bits``, from L1 (checked first: see
    :func:`prepared`)."""
    tag, copy, meta, work, nb, accs, weights = prepared(fmt, tier, bits, K)
    reps = max(1, int(20e6 // weights))  # about 20 M weights a round: tens of ms
    ns = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        _hot_steps(tag, copy, meta, work, K, nb, accs, reps)
        ns.append((time.perf_counter_ns() - t0) / (reps * weights / 1024))
    return statistics.median(ns)


def variants_here(tier: str | None, fmt: str | None) -> list[tuple[str, str, str]]:
    """(name, format, tier) of the plain int8 kernels this CPU runs: every tier's column tiles where it has them
    and its packed-4x2 kernels (the -prfm twins loop as their plain kernel does, plus prefetches, which from L1
    only cost), narrowed to ``tier`` and ``fmt`` where given."""
    from gemvbw.tiers import usable

    out = []
    for t in usable():
        if tier not in (None, t.name):
            continue
        if t.name in tile.tile_tiers() and fmt in (None, "c4"):
            out.append((f"packed-{tile.tile_rows(t.name)}c4-{t.name}", "c4", t.name))
        if fmt in (None, "4x2"):
            out.append((f"packed-4x2-{t.name}", "4x2", t.name))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", help="one tier (default: every int8 tier this CPU runs)")
    ap.add_argument("--format", choices=("c4", "4x2"),
                    help="c4: column tiles (packed-<R>c4-<tier>); 4x2: packed-4x2 (default: both)")
    ap.add_argument("--bits", default="8,4,3,2")
    ap.add_argument("--K", type=int, default=256, help="columns of the matrix looped over (a multiple of 128)")
    ap.add_argument("--shape", default="4096x14336", help="the shape the floor is given for")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--read", action="store_true", help="also time a cold read of --shape's bytes, 1 thread")
    ap.add_argument("--md", metavar="PATH", help="also write the table as markdown")
    args = ap.parse_args(argv)
    from gemvbw.tiers import usable

    if args.tier is not None and args.tier not in {t.name for t in usable()}:
        ap.error(f"--tier: {args.tier} cannot run on this CPU (see gemvbw info)")
    if args.tier is not None and args.format == "c4" and args.tier not in tile.tile_tiers():
        ap.error(f"--tier: {args.tier!r} has no column tiles; one of {', '.join(tile.tile_tiers())}")
    if args.K < 128 or args.K % 128:
        ap.error("--K: a multiple of 128 (whole block pairs and tiles, no leftover)")
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    try:
        widths = [int(b) for b in args.bits.split(",")]
        M, K = map(int, args.shape.split("x"))
    except ValueError:
        ap.error("--bits 8,4,3,2 and --shape MxK: integers")
    if set(widths) - {8, 4, 3, 2} or M < 1 or K < 1:
        ap.error("--bits: of 8, 4, 3, 2; --shape: positive M and K")
    numba.set_num_threads(1)
    head = (f"{system.describe_cpu()['cpu']}, 1 thread, each tier's plain kernel, its steps from L1 (K={args.K}) in "
            f"the skeleton's order, median of {args.rounds} rounds: ns per 1024 weights, and the compute floor at "
            f"{M}x{K} (that x M*K/1024; at T threads / T)")
    print(head, flush=True)
    rows = []
    for name, fmt, tier in variants_here(args.tier, args.format):
        cells = []
        for bits in widths:
            per_1024 = measure(fmt, tier, bits, args.K, args.rounds)
            cells.append(f"{per_1024:.2f} ns, {per_1024 * M * K / 1024 / 1e3:.0f} us")
        rows.append(f"{name} | " + " | ".join(cells))
        print(rows[-1], flush=True)
    lines = [head, "", "kernel | " + " | ".join(f"w{b}" for b in widths), "---" + "|---:" * len(widths)] + rows
    if args.read:
        reads = []
        for bits in widths:
            qm = random_quantized(M, K, bits, seed=bits)
            us = min(interleaved_medians(read_runs(qm.logical_bytes, 1), args.rounds).values())
            reads.append(f"{us:.0f} us ({qm.logical_bytes / us / 1e3:.1f} GB/s)")
        lines.append(f"cold read of its bytes, 1 thread (fastest of 1/4/8 streams) | " + " | ".join(reads))
        print(lines[-1], flush=True)
    if args.md:
        Path(args.md).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

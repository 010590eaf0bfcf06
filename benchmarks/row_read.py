"""A plain read of each width's bytes timed exactly as a sweep row, beside that width's kernel row and the
read roofline taken before and after it: how much of the roofline a row can reach at all.

    python benchmarks/row_read.py [--shape 4096x14336] [--threads 1] [--bits 8,4,3,2] [--rounds 3]
                                  [--iters 200] [--reps 3] [--flush-mib N] [--variant NAME] [--md PATH]

The x86 issue's wall clauses take a row's eff GB/s against the sweep's read roofline. The two are not
measured alike: the roofline is the best of a few trials reading a buffer of 8x the last-level cache with no
flush, one call per trial; a row is the best group mean of --iters calls, each after a --flush-mib flush
(so each call also brings its code, its thread launch and the first lines of the matrix back from DRAM).
Where even a plain read of the same bytes, timed as a row, stays under the roofline, what is missing is the
row's, and no kernel gets it back. This script measures both in one process and round by round: the
roofline; per width (in an order rotated each round), the plain read of the width's logical bytes timed as a
row in each of the roofline's ways (1, 4, 8 streams per thread; the fastest kept and named) and the kernel
row (`--kernel auto`'s calibrated int8 choice for this shape, threads and flush, or --variant), read first in
even rounds and kernel first in odd ones; then the roofline again. Every kernel is checked against the numpy
reference before it is timed; one that fails is named and not timed.

It reports, per round and width, each row's share of the two rooflines around it and the kernel row against
the read row, and per width the medians over the rounds. Nothing here is asserted; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from gemvbw import calibrate, kernels, metrics, system
from gemvbw.harness import CacheFlusher, measure_call_overhead, time_groups
from gemvbw.quant import random_activations, random_quantized
from gemvbw.roofline import read_bandwidth, read_buffer_bytes
from gemvbw.settings import machine_llc_bytes

from flush_option import SWEEP_FLUSH_MIB, add_flush_mib, check_flush_mib  # benchmarks/, on sys.path when this runs
from wall import read_runs, verified_call


@dataclass(frozen=True)
class RowReading:
    """One width in one round: the rooflines around the round (GB/s), the read row in each way (us) and the
    kernel row (us; None when the kernel failed verification)."""

    round: int
    bits: int
    nbytes: int
    roofline_before: float
    roofline_after: float
    read_us: dict[str, float]
    variant: str
    kernel_us: float | None

    @property
    def read_way(self) -> str:
        return min(self.read_us, key=self.read_us.get)

    @property
    def fastest_read_us(self) -> float:
        return self.read_us[self.read_way]

    def gbps(self, us: float) -> float:
        """eff GB/s of a row of ``us`` over this width's logical bytes (the sweep's formula)."""
        return metrics.eff_gbps(self.nbytes, us / 1e6)

    def pct_of_rooflines(self, us: float) -> tuple[float, float]:
        """The row's share of the faster and of the slower of the two rooflines around it (%read)."""
        g = self.gbps(us)
        return (metrics.pct_read(g, max(self.roofline_before, self.roofline_after)),
                metrics.pct_read(g, min(self.roofline_before, self.roofline_after)))

    def pct_of_mean_roofline(self, us: float) -> float:
        return metrics.pct_read(self.gbps(us), (self.roofline_before + self.roofline_after) / 2)


def row_us(call: Callable[[], object], iters: int, reps: int, flusher: CacheFlusher) -> float:
    """A row's figure, taken as the sweep takes it: the best group mean of ``reps`` groups of ``iters`` calls,
    each call after the flush."""
    return time_groups(call, iters, reps, flusher).best_avg_us


def verified_kernel(qm, x: np.ndarray, y: np.ndarray, threads: int, flusher: CacheFlusher,
                    variant: str | None) -> tuple[kernels.KernelSpec, Callable[[], object] | None]:
    """The int8 kernel a sweep would time for ``qm`` (``variant``, else --kernel auto's choice) and a call of it,
    or None for the call when it does not match the numpy reference (named on stderr)."""
    if variant is None:
        spec = calibrate.choose(qm.bits, "i8", threads, qm, x, flusher=flusher).spec
    else:
        spec = kernels.get(qm.bits, "i8", variant)
    return spec, verified_call(spec, qm, x, y)


def measure(M: int, K: int, widths: list[int], threads: int, rounds: int, iters: int, reps: int,
            flush_mib: int, variant: str | None = None, roofline_bytes: int | None = None,
            on_reading: Callable[[RowReading], None] | None = None) -> list[RowReading]:
    """Every round's readings, each width's handed to ``on_reading`` as its round ends."""
    flusher = CacheFlusher(flush_mib)
    x = random_activations(K, 0)
    y = np.empty(M, np.float32)
    big = roofline_bytes or read_buffer_bytes(machine_llc_bytes())
    prepared = {}
    for b in widths:
        qm = random_quantized(M, K, b, seed=b)
        spec, call = verified_kernel(qm, x, y, threads, flusher, variant)
        prepared[b] = (qm.logical_bytes, spec, call, read_runs(qm.logical_bytes, threads))
    readings = []
    for r in range(rounds):
        before = read_bandwidth(threads, big).gbps
        order = widths[r % len(widths):] + widths[:r % len(widths)]
        read_us: dict[int, dict[str, float]] = {}
        kernel_us: dict[int, float | None] = dict.fromkeys(widths)
        for b in order:
            _, spec, call, reads = prepared[b]
            for part in (("read", "kernel") if r % 2 == 0 else ("kernel", "read")):
                if part == "read":
                    read_us[b] = {way: row_us(f, iters, reps, flusher) for way, f in reads.items()}
                elif call is not None:
                    with spec.session(threads):
                        kernel_us[b] = row_us(call, iters, reps, flusher)
        after = read_bandwidth(threads, big).gbps
        for b in widths:
            nbytes, spec = prepared[b][:2]
            reading = RowReading(r, b, nbytes, before, after, read_us[b], spec.variant, kernel_us[b])
            readings.append(reading)
            if on_reading is not None:
                on_reading(reading)
    return readings


HEADER = ["round | width | rooflines before / after | plain read as a row (fastest way) | % of the rooflines "
          "| kernel row | % of the rooflines | kernel / read row",
          "---|---|---|---|---:|---|---:|---:"]


def us_text(us: float) -> str:
    return f"{us:.0f}" if us >= 100 else f"{us:.1f}"


def reading_line(g: RowReading) -> str:
    hi, lo = g.pct_of_rooflines(g.fastest_read_us)
    streams = int(g.read_way.split()[-1])
    read_cell = (f"{us_text(g.fastest_read_us)} us, {g.gbps(g.fastest_read_us):.1f} GB/s ({streams} stream"
                 f"{'s' if streams > 1 else ''} per thread)")
    if g.kernel_us is None:
        kernel_cells = [f"{g.variant}: FAILED verification, not timed", "-", "-"]
    else:
        khi, klo = g.pct_of_rooflines(g.kernel_us)
        kernel_cells = [f"{g.variant} {us_text(g.kernel_us)} us, {g.gbps(g.kernel_us):.1f} GB/s", f"{khi:.0f}-{klo:.0f}",
                        f"{g.kernel_us / g.fastest_read_us:.2f}"]
    return " | ".join([str(g.round + 1), f"w{g.bits}", f"{g.roofline_before:.1f} / {g.roofline_after:.1f} GB/s",
                       read_cell, f"{hi:.0f}-{lo:.0f}", *kernel_cells])


# a row under this many times an empty call's cost after the flush is a latency as much as a bandwidth (the
# sweep's own rule for records without a fixed cost)
CALL_BOUND = 20


def summary(readings: list[RowReading], llc_bytes: int | None = None,
            empty_call_us: float | None = None) -> list[str]:
    """Per width, medians over the rounds: the read row's and the kernel row's share of the mean of the two
    rooflines around each, and the kernel row against the read row of the same round; then what a read row
    above its rooflines means (``llc_bytes``: the last-level cache, None when unknown), and which rows are short
    enough for the call's own cost (``empty_call_us``: an empty call after the flush) to weigh."""
    lines = ["width | rounds | read row, % of the roofline (median, range) | kernel row, % of the roofline "
             "(median, range) | kernel / read row (median, range) | kernel(s)", "---|---:|---|---|---|---"]
    for b in dict.fromkeys(g.bits for g in readings):
        mine = [g for g in readings if g.bits == b]
        read = [g.pct_of_mean_roofline(g.fastest_read_us) for g in mine]
        timed = [g for g in mine if g.kernel_us is not None]
        kern = [g.pct_of_mean_roofline(g.kernel_us) for g in timed]
        ratio = [g.kernel_us / g.fastest_read_us for g in timed]

        def cell(values: list[float], fmt: str) -> str:
            if not values:
                return "- (not timed)"
            return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

        lines.append(f"w{b} | {len(mine)} | {cell(read, '.0f')} | {cell(kern, '.0f')} | {cell(ratio, '.2f')} | "
                     + ", ".join(dict.fromkeys(g.variant for g in mine)))
    above = [g for g in readings if g.pct_of_rooflines(g.fastest_read_us)[0] > 100]
    fits = list(dict.fromkeys(f"w{g.bits}" for g in above if llc_bytes is not None and g.nbytes <= llc_bytes))
    larger = list(dict.fromkeys(f"w{g.bits}" for g in above if f"w{g.bits}" not in fits))
    if fits:
        lines += ["", f"{', '.join(fits)}: a read row above the faster roofline, with bytes that fit in the last-level "
                      "cache: part of them may have come from cache (a flush is not a guarantee). Those rows say "
                      "nothing about the wall; use a larger shape or --flush-mib."]
    if larger:
        lines += ["", f"{', '.join(larger)}: a read row above the faster roofline, with more bytes than the "
                      "last-level cache: the bandwidth moved during the round (the rooflines are taken at its two "
                      "ends, each in about a second, while a row's best group may fall in a faster minute). In "
                      "those rounds the roofline is not the wall the rows had."]
    if empty_call_us is not None:
        short = list(dict.fromkeys(f"w{g.bits}" for g in readings if g.fastest_read_us < CALL_BOUND * empty_call_us))
        if short:
            lines += ["", f"{', '.join(short)}: read rows under {CALL_BOUND} times an empty call after the flush "
                          f"({empty_call_us:.1f} us): launching the call weighs in those rows as well as the bytes "
                          "(in the kernel's row more than in the read's); read them as latencies, and measure "
                          "the wall on a larger shape."]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x14336")
    ap.add_argument("--threads", type=int, default=len(system.affinity()))
    ap.add_argument("--bits", default="8,4,3,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200, help="calls per group, as the sweep's --iters (default 200)")
    ap.add_argument("--reps", type=int, default=3, help="groups per row, as the sweep's --reps (default 3)")
    add_flush_mib(ap, "MiB read before every call")
    ap.add_argument("--variant", help="the int8 variant to time (default: --kernel auto's choice for each width)")
    ap.add_argument("--md", metavar="PATH", help="also write the tables as markdown")
    args = ap.parse_args(argv)
    check_flush_mib(ap, args.flush_mib)
    try:
        M, K = map(int, args.shape.split("x"))
        if M < 1 or K < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--shape: {args.shape!r}; give MxK with both at least 1, e.g. 4096x14336")
    try:
        widths = [int(b) for b in args.bits.split(",")]
    except ValueError:
        widths = []
    if not widths or any(b not in (8, 4, 3, 2) for b in widths):
        ap.error(f"--bits: {args.bits!r}; give widths from 8,4,3,2 separated by commas")
    for flag, value in (("--threads", args.threads), ("--rounds", args.rounds), ("--iters", args.iters),
                        ("--reps", args.reps)):
        if value < 1:
            ap.error(f"{flag}: {value}; give 1 or more")
    if args.variant is not None:
        for b in widths:
            names = [s.variant for s in kernels.variants(b, "i8")]
            if args.variant not in names:
                ap.error(f"--variant: no w{b} int8 variant {args.variant!r} on this CPU; choose from "
                         f"{', '.join(names) or 'none'}")
    numba.set_num_threads(args.threads)
    lines = [f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {args.shape}, cold ({args.flush_mib} MiB "
             f"flush), each row the best group mean of {args.reps} groups of {args.iters} calls as a sweep row, "
             f"{args.rounds} rounds; read roofline as the sweep takes it, before and after each round", "",
             *HEADER]
    print("\n".join(lines), flush=True)

    readings: list[RowReading] = []

    def shown(g: RowReading) -> None:
        readings.append(g)
        lines.append(reading_line(g))
        print(lines[-1], flush=True)

    stopped = False
    try:
        measure(M, K, widths, args.threads, args.rounds, args.iters, args.reps, args.flush_mib, args.variant,
                on_reading=shown)
    except calibrate.CalibrationFailed as exc:  # no variant of a width matches the reference: nothing to time
        print(f"row_read.py: {exc}; no kernel row can be timed", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # keep the rounds that ended
        stopped = True
        lines += ["", f"Stopped (Ctrl-C) after {len({g.round for g in readings})} of {args.rounds} rounds; the "
                      "summary covers those."]
        print(lines[-1], file=sys.stderr)
    empty = None if stopped or not readings else measure_call_overhead(  # (not after a Ctrl-C: the user wants out)
        args.threads, calls=200, flusher=CacheFlusher(args.flush_mib), cold_calls=30).cold_median_us
    table = ["", *summary(readings, machine_llc_bytes(), empty)] if readings else []
    lines += table
    print("\n".join(table))
    if args.md:
        Path(args.md).write_text("\n".join(lines) + "\n")
    return 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())

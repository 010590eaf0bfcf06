"""MNN and gemvbw in the same minutes: the MNN bar of the x86 issue from rounds of the two side by side.

    python benchmarks/paired.py --mnn-bin PATH/run_test.out [--threads 1,2] [--rounds 4] [--shape 4096x14336]
                                [--bits 8,4,3,2] [--no-read-row] [--flush-mib N] [--md PATH]

run.py sets MNN's better run beside gemvbw's better sweep, each taken minutes from the other; on a host
whose bandwidth moves 2x within a minute, that ratio is as much the minutes' as the kernels'. Here, per thread
count and width, each round runs MNN's `run_test.out speed/GemvBW 0 2 T` for that width (MNN_GEMVBW_BITS) and
gemvbw's default `gemvbw sweep --bits N` (--kernel auto, --act auto, 3 groups of 200 cold calls, every kernel
verified first: the method of MNN's test) back to back on the same shape, some 30 s a round at 4096x14336,
the order swapped every round so that a drift within a round favours neither side over two. (Until 2026-12-07 a
round ran each side on every width, a minute or more between one side's w8 and the other's.) Per width it prints
each round's MNN / gemvbw latency ratio, their median, the rounds that meet the bar (ratio >= 1.3, or gemvbw at
>= 95 % of its read roofline and no slower), the read roofline gemvbw's sweep measured just before timing the
width, each side's share of it (MNN's taken seconds from it, not during it), and which kernel gemvbw's
calibration chose in each round, so that a round lost to a choice shows as one. Between the two (unless
--no-read-row) it times a plain read of the width's bytes as a sweep row (the best group mean of 3 groups of
200 calls, each after the flush, in the fastest of the read roofline's 1, 4 and 8 streams per thread) and
prints MNN / read and gemvbw / read: what a kernel costing nothing beyond its reads would show against MNN in
that round, and how far gemvbw's row is from it. Both sides read the sweep's default flush before every call,
or --flush-mib's (MNN's through MNN_GEMVBW_FLUSH_MIB). A build of MNN that ignores MNN_GEMVBW_BITS times every
width each time (slower; only the one asked for is kept). Ctrl-C prints (and writes to --md) the rounds that
ended, and exits 130. Nothing is asserted; a round that fails (a kernel that fails verification, MNN's test
failing) stops the script with that error.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from typing import NamedTuple

import numba

from flush_option import add_flush_mib, check_flush_mib, flush_mib_or_sweeps, sweep_flush_flags  # benchmarks/
from gemvbw.harness import CacheFlusher
from gemvbw.settings import DEFAULTS, SettingsError, parse_shape
from bars import AT_WALL, MNN_BAR as BAR, beside, meets_mnn_bar as meets_bar  # benchmarks/
from run import gemvbw, mnn_bytes, mnn_gbps, run_mnn, thread_counts  # benchmarks/
from row_read import row_us  # benchmarks/
from wall import read_runs  # benchmarks/


WIDTHS = (8, 4, 3, 2)


class Round(NamedTuple):
    """One round at one thread count, shape and width: MNN's and gemvbw's us/iter and gemvbw's %read, each keyed
    by the width (empty where a side gave no figure), and the read roofline (GB/s) of gemvbw's sweep in the
    round; ``mnn_first``: the order they ran in; ``gemvbw_variant``: the kernel ``--kernel auto`` timed in that
    round (its calibration may choose another one in the next); ``read_row_us``: a plain read of the width's
    bytes timed as a row between the two (None: not timed)."""
    mnn_us: dict[int, float]
    gemvbw_us: dict[int, float]
    gemvbw_pct_read: dict[int, float]
    read_gbps: float
    mnn_first: bool
    gemvbw_variant: dict[int, str]
    read_row_us: dict[int, float] | None = None


def read_row_us(shape: str, bits: int, threads: int, flush_mib: int | None = None) -> float:
    """A plain read of the bytes MNN and gemvbw count for ``bits`` at ``shape``, timed as a sweep row (the best
    group mean of 3 groups of 200 calls, each after the flush) in the fastest of the read roofline's ways (us):
    what a kernel that cost nothing beyond its reads would take in this minute."""
    nbytes, mib = mnn_bytes(shape, bits), flush_mib_or_sweeps(flush_mib)
    print(f"+ a plain read of w{bits}'s {nbytes} bytes as a row, {threads} thread(s), {mib} MiB flush",
          file=sys.stderr, flush=True)
    numba.set_num_threads(threads)  # before read_runs: a 1-thread read is compiled without a parallel launch
    flusher = CacheFlusher(mib)
    return min(row_us(f, DEFAULTS["iters"], DEFAULTS["reps"], flusher) for f in read_runs(nbytes, threads).values())


def mnn_first(index: int) -> bool:
    """Round 0 runs MNN first, round 1 gemvbw first, and so on."""
    return index % 2 == 0


def run_round(mnn_bin: str, threads: int, shape: str, index: int, bits: int, flush_mib: int | None = None,
              read_row: bool = True) -> Round:
    """Round ``index`` of width ``bits``: MNN, the plain read row (``read_row``) and gemvbw's sweep, or the
    other way round; ``flush_mib`` None: the sweep's default flush, MNN told the same."""
    M, K = shape.split("x")

    def ours() -> dict:
        return gemvbw("sweep", "--M", M, "--K", K, "--bits", str(bits), *sweep_flush_flags(flush_mib),
                      "--threads", str(threads))

    def theirs() -> dict[int, float]:
        widths = run_mnn(mnn_bin, threads, shape, flush_mib_or_sweeps(flush_mib), bits)[1]
        if not widths:
            raise SystemExit(f"MNN printed no figures for {shape}: a build that ignores MNN_GEMVBW_M/K runs only "
                             "4096x14336 (see benchmarks/peers/README.md)")
        return widths

    def read() -> dict[int, float] | None:
        return {bits: read_row_us(shape, bits, threads, flush_mib)} if read_row else None

    first = mnn_first(index)
    if first:
        mnn, plain, doc = theirs(), read(), ours()
    else:
        doc, plain, mnn = ours(), read(), theirs()
    rows = {r["bits"]: r for r in doc["results"] if r.get("best_avg_us") is not None}
    return Round(mnn, {b: r["best_avg_us"] for b, r in rows.items()},
                 {b: r["pct_read"] for b, r in rows.items()}, doc["roofline"]["read_gbps"], first,
                 {b: r["variant"] for b, r in rows.items() if r.get("variant")}, plain)


def variants(rounds: list[Round], bits: int) -> str:
    """The kernel gemvbw timed at ``bits`` in each round, once when every round timed the same one."""
    names = [r.gemvbw_variant.get(bits, "?") for r in rounds]
    return f"{names[0]} (every round)" if len(set(names)) == 1 else " / ".join(names)


def table(rounds: list[Round], shape: str, threads: int) -> list[str]:
    """The markdown of one thread count's rounds on one shape (each width's rounds in the order they ran)."""
    ran = {bits: sum(bits in r.gemvbw_us or bits in r.mnn_us for r in rounds) for bits in WIDTHS}
    ran = {bits: n for bits, n in ran.items() if n}  # the widths asked for (--bits)
    count = max(ran.values(), default=0)
    plain = any(r.read_row_us for r in rounds)  # rounds with a plain read row: two more columns
    extra = " | MNN / plain read row per round | gemvbw / plain read row per round" if plain else ""
    lines = [f"#### {shape}, {threads} thread(s), {count} rounds per width", "",
             "width | MNN / gemvbw per round | median | rounds meeting the bar | gemvbw %read per round | "
             f"MNN % of the round's read | read GB/s per round | gemvbw's variant per round (--kernel auto){extra}",
             "---|---|---:|---:|---|---|---|---" + "|---|---" * plain]
    for bits in ran:
        both = [r for r in rounds if bits in r.mnn_us and bits in r.gemvbw_us]
        if not both:
            lines.append(f"w{bits} | - | - | - | - | - | - | -" + " | -" * (2 * plain))
            continue
        ratios = [r.mnn_us[bits] / r.gemvbw_us[bits] for r in both]
        met = sum(meets_bar(q, r.gemvbw_pct_read[bits]) for q, r in zip(ratios, both))
        theirs = [100 * mnn_gbps(r.mnn_us[bits], shape, bits) / r.read_gbps for r in both]
        line = (f"w{bits} | {' '.join(beside(q, BAR, 2) for q in ratios)} | "
                f"{beside(statistics.median(ratios), BAR, 2)} | {met} of {len(both)} | "
                f"{' '.join(beside(r.gemvbw_pct_read[bits], AT_WALL, 0) for r in both)} | "
                f"{' '.join(f'{p:.0f}' for p in theirs)} | {' '.join(f'{r.read_gbps:.1f}' for r in both)} | "
                f"{variants(both, bits)}")
        if plain:
            read = [(r.read_row_us or {}).get(bits) for r in both]
            line += " | " + " ".join("-" if us is None else f"{r.mnn_us[bits] / us:.2f}" for r, us in zip(both, read))
            line += " | " + " ".join("-" if us is None else f"{r.gemvbw_us[bits] / us:.2f}" for r, us in zip(both, read))
        lines.append(line)
    lines += ["", f"A round meets the bar with MNN / gemvbw >= {BAR} or gemvbw at >= {AT_WALL:.0f} % of its read "
              "and no slower. Each round is one width: MNN's test on that width and gemvbw's sweep of it back to "
              "back, MNN first in the odd-numbered rounds; the read is the one gemvbw's sweep measured just before "
              "timing the width."]
    if plain:
        lines[-1] += (" Between the two, a plain read of the same bytes timed as a row (best of 3 x 200 cold "
                      "calls, the fastest of 1, 4 and 8 streams per thread): MNN / read is the ratio a kernel "
                      "costing nothing beyond its reads would have shown against MNN in the round, gemvbw / read "
                      "what gemvbw's row cost beyond such a read.")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnn-bin", required=True, help="a run_test.out binary you built from MNN")
    ap.add_argument("--threads", help="thread counts, comma list (default: 1 and all CPUs in the affinity mask)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per thread count and shape (default 4)")
    ap.add_argument("--shape", action="append", help="MxK, repeatable (default 4096x14336)")
    ap.add_argument("--bits", default="8,4,3,2", help="widths, comma list of 8, 4, 3, 2 (default all four)")
    ap.add_argument("--read-row", action=argparse.BooleanOptionalAction, default=True,
                    help="time a plain read of each width's bytes as a row in every round (default: on)")
    add_flush_mib(ap, "MiB both sides read before every call", sweep_default=True)
    ap.add_argument("--md", help="also write the tables to this markdown file")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    check_flush_mib(ap, args.flush_mib)
    if not os.access(args.mnn_bin, os.X_OK):
        ap.error(f"--mnn-bin {args.mnn_bin}: not an executable file; build MNN's run_test.out (see "
                 "benchmarks/peers/README.md)")
    try:
        shapes = ["x".join(map(str, parse_shape(s))) for s in args.shape or ["4096x14336"]]
    except SettingsError as e:
        ap.error(str(e))
    if args.threads and not re.fullmatch(r"[1-9]\d*(,[1-9]\d*)*", args.threads):
        ap.error(f"--threads {args.threads}: a comma list of positive integers, e.g. 1,2")
    if not re.fullmatch(r"[8432](,[8432])*", args.bits):
        ap.error(f"--bits {args.bits}: a comma list of widths among 8, 4, 3, 2, e.g. 8,4")
    widths = [b for b in WIDTHS if str(b) in args.bits.split(",")]
    counts = thread_counts(args.threads)
    lines: list[str] = []
    stopped = False
    for shape, t in ((shape, t) for shape in shapes for t in counts):
        rounds: list[Round] = []
        try:
            for i in range(args.rounds):
                for bits in widths:
                    rounds.append(run_round(args.mnn_bin, t, shape, i, bits, args.flush_mib, args.read_row))
        except KeyboardInterrupt:  # keep the rounds that ended
            stopped = True
        md = table(rounds, shape, t) if rounds else []
        if stopped:
            md += [f"Stopped (Ctrl-C) at {shape}, {t} thread(s), after {len(rounds)} of "
                   f"{args.rounds * len(widths)} rounds" + ("; the table above covers those." if rounds else "."), ""]
        print("\n".join(md), flush=True)
        lines += md
        if stopped:
            break
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines))
    return 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())

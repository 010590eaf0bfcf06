"""Each int8 tier against the memory wall measured the way the kernels are: a plain read of the same bytes.

    python benchmarks/wall.py [--shape 4096x14336] [--threads 2] [--rounds 9] [--bits 8,4,3,2] [--flush-mib N]
                              [--md PATH]
    python benchmarks/wall.py --read-ratios [--shape ...] [--threads 2] [--rounds 9] [--flush-mib N]
    python benchmarks/wall.py --latency-ratios [--shape ...] [--threads 2] [--rounds 9] [--flush-mib N] [--md PATH]

The sweep's read roofline is taken once, at the start, over a 256 MiB buffer with no flush.
On a shared machine the bandwidth moves while a sweep runs (seen here: 30 and 57 GB/s within
minutes), so a kernel's %read can mislead. This script times, in one process and interleaved
round by round (each round in a rotated order), every int8 tier and a multithreaded read of
exactly the kernel's logical bytes, each after the same flush (the sweep's default: 64 MiB, MNN's, or
four times the last-level cache where that is more, since part of a matrix outlived a flush of twice the
L3; --flush-mib sets another), 20 calls per round, and
reports the medians and each tier's share of the read: how close the kernel is to the wall
it actually had. The read is taken as the sweep's roofline takes it: one sequential stream per
thread, and 4 and 8 streams per thread, each timed in the rotation, the fastest median being
the wall (the table says which). Nothing here is asserted; run it on a quiet machine.

--read-ratios asks what the latency ratios t(wN)/t(w8) can be on this machine: it times no kernel,
only plain reads of each width's logical bytes (every way above), all widths interleaved in the same
rounds, and prints each width's fastest read and its latency against w8's beside the bytes' ratio.
A kernel at the wall has the read's ratio, not the bytes', where the two differ.

--latency-ratios puts the two side by side: every width's int8 variants and every width's plain reads, all
in the same rounds, so that each width's fastest kernel is set against w8's fastest kernel and each width's
read against w8's read, all at the same minutes (a sweep takes the widths one after another, minutes apart,
and this machine's bandwidth moves in that time).

Every variant is checked against the numpy reference before it is timed; one that fails is named and left
out, never timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from gemvbw import kernels, system
from gemvbw.harness import CacheFlusher, time_groups
from gemvbw.metrics import logical_bytes
from gemvbw.quant import random_activations, random_quantized
from gemvbw.roofline import READ_STREAMS, _parallel_sum, _parallel_sum_streams, read_buffer
from gemvbw.verify import reference_gemv, verify

from bars import LATENCY, beside, verdict  # benchmarks/, on sys.path when this runs
from flush_option import SWEEP_FLUSH_MIB, add_flush_mib, check_flush_mib  # benchmarks/, on sys.path when this runs


def read_runs(nbytes: int, threads: int) -> dict[str, Callable[[], object]]:
    """The read roofline's three ways of reading ``nbytes`` ('read 1', 'read 4', 'read 8': streams per thread),
    each a call of the compiled function, as the kernels are called."""
    buf = read_buffer(nbytes)
    one = kernels.compiled(_parallel_sum, buf, threads)
    several = kernels.compiled(_parallel_sum_streams, buf, threads, 4)
    runs = {"read 1": lambda: one(buf, threads)}
    for s in READ_STREAMS[1:]:
        runs[f"read {s}"] = lambda s=s: several(buf, threads, s)
    return runs


def interleaved_medians(runs: dict[str, Callable[[], object]], rounds: int, calls: int = 20,
                        flush_mib: int = SWEEP_FLUSH_MIB) -> dict[str, float]:
    """Median cold latency (us) of each run: every round times ``calls`` calls of each, each after a
    ``flush_mib`` MiB flush, in an order rotated by one per round, so that a bandwidth drifting during the
    rounds is shared."""
    for f in runs.values():
        f()  # compiled and warm
    flush = CacheFlusher(flush_mib)
    names = list(runs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            samples[n].append(time_groups(runs[n], calls, 1, flush).best_avg_us)
    return {n: statistics.median(v) for n, v in samples.items()}


def verified_call(spec: kernels.KernelSpec, qm, x: np.ndarray, y: np.ndarray,
                  reference: np.ndarray | None = None) -> Callable[[], object] | None:
    """A call of ``spec`` on qm, x and y, or None, named on stderr, when it does not match the numpy reference
    (``reference``: the one for spec's activations where the caller holds it)."""
    if reference is None:
        reference = reference_gemv(qm, spec.reference_x(x, qm.block))
    check = verify(spec, qm, x, reference)
    if not check.ok:
        print(f"w{qm.bits} {spec.variant}: FAILED verification (max rel err {check.max_rel_err:.2e} > "
              f"{check.tolerance:.0e}); not timed", file=sys.stderr, flush=True)
        return None
    return kernels.call_on(spec.bind(qm), x, y)


def verified_runs(qm, x: np.ndarray, y: np.ndarray, prefix: str = "") -> dict[str, Callable[[], object]]:
    """{prefix + variant: a call} of every int8 variant of qm's width that matches the numpy reference (the int8
    variants share one: x quantized per block); a variant that does not is named on stderr and left out."""
    runs, references = {}, {}
    for spec in kernels.variants(qm.bits, "i8"):
        if spec.activations not in references:
            references[spec.activations] = reference_gemv(qm, spec.reference_x(x, qm.block))
        call = verified_call(spec, qm, x, y, references[spec.activations])
        if call is not None:
            runs[prefix + spec.variant] = call
    return runs


def measure(M: int, K: int, bits: int, threads: int, rounds: int, calls: int = 20,
            flush_mib: int = SWEEP_FLUSH_MIB) -> dict[str, float]:
    """Median cold latency (us) per tier and of the plain read with s streams per thread ('read s'), interleaved."""
    x = random_activations(K, 0)
    y = np.empty(M, np.float32)
    qm = random_quantized(M, K, bits, seed=bits)
    runs = read_runs(qm.logical_bytes, threads) | verified_runs(qm, x, y)
    return interleaved_medians(runs, rounds, calls, flush_mib) | {"_bytes": qm.logical_bytes}


def read_ratios(M: int, K: int, widths: list[int], threads: int, rounds: int,
                flush_mib: int = SWEEP_FLUSH_MIB) -> list[str]:
    """Markdown lines: each width's plain read (fastest way, median, interleaved with every other width's) and
    its latency and bytes against w8's."""
    nbytes = {b: logical_bytes(M, K, b, 64, 2) for b in widths}
    runs = {f"w{b} {way}": f for b in widths for way, f in read_runs(nbytes[b], threads).items()}
    med = interleaved_medians(runs, rounds, flush_mib=flush_mib)
    best = {b: min((n for n in med if n.startswith(f"w{b} ")), key=med.get) for b in widths}  # "wB read S"
    fastest = {b: med[best[b]] for b in widths}
    lines = ["width | bytes | plain read (fastest way, median) | t(wN)/t(w8) of the read | bytes / w8's bytes",
             "---|---:|---|---:|---:"]
    for b in widths:
        streams = int(best[b].split()[-1])
        ratio = (f"{fastest[b] / fastest[8]:.2f}", f"{nbytes[b] / nbytes[8]:.2f}") if 8 in fastest else ("-", "-")
        lines.append(f"w{b} | {nbytes[b]} | {fastest[b]:.0f} us, {nbytes[b] / fastest[b] / 1e3:.1f} GB/s ({streams} "
                     f"stream{'s' if streams > 1 else ''} per thread) | {ratio[0]} | {ratio[1]}")
    return lines


def latency_ratios(M: int, K: int, widths: list[int], threads: int, rounds: int,
                   flush_mib: int = SWEEP_FLUSH_MIB) -> list[str]:
    """Markdown lines: every width's verified int8 variants and plain reads of its bytes, all interleaved in the
    same rounds; per width its fastest read and fastest variant (medians), and each against w8's. Every width's
    matrix and repacked copies are held at once (about 0.5 GB at 4096x14336 for w8..w2): interleaving needs them
    all bound."""
    x = random_activations(K, 0)
    y = np.empty(M, np.float32)
    runs, nbytes = {}, {}
    for b in widths:
        qm = random_quantized(M, K, b, seed=b)
        nbytes[b] = qm.logical_bytes
        runs |= {f"w{b} {way}": f for way, f in read_runs(nbytes[b], threads).items()}
        runs |= verified_runs(qm, x, y, f"w{b} ")
    med = interleaved_medians(runs, rounds, flush_mib=flush_mib)
    reads, fastest = {}, {}
    for name, us in med.items():
        width, what = name.split(" ", 1)
        pick = reads if what.startswith("read ") else fastest
        if width not in pick or us < med[pick[width]]:
            pick[width] = name
    lines = ["width | bytes / w8's | plain read (fastest way, median) | read t(wN)/t(w8) | fastest variant (median) "
             "| % of the read | kernel t(wN)/t(w8) (bar)", "---|---:|---|---:|---|---:|---:"]
    for b in widths:
        w = f"w{b}"
        read, kern = med[reads[w]], med[fastest[w]] if w in fastest else None
        streams = int(reads[w].split()[-1])
        read_cell = f"{read:.0f} us, {nbytes[b] / read / 1e3:.1f} GB/s ({streams} stream{'s' if streams > 1 else ''} per thread)"
        ratios = ["-", "-", "-"]
        if 8 in nbytes:
            ratios[:2] = f"{nbytes[b] / nbytes[8]:.2f}", f"{read / med[reads['w8']]:.2f}"
            if kern is not None and "w8" in fastest:
                q = kern / med[fastest["w8"]]
                ratios[2] = (f"{beside(q, LATENCY[b], 2)}, {verdict(q, LATENCY[b], at_most=True)} <= {LATENCY[b]}"
                             if b in LATENCY else f"{q:.2f}")
        kern_cell = "- (none verified)" if kern is None else \
            f"{fastest[w].split(' ', 1)[1]} {kern:.0f} us"
        share = "-" if kern is None else f"{100 * read / kern:.0f}"
        lines.append(f"{w} | {ratios[0]} | {read_cell} | {ratios[1]} | {kern_cell} | {share} | {ratios[2]}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x14336")
    ap.add_argument("--threads", type=int, default=len(system.affinity()))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--bits", default="8,4,3,2")
    add_flush_mib(ap, "MiB read before every call; 0: warm")
    ap.add_argument("--md", metavar="PATH", help="also write the table as markdown")
    ap.add_argument("--read-ratios", action="store_true",
                    help="time only plain reads of each width's bytes, interleaved across widths (see above)")
    ap.add_argument("--latency-ratios", action="store_true",
                    help="every width's variants and reads interleaved in the same rounds; ratios against w8's")
    args = ap.parse_args(argv)
    check_flush_mib(ap, args.flush_mib, warm_ok=True)
    M, K = map(int, args.shape.split("x"))
    numba.set_num_threads(args.threads)
    if args.read_ratios or args.latency_ratios:
        widths = [int(b) for b in args.bits.split(",")]
        what, table = (("every width's variants and reads", latency_ratios) if args.latency_ratios
                       else ("every width's reads", read_ratios))
        lines = [f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {args.shape}, cold ({args.flush_mib} "
                 f"MiB flush), median of {args.rounds} rounds of 20 calls, {what} interleaved", "",
                 *table(M, K, widths, args.threads, args.rounds, args.flush_mib)]
        print("\n".join(lines))
        if args.md:
            Path(args.md).write_text("\n".join(lines) + "\n")
        return 0
    lines = [f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {args.shape}, cold ({args.flush_mib} MiB "
             f"flush), median of {args.rounds} interleaved rounds of 20 calls", "",
             "width | plain read of the same bytes | tier: latency, GB/s, share of the read", "---|---|---"]
    for bits in map(int, args.bits.split(",")):
        t = measure(M, K, bits, args.threads, args.rounds, flush_mib=args.flush_mib)
        nbytes = t.pop("_bytes")
        reads = {s: t.pop(f"read {s}") for s in READ_STREAMS}
        streams = min(reads, key=reads.get)
        read = reads[streams]
        cells = [f"{v} {us:.0f} us, {nbytes / us / 1e3:.1f} GB/s, "
                 f"{100 * read / us:.0f}%" for v, us in sorted(t.items(), key=lambda kv: kv[1])]
        tried = ", ".join(f"{s}: {nbytes / us / 1e3:.1f}" for s, us in reads.items())
        per_thread = f"{streams} stream{'s' if streams > 1 else ''} per thread"
        lines.append(f"w{bits} | {read:.0f} us, {nbytes / read / 1e3:.1f} GB/s ({per_thread}; "
                     f"{tried} GB/s) | " + "; ".join(cells))
        print(lines[-1] if len(lines) > 5 else "\n".join(lines), flush=True)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a cold call costs beyond its bytes: each int8 variant at one shape, cold, with its code warm, warm, and
on the tiny matrix of its fixed cost, beside a plain read of the same bytes.

    python benchmarks/call_cost.py [--shape 1024x1024] [--threads 1] [--bits 8] [--rounds 15]
                                   [--variants packed-16c4-avx512vnni-zmm,packed-8c4-avxvnni] [--flush-mib N]

For each variant (default: every int8 variant of the width this CPU runs), interleaved round by round in a
rotated order, 20 calls each per round, the medians of:

- ``cold``: each call after the flush, as the sweep times it;
- ``code warm``: each call after the flush and then one untimed call of the same variant bound to the tiny
  matrix of its fixed cost, which brings the kernel's machine code, numba's argument handling and the
  Python call path back into cache but not this shape's weights, x, y or workspace;
- ``warm``: no flush;
- ``fixed``: the tiny matrix's own call after the flush (the sweep's ``fixed us``);

and ``read 1``, one stream per thread over exactly the variant's logical bytes after the flush (the read
roofline's one-stream way; the sweep's read takes the fastest of three ways over 256 MiB). cold minus code
warm is what the cold code costs at this shape; code warm against the read is what the kernel's own work
costs. Every variant is checked against the numpy reference before it is timed (one that fails is named and
left out). Nothing is asserted; run it on a quiet machine and more than once.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numba
import numpy as np

from gemvbw import kernels, system
from gemvbw.harness import CacheFlusher, time_groups
from gemvbw.quant import random_activations, random_quantized
from gemvbw.runner import fixed_cost_call
from gemvbw.settings import SettingsError, parse_shape
from flush_option import add_flush_mib, check_flush_mib  # benchmarks/, on sys.path when this script runs
from wall import read_runs, verified_runs


class FlushThenCall:
    """A flusher that flushes, then makes one untimed call (time_groups times only what follows it)."""

    def __init__(self, flusher: CacheFlusher, call):
        self.flusher, self.call, self.flush_mib = flusher, call, flusher.flush_mib

    def flush(self) -> None:
        self.flusher.flush()
        self.call()


def tiny_runs(bits: int, block: int, wanted: set[str]) -> dict:
    """{variant: a call of it bound to the fixed cost's tiny matrix} for the int8 variants of this CPU in ``wanted``."""
    return {spec.variant: fixed_cost_call(spec, bits, block, 2)[0]
            for spec in kernels.variants(bits, "i8") if spec.variant in wanted}


WAYS = ("cold", "code warm", "warm", "fixed")


def measure(M: int, K: int, bits: int, threads: int, variants: list[str] | None, rounds: int,
            flush_mib: int, calls: int = 20) -> tuple[dict[str, dict[str, float]], float, int]:
    """({variant: {way: median us}} for every variant and way (WAYS), the read's median us, the logical bytes)."""
    x, y = random_activations(K, 0), np.empty(M, np.float32)
    qm = random_quantized(M, K, bits, seed=bits)
    verified = verified_runs(qm, x, y)
    names = [v for v in verified if variants is None or v in variants]
    tiny = tiny_runs(bits, qm.block, set(names))
    flush, none = CacheFlusher(flush_mib), CacheFlusher(0)
    timed: dict[tuple[str, str], tuple] = {}
    for v in names:
        tiny[v]()  # compiled (the same machine code as the shape's) and warm
        timed[v, "cold"] = (verified[v], flush)
        timed[v, "code warm"] = (verified[v], FlushThenCall(flush, tiny[v]))
        timed[v, "warm"] = (verified[v], none)
        timed[v, "fixed"] = (tiny[v], flush)
    timed["read 1", ""] = (read_runs(qm.logical_bytes, threads)["read 1"], flush)
    keys = list(timed)
    samples: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            call, flusher = timed[k]
            samples[k].append(time_groups(call, calls, 1, flusher).best_avg_us)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {v: {w: med[v, w] for w in WAYS} for v in names}, med["read 1", ""], qm.logical_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="1024x1024")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bits", type=int, choices=(8, 4, 3, 2), default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--variants", default="", help="comma-separated int8 variants (default: all this CPU runs)")
    add_flush_mib(ap, "MiB read before every cold call")
    args = ap.parse_args(argv)
    try:
        M, K = parse_shape(args.shape, "--shape")
    except SettingsError as e:
        ap.error(str(e))
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    check_flush_mib(ap, args.flush_mib)  # a warm run would have nothing to compare
    if not 1 <= args.threads <= len(system.affinity()):
        ap.error(f"--threads: 1 to {len(system.affinity())}, the CPUs this process may run on")
    known = [s.variant for s in kernels.variants(args.bits, "i8")]
    wanted = [v for v in args.variants.split(",") if v] or None
    unknown = [v for v in wanted or [] if v not in known]
    if unknown:
        ap.error(f"--variants: {', '.join(unknown)} not among this CPU's w{args.bits} int8 variants: "
                 f"{', '.join(known)}")
    numba.set_num_threads(args.threads)
    per_variant, read, nbytes = measure(M, K, args.bits, args.threads, wanted, args.rounds, args.flush_mib)
    print(f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {M}x{K} w{args.bits}, {args.flush_mib} MiB "
          f"flush, median of {args.rounds} interleaved rounds of 20 calls")
    print(f"read 1 (one stream per thread over the same {nbytes} bytes, cold): {read:.1f} us, "
          f"{nbytes / read / 1e3:.1f} GB/s")
    print("variant | cold us | code warm us | warm us | fixed us | cold - code warm | code warm / read")
    print("---|---:|---:|---:|---:|---:|---:")
    for v, m in per_variant.items():
        print(f"{v} | {m['cold']:.1f} | {m['code warm']:.1f} | {m['warm']:.1f} | {m['fixed']:.1f} | "
              f"{m['cold'] - m['code warm']:.1f} | {m['code warm'] / read:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

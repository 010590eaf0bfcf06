"""How many groups of rows a column-tile kernel should read at once per thread, against the wall.

    python benchmarks/tile_streams.py [--threads 2] [--rounds 9] [--tier avx512vnni-zmm] [--streams 2,3,4,6]
                                      [--bits 8,4,3,2] [--shape 4096x14336]

gemvbw's int8 kernels read two groups of rows per thread at once (gemvbw.kernels.streams; tile.STREAMS).
This script binds one tile tier with each stream count given, checks that they all give the same y bit
for bit, and times them interleaved in one process (each round in a rotated order) with the read
roofline's three reads of the same bytes (1, 4 and 8 streams per thread), each call after a 64 MiB
flush, 20 calls per round; it prints the medians and each one's share of the fastest read. Nothing is
asserted; run it on a quiet machine and more than once.
"""

from __future__ import annotations

import argparse
import sys

import numba
import numpy as np

from gemvbw import system
from gemvbw.kernels import tile
from gemvbw.quant import random_activations, random_quantized
from wall import interleaved_medians, read_runs  # benchmarks/, on sys.path when this script runs


def measure(M: int, K: int, bits: int, tier: str, counts: list[int], threads: int, rounds: int,
            calls: int = 20) -> tuple[dict[str, float], int]:
    x = random_activations(K, 0)
    y = np.empty(M, np.float32)
    qm = random_quantized(M, K, bits, seed=bits)
    runs = read_runs(qm.logical_bytes, threads)
    outs = []
    for n in counts:
        run = tile.bind(tier, qm, 4 * threads, None, n)
        runs[f"tile x{n}"] = lambda run=run: run(x, y)
        run(x, y)
        outs.append(y.copy())
    if not all(np.array_equal(outs[0], o) for o in outs[1:]):
        raise SystemExit(f"w{bits}: the stream counts give different y; not timed")
    return interleaved_medians(runs, rounds, calls), qm.logical_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x14336")
    ap.add_argument("--threads", type=int, default=len(system.affinity()))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tier", default="avx512vnni-zmm")
    ap.add_argument("--streams", default="2,3,4,6")
    ap.add_argument("--bits", default="8,4,3,2")
    args = ap.parse_args(argv)
    if args.tier not in tile.tile_tiers():
        ap.error(f"--tier: {args.tier!r} has no column tiles; one of {', '.join(tile.tile_tiers())}")
    from gemvbw.tiers import usable
    if args.tier not in {t.name for t in usable()}:
        ap.error(f"--tier: {args.tier} cannot run on this CPU (see gemvbw info)")
    M, K = map(int, args.shape.split("x"))
    counts = [int(c) for c in args.streams.split(",")]
    numba.set_num_threads(args.threads)
    print(f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {args.shape}, tier {args.tier}, cold "
          f"(64 MiB flush), median of {args.rounds} interleaved rounds of 20 calls; % of the fastest read")
    for bits in map(int, args.bits.split(",")):
        med, nbytes = measure(M, K, bits, args.tier, counts, args.threads, args.rounds)
        wall = min(us for n, us in med.items() if n.startswith("read"))
        print(f"w{bits}: " + "; ".join(f"{n} {us:.0f} us {nbytes / us / 1e3:.1f} GB/s {100 * wall / us:.0f}%"
                                       for n, us in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Column-tile and packed-4x2 variants against the wall: streams per thread, prefetch distance and hint.

    python benchmarks/tile_variants.py [--threads 2] [--rounds 9] [--tier avx512vnni-zmm] [--bits 8,4,3,2]
                                       [--shape 4096x14336] [--variants "streams=2;streams=4"] [--flush-mib N]
    python benchmarks/tile_variants.py --format 4x2 --tier avx2 --variants ";locality=3;ahead=4096,locality=3"

A variant is a list of the kernel tag's options, ``name=value`` joined by commas: ``ahead`` (bytes ahead to
prefetch, 0 for none; the column tiles' -prfm twins use gemvbw.kernels.tile.prfm_ahead: w4-w2 4096 (w3 and w2
2048 on Intel), w8 2048; packed-4x2 2048 for w4-w2), ``locality`` (the prefetch hint: 0 prefetchnta,
1 prefetcht2, 2 prefetcht1, 3 prefetcht0) and, for column tiles only, ``streams`` (groups of rows a thread
reads at once; gemvbw's kernels use 2, w3's and w2's twins 4 on Intel), ``turn`` (tiles of a group read before
the next group's turn, 1 or 2: gemvbw's kernels 1 but for stacked w2 on 16c4, 2), ``split`` (w3 only: 1 its codes
two whole and one split to a byte, gemvbw's layout; 0 two bit planes) and ``stack`` (w2 only: 1 four rows to a
byte, its plain tile's layout, reading tile.STACKED_STREAMS groups per thread in turns of tile.STACKED_TURN tiles,
2 in turns of two on 16c4 and 2 in turns of one on 8c4, unless ``streams`` or ``turn`` says otherwise; 0 one row's
four groups to a byte, its -prfm twin's); variants are separated by semicolons, and an empty one is gemvbw's own
kernel (:class:`gemvbw.kernels.tile.TileTag` and
:class:`gemvbw.kernels.packed.KernelTag` hold the defaults).
This script binds one tier's kernels of one format (``--format c4``: column tiles; ``4x2``: packed-4x2) with
each variant, checks that they all give the same y bit for bit and that it matches the numpy reference, and
times them interleaved in one process (each round in a rotated order) with the read roofline's three reads
of the same bytes (1, 4 and 8 streams per thread), each call after the sweep's default flush (or --flush-mib's),
20 calls per round; it prints the medians and each one's share of the fastest read. Nothing is asserted; run it
on a quiet machine and more than once.
"""

from __future__ import annotations

import argparse
import sys

import numba
import numpy as np

from gemvbw import kernels, system
from gemvbw.kernels import tile
from gemvbw.quant import random_activations, random_quantized
from gemvbw.verify import reference_gemv, relative_error
from flush_option import SWEEP_FLUSH_MIB, add_flush_mib, check_flush_mib  # benchmarks/, on sys.path when this script runs
from wall import interleaved_medians, read_runs

OPTIONS = {"streams": "nstreams", "ahead": "ahead", "locality": "locality", "split": "w3_split",
           "stack": "w2_stack", "turn": "turn"}


def parse_variants(text: str) -> dict[str, dict[str, int]]:
    """{label: TileTag options} from "streams=2;streams=4,ahead=0" (an empty variant: gemvbw's defaults)."""
    variants = {}
    for item in text.split(";"):
        item = item.strip()
        options = {}
        for pair in filter(None, (p.strip() for p in item.split(","))):
            name, _, value = pair.partition("=")
            if name not in OPTIONS or not value.strip().lstrip("-").isdigit():
                raise ValueError(f"{pair!r}: a variant's options are {', '.join(n + '=N' for n in OPTIONS)}")
            options[OPTIONS[name]] = int(value)
        variants[item or "default"] = options
    return variants


def binder(fmt: str):
    """bind(tier, qm, chunks, **options) of a format's kernels."""
    from gemvbw.kernels import packed

    return {"c4": tile.bind, "4x2": packed.bind}[fmt]


def check_options(fmt: str, tier: str, variants: dict[str, dict[str, int]]) -> None:
    """ValueError naming what a variant asks that the format's tag cannot build."""
    from gemvbw.kernels import packed

    for options in variants.values():
        if fmt == "c4":
            tile.TileTag(tier, 8, 2, **options)
        elif "nstreams" in options:
            raise ValueError("streams=N: packed-4x2 kernels read 2 groups per thread, not an option of theirs")
        elif "w3_split" in options:
            raise ValueError("split=N: packed-4x2 kernels have one w3 layout, not an option of theirs")
        elif "w2_stack" in options:
            raise ValueError("stack=N: packed-4x2 kernels have one w2 layout, not an option of theirs")
        elif "turn" in options:
            raise ValueError("turn=N: packed-4x2 kernels take turns step by step, not an option of theirs")
        else:
            packed.KernelTag(tier, 8, **options)


LARGEST_GROUP = max(tile.group_rows(t, 2) for t in tile.tile_tiers())  # stacked w2 on 16c4: 64 rows


def mismatch(outs: list[np.ndarray]) -> str:
    """Where the variants' y differ bit for bit, and why when it is only the rows some layout leaves over: a tile
    of 4R rows (stacked w2) leaves up to 4R - 1 rows to the width's f32 loop, which rounds differently from a
    tile that reads them."""
    differ = np.zeros(outs[0].shape[0], bool)
    for o in outs[1:]:
        differ |= outs[0] != o
    rows = np.flatnonzero(differ)
    M = differ.shape[0]
    said = f"{rows.size} of {M} rows, the first {rows[0]}"
    if rows[0] >= M - M % LARGEST_GROUP:
        said += (f": only rows after the last {LARGEST_GROUP}-row group, which some layouts leave to the f32 loop;"
                 f" an M that is a multiple of {LARGEST_GROUP} compares every row")
    return said


def measure(M: int, K: int, bits: int, tier: str, variants: dict[str, dict[str, int]], threads: int, rounds: int,
            calls: int = 20, fmt: str = "c4", flush_mib: int = SWEEP_FLUSH_MIB) -> tuple[dict[str, float], int]:
    x = random_activations(K, 0)
    y = np.empty(M, np.float32)
    qm = random_quantized(M, K, bits, seed=bits)
    runs = read_runs(qm.logical_bytes, threads)
    outs = []
    for label, options in variants.items():
        run = binder(fmt)(tier, qm, 4 * threads, **options)
        runs[label] = kernels.call_on(run, x, y)
        run(x, y)
        outs.append(y.copy())
    if not all(np.array_equal(outs[0], o) for o in outs[1:]):
        raise SystemExit(f"w{bits}: the variants give different y; not timed ({mismatch(outs)})")
    spec = kernels.variants(bits, "i8")[0]  # the int8 kernels' reference: x quantized per block, and tolerance
    err = relative_error(outs[0], *reference_gemv(qm, spec.reference_x(x, qm.block)))
    if not err <= spec.tolerance:
        raise SystemExit(f"w{bits}: the variants' y is off the reference (max rel err {err:.2e}); not timed")
    return interleaved_medians(runs, rounds, calls, flush_mib), qm.logical_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x14336")
    ap.add_argument("--threads", type=int, default=len(system.affinity()))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tier", default="avx512vnni-zmm")
    ap.add_argument("--variants", default=";ahead=4096,locality=0;ahead=4096,locality=3;streams=4",
                    help="semicolon-separated; the default: plain, prefetchnta and prefetcht0 4 KiB ahead, 4 streams")
    ap.add_argument("--bits", default="8,4,3,2")
    ap.add_argument("--format", choices=("c4", "4x2"), default="c4",
                    help="c4: the tier's column tiles (packed-<R>c4-<tier>); 4x2: its packed-4x2 kernels")
    add_flush_mib(ap, "MiB read before every call")
    args = ap.parse_args(argv)
    check_flush_mib(ap, args.flush_mib)
    if args.format == "c4" and args.tier not in tile.tile_tiers():
        ap.error(f"--tier: {args.tier!r} has no column tiles; one of {', '.join(tile.tile_tiers())}")
    from gemvbw.tiers import usable
    if args.tier not in {t.name for t in usable()}:
        ap.error(f"--tier: {args.tier} cannot run on this CPU (see gemvbw info)")
    try:
        variants = parse_variants(args.variants)
        check_options(args.format, args.tier, variants)
    except (ValueError, TypeError) as e:
        ap.error(f"--variants: {e}")
    M, K = map(int, args.shape.split("x"))
    numba.set_num_threads(args.threads)
    print(f"{system.describe_cpu()['cpu']}, {args.threads} thread(s), {args.shape}, {args.format} kernels of tier "
          f"{args.tier}, cold "
          f"({args.flush_mib} MiB flush), median of {args.rounds} interleaved rounds of 20 calls; "
          "% of the fastest read")
    for bits in map(int, args.bits.split(",")):
        med, nbytes = measure(M, K, bits, args.tier, variants, args.threads, args.rounds, fmt=args.format,
                            flush_mib=args.flush_mib)
        wall = min(us for n, us in med.items() if n.startswith("read"))
        print(f"w{bits}: " + "; ".join(f"{n} {us:.0f} us {nbytes / us / 1e3:.1f} GB/s {100 * wall / us:.0f}%"
                                       for n, us in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

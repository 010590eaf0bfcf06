"""Run gemvbw's own benchmark set and write benchmarks/RESULTS.md.

    python benchmarks/run.py [--iters 50] [--threads 1,2] [--out benchmarks/RESULTS.md] [--flush-mib N]
                             [--ggml-bin PATH/test-backend-ops] [--mnn-bin PATH/run_test.out]

What it runs, through the CLI a user has (nothing is timed here itself):
1. gemvbw sweep --act f32 --kernel all on 4096x14336 (MNN's default), 1024x1024 and 151936x1024
   (lm_head), cold cache, every width and variant, at the largest thread count;
2. for each thread count (default 1 and all CPUs in the affinity mask): gemvbw sweep --act i8
   --kernel all on the three shapes, cold, every int8 tier this CPU runs, and the same warm
   (--flush-mib 0) at 4096x14336; twice, the peers' second run between the two, each figure the
   better of its two (as each peer's is);
3. gemvbw model qwen3-0.6b --bits 4, with the default (int8) and f32 activations;
4. benchmarks/wall.py at each thread count, after the first int8 sweeps: each tier against a plain read of
   its bytes, and (--latency-ratios) every width's kernels and reads in the same rounds; and
   benchmarks/row_read.py (each width's plain read timed as a sweep row with --iters, beside its kernel's row
   and the read roofline taken before and after: how much of the roofline the bars set a row against a row
   can reach at all);
   then benchmarks/asm_check.py (what the generated loops look like, instructions per weight per tier) and
   benchmarks/hot_loop.py --read (each tier's hot loop timed from L1: the compute floor of a cold call at one
   thread, beside a read of the same bytes);
5. with --ggml-bin, ggml's own `test-backend-ops perf` for MUL_MAT at 4096x14336, n=1, run
   before gemvbw's sweeps and between its two int8 runs (best of the two), for a side-by-side on the same
   machine.
   It uses as many threads as the machine has CPUs. Build ggml yourself (nothing here builds it).
6. with --mnn-bin, MNN's own `run_test.out speed/GemvBW 0 2 <threads>` (block 64, cold cache,
   best of 3 x 200) on each shape through MNN_GEMVBW_M/K and each thread count, with gemvbw's flush through
   MNN_GEMVBW_FLUSH_MIB (a build without that line flushes 64 MiB, and the output says so), also twice, at the
   same points, for a cold-against-cold side-by-side; each of those runs between two `gemvbw roofline`
   reads at its thread count, against which MNN's GB/s is set (the bandwidth of its own minutes).
   Build MNN yourself with -DMNN_BUILD_TEST=ON -DMNN_LOW_MEMORY=ON (and -DMNN_AVX512=ON on a CPU with
   AVX-512: see peers/README.md). MNN's
   current test/speed/GemvBWTest.cpp hard-codes 4096x14336 (the published version read
   MNN_GEMVBW_M/K); a build that ignores the variables is detected from its header and its
   other shapes are left out. Then, after gemvbw's second int8 sweeps, benchmarks/paired.py
   (--paired-rounds, default 4 per thread count, ~2 min each): width by width, MNN's test on that width and
   gemvbw's default sweep of it back to back at 4096x14336 with a plain read of the same bytes between them
   (~30 s for the three), the order swapped every round, for the MNN bar at the same minutes.
It writes eff GB/s, %read, the latency ratios t(wN)/t(w8), each tier's speed-up over the others,
and the bars of the x86 issue (against MNN, ggml and the read roofline), with the command, the
machine and the date. --flush-mib N sets the flush before every cold call on every side (gemvbw's sweeps and model
run, wall.py, paired.py, MNN's test): the default, the sweep's own (4x the last-level cache), is 1920 MiB on a VM
that reports a 480 MiB L3, about 0.1 s per call and hours per run; the sweeps then note a flush below their own.
Run it on a quiet machine: nothing else compiling or measuring.

Each step's result is kept in a directory (--steps, default the --out path with .steps appended) the moment it
ends, and the directory is removed once --out is written. A run stopped part way (Ctrl-C, a session's end, a
crash) keeps what it measured there; `--resume` with the same settings goes on from the first step it lacks, and is
refused if the code measured, the settings, the peers' binaries or the CPU changed (steps.py). RESULTS.md then says
when the run was resumed.
"""

from __future__ import annotations

import argparse
import re
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from bars import AT_WALL, LATENCY, MNN_BAR, WALL, beside, meets_mnn_bar, verdict  # benchmarks/, on sys.path when this runs
from flush_option import SWEEP_FLUSH_MIB, add_flush_mib, check_flush_mib, flush_mib_or_sweeps, sweep_flush_flags
from gemvbw import system
from gemvbw.metrics import logical_bytes
from steps import Steps, StepsError, Stopped, code_fingerprint

HERE = Path(__file__).resolve().parent
SHAPES = ["4096x14336", "1024x1024", "151936x1024"]
GGML_TYPES = {"q8_0": (34, 32, 8), "q4_0": (18, 32, 4), "q4_K": (144, 256, 4), "q3_K": (110, 256, 3),
              "q2_K": (84, 256, 2)}  # bytes per super-block, weights per super-block, comparable gemvbw width
MNN_LINE = re.compile(r"^w(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)",
                      re.M)  # type | thr | us/iter | W MiB | bytes/elem | eff GB/s
MNN_FLUSH_LINE = re.compile(r"^cold cache: (\d+) MiB flush before each iter", re.M)
GGML_LINE = re.compile(r"MUL_MAT\(type_a=(\w+),type_b=f32,m=(\d+),n=1,k=(\d+),.*?([\d.]+) us/run")

PEERS = """Peer figures quoted from the issue that asked for this comparison (measured on a 2-core AMD EPYC
Zen1 machine, 4096x14336, 2 threads; MNN cold, llama.cpp warm; not re-measured here, so compare
them with the ratios above rather than directly):

| width | MNN `speed/GemvBW` | llama.cpp CPU | a plain numba loop |
|---|---|---|---|
| w8 | 13.9 GB/s | q8_0 15.1 | 8.6-10.0 |
| w4 | 11.7 | q4_K 12.6, q4_0 8.9 | 5.2 |
| w3 | 5.9 | q3_K 7.7 | 1.6 |
| w2 | 4.1 | q2_K 8.5 | 3.0 |

MNN at 1024x1024 (same source): w8 5.0, w4 2.7, w3 2.4, w2 1.1 GB/s.
"""


def gemvbw(*args: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "gemvbw", *args, "--json", str(out), "--format", "mnn"]
        print("+", " ".join(cmd[2:]), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def run_ggml(binary: str) -> tuple[str, dict[str, float]]:
    pattern = "type_a=(" + "|".join(GGML_TYPES) + "),type_b=f32,m=4096,n=1,k=14336,"
    cmd = [binary, "perf", "-o", "MUL_MAT", "-b", "CPU", "-p", pattern]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    return out, {m.group(1): float(m.group(4)) for m in GGML_LINE.finditer(out)}


def run_mnn(binary: str, threads: int, shape: str, flush_mib: int = SWEEP_FLUSH_MIB,
            bits: int | None = None) -> tuple[str, dict[int, float]]:
    """MNN's GemvBW test as built, on one shape, reading ``flush_mib`` MiB before each call: its printed table,
    and us/iter per width (``bits``: that width only).

    The shape goes through MNN_GEMVBW_M/K; a build that ignores them (MNN's current test hard-codes
    4096x14336) prints another shape in its header, and its figures are then left out. The width goes through
    MNN_GEMVBW_BITS, as the published test reads it; a build that ignores it times every width, and only
    ``bits``' figure is kept."""
    M, K = shape.split("x")
    cmd = [binary, "speed/GemvBW", "0", "2", str(threads)]
    flush = str(flush_mib)
    width = {} if bits is None else {"MNN_GEMVBW_BITS": str(bits)}
    print(f"+ MNN_GEMVBW_M={M} MNN_GEMVBW_K={K} MNN_GEMVBW_FLUSH_MIB={flush}",
          *(f"{k}={v}" for k, v in width.items()), " ".join(cmd), file=sys.stderr, flush=True)
    # a MNN_GEMVBW_BITS left in the environment would narrow a run meant to time every width
    inherited = {k: v for k, v in os.environ.items() if k != "MNN_GEMVBW_BITS"}
    env = {**inherited, "MNN_GEMVBW_M": M, "MNN_GEMVBW_K": K, "MNN_GEMVBW_FLUSH_MIB": flush, **width}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=Path(binary).parent, env=env).stdout
    if f"W({M}x{K})" not in out:
        print(f"  MNN ran another shape than {shape}: its figures are left out", file=sys.stderr)
        return out, {}
    if (theirs := mnn_flush_mib(out)) != flush_mib:
        print(f"  MNN flushed {theirs} MiB before each call, gemvbw {flush_mib}: a build without "
              "the MNN_GEMVBW_FLUSH_MIB line (benchmarks/peers/README.md)", file=sys.stderr)
    widths = {int(m.group(1)): float(m.group(3)) for m in MNN_LINE.finditer(out)}
    if bits is not None and set(widths) - {bits}:
        timed = " ".join(f"w{b}" for b in sorted(widths, reverse=True))
        print(f"  MNN timed {timed} where w{bits} was asked for: a build that ignores MNN_GEMVBW_BITS "
              f"(benchmarks/peers/README.md); only w{bits} is kept", file=sys.stderr)
        widths = {b: us for b, us in widths.items() if b == bits}
    return out, widths


def mnn_flush_mib(out: str) -> int:
    """The flush MNN's test made before each call: what a build with the MNN_GEMVBW_FLUSH_MIB line prints, or
    the 64 MiB its published test hard-codes."""
    m = MNN_FLUSH_LINE.search(out)
    return int(m.group(1)) if m else 64


class MnnPass(NamedTuple):
    """One run of MNN's test on every shape at one thread count (per shape its printed table and us/iter per
    width), with gemvbw's read roofline at that thread count just before and just after it (GB/s): what the
    host gave in MNN's own minutes, which a roofline taken with gemvbw's sweep minutes apart does not say."""
    shapes: dict[str, tuple[str, dict[int, float]]]
    reads: tuple[float, float]


def read_now(threads: int) -> float:
    """gemvbw's read roofline at ``threads`` threads, measured now (`gemvbw roofline`), in GB/s."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "gemvbw", "roofline", "--threads", str(threads), "--json", str(out)]
        print("+", " ".join(cmd[2:]), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())["rooflines"][-1]["read_gbps"]


def mnn_flush_note(runs: list[MnnPass], flush_mib: int) -> str:
    """How both sides flushed (gemvbw ``flush_mib`` MiB), for the side-by-side's text."""
    flushes = sorted({mnn_flush_mib(out) for run in runs for out, _ in run.shapes.values()})
    if flushes == [flush_mib]:
        return f"a {flush_mib} MiB read before every call, MNN's through MNN_GEMVBW_FLUSH_MIB"
    return (f"gemvbw reads {flush_mib} MiB before every call, MNN "
            f"{'/'.join(map(str, flushes))} MiB: its build lacks the MNN_GEMVBW_FLUSH_MIB line, and a smaller "
            "flush can leave part of its matrix cached")


def mnn_pass(binary: str, threads: int, flush_mib: int) -> MnnPass:
    before = read_now(threads)
    shapes = {shape: run_mnn(binary, threads, shape, flush_mib) for shape in SHAPES}
    return MnnPass(shapes, (before, read_now(threads)))


def merged(first: dict, second: dict) -> dict:
    """Two sweeps of the same settings as one record, as the peers' two runs are taken: per shape, width and
    variant the faster row of the two, each row with its own sweep's %read. The first's system and settings;
    both sweeps' rooflines under "rooflines"."""
    rows: dict[tuple, dict] = {}
    for r in first["results"] + second["results"]:
        key = (r["M"], r["K"], r["bits"], r["variant"])
        if key not in rows or r["best_avg_us"] < rows[key]["best_avg_us"]:
            rows[key] = r
    return {**first, "results": list(rows.values()),
            "rooflines": [first["roofline"], second["roofline"]]}


def reads(doc: dict) -> str:
    """The read roofline(s) a record's rows were measured against, each with the streams per thread that
    gave it (records from before gemvbw tried several have none) and, where the sweep measured it again after
    its rows (``read_after_gbps``, since 2026-12-07), that second figure and how far it moved: how much the
    bandwidth shifted under the rows' %read."""
    def one(rf: dict) -> str:
        s = rf.get("read_streams")
        text = f"{rf['read_gbps']:.1f} GB/s" + (f" ({s} stream{'s' if s > 1 else ''} per thread)" if s else "")
        after = rf.get("read_after_gbps")
        if after is not None:
            text += f", {after:.1f} GB/s after the rows ({100 * (after / rf['read_gbps'] - 1):+.0f}%)"
        return text
    return " and ".join(one(rf) for rf in (doc["rooflines"] if "rooflines" in doc else [doc["roofline"]]))


def best(doc: dict, shape: str, bits: int) -> dict | None:
    M, K = map(int, shape.split("x"))
    rows = [r for r in doc["results"] if (r["M"], r["K"], r["bits"]) == (M, K, bits)]
    return min(rows, key=lambda r: r["best_avg_us"]) if rows else None


def cell(r: dict | None) -> str:
    return "-" if r is None else f"{r['best_avg_us']:.0f} us, {r['eff_gbps']:.2f} GB/s ({r['variant']})"


def _empty_call(record: dict) -> str:
    """The fixed cost of a call as the record states it (records before cold figures have warm only)."""
    kind = "empty serial call" if record.get("call_overhead_serial") else "empty parallel call"
    cold = record.get("call_overhead_cold_us")
    return f"{kind} {record['call_overhead_us']:.1f} us warm" + ("" if cold is None else f", {cold:.1f} us cold")


def mnn_bytes(shape: str, bits: int) -> int:
    """The bytes MNN's test counts for a width: codes + fp16 scale and offset per block (when K % 64 != 0 one
    block spans the row), the count gemvbw's eff GB/s uses too."""
    M, K = map(int, shape.split("x"))
    return logical_bytes(M, K, bits, 64 if K % 64 == 0 else K, 2)


def mnn_gbps(us: float, shape: str, bits: int) -> float:
    """MNN's eff GB/s for a latency, with its count of bytes (:func:`mnn_bytes`)."""
    return mnn_bytes(shape, bits) / us / 1e3


def share_of_reads(gbps: float, reads: tuple[float, float]) -> str:
    """A peer's GB/s as % of the faster and of the slower of the two reads taken around its run ("95-101"): which
    of them its minutes had is not known, and on this host the two can differ by 2x."""
    lo, hi = (100 * gbps / r for r in sorted(reads, reverse=True))
    return f"{lo:.0f}" if f"{lo:.0f}" == f"{hi:.0f}" else f"{lo:.0f}-{hi:.0f}"


def pct_of_read_around(gbps: float, reads: tuple[float, float] | None) -> str:
    """:func:`share_of_reads`, with both reads ("-" without them)."""
    if not reads:
        return "-"
    return f"{share_of_reads(gbps, reads)} (reads {reads[0]:.1f} / {reads[1]:.1f} GB/s)"


def mnn_side_by_side(i8: dict, mnn: dict[int, float], shape: str,
                     reads: dict[int, tuple[float, float]] | None = None) -> list[str]:
    """gemvbw's best int8 row beside MNN's better latency per width; ``reads``: per width, the reads around
    the MNN run that gave it (see :class:`MnnPass`), so that each side's figure is set against its own minutes."""
    lines = [f"### {shape}", "",
             "width | gemvbw i8 cold | gemvbw %read (its sweep's) | gemvbw fixed cost (vs its latency) | "
             "MNN cold (same run) | MNN % of the reads around its run | MNN / gemvbw latency",
             "---|---|---:|---:|---|---|---:"]
    for bits in (8, 4, 3, 2):
        r = best(i8, shape, bits)
        ours = f"{r['pct_read']:.0f}" if r and r.get("pct_read") is not None else "-"
        fixed = fixed_cost(r)
        theirs = around = "-"
        if bits in mnn:
            gbps = mnn_gbps(mnn[bits], shape, bits)
            theirs = f"{mnn[bits]:.0f} us, {gbps:.2f} GB/s"
            around = pct_of_read_around(gbps, (reads or {}).get(bits))
        ratio = f"{mnn[bits] / r['best_avg_us']:.2f}" if r and bits in mnn else "-"
        lines.append(f"w{bits} | {cell(r)} | {ours} | {fixed} | {theirs} | {around} | {ratio}")
    return lines + ["", "gemvbw's fixed cost: its kernel's latency on a 16-row, two-block matrix after the same flush "
                    "(a call that moves almost no bytes, with its code, arguments and workspace out of cache as well "
                    "as its weights; MNN's method flushes before each call too). gemvbw's flush is read by each of its "
                    "threads (MNN's by its calling thread), so its threads are running when a call starts: a figure "
                    "to compare with, not a part to subtract.", ""]


def fixed_cost(r: dict | None) -> str:
    """A row's fixed cost and what it is as a share of the row's latency ("12 us (31%)"; "-" for records
    without one)."""
    f = (r or {}).get("fixed_cost")
    if not f:
        return "-"
    share = f["median_us"] / r["best_avg_us"]
    return f"{f['median_us']:.0f} us ({100 * share:.0f}%{': above the row, calls this variable' if share > 1 else ''})"


def ggml_side_by_side(i8: dict, warm: dict, ggml: dict[str, float]) -> list[str]:
    M, K, shape = 4096, 14336, "4096x14336"
    lines = ["width | gemvbw i8 cold | gemvbw i8 warm | ggml (warm, same run) | ggml / gemvbw warm", "---|---|---|---|---"]
    for bits in (8, 4, 3, 2):
        w = best(warm, shape, bits)
        peers, ratios = [], []
        for name, (nbytes, nweights, width) in GGML_TYPES.items():
            if width != bits or name not in ggml:
                continue
            us = ggml[name]
            peers.append(f"{name} {us:.0f} us, {M * K * nbytes / nweights / us / 1e3:.2f} GB/s")
            if w:
                ratios.append(f"{name} {us / w['best_avg_us']:.2f}")
        lines.append(f"w{bits} | {cell(best(i8, shape, bits))} | {cell(w)} | {'; '.join(peers) or '-'} | "
                     f"{'; '.join(ratios) or '-'}")
    return lines + ["", "Latency ratio above 1: ggml takes longer than gemvbw; GB/s of each from its own bytes "
                    "(q8_0 and q4_0/q4_K store 1.0625 and 0.5625 bytes per weight like gemvbw's w8/w4; q3_K 0.43, "
                    "q2_K 0.33).", ""]


def shape_table(doc: dict, shape: str) -> list[str]:
    M, K = map(int, shape.split("x"))
    rows = [r for r in doc["results"] if (r["M"], r["K"]) == (M, K)]
    ref = {r["bits"]: r["best_avg_us"] for r in rows if r["variant"] == "ref"}
    fastest = {b: best(doc, shape, b) for b in (8, 4, 3, 2)}
    lines = [f"### {shape}", "",
             "width | variant | us/iter | eff GB/s | %read | t(wN)/t(w8) best | vs ref",
             "---|---|---:|---:|---:|---:|---:"]
    t8 = fastest[8]["best_avg_us"] if fastest[8] else None
    for r in sorted(rows, key=lambda r: (-r["bits"], r["best_avg_us"])):
        ratio = f"{r['best_avg_us'] / t8:.2f}" if t8 and r is fastest[r["bits"]] else ""
        speedup = f"{ref[r['bits']] / r['best_avg_us']:.2f}x" if r["bits"] in ref else "- (no ref)"
        lines.append(f"w{r['bits']} | {r['variant']} | {r['best_avg_us']:.1f} | {r['eff_gbps']:.2f} | "
                     f"{r['pct_read']:.1f} | {ratio} | {speedup}")
    return lines + [""]


def thread_counts(text: str | None) -> list[int]:
    """Thread counts from a comma list, by default 1 and all CPUs in the affinity mask."""
    return sorted({int(t) for t in text.split(",")}) if text else sorted({1, len(os.sched_getaffinity(0))})


def bars(i8: dict, mnn: dict[int, float] | None, shape: str = "4096x14336",
         mnn_reads: dict[int, tuple[float, float]] | None = None) -> list[str]:
    lines = [f"read roofline of this run: {reads(i8)} at {i8['roofline']['threads']} thread(s) (each row's %read "
             "against its own sweep's)", "",
             "width | gemvbw (best tier) | %read (bar) | t(wN)/t(w8) (bar) | MNN / gemvbw (bar "
             f"{MNN_BAR}, or gemvbw >= {AT_WALL:.0f}% of read and no slower)", "---|---|---|---|---"]
    t8 = best(i8, shape, 8)
    for bits in (8, 4, 3, 2):
        r = best(i8, shape, bits)
        if r is None:
            lines.append(f"w{bits} | - | - | - | -")
            continue
        wall = f"{beside(r['pct_read'], WALL[bits], 1)} ({verdict(r['pct_read'], WALL[bits])}, >= {WALL[bits]:.0f})"
        lat = "-"
        if bits in LATENCY and t8:
            q = r["best_avg_us"] / t8["best_avg_us"]
            lat = f"{beside(q, LATENCY[bits], 2)} ({verdict(q, LATENCY[bits], at_most=True)}, <= {LATENCY[bits]})"
        vs = "-"
        if mnn and bits in mnn:
            q = mnn[bits] / r["best_avg_us"]
            ok = meets_mnn_bar(q, r["pct_read"])
            around = (mnn_reads or {}).get(bits)
            where = (f"; MNN at {share_of_reads(mnn_gbps(mnn[bits], shape, bits), around)} % of the reads around "
                     "its run") if around else ""
            vs = f"{beside(q, MNN_BAR, 2)} ({'met' if ok else 'NOT met'}{where})"
        lines.append(f"w{bits} | {cell(r)} | {wall} | {lat} | {vs}")
    return lines + [""]


def script_md(script: str, *args: str) -> list[str]:
    """The markdown a script of benchmarks/ (wall.py, paired.py) writes to --md when run with args."""
    with tempfile.TemporaryDirectory() as d:
        md = Path(d) / "out.md"
        print(f"+ benchmarks/{script}", *args, file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(HERE / script), *args, "--md", str(md)], check=True,
                       stdout=subprocess.DEVNULL)
        return md.read_text().splitlines()


def best_of(runs: list[MnnPass], shape: str) -> dict[int, float]:
    """Per width, the better of the passes' latencies on a shape."""
    out: dict[int, float] = {}
    for run in runs:
        for bits, us in run.shapes[shape][1].items():
            out[bits] = min(us, out.get(bits, float("inf")))
    return out


def reads_of_best(runs: list[MnnPass], shape: str) -> dict[int, tuple[float, float]]:
    """Per width, the reads around the pass that gave :func:`best_of`'s latency."""
    best_us = best_of(runs, shape)
    return {bits: next(run.reads for run in runs if run.shapes[shape][1].get(bits) == us)
            for bits, us in best_us.items()}


def asm_table(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    lines = [f"{doc['machine']}, numba {doc['numba']}, target {doc['target']}", "",
             "variant | hot loop instructions | dot instructions | instructions per weight | scalar fallbacks",
             "---|---:|---|---:|---"]
    for v in doc["variants"]:
        dots = " ".join(f"{k} x{n}" for k, n in sorted(v["hot_dots"].items())) or "-"
        ipw = f"{v['instr_per_weight']:.3f}" if v["instr_per_weight"] else "-"
        bad = ", ".join(f"{k} x{n}" for k, n in v["hot_bad"].items()) or "none"
        lines.append(f"w{v['bits']} {v['act']} {v['variant']} | {v['hot_len']} | {dots} | {ipw} | {bad}")
    return lines + [""]


GGML_NEON = """For comparison, llama.cpp's own NEON loops (ggml d99724f2, `src/ggml-cpu/arch/arm/quants.c` and
`repack.cpp`, cross-compiled with GCC 12.2 `-O3 -march=armv8.2-a+dotprod+fp16`, hot loops counted the same
way): `ggml_vec_dot_q8_0_q8_0` 36 instructions per 2 blocks of 32 weights (0.56 per weight),
`ggml_vec_dot_q4_0_q8_0` 42 per 64 weights (0.66), and the repacked `ggml_gemv_q4_0_4x4_q8_0` 34 per
4 rows x 32 weights (0.27). These are instruction counts of code that was not run; speed cannot be
measured under emulation."""


def aarch64_section(path: Path) -> list[str]:
    """The aarch64 tiers' instruction counts, from asm_check.py run in the emulated userland."""
    return ["## aarch64 (generated code in the emulated userland; instructions, not speed)", "",
            "`.ci/arm64 --setup`, then in the userland: `QEMU_CPU=cortex-a76 NUMBA_CPU_NAME=cortex-a76 python "
            "benchmarks/asm_check.py --json asm.json` (cortex-a76 runs both NEON tiers: dotprod and baseline).", ""
            ] + asm_table(path) + [GGML_NEON, ""]


def asm_check_md() -> list[str]:
    """benchmarks/asm_check.py's table of the generated loops, with its output appended when it failed (a
    regression or a crash shows in the file, not only on this terminal)."""
    with tempfile.TemporaryDirectory() as d:
        asm_json = Path(d) / "asm.json"
        print("+ benchmarks/asm_check.py", file=sys.stderr, flush=True)
        checked = subprocess.run([sys.executable, str(HERE / "asm_check.py"), "--json", str(asm_json)],
                                 capture_output=True, text=True)
        asm = asm_table(asm_json) if asm_json.exists() else []
    if checked.returncode != 0:
        asm += ["", f"asm_check.py exited with {checked.returncode}", "", "```",
                (checked.stdout + checked.stderr).strip()[-3000:], "```"]
    return asm


def steps_dir(out: Path) -> Path:
    """Where a run writing ``out`` keeps its steps unless --steps says otherwise."""
    return out.with_name(out.name + ".steps")


def measured_code() -> list[Path]:
    """The code a run measures: the gemvbw package and the scripts of benchmarks/ that time things. run.py and
    steps.py only order the steps and write the results, so a fix to them can be resumed into."""
    package = Path(system.__file__).resolve().parent
    return sorted(package.rglob("*.py")) + sorted(f for f in HERE.glob("*.py") if f.name not in ("run.py",
                                                                                                  "steps.py"))


def file_sha(path: str | None) -> str | None:
    return None if path is None else f"{path} sha256:{hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]}"


def run_identity(args: argparse.Namespace, counts: list[int], flush_mib: int) -> dict:
    """What must not change between the sessions of one resumed run: the settings, the code, the peers'
    binaries and the CPU."""
    cpu = system.describe_cpu()
    return {"--iters": args.iters, "--threads": counts, "--flush-mib": flush_mib,
            "--paired-rounds": args.paired_rounds, "--ggml-bin": file_sha(args.ggml_bin),
            "--mnn-bin": file_sha(args.mnn_bin), "the code measured (gemvbw/, benchmarks/)": code_fingerprint(
                measured_code()), "CPU": cpu["cpu"], "ISA": cpu["isa"], "CPUs": len(os.sched_getaffinity(0))}


def resumed_note(resumed: list[dt.datetime]) -> str:
    if not resumed:
        return ""
    return ("; stopped and resumed (--resume) at " + ", ".join(f"{t:%Y-%m-%d %H:%M}" for t in resumed)
            + " UTC: every step was measured once, in one of those sessions, with the same settings, code and CPU")


def mnn_pass_json(p: MnnPass) -> dict:
    return {"shapes": {shape: [out, {str(bits): us for bits, us in widths.items()}]
                       for shape, (out, widths) in p.shapes.items()}, "reads": list(p.reads)}


def mnn_pass_of_json(doc: dict) -> MnnPass:
    return MnnPass({shape: (out, {int(bits): us for bits, us in widths.items()})
                    for shape, (out, widths) in doc["shapes"].items()}, tuple(doc["reads"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", default="50")
    ap.add_argument("--threads", help="thread counts, comma list (default: 1 and all CPUs in the affinity mask)")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--ggml-bin", help="a test-backend-ops binary you built from ggml, for a side-by-side")
    ap.add_argument("--mnn-bin", help="a run_test.out binary you built from MNN, for a side-by-side")
    ap.add_argument("--paired-rounds", type=int, default=4,
                    help="with --mnn-bin: rounds of benchmarks/paired.py per thread count (default 4; 0: none)")
    ap.add_argument("--aarch64-asm", metavar="JSON",
                    help="asm_check.py --json written in the emulated aarch64 userland (.ci/arm64 --setup), for "
                         "the aarch64 section")
    ap.add_argument("--steps", metavar="DIR",
                    help="where each step's result is kept as it ends (default: the --out path with .steps "
                         "appended); removed once --out is written")
    ap.add_argument("--resume", action="store_true",
                    help="go on with the unfinished run in --steps' directory: same settings, code and CPU, only "
                         "the steps it lacks are measured")
    add_flush_mib(ap, "MiB read before every cold call, by every side; a smaller one makes a run shorter where the "
                      "last-level cache is large, and the sweeps then say that their weights may stay cached",
                  sweep_default=True)
    args = ap.parse_args()
    check_flush_mib(ap, args.flush_mib)
    flush_mib, cold = flush_mib_or_sweeps(args.flush_mib), sweep_flush_flags(args.flush_mib)
    cpus = len(os.sched_getaffinity(0))
    counts = thread_counts(args.threads)
    top = max(counts)
    try:
        run = Steps(Path(args.steps) if args.steps else steps_dir(Path(args.out)),
                    run_identity(args, counts, flush_mib), args.resume)
    except StepsError as e:
        ap.error(str(e))
    started = run.started
    it = ["--iters", args.iters]
    shapes = sum((["--shape", s] for s in SHAPES), [])

    def ggml_step(name: str) -> tuple[str, dict[str, float]]:
        return run.step(name, lambda: run_ggml(args.ggml_bin), list, tuple)

    def mnn_step(name: str, t: int) -> MnnPass:
        return run.step(name, lambda: mnn_pass(args.mnn_bin, t, flush_mib), mnn_pass_json, mnn_pass_of_json)

    def int8_sweeps(t: int, tag: str) -> tuple[dict, dict]:  # cold on every shape, and warm at 4096x14336
        return (run.step(f"i8-{t}t-{tag}", lambda: gemvbw("sweep", "--act", "i8", "--kernel", "all", *shapes, *it,
                                                          *cold, "--threads", str(t))),
                run.step(f"warm-{t}t-{tag}", lambda: gemvbw("sweep", "--act", "i8", "--kernel", "all", "--flush-mib",
                                                            "0", "--M", "4096", "--K", "14336", *it, "--threads",
                                                            str(t))))

    ggml_runs = [ggml_step("ggml-a")] if args.ggml_bin else []
    mnn_runs = {t: [mnn_step(f"mnn-{t}t-a", t)] for t in counts} if args.mnn_bin else {}
    f32 = run.step("f32", lambda: gemvbw("sweep", "--act", "f32", "--kernel", "all", *shapes, *it, *cold,
                                         "--threads", str(top)))

    # gemvbw's int8 sweeps run twice, each peer's run between them, and every figure is the better of two, as the
    # peers' are: on a host whose bandwidth moves from minute to minute one sample against the better of two
    # would favour the peer
    i8, warm = {}, {}
    for t in counts:
        i8[t], warm[t] = int8_sweeps(t, "a")
    # each tier against a plain read of the same bytes, interleaved (the wall it had); and every width's kernels
    # and reads in the same rounds (the latency ratios at the same minutes)
    walls = {t: run.step(f"wall-{t}t", lambda: script_md("wall.py", "--threads", str(t), *cold)) for t in counts}
    ratios = {t: run.step(f"ratios-{t}t", lambda: script_md("wall.py", "--latency-ratios", "--threads", str(t),
                                                            *cold)) for t in counts}
    rows = {t: run.step(f"rowread-{t}t", lambda: script_md("row_read.py", "--threads", str(t), "--iters",
                                                           args.iters, *cold)) for t in counts}
    if args.ggml_bin:
        ggml_runs.append(ggml_step("ggml-b"))
    for t in mnn_runs:
        mnn_runs[t].append(mnn_step(f"mnn-{t}t-b", t))
    for t in counts:
        again, warm_again = int8_sweeps(t, "b")
        i8[t], warm[t] = merged(i8[t], again), merged(warm[t], warm_again)
    # MNN and gemvbw's default sweep back to back in rounds: the MNN bar at the same minutes
    paired = {t: run.step(f"paired-{t}t", lambda: script_md("paired.py", "--mnn-bin", args.mnn_bin, "--threads",
                                                           str(t), "--rounds", str(args.paired_rounds), *cold))
              for t in counts} if args.mnn_bin and args.paired_rounds else {}
    models = {act: run.step(f"model-{act}", lambda: gemvbw("model", "qwen3-0.6b", "--bits", "4", "--act", act, *it,
                                                           *cold, "--threads", str(top)))
              for act in ("auto", "f32")}
    asm = run.step("asm", asm_check_md)
    floor = run.step("floor", lambda: script_md("hot_loop.py", "--read"))

    s = f32["system"]
    lines = [
        "# gemvbw benchmark results", "",
        f"Written by `python benchmarks/run.py --iters {args.iters}`, started {started:%Y-%m-%d %H:%M} UTC "
        f"(gemvbw {f32['version']}), thread counts {', '.join(map(str, counts))}{resumed_note(run.resumed)}.", "",
        f"Machine: {s['cpu']} ({s['machine']}), {s['cores']} cores, affinity {s['affinity']}, ISA "
        f"{' '.join(s['isa'])}; caches {s['caches']}; numba {s['numba']} ({s['threading_layer']}), "
        f"llvmlite {s['llvmlite']}, numpy {s['numpy']}, Python {s['python']}.", "",
        "Rooflines in the same run: " + "; ".join(
            f"{t} thread(s): memcpy {i8[t]['roofline']['memcpy_gbps']:.1f} GB/s (read+write counted), read "
            f"{reads(i8[t])} (the int8 sweep's two runs), {_empty_call(i8[t])}" for t in counts) + ".", "",
        f"Method: cold cache ({f32['settings']['flush_mib']} MiB flush before every call), best of "
        f"{f32['settings']['reps']} groups of {f32['settings']['iters']} calls, block 64, fp16 metadata; every "
        "kernel verified against the numpy reference first. The int8 sweeps ran twice, before and after the "
        "peers' second run, and each int8 row is the faster of its two figures (with that sweep's %read), as each "
        "peer's figure is the better of its two runs. `t(wN)/t(w8)` compares the fastest variant of each "
        "width; `vs ref` is the speed-up over the reference loop of the same width.", "",
    ]
    for t in counts:
        lines += [f"## int8 activations, {t} thread(s) (`gemvbw sweep --act i8 --kernel all --threads {t} "
                  "--shape ...`)", ""]
        lines += ["### The bars at 4096x14336, cold", ""]
        peer = (best_of(mnn_runs[t], "4096x14336"), reads_of_best(mnn_runs[t], "4096x14336")) if t in mnn_runs \
            else (None, None)
        lines += bars(i8[t], peer[0], mnn_reads=peer[1])
        if t in paired:
            lines += ["### The MNN bar at the same minutes (`benchmarks/paired.py`)", "",
                      "The MNN column above sets MNN's better run against gemvbw's better sweep, minutes apart. Here "
                      "MNN's test and gemvbw's default `gemvbw sweep` (--kernel auto, 3 groups of 200 cold calls, as "
                      "MNN's test times) ran back to back in rounds at 4096x14336, one width at a time "
                      "(MNN_GEMVBW_BITS, --bits), a plain read of the same bytes timed as a row between them, the "
                      "order swapped every round; each round's ratio compares the two some 30 s apart:",
                      "", *paired[t], ""]
        lines += ["### The latency ratios at the same minutes (`benchmarks/wall.py --latency-ratios`)", "",
                  "The sweep times the widths one after another, minutes apart. Here every width's int8 variants and "
                  "plain reads of every width's bytes were timed interleaved in the same rounds: each width's fastest "
                  "variant against w8's, beside each width's read against w8's read (what a kernel at the wall "
                  "would show on this machine now) and the bytes' ratio:", ""] + ratios[t] + [""]
        lines += ["### Against the wall it had (`benchmarks/wall.py`)", "",
                  "The read roofline above is taken before the sweep's rows (and again after them); this machine's "
                  "bandwidth moves while a sweep runs. Here each tier and a plain multithreaded read of the same "
                  "bytes were timed interleaved, cold, in one process:", ""] + walls[t] + [""]
        lines += ["### A plain read timed as a row (`benchmarks/row_read.py`)", "",
                  "The bars set a row (best group mean of calls, each after the flush) against the read roofline "
                  "(best of a few reads of a large buffer, no flush). Here a plain read of each width's bytes was "
                  "timed exactly as a row, beside the kernel's row (`--kernel auto`'s choice) and the roofline "
                  "taken before and after, in rounds: where the read's row stays under the roofline, that share "
                  "is the row's, and no kernel reaches past it.", ""] + rows[t] + [""]
        for shape in SHAPES:
            lines += shape_table(i8[t], shape)
        lines += ["### Warm (`--flush-mib 0`), 4096x14336", ""] + shape_table(warm[t], "4096x14336")[2:]
        if t in mnn_runs:
            lines += [f"### Side by side with MNN, {t} thread(s)", "",
                      f"MNN's `run_test.out speed/GemvBW 0 2 {t}` ran on each shape before gemvbw's sweeps and "
                      "between its two int8 runs; the better of its two latencies is shown, beside gemvbw's better. "
                      f"Both are cold ({mnn_flush_note(mnn_runs[t], flush_mib)}) and count the same bytes "
                      "(MNN's formula, fp16 "
                      "metadata); a ratio above 1: MNN takes "
                      "longer than gemvbw. This host's bandwidth moves from minute to minute, so each side is also "
                      "set against its own minutes: gemvbw's row against its sweep's read roofline, MNN's against "
                      "two reads (`gemvbw roofline`) taken just before and just after the MNN run that gave it, "
                      "as a share of the faster and of the slower one (which of them its own minutes had is not "
                      "known). MNN's raw output is in `benchmarks/peers/`.", ""]
            for shape in SHAPES:
                lines += mnn_side_by_side(i8[t], best_of(mnn_runs[t], shape), shape,
                                          reads_of_best(mnn_runs[t], shape))
    if ggml_runs:
        ggml = {k: min(run[1].get(k, float("inf")) for run in ggml_runs) for k in ggml_runs[0][1]}
        lines += [f"## Side by side with ggml, 4096x14336, n=1, {cpus} threads", "",
                  "ggml's `test-backend-ops perf` ran before gemvbw's sweeps and between its two int8 runs; the better of its two "
                  "latencies is shown. It repeats one matrix (warm), so it is set beside gemvbw's warm figures. "
                  "Its raw output is in `benchmarks/peers/`.", ""]
        lines += ggml_side_by_side(i8[top], warm[top], ggml)
        (HERE / "peers").mkdir(exist_ok=True)
        (HERE / "peers" / "ggml-mul-mat-4096x14336.txt").write_text(
            f"# test-backend-ops perf -o MUL_MAT -b CPU at 4096x14336 n=1, {started:%Y-%m-%d}, two runs (before "
            "gemvbw's sweeps and between its two int8 runs)\n" + "\n".join(r[0] for r in ggml_runs))
    if mnn_runs:
        (HERE / "peers").mkdir(exist_ok=True)
        (HERE / "peers" / "mnn-gemvbw.txt").write_text(
            f"# MNN_GEMVBW_M=.. MNN_GEMVBW_K=.. run_test.out speed/GemvBW 0 2 THREADS, {started:%Y-%m-%d}, "
            "each thread count and shape before gemvbw's sweeps and between its two int8 runs\n"
            + "\n".join(f"## {t} thread(s)\n" + run.shapes[shape][0] for t, runs in mnn_runs.items() for run in runs
                        for shape in SHAPES))
    lines += [f"## f32 activations, {top} thread(s) (`gemvbw sweep --act f32 --kernel all --shape ...`)", ""]
    for shape in SHAPES:
        lines += shape_table(f32, shape)
    lines += ["## Peers quoted from an earlier issue", "", PEERS]
    for act, model in models.items():
        lines += [f"## Model (`gemvbw model qwen3-0.6b --bits 4 --act {act}`)", ""]
        for summary in model["model"]["per_bits"]:
            lines += [f"w{summary['bits']}: {summary['bytes_per_token'] / 1e6:.1f} MB of weights per token; measured "
                      f"GEMV time {summary['gemv_ms_per_token']:.2f} ms per token ({summary['tokens_per_s']:.1f} "
                      f"tokens/s); bandwidth bound {summary['bound_ms_per_token']:.2f} ms "
                      f"({summary['bound_tokens_per_s']:.1f} tokens/s at {summary['read_gbps']:.1f} GB/s); the kernels "
                      f"reach {summary['pct_of_bound']:.0f}% of the bound. GEMVs only: attention, norms and sampling "
                      "are not included.", "",
                      "projection | shape | per token | us/call | eff GB/s | share", "---|---|---:|---:|---:|---:"]
            for p in summary["projections"]:
                lines.append(f"{p['name']} | {p['M']}x{p['K']} | {p['per_token']} | {p['best_avg_us']:.1f} | "
                             f"{p['eff_gbps']:.2f} | {100 * p['share']:.1f}%")
            lines.append("")
    lines += ["## Generated code (`python benchmarks/asm_check.py`)", ""] + asm
    lines += ["", "## The compute floor (`python benchmarks/hot_loop.py --read`)", "",
              "What each tier's plain kernel costs when memory costs nothing: its own steps, checked bit for bit "
              "against the kernel, looped over tiles that stay in L1, per 1024 weights, and what that makes for "
              "4096x14336 at one thread (at T threads, / T). A cold call cannot be faster than the longer of this "
              "and the read of its bytes, and takes more where the core does not overlap the two; where the floor "
              "nears the read, the loop is what to improve, not the memory access.", ""] + floor
    if args.aarch64_asm:
        lines += aarch64_section(Path(args.aarch64_asm))
    Path(args.out).write_text("\n".join(lines))
    run.finish()
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Stopped as e:  # Ctrl-C: what ended is on disk, say where, no traceback
        print(f"\n{e}", file=sys.stderr)
        sys.exit(130)

"""Run gemvbw's own benchmark set and write benchmarks/RESULTS.md.

    python benchmarks/run.py [--iters 50] [--threads N] [--out benchmarks/RESULTS.md]
                             [--ggml-bin PATH/test-backend-ops] [--mnn-bin PATH/run_test.out]

What it runs, through the CLI a user has (nothing is timed here itself):
1. gemvbw sweep --kernel all on 4096x14336 (MNN's default), 1024x1024 and 151936x1024 (lm_head),
   cold cache, every width and variant;
2. gemvbw model qwen3-0.6b --bits 4, with f32 and (where they exist) int8 activations;
3. benchmarks/asm_check.py (what the generated loops look like);
4. with --ggml-bin, ggml's own `test-backend-ops perf` for MUL_MAT at 4096x14336, n=1, run
   before and after gemvbw's sweeps (best of the two), for a side-by-side on the same machine.
   Build ggml yourself (it is not part of gemvbw and nothing here builds it).
5. with --mnn-bin, MNN's own `run_test.out speed/GemvBW 0 2 <threads>` (block 64, cold cache,
   best of 3 x 200) on each shape through MNN_GEMVBW_M/K, also before and after, for a
   cold-against-cold side-by-side. Build MNN yourself with -DMNN_BUILD_TEST=ON
   -DMNN_LOW_MEMORY=ON. MNN's current test/speed/GemvBWTest.cpp hard-codes 4096x14336 (the
   published version read MNN_GEMVBW_M/K); a build that ignores the variables is detected
   from its header and its other shapes are left out.
It writes eff GB/s, %read, the latency ratios t(wN)/t(w8) and each variant's speed-up over
the reference loop, with the command, the machine and the date. Run it on a quiet machine:
nothing else compiling or measuring.
"""

from __future__ import annotations

import argparse
import re
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gemvbw.metrics import logical_bytes

HERE = Path(__file__).resolve().parent
SHAPES = ["4096x14336", "1024x1024", "151936x1024"]
GGML_TYPES = {"q8_0": (34, 32, 8), "q4_0": (18, 32, 4), "q4_K": (144, 256, 4), "q3_K": (110, 256, 3),
              "q2_K": (84, 256, 2)}  # bytes per super-block, weights per super-block, comparable gemvbw width
MNN_LINE = re.compile(r"^w(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)",
                      re.M)  # type | thr | us/iter | W MiB | bytes/elem | eff GB/s
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


def run_mnn(binary: str, threads: int, shape: str) -> tuple[str, dict[int, float]]:
    """MNN's GemvBW test as built, on one shape: its printed table, and us/iter per width.

    The shape goes through MNN_GEMVBW_M/K; a build that ignores them (MNN's current test hard-codes
    4096x14336) prints another shape in its header, and its figures are then left out."""
    M, K = shape.split("x")
    cmd = [binary, "speed/GemvBW", "0", "2", str(threads)]
    print(f"+ MNN_GEMVBW_M={M} MNN_GEMVBW_K={K}", " ".join(cmd), file=sys.stderr, flush=True)
    env = {**os.environ, "MNN_GEMVBW_M": M, "MNN_GEMVBW_K": K}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=Path(binary).parent, env=env).stdout
    if f"W({M}x{K})" not in out:
        print(f"  MNN ran another shape than {shape}: its figures are left out", file=sys.stderr)
        return out, {}
    return out, {int(m.group(1)): float(m.group(3)) for m in MNN_LINE.finditer(out)}


def mnn_side_by_side(i8: dict, mnn: dict[int, float], shape: str) -> list[str]:
    M, K = map(int, shape.split("x"))
    lines = [f"### {shape}", "", "width | gemvbw i8 cold | MNN cold (same run) | MNN / gemvbw latency", "---|---|---|---"]
    for bits in (8, 4, 3, 2):
        rows = [r for r in i8["results"] if (r["M"], r["K"], r["bits"]) == (M, K, bits)]
        r = min(rows, key=lambda r: r["best_avg_us"]) if rows else None
        # MNN's count: codes + fp16 scale and offset per block; when K % 64 != 0 one block spans the row
        nbytes = logical_bytes(M, K, bits, 64 if K % 64 == 0 else K, 2)
        ours = "-" if r is None else f"{r['best_avg_us']:.0f} us, {r['eff_gbps']:.2f} GB/s ({r['variant']})"
        theirs = f"{mnn[bits]:.0f} us, {nbytes / mnn[bits] / 1e3:.2f} GB/s" if bits in mnn else "-"
        ratio = f"{mnn[bits] / r['best_avg_us']:.2f}" if r and bits in mnn else "-"
        lines.append(f"w{bits} | {ours} | {theirs} | {ratio}")
    return lines + [""]


def side_by_side(sweep: dict, i8: dict, warm: dict, ggml: dict[str, float]) -> list[str]:
    M, K = 4096, 14336

    def best(doc, bits):
        rows = [r for r in doc["results"] if (r["M"], r["K"], r["bits"]) == (M, K, bits)]
        return min(rows, key=lambda r: r["best_avg_us"]) if rows else None

    lines = ["width | gemvbw f32 cold | gemvbw i8 cold | gemvbw i8 warm | ggml (warm, same run) | ggml / gemvbw i8 warm",
             "---|---|---|---|---|---"]
    for bits in (8, 4, 3, 2):
        cells = []
        for doc in (sweep, i8, warm):
            r = best(doc, bits)
            cells.append("-" if r is None else f"{r['best_avg_us']:.0f} us, {r['eff_gbps']:.2f} GB/s ({r['variant']})")
        peers, ratios = [], []
        for name, (nbytes, nweights, width) in GGML_TYPES.items():
            if width != bits or name not in ggml:
                continue
            us = ggml[name]
            peers.append(f"{name} {us:.0f} us, {M * K * nbytes / nweights / us / 1e3:.2f} GB/s")
            w = best(warm, bits)
            if w:
                ratios.append(f"{name} {us / w['best_avg_us']:.2f}")
        lines.append(f"w{bits} | " + " | ".join(cells) + " | " + ("; ".join(peers) or "-") + " | "
                     + ("; ".join(ratios) or "-"))
    return lines + ["", "Latency ratio above 1: ggml takes longer than gemvbw; GB/s of each from its own bytes "
                    "(q8_0 and q4_0/q4_K store 1.0625 and 0.5625 bytes per weight like gemvbw's w8/w4; q3_K 0.43, "
                    "q2_K 0.33).", ""]


def shape_table(doc: dict, shape: str) -> list[str]:
    M, K = map(int, shape.split("x"))
    rows = [r for r in doc["results"] if (r["M"], r["K"]) == (M, K)]
    ref = {r["bits"]: r["best_avg_us"] for r in rows if r["variant"] == "ref"}
    best = {}
    for r in rows:
        if r["bits"] not in best or r["best_avg_us"] < best[r["bits"]]["best_avg_us"]:
            best[r["bits"]] = r
    lines = [f"### {shape}", "",
             "width | variant | us/iter | eff GB/s | %read | t(wN)/t(w8) best | vs ref",
             "---|---|---:|---:|---:|---:|---:"]
    t8 = best[8]["best_avg_us"] if 8 in best else None
    for r in sorted(rows, key=lambda r: (-r["bits"], r["best_avg_us"])):
        ratio = f"{r['best_avg_us'] / t8:.2f}" if t8 and r is best[r["bits"]] else ""
        speedup = f"{ref[r['bits']] / r['best_avg_us']:.2f}x" if r["bits"] in ref else "- (no ref)"
        lines.append(f"w{r['bits']} | {r['variant']} | {r['best_avg_us']:.1f} | {r['eff_gbps']:.2f} | "
                     f"{r['pct_read']:.1f} | {ratio} | {speedup}")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", default="50")
    ap.add_argument("--threads")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--ggml-bin", help="a test-backend-ops binary you built from ggml, for a side-by-side")
    ap.add_argument("--mnn-bin", help="a run_test.out binary you built from MNN, for a side-by-side")
    args = ap.parse_args()
    extra = ["--threads", args.threads] if args.threads else []
    started = dt.datetime.now(dt.timezone.utc)
    threads = int(args.threads) if args.threads else len(os.sched_getaffinity(0))
    ggml_runs = [run_ggml(args.ggml_bin)] if args.ggml_bin else []
    mnn_runs = [{shape: run_mnn(args.mnn_bin, threads, shape) for shape in SHAPES}] if args.mnn_bin else []
    shapes = sum((["--shape", s] for s in SHAPES), [])
    sweep = gemvbw("sweep", "--kernel", "all", *shapes, "--iters", args.iters, *extra)
    i8 = gemvbw("sweep", "--act", "i8", "--kernel", "all", *shapes, "--iters", args.iters, *extra)
    warm = gemvbw("sweep", "--act", "i8", "--flush-mib", "0", "--M", "4096", "--K", "14336", "--iters", args.iters,
                  *extra)
    if args.ggml_bin:
        ggml_runs.append(run_ggml(args.ggml_bin))
    if args.mnn_bin:
        mnn_runs.append({shape: run_mnn(args.mnn_bin, threads, shape) for shape in SHAPES})
    models = {act: gemvbw("model", "qwen3-0.6b", "--bits", "4", "--act", act, "--iters", args.iters, *extra)
              for act in ("f32", "i8") if act == "f32" or i8["results"]}
    checked = subprocess.run([sys.executable, str(HERE / "asm_check.py")], capture_output=True, text=True)
    asm = checked.stdout
    if checked.returncode != 0:  # a regression or a crash: show it in the file, not only on this terminal
        asm += f"\n\nasm_check.py exited with {checked.returncode}\n{checked.stderr.strip()[-2000:]}"

    s = sweep["system"]
    rf = sweep["roofline"]
    lines = [
        "# gemvbw benchmark results", "",
        f"Written by `python benchmarks/run.py --iters {args.iters}` on {started:%Y-%m-%d %H:%M} UTC "
        f"(gemvbw {sweep['version']}).", "",
        f"Machine: {s['cpu']} ({s['machine']}), {s['cores']} cores, affinity {s['affinity']}, ISA "
        f"{' '.join(s['isa'])}; caches {s['caches']}; numba {s['numba']} ({s['threading_layer']}), "
        f"llvmlite {s['llvmlite']}, numpy {s['numpy']}, Python {s['python']}.", "",
        f"Rooflines in the same run ({rf['threads']} threads): memcpy {rf['memcpy_gbps']:.1f} GB/s (read+write "
        f"counted), read {rf['read_gbps']:.1f} GB/s. Fixed cost of an empty parallel call: "
        f"{sweep['call_overhead_us']:.1f} us.", "",
        f"Method: cold cache ({sweep['settings']['flush_mib']} MiB flush before every call), best of "
        f"{sweep['settings']['reps']} groups of {sweep['settings']['iters']} calls, block 64, fp16 metadata, "
        "f32 activations; every kernel verified against the numpy reference first. `t(wN)/t(w8)` compares "
        "the fastest variant of each width; `vs ref` is the speed-up over the reference loop of the same width.",
        "",
        "## Sweep (`gemvbw sweep --kernel all --shape ...`)", "",
    ]
    for shape in SHAPES:
        lines += shape_table(sweep, shape)
    lines += ["## Sweep with int8 activations (`gemvbw sweep --act i8 --kernel all --shape ...`)", ""]
    for shape in SHAPES:
        lines += shape_table(i8, shape)
    if ggml_runs:
        ggml = {k: min(run[1].get(k, float("inf")) for run in ggml_runs) for k in ggml_runs[0][1]}
        lines += ["## Side by side with ggml on this machine, 4096x14336, n=1", "",
                  f"ggml's `test-backend-ops perf` ran before and after gemvbw's sweeps; the better of its two "
                  f"latencies is shown. Its raw output is in `benchmarks/peers/`.", ""]
        lines += side_by_side(sweep, i8, warm, ggml)
        (HERE / "peers").mkdir(exist_ok=True)
        (HERE / "peers" / "ggml-mul-mat-4096x14336.txt").write_text(
            f"# {' '.join(['test-backend-ops', 'perf', '-o', 'MUL_MAT', '-b', 'CPU'])} at 4096x14336 n=1, "
            f"{started:%Y-%m-%d}, two runs (before and after gemvbw's sweeps)\n" + "\n".join(r[0] for r in ggml_runs))
    if mnn_runs:
        lines += [f"## Side by side with MNN on this machine, {threads} threads", "",
                  f"MNN's `run_test.out speed/GemvBW 0 2 {threads}` ran on each shape before and after gemvbw's "
                  "sweeps; the better of its two latencies is shown. Both are cold (a 64 MiB read before every "
                  "call) and count the same bytes (MNN's formula, fp16 metadata); a ratio above 1: MNN takes longer "
                  "than gemvbw. MNN's raw output is in `benchmarks/peers/`.", ""]
        for shape in SHAPES:
            mnn = {}
            for run in mnn_runs:
                for bits, us in run[shape][1].items():
                    mnn[bits] = min(us, mnn.get(bits, float("inf")))
            lines += mnn_side_by_side(i8, mnn, shape)
        (HERE / "peers").mkdir(exist_ok=True)
        (HERE / "peers" / "mnn-gemvbw.txt").write_text(
            f"# MNN_GEMVBW_M=.. MNN_GEMVBW_K=.. run_test.out speed/GemvBW 0 2 {threads}, {started:%Y-%m-%d}, "
            "each shape before and after gemvbw's sweeps\n"
            + "\n".join(run[shape][0] for run in mnn_runs for shape in SHAPES))
    lines += ["## Peers quoted from the issue", "", PEERS]
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
    lines += ["## Generated code (`python benchmarks/asm_check.py`)", "", "```", asm.rstrip(), "```", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

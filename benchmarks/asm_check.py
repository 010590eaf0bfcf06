"""Check the machine code numba generates for every kernel variant, without timing anything.

For each registered variant (the f32 loops and every int8 tier this CPU and numba's target can
run) this compiles a fresh copy (cache off: a function loaded from numba's cache has no
assembly to show), finds its hot loop and counts what matters for speed:

- the int8 kernels' hot loop is the one with the tier's dot-product instructions (vpmaddubsw,
  vpdpbusd, sdot, smull); its instructions per weight count, per fp16 metadata conversion in the
  loop (vcvtph2ps, or vcvtph2psx where the target has AVX512-FP16, e.g. Sapphire Rapids; fcvtl2 on
  aarch64), 256 weights of a packed-4x2 block pair (two per pair of 4 rows x 128) or half a column
  tile (two per tile of R rows x 64);
- the f32 loops' hot loop is the one with the most FMAs;
- scalar fallbacks in the hot loop: int64 widening and scalar converts (vpmovzxbq, vcvtsi2ss) or
  inserts (vinsertps, vpinsr*) on x86, byte/half loads and lane inserts on aarch64 (ldrb, ldrsb,
  ldrh, ins, mov v.b[]) — the patterns numba leaves when a loop did not vectorize.

Runs on x86-64 and on aarch64 (on a phone, or in the emulated userland of .ci/arm64).

Usage:  python benchmarks/asm_check.py [--bits 8,4,3,2] [--show] [--json PATH]
Exit 1 if a variant other than 'ref' has a scalar fallback in its hot loop, or an int8 tier's loop
lacks its dot product, so a vectorization regression is visible without a benchmark.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from collections import Counter

import numba
import numpy as np

from gemvbw import kernels, tiers
from gemvbw.kernels import streams
from gemvbw.quant import random_activations, random_quantized

ARM = platform.machine() in ("aarch64", "arm64")
DOTS = ("sdot", "smmla", "smull", "smull2") if ARM else ("vpmaddubsw", "vpdpbusd", "vpmaddwd", "vpdpwssd")
FMA = re.compile(r"^(fmla|fmadd)") if ARM else re.compile(r"^vf(n)?madd")
LOADS = re.compile(r"^(ldr\s+q|ldp\s+q|ld1)") if ARM else re.compile(r"^(vmovdqu|vmovups|vbroadcast|vpbroadcast)")
PAIR_MARK = re.compile(r"^fcvtl2\b") if ARM else re.compile(r"^vcvtph2psx?\b")  # two per block pair (fp16 meta)
BAD = (re.compile(r"^(ldrb|ldrsb|ldrh|ldrsh|ins)\b|^mov\s+v\d+\.b\[") if ARM else
       re.compile(r"^(vpmovzxbq|vcvtsi2ss|vcvtsi2sd|vinsertps|vpinsrb|vpinsrw|vpinsrd|vpinsrq)\b"))


def _norm(line: str) -> str:
    """One space between the words, and no encoding prefix: LLVM writes "{vex} vpdpbusd" where the target has both
    AVX-VNNI and AVX-512 VNNI (znver5, sapphirerapids) and it picked the shorter VEX form."""
    words = line.split()
    return " ".join(words[1:] if words and words[0] in ("{vex}", "{evex}") else words)


def fresh_asm(spec: kernels.KernelSpec) -> str:
    """Compile the variant's numba function again with cache off and return its assembly."""
    qm = random_quantized(64, 1024, bits=spec.bits, block=64, meta_bytes=2)
    x = random_activations(1024)
    y = np.zeros(64, np.float32)
    if spec.kernel_args is not None:  # the int8 layouts share one skeleton; the variant's own call
        fn = streams.gemv_streams
        args = spec.kernel_args(qm, x, y, 8)
    else:
        from gemvbw.kernels import w2, w3, w4, w8

        module = {8: w8, 4: w4, 3: w3, 2: w2}[spec.bits]
        fn = getattr(module, f"gemv_w{spec.bits}_{spec.variant}")
        args = (qm.codes, qm.scale_raw, qm.offset_raw, x, 64, y) + ((8,) if spec.variant != "ref" else ())
    fresh = numba.njit(parallel=fn.targetoptions.get("parallel", False),
                       fastmath=fn.targetoptions.get("fastmath", False), cache=False)(fn.py_func)
    fresh(*args)
    return fresh.inspect_asm(fresh.signatures[0])


def loops(asm: str):
    """(label, instruction lines) of every innermost loop: a backward branch whose span holds no other loop."""
    lines = asm.splitlines()
    labels = {l.strip()[:-1]: i for i, l in enumerate(lines) if re.match(r"^\.?L\w+:$", l.strip())}
    spans = []
    branch = re.compile(r"\s+(?:j\w+|b\.?[a-z]{2}|b|cbnz|cbz|tbnz|tbz)\s+(?:[\w#]+,\s*)*(\.?L\w+)\s*$")
    for i, line in enumerate(lines):
        m = branch.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            spans.append((m.group(1), labels[m.group(1)], i))
    found = []
    for label, start, end in spans:
        if any(start < s2 and e2 < end for _, s2, e2 in spans if (s2, e2) != (start, end)):
            continue
        body = [_norm(l) for l in lines[start:end + 1] if l.startswith("\t") and not l.strip().startswith(".")]
        found.append((label, body))
    return found


def weights_per_mark(spec: kernels.KernelSpec) -> int:
    """Weights per fp16 metadata conversion in an int8 hot loop: a block pair of four rows (512 weights) has two,
    a column tile of R rows x 64 weights two (its scales and its offsets)."""
    if spec.layout is not None and spec.layout[0] == "c4":
        return spec.layout[1] * 64 // 2
    return 256


def analyse(asm: str, int8: bool, per_mark: int = 256) -> dict:
    counts = Counter(_norm(l).split()[0] for l in asm.splitlines() if l.startswith("\t") and not l.strip().startswith("."))
    candidates = [(label, body) for label, body in loops(asm) if not any(b.startswith(("call", "bl ")) for b in body)]

    def n_dots(body):
        return sum(b.split()[0] in DOTS for b in body)

    def n_fma(body):
        return sum(bool(FMA.match(b)) for b in body)

    hot = max(candidates, key=(lambda lb: (n_dots(lb[1]), -len(lb[1]))) if int8 else (lambda lb: n_fma(lb[1])),
              default=(None, []))
    label, body = hot
    ops = Counter(b.split()[0] for b in body)
    marks = sum(bool(PAIR_MARK.match(b)) for b in body)
    weights = per_mark * marks if int8 else 0
    return {
        "total_instructions": sum(counts.values()),
        "hot_loop": label,
        "hot_len": len(body),
        "hot_dots": {k: v for k, v in ops.items() if k in DOTS},
        "hot_fma": n_fma(body),
        "hot_loads": sum(bool(LOADS.match(b)) for b in body),
        "weights_per_iteration": weights,
        "instr_per_weight": len(body) / weights if weights else None,
        "hot_bad": dict(Counter(b.split()[0] for b in body if BAD.match(b))),
        "body": body,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", default="8,4,3,2")
    ap.add_argument("--show", action="store_true", help="print the hot loop of each variant")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    target = tiers.report().target
    print(f"{platform.machine()}, numba {numba.__version__}, target {target.cpu if target else '?'}; "
          f"int8 tiers: {', '.join(t.name for t in tiers.usable()) or 'none'}")
    print("variant                               | hot loop instr | dot instructions            | loads | FMA "
          "| weights/iter | instr/weight | scalar fallbacks")
    print("--------------------------------------|---------------:|-----------------------------|------:|----:"
          "|-------------:|-------------:|-----------------")
    status, rows = 0, []
    for act in ("f32", "i8"):
        for bits in map(int, args.bits.split(",")):
            for spec in kernels.variants(bits, act):
                a = analyse(fresh_asm(spec), act == "i8", weights_per_mark(spec))
                bad = ", ".join(f"{k} x{v}" for k, v in a["hot_bad"].items()) or "none"
                dots = " ".join(f"{k} x{v}" for k, v in sorted(a["hot_dots"].items())) or "-"
                ipw = f"{a['instr_per_weight']:.3f}" if a["instr_per_weight"] else "-"
                print(f"{f'w{bits} {act} {spec.variant}':37s} | {a['hot_len']:14d} | {dots:27s} | "
                      f"{a['hot_loads']:5d} | {a['hot_fma']:3d} | {a['weights_per_iteration']:12.0f} | {ipw:>12s} | {bad}")
                if args.show:
                    print("\n".join("    " + b for b in a["body"]))
                rows.append({"bits": bits, "act": act, "variant": spec.variant,
                             **{k: v for k, v in a.items() if k != "body"}})
                # f32 variants must keep a vectorized FMA loop; int8 variants their dot product
                # an int8 loop without its metadata conversions is one this script cannot count per weight:
                # a new spelling of the instruction (as vcvtph2psx was) must fail here, not print "-"
                if spec.variant != "ref" and (a["hot_bad"] or (act == "f32" and not a["hot_fma"])
                                              or (act == "i8" and not (a["hot_dots"] and a["weights_per_iteration"]))):
                    status = 1
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": platform.machine(), "target": None if target is None else target.cpu,
                       "numba": numba.__version__, "variants": rows}, fh, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())

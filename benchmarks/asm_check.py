"""Check the machine code numba generates for every kernel variant, without timing anything.

For each registered variant this compiles a fresh copy (cache off: a function loaded
from numba's cache has no assembly to show), finds its innermost vectorized loops,
and counts what matters for speed:

- ymm/zmm instructions (8/16-lane AVX2/AVX-512 work) versus xmm-only scalar math;
- int64 widening (vpmovzxbq, vcvtsi2ss/sd): numba's default integer typing leaking
  into the hot loop, 4 lanes or scalar instead of 8;
- vinsertps/vpinsr* gathers: the pattern numba emits when a negative-index check
  defeats vectorization;
- instructions per weight in the hot loop of the int8 kernels (weights per iteration
  counted from its multiply-adds: 32 per vpmaddubsw, else 16 per vpmaddwd).

Usage:  python benchmarks/asm_check.py [--bits 8,4,3,2] [--show]
Exit 1 if a variant other than 'ref' has int64 widening or gathers in its hottest loop,
so a vectorization regression is visible without a benchmark.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

import numba
import numpy as np

from gemvbw import kernels
from gemvbw.quant import random_activations, random_quantized

BAD = ("vpmovzxbq", "vcvtsi2ss", "vcvtsi2sd", "vinsertps", "vpinsrb", "vpinsrw", "vpinsrd", "vpinsrq")


def fresh_asm(spec: kernels.KernelSpec) -> str:
    """Compile the variant's numba function again with cache off and return its assembly."""
    qm = random_quantized(64, 1024, bits=spec.bits, block=64)
    x = random_activations(1024)
    y = np.zeros(64, np.float32)
    run = spec.bind(qm)
    fn = run.__closure__ and next(c.cell_contents for c in run.__closure__
                                   if isinstance(c.cell_contents, numba.core.registry.CPUDispatcher))
    fresh = numba.njit(parallel=fn.targetoptions.get("parallel", False),
                       fastmath=fn.targetoptions.get("fastmath", False), cache=False)(fn.py_func)
    args = [a.cell_contents for a in run.__closure__ if not isinstance(a.cell_contents, numba.core.registry.CPUDispatcher)]
    # the binder closes over (codes, scale, offset, block[, chunks]) in that order; rebuild the call
    params = {"codes": qm.codes, "scale": qm.scale_raw, "offset": qm.offset_raw, "x": x, "block": qm.block, "y": y,
              "chunks": 8, "bits": spec.bits}
    names = fn.py_func.__code__.co_varnames[: fn.py_func.__code__.co_argcount]
    if "pc" in names:  # a kernel on a repacked layout
        from gemvbw.kernels.i8_packed import PREFETCH_AHEAD, pack

        params["pc"], params["pm"], params["npairs"] = pack(qm.codes, qm.scale_raw, qm.offset_raw, spec.bits, qm.K)
        params["ahead"] = PREFETCH_AHEAD[spec.bits]
    fresh(*[params[n] for n in names])
    del args
    return fresh.inspect_asm(fresh.signatures[0])


def loops(asm: str):
    """(label, instruction lines) of every innermost loop: a backward branch whose span holds no other loop."""
    lines = asm.splitlines()
    labels = {l.strip()[:-1]: i for i, l in enumerate(lines) if re.match(r"^\.?L\w+:$", l.strip())}
    spans = []
    for i, line in enumerate(lines):
        m = re.match(r"\s+j\w+\s+(\.?L\w+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            spans.append((m.group(1), labels[m.group(1)], i))
    found = []
    for label, start, end in spans:
        if any(start < s2 <= e2 < end or (start < s2 and e2 < end) for _, s2, e2 in spans if (s2, e2) != (start, end)):
            continue
        body = [l.strip() for l in lines[start:end + 1] if l.startswith("\t") and not l.strip().startswith(".")]
        found.append((label, body))
    return found


def analyse(asm: str) -> dict:
    counts = Counter(l.split()[0] for l in asm.splitlines() if l.startswith("\t") and not l.strip().startswith("."))
    vector_loops = [(label, body) for label, body in loops(asm)
                    if any("ymm" in b or "zmm" in b for b in body) and not any(b.startswith("call") for b in body)]
    # the hot loop: for the int8 kernels the one doing the integer multiply-adds (their leftover-block
    # loops are f32 FMA loops), otherwise the one with the most FMAs
    hot = max(vector_loops, key=lambda lb: (sum(b.startswith(("vpmaddubsw", "vpmaddwd")) for b in lb[1]),
                                           sum(b.startswith("vfmadd") for b in lb[1])), default=(None, []))
    label, body = hot
    ops = Counter(b.split()[0] for b in body)
    # weights per iteration of an integer loop: each vpmaddubsw takes 32 codes; without it, each
    # vpmaddwd takes 16 (w8); f32 loops are not counted this way
    weights = 32 * ops.get("vpmaddubsw", 0) or 16 * ops.get("vpmaddwd", 0)
    return {
        "total_instructions": sum(counts.values()),
        "ymm": sum(1 for l in asm.splitlines() if "ymm" in l),
        "zmm": sum(1 for l in asm.splitlines() if "zmm" in l),
        "hot_loop": label,
        "hot_len": len(body),
        "hot_fma": sum(v for k, v in ops.items() if k.startswith("vfmadd") or k.startswith("vfnmadd")),
        "hot_loads": sum(v for k, v in ops.items() if k.startswith("vpmovzx")),
        "hot_round": ops.get("vroundps", 0),
        "madd": counts.get("vpmaddubsw", 0) + counts.get("vpmaddwd", 0),
        "hot_madd": ops.get("vpmaddubsw", 0) + ops.get("vpmaddwd", 0),
        "instr_per_weight": len(body) / weights if weights else None,
        "hot_bad": {k: v for k, v in ops.items() if k in BAD},
        "body": body,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", default="8,4,3,2")
    ap.add_argument("--show", action="store_true", help="print the hottest loop of each variant")
    args = ap.parse_args(argv)
    status = 0
    print("variant        | instr | ymm | hot loop: instr  FMA  zext-loads  vroundps  int-madd  instr/weight | int64 widening / gathers")
    print("---------------|------:|----:|---------------------------------------------------------------:|-------------------------")
    for act in ("f32", "i8"):
        for bits in map(int, args.bits.split(",")):
            for spec in kernels.variants(bits, act):
                a = analyse(fresh_asm(spec))
                bad = ", ".join(f"{k} x{v}" for k, v in a["hot_bad"].items()) or "none"
                ipw = f"{a['instr_per_weight']:.3f}" if a["instr_per_weight"] else "-"
                print(f"{f'w{bits} {act} {spec.variant}':14s} | {a['total_instructions']:5d} | {a['ymm']:3d} | "
                      f"{a['hot_len']:15d} {a['hot_fma']:4d} {a['hot_loads']:11d} {a['hot_round']:9d} "
                      f"{a['hot_madd']:9d} {ipw:>13s} | {bad}")
                if args.show:
                    print("\n".join("    " + b for b in a["body"]))
                # f32 variants must keep a vectorized FMA loop; i8 variants must use the integer multiply-adds
                if spec.variant != "ref" and (a["hot_bad"] or (act == "f32" and not a["hot_fma"])
                                              or (act == "i8" and not a["madd"])):
                    status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

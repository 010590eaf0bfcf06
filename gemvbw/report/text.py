"""Wording shared by the screen renderers: the run header, row labels and the notes."""

from __future__ import annotations

from gemvbw.results import KernelFailure, KernelResult, SweepRecord
from gemvbw.settings import format_cpus

META_NAMES = {2: "fp16", 4: "fp32"}

EXPLANATIONS = [
    "us/iter: the lowest of the group means (best of --reps groups of --iters calls), each call timed alone "
    "after an untimed cache flush.",
    "W MiB, bytes/elem: logical weight bytes, ceil(M*K*bits/8) + M*blocks*2*meta_bytes (MNN's count; "
    "excludes padding, x and y).",
    "eff GB/s = logical bytes / us/iter; %peak against memcpy (MNN's roofline, read+write counted), "
    "%read against the read-only roofline; GFLOPS = 2*M*K / us/iter; AI = 2 / bytes/elem.",
    "Every kernel was checked against a float64 numpy reference before timing; rows without figures failed.",
]


def label(item: KernelResult | KernelFailure, record: SweepRecord) -> str:
    """'w4', or 'w4 ref' when several variants of a width are swept."""
    return f"{item.type} {item.variant}" if record.settings.get("kernel") == "all" else item.type


def header_lines(record: SweepRecord) -> list[str]:
    s, sysinfo = record.settings, record.system
    isa = " ".join(sysinfo.get("isa") or []) or "none of interest"
    return [
        f"cpu: {sysinfo.get('cpu')} ({sysinfo.get('machine')}; {isa})",
        f"affinity: {format_cpus(sysinfo.get('affinity') or [])}; threads {s['threads']}; "
        f"numba {sysinfo.get('numba')} ({sysinfo.get('threading_layer')}), python {sysinfo.get('python')}",
        f"flush: {s['flush_mib']} MiB before each call" + (" (warm cache)" if not s["flush_mib"] else "")
        + f"; metadata {META_NAMES[s['meta_bytes']]}; act {s['act']}; kernel {s['kernel']}; seed {s['seed']}",
    ]


def overhead_line(record: SweepRecord) -> str:
    o = record.overhead
    return (f"fixed cost of an empty parallel call: {o.median_us:.1f} us (median of 2000 warm calls); "
            f"perf_counter_ns step {o.timer_resolution_ns:.0f} ns")


def note_lines(record: SweepRecord) -> list[str]:
    lines = [f"{n.message}. Advice: {n.advice}." for n in record.notes]
    for r in record.results:
        for n in r.notes:
            lines.append(f"{label(r, record)}: {n.message}. Advice: {n.advice}.")
    return lines

"""Wording shared by the screen renderers: the run header, row labels and the notes."""

from __future__ import annotations

from gemvbw.results import ROOFLINE_MOVED, KernelFailure, KernelResult, SweepRecord, read_moved
from gemvbw.settings import format_cpus

META_NAMES = {2: "fp16", 4: "fp32"}

EXPLANATIONS = [
    "us/iter: the lowest of the group means (best of --reps groups of --iters calls), each call timed alone "
    "after an untimed cache flush.",
    "W MiB, bytes/elem: logical weight bytes, ceil(M*K*bits/8) + M*blocks*2*meta_bytes (MNN's count; "
    "excludes padding, x and y).",
    "eff GB/s = logical bytes / us/iter; %peak against memcpy (MNN's roofline, read+write counted), "
    "%read against the read-only roofline; GFLOPS = 2*M*K / us/iter; AI = 2 / bytes/elem.",
    "Every kernel was checked against a float64 numpy reference before timing; rows without figures failed. "
    "With int8 activations the reference uses the same int8-quantized x, and what quantizing x itself "
    "costs is shown apart (act err).",
    "fixed us: the same kernel's median latency on a 16-row, two-block matrix after the same flush, what a call "
    "costs that moves almost no bytes once its code, arguments and workspace are out of cache as well as its "
    "weights (an empty call pays less; in decode the kernel's code stays cached). The flush is read by every "
    "thread, so the threads are running when a call starts: a figure to compare a row with, not a part of it to "
    "subtract.",
]


def label(item: KernelResult | KernelFailure, record: SweepRecord) -> str:
    """'w4', 'w4 i8' when the run mixes activation types (--act auto with unquantized widths), 'w4 ref' when
    several variants of a width are swept."""
    name = item.type
    act = item.act  # "" for a failure before activations were chosen
    if act and len({a["act"] for choices in record.act_choice.values() for a in choices}) > 1:
        name += f" {act}"
    return f"{name} {item.variant}" if record.settings.get("kernel") == "all" else name


def header_lines(record: SweepRecord) -> list[str]:
    s, sysinfo = record.settings, record.system
    isa = " ".join(sysinfo.get("isa") or []) or "none of interest"
    how = "pinned with --cpus" if s.get("cpus") else "affinity mask"
    groups = sysinfo.get("clusters") or []
    where = "; ".join(cluster_words(i, groups[i]) for i in sysinfo.get("affinity_clusters") or [] if i < len(groups))
    flush_threads = sysinfo.get("flush_threads") or 1  # absent from records of before the per-thread flush
    return [
        f"cpu: {sysinfo.get('cpu')} ({sysinfo.get('machine')}; {isa})",
        f"cpus: {format_cpus(sysinfo.get('affinity') or [])} ({how}) in cluster {where}"
        + (" -- MIXED core types" if sysinfo.get("affinity_mixed") else ""),
        f"threads {s['threads']}; "
        f"numba {sysinfo.get('numba')} ({sysinfo.get('threading_layer')}), python {sysinfo.get('python')}",
        f"flush: {s['flush_mib']} MiB before each call" + (" (warm cache)" if not s["flush_mib"] else "")
        + (f", read by each of the {flush_threads} threads" if s["flush_mib"] and flush_threads > 1 else "")
        + f"; metadata {META_NAMES[s['meta_bytes']]}; act {s['act']}; kernel {s['kernel']}; seed {s['seed']}",
    ] + act_lines(record)


def act_lines(record: SweepRecord) -> list[str]:
    """Which activations each width runs with, and why: 'act: w8 w4 int8 (...)', widths grouped."""
    groups: dict[str, list[str]] = {}
    for width, choices in record.act_choice.items():
        for c in choices:
            groups.setdefault(c["why"], []).append(width)
    return [f"act: {' '.join(widths)}: {why}" for why, widths in groups.items()]


def cluster_words(index: int, c: dict) -> str:
    speed = f"max {c['max_mhz']:.0f} MHz" if c.get("max_mhz") else "max unknown"
    return f"[{index}] {format_cpus(c['cpus'])}, {speed}"


def overhead_line(record: SweepRecord) -> str:
    o = record.overhead
    cold = "" if o.cold_median_us is None else f", {o.cold_median_us:.1f} us after a {o.flush_mib} MiB flush"
    return (f"fixed cost of {o.call_name}: {o.median_us:.1f} us warm{cold} (medians); "
            f"perf_counter_ns step {o.timer_resolution_ns:.0f} ns")


def note_lines(record: SweepRecord) -> list[str]:
    lines = [f"{n.message}. Advice: {n.advice}." for n in record.notes]
    after, first = record.read_after, record.roofline
    # (a larger move is one of the record's notes above: gemvbw.results.roofline_moved_notes)
    if after is not None and first is not None and not read_moved(first.read, after):
        lines.append(f"the read roofline measured again after the rows: {after.gbps:.1f} GB/s, "
                     f"{after.gbps / first.read.gbps - 1:+.0%} from the {first.read.gbps:.1f} GB/s before them "
                     f"(within {ROOFLINE_MOVED:.0%}): the bandwidth held, as far as two readings show")
    for width, choice in record.kernel_choice.items():
        times = ", ".join(f"{v} {us:.0f} us" for v, us in sorted(choice["timings_us"].items(), key=lambda kv: kv[1]))
        flush = choice.get("flush_mib")  # (absent from records of before cold calibration: those were warm)
        how = f"cold calibration on this shape ({flush} MiB flush before each call)" if flush else \
            "warm calibration on this shape"
        lines.append(f"--kernel auto chose {choice['variant']} for {width} ({choice['source']}"
                     + (f"; {how}: {times}" if times else "") + ")")
    by_code: dict[str, list] = {}
    for r in record.results:
        for n in r.notes:
            by_code.setdefault(n.code, []).append((r, n))
    for items in by_code.values():  # one line per kind of warning: each row's finding, the advice once
        findings = "; ".join(f"{row_name(r, record)}: {n.message}" for r, n in items)
        lines.append(f"{findings}. Advice: {items[0][1].advice}.")
    return lines


def row_name(r, record: SweepRecord) -> str:
    shape = f"{r.M}x{r.K} " if len(record.settings.get("shapes") or []) > 1 else ""
    return shape + label(r, record)


def fmt_opt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def warm_rows(record: SweepRecord) -> list[list[str]]:
    """type, cold us, warm us, cold GB/s, warm GB/s, warm/cold speed."""
    rows = []
    for r in record.results:
        if r.warm is not None:
            rows.append([label(r, record), f"{r.best_avg_us:.1f}", f"{r.warm.best_avg_us:.1f}", f"{r.eff_gbps:.2f}",
                         f"{r.warm_eff_gbps:.2f}", f"{r.warm_eff_gbps / r.eff_gbps:.2f}x"])
    return rows


WARM_HEADER = ["type", "cold us", "warm us", "cold GB/s", "warm GB/s", "warm/cold"]
COMPARE_HEADER = ["shape", "type", "variant", "before GB/s", "now GB/s", "now/before"]


def comparison_rows(record: SweepRecord) -> list[list[str]]:
    cmp = record.comparison
    rows = []
    for row in cmp.rows:
        M, K, bits, _, _, variant = row.key
        before, now = row.eff_gbps  # --rerun: the file's run, then this one
        _, ratio = row.ratios
        # (".2F" would differ from ".2f" only for inf and nan, which a measured figure never is)
        rows.append([f"{M}x{K}", f"w{bits}", str(variant), fmt_opt(before, ".2f"), fmt_opt(now, ".2f"),
                     "-" if ratio is None else f"{ratio:.2f}x"])
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [" | ".join(header), "|".join("---" for _ in header)]
    lines += [" | ".join(r) for r in rows]
    return lines


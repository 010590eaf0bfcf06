"""MNN's markdown tables, printed row by row as results arrive."""

from __future__ import annotations

from typing import TextIO

from gemvbw.report.text import (
    COMPARE_HEADER, EXPLANATIONS, META_NAMES, WARM_HEADER, comparison_rows, header_lines, label, markdown_table,
    fmt_opt, note_lines, overhead_line, warm_rows,
)
from gemvbw.results import KernelFailure, KernelResult, SweepRecord
from gemvbw.roofline import read_ways


def multi_shape(record: SweepRecord) -> bool:
    return len(record.settings.get("shapes") or []) > 1


def mnn_text(record: SweepRecord) -> str:
    """The whole MNN-style markdown for a record, as the streaming reporter would have printed it."""
    import io

    out = io.StringIO()
    rep = MnnReporter(out)
    rep.start(record, 0)  # (the group count is for a progress bar; this reporter has none)
    if record.roofline is not None:
        rep.roofline(record)
    for r in record.results:
        rep.result(record, r)
    for f in record.failures:
        rep.failure(record, f)
    rep.finish(record)
    return out.getvalue()

GEMV_HEADER = "type | thr | us/iter | W MiB | bytes/elem | eff GB/s | %peak | GFLOPS | AI (op/B)"
GEMV_RULE = "-----|----:|--------:|------:|-----------:|---------:|------:|-------:|---------:"
STATS_HEADER = ("type | variant | best avg us | mean us | sd us | median us | group means us (sd) | cv % | %read | "
                "fixed us | max rel err")
STATS_RULE = "-----|---------|------------:|--------:|------:|----------:|--------------------|-----:|------:|---------:|-----------:"


class MnnReporter:
    def __init__(self, stream: TextIO):
        self.stream = stream
        self._table_open = False  # (None would read the same: only its truth is tested)

    def _print(self, line: str = "") -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def start(self, record: SweepRecord, total_groups: int) -> None:  # total_groups: for a progress bar; none here
        s = record.settings
        self._print(f"## GemvBW (gemvbw {record.to_dict()['version']}, backend=CPU numba, act={s['act']}, "
                    f"blocksize={s['block']}, meta={META_NAMES[s['meta_bytes']]})")
        for line in header_lines(record):
            self._print(line)
        for note in record.notes:
            if note.code == "block-exceeds-K":
                self._print(f"note: {note.message}")
        self._print()

    def roofline(self, record: SweepRecord) -> None:
        rf = record.roofline
        self._print(f"## Peak streaming bandwidth (memcpy, {rf.memcpy.buffer_bytes >> 20} MiB buffer)")
        self._print("threads | GB/s")
        self._print("-------:|-----:")
        self._print(f"{rf.threads:7d} | {rf.memcpy.gbps:.1f}")
        self._print(f"-> peak {rf.memcpy.gbps:.1f} GB/s @ {rf.threads} threads (used as roofline)")
        self._print()
        self._print(f"## Read-only bandwidth (parallel sum, {rf.read.buffer_bytes >> 20} MiB buffer)")
        self._print("threads | GB/s")
        self._print("-------:|-----:")
        self._print(f"{rf.threads:7d} | {rf.read.gbps:.1f}")
        ways = read_ways(rf.read)
        self._print(f"-> read {rf.read.gbps:.1f} GB/s @ {rf.threads} threads{', ' + ways if ways else ''} "
                    "(used for %read)")
        self._print()
        self._print(overhead_line(record))
        self._print()

    def _open_table(self, record: SweepRecord) -> None:
        if self._table_open:
            return
        s = record.settings
        cache = f"cold cache ({s['flush_mib']} MiB flush)" if s["flush_mib"] else "warm cache (no flush)"
        if multi_shape(record):
            self._print(f"## GEMV: y = W(MxK) * x(K) for {len(s['shapes'])} shapes, block={s['block']}, {cache}, "
                        f"best of {s['reps']} x {s['iters']}")
            self._print("shape | " + GEMV_HEADER)
            self._print("-----:|" + GEMV_RULE)
        else:
            self._print(f"## GEMV: y = W({s['M']}x{s['K']}) * x({s['K']}), block={s['block']}, {cache}, "
                        f"best of {s['reps']} x {s['iters']}")
            self._print(GEMV_HEADER)
            self._print(GEMV_RULE)
        self._table_open = True

    @staticmethod
    def _shape(record: SweepRecord, item) -> str:
        return f"{item.M}x{item.K} | " if multi_shape(record) else ""

    def group_done(self, label, index, group) -> None:
        pass

    def result(self, record: SweepRecord, r: KernelResult) -> None:
        self._open_table(record)
        self._print(f"{self._shape(record, r)}{label(r, record):<4} | {r.threads:3d} | {r.best_avg_us:7.1f} | {r.w_mib:5.1f} | "
                    f"{r.bytes_per_elem:10.4f} | {r.eff_gbps:8.2f} | {r.pct_peak:5.1f} | {r.gflops:6.2f} | "
                    f"{r.ai:9.2f}")

    def failure(self, record: SweepRecord, f: KernelFailure) -> None:
        self._open_table(record)
        self._print(f"{self._shape(record, f)}{label(f, record):<4} | {record.settings['threads']:3d} | {f.message} (variant {f.variant}; no figures)")

    def finish(self, record: SweepRecord) -> None:
        if record.interrupted:
            self._print()
            self._print(f"INTERRUPTED by {record.interrupted}: the table holds the kernels that finished; "
                        "the rest were not measured.")
        if record.results:
            self._print()
            self._print("## Statistics (per kernel: all groups, all iterations)")
            self._print(("shape | " if multi_shape(record) else "") + STATS_HEADER)
            self._print(("-----:|" if multi_shape(record) else "") + STATS_RULE)
            for r in record.results:
                m = r.measurement
                groups = ", ".join(f"{g.mean_us:.1f} ({g.sd_us:.1f})" for g in m.groups)
                self._print(f"{self._shape(record, r)}{label(r, record)} | {r.variant} | {r.best_avg_us:.1f} | {m.overall_mean_us:.1f} | "
                            f"{m.overall_sd_us:.1f} | {m.median_us:.1f} | {groups} | {100 * m.cv:.1f} | "
                            f"{r.pct_read:.1f} | {fmt_opt(r.fixed_cost_us, '.1f')} | "
                            f"{r.max_rel_err:.1e}"
                            + ("" if r.act_quant_err is None else f" (act err {r.act_quant_err:.1e})"))
        warm = warm_rows(record)
        if warm:
            self._print()
            self._print("## Warm versus cold cache (--compare-warm: the same calls without the flush)")
            for line in markdown_table(WARM_HEADER, warm):
                self._print(line)
        if record.comparison is not None:
            self._print()
            self._print(f"## Rerun: against {record.comparison.labels[0]}")
            for line in markdown_table(COMPARE_HEADER, comparison_rows(record)):
                self._print(line)
            for diff in record.comparison.differences:
                self._print(f"! differs: {diff}")
        self._print()
        self._print("## Notes")
        for line in EXPLANATIONS + note_lines(record):
            self._print(f"- {line}")

"""Rich tables on a terminal, with a progress bar while the run goes on."""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemvbw.report.text import (
    COMPARE_HEADER, EXPLANATIONS, META_NAMES, WARM_HEADER, comparison_rows, fmt_opt, header_lines, label,
    note_lines, overhead_line, warm_rows,
)
from gemvbw.results import KernelFailure, KernelResult, SweepRecord
from gemvbw.roofline import read_ways


def read_bar(pct: float, width: int = 5) -> str:
    filled = max(0, min(width, round(pct / 100 * width)))
    return "█" * filled + "·" * (width - filled)


class RichReporter:
    def __init__(self, stream: TextIO):
        self.console = Console(file=stream)
        self.progress: Progress | None = None
        self.task = None

    def start(self, record: SweepRecord, total_groups: int) -> None:
        s = record.settings
        self.console.rule(f"gemvbw sweep  W({s['M']}x{s['K']})  block {s['block']}  "
                          f"meta {META_NAMES[s['meta_bytes']]}  bits {','.join(map(str, s['bits']))}")
        for line in header_lines(record):
            self.console.print(line, highlight=False)
        for note in record.notes:
            if note.code == "block-exceeds-K":
                self.console.print(f"[yellow]note: {note.message}[/]", highlight=False)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("groups"),
            TimeElapsedColumn(), console=self.console, transient=True,
        )
        self.task = self.progress.add_task("rooflines", total=total_groups)
        self.progress.start()

    def roofline(self, record: SweepRecord) -> None:
        rf = record.roofline
        self.console.print(
            f"memcpy roofline [bold]{rf.memcpy.gbps:.1f} GB/s[/] ({rf.memcpy.buffer_bytes >> 20} MiB, read+write counted) "
            f"@ {rf.threads} threads"
        )
        self.console.print(
            f"read roofline [bold]{rf.read.gbps:.1f} GB/s[/] ({rf.read.buffer_bytes >> 20} MiB"
            f"{', ' + ways if (ways := read_ways(rf.read)) else ''}) @ {rf.threads} threads"
        )
        self.console.print(overhead_line(record), highlight=False)

    def group_done(self, name: str, index: int, group) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=f"{name} group {index + 1}: {group.mean_us:.0f} us")

    def result(self, record: SweepRecord, r: KernelResult) -> None:
        self.console.print(f"[green]✓[/] {label(r, record)}: {r.eff_gbps:.2f} GB/s, {r.pct_read:.0f}% of read "
                           f"(verified, max rel err {r.max_rel_err:.1e})")

    def failure(self, record: SweepRecord, f: KernelFailure) -> None:
        self.console.print(f"[bold red]✗ {label(f, record)} ({f.variant}): {f.message}[/]", highlight=False)

    def finish(self, record: SweepRecord) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None  # (any value: nothing reads it after the run)
        if record.results or record.failures:
            figures = self._figures(record)
            # measured on a width no table reaches (any such width gives the same figure)
            needed = self.console.measure(figures, options=self.console.options.update_width(1 << 16)).maximum
            if needed > self.console.width:  # rich would cut every cell short ("1845…"): say so, and what shows all
                self.console.print(f"[yellow]The table needs {needed} columns and this terminal has "
                                   f"{self.console.width}: its figures are cut short. Widen the terminal, or use "
                                   "--format mnn (markdown, one line per row).[/]", highlight=False)
            self.console.print(figures)
        if record.results:
            self.console.print(self._statistics(record))
        warm = warm_rows(record)
        if warm:
            self.console.print(self._simple("Warm versus cold cache", WARM_HEADER, warm))
        if record.comparison is not None:
            self.console.print(self._simple(f"Rerun: against {record.comparison.labels[0]}", COMPARE_HEADER,
                                            comparison_rows(record)))
            for diff in record.comparison.differences:
                self.console.print(f"[yellow]! differs: {diff}[/]", highlight=False)
        if record.interrupted:
            self.console.print(f"[bold yellow]Interrupted by {record.interrupted}[/]: the table holds the kernels "
                               "that finished; the rest were not measured.")
        for line in EXPLANATIONS + note_lines(record):
            self.console.print(f"• {line}", highlight=False)

    @staticmethod
    def _figures(record: SweepRecord) -> Table:
        table = Table(title="GEMV: eff GB/s against the rooflines", title_justify="left",
                      box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1),
                      pad_edge=False)
        multi = len(record.settings.get("shapes") or []) > 1
        cols = (("shape",) if multi else ()) + ("type", "thr", "us/iter", "W MiB", "B/elem", "eff GB/s", "%peak",
                                                 "%read", "GFLOPS", "AI")
        # (rich renders any justify it does not know as "left", and pad_edge=None as False: such mutants are
        # equivalent; no_wrap matters on a narrow terminal, see tests/test_views.py)
        for col in cols:
            table.add_column(col, justify="left" if col in ("type", "shape") else "right", no_wrap=True)
        for r in record.results:
            flag = " [yellow]![/]" if r.notes else ""
            shape = (f"{r.M}x{r.K}",) if multi else ()
            table.add_row(*shape, label(r, record) + flag, str(r.threads), f"{r.best_avg_us:.1f}", f"{r.w_mib:.1f}",
                          f"{r.bytes_per_elem:.4f}", f"{r.eff_gbps:.2f}", f"{r.pct_peak:.1f}",
                          f"{r.pct_read:.1f} {read_bar(r.pct_read)}", f"{r.gflops:.2f}", f"{r.ai:.2f}")
        for f in record.failures:
            shape = (f"{f.M}x{f.K}",) if multi else ()
            # rich leaves the cells not given blank (and renders None as blank too)
            table.add_row(*shape, f"[red]{label(f, record)}[/]", "", "[red]failed[/]")
        return table

    @staticmethod
    def _statistics(record: SweepRecord) -> Table:
        # (pad_edge=None reads as False, as in _figures: an equivalent mutant)
        table = Table(title="Statistics (us; groups: mean ± sample SD)", title_justify="left",
                      box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1),
                      pad_edge=False)
        for col in ("type", "variant", "best", "mean", "sd", "median", "cv %", "fixed", "rel err", "groups"):
            table.add_column(col, justify="left" if col in ("type", "variant", "groups") else "right")
        for r in record.results:
            m = r.measurement
            groups = ", ".join(f"{g.mean_us:.0f}±{g.sd_us:.0f}" for g in m.groups)
            table.add_row(label(r, record), r.variant, f"{r.best_avg_us:.1f}", f"{m.overall_mean_us:.1f}",
                          f"{m.overall_sd_us:.1f}", f"{m.median_us:.1f}", f"{100 * m.cv:.1f}",
                          fmt_opt(r.fixed_cost_us, ".1f"), f"{r.max_rel_err:.1e}", groups)
        return table

    @staticmethod
    def _simple(title: str, header: list[str], rows: list[list[str]]) -> Table:
        # (pad_edge=None reads as False, as in _figures: an equivalent mutant)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), pad_edge=False)
        for i, col in enumerate(header):
            table.add_column(col, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        return table

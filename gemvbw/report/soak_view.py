"""The soak's time series: a live table on a terminal, one line per window otherwise."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.live import Live
from rich.table import Table

from gemvbw.report.json_out import dumps


def _mhz(values) -> str:
    return "/".join("?" if m is None else f"{m:.0f}" for m in values) or "?"


def _temp(c) -> str:
    return "?" if c is None else f"{c:.1f}"


class SoakView:
    def __init__(self, fmt: str):
        self.fmt = fmt  # rich, text (also for mnn when piped), json, csv
        if self.fmt == "mnn":
            self.fmt = "text"
        self.console = Console()
        self.live = None
        self.rows = []

    def start(self, seconds: float, interval: float) -> None:
        if self.fmt == "rich":
            # rich's defaults: four refreshes a second, the table left on screen when it stops
            self.live = Live(self._table(), console=self.console)
            self.live.start()
        elif self.fmt == "text":
            print(f"# soak for {seconds:.0f} s, windows of {interval:g} s")
            print("t_s | calls | mean us | eff GB/s | MHz | C", flush=True)  # both lines reach a pipe now

    def _table(self) -> Table:
        table = Table(title="gemvbw soak", title_justify="left")
        for col in ("t s", "calls", "mean us", "eff GB/s", "MHz", "C"):
            table.add_column(col, justify="right")
        for row in self.rows[-20:]:
            table.add_row(*row)
        return table

    def window(self, record, w) -> None:
        row = [f"{w.t_s:.1f}", str(w.calls), f"{w.mean_us:.1f}", f"{w.eff_gbps:.2f}", _mhz(w.mhz), _temp(w.celsius)]
        if self.fmt == "rich":
            self.rows.append(row)
            self.live.update(self._table())
        elif self.fmt == "text":
            print(" | ".join(row), flush=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
            if not self.console.is_terminal:  # rich leaves a file or pipe on the table's last line
                self.console.line()

    def finish(self, record) -> None:
        if self.fmt == "json":
            sys.stdout.write(dumps(record.to_dict()))
            return
        if self.fmt == "csv":
            from gemvbw.soak import csv_text

            sys.stdout.write(csv_text(record))
            return
        s = record.summary()
        out = self.console.print if self.fmt == "rich" else print
        if record.interrupted:
            out(f"interrupted by {record.interrupted}: summary of the {s['windows']} window(s) measured")
        settings = record.settings
        out(f"w{settings['bits'][0]} {record.variant} {settings['M']}x{settings['K']}, {settings['threads']} threads, "
            f"{s['windows']} windows")
        if s["peak_gbps"] is None:
            out("no window completed")
            return
        out(f"peak {s['peak_gbps']:.2f} GB/s (best window); sustained {s['sustained_gbps']:.2f} GB/s "
            f"(median of the last third); sustained/peak {s['sustained_over_peak']:.2f}")
        out("sustained is what decode settles at once the device has heated up; a ratio well under 1 means "
            "throttling (see the MHz and C columns)")

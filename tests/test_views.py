"""Every renderer against the exact text it must print, for records built here from fixed figures.

The records go through the real code that derives figures and notes (metrics, result_notes,
run_notes, compare, token_summary), so a changed formula, threshold, column or word shows up
as a diff against tests/fixtures/views/. After a deliberate change to the output, rewrite the
files with GEMVBW_UPDATE_GOLDEN=1 and read the diff before committing it.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from gemvbw import metrics, models
from gemvbw.compare import compare
from gemvbw.harness import CallOverhead, FixedCost, Group, Measurement
from gemvbw.report import model_view
from gemvbw.report.csv_out import csv_text
from gemvbw.report.json_out import json_text
from gemvbw.report.mnn import mnn_text
from gemvbw.report.rich_view import RichReporter, read_bar
from gemvbw.results import (KernelFailure, KernelResult, Note, SweepRecord, result_notes, roofline_moved_notes,
                            run_notes)
from gemvbw.roofline import Bandwidth, Roofline

GOLDEN = Path(__file__).parent / "fixtures" / "views"
M, K = 4096, 14336

SYSTEM = {
    "cpu": "Example CPU 9000", "machine": "x86_64", "platform": "linux", "isa": ["avx2", "avx512_vnni"],
    "cores": 2, "affinity": [0, 1], "llc_bytes": 32 << 20, "affinity_clusters": [0], "affinity_mixed": False,
    "clusters": [{"cpus": [0, 1], "max_mhz": 3700.0}], "python": "3.11.7", "numba": "0.68.1",
    "threading_layer": "omp",
}


def settings(**over) -> dict:
    s = {"M": M, "K": K, "bits": [8, 4, 2], "block": 64, "threads": 2, "iters": 4, "reps": 3, "flush_mib": 64,
         "meta_bytes": 2, "act": "auto", "kernel": "auto", "seed": 0, "shapes": [[M, K]], "cpus": None,
         "compare_warm": True}
    s.update(over)
    return s


ROOFLINE = Roofline(Bandwidth("memcpy", 2, 512 << 20, 0.0392, (0.0392, 0.0401), 27.4),
                    Bandwidth("read", 2, 256 << 20, 0.00671, (0.00671, 0.0070), 40.0, 8, ((1, 33.5), (4, 38.2), (8, 40.0))))
OVERHEAD = CallOverhead(median_us=1.5, min_us=1.1, timer_resolution_ns=30.0, cold_median_us=24.0, flush_mib=64)


def measurement(*groups_us: tuple[float, ...]) -> Measurement:
    return Measurement(tuple(Group(tuple(round(us * 1000) for us in g)) for g in groups_us))


def result(bits: int, groups_us, variant: str, shape=(M, K), act="i8", warm=None, notes_for=True,
           fixed_us=None, flush_mib=64) -> KernelResult:
    m, k = shape
    fixed = None if fixed_us is None else FixedCost(fixed_us, 16, 128, flush_mib)
    logical = metrics.logical_bytes(m, k, bits, 64, 2)
    meas = measurement(*groups_us)
    warm_meas = None if warm is None else measurement(*warm)
    notes = () if not notes_for else result_notes(meas, metrics.eff_gbps(logical, meas.best_avg_us / 1e6), OVERHEAD,
                                                  ROOFLINE, logical, 32 << 20, 64, warm_meas is not None, fixed)
    return KernelResult(bits, m, k, 64, 2, 2, act, variant, meas, logical, logical + 4096, 2.4e-7, ROOFLINE,
                        notes=notes, warm=warm_meas, act_quant_err=3.1e-3 if act == "i8" else None, fixed_cost=fixed)


def single_record() -> SweepRecord:
    """One shape, three widths (one of them noisy, one with a warm figure), a failure, every run note."""
    rec = SweepRecord(SYSTEM, settings(), command=["gemvbw", "sweep", "--compare-warm"],
                      created="2026-12-01T12:00:00+00:00", roofline=ROOFLINE, overhead=OVERHEAD, partial=False)
    rec.notes = run_notes(64, 32 << 20, 2, 2)
    rec.act_choice = {w: [{"act": "i8", "why": "int8 activations: avx512vnni kernels exist for this CPU and block"}]
                      for w in ("w8", "w4", "w2")}
    rec.kernel_choice = {"w8": {"variant": "packed-4x2-avx512vnni", "source": "calibrated now",
                                "timings_us": {"packed-4x2-avx512vnni": 1851.0, "packed-4x2-avx2": 1990.5}}}
    rec.results = [
        result(8, [(1850, 1870, 1860, 1880), (1840, 1845, 1850, 1845), (1900, 1910, 1890, 1905)],
               "packed-4x2-avx512vnni", fixed_us=21.0),
        result(4, [(1100, 1500, 900, 1300), (1000, 1020, 1010, 1030), (1400, 1250, 1300, 1000)],
               "packed-4x2-avx512vnni", warm=[(780, 790, 800, 785), (770, 775, 772, 778)]),
    ]
    rec.failures = [KernelFailure(2, M, K, "packed-4x2-avx512vnni", "FAILED verification: max rel err 3.2e-01 > 1.0e-02",
                                  0.32, 0.01, "i8")]
    # the read roofline measured again after the rows (as the runner does), 25 % higher
    rec.read_after = Bandwidth("read", 2, 256 << 20, 0.00537, (0.00537, 0.0056), 50.0, 4, ((1, 41.0), (4, 50.0)))
    rec.notes += roofline_moved_notes(ROOFLINE.read, rec.read_after, rec.results)
    return rec


def multi_record() -> SweepRecord:
    """Two shapes, --kernel all with f32 beside i8 (mixed activations), interrupted, with a rerun comparison."""
    s = settings(bits=[4], kernel="all", shapes=[[64, 40], [4096, 1024]], M=64, K=40, compare_warm=False,
                 flush_mib=0, cpus=[0, 1])
    rec = SweepRecord(SYSTEM, s, command=["gemvbw", "sweep"], created="2026-12-01T12:05:00+00:00",
                      roofline=ROOFLINE, overhead=OVERHEAD, interrupted="SIGINT (Ctrl-C)")
    rec.notes = run_notes(0, None, 2, 2, block=64, K=40, act="auto", i8_available=True) + \
        [Note("contention", "a made-up run note", "its advice")]
    rec.act_choice = {"w4": [{"act": "i8", "why": "int8 activations: avx512vnni kernels exist for this CPU and block"},
                             {"act": "f32", "why": "--kernel all: the f32 variants too"}]}
    rec.results = [
        result(4, [(3.0, 3.2, 3.1, 3.3)], "packed-4x2-avx512vnni", shape=(64, 40), fixed_us=1.2, flush_mib=0),
        result(4, [(4.1, 4.0, 4.2, 4.3)], "rows4", shape=(64, 40), act="f32"),
        result(4, [(95.0, 96.0, 94.0, 97.0)], "packed-4x2-avx512vnni", shape=(4096, 1024), notes_for=False),
    ]
    rec.failures = [KernelFailure(4, 4096, 1024, "rows4", "crashed: ValueError('made up')", act="f32")]
    before = json.loads(json_text(rec))
    for r in before["results"]:
        r["eff_gbps"] *= 0.8
    before["settings"]["seed"] = 1
    del before["results"][-1]  # a row only this run has: its before and ratio are '-'

    rec.comparison = compare([before, json.loads(json_text(rec))], ["before.json", "this run"])
    return rec


def console(out, width: int, ansi: bool = False) -> Console:
    """A console of fixed width for a golden file: plain, or with the ANSI styles a terminal would get (its colours
    and highlighting decided by gemvbw), never a live terminal (the progress bar would print timings)."""
    return Console(file=out, width=width, color_system="standard" if ansi else None, force_terminal=False,
                   legacy_windows=False)


def rich_text(rec: SweepRecord, ansi: bool = False, width: int = 132) -> str:
    out = io.StringIO()
    rep = RichReporter(out)
    rep.console = console(out, width, ansi)
    rep.start(rec, total_groups=sum(len(r.measurement.groups) for r in rec.results))
    rep.roofline(rec)
    for r in rec.results:
        for i, g in enumerate(r.measurement.groups):
            rep.group_done(r.type, i, g)
        rep.result(rec, r)
    for f in rec.failures:
        rep.failure(rec, f)
    rep.finish(rec)
    return out.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GEMVBW_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from {path} (GEMVBW_UPDATE_GOLDEN=1 rewrites it after a deliberate change)"


@pytest.mark.parametrize("make", [single_record, multi_record], ids=["single", "multi"])
@pytest.mark.parametrize("fmt", ["md", "csv", "json", "rich", "rich-ansi"])
def test_each_format_prints_exactly_the_recorded_text(make, fmt):
    rec = make()
    text = {"md": mnn_text, "csv": csv_text, "json": json_text, "rich": rich_text,
            "rich-ansi": lambda r: rich_text(r, ansi=True)}[fmt](rec)
    check_golden(f"{make.__name__}.{fmt}", text)


def test_a_terminal_too_narrow_for_the_figures_says_so():
    wide = rich_text(single_record(), width=80)  # a laptop's terminal: the table fits, no word about it
    check_golden("single_record.rich-80", wide)
    assert "The table needs" not in wide
    narrow = rich_text(single_record(), width=56)  # a phone's: rich cuts cells short, the user is told
    check_golden("single_record.rich-56", narrow)
    assert ("The table needs 78 columns and this terminal has 56: its figures are cut short. Widen the terminal, "
            "or use --format mnn") in " ".join(narrow.replace("\n--", " --").split())
    assert "The table needs" not in rich_text(single_record(), width=78)  # exactly as wide as the table: it fits
    assert "The table needs 78 columns and this terminal has 77" in rich_text(single_record(), width=77)
    # one colour for the whole warning: its numbers are not highlighted apart
    assert "\x1b[33mThe table needs 78 columns and this terminal has 56" in rich_text(single_record(), True, 56)


def test_the_figures_in_the_golden_record_are_the_formulas_by_hand():
    """The record behind the golden files, checked by hand once: w8 logical bytes, its figures, its notes."""
    rec = single_record()
    w8, w4 = rec.results
    assert w8.logical_bytes == 4096 * 14336 + 4096 * 224 * 2 * 2 == 62_390_272
    assert w8.best_avg_us == 1845.0 and round(w8.eff_gbps, 3) == round(62_390_272 / 1845e-6 / 1e9, 3) == 33.816
    assert round(w8.pct_read, 2) == 84.54 and round(w8.gflops, 2) == round(2 * M * K / 1845e-6 / 1e9, 2) == 63.65
    assert [n.code for n in w8.notes] == []
    assert [n.code for n in w4.notes] == ["noisy", "groups-disagree", "warm-cache"]
    # sorted: 900 1000 1000 1010 1020 1030 | 1100 1250 1300 1300 1400 1500: median 1065, MAD 115
    assert w4.measurement.robust_spread == pytest.approx(1.4826 * 115 / 1065)
    assert w4.warm_eff_gbps == pytest.approx(33_030_144 / 773.75e-6 / 1e9)


def test_read_bar_fills_one_cell_per_fifth():
    # round() halves to even: 50 % of five cells is 2.5, two cells
    assert [read_bar(p) for p in (0, 9, 20, 50, 70, 100, 140, -5)] == \
        ["·····", "·····", "█····", "██···", "████·", "█████", "█████", "·····"]
    assert read_bar(50, width=10) == "█████·····"


def model_summaries():
    """w4 at 30 GB/s on every projection (75 % of a 40 GB/s read roofline); w8 at 45 GB/s, above it."""
    preset = models.load("llama-3.2-1b")
    summaries = []
    for bits, gbps, variant in ((4, 30.0, "packed-4x2-avx2"), (8, 45.0, None)):
        measured = {}
        for i, shape in enumerate(preset.shapes):
            lb = metrics.logical_bytes(*shape, bits, 64, 2)
            row_variant = variant or ("rows4" if i % 2 else "packed-4x2-avx2")
            measured[shape] = (lb, round(lb / gbps / 1e3, 1), row_variant)
        summaries.append(models.token_summary(preset, bits, measured, 40.0))
    return preset, summaries


def test_model_tables_print_exactly_the_recorded_text():
    preset, summaries = model_summaries()
    # 30/40 and 45/40 of the bound, but for the 0.1 us rounding of each call
    assert summaries[0].pct_of_bound == pytest.approx(75, abs=0.01) and summaries[1].pct_of_bound == pytest.approx(112.5, abs=0.01)
    check_golden("model.md", model_view.markdown(preset, summaries))
    for ansi, name in ((False, "model.rich"), (True, "model.rich-ansi")):
        out = io.StringIO()
        model_view.print_rich(console(out, 132, ansi), preset, summaries)
        check_golden(name, out.getvalue())


def soak_record(windows):
    from gemvbw.soak import SoakRecord, Window

    rec = SoakRecord(SYSTEM, settings(bits=[4], M=4096, K=4096, threads=2), "packed-4x2-avx2", 9_437_184, 10.0, 2.0,
                     created="2026-12-01T12:10:00+00:00")
    rec.windows = [Window(2.0 * (i + 1), calls, us, 9_437_184 / us / 1e3, mhz, c)
                   for i, (calls, us, mhz, c) in enumerate(windows)]
    return rec


def test_soak_text_view_prints_each_window_and_the_summary(capsys):
    from gemvbw.report.soak_view import SoakView

    # peak 31.46 GB/s (300 us); the last third of five windows is the last one: 360 us, 26.21 GB/s, ratio 0.83
    rec = soak_record([(6000, 300.0, (3700.0, 3650.0), 61.5), (5900, 305.0, (3600.0, None), 70.25),
                       (5500, 330.0, (), None), (5200, 350.0, (3100.0,), 85.0), (5100, 360.0, (3000.0,), 88.0)])
    view = SoakView("mnn")  # piped: the text form
    view.start(10.0, 2.0)
    for w in rec.windows:
        view.window(rec, w)
    view.stop()
    view.finish(rec)
    rec.interrupted = "SIGINT (Ctrl-C)"
    rec.windows = []
    view.finish(rec)
    check_golden("soak.txt", capsys.readouterr().out)


SOAK_WINDOWS = [(6000, 300.0, (3700.0, 3650.0), 61.5), (5900, 305.0, (3600.0, None), 70.25),
                (5500, 330.0, (), None)]


@pytest.mark.parametrize("ansi", [False, True], ids=["plain", "ansi"])
def test_soak_rich_view_keeps_the_table_on_screen(ansi):
    from gemvbw.report.soak_view import SoakView

    rec = soak_record(SOAK_WINDOWS)
    out = io.StringIO()
    view = SoakView("rich")
    view.console = console(out, 100, ansi)
    view.start(6.0, 2.0)
    for w in rec.windows:
        view.window(rec, w)
    view.stop()
    view.finish(rec)
    check_golden("soak.rich-ansi" if ansi else "soak.rich", out.getvalue())


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_soak_file_formats_print_the_whole_record(fmt, capsys, monkeypatch):
    from gemvbw.report.soak_view import SoakView

    monkeypatch.setattr("sys.argv", ["gemvbw", "soak", "--seconds", "6"])
    rec = soak_record(SOAK_WINDOWS)
    view = SoakView(fmt)
    view.start(6.0, 2.0)
    for w in rec.windows:
        view.window(rec, w)
    view.stop()
    view.finish(rec)
    check_golden(f"soak.{fmt}", capsys.readouterr().out)


def test_model_json_per_width_is_exactly_the_recorded_text():
    _, summaries = model_summaries()
    check_golden("model.json", json.dumps([s.to_dict() for s in summaries], indent=1, sort_keys=True) + "\n")


# --- the header and notes of a run on other machines: whole lines --------------------------------

def test_the_header_on_a_mixed_machine_without_known_speeds():
    from gemvbw.report.text import header_lines

    system = SYSTEM | {"isa": [], "affinity": [0, 1, 4], "affinity_clusters": [0, 1, 2], "affinity_mixed": True,
                       "clusters": [{"cpus": [0, 1], "max_mhz": 3700.0}, {"cpus": [4, 5], "max_mhz": None}]}
    rec = SweepRecord(system, settings(cpus=[0, 1, 4], flush_mib=0), command=["gemvbw"],
                      created="2026-12-01T12:00:00+00:00", roofline=ROOFLINE, overhead=OVERHEAD, partial=False)
    assert header_lines(rec)[:2] == [
        "cpu: Example CPU 9000 (x86_64; none of interest)",
        # a cluster index the machine does not list (2: one past the last) is left out, not an error
        "cpus: CPUs 0-1,4 (pinned with --cpus) in cluster [0] CPUs 0-1, max 3700 MHz; [1] CPUs 4-5, max unknown"
        " -- MIXED core types",
    ]
    assert header_lines(rec)[3].startswith("flush: 0 MiB before each call (warm cache); metadata fp16;")


def test_a_kernel_choice_without_timings_says_only_where_it_came_from():
    from gemvbw.report.text import note_lines

    rec = single_record()
    rec.notes = []
    rec.results = []
    rec.kernel_choice = {"w4": {"variant": "packed-16c4-avx512vnni-zmm", "source": "cached", "timings_us": {}},
                         "w8": {"variant": "x", "source": "calibrated now", "timings_us": {"y": 20.4, "x": 10.6}}}
    assert note_lines(rec) == ["--kernel auto chose packed-16c4-avx512vnni-zmm for w4 (cached)",
                               "--kernel auto chose x for w8 (calibrated now; warm calibration on this shape: "
                               "x 11 us, y 20 us)"]


def test_the_progress_bar_counts_groups_and_names_the_last_one():
    rec = single_record()
    stream = io.StringIO()
    rep = RichReporter(stream)
    assert rep.console.file is stream  # the reporter prints where it was told
    rep.console = console(io.StringIO(), 132)
    assert rep.progress is None and rep.task is None
    rep.group_done("w8", 0, rec.results[0].measurement.groups[0])  # before start: nothing to advance, no error
    rep.start(rec, total_groups=7)
    bar = rep.progress
    columns = [(type(c).__name__, getattr(c, "text_format", None)) for c in bar.columns]
    assert columns == [("TextColumn", "{task.description}"), ("BarColumn", None), ("MofNCompleteColumn", None),
                       ("TextColumn", "groups"), ("TimeElapsedColumn", None)]
    task = bar.tasks[0]
    assert (task.description, task.total, task.completed) == ("rooflines", 7, 0) and bar.live.transient
    w4 = rec.results[1]
    rep.group_done("w4", 1, w4.measurement.groups[1])
    assert (task.description, task.completed) == (f"w4 group 2: {w4.measurement.groups[1].mean_us:.0f} us", 1)
    rep.finish(rec)
    assert rep.progress is None and not bar.live.is_started


class _Flushes(io.StringIO):
    """stdout that remembers what had been flushed: a reader on a pipe sees only that."""
    seen = ""

    def flush(self):
        self.seen = self.getvalue()


def test_soak_text_lines_reach_a_pipe_as_they_are_measured(monkeypatch):
    from gemvbw.report.soak_view import SoakView

    out = _Flushes()
    monkeypatch.setattr("sys.stdout", out)
    rec = soak_record(SOAK_WINDOWS)
    view = SoakView("text")
    view.start(6.0, 2.0)
    assert out.seen == "# soak for 6 s, windows of 2 s\nt_s | calls | mean us | eff GB/s | MHz | C\n"
    view.window(rec, rec.windows[0])
    assert out.seen.endswith("\n2.0 | 6000 | 300.0 | 31.46 | 3700/3650 | 61.5\n")


def test_soak_live_table_shows_the_last_twenty_windows(capsys):
    from gemvbw.report.soak_view import SoakView

    rec = soak_record([(100 + i, 300.0 + i, (), None) for i in range(22)])
    view = SoakView("rich")  # its own console, on stdout
    view.start(44.0, 2.0)
    live = view.live
    table = live.get_renderable()
    assert (live.transient, live.refresh_per_second) == (False, 4) and table.title == "gemvbw soak"
    assert [c.header for c in table.columns] == ["t s", "calls", "mean us", "eff GB/s", "MHz", "C"]
    for w in rec.windows:
        view.window(rec, w)
    table = live.get_renderable()
    assert table.row_count == 20 and table.columns[1]._cells == [str(100 + i) for i in range(2, 22)]
    view.stop()
    assert view.live is None and not live.is_started
    view.finish(rec)
    assert "gemvbw soak" in capsys.readouterr().out


def test_model_lines_at_the_bound_and_in_megabytes():
    from gemvbw.report.model_view import gap_line, markdown, summary_lines

    preset = models.Preset("One", "made up", 64, 1, 0, False, (models.Projection("p", 64, 64),))
    # 150.05 MB per token in exactly the bound's time at 40 GB/s (MB: 1e6 bytes; 150.05 rounds up)
    s = models.token_summary(preset, 4, {(64, 64): (150_050_000, 3751.25, None)}, 40.0)
    assert gap_line(s) == "the kernels reach 100% of the bound (0.00 ms per token above it)"  # exactly at it
    assert summary_lines(s)[0] == "weight bytes per token: 150.1 MB (sum over projections x count per token)"
    assert summary_lines(s)[2].startswith("bandwidth bound: 150.1 MB / 40.0 GB/s (read roofline) = 3.75 ms")
    assert markdown(preset, [s]).splitlines()[5].endswith("| -")  # no variant recorded: "-"
    out = io.StringIO()
    model_view.print_rich(console(out, 132), preset, [s])
    assert next(l for l in out.getvalue().splitlines() if l.lstrip().startswith("p ")).rstrip().endswith(" -")


@pytest.mark.parametrize("fmt", ["rich", "mnn", "json", "csv"])
def test_each_screen_reporter_writes_to_the_stream_it_was_given(fmt):
    from gemvbw.report import screen_reporter

    stream = io.StringIO()
    reporter = screen_reporter(fmt, stream)
    target = reporter.console.file if fmt == "rich" else reporter.stream
    assert target is stream


def test_a_model_row_without_a_variant_shows_a_dash():
    preset = models.load("llama-3.2-1b")
    measured = {shape: (metrics.logical_bytes(*shape, 4, 64, 2), 100.0) for shape in preset.shapes}  # no variant
    summary = models.token_summary(preset, 4, measured, 40.0)
    out = io.StringIO()
    model_view.print_rich(console(out, 132), preset, [summary])
    rows = [line.split() for line in out.getvalue().splitlines() if line.split()[:1] == [preset.projections[0].name]]
    assert rows and all(r[-1] == "-" for r in rows)
    md = [line for line in model_view.markdown(preset, [summary]).splitlines() if " | 100.0 | " in line]
    assert len(md) == len(preset.projections) and all(line.endswith(" | -") for line in md)

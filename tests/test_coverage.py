"""Behaviour that had no test: the timing loop's stop rule, every warning code at its threshold, the exporters,
and the views of a run that no other test reads (values asserted, machine facts injected)."""

import json

import numba
import numpy as np
import pytest
from click.testing import CliRunner

from gemvbw.cli import main
from gemvbw.harness import CacheFlusher, CallOverhead, Group, Measurement, time_groups
from gemvbw.results import result_notes, run_notes
from gemvbw.roofline import Bandwidth, Roofline

# --llc-mib: the read roofline's buffer follows the cache (8x it), so without it a machine reporting a large L3
# (a VM's 480 MiB) reads 3840 MiB in every one of these sweeps
TINY = ["sweep", "--M", "64", "--K", "256", "--iters", "2", "--reps", "1", "--flush-mib", "1",
        "--llc-mib", "32", "--threads", "1"]


def run(args, env=None):
    return CliRunner().invoke(main, args, env=env or {}, catch_exceptions=False)


class FakeClock:
    """perf_counter_ns for the timed calls (each call takes the next duration) and monotonic for the budget."""

    def __init__(self, durations_ns, seconds_per_group=0.0, iters=1):
        self.durations = list(durations_ns)
        self.t = 0
        self.reads = 0
        self.seconds = 0.0
        self.per_group = seconds_per_group
        self.iters = iters

    def ns(self):
        self.reads += 1
        if self.reads % 2 == 0:  # the read after a call: advance by its duration
            self.t += self.durations.pop(0)
            if (self.reads // 2) % self.iters == 0:
                self.seconds += self.per_group
        return self.t

    def mono(self):
        return self.seconds


def test_time_groups_times_each_call_between_two_clock_reads():
    clock = FakeClock([100, 200, 300, 400, 500, 600])
    m = time_groups(lambda: None, 2, 3, CacheFlusher(0), clock=clock.ns, monotonic=clock.mono)
    assert [g.latencies_ns for g in m.groups] == [(100, 200), (300, 400), (500, 600)]
    assert m.best_avg_us == 0.15 and m.extended is False and m.stable is None


def test_time_groups_adds_groups_until_they_agree_or_the_time_is_up():
    # 10 s a group, 35 s allowed: a fourth group is added (30 s < 35), then the time is up, still 19% apart
    clock = FakeClock([1000, 1200, 1010, 1020], seconds_per_group=10.0)
    m = time_groups(lambda: None, 1, 3, CacheFlusher(0), max_seconds=35, clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 4 and m.extended is True and m.stable is False
    clock = FakeClock([1000, 1200, 1010, 1020, 1015], seconds_per_group=1.0)
    m = time_groups(lambda: None, 1, 3, CacheFlusher(0), max_seconds=30, clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 5 and m.stable is True  # the last three, 1010, 1020, 1015, agree within 1%
    clock = FakeClock([1000, 2000, 1000, 2000, 1000, 2000], seconds_per_group=10.0)
    m = time_groups(lambda: None, 1, 3, CacheFlusher(0), max_seconds=25, clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 3 and m.stable is False  # 30 s were spent by the third group: no more


RF = Roofline(Bandwidth("memcpy", 1, 1 << 28, 0.1, (0.1,), 20.0), Bandwidth("read", 1, 1 << 28, 0.1, (0.1,), 10.0))
OVERHEAD = CallOverhead(2.0, 1.5, 40.0)


def notes(us_list, eff, resident=1 << 40, llc=32 << 20, flush=64, warm=False):
    m = Measurement((Group(tuple(int(u * 1000) for u in us_list)),))
    return {n.code for n in result_notes(m, eff, OVERHEAD, RF, resident, llc, flush, warm)}


def test_row_warnings_at_their_thresholds():
    steady = [100.0] * 10
    assert notes(steady, 5.0) == set()
    assert "call-overhead" in notes([39.9] * 10, 5.0)  # under 20 x 2.0 us
    assert "call-overhead" not in notes([40.0] * 10, 5.0)
    assert "above-read-roofline" in notes(steady, 11.01) and "above-read-roofline" not in notes(steady, 11.0)
    assert "warm-cache" in notes(steady, 5.0, resident=1 << 20, flush=0)
    assert "warm-cache" not in notes(steady, 5.0, resident=1 << 20, flush=64)
    assert "warm-cache" in notes(steady, 5.0, resident=1 << 20, warm=True)
    two = Measurement((Group((100_000,) * 4), Group((106_000,) * 4)))
    codes = {n.code for n in result_notes(two, 5.0, OVERHEAD, RF, 1 << 40, None, 64)}
    assert codes == {"groups-disagree"}  # 6% apart; the bulk within each group is steady


@pytest.mark.parametrize("kwargs,code", [
    (dict(flush_mib=64, llc_bytes=None), "llc-unknown"),
    (dict(flush_mib=64, llc_bytes=16 << 20), "flush-not-guaranteed"),
    (dict(flush_mib=64, llc_bytes=32 << 20), "flush-small"),
    (dict(threads=1, affinity_size=2), "fewer-threads-than-cpus"),
    (dict(threads=1, affinity_size=2, thread_limit=1), "numba-thread-limit"),
    (dict(mixed_clusters=True), "mixed-clusters"),
    (dict(block=128, K=100), "block-exceeds-K"),
    (dict(act="f32", i8_available=True), "f32-activations"),
    (dict(emulated="QEMU user mode"), "emulated"),
])
def test_run_warnings_each_where_it_applies(kwargs, code):
    base = dict(flush_mib=64, llc_bytes=16 << 20, threads=2, affinity_size=2)
    args = {**base, **kwargs}
    codes = [n.code for n in run_notes(args.pop("flush_mib"), args.pop("llc_bytes"), args.pop("threads"),
                                       args.pop("affinity_size"), **args)]
    assert code in codes
    plain = [n.code for n in run_notes(64, 16 << 20, 2, 2)]
    assert plain == ["memcpy-counts-both", "flush-not-guaranteed"]  # what every run says, nothing else


def test_screen_figures_are_the_json_figures(tmp_path):
    out = tmp_path / "r.json"
    res = run(TINY + ["--bits", "4", "--act", "f32", "--kernel", "ref", "--json", str(out), "--format", "mnn"])
    doc = json.loads(out.read_text())
    rf, r = doc["roofline"], doc["results"][0]
    assert f"      1 | {rf['memcpy_gbps']:.1f}" in res.stdout and f"-> read {rf['read_gbps']:.1f} GB/s" in res.stdout
    row = next(l for l in res.stdout.splitlines() if l.startswith("w4   |"))
    assert f"{r['best_avg_us']:7.1f}" in row and f"{r['eff_gbps']:8.2f}" in row and f"{r['bytes_per_elem']:10.4f}" in row
    assert r["bytes_per_elem"] == (64 * 256 // 2 + 64 * 4 * 2 * 2) / (64 * 256)  # 0.5625 by hand
    assert doc["kernel_choice"] == {}  # a named kernel is not calibrated
    doc = json.loads(run(TINY + ["--bits", "4", "--act", "f32", "--format", "json"]).stdout)
    assert doc["kernel_choice"]["w4"]["variant"] in ("ref", "rows4") and doc["kernel_choice"]["w4"]["timings_us"]


def test_block_larger_than_K_counts_one_block_per_row():
    doc = json.loads(run(["sweep", "--M", "8", "--K", "40", "--block", "64", "--bits", "4", "--act", "f32",
                          "--iters", "1", "--reps", "1", "--flush-mib", "0", "--threads", "1",
                          "--format", "json"]).stdout)
    assert doc["results"][0]["bytes_per_elem"] == (8 * 40 // 2 + 8 * 1 * 2 * 2) / (8 * 40)  # 0.6 by hand


def test_exporters_write_what_the_screen_shows(tmp_path):
    md, csv = tmp_path / "r.md", tmp_path / "r.csv"
    res = run(TINY + ["--bits", "4,2", "--act", "f32", "--md", str(md), "--csv", str(csv), "--format", "mnn"])
    assert res.exit_code == 0
    assert md.read_text().splitlines()[:1] == res.stdout.splitlines()[:1] and "w2   |" in md.read_text()
    rows = csv.read_text().splitlines()
    assert rows[0].startswith("type,variant,bits") and [r.split(",")[2] for r in rows[1:]] == ["4", "2"]


def test_a_failed_kernel_has_a_csv_row_without_figures(tmp_path, broken_w4_kernel):
    csv = tmp_path / "r.csv"
    assert run(TINY + ["--bits", "4", "--act", "f32", "--kernel", broken_w4_kernel, "--csv", str(csv)]).exit_code == 1
    header, row = csv.read_text().splitlines()
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["variant"] == "broken" and cells["verified"] == "false" and cells["eff_gbps"] == ""
    assert "FAILED verification" in cells["error"]


def test_model_exports(tmp_path):
    from tests.test_models import TINY_MODEL

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    base = ["model", "--config", str(path), "--bits", "4", "--iters", "2", "--reps", "1", "--flush-mib", "1",
            "--threads", "1", "--act", "f32"]
    csv = tmp_path / "m.csv"
    assert run(base + ["--csv", str(csv), "--format", "mnn"]).exit_code == 0
    assert len(csv.read_text().splitlines()) == 1 + 3  # three distinct shapes, one width
    doc = json.loads(run(base + ["--format", "json"]).stdout)
    assert doc["model"]["name"] == "Tiny" and doc["model"]["per_bits"][0]["bits"] == 4
    rich = run(base + ["--format", "rich"]).stdout
    assert "w4: per projection" in rich and "tokens/s" in rich


def test_compare_three_files_with_rich(tmp_path):
    paths = []
    for seed in ("1", "2", "3"):
        p = tmp_path / f"r{seed}.json"
        assert run(TINY + ["--bits", "4", "--act", "f32", "--kernel", "ref", "--seed", seed, "--json", str(p)]).exit_code == 0
        paths.append(str(p))
    res = run(["compare", *paths, "--format", "rich"])
    assert res.exit_code == 0 and "[2]/[0]" in res.stdout and "! differs: settings.seed: 1 vs 2 vs 3" in res.stdout


def test_format_auto_is_rich_on_a_terminal_and_markdown_in_a_pipe():
    import io

    from gemvbw.report import resolve_format

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert resolve_format("auto", Tty()) == "rich" and resolve_format("auto", io.StringIO()) == "mnn"


def test_info_without_numba():
    import subprocess
    import sys

    code = ("import sys; sys.modules['numba'] = None\n"
            "from gemvbw.cli import entry; sys.argv = ['gemvbw', 'info']; entry()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cpu:") and "numba:      not importable;" in done.stdout


def test_the_flush_reads_one_byte_per_cache_line():
    flusher = CacheFlusher(1)  # 1 MiB of ones: 16384 lines of 64 bytes, read once at creation by each thread
    threads = numba.get_num_threads()
    assert flusher.sink == threads * (1 << 20) // 64
    flusher.flush()
    assert flusher.sink == 2 * threads * (1 << 20) // 64
    warm = CacheFlusher(0)
    warm.flush()
    assert warm.sink == 0 and warm.flush_mib == 0


@pytest.mark.parametrize("nbytes", [0, 1, 64, 65, 4096 + 7, 100_000])
def test_each_thread_of_the_flush_reads_every_line_once(nbytes):
    """Each of the threads (parts) reads every line's first byte once, whatever share it starts at: none skipped
    at the wrap, none read twice. Each line's byte is made distinct, so a line read twice or missed changes the
    sum."""
    from gemvbw.harness import LINE_BYTES, _strided_read

    buf = np.zeros(nbytes, np.uint8)
    firsts = np.arange(0, nbytes, LINE_BYTES)
    buf[firsts] = (np.arange(firsts.size) % 251 + 1).astype(np.uint8)
    for parts in (1, 2, 3, 7, 64):
        assert int(_strided_read(buf, LINE_BYTES, parts)) == parts * int(buf[firsts].astype(np.int64).sum())


def test_the_flush_is_read_by_every_thread_in_force(monkeypatch):
    from gemvbw import harness

    seen = []
    real = harness._strided_read
    monkeypatch.setattr(harness, "_strided_read", lambda buf, stride, parts: seen.append(parts) or real(buf, stride, parts))
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            flusher = harness.CacheFlusher(1)
            flusher.flush()
            assert seen[-2:] == [threads, threads] and flusher.sink == 2 * threads * (1 << 20) // 64
    finally:
        numba.set_num_threads(before)


def test_call_overhead_and_timer_step_from_the_clock(monkeypatch):
    import itertools

    from gemvbw import harness

    ticks = itertools.count(0, 250)  # every read of the clock is 250 ns after the last
    monkeypatch.setattr(harness.time, "perf_counter_ns", lambda: next(ticks))
    assert harness.timer_resolution_ns(samples=10) == 250.0
    overhead = harness.measure_call_overhead(1, calls=50)
    assert (overhead.median_us, overhead.min_us, overhead.timer_resolution_ns) == (0.25, 0.25, 250.0)


def test_measurement_statistics_by_hand():
    m = Measurement((Group((1000, 3000)), Group((2000, 2000)), Group((4000, 6000))))
    assert [g.mean_us for g in m.groups] == [2.0, 2.0, 5.0]
    assert m.best_avg_us == 2.0 and m.overall_mean_us == 3.0 and m.median_us == 2.5
    assert m.group_spread == 1.5  # (5 - 2) / 2
    assert m.overall_sd_us == pytest.approx((((2 ** 2 + 0 + 1 + 1 + 1 + 3 ** 2) / 5) ** 0.5))
    assert m.groups[0].sd_us == pytest.approx(2 ** 0.5) and m.groups[1].sd_us == 0.0
    assert m.cv == pytest.approx(m.overall_sd_us / 3.0)


def fake_measurement(robust_spread=0.0, cv=0.0, group_spread=0.0, stable=None, best_avg_us=100.0):
    """What result_notes reads of a measurement, set directly: a threshold can be met exactly."""
    from types import SimpleNamespace

    return SimpleNamespace(robust_spread=robust_spread, cv=cv, group_spread=group_spread, stable=stable,
                           best_avg_us=best_avg_us)


def row_notes(m, eff=5.0, resident=1 << 40, llc=32 << 20, flush=64, **kw):
    return {n.code: (n.message, n.advice) for n in result_notes(m, eff, OVERHEAD, RF, resident, llc, flush, **kw)}


def test_row_notes_exactly_at_and_past_their_thresholds_say_what_they_measured():
    assert row_notes(fake_measurement(robust_spread=0.10, group_spread=0.05)) == {}  # thresholds: not beyond
    noisy = row_notes(fake_measurement(robust_spread=0.99, cv=0.99))["noisy"]
    assert noisy == ("the bulk of the timed calls varies by 99% (1.4826 x median absolute deviation / median; "
                     "threshold 10%; coefficient of variation 99%)",
                     "close other programs, pin the run (taskset), or add --reps/--iters; the best group mean is "
                     "less affected than the overall mean")
    for stable, extra in ((None, ""), (False, " even after extra groups"), (True, "")):
        groups = row_notes(fake_measurement(group_spread=0.99, stable=stable))["groups-disagree"]
        assert groups == (f"group means differ by 99% (threshold 5%){extra}",
                          "rerun, or let gemvbw add groups until they agree: --max-seconds 30")


def test_row_notes_print_their_thresholds_as_set(monkeypatch):
    # thresholds where a percentage is not a whole number away from the next: each printed as it is, not rounded
    # from a neighbour
    from gemvbw import results

    monkeypatch.setattr(results, "NOISY_CV", 0.9)
    monkeypatch.setattr(results, "GROUP_SPREAD", 0.9)
    notes = row_notes(fake_measurement(robust_spread=0.95, cv=0.95, group_spread=0.95))
    assert "threshold 90%;" in notes["noisy"][0] and "(threshold 90%)" in notes["groups-disagree"][0]


def test_above_the_read_roofline_names_the_likely_cause():
    advice = "use a shape larger than the last-level cache, keep --flush-mib at least twice the LLC"
    m = fake_measurement()
    fits = row_notes(m, eff=12.34, resident=32 << 20)["above-read-roofline"]
    assert fits == ("12.3 GB/s is more than 10% above the read roofline (10.0 GB/s): not a DRAM figure (the weights "
                    "fit in the last-level cache and stayed there)", advice)
    for resident, llc in (((32 << 20) + 1, 32 << 20), (1 << 20, None)):  # larger than the LLC, or no LLC known
        other = row_notes(m, eff=12.34, resident=resident, llc=llc)["above-read-roofline"]
        assert other[0].endswith("(cache residency, timer trouble, or a kernel that skips work)")


def test_the_warm_cache_note_at_exactly_the_cache_size():
    m = fake_measurement()
    assert row_notes(m, resident=32 << 20, flush=0)["warm-cache"] == (
        "weights and activations (32.0 MiB) fit in the last-level cache (32 MiB): the warm (no flush) figure is a "
        "cache figure, not a DRAM one", "use the cold-cache figure (the default flush) for DRAM bandwidth")
    assert "warm-cache" not in row_notes(m, resident=(32 << 20) + 1, flush=0)
    assert "warm-cache" not in row_notes(m, resident=32 << 20)  # flushed, and no warm figure measured: none


def test_run_notes_use_their_documented_defaults_and_say_them_whole():
    def by_code(*args, **kw):
        return {n.code: (n.message, n.advice) for n in run_notes(*args, **kw)}

    assert by_code(64, 32 << 20, 2, 2)["flush-small"] == (
        "the cache flush (64 MiB) is less than 4 times the last-level cache (32 MiB, from /sys): weights may still be "
        "cached when timed (on a 32 MiB L3, a 64 MiB flush left a 15 MiB read 17 % faster than a 128 MiB one)",
        "use --flush-mib 128 or more (the default when --flush-mib is not given)")  # llc_source defaults to /sys
    assert "flush-small" not in by_code(128, 32 << 20, 2, 2)  # exactly four times: enough
    assert by_code(127, 32 << 20, 2, 2)["flush-small"][1].startswith("use --flush-mib 128 ")
    assert "block-exceeds-K" not in by_code(64, 32 << 20, 2, 2, K=64)  # block defaults to 64
    assert "f32-activations" in by_code(64, 32 << 20, 2, 2, i8_available=True)  # act defaults to f32
    assert by_code(64, 32 << 20, 2, 2, emulated="QEMU user mode")["emulated"] == (
        "this process runs under emulation (QEMU user mode): the figures time the emulator, not a CPU",
        "use such a run to check that the kernels verify; measure on the device itself")
    assert by_code(64, 32 << 20, 2, 2, i8_available=True)["f32-activations"] == (
        "--act f32 keeps x float32, so the kernels pay for float unpacking; MNN's GemvBW (memory mode Low, as its "
        "test sets) and llama.cpp's q8 paths quantize x to int8 per block on the fly, as the default --act auto "
        "does here",
        "drop --act f32 (or use --act i8) for the run that compares with MNN's and llama.cpp's figures")
    assert by_code(64, None, 2, 2)["llc-unknown"] == (
        "the last-level cache size could not be read, so whether the flush is large enough is unknown",
        "give it with --llc-mib, and use --flush-mib at least 4 times that")
    assert by_code(64, 32 << 20, 2, 2, K=5)["block-exceeds-K"][1] == "use --block 8 or smaller for several blocks per row"
    # numba's thread cap: named when it is what holds the run below the CPUs it may use, else the plain advice
    assert by_code(64, 32 << 20, 2, 4, thread_limit=2)["numba-thread-limit"] == (
        "numba runs at most 2 thread(s) here (NUMBA_NUM_THREADS) on 4 allowed CPUs: the run uses 2",
        "unset NUMBA_NUM_THREADS (or raise it) to use every CPU, or pin to as many CPUs as threads")
    for threads, cpus, limit in ((2, 2, 2), (1, 4, 2), (2, 4, None)):
        codes = by_code(64, 32 << 20, threads, cpus, thread_limit=limit)
        assert "numba-thread-limit" not in codes
        assert ("fewer-threads-than-cpus" in codes) == (threads < cpus)
    assert by_code(64, 32 << 20, 1, 4)["fewer-threads-than-cpus"] == (
        "1 thread(s) on 4 allowed CPUs: the scheduler may move threads between cores",
        "pin the run to as many CPUs as threads (taskset, or --cpus)")
    assert by_code(64, 32 << 20, 2, 2, mixed_clusters=True)["mixed-clusters"] == (
        "the CPUs in use span clusters of different speed (big.LITTLE): threads land on slower cores and the "
        "results mix core types",
        "pin to the fastest cluster: see the advice of gemvbw info (taskset MASK, or --cpus LIST)")


def test_call_overhead_and_timer_resolution_from_an_injected_clock(monkeypatch):
    import itertools

    from gemvbw import harness

    # three timed calls of 3, 1 and 2 us; then a clock that steps by 7 ns (each step seen after one repeat)
    head = [0, 3000, 10_000, 11_000, 20_000, 22_000]
    tail = (30_000 + 7 * (i // 2) for i in itertools.count())
    ticks = itertools.chain(head, tail)
    monkeypatch.setattr(harness.time, "perf_counter_ns", lambda: next(ticks))
    got = harness.measure_call_overhead(threads=2, calls=3)
    assert (got.median_us, got.min_us, got.timer_resolution_ns) == (2.0, 1.0, 7.0)
    steps = iter([0, 0, 25, 100, 110, 200, 240])  # steps of 25, 10 and 40 ns: the smallest is the resolution
    monkeypatch.setattr(harness.time, "perf_counter_ns", lambda: next(steps))
    assert harness.timer_resolution_ns(samples=3) == 10.0


def test_call_overhead_cold_is_timed_after_each_flush_of_the_run(monkeypatch):
    import numba

    from gemvbw import harness

    class CountingFlusher:
        flush_mib = 64

        def __init__(self):
            self.flushes = 0

        def flush(self):
            self.flushes += 1
            ticks.append(None)  # marks where each flush fell among the clock reads

    ticks: list = []
    # two warm calls of 1 and 3 us, then three cold calls of 30, 10 and 20 us
    reads = iter([0, 1000, 5000, 8000, 100_000, 130_000, 200_000, 210_000, 300_000, 320_000])

    def clock():
        ticks.append("t")
        return next(reads)

    monkeypatch.setattr(harness.time, "perf_counter_ns", clock)
    monkeypatch.setattr(harness, "timer_resolution_ns", lambda: 5.0)
    flusher = CountingFlusher()
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        got = harness.measure_call_overhead(1, calls=2, flusher=flusher, cold_calls=3)
    finally:
        numba.set_num_threads(old)
    assert flusher.flushes == 3
    assert ticks == ["t", "t", "t", "t"] + [None, "t", "t"] * 3  # each cold call right after its flush
    assert (got.median_us, got.min_us, got.cold_median_us, got.flush_mib, got.serial) == (2.0, 1.0, 20.0, 64, True)
    assert got.row_cost_us == 20.0 and got.call_name == "an empty serial call"
    warm_run = harness.CallOverhead(2.0, 1.0, 5.0)
    assert (warm_run.row_cost_us, warm_run.cold_median_us, warm_run.call_name) == (2.0, None, "an empty parallel call")


def test_call_overhead_of_a_warm_run_has_no_cold_figure(monkeypatch):
    from gemvbw import harness

    flushed = []
    flusher = harness.CacheFlusher(0)
    monkeypatch.setattr(flusher, "flush", lambda: flushed.append(1))
    got = harness.measure_call_overhead(2, calls=5, flusher=flusher)
    assert (got.cold_median_us, got.flush_mib, flushed) == (None, 0, [])


def test_call_overhead_note_compares_a_cold_row_with_the_cold_call():
    cold = CallOverhead(2.0, 1.5, 40.0, cold_median_us=30.0, flush_mib=64, serial=False)

    def found(us):
        m = Measurement((Group((int(us * 1000),) * 10),))
        return [n for n in result_notes(m, 5.0, cold, RF, 1 << 40, 32 << 20, 64) if n.code == "call-overhead"]

    assert found(600.0) == []
    (note,) = found(599.9)  # under 20 x 30 us, far above 20 x 2 us warm
    assert note.message == ("latency 599.9 us is under 20x the fixed cost of an empty parallel call (30.0 us after "
                            "a 64 MiB flush): this row measures call overhead as much as bandwidth")
    serial_warm = CallOverhead(0.5, 0.4, 40.0, serial=True)
    m = Measurement((Group((9000,) * 10),))
    (note,) = [n for n in result_notes(m, 5.0, serial_warm, RF, 1 << 40, 32 << 20, 0) if n.code == "call-overhead"]
    assert note.message.startswith("latency 9.0 us is under 20x the fixed cost of an empty serial call (0.5 us warm)")


def test_call_overhead_note_from_the_kernels_fixed_cost_at_its_threshold():
    from gemvbw.harness import FixedCost

    empty = CallOverhead(2.0, 1.5, 40.0, cold_median_us=30.0, flush_mib=64, serial=False)

    def found(us, fixed):
        m = Measurement((Group((int(us * 1000),) * 10),))
        return [n for n in result_notes(m, 5.0, empty, RF, 1 << 40, 32 << 20, 64, fixed_cost=fixed)
                if n.code == "call-overhead"]

    cold = FixedCost(12.0, 16, 128, 64)
    (note,) = found(120.0, cold)  # exactly 10%; the empty call's rule (under 20 x 30 us) is not the one applied
    assert note.message == ("the same kernel on a 16x128 matrix after the same 64 MiB flush takes 12.0 us (fixed us), "
                            "10% of this row's 120.0 us (threshold 10%): this row measures call overhead as well as "
                            "bandwidth")
    assert found(120.1, cold) == []
    assert not note.message.endswith("other")
    (above,) = found(30.0, FixedCost(51.0, 16, 128, 64))  # the tiny call's median above the row's best group
    assert above.message.endswith("170% of this row's 30.0 us (threshold 10%): this row measures call overhead as "
                                  "well as bandwidth; it came out above the row itself (the median of 30 single "
                                  "calls against the row's best group: calls this variable), so read the two as "
                                  "the same order, not one as a share of the other")
    (warm,) = found(10.0, FixedCost(1.0, 16, 256, 0))
    assert "on a 16x256 matrix with no flush" in warm.message


def test_fixed_cost_is_the_median_of_calls_each_after_the_flush(monkeypatch):
    from gemvbw import harness

    events = []

    class Flusher:
        flush_mib = 8

        def flush(self):
            events.append("flush")

    reads = iter([0, 5000, 10_000, 19_000, 20_000, 23_000])  # calls of 5, 9 and 3 us

    def clock():
        events.append("t")
        return next(reads)

    # time_groups took its clock as a default argument when defined: hand it the fake one
    real = harness.time_groups
    monkeypatch.setattr(harness, "time_groups", lambda *a, **k: real(*a, clock=clock, **k))
    calls = []
    got = harness.measure_fixed_cost(lambda: calls.append(1), 16, 128, Flusher(), calls=3)
    assert (got.median_us, got.M, got.K, got.flush_mib, got.shape) == (5.0, 16, 128, 8, "16x128")
    assert events == ["flush", "t", "t"] * 3 and len(calls) == 4  # one warm-up call, then three timed
    assert got.to_dict() == {"median_us": 5.0, "M": 16, "K": 128, "flush_mib": 8}
    assert harness.fixed_cost_shape(32) == (16, 64)


def test_time_groups_stops_as_soon_as_the_groups_agree():
    clock = FakeClock([1000, 1000, 1000, 1000], seconds_per_group=1.0)
    m = time_groups(lambda: None, 1, 3, CacheFlusher(0), max_seconds=30, clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 3 and m.extended is False and m.stable is True  # settled with the first three


def test_time_groups_settles_at_exactly_the_allowed_spread():
    clock = FakeClock([1000, 1500, 1000, 1400], seconds_per_group=1.0)
    m = time_groups(lambda: None, 1, 2, CacheFlusher(0), max_seconds=30, stable_within=0.5,
                    clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 2 and m.stable is True  # (1.5 - 1.0) / 1.0 = 0.5, not above it


def test_time_groups_budget_under_a_second_and_a_clock_not_at_zero():
    class Later(FakeClock):
        def mono(self):
            return 100.0 + self.seconds  # a monotonic clock's origin is arbitrary

    clock = Later([1000, 2000, 1000, 2000, 1000], seconds_per_group=0.2)
    m = time_groups(lambda: None, 1, 2, CacheFlusher(0), max_seconds=0.5, clock=clock.ns, monotonic=clock.mono)
    # 0.2 s a group: a third at 0.4 s < 0.5, none after 0.6 s; never within 5 %
    assert len(m.groups) == 3 and m.extended is True and m.stable is False


def test_time_groups_stops_when_the_budget_is_spent_exactly():
    clock = FakeClock([1000, 2000, 1000, 2000], seconds_per_group=10.0)
    m = time_groups(lambda: None, 1, 3, CacheFlusher(0), max_seconds=30, clock=clock.ns, monotonic=clock.mono)
    assert len(m.groups) == 3 and m.stable is False  # 30 s spent of 30: no fourth group


def test_time_groups_reports_each_group_by_its_index():
    seen = []
    clock = FakeClock([100, 200, 300, 400, 500, 600])
    time_groups(lambda: None, 2, 3, CacheFlusher(0), on_group=lambda i, g: seen.append((i, g.latencies_ns)),
                clock=clock.ns, monotonic=clock.mono)
    assert seen == [(0, (100, 200)), (1, (300, 400)), (2, (500, 600))]


def test_bandwidths_in_decimal_gigabytes_exactly():
    from gemvbw import metrics

    assert metrics.read_gbps(10 ** 9, 1.0) == 1.0 and metrics.read_gbps(3 * 10 ** 9, 2.0) == 1.5
    assert metrics.memcpy_gbps(10 ** 9, 1.0) == 2.0  # read and write


def test_timer_resolution_of_one_sample(monkeypatch):
    from gemvbw import harness

    reads = iter([100, 100, 107])  # t0, an unchanged read, then a step of 7 ns
    monkeypatch.setattr(harness.time, "perf_counter_ns", lambda: next(reads))
    assert harness.timer_resolution_ns(samples=1) == 7.0


def test_the_flush_buffer_is_its_size_in_bytes():
    import tracemalloc

    from gemvbw import harness

    harness.CacheFlusher(1)  # compiled (or loaded) outside the trace
    tracemalloc.start()
    try:
        flusher = harness.CacheFlusher(2)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 2 << 20 <= held < (2 << 20) + (64 << 10)  # one byte per byte of the flush, not an 8-byte float each
    assert flusher.sink == numba.get_num_threads() * (2 << 20) // 64  # each line read once per thread, at construction


def test_overhead_line_of_a_warm_and_of_a_cold_run():
    from gemvbw.report.text import overhead_line

    class Record:
        overhead = CallOverhead(1.26, 1.0, 30.0)

    assert overhead_line(Record) == "fixed cost of an empty parallel call: 1.3 us warm (medians); perf_counter_ns step 30 ns"
    Record.overhead = CallOverhead(0.21, 0.2, 20.0, cold_median_us=9.44, flush_mib=64, serial=True)
    assert overhead_line(Record) == ("fixed cost of an empty serial call: 0.2 us warm, 9.4 us after a 64 MiB flush "
                                     "(medians); perf_counter_ns step 20 ns")

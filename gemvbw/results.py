"""Results: small immutable objects and their versioned JSON form (schema gemvbw.sweep/1).

Every reported figure is computed here from a measurement through the
formulas in :mod:`gemvbw.metrics`; renderers only format these objects.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from gemvbw import __version__, metrics
from gemvbw.harness import FIXED_COST_CALLS, CallOverhead, FixedCost, Measurement
from gemvbw.roofline import Bandwidth, Roofline, gbps_by_streams_json
from gemvbw.settings import FLUSH_LLC_FACTOR, default_flush_mib

SCHEMA = "gemvbw.sweep/1"

# A row is read as mostly call overhead when its latency is below this many empty calls (where the kernel's own
# fixed cost was not measured), or when the kernel's fixed cost is at least this share of it.
OVERHEAD_FACTOR = 20
FIXED_COST_SHARE = 0.10
# A figure this far above the read roofline is not a DRAM figure.
ABOVE_READ_FACTOR = 1.10
# The read roofline measured again after the rows: a move of more than this share says the memory bandwidth
# changed during the run (best-of-5 reads back to back agree within a few percent on a steady machine; on a shared
# 2-core Zen 4 VM they moved between 34 and 80 GB/s at 2 threads from one reading to the next, 2026-12-07).
ROOFLINE_MOVED = 0.10
# Noise thresholds (pyperf-style checks): coefficient of variation over all calls,
# and relative spread of the group means.
NOISY_CV = 0.10
GROUP_SPREAD = 0.05


@dataclass(frozen=True)
class Note:
    """A warning with its advice; ``code`` is stable for scripts."""

    code: str
    message: str
    advice: str

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "advice": self.advice}


@dataclass(frozen=True)
class KernelResult:
    bits: int
    M: int
    K: int
    block: int
    meta_bytes: int
    threads: int
    act: str
    variant: str
    measurement: Measurement
    logical_bytes: int
    stored_bytes: int
    max_rel_err: float
    roofline: Roofline
    notes: tuple[Note, ...] = ()
    warm: Measurement | None = None  # the same kernel with no flush (--compare-warm)
    samples: tuple = ()  # gemvbw.sampling.Sample before the first group and after each group
    act_quant_err: float | None = None  # --act i8: error of quantizing x alone (same measure as max_rel_err)
    contention: dict | None = None  # preemptions and steal during the timing (gemvbw.contention)
    fixed_cost: FixedCost | None = None  # the same kernel on a tiny matrix after the same flush

    verified = True  # a result exists only for a kernel that passed verification

    @property
    def best_avg_us(self) -> float:
        return self.measurement.best_avg_us

    @property
    def best_avg_s(self) -> float:
        return self.best_avg_us / 1e6

    @property
    def bytes_per_elem(self) -> float:
        return metrics.bytes_per_elem(self.logical_bytes, self.M, self.K)

    @property
    def eff_gbps(self) -> float:
        return metrics.eff_gbps(self.logical_bytes, self.best_avg_s)

    @property
    def pct_peak(self) -> float:
        return metrics.pct_peak(self.eff_gbps, self.roofline.memcpy.gbps)

    @property
    def pct_read(self) -> float:
        return metrics.pct_read(self.eff_gbps, self.roofline.read.gbps)

    @property
    def gflops(self) -> float:
        return metrics.gflops(self.M, self.K, self.best_avg_s)

    @property
    def ai(self) -> float:
        return metrics.ai(self.bytes_per_elem)

    @property
    def warm_eff_gbps(self) -> float | None:
        return None if self.warm is None else metrics.eff_gbps(self.logical_bytes, self.warm.best_avg_us / 1e6)

    @property
    def fixed_cost_us(self) -> float | None:
        return None if self.fixed_cost is None else self.fixed_cost.median_us

    @property
    def w_mib(self) -> float:
        return self.logical_bytes / (1 << 20)

    @property
    def type(self) -> str:
        return f"w{self.bits}"

    def to_dict(self) -> dict:
        m = self.measurement
        return {
            "bits": self.bits, "M": self.M, "K": self.K, "block": self.block, "threads": self.threads,
            "act": self.act, "variant": self.variant, "meta_bytes": self.meta_bytes,
            "best_avg_us": self.best_avg_us, "overall_mean_us": m.overall_mean_us,
            "overall_sd_us": m.overall_sd_us, "median_us": m.median_us, "cv": m.cv,
            "robust_spread": m.robust_spread, "contention": self.contention,
            "group_spread": m.group_spread, "groups_extended": m.extended, "stable": m.stable,
            "groups": [
                {"iters": g.iters, "mean_us": g.mean_us, "sd_us": g.sd_us, "latencies_ns": list(g.latencies_ns),
                 "switches": None if g.switches is None else list(g.switches)}
                for g in m.groups
            ],
            "logical_bytes": self.logical_bytes, "stored_bytes": self.stored_bytes,
            "bytes_per_elem": self.bytes_per_elem, "eff_gbps": self.eff_gbps, "pct_peak": self.pct_peak,
            "pct_read": self.pct_read, "gflops": self.gflops, "ai": self.ai,
            "verified": True, "max_rel_err": self.max_rel_err, "act_quant_err": self.act_quant_err,
            "fixed_cost": None if self.fixed_cost is None else self.fixed_cost.to_dict(),
            "notes": [n.to_dict() for n in self.notes],
            "samples": [s.to_dict() for s in self.samples],
            "warm": None if self.warm is None else {
                "best_avg_us": self.warm.best_avg_us, "median_us": self.warm.median_us,
                "eff_gbps": self.warm_eff_gbps,
                "groups": [{"iters": g.iters, "mean_us": g.mean_us, "sd_us": g.sd_us} for g in self.warm.groups],
            },
        }


@dataclass(frozen=True)
class KernelFailure:
    """A kernel that failed verification (or crashed): reported, never given a figure."""

    bits: int
    M: int
    K: int
    variant: str
    message: str
    max_rel_err: float | None = None
    tolerance: float | None = None
    act: str = ""  # the activations it was run with ("" when it failed before one was chosen)

    @property
    def type(self) -> str:
        return f"w{self.bits}"

    def to_dict(self) -> dict:
        return {"bits": self.bits, "M": self.M, "K": self.K, "variant": self.variant, "act": self.act, "verified": False,
                "max_rel_err": self.max_rel_err, "tolerance": self.tolerance, "error": self.message}


def overhead_note(best_avg_us: float, overhead: CallOverhead, fixed_cost: FixedCost | None) -> Note | None:
    """The call-overhead note of a row, or None: from the kernel's own fixed cost where it was measured (its
    share of the row), else from the run's empty call (the row under OVERHEAD_FACTOR of them)."""
    advice = "read it as a latency, not a bandwidth; measure the model's real shapes (larger M or K)"
    if fixed_cost is not None:
        share = fixed_cost.median_us / best_avg_us
        if share < FIXED_COST_SHARE:
            return None
        when = f"after the same {fixed_cost.flush_mib} MiB flush" if fixed_cost.flush_mib else "with no flush"
        # the fixed cost is a median of single cold calls, the row the mean of its best group: where calls vary
        # much, the tiny call's median can exceed the whole row's best, which is the spread, not a negative cost
        above = (f"; it came out above the row itself (the median of {FIXED_COST_CALLS} single calls against the "
                 "row's best group: calls this variable), so read the two as the same order, not one as a share "
                 "of the other" if share > 1 else "")
        return Note(
            "call-overhead",
            f"the same kernel on a {fixed_cost.shape} matrix {when} takes {fixed_cost.median_us:.1f} us (fixed us), "
            f"{100 * share:.0f}% of this row's {best_avg_us:.1f} us (threshold {100 * FIXED_COST_SHARE:.0f}%): this "
            f"row measures call overhead as well as bandwidth{above}",
            advice,
        )
    if best_avg_us >= OVERHEAD_FACTOR * overhead.row_cost_us:
        return None
    when = "warm" if overhead.cold_median_us is None else f"after a {overhead.flush_mib} MiB flush"
    return Note(
        "call-overhead",
        f"latency {best_avg_us:.1f} us is under {OVERHEAD_FACTOR}x the fixed cost of {overhead.call_name} "
        f"({overhead.row_cost_us:.1f} us {when}): this row measures call overhead as much as bandwidth",
        advice,
    )


def result_notes(
    measurement: Measurement, eff_gbps: float, overhead: CallOverhead, roofline: Roofline,
    resident_bytes: int, llc_bytes: int | None, flush_mib: int, measurement_has_warm: bool = False,
    fixed_cost: FixedCost | None = None,
) -> tuple[Note, ...]:
    """The warnings a single row deserves, each with what to do about it."""
    notes = []
    best_avg_us = measurement.best_avg_us
    if measurement.robust_spread > NOISY_CV:
        notes.append(Note(
            "noisy",
            f"the bulk of the timed calls varies by {100 * measurement.robust_spread:.0f}% (1.4826 x median absolute "
            f"deviation / median; threshold {100 * NOISY_CV:.0f}%; coefficient of variation "
            f"{100 * measurement.cv:.0f}%)",
            "close other programs, pin the run (taskset), or add --reps/--iters; the best group mean is "
            "less affected than the overall mean",
        ))
    if measurement.group_spread > GROUP_SPREAD:
        extra = "" if measurement.stable is None else (
            " even after extra groups" if not measurement.stable else "")
        notes.append(Note(
            "groups-disagree",
            f"group means differ by {100 * measurement.group_spread:.0f}% (threshold {100 * GROUP_SPREAD:.0f}%){extra}",
            "rerun, or let gemvbw add groups until they agree: --max-seconds 30",
        ))
    note = overhead_note(best_avg_us, overhead, fixed_cost)
    if note is not None:
        notes.append(note)
    if eff_gbps > ABOVE_READ_FACTOR * roofline.read.gbps:
        cause = ("the weights fit in the last-level cache and stayed there" if llc_bytes and resident_bytes <= llc_bytes
                 else "cache residency, timer trouble, or a kernel that skips work")
        notes.append(Note(
            "above-read-roofline",
            f"{eff_gbps:.1f} GB/s is more than {ABOVE_READ_FACTOR - 1:.0%} above the read roofline "
            f"({roofline.read.gbps:.1f} GB/s): not a DRAM figure ({cause})",
            "use a shape larger than the last-level cache, keep --flush-mib at least twice the LLC",
        ))
    if llc_bytes and resident_bytes <= llc_bytes and (flush_mib == 0 or measurement_has_warm):
        notes.append(Note(
            "warm-cache",
            f"weights and activations ({resident_bytes / 2**20:.1f} MiB) fit in the last-level cache "
            f"({llc_bytes / 2**20:.0f} MiB): the warm (no flush) figure is a cache figure, not a DRAM one",
            "use the cold-cache figure (the default flush) for DRAM bandwidth",
        ))
    return tuple(notes)


def read_moved(before: Bandwidth, after: Bandwidth) -> bool:
    """Whether the read roofline moved by more than :data:`ROOFLINE_MOVED` between two readings."""
    return abs(after.gbps / before.gbps - 1) > ROOFLINE_MOVED


def roofline_moved_notes(before: Bandwidth, after: Bandwidth, results: Sequence[KernelResult] = ()) -> list[Note]:
    """A warning when the read roofline measured after the rows differs from the one before them by more than
    :data:`ROOFLINE_MOVED`: every row's %read (and %peak) holds against a bandwidth the machine had at the
    start, so a move says by about how much those shares may be off. Rows of ``results`` above the first reading
    (their above-read-roofline note blamed a cache) but not above the second are named: the faster bandwidth may
    explain them."""
    if not read_moved(before, after):
        return []
    change = after.gbps / before.gbps - 1
    explained = [r for r in results
                 if ABOVE_READ_FACTOR * before.gbps < r.eff_gbps <= ABOVE_READ_FACTOR * after.gbps]
    rows = "" if not explained else (
        "; the rows above the first reading but not above the second (" +
        ", ".join(f"w{r.bits} {r.M}x{r.K} {r.eff_gbps:.1f} GB/s" for r in explained) +
        ") may have met the faster bandwidth rather than a cache")
    return [Note(
        "read-roofline-moved",
        f"the read roofline was {before.gbps:.1f} GB/s before the rows and {after.gbps:.1f} GB/s after them "
        f"({change:+.0%}; threshold {ROOFLINE_MOVED:.0%}): the memory bandwidth changed during the run, so %read "
        "and %peak (taken against the first) may be off by as much, and rows timed minutes apart may have met "
        f"different bandwidths{rows}",
        "rerun on a quieter machine (a shared VM or a phone's power and thermal states move the bandwidth); "
        "compare kernels by ratios taken in one run, such as the eff GB/s of two rows side by side, rather "
        "than by %read",
    )]


def run_notes(flush_mib: int, llc_bytes: int | None, threads: int, affinity_size: int,
              llc_source: str = "/sys", block: int = 64, K: int = 0, mixed_clusters: bool = False,
              act: str = "f32", i8_available: bool = False, emulated: str | None = None,
              thread_limit: int | None = None) -> list[Note]:
    """Warnings about the whole run, known before anything is timed."""
    notes = []
    if emulated:
        notes.append(Note(
            "emulated",
            f"this process runs under emulation ({emulated}): the figures time the emulator, not a CPU",
            "use such a run to check that the kernels verify; measure on the device itself",
        ))
    if act == "f32" and i8_available:
        notes.append(Note(
            "f32-activations",
            "--act f32 keeps x float32, so the kernels pay for float unpacking; MNN's GemvBW (memory mode Low, "
            "as its test sets) and llama.cpp's q8 paths quantize x to int8 per block on the fly, as the default "
            "--act auto does here",
            "drop --act f32 (or use --act i8) for the run that compares with MNN's and llama.cpp's figures",
        ))
    if mixed_clusters:
        notes.append(Note(
            "mixed-clusters",
            "the CPUs in use span clusters of different speed (big.LITTLE): threads land on slower cores "
            "and the results mix core types",
            "pin to the fastest cluster: see the advice of gemvbw info (taskset MASK, or --cpus LIST)",
        ))
    if K and block > K:
        notes.append(Note(
            "block-exceeds-K",
            f"block {block} is larger than K={K}: each row is a single block of {K} elements "
            "(one scale/offset pair per row)",
            f"use --block {K // 8 * 8 or 8} or smaller for several blocks per row",
        ))
    notes.append(Note(
        "memcpy-counts-both",
        "memcpy GB/s counts each byte twice (read + write) and includes thread start-up; "
        "it is MNN's roofline, not the DRAM read peak, so %peak above 100 is possible",
        "compare with %read, the read-only roofline, for what a GEMV can reach",
    ))
    if flush_mib and llc_bytes and (flush_mib << 20) < FLUSH_LLC_FACTOR * llc_bytes:
        notes.append(Note(
            "flush-small",
            f"the cache flush ({flush_mib} MiB) is less than {FLUSH_LLC_FACTOR} times the last-level cache "
            f"({llc_bytes >> 20} MiB, from {llc_source}): weights may still be cached when timed (on a 32 MiB L3, "
            "a 64 MiB flush left a 15 MiB read 17 % faster than a 128 MiB one)",
            f"use --flush-mib {default_flush_mib(llc_bytes)} or more (the default when --flush-mib is not given)",
        ))
    elif flush_mib and not llc_bytes:
        notes.append(Note(
            "llc-unknown",
            "the last-level cache size could not be read, so whether the flush is large enough is unknown",
            f"give it with --llc-mib, and use --flush-mib at least {FLUSH_LLC_FACTOR} times that",
        ))
    elif flush_mib:
        notes.append(Note(
            "flush-not-guaranteed",
            f"a {flush_mib} MiB strided read before each call (by each of the run's threads, so that every core's "
            "own caches are flushed) conditions the caches; it does not guarantee that the weights come from DRAM",
            "shapes much larger than the last-level cache give the most trustworthy figures",
        ))
    if thread_limit is not None and threads == thread_limit < affinity_size:
        notes.append(Note(
            "numba-thread-limit",
            f"numba runs at most {thread_limit} thread(s) here (NUMBA_NUM_THREADS) on {affinity_size} allowed CPUs: "
            f"the run uses {threads}",
            "unset NUMBA_NUM_THREADS (or raise it) to use every CPU, or pin to as many CPUs as threads",
        ))
    elif threads < affinity_size:
        notes.append(Note(
            "fewer-threads-than-cpus",
            f"{threads} thread(s) on {affinity_size} allowed CPUs: the scheduler may move threads between cores",
            "pin the run to as many CPUs as threads (taskset, or --cpus)",
        ))
    return notes


@dataclass
class SweepRecord:
    """Everything a sweep measured so far; complete or, after an interruption, partial."""

    system: dict
    settings: dict
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    roofline: Roofline | None = None
    read_after: Bandwidth | None = None  # the read roofline measured again once the rows are done
    overhead: CallOverhead | None = None
    results: list[KernelResult] = field(default_factory=list)
    failures: list[KernelFailure] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    partial: bool = True
    interrupted: str | None = None
    comparison: object | None = None  # gemvbw.compare.Comparison, with --rerun
    kernel_choice: dict = field(default_factory=dict)  # --kernel auto: per width, what was chosen and how
    act_choice: dict = field(default_factory=dict)  # per width: the activation types run, and why

    def to_dict(self) -> dict:
        rf = self.roofline
        return {
            "schema": SCHEMA,
            "version": __version__,
            "created": self.created,
            "command": self.command,
            "partial": self.partial,
            "interrupted": self.interrupted,
            "system": self.system,
            "settings": self.settings,
            "roofline": None if rf is None else {
                "threads": rf.threads,
                "memcpy_gbps": rf.memcpy.gbps, "memcpy_buffer_bytes": rf.memcpy.buffer_bytes,
                "memcpy_trials_s": list(rf.memcpy.trials_s),
                "read_gbps": rf.read.gbps, "read_buffer_bytes": rf.read.buffer_bytes,
                "read_trials_s": list(rf.read.trials_s),
                "read_streams": rf.read.streams,
                "read_gbps_by_streams": gbps_by_streams_json(rf.read),
                # the same read once every row was timed (null for an interrupted run or one without rows)
                "read_after_gbps": None if self.read_after is None else self.read_after.gbps,
                "read_after_trials_s": None if self.read_after is None else list(self.read_after.trials_s),
                "read_after_streams": None if self.read_after is None else self.read_after.streams,
            },
            "call_overhead_us": None if self.overhead is None else self.overhead.median_us,
            "call_overhead_cold_us": None if self.overhead is None else self.overhead.cold_median_us,
            "call_overhead_serial": None if self.overhead is None else self.overhead.serial,
            "timer_resolution_ns": None if self.overhead is None else self.overhead.timer_resolution_ns,
            "results": [r.to_dict() for r in self.results],
            "failures": [f.to_dict() for f in self.failures],
            "warnings": [n.to_dict() for n in self.notes],
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
            "kernel_choice": self.kernel_choice,
            "act_choice": self.act_choice,
        }

"""Timing: cache conditioning, the timed loop, groups, best-of-N.

Only the kernel call sits between the two ``perf_counter_ns`` reads (where the
binding offers it, its compiled code bound to its arguments: gemvbw.kernels.call_on);
the cache flush, compilation, packing and verification all happen outside them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np
from numba import njit, prange

from gemvbw import metrics
from gemvbw.kernels._common import empty_parallel_call

LINE_BYTES = 64


@njit(parallel=True, cache=True)
def _strided_read(buf, stride, parts):
    # one byte per cache line: enough to bring every line in, evicting what was there. Each of ``parts`` threads
    # (one per thread in force) reads the whole buffer, starting at its own share, so that every core the kernel
    # runs on has its caches flushed by its own reads and is running, as in decode, when the timed call starts
    # (see CacheFlusher)
    lines = (buf.shape[0] + stride - 1) // stride
    per = (lines + parts - 1) // parts
    sums = np.zeros(parts, np.uint64)
    for t in prange(parts):
        start = min(lines, t * per)
        s = np.uint64(0)
        for line in range(start, lines):
            s += buf[line * stride]
        for line in range(start):
            s += buf[line * stride]
        sums[t] = s
    return sums.sum()


class CacheFlusher:
    """An untimed strided read of ``flush_mib`` MiB before each timed call (0 = warm cache), by each of the
    threads numba runs at the time of the flush, each the whole buffer.

    It conditions the caches; it cannot guarantee that the weights then come
    from DRAM (a cache may keep lines by a policy other than LRU).

    Read by one thread (as MNN's test does), a flush leaves the other cores' private caches as they were and
    their threads idle for as long as it takes, and the timed call then pays for getting them going again (the
    first reading below), a cost of the timing and not of the GEMV (in decode one GEMV follows another, the
    workers busy). Shared among the threads (each core reading half of it at 2 threads), it left part of the
    matrix cached: each core must read the whole flush itself. Measured on Zen 4 (2 cores, a VM), 2 threads,
    16c4-zmm, interleaved, medians:
    - 16x128 and 1024x1024 (11 rounds of 20 cold calls, 128 MiB), flushed by one thread / by one thread and then
      an empty parallel call / shared by both: 16x128 w8 23.5 / 10.0 / 7.3 us; 1024x1024 w8 51.8 / 35.4 / 38.3,
      w4 39.2 / 25.4 / 24.5. At 1 thread the three were within 2 us of each other.
    - 4096x14336 (11 rounds), by one thread while the other joined the parallel call idle 128 / 512 MiB, shared
      by both 128 / 256, each thread all of 128 / 256: w8 1744 / 1767, 1615 / 1761, 1735 / 1720 us; w2 515 / 534,
      468 / 521, 521 / 515; a plain read of w2's bytes 496 / 507, 383 / 432, 492 / 514. Only the shared 128 MiB
      came out faster: it is not cold. In a later reading (9 rounds, the host faster), one thread's 128 MiB
      against each thread's: 1024x1024 w8 38 / 42 us, w4 29 / 31; 4096x14336 w8 1153 / 1267, w2 339 / 378.
    """

    def __init__(self, flush_mib: int):
        self.flush_mib = flush_mib
        # ones, not zeros: the pages must really be mapped, not the shared zero page. (A 0-byte buffer for
        # flush_mib 0 would read the same as None: its strided read reads nothing.)
        self._buf = np.ones(flush_mib << 20, dtype=np.uint8) if flush_mib else None
        self.sink = 0
        if self._buf is not None:
            self.flush()

    def flush(self) -> None:
        if self._buf is not None:
            self.sink += int(_strided_read(self._buf, LINE_BYTES, numba.get_num_threads()))


@dataclass(frozen=True)
class Group:
    """One group of timed iterations: its latencies and their mean and sample SD."""

    latencies_ns: tuple[int, ...]
    # the process's involuntary context switches inside each timed call (None: not counted)
    switches: tuple[int, ...] | None = None

    @property
    def iters(self) -> int:
        return len(self.latencies_ns)

    @property
    def mean_us(self) -> float:
        return metrics.mean(self.latencies_ns) / 1e3

    @property
    def sd_us(self) -> float:
        return metrics.sample_sd(self.latencies_ns) / 1e3


@dataclass(frozen=True)
class Measurement:
    groups: tuple[Group, ...]
    # with --max-seconds: were groups added, and did the last --reps group means agree?
    extended: bool = False
    stable: bool | None = None

    @property
    def all_ns(self) -> list[int]:
        return [t for g in self.groups for t in g.latencies_ns]

    @property
    def switches_per_call(self) -> list[int] | None:
        """Involuntary context switches inside each timed call, every group; None when not counted."""
        if any(g.switches is None for g in self.groups):
            return None
        return [n for g in self.groups for n in g.switches]

    @property
    def best_group(self) -> Group:
        """The group with the lowest mean."""
        return min(self.groups, key=lambda g: g.mean_us)

    @property
    def best_avg_us(self) -> float:
        """The lowest group mean: MNN's best-of-N latency."""
        return self.best_group.mean_us

    @property
    def overall_mean_us(self) -> float:
        return metrics.mean(self.all_ns) / 1e3

    @property
    def overall_sd_us(self) -> float:
        return metrics.sample_sd(self.all_ns) / 1e3

    @property
    def median_us(self) -> float:
        return metrics.median(self.all_ns) / 1e3

    @property
    def cv(self) -> float:
        """Coefficient of variation over every timed call."""
        return metrics.cv(self.all_ns)

    @property
    def robust_spread(self) -> float:
        """1.4826 x MAD / median over every timed call: the noise of the bulk, not of a few outliers."""
        return metrics.robust_spread(self.all_ns)

    @property
    def group_spread(self) -> float:
        """(slowest - fastest group mean) / fastest group mean."""
        return metrics.spread([g.mean_us for g in self.groups])


def time_groups(
    call: Callable[[], None],
    iters: int,
    reps: int,
    flusher: CacheFlusher,
    on_group: Callable[[int, Group], None] | None = None,
    max_seconds: float = 0.0,
    stable_within: float = 0.05,
    clock: Callable[[], int] = time.perf_counter_ns,
    monotonic: Callable[[], float] = time.monotonic,
    switches: Callable[[], int] | None = None,
) -> Measurement:
    """``reps`` groups of ``iters`` timed calls, each after a cache flush.

    With ``max_seconds`` > 0, groups are added until the last ``reps`` group
    means agree within ``stable_within`` (relative spread) or the time is up.
    ``clock`` times the calls (ns) and ``monotonic`` the budget (s): tests give their own.
    ``switches``, a counter of the process's involuntary context switches (gemvbw.contention), is read
    just outside the timer on both sides of each call, so that preemptions during the flushes, which can
    take far longer than the calls, are not counted against them.
    """
    call()  # one warm-up call outside the timing (compilation is done by then)
    started = monotonic()
    groups: list[Group] = []

    def settled() -> bool:
        return len(groups) >= reps and metrics.spread([g.mean_us for g in groups[-reps:]]) <= stable_within

    # (max_seconds >= 0 would read the same: with no budget, the time spent is never under 0 s)
    while len(groups) < reps or (max_seconds > 0 and not settled() and monotonic() - started < max_seconds):
        lat = []
        held = [] if switches is not None else None
        for _ in range(iters):
            flusher.flush()
            before = switches() if held is not None else 0
            t0 = clock()
            call()
            t1 = clock()
            lat.append(t1 - t0)
            if held is not None:
                held.append(switches() - before)
        group = Group(tuple(lat), None if held is None else tuple(held))
        groups.append(group)
        if on_group is not None:
            on_group(len(groups) - 1, group)
    return Measurement(tuple(groups), extended=len(groups) > reps, stable=settled() if max_seconds > 0 else None)


@dataclass(frozen=True)
class CallOverhead:
    """The fixed cost of one kernel call: an empty call made as the kernels are (parallel, or serial with
    one thread), the median of warm calls and, in a cold run, of calls each after the run's flush.

    Cold is what a cold row pays: after a flush the launch's code and data come back from DRAM too
    (measured on Zen 4: an empty parallel call 1.3 us warm, 29.7 us after a 64 MiB flush).
    """

    median_us: float
    min_us: float
    timer_resolution_ns: float
    cold_median_us: float | None = None  # None: a warm run (no flush), or not measured
    flush_mib: int = 0
    serial: bool = False  # one thread: no parallel launch, as the kernels (see kernels.compiled)

    @property
    def row_cost_us(self) -> float:
        """The fixed cost a timed row pays: cold where the run is cold."""
        return self.median_us if self.cold_median_us is None else self.cold_median_us

    @property
    def call_name(self) -> str:
        return "an empty serial call" if self.serial else "an empty parallel call"


def measure_call_overhead(threads: int, calls: int = 2000, flusher: CacheFlusher | None = None,
                          cold_calls: int = 50) -> CallOverhead:
    """An empty call, called as the kernels are (compiled code, no numba dispatch): warm, then each after
    ``flusher``'s flush when it flushes."""
    import numba

    from gemvbw.kernels import compiled

    # (its type and length only shape the trivial work, and any counts of calls large enough would do)
    out = np.zeros(max(threads, 1), dtype=np.int64)
    call = compiled(empty_parallel_call, out)
    call(out)
    clock = time.perf_counter_ns

    def timed(n: int, before: Callable[[], None] | None) -> list[int]:
        lat = []
        for _ in range(n):
            if before is not None:
                before()
            t0 = clock()
            call(out)
            lat.append(clock() - t0)
        return lat

    warm = timed(calls, None)
    cold = timed(cold_calls, flusher.flush) if flusher is not None and flusher.flush_mib else None
    return CallOverhead(metrics.median(warm) / 1e3, min(warm) / 1e3, timer_resolution_ns(),
                        None if cold is None else metrics.median(cold) / 1e3,
                        flusher.flush_mib if cold is not None else 0, numba.get_num_threads() == 1)


# The matrix a kernel's fixed cost is measured on: one row group of the widest tile (the 16-row column tiles)
# by one block pair (the packed-4x2 layouts' smallest K without leftover blocks), so that the call runs the
# kernel's main loop, not only its leftovers.
FIXED_COST_ROWS = 16
FIXED_COST_BLOCKS = 2
FIXED_COST_CALLS = 30  # (the median of any count this size is steady enough for a figure that is a few us)


@dataclass(frozen=True)
class FixedCost:
    """What a call of one kernel costs beyond its bytes: the median latency of the same kernel (same machine
    code, same kinds of arguments) on an ``M`` x ``K`` matrix, each call after the run's flush (warm when
    ``flush_mib`` is 0).

    An empty call (:class:`CallOverhead`) is the floor of every call; a kernel pays more after a flush,
    because its own machine code, its arguments' Python objects and its workspace come back from DRAM as its
    weights do. Measured on Zen 5 (1 thread, 64 MiB flush): an empty call 2.0 us, the int8 kernels on 16x128
    12-14 us, a 1024x1024 w8 call 41 us of which a plain read of the same bytes is 29 us. In decode the same
    kernel runs layer after layer and its code stays cached, so this is a cost of the cold method.
    """

    median_us: float
    M: int
    K: int
    flush_mib: int

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.K}"

    def to_dict(self) -> dict:
        return {"median_us": self.median_us, "M": self.M, "K": self.K, "flush_mib": self.flush_mib}


def fixed_cost_shape(block: int) -> tuple[int, int]:
    """(M, K) of the matrix a kernel's fixed cost is measured on, for a block size."""
    return FIXED_COST_ROWS, FIXED_COST_BLOCKS * block


def measure_fixed_cost(call: Callable[[], None], M: int, K: int, flusher: CacheFlusher,
                       calls: int = FIXED_COST_CALLS) -> FixedCost:
    """:class:`FixedCost` of ``call``, a kernel bound to an ``M`` x ``K`` matrix: the median of ``calls`` calls,
    each after ``flusher``'s flush."""
    return FixedCost(time_groups(call, calls, 1, flusher).median_us, M, K, flusher.flush_mib)


def timer_resolution_ns(samples: int = 1000) -> float:  # (any number of samples large enough would do)
    """The smallest non-zero step perf_counter_ns shows (the documented resolution is often 1 ns)."""
    clock = time.perf_counter_ns
    best = None
    for _ in range(samples):
        t0 = clock()
        t1 = clock()
        while t1 == t0:
            t1 = clock()
        best = t1 - t0 if best is None else min(best, t1 - t0)
    return float(best)

"""The two ceilings a GEMV is compared with.

- memcpy (MNN's roofline): a 256 MiB copy split across ``threads`` OS threads
  (numpy's copy releases the GIL, so they run in parallel), thread start and
  join inside the timing, best of 5, counting 2 x bytes (read + write).
- read-only: a multithreaded numba reduction over a buffer far above the
  last-level cache, counting each byte once, read three ways in turn: one
  sequential stream per thread, and 4 and 8 streams per thread; the fastest
  (best of 5 each) is the roofline, and the output says which it was. A GEMV
  only reads its weights, so this is the ceiling it can actually approach; it
  may exceed memcpy's figure, which is why %peak above 100 is possible.

Why several streams: on some cores one sequential stream cannot keep enough
cache misses in flight (an Intel Xeon with AVX-512, 2 GHz: 4-8 streams read
1.03-1.37x faster in most runs, at one thread and two), while a GEMV kernel
reads several at once (rows, tiles, activations); a one-stream read would then
understate the wall and put kernels above 100 % of it. Taking the best of 15 reads rather than of
5 leans the roofline up, never down: %read errs on the strict side.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from gemvbw import metrics
from gemvbw.kernels._common import FASTMATH, aligned_full

MEMCPY_MIB = 256
READ_MIN_MIB = 256
READ_LLC_FACTOR = 8
TRIALS = 5
READ_STREAMS = (1, 4, 8)  # per thread


@dataclass(frozen=True)
class Bandwidth:
    kind: str  # "memcpy" or "read"
    threads: int
    buffer_bytes: int
    best_s: float
    trials_s: tuple[float, ...]
    gbps: float
    streams: int = 1  # read: sequential streams per thread in the fastest way of reading
    gbps_by_streams: tuple[tuple[int, float], ...] = ()  # read: (streams per thread, best GB/s) for each way tried


def memcpy_bandwidth(threads: int, mib: int = MEMCPY_MIB, trials: int = TRIALS) -> Bandwidth:
    n = mib << 20
    src, dst = aligned_full(n, 1), aligned_full(n, 1)  # on cache lines, as MNN allocates its buffers
    bounds = np.linspace(0, n, threads + 1).astype(np.int64)
    np.copyto(dst, src)  # warm-up: pages mapped, code paths hot

    def copy_part(i: int) -> None:
        a, b = bounds[i], bounds[i + 1]
        np.copyto(dst[a:b], src[a:b])

    times = []
    for _ in range(trials):
        workers = [threading.Thread(target=copy_part, args=(i,)) for i in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        times.append(time.perf_counter() - t0)
    best = min(times)
    return Bandwidth("memcpy", threads, n, best, tuple(times), metrics.memcpy_gbps(n, best))


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def _parallel_sum(a, nchunks):
    n = a.shape[0]
    chunk = (n + nchunks - 1) // nchunks
    partial = np.zeros(nchunks, dtype=np.float32)
    for c in prange(nchunks):
        # slice, then count from 0: numba then knows the index is non-negative and
        # drops its wraparound check, which otherwise turns the loop into scalar loads
        part = a[c * chunk:min(n, (c + 1) * chunk)]
        s = np.float32(0.0)
        for i in range(part.shape[0]):
            s += part[i]
        partial[c] = s
    return partial.sum()


STREAM_BLOCK = 64  # float32 per turn: 256 B, four cache lines from one stream before moving to the next


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def _parallel_sum_streams(a, nchunks, streams):
    """The same sum as :func:`_parallel_sum`, but each chunk is read as ``streams`` sequential
    sub-ranges at once, 256 B from each in turn, so one thread has misses in flight in several
    places (why: the module's docstring)."""
    n = a.shape[0]
    chunk = (n + nchunks - 1) // nchunks
    partial = np.zeros(nchunks, dtype=np.float32)
    for c in prange(nchunks):
        part = a[c * chunk:min(n, (c + 1) * chunk)]
        turns = part.shape[0] // (streams * STREAM_BLOCK)
        span = turns * STREAM_BLOCK  # floats per stream
        acc = np.zeros(STREAM_BLOCK, dtype=np.float32)
        for t in range(turns):
            for k in range(streams):
                block = part[k * span + t * STREAM_BLOCK:k * span + (t + 1) * STREAM_BLOCK]
                for j in range(STREAM_BLOCK):
                    acc[j] += block[j]
        tail = part[streams * span:]  # what does not fill a whole turn of every stream
        s = np.float32(0.0)
        for i in range(tail.shape[0]):
            s += tail[i]
        partial[c] = acc.sum() + s
    return partial.sum()


def read_buffer(nbytes: int) -> np.ndarray:
    """The float32 buffer a read roofline reads, starting on a cache line as the kernels' copies do: 16 bytes
    off (numpy's default for large arrays) every vector load straddles two lines and the read understates the
    wall (Zen 5, 56 MiB, cold, 1 thread: 38.3 against 40.2 GB/s; 2 threads 44.0 against 45.7)."""
    return aligned_full(nbytes // 4, 1, np.float32)


def read_buffer_bytes(llc_bytes: int | None) -> int:
    floor = READ_MIN_MIB << 20
    return max(floor, READ_LLC_FACTOR * llc_bytes) if llc_bytes else floor


def read_bandwidth(threads: int, buffer_bytes: int, trials: int = TRIALS,
                   streams: tuple[int, ...] = READ_STREAMS, clock=time.perf_counter) -> Bandwidth:
    """The fastest of reading the buffer with each count of streams per thread, best of ``trials``
    each. The ways take turns within every trial (in a rotated order), so a bandwidth that drifts
    while this runs, as it does on shared machines, is shared among them rather than falling on one.
    Threads here are numba's: the caller has set numba.set_num_threads(threads)."""
    a = read_buffer(buffer_bytes)
    reads = {s: _stream_reader(a, threads, s) for s in streams}
    for read in reads.values():
        read()  # compile and warm
    times: dict[int, list[float]] = {s: [] for s in streams}
    for trial in range(trials):
        turn = trial % len(streams)
        for s in streams[turn:] + streams[:turn]:
            t0 = clock()
            reads[s]()
            times[s].append(clock() - t0)
    return pick_fastest_read(threads, a.nbytes, times)


def _stream_reader(a, threads: int, streams: int):
    if streams == 1:  # the plain loop, so that the one-stream figure is the one gemvbw always reported
        return lambda: _parallel_sum(a, threads)
    return lambda: _parallel_sum_streams(a, threads, streams)


def pick_fastest_read(threads: int, nbytes: int, times: dict[int, list[float]]) -> Bandwidth:
    """The read roofline from each way's trial times: the way with the shortest best time (on a tie,
    the fewest streams), with every way's best GB/s kept beside it."""
    by_streams = tuple((s, metrics.read_gbps(nbytes, min(t))) for s, t in sorted(times.items()))
    streams = min(times, key=lambda s: (min(times[s]), s))
    best = min(times[streams])
    return Bandwidth("read", threads, nbytes, best, tuple(times[streams]), metrics.read_gbps(nbytes, best),
                     streams, by_streams)


def gbps_by_streams_json(bw: Bandwidth) -> dict[str, float]:
    """Each way's best GB/s keyed by its streams per thread, as the JSON records hold it."""
    return {str(s): g for s, g in bw.gbps_by_streams}


def read_ways(bw: Bandwidth) -> str:
    """How the read roofline was taken, for the output: 'fastest of 1/4/8 streams per thread:
    33.5/38.2/40.0 GB/s' ('' for a figure measured before gemvbw tried several)."""
    if not bw.gbps_by_streams:
        return ""
    counts = "/".join(str(s) for s, _ in bw.gbps_by_streams)
    figures = "/".join(f"{g:.1f}" for _, g in bw.gbps_by_streams)
    return f"fastest of {counts} streams per thread: {figures} GB/s"


@dataclass(frozen=True)
class Roofline:
    memcpy: Bandwidth
    read: Bandwidth

    @property
    def threads(self) -> int:
        return self.memcpy.threads


def measure_roofline(threads: int, llc_bytes: int | None, memcpy_mib: int = MEMCPY_MIB) -> Roofline:
    return Roofline(memcpy_bandwidth(threads, memcpy_mib), read_bandwidth(threads, read_buffer_bytes(llc_bytes)))

"""The two ceilings a GEMV is compared with.

- memcpy (MNN's roofline): a 256 MiB copy split across ``threads`` OS threads
  (numpy's copy releases the GIL, so they run in parallel), thread start and
  join inside the timing, best of 5, counting 2 x bytes (read + write).
- read-only: a multithreaded numba reduction over a buffer far above the
  last-level cache, best of 5, counting each byte once. A GEMV only reads its
  weights, so this is the ceiling it can actually approach; it may exceed
  memcpy's figure, which is why %peak above 100 is possible.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from gemvbw import metrics
from gemvbw.kernels._common import FASTMATH

MEMCPY_MIB = 256
READ_MIN_MIB = 256
READ_LLC_FACTOR = 8
TRIALS = 5


@dataclass(frozen=True)
class Bandwidth:
    kind: str  # "memcpy" or "read"
    threads: int
    buffer_bytes: int
    best_s: float
    trials_s: tuple[float, ...]
    gbps: float


def memcpy_bandwidth(threads: int, mib: int = MEMCPY_MIB, trials: int = TRIALS) -> Bandwidth:
    n = mib << 20
    src = np.ones(n, dtype=np.uint8)
    dst = np.ones(n, dtype=np.uint8)
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


def read_buffer_bytes(llc_bytes: int | None) -> int:
    floor = READ_MIN_MIB << 20
    return max(floor, READ_LLC_FACTOR * llc_bytes) if llc_bytes else floor


def read_bandwidth(threads: int, buffer_bytes: int, trials: int = TRIALS) -> Bandwidth:
    """Threads here are numba's: the caller has set numba.set_num_threads(threads)."""
    a = np.ones(buffer_bytes // 4, dtype=np.float32)
    _parallel_sum(a, threads)  # compile and warm
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        _parallel_sum(a, threads)
        times.append(time.perf_counter() - t0)
    best = min(times)
    return Bandwidth("read", threads, a.nbytes, best, tuple(times), metrics.read_gbps(a.nbytes, best))


@dataclass(frozen=True)
class Roofline:
    memcpy: Bandwidth
    read: Bandwidth

    @property
    def threads(self) -> int:
        return self.memcpy.threads


def measure_roofline(threads: int, llc_bytes: int | None, memcpy_mib: int = MEMCPY_MIB) -> Roofline:
    return Roofline(memcpy_bandwidth(threads, memcpy_mib), read_bandwidth(threads, read_buffer_bytes(llc_bytes)))

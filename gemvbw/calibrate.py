"""--kernel auto: the fastest verified variant for this machine and shape, measured once and cached.

Which variant wins depends on the shape as well as the machine (a variant that
shares work across four rows wins on long rows and can lose on short ones), so
for each width and shape every registered variant is verified (on a small
matrix) and timed on the shape itself, within a small time budget, under the
run's own cache conditions: each call after the same flush the sweep times it
with (cold by default; warm with --flush-mib 0), so the choice is made by the
figure that is reported. A warm ranking can differ from the cold one: a matrix
that fits in the last-level cache, or nearly fills it, is partly read from there
between warm calls, and a variant that computes faster but streams DRAM worse
wins warm. The choice is
stored in a JSON file under the user's cache directory, keyed by everything
that could change it: CPU model and ISA flags, thread count, activation type,
shape, block and metadata size, the flush, the versions of gemvbw, numba and
llvmlite, the set of variants, a fingerprint of the kernels' sources and numba's
compiler target.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gemvbw import kernels, metrics, system, tiers
from gemvbw.cache import cache_dir
from gemvbw.harness import CacheFlusher, time_groups
from gemvbw.quant import random_activations, random_quantized
from gemvbw.report.files import write_atomic
from gemvbw.verify import verify

CALIB_M = 64  # the matrix every variant is verified on before it may be timed
CALIB_K = 1024
CALIB_ITERS = 20  # calls per round at most
CALIB_ROUNDS = 7  # rounds, every candidate timed once per round in a rotated order
BUDGET_S = 0.5  # per variant: fewer calls per round on a slow shape
# A choice is cached only when it wins by more than the noise: the runner-up's median must be this much
# slower, and more than the spread (median absolute deviation, relative) of the two measured medians.
MARGIN = 0.03


@dataclass(frozen=True)
class Choice:
    spec: kernels.KernelSpec
    source: str  # "calibrated now", "cached", "only variant", "calibrated now; within noise, not cached", ...
    timings_us: dict[str, float]  # median round mean per variant
    spread: dict[str, float] = field(default_factory=dict)  # its median absolute deviation / median
    flush_mib: int = 0  # MiB read before each timed call of the calibration (0: warm)

    def to_dict(self) -> dict:
        return {"variant": self.spec.variant, "source": self.source, "timings_us": self.timings_us,
                "spread": self.spread, "flush_mib": self.flush_mib}


def cache_path() -> Path:
    return cache_dir() / "calibration.json"


def machine_key(bits: int, act: str, threads: int, shape: tuple = (), flush_mib: int = 0) -> str:
    facts = system.describe_cpu()
    v = system.versions()
    names = [s.variant for s in kernels.variants(bits, act)]  # a list: a joined string could run two names together
    # (sort_keys: the CPU's facts in one order whatever order they were read in; they come in one order today,
    # so dropping it changes nothing a test can see)
    raw = json.dumps([facts, threads, act, bits, list(shape), flush_mib, v["gemvbw"], v["numba"], v["llvmlite"],
                      names, kernels.FINGERPRINT, tiers.numba_target_key()], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _load() -> dict:
    try:
        doc = json.loads(cache_path().read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}  # no cache yet, or an unreadable one: measure again


@dataclass(frozen=True)
class Timing:
    median_us: float
    spread: float  # median absolute deviation of the rounds, relative to their median


def robust(samples: list[float]) -> Timing:
    med = metrics.median(samples)
    mad = metrics.median([abs(v - med) for v in samples])
    return Timing(med, mad / med if med > 0 else 0.0)


def measure(bits: int, act: str, qm, x, exclude: frozenset, threads: int,
            flusher: CacheFlusher | None = None) -> dict[str, Timing]:
    """Timings (us) on ``qm`` (default: a small matrix) of every variant that passes verification, each call
    after ``flusher``'s flush (none given: warm): interleaved rounds, so a busy moment of the machine hits every
    candidate, summed up by the median. A round's calls are as many as the budget allows, flushes included."""
    small = random_quantized(CALIB_M, CALIB_K, bits, 64 if qm is None else qm.block,
                             2 if qm is None else qm.meta_bytes, seed=99)
    small_x = random_activations(CALIB_K, seed=99)
    if qm is None:
        qm, x = small, small_x
    y = np.empty(qm.M, dtype=np.float32)
    conditions = CacheFlusher(0) if flusher is None else flusher
    runs, iters = {}, {}
    for spec in kernels.variants(bits, act):
        if spec.variant in exclude:
            continue
        try:
            if not verify(spec, small, small_x).ok:
                continue
        except Exception:
            continue
        run = spec.bind(qm)
        t0 = time.perf_counter()
        conditions.flush()
        run(x, y)  # also the warm-up
        first = time.perf_counter() - t0
        runs[spec.variant] = run
        iters[spec.variant] = max(1, min(CALIB_ITERS, int(BUDGET_S / CALIB_ROUNDS / max(first, 1e-9))))
    rounds: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    sessions = {spec.variant: spec for spec in kernels.variants(bits, act)}
    for r in range(CALIB_ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)] if names else []:
            run = runs[name]
            with sessions[name].session(threads):
                rounds[name].append(time_groups(kernels.call_on(run, x, y), iters[name], 1, conditions).best_avg_us)
    return {name: robust(samples) for name, samples in rounds.items()}


def decide(timings: dict[str, Timing]) -> tuple[str, bool]:
    """(the fastest variant by median, whether its lead is beyond the noise and may be cached)."""
    order = sorted(timings, key=lambda n: timings[n].median_us)
    best = order[0]
    if len(order) == 1:
        return best, True
    a, b = timings[best], timings[order[1]]
    lead = b.median_us / a.median_us - 1
    return best, lead > max(MARGIN, a.spread + b.spread)


def choose(bits: int, act: str, threads: int, qm=None, x=None, recalibrate: bool = False,
           exclude: frozenset = frozenset(), flusher: CacheFlusher | None = None) -> Choice:
    """The variant --kernel auto runs for this width (and the shape of ``qm``): from the cache when this
    machine, shape and flush were calibrated (unless ``recalibrate``), else measured now on ``qm`` (a small
    matrix when none is given), each call after ``flusher``'s flush (the run's own; none: warm). A choice
    whose lead is within the noise is used but not cached. ``exclude``: variants not to consider (one that
    failed verification). Raises CalibrationFailed when no variant passes verification."""
    found = [s for s in kernels.variants(bits, act) if s.variant not in exclude]
    if not found:
        raise CalibrationFailed(f"no w{bits} {act} kernel is left to choose from")
    if len(found) == 1:
        return Choice(found[0], "only variant", {})
    if system.describe_cpu().get("emulated"):  # timing would rank the emulator's translations, not the CPU's
        return Choice(found[0], "preferred; not calibrated under emulation", {})
    shape = () if qm is None else (qm.M, qm.K, qm.block, qm.meta_bytes)
    flush_mib = 0 if flusher is None else flusher.flush_mib
    key = machine_key(bits, act, threads, shape, flush_mib)
    entry = _load().get(key)
    if not recalibrate and isinstance(entry, dict) and entry.get("variant") in {s.variant for s in found}:
        return Choice(kernels.get(bits, act, entry["variant"]), "cached", entry.get("timings_us", {}),
                      entry.get("spread", {}), flush_mib)
    timings = measure(bits, act, qm, x, exclude, threads, flusher)
    if not timings:
        raise CalibrationFailed(f"no w{bits} {act} variant passed verification during calibration")
    best, clear = decide(timings)
    medians = {n: t.median_us for n, t in timings.items()}
    spreads = {n: round(t.spread, 4) for n, t in timings.items()}
    source = "recalibrated" if recalibrate else "calibrated now"
    if clear:
        doc = _load()
        doc[key] = {"bits": bits, "act": act, "threads": threads, "variant": best, "timings_us": medians,
                    "spread": spreads, "shape": list(shape) or [CALIB_M, CALIB_K], "flush_mib": flush_mib}
        try:
            cache_path().parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(cache_path()), json.dumps(doc, indent=1))
        except OSError:
            pass  # an unwritable cache only costs a new calibration next time
    else:
        source += "; lead within the noise, not cached"
    return Choice(kernels.get(bits, act, best), source, medians, spreads, flush_mib)


class CalibrationFailed(RuntimeError):
    """No variant could be calibrated: a failed row, like a verification failure."""

"""--kernel auto: the fastest verified variant for this machine and shape, measured once and cached.

Which variant wins depends on the shape as well as the machine (a variant that
shares work across four rows wins on long rows and can lose on short ones), so
for each width and shape every registered variant is verified (on a small
matrix) and timed warm on the shape itself, within a small time budget. The
choice is stored in a JSON file under the user's cache directory, keyed by
everything that could change it: CPU model and ISA flags, thread count,
activation type, shape, block and metadata size, the versions of gemvbw, numba
and llvmlite, the set of variants, a fingerprint of the kernels' sources and
numba's compiler target.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gemvbw import kernels, system, tiers
from gemvbw.cache import cache_dir
from gemvbw.harness import CacheFlusher, time_groups
from gemvbw.quant import random_activations, random_quantized
from gemvbw.report.files import write_atomic
from gemvbw.verify import verify

CALIB_M = 64  # the matrix every variant is verified on before it may be timed
CALIB_K = 1024
CALIB_ITERS = 20  # calls per group at most
CALIB_REPS = 3
BUDGET_S = 0.3  # per variant: fewer calls on a slow shape


@dataclass(frozen=True)
class Choice:
    spec: kernels.KernelSpec
    source: str  # "calibrated now", "cached", "only variant"
    timings_us: dict[str, float]

    def to_dict(self) -> dict:
        return {"variant": self.spec.variant, "source": self.source, "timings_us": self.timings_us}


def cache_path() -> Path:
    return cache_dir() / "calibration.json"


def machine_key(bits: int, act: str, threads: int, shape: tuple = ()) -> str:
    facts = system.describe_cpu()
    v = system.versions()
    names = ",".join(s.variant for s in kernels.variants(bits, act))
    raw = json.dumps([facts, threads, act, bits, list(shape), v["gemvbw"], v["numba"], v["llvmlite"], names,
                      kernels.FINGERPRINT, tiers.numba_target_key()], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _load() -> dict:
    try:
        doc = json.loads(cache_path().read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}  # no cache yet, or an unreadable one: measure again


def measure(bits: int, act: str, qm=None, x=None) -> dict[str, float]:
    """Best warm group mean (us) on ``qm`` (default: a small matrix) of every variant that passes verification."""
    small = random_quantized(CALIB_M, CALIB_K, bits, 64 if qm is None else qm.block,
                             2 if qm is None else qm.meta_bytes, seed=99)
    small_x = random_activations(CALIB_K, seed=99)
    if qm is None:
        qm, x = small, small_x
    y = np.empty(qm.M, dtype=np.float32)
    warm = CacheFlusher(0)
    timings = {}
    for spec in kernels.variants(bits, act):
        try:
            if not verify(spec, small, small_x).ok:
                continue
        except Exception:
            continue
        run = spec.bind(qm)
        t0 = time.perf_counter()
        run(x, y)  # also the warm-up
        first = time.perf_counter() - t0
        iters = max(1, min(CALIB_ITERS, int(BUDGET_S / CALIB_REPS / max(first, 1e-9))))
        timings[spec.variant] = time_groups(lambda: run(x, y), iters, CALIB_REPS, warm).best_avg_us
    return timings


def choose(bits: int, act: str, threads: int, qm=None, x=None) -> Choice:
    """The variant --kernel auto runs for this width (and the shape of ``qm``): from the cache when this
    machine and shape were calibrated, else measured now on ``qm`` (a small matrix when none is given)."""
    found = kernels.variants(bits, act)
    if not found:
        raise KeyError(f"no kernel for w{bits} act={act}")
    if len(found) == 1:
        return Choice(found[0], "only variant", {})
    if system.describe_cpu().get("emulated"):  # timing would rank the emulator's translations, not the CPU's
        return Choice(found[0], "preferred; not calibrated under emulation", {})
    shape = () if qm is None else (qm.M, qm.K, qm.block, qm.meta_bytes)
    key = machine_key(bits, act, threads, shape)
    entry = _load().get(key)
    if isinstance(entry, dict) and entry.get("variant") in {s.variant for s in found}:
        return Choice(kernels.get(bits, act, entry["variant"]), "cached", entry.get("timings_us", {}))
    timings = measure(bits, act, qm, x)
    if not timings:
        raise RuntimeError(f"no w{bits} variant passed verification during calibration")
    best = min(timings, key=timings.get)
    doc = _load()
    doc[key] = {"bits": bits, "act": act, "threads": threads, "variant": best, "timings_us": timings,
                "shape": list(shape) or [CALIB_M, CALIB_K]}
    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(cache_path()), json.dumps(doc, indent=1))
    except OSError:
        pass  # an unwritable cache only costs a new calibration next time
    return Choice(kernels.get(bits, act, best), "calibrated now", timings)

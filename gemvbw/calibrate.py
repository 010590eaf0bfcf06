"""--kernel auto: the fastest verified variant for this machine, measured once and cached.

For each width, every registered variant is verified and timed warm on a small
shape (CALIB_M x CALIB_K: it ranks kernels by how fast they compute, which is
what distinguishes them; cold figures come from the sweep itself). The choice is
stored in a JSON file under the user's cache directory, keyed by everything that
could change it: CPU model and ISA flags, thread count, activation type, the
versions of gemvbw, numba and llvmlite, and the set of variants.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gemvbw import kernels, system
from gemvbw.harness import CacheFlusher, time_groups
from gemvbw.quant import random_activations, random_quantized
from gemvbw.report.files import write_atomic
from gemvbw.verify import verify

CALIB_M = 1024
CALIB_K = 4096
CALIB_ITERS = 20
CALIB_REPS = 3


@dataclass(frozen=True)
class Choice:
    spec: kernels.KernelSpec
    source: str  # "calibrated now", "cached", "only variant"
    timings_us: dict[str, float]

    def to_dict(self) -> dict:
        return {"variant": self.spec.variant, "source": self.source, "timings_us": self.timings_us}


def cache_path() -> Path:
    base = os.environ.get("GEMVBW_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gemvbw")
    return Path(base) / "calibration.json"


def machine_key(bits: int, act: str, threads: int) -> str:
    facts = system.describe_cpu()
    v = system.versions()
    names = ",".join(s.variant for s in kernels.variants(bits, act))
    raw = json.dumps([facts, threads, act, bits, v["gemvbw"], v["numba"], v["llvmlite"], names], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _load() -> dict:
    try:
        doc = json.loads(cache_path().read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}  # no cache yet, or an unreadable one: measure again


def measure(bits: int, act: str, block: int = 64, meta_bytes: int = 2) -> dict[str, float]:
    """Best group mean (us) of every variant that passes verification, on the calibration shape."""
    qm = random_quantized(CALIB_M, CALIB_K, bits, block, meta_bytes, seed=99)
    x = random_activations(CALIB_K, seed=99)
    y = np.empty(CALIB_M, dtype=np.float32)
    warm = CacheFlusher(0)
    timings = {}
    for spec in kernels.variants(bits, act):
        try:
            if not verify(spec, qm, x).ok:
                continue
        except Exception:
            continue
        run = spec.bind(qm)
        timings[spec.variant] = time_groups(lambda: run(x, y), CALIB_ITERS, CALIB_REPS, warm).best_avg_us
    return timings


def choose(bits: int, act: str, threads: int) -> Choice:
    """The variant --kernel auto runs: from the cache when this machine was calibrated, else measured now."""
    found = kernels.variants(bits, act)
    if not found:
        raise KeyError(f"no kernel for w{bits} act={act}")
    if len(found) == 1:
        return Choice(found[0], "only variant", {})
    key = machine_key(bits, act, threads)
    entry = _load().get(key)
    if isinstance(entry, dict) and entry.get("variant") in {s.variant for s in found}:
        return Choice(kernels.get(bits, act, entry["variant"]), "cached", entry.get("timings_us", {}))
    timings = measure(bits, act)
    if not timings:
        raise RuntimeError(f"no w{bits} variant passed verification during calibration")
    best = min(timings, key=timings.get)
    doc = _load()
    doc[key] = {"bits": bits, "act": act, "threads": threads, "variant": best, "timings_us": timings,
                "shape": [CALIB_M, CALIB_K]}
    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(cache_path()), json.dumps(doc, indent=1))
    except OSError:
        pass  # an unwritable cache only costs a new calibration next time
    return Choice(kernels.get(bits, act, best), "calibrated now", timings)

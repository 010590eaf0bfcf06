"""gemvbw soak: one width and shape, run without pause, to see what the device settles at.

Phones throttle within minutes under sustained memory-bound load; a best-of-3 figure
taken in the first seconds is not what decode will run at. The soak times windows of
calls (each call after the cache flush, as in the sweep) and records, per window, the
mean latency, the eff GB/s it gives, the clusters' frequency and the temperature.

Summary: peak = the best window; sustained = the median of the last third of the
windows; their ratio is how much of the peak survives.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np

from gemvbw import __version__, calibrate, kernels, metrics, system
from gemvbw.harness import CacheFlusher
from gemvbw.quant import random_activations, random_quantized
from gemvbw.sampling import Sampler
from gemvbw.settings import Settings
from gemvbw.verify import verify

SCHEMA = "gemvbw.soak/1"


@dataclass(frozen=True)
class Window:
    t_s: float  # end of the window, since the start of the soak
    calls: int
    mean_us: float
    eff_gbps: float
    mhz: tuple[float | None, ...]
    celsius: float | None

    def to_dict(self) -> dict:
        return {"t_s": round(self.t_s, 3), "calls": self.calls, "mean_us": self.mean_us, "eff_gbps": self.eff_gbps,
                "mhz": list(self.mhz), "celsius": self.celsius}


@dataclass
class SoakRecord:
    system: dict
    settings: dict
    variant: str
    logical_bytes: int
    seconds: float
    interval: float
    windows: list[Window] = field(default_factory=list)
    act: str = "f32"  # the activations the kernel ran with (--act auto resolved)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    interrupted: str | None = None

    @property
    def peak_gbps(self) -> float | None:
        return max((w.eff_gbps for w in self.windows), default=None)

    @property
    def sustained_gbps(self) -> float | None:
        """Median eff GB/s of the last third of the windows."""
        if not self.windows:
            return None
        tail = self.windows[len(self.windows) - max(1, len(self.windows) // 3):]
        return metrics.median([w.eff_gbps for w in tail])

    @property
    def sustained_ratio(self) -> float | None:
        peak, sustained = self.peak_gbps, self.sustained_gbps
        return None if not peak or sustained is None else metrics.ratio(sustained, peak)

    def summary(self) -> dict:
        return {"windows": len(self.windows), "peak_gbps": self.peak_gbps, "sustained_gbps": self.sustained_gbps,
                "sustained_over_peak": self.sustained_ratio}

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "version": __version__, "created": self.created, "command": list(sys.argv),
                "interrupted": self.interrupted, "system": self.system, "settings": self.settings,
                "variant": self.variant, "act": self.act, "logical_bytes": self.logical_bytes, "seconds": self.seconds,
                "interval_s": self.interval, "windows": [w.to_dict() for w in self.windows],
                "summary": self.summary()}


def soak(settings: Settings, seconds: float, interval: float,
         on_window: Callable[[SoakRecord, Window], None] | None = None) -> SoakRecord:
    """Run one width until ``seconds`` have passed; the record grows window by window."""
    bits = settings.bits[0]
    numba.set_num_threads(settings.threads)
    qm = random_quantized(settings.M, settings.K, bits, settings.block, settings.meta_bytes, seed=settings.seed + bits)
    x = random_activations(settings.K, settings.seed)
    act = kernels.acts_for(bits, settings.block, settings.act, settings.kernel)[0][0]
    flusher = CacheFlusher(settings.flush_mib)
    if settings.kernel == "auto":  # calibrated under the flush the soak runs with
        spec = calibrate.choose(bits, act, settings.threads, qm, x, recalibrate=settings.recalibrate,
                                flusher=flusher).spec
    else:
        spec = kernels.get(bits, act, settings.kernel)
    check = verify(spec, qm, x)
    if not check.ok:
        raise RuntimeError(f"w{bits} {spec.variant} failed verification (max rel err {check.max_rel_err:.2e}); "
                           "nothing was timed")
    record = SoakRecord(system.describe(), settings.to_dict(), spec.variant, qm.logical_bytes, seconds, interval,
                        act=act)
    record.system.update(system.numba_threading())
    soak.record = record  # so that an interrupted caller can still report what was measured
    run = spec.bind(qm)
    y = np.empty(qm.M, dtype=np.float32)
    sampler = Sampler(record.system["affinity"])
    clock = time.perf_counter_ns
    call = kernels.call_on(run, x, y)  # timed as the sweep times it
    call()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        window_end = min(start + seconds, time.monotonic() + interval)
        total = calls = 0
        while calls == 0 or time.monotonic() < window_end:
            flusher.flush()
            t0 = clock()
            call()
            total += clock() - t0
            calls += 1
        mean_us = total / calls / 1e3
        s = sampler.sample()
        window = Window(time.monotonic() - start, calls, mean_us, metrics.eff_gbps(qm.logical_bytes, mean_us / 1e6),
                        s.mhz, s.celsius)
        record.windows.append(window)
        if on_window is not None:
            on_window(record, window)
    return record


def csv_text(record: SoakRecord) -> str:
    lines = ["t_s,calls,mean_us,eff_gbps,mhz,celsius"]
    for w in record.windows:
        mhz = ";".join("" if m is None else f"{m:.0f}" for m in w.mhz)
        lines.append(f"{w.t_s:.3f},{w.calls},{w.mean_us:.3f},{w.eff_gbps:.4f},{mhz},"
                     f"{'' if w.celsius is None else w.celsius}")
    return "\n".join(lines) + "\n"


def markdown(record: SoakRecord) -> str:
    s, settings = record.summary(), record.settings
    lines = [f"## gemvbw soak: w{settings['bits'][0]} {record.variant} {settings['M']}x{settings['K']}, "
             f"{settings['threads']} threads, {record.seconds:g} s in windows of {record.interval:g} s", "",
             "t s | calls | mean us | eff GB/s | MHz | C", "---:|---:|---:|---:|---|---:"]
    for w in record.windows:
        mhz = "/".join("?" if m is None else f"{m:.0f}" for m in w.mhz)
        lines.append(f"{w.t_s:.1f} | {w.calls} | {w.mean_us:.1f} | {w.eff_gbps:.2f} | {mhz} | "
                     f"{'?' if w.celsius is None else f'{w.celsius:.1f}'}")
    if s["peak_gbps"] is not None:
        lines += ["", f"peak {s['peak_gbps']:.2f} GB/s (best window); sustained {s['sustained_gbps']:.2f} GB/s "
                      f"(median of the last third); sustained/peak {s['sustained_over_peak']:.2f}"]
    return "\n".join(lines) + "\n"

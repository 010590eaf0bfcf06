"""Frequency and temperature samples taken between timed groups (never inside the timing)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from gemvbw import system

BELOW_MAX = 0.90  # a group that ran under 90 % of its cluster's maximum frequency is flagged
FELL_BY = 0.05  # a frequency 5 % lower at the last group than at the first is flagged


@dataclass(frozen=True)
class Sample:
    t_s: float
    mhz: tuple[float | None, ...]  # per cluster in use
    celsius: float | None  # the hottest readable thermal zone

    def to_dict(self) -> dict:
        return {"t_s": round(self.t_s, 3), "mhz": list(self.mhz), "celsius": self.celsius}


class Sampler:
    """Reads the current frequency of the clusters the run uses, and the temperature."""

    def __init__(self, cpus: list[int], root: Path = Path("/")):
        groups = system.clusters(root)
        self.root = root
        self.clusters = system.clusters_of(cpus, groups) or groups
        self.max_mhz = [None if c.max_khz is None else c.max_khz / 1000 for c in self.clusters]
        self.start = time.monotonic()

    def sample(self) -> Sample:
        return Sample(time.monotonic() - self.start, tuple(system.cluster_freqs_mhz(self.clusters, self.root)),
                      system.max_temperature(self.root))


def frequency_findings(samples: list[Sample], max_mhz: list[float | None]) -> list[tuple[str, str]]:
    """(code, message) for groups below max frequency and for a frequency that fell during the run."""
    found = []
    for i, top in enumerate(max_mhz):
        seen = [s.mhz[i] for s in samples if i < len(s.mhz) and s.mhz[i] is not None]
        if not seen:
            continue
        if top and min(seen) < BELOW_MAX * top:
            found.append(("below-max-frequency",
                          f"cluster {i} ran at {min(seen):.0f} MHz, under {100 * BELOW_MAX:.0f}% of its "
                          f"{top:.0f} MHz maximum (power saving or thermal throttling)"))
        if len(seen) >= 2 and seen[-1] < (1 - FELL_BY) * seen[0]:
            found.append(("frequency-fell",
                          f"cluster {i} fell from {seen[0]:.0f} to {seen[-1]:.0f} MHz between the first and the "
                          "last group (throttling): later groups ran slower"))
    return found

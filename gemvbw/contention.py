"""Whether something else held the cores while a kernel was timed: worse than noise, so said beside the figure.

Measured around each kernel's timing, from what the OS counts for this process and the machine:
involuntary context switches (the scheduler took a CPU from one of gemvbw's threads) and, on a
virtual machine, steal time (the hypervisor ran another guest on a CPU gemvbw had).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# thresholds: a preemption every other call, or 5 % of the CPU time stolen, mark the row
PREEMPTIONS_PER_CALL = 0.5
STEAL_SHARE = 0.05


@dataclass(frozen=True)
class Snapshot:
    involuntary: int
    steal_s: float | None
    busy_s: float | None


def snapshot() -> Snapshot:
    involuntary = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    try:
        import psutil

        t = psutil.cpu_times()
        steal = getattr(t, "steal", None)
        busy = sum(getattr(t, k, 0.0) for k in ("user", "system", "nice", "irq", "softirq")) + (steal or 0.0)
    except Exception:  # psutil may be refused /proc on Android
        steal = busy = None
    return Snapshot(involuntary, steal, busy)


def between(before: Snapshot, after: Snapshot, calls: int) -> dict:
    """What happened between two snapshots, for the JSON, and whether it is worth a note."""
    preempted = after.involuntary - before.involuntary
    steal = None
    if before.steal_s is not None and after.steal_s is not None and after.busy_s and after.busy_s > before.busy_s:
        steal = (after.steal_s - before.steal_s) / (after.busy_s - before.busy_s)
    return {"involuntary_switches": preempted, "calls": calls, "steal_share": steal,
            "contended": preempted > PREEMPTIONS_PER_CALL * calls or (steal is not None and steal > STEAL_SHARE)}


def message(c: dict) -> str:
    parts = [f"the process was preempted {c['involuntary_switches']} times in {c['calls']} timed calls"]
    if c.get("steal_share") is not None:
        parts.append(f"the hypervisor took {100 * c['steal_share']:.0f}% of the CPU time (steal)")
    return "; ".join(parts) + ": other work held the cores, so this figure is slower than the machine"

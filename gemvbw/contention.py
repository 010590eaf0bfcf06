"""Whether something else held the cores while a kernel was timed: worse than noise, so said beside the figure.

Measured from what the OS counts for this process and the machine: involuntary context switches (the
scheduler took a CPU from one of gemvbw's threads), counted inside each timed call, and, on a virtual
machine, steal time (the hypervisor ran another guest on a CPU gemvbw had), over the whole timing.

Only the switches inside the calls, and what they cost, count against a row. Counted over the whole
timing, the flushes between the calls weighed in: on an Intel Xeon with a 480 MiB L3 (2026-12-05) the
default flush, 1920 MiB per thread, takes about 0.1 s against a 2 ms call, and every row of the default
sweep was marked (about four switches per call). With a 512 MiB flush at 2 threads the process was
switched 765-839 times in 600 timed calls, 9-42 times inside one, and those calls made the best group's
mean at most 0.9 % slower. A switch inside a call is not always a cost: the thread may lose the CPU for
microseconds, or for a scheduler slice.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# thresholds: the preempted calls made the row's figure (its best group's mean) more than 1 % slower than that
# group's other calls, or 5 % of the CPU time was stolen. A preempted call lasts a scheduler slice (milliseconds)
# longer: one in a hundred makes a 2 ms call's mean a few per cent slower, a 50 us call's far more.
PREEMPTION_SLOWDOWN = 0.01
STEAL_SHARE = 0.05


@dataclass(frozen=True)
class Snapshot:
    involuntary: int
    steal_s: float | None
    busy_s: float | None


def involuntary_switches() -> int:
    """The process's involuntary context switches so far, all its threads (RUSAGE_SELF)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def snapshot() -> Snapshot:
    involuntary = involuntary_switches()
    try:
        import psutil

        t = psutil.cpu_times()
        steal = getattr(t, "steal", None)
        busy = sum(getattr(t, k, 0.0) for k in ("user", "system", "nice", "irq", "softirq")) + (steal or 0.0)
    except Exception:  # psutil may be refused /proc on Android
        steal = busy = None
    return Snapshot(involuntary, steal, busy)


def preemption_slowdown(group) -> float | None:
    """How much slower a group's mean is than the mean of its calls that were not preempted (0.1: 10 %);
    None when every call was. ``group``: a gemvbw.harness.Group with its switches counted."""
    calm = [t for t, n in zip(group.latencies_ns, group.switches) if n == 0]
    if not calm:
        return None
    return group.mean_us * 1e3 / (sum(calm) / len(calm)) - 1


def between(before: Snapshot, after: Snapshot, measurement) -> dict:
    """What happened between two snapshots taken around a timing, for the JSON, and whether it is worth a note.
    ``measurement``: that timing (gemvbw.harness.Measurement), with the switches counted inside each call."""
    steal = None
    if before.steal_s is not None and after.steal_s is not None and after.busy_s and after.busy_s > before.busy_s:
        steal = (after.steal_s - before.steal_s) / (after.busy_s - before.busy_s)
    per_call = measurement.switches_per_call
    slowdown = preemption_slowdown(measurement.best_group)
    return {"calls": len(per_call), "preempted_calls": sum(1 for n in per_call if n > 0),
            "switches_in_calls": sum(per_call), "involuntary_switches": after.involuntary - before.involuntary,
            "best_group_slowdown": slowdown, "steal_share": steal,
            "contended": slowdown is None or slowdown > PREEMPTION_SLOWDOWN
            or (steal is not None and steal > STEAL_SHARE)}


def message(c: dict) -> str:
    slowdown = c.get("best_group_slowdown")
    effect = ("every call of the best group among them" if slowdown is None else
              f"which made the best group's mean {100 * slowdown:.1f}% slower than its other calls")
    parts = [f"{c['preempted_calls']} of the {c['calls']} timed calls {'was' if c['preempted_calls'] == 1 else 'were'} "
             f"preempted ({c['switches_in_calls']} involuntary context switches inside them, "
             f"{c['involuntary_switches']} in the whole timing with its flushes), {effect}"]
    if c.get("steal_share") is not None:
        parts.append(f"the hypervisor took {100 * c['steal_share']:.0f}% of the CPU time (steal)")
    return "; ".join(parts) + ": other work held the cores, so this figure is slower than the machine"

"""gemvbw info: what this device is, and how to pin a run to its fastest cores."""

from __future__ import annotations

import sys
from pathlib import Path

from gemvbw import system, tiers
from gemvbw.settings import format_cpus


def gather(root: Path = Path("/"), affinity: list[int] | None = None, with_numba: bool = True) -> dict:
    """Every fact gemvbw info shows, JSON-ready; what cannot be read is 'unknown (reason)'."""
    text = system.read_text(root / "proc/cpuinfo")
    sections = [] if isinstance(text, system.Unknown) else system.parse_cpuinfo(text)
    machine = system.platform.machine() if root == Path("/") else _machine_of(sections)
    groups = system.with_current_from_cpuinfo(system.clusters(root), root)
    cpus = system.affinity() if affinity is None else affinity
    caches = system.cache_sizes(root)
    temps = system.temperatures(root)
    mem = system.memory() if root == Path("/") else system.Unknown("not read from a fixture tree")
    live = root == Path("/")
    isa, isa_source = system.cpu_isa(sections, machine) if live else (system.isa_features(sections, machine),
                                                                      "/proc/cpuinfo")
    emulated = system.emulation(sections, machine)
    model = str(text) if isinstance(text, system.Unknown) else str(system.cpu_model(sections))
    target = tiers.numba_target() if live else None
    facts = {
        "cpu": model if emulated is None else f"emulated {machine} on {model}",
        "machine": machine,
        "platform": sys.platform,
        "isa": isa,
        "isa_source": isa_source,
        "emulated": emulated,
        "tiers": tiers.build_report(machine, isa, isa_source, target,
                                    no_target="llvmlite is not importable" if live else
                                    f"a captured tree under {root}: no compiler to ask").to_dict(),
        "clusters": [g.to_dict() for g in groups],
        "clusters_known": system.clusters_known(groups),
        "affinity": cpus,
        "affinity_clusters": [groups.index(g) for g in system.clusters_of(cpus, groups)],
        "affinity_mixed": system.spans_mixed_clusters(cpus, groups),
        "caches": caches if not isinstance(caches, system.Unknown) else str(caches),
        "memory": mem if not isinstance(mem, system.Unknown) else str(mem),
        "temperatures": temps if not isinstance(temps, system.Unknown) else str(temps),
        "advice": system.taskset_advice(groups),
    }
    if with_numba:
        start_numba_pool()
        facts["versions"] = system.versions()
        facts["numba_threading"] = system.numba_threading()
    return facts


def start_numba_pool() -> None:
    """One empty parallel call, so numba's threading layer is known rather than 'not yet started'."""
    import numpy as np

    from gemvbw.kernels._common import empty_parallel_call

    empty_parallel_call(np.zeros(1, dtype=np.int64))


def _machine_of(sections: list[dict]) -> str:
    return "aarch64" if any("Features" in s for s in sections) else "x86_64"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def render(facts: dict) -> list[str]:
    lines = [f"cpu:        {facts['cpu']} ({facts['machine']}, {facts['platform']})",
             f"isa:        {' '.join(facts['isa']) or 'none of the kernel-relevant features'} "
             f"(from {facts['isa_source']})"]
    if facts.get("emulated"):
        lines.append(f"  ! emulated: {facts['emulated']}; timings here are the emulator's")
    lines += tier_lines(facts)
    lines.append("clusters:   (fastest first)")
    for i, c in enumerate(facts["clusters"]):
        speed = f"max {c['max_mhz']:.0f} MHz" if c["max_mhz"] else "max unknown"
        cur = f", now {c['cur_mhz']:.0f} MHz" if c["cur_mhz"] else ""
        if not c["max_mhz"] and c["cur_mhz"] and not c["source"].startswith("cpufreq"):
            cur += " (/proc/cpuinfo; no cpufreq, so the maximum is not exposed)"
        gov = f", governor {c['governor']}" if c["governor"] else ""
        cap = f", capacity {c['capacity']}" if c["capacity"] else ""
        lines.append(f"  [{i}] {format_cpus(c['cpus'])} (mask {c['mask']}): {speed}{cur}{gov}{cap}  <- {c['source']}")
    touched = ", ".join(f"[{i}]" for i in facts["affinity_clusters"])
    lines.append(f"affinity:   {format_cpus(facts['affinity'])} (what taskset set), in cluster(s) {touched}")
    if facts["affinity_mixed"]:
        lines.append("  ! these CPUs span clusters of different speed: results would mix core types")
    caches = facts["caches"]
    lines.append("caches:     " + (", ".join(f"{k} {_size(v)}" for k, v in caches.items())
                                   if isinstance(caches, dict) else caches))
    mem = facts["memory"]
    lines.append("memory:     " + (f"{mem['total'] / 2**30:.1f} GiB total, {mem['available'] / 2**30:.1f} GiB available"
                                   if isinstance(mem, dict) else mem))
    temps = facts["temperatures"]
    lines.append("thermal:    " + (", ".join(f"{t['type'] or t['zone']} {t['celsius']:.1f} C" for t in temps[:8])
                                   + (f" (+{len(temps) - 8} more)" if len(temps) > 8 else "")
                                   if isinstance(temps, list) else temps))
    if "versions" in facts:
        v, th = facts["versions"], facts["numba_threading"]
        lines.append(f"versions:   gemvbw {v['gemvbw']}, python {v['python']}, numpy {v['numpy']}, "
                     f"numba {v['numba']}, llvmlite {v['llvmlite']}")
        lines.append(f"numba:      threading layer {th['threading_layer']}, up to {th['max_threads']} threads")
    adv = facts["advice"]
    if adv["command"]:
        lines.append(f"advice:     {adv['why']}; pin to them:")
        lines.append(f"  {adv['command']}")
        lines.append(f"  (or without taskset: gemvbw sweep --cpus {','.join(map(str, adv['cpus']))} "
                     f"--threads {adv['threads']})")
    else:
        lines.append(f"advice:     {adv['why']}")
    return lines


def tier_lines(facts: dict) -> list[str]:
    """int8 tiers this CPU and numba's target can run (the preferred first), the others and why not."""
    rep = facts["tiers"]
    usable = [t for t in rep["tiers"] if t["usable"]]
    lines = []
    if usable:
        names = [v for t in usable for v in t["variants"]]
        # the tiles by their own preference (a tier's tile may rank other than the tier itself)
        tiles = [t["variants"][0] for t in sorted(usable, key=lambda t: -t["tile_priority"]) if t["tile_priority"]]
        # the preferred first: a column-tile variant where a tier has one, else the preferred tier's packed-4x2
        first = tiles[0] if tiles else next(v for v in names if v.startswith("packed-4x2-"))
        shown = ", ".join([f"{first} (preferred)" if len(names) > 1 else first] + [v for v in names if v != first])
        # every width has each of these variants, a column tile's -prfm and -1stream twins included
        lines.append(f"int8 tiers: {shown}: w8 w4 w3 w2 at block 64 run int8 activations "
                     "(--act auto; --kernel auto calibrates among them per shape)")
    else:
        lines.append("int8 tiers: none usable here: every width runs f32 activations (--act auto)")
    for t in rep["tiers"]:
        if not t["usable"]:
            lines.append(f"  {', '.join(t['variants'])}: not usable: {t['reason']}")
    for flag, why in tiers.UNUSED.items():
        if flag in facts["isa"]:
            lines.append(f"  {why}")
    target = rep["target"]
    if target is not None:
        lines.append(f"compiler:   numba targets {target['cpu']} ({target['cpu_source']}; features from "
                     f"{target['features_source']})")
    if rep["unsafe_message"]:
        lines.append(f"  ! {rep['unsafe_message']}; gemvbw sweep refuses to run so")
    return lines

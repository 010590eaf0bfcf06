"""What machine this is: CPU model, ISA flags, caches, affinity, memory, versions.

Everything is read from files under a root directory (``/`` by default) so the
parsing can be tested on captured trees. Nothing here needs root, and what
cannot be read is reported as unknown with the reason, never raised.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

# ISA features that decide which kernels can be fast, per architecture.
X86_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni")
ARM_FEATURES = ("asimd", "asimddp", "i8mm", "sve", "sve2", "sme", "fphp", "asimdhp")


@dataclass(frozen=True)
class Unknown:
    """A fact that could not be read, and why."""

    reason: str

    def __str__(self) -> str:
        return f"unknown ({self.reason})"


def is_linux_like(platform_name: str | None = None) -> bool:
    """Linux and Android (Python 3.13+ reports 'android' on Termux) share /proc and /sys."""
    name = sys.platform if platform_name is None else platform_name
    return name.startswith("linux") or name == "android"


def read_text(path: Path) -> str | Unknown:
    try:
        return path.read_text()
    except FileNotFoundError:
        return Unknown(f"no {path}")
    except PermissionError:
        return Unknown(f"no permission to read {path}")
    except OSError as exc:
        return Unknown(f"{path}: {exc.strerror or exc}")


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as a list of per-processor dicts (plus a trailing global section on ARM)."""
    sections, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                sections.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            cur[key.strip()] = value.strip()
    if cur:
        sections.append(cur)
    return sections


def cpu_model(sections: list[dict[str, str]]) -> str | Unknown:
    for key in ("model name", "Hardware", "Model", "Processor", "cpu model"):
        for sec in sections:
            if sec.get(key):
                return sec[key]
    # arm64 kernels often give only implementer/part codes
    for sec in sections:
        if "CPU part" in sec:
            return f"ARM implementer {sec.get('CPU implementer', '?')} part {sec['CPU part']}"
    return Unknown("/proc/cpuinfo names no model")


def isa_features(sections: list[dict[str, str]], machine: str) -> list[str]:
    """The kernel-relevant ISA features present, from the flags/Features lines."""
    flags: set[str] = set()
    for sec in sections:
        for key in ("flags", "Features"):
            if key in sec:
                flags.update(sec[key].split())
    wanted = ARM_FEATURES if machine in ("aarch64", "arm64", "armv8l") else X86_FEATURES
    return [f for f in wanted if f in flags]


def affinity() -> list[int]:
    """CPUs this process may run on (what taskset set)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cache_sizes(root: Path = Path("/"), cpu: int = 0) -> dict[str, int] | Unknown:
    """Cache sizes in bytes for one CPU, keyed L1d, L1i, L2, L3..."""
    base = root / f"sys/devices/system/cpu/cpu{cpu}/cache"
    if not base.is_dir():
        return Unknown(f"no {base}")
    sizes: dict[str, int] = {}
    for index in sorted(base.glob("index*")):
        level = read_text(index / "level")
        size = read_text(index / "size")
        ctype = read_text(index / "type")
        if isinstance(level, Unknown) or isinstance(size, Unknown):
            continue
        kind = "" if isinstance(ctype, Unknown) else ctype.strip()
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        sizes[f"L{level.strip()}{suffix}"] = parse_size(size.strip())
    return sizes or Unknown(f"{base} lists no caches")


def parse_size(text: str) -> int:
    """'32768K' / '1M' / '512' -> bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in mult:
        return int(text[:-1]) * mult[text[-1].upper()]
    return int(text)


def last_level_cache_bytes(root: Path = Path("/")) -> int | Unknown:
    sizes = cache_sizes(root)
    if isinstance(sizes, Unknown):
        return sizes
    unified = {k: v for k, v in sizes.items() if k[-1].isdigit()}
    if not unified:
        return Unknown("no unified cache level listed")
    return unified[max(unified)]


def memory() -> dict[str, int] | Unknown:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return {"total": int(vm.total), "available": int(vm.available)}
    except Exception as exc:  # psutil may be forbidden parts of /proc on Android
        return Unknown(f"psutil.virtual_memory failed: {exc}")


def available_memory_bytes() -> int | None:
    mem = memory()
    return None if isinstance(mem, Unknown) else mem["available"]


def cpu_freq_mhz() -> dict[str, object]:
    """Current (and, where the OS tells, min/max) frequency per CPU, from psutil; unknown with a reason otherwise."""
    try:
        import psutil

        freqs = psutil.cpu_freq(percpu=True)
    except Exception as exc:  # Android forbids parts of /proc and /sys
        return {"unknown": f"psutil.cpu_freq failed: {exc}"}
    if not freqs:
        return {"unknown": "psutil.cpu_freq reports nothing on this system"}
    return {
        "current": [round(f.current, 1) for f in freqs],
        "max": [round(f.max, 1) if f.max else None for f in freqs],
        "source": "cpufreq" if any(f.max for f in freqs) else "/proc/cpuinfo (no cpufreq: max unknown)",
    }


def versions() -> dict[str, str]:
    import llvmlite
    import numba
    import numpy

    from gemvbw import __version__

    return {
        "gemvbw": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
    }


def numba_threading() -> dict[str, object]:
    """numba's threading layer (known once a parallel function has run) and its thread limit."""
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = "not yet started"
    return {"threading_layer": layer, "max_threads": int(numba.config.NUMBA_NUM_THREADS),
            "threads": int(numba.get_num_threads())}


def describe_cpu(root: Path = Path("/")) -> dict[str, object]:
    """CPU model, architecture and kernel-relevant ISA flags: what decides which kernel is fastest."""
    machine = platform.machine()
    text = read_text(root / "proc/cpuinfo")
    sections = [] if isinstance(text, Unknown) else parse_cpuinfo(text)
    model = text if isinstance(text, Unknown) else cpu_model(sections)
    return {"cpu": str(model), "machine": machine, "isa": isa_features(sections, machine)}


def describe(root: Path = Path("/")) -> dict[str, object]:
    """The system facts recorded with every run (JSON-ready: unknowns become strings)."""
    machine = platform.machine()
    text = read_text(root / "proc/cpuinfo")
    sections = [] if isinstance(text, Unknown) else parse_cpuinfo(text)
    model = text if isinstance(text, Unknown) else cpu_model(sections)
    llc = last_level_cache_bytes(root)
    caches = cache_sizes(root)
    mem = memory()
    facts: dict[str, object] = {
        "cpu": str(model),
        "machine": machine,
        "platform": sys.platform,
        "isa": isa_features(sections, machine),
        "cores": os.cpu_count(),
        "affinity": affinity(),
        "caches": caches if not isinstance(caches, Unknown) else str(caches),
        "llc_bytes": llc if not isinstance(llc, Unknown) else None,
        "memory": mem if not isinstance(mem, Unknown) else str(mem),
        "cpu_freq_mhz": cpu_freq_mhz(),
    }
    facts.update(versions())
    facts.update(numba_threading())
    return facts

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

# ISA features that decide which kernels can be fast, per architecture (as /proc/cpuinfo names them).
X86_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni")
ARM_FEATURES = ("asimd", "asimddp", "i8mm", "sve", "sve2", "sme", "fphp", "asimdhp")

# The aarch64 kernel's HWCAP bits (linux arch/arm64/include/uapi/asm/hwcap.h), named as the Features
# line of /proc/cpuinfo names them. The HWCAPs are what the kernel enables for user space, so they are
# what decides whether an instruction runs or raises SIGILL.
AT_HWCAP, AT_HWCAP2 = 16, 26
HWCAP_BITS = {0: "fp", 1: "asimd", 9: "fphp", 10: "asimdhp", 20: "asimddp", 22: "sve", 23: "asimdfhm"}
HWCAP2_BITS = {1: "sve2", 13: "i8mm", 14: "bf16", 23: "sme"}


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


def format_cpus(cpus: list[int]) -> str:
    """[0,1,2,5] -> 'CPUs 0-2,5'."""
    if not cpus:
        return "no CPUs"
    runs, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:  # type: ignore[list-item]
        if c is not None and c == prev + 1:
            prev = c
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if c is not None:
            start = prev = c
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(runs)


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
    if not sections and not is_linux_like():
        return platform.processor() or Unknown(f"no /proc/cpuinfo on {sys.platform}")
    for key in ("model name", "Hardware", "Model", "Processor", "cpu model"):
        for sec in sections:
            if sec.get(key):
                return sec[key]
    # arm64 kernels often give only implementer/part codes
    for sec in sections:
        if "CPU part" in sec:
            return f"ARM implementer {sec.get('CPU implementer', '?')} part {sec['CPU part']}"
    return Unknown("/proc/cpuinfo names no model")


def is_arm(machine: str) -> bool:
    return machine in ("aarch64", "arm64", "armv8l")


def isa_features(sections: list[dict[str, str]], machine: str, hwcaps: set[str] | None = None) -> list[str]:
    """The kernel-relevant ISA features present: from the HWCAPs on aarch64 when given, else from
    /proc/cpuinfo's flags/Features lines."""
    flags: set[str] = set()
    if hwcaps is not None and is_arm(machine):
        flags = hwcaps
    else:
        for sec in sections:
            for key in ("flags", "Features"):
                if key in sec:
                    flags.update(sec[key].split())
    wanted = ARM_FEATURES if is_arm(machine) else X86_FEATURES
    return [f for f in wanted if f in flags]


def _auxv_from_libc() -> dict[int, int] | None:
    import ctypes

    try:
        getauxval = ctypes.CDLL(None).getauxval  # glibc and Android's bionic both export it
    except (OSError, AttributeError):
        return None
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    return {AT_HWCAP: int(getauxval(AT_HWCAP)), AT_HWCAP2: int(getauxval(AT_HWCAP2))}


def parse_auxv(raw: bytes, word: int = 8) -> dict[int, int]:
    """/proc/self/auxv: (type, value) pairs of native unsigned longs, ending with AT_NULL."""
    out: dict[int, int] = {}
    for i in range(0, len(raw) - 2 * word + 1, 2 * word):
        key = int.from_bytes(raw[i:i + word], sys.byteorder)
        if key == 0:
            break
        out[key] = int.from_bytes(raw[i + word:i + 2 * word], sys.byteorder)
    return out


def hwcap_names(hwcap: int, hwcap2: int) -> set[str]:
    return ({n for bit, n in HWCAP_BITS.items() if hwcap >> bit & 1}
            | {n for bit, n in HWCAP2_BITS.items() if hwcap2 >> bit & 1})


def arm_hwcaps() -> tuple[set[str], str] | None:
    """(feature names, where they came from) from this process's HWCAPs: getauxval, else /proc/self/auxv.
    None when neither can be read (then /proc/cpuinfo's Features line is all there is)."""
    aux = _auxv_from_libc()
    source = "HWCAP (getauxval)"
    if not aux or not aux.get(AT_HWCAP):
        try:
            aux = parse_auxv(Path("/proc/self/auxv").read_bytes())
            source = "HWCAP (/proc/self/auxv)"
        except OSError:
            return None
    if not aux.get(AT_HWCAP):
        return None
    return hwcap_names(aux.get(AT_HWCAP, 0), aux.get(AT_HWCAP2, 0)), source


def emulation(sections: list[dict[str, str]], machine: str) -> str | None:
    """How this process is emulated, when it visibly is: QEMU's user mode runs aarch64 programs with the
    host's /proc/cpuinfo, whose x86 'flags' no ARM kernel writes. None when nothing says so."""
    if is_arm(machine) and any("flags" in sec and "Features" not in sec for sec in sections):
        model = os.environ.get("QEMU_CPU")
        return "QEMU user mode" + (f" (QEMU_CPU={model})" if model else "") + "; /proc/cpuinfo describes the host"
    return None


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


def cpu_vendor(root: Path = Path("/"), machine: str | None = None) -> str | None:
    """/proc/cpuinfo's ``vendor_id`` on x86 ("GenuineIntel", "AuthenticAMD"); None elsewhere or where it is not
    given. Only on x86: an aarch64 userland under QEMU reads the host's /proc/cpuinfo, which would name the
    host's vendor, not the emulated CPU's."""
    return _x86_cpuinfo_field("vendor_id", root, machine)


def cpu_family(root: Path = Path("/"), machine: str | None = None) -> int | None:
    """/proc/cpuinfo's ``cpu family`` on x86 (AMD: 25 Zen 3 and Zen 4, 26 Zen 5; Intel: 6); None elsewhere, where
    it is not given or not a number (x86 only, as :func:`cpu_vendor`)."""
    family = _x86_cpuinfo_field("cpu family", root, machine)
    return int(family) if family is not None and family.strip().isdigit() else None


def _x86_cpuinfo_field(name: str, root: Path, machine: str | None) -> str | None:
    """The first value of ``name`` in /proc/cpuinfo on x86; None elsewhere or where no section gives it."""
    if (machine or platform.machine()) not in ("x86_64", "AMD64", "amd64"):
        return None
    text = read_text(root / "proc/cpuinfo")
    if isinstance(text, Unknown):
        return None
    return next((sec[name] for sec in parse_cpuinfo(text) if sec.get(name)), None)


def cpu_isa(sections: list[dict[str, str]], machine: str) -> tuple[list[str], str]:
    """This process's kernel-relevant ISA features and where they came from (HWCAPs on aarch64)."""
    caps = arm_hwcaps() if is_arm(machine) and is_linux_like() else None
    if caps is not None:
        return isa_features(sections, machine, caps[0]), caps[1]
    return isa_features(sections, machine), "/proc/cpuinfo"


def describe_cpu(root: Path = Path("/")) -> dict[str, object]:
    """CPU model, architecture and kernel-relevant ISA flags: what decides which kernel is fastest."""
    machine = platform.machine()
    text = read_text(root / "proc/cpuinfo")
    sections = [] if isinstance(text, Unknown) else parse_cpuinfo(text)
    model = cpu_model(sections) if not isinstance(text, Unknown) or not is_linux_like() else text
    isa, source = cpu_isa(sections, machine)
    emulated = emulation(sections, machine)
    return {"cpu": str(model) if emulated is None else f"emulated {machine} on {model}", "machine": machine,
            "isa": isa, "isa_source": source, "emulated": emulated}


def describe(root: Path = Path("/")) -> dict[str, object]:
    """The system facts recorded with every run (JSON-ready: unknowns become strings)."""
    machine = platform.machine()
    text = read_text(root / "proc/cpuinfo")
    sections = [] if isinstance(text, Unknown) else parse_cpuinfo(text)
    model = text if isinstance(text, Unknown) else cpu_model(sections)
    llc = last_level_cache_bytes(root)
    caches = cache_sizes(root)
    mem = memory()
    isa, isa_source = cpu_isa(sections, machine)
    emulated = emulation(sections, machine)
    facts: dict[str, object] = {
        "cpu": str(model) if emulated is None else f"emulated {machine} on {model}",
        "machine": machine,
        "platform": sys.platform,
        "isa": isa,
        "isa_source": isa_source,
        "emulated": emulated,
        "cores": os.cpu_count(),
        "affinity": affinity(),
        "caches": caches if not isinstance(caches, Unknown) else str(caches),
        "llc_bytes": llc if not isinstance(llc, Unknown) else None,
        "memory": mem if not isinstance(mem, Unknown) else str(mem),
        "cpu_freq_mhz": cpu_freq_mhz(),
    }
    groups = with_current_from_cpuinfo(clusters(root), root)
    facts["clusters"] = [g.to_dict() for g in groups]
    facts["affinity_clusters"] = [groups.index(g) for g in clusters_of(facts["affinity"], groups)]
    facts["affinity_mixed"] = spans_mixed_clusters(facts["affinity"], groups)
    facts.update(versions())
    facts.update(numba_threading())
    return facts


def pin(cpus: list[int]) -> None:
    """Restrict this process to ``cpus`` (as taskset does). Threads started afterwards inherit it,
    so call this before numba starts its thread pool."""
    if not hasattr(os, "sched_setaffinity"):
        raise OSError("this platform cannot pin a process to CPUs (no sched_setaffinity)")
    os.sched_setaffinity(0, cpus)


# --- topology: clusters, frequency, temperature -------------------------------------------

CPU_DIR = "sys/devices/system/cpu"
MAX_CPU = 8191  # Linux's largest NR_CPUS


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,6,8-9' -> [0, 1, 2, 3, 6, 8, 9] (the kernel's cpulist format, also taskset -c and --cpus)."""
    cpus: list[int] = []
    for part in text.replace(" ", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{part!r} is not a CPU number or range")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{part!r} is a range that runs backwards")
        if sep and b > MAX_CPU:  # a range is bounded before it is expanded: 0-99999999 is not a list to build
            raise ValueError(f"{part!r} goes beyond CPU {MAX_CPU}, more than any machine gemvbw runs on")
        cpus.extend(range(a, b + 1))
    return sorted(set(cpus))


def _read_int(path: Path) -> int | Unknown:
    text = read_text(path)
    if isinstance(text, Unknown):
        return text
    try:
        return int(text.strip())
    except ValueError:
        return Unknown(f"{path} holds {text.strip()!r}, not a number")


def online_cpus(root: Path = Path("/")) -> list[int]:
    text = read_text(root / CPU_DIR / "online")
    if not isinstance(text, Unknown):
        try:
            return parse_cpu_list(text.strip())
        except ValueError:
            pass
    present = sorted(int(p.name[3:]) for p in (root / CPU_DIR).glob("cpu[0-9]*") if p.name[3:].isdigit())
    return present or list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Cluster:
    """CPUs that share a frequency policy (or, without cpufreq, a capacity)."""

    cpus: tuple[int, ...]
    max_khz: int | None
    cur_khz: int | None
    governor: str | None
    capacity: int | None
    source: str  # where the grouping came from, or why it is unknown

    @property
    def mask(self) -> int:
        return sum(1 << c for c in self.cpus)

    def to_dict(self) -> dict:
        return {"cpus": list(self.cpus), "mask": f"{self.mask:x}", "max_mhz": _mhz(self.max_khz),
                "cur_mhz": _mhz(self.cur_khz), "governor": self.governor, "capacity": self.capacity,
                "source": self.source}


def _mhz(khz: int | None) -> float | None:
    return None if khz is None else khz / 1000


def _opt(value):
    return None if isinstance(value, Unknown) else value


def clusters(root: Path = Path("/")) -> list[Cluster]:
    """Cores grouped by cpufreq policy (fastest cluster first); by cpu_capacity without cpufreq;
    one cluster of unknown speed when neither can be read."""
    base = root / CPU_DIR
    found = []
    for policy in sorted((base / "cpufreq").glob("policy*")):
        text = read_text(policy / "affected_cpus")
        if isinstance(text, Unknown):
            text = read_text(policy / "related_cpus")
        if isinstance(text, Unknown):
            continue
        try:
            cpus = tuple(parse_cpu_list(text.strip()))
        except ValueError:
            continue
        if not cpus:
            continue
        gov = read_text(policy / "scaling_governor")
        found.append(Cluster(
            cpus, _opt(_read_int(policy / "cpuinfo_max_freq")), _opt(_read_int(policy / "scaling_cur_freq")),
            None if isinstance(gov, Unknown) else gov.strip(),
            _opt(_read_int(base / f"cpu{cpus[0]}" / "cpu_capacity")), f"cpufreq {policy.name}",
        ))
    if found:
        return _merge_equal_speed(found)
    cpus = online_cpus(root)
    caps = {c: _opt(_read_int(base / f"cpu{c}" / "cpu_capacity")) for c in cpus}
    if all(v is not None for v in caps.values()) and caps:
        groups: dict[int, list[int]] = {}
        for c, cap in caps.items():
            groups.setdefault(cap, []).append(c)
        return [Cluster(tuple(v), None, None, None, cap, "cpu_capacity (no cpufreq)")
                for cap, v in sorted(groups.items(), key=lambda kv: -kv[0])]
    reason = f"no readable {base / 'cpufreq'}/policy*"
    return [Cluster(tuple(cpus), None, None, None, None, f"unknown: {reason}")]


def _merge_equal_speed(policies: list[Cluster]) -> list[Cluster]:
    """Policies of equal maximum frequency and capacity form one cluster (a server often has a policy per core)."""
    merged: dict[tuple, list[Cluster]] = {}
    for p in policies:
        merged.setdefault((p.max_khz, p.capacity), []).append(p)
    out = []
    for (max_khz, capacity), group in merged.items():
        cpus = tuple(sorted(c for p in group for c in p.cpus))
        curs = [p.cur_khz for p in group if p.cur_khz is not None]
        govs = sorted({p.governor for p in group if p.governor})
        names = ", ".join(p.source.split()[-1] for p in group)
        out.append(Cluster(cpus, max_khz, round(sum(curs) / len(curs)) if curs else None,
                           "/".join(govs) or None, capacity, f"cpufreq {names}"))
    return sorted(out, key=lambda c: (-(c.max_khz or 0), -(c.capacity or 0), c.cpus))


def with_current_from_cpuinfo(groups: list[Cluster], root: Path = Path("/")) -> list[Cluster]:
    """Fill in current frequency from /proc/cpuinfo where cpufreq did not give it."""
    freqs = cluster_freqs_mhz(groups, root)
    return [g if g.cur_khz is not None or f is None else
            Cluster(g.cpus, g.max_khz, round(f * 1000), g.governor, g.capacity, g.source)
            for g, f in zip(groups, freqs)]


def clusters_known(groups: list[Cluster]) -> bool:
    return not (len(groups) == 1 and groups[0].source.startswith("unknown"))


def clusters_of(cpus: list[int], groups: list[Cluster]) -> list[Cluster]:
    """The clusters a set of CPUs touches."""
    wanted = set(cpus)
    return [g for g in groups if wanted & set(g.cpus)]


def spans_mixed_clusters(cpus: list[int], groups: list[Cluster]) -> bool:
    """True when the CPUs touch clusters of different speed: results would mix core types."""
    touched = clusters_of(cpus, groups)
    speeds = {(g.max_khz, g.capacity) for g in touched}
    return len(touched) > 1 and len(speeds) > 1


def taskset_advice(groups: list[Cluster]) -> dict:
    """The mask of the fastest cluster and a command to paste (MNN's `taskset c0 ...` form)."""
    if not clusters_known(groups):
        return {"command": None, "mask": None, "threads": None,
                "why": f"cores cannot be told apart ({groups[0].source}); all CPUs are used"}
    fastest = groups[0]
    same = [g for g in groups if (g.max_khz, g.capacity) == (fastest.max_khz, fastest.capacity)]
    cpus = sorted(c for g in same for c in g.cpus)
    mask = sum(1 << c for c in cpus)
    if len(same) == len(groups):
        why = f"all CPUs are alike (one cluster, from {fastest.source.split(' (')[0]})"
    else:
        speed = f"{fastest.max_khz / 1000:.0f} MHz max" if fastest.max_khz else "max unknown"
        why = (f"CPUs {','.join(map(str, cpus))} are the fastest cluster ({speed}"
               + (f", capacity {fastest.capacity}" if fastest.capacity else "") + ")")
    return {"command": f"taskset {mask:x} gemvbw sweep --threads {len(cpus)}", "mask": f"{mask:x}",
            "threads": len(cpus), "cpus": cpus, "why": why}


def temperatures(root: Path = Path("/")) -> list[dict] | Unknown:
    """Thermal zones (type and degrees C) that can be read without root."""
    zones = sorted((root / "sys/class/thermal").glob("thermal_zone*"))
    out = []
    for zone in zones:
        temp = _read_int(zone / "temp")
        if isinstance(temp, Unknown):
            continue
        kind = read_text(zone / "type")
        out.append({"zone": zone.name, "type": None if isinstance(kind, Unknown) else kind.strip(),
                    "celsius": temp / 1000})
    if out:
        return out
    if root == Path("/"):
        try:
            import psutil

            sensors = psutil.sensors_temperatures() if hasattr(psutil, "sensors_temperatures") else {}
            out = [{"zone": name, "type": s.label or name, "celsius": s.current}
                   for name, entries in sensors.items() for s in entries]
            if out:
                return out
        except Exception:
            pass
    return Unknown("no readable /sys/class/thermal/thermal_zone*/temp and no psutil sensor" if not zones
                   else "thermal zones exist but their temp files cannot be read")


def cluster_freqs_mhz(groups: list[Cluster], root: Path = Path("/")) -> list[float | None]:
    """Current frequency per cluster now (cpufreq scaling_cur_freq, else /proc/cpuinfo 'cpu MHz')."""
    out: list[float | None] = []
    cpuinfo = None
    for g in groups:
        value = _read_int(root / CPU_DIR / f"cpu{g.cpus[0]}" / "cpufreq" / "scaling_cur_freq")
        if isinstance(value, Unknown):
            if cpuinfo is None:
                text = read_text(root / "proc/cpuinfo")
                cpuinfo = [] if isinstance(text, Unknown) else parse_cpuinfo(text)
            mhz = [float(s["cpu MHz"]) for s in cpuinfo if "cpu MHz" in s and s.get("processor", "").isdigit()
                   and int(s["processor"]) in g.cpus]
            out.append(sum(mhz) / len(mhz) if mhz else None)
        else:
            out.append(value / 1000)
    return out


def max_temperature(root: Path = Path("/")) -> float | None:
    temps = temperatures(root)
    return None if isinstance(temps, Unknown) else max(t["celsius"] for t in temps)

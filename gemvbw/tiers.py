"""Kernel tiers: the int8 instruction sets this CPU and numba's compiler target both have.

A tier is the set of instructions one family of int8-activation kernels is written for
(x86 AVX2, aarch64 NEON, NEON with the dot-product extension, ...). It is usable only when

- the CPU has it: /proc/cpuinfo's flags on x86, the kernel's HWCAPs on aarch64 (what the
  kernel enables for user space; /proc/cpuinfo's Features line where they cannot be read);
- numba's LLVM target has it: the CPU name and features numba compiles for
  (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, else LLVM's own host detection).

Both are decided here, before anything is compiled, because neither failure can be caught
in Python: LLVM aborts the whole process when asked for an instruction its target lacks
("Cannot select": SIGABRT), and the CPU raises SIGILL on one it does not have. The second
check matters under emulation, where LLVM's host detection sees no ARM CPU at all.

Nothing here imports numba; llvmlite is imported only to ask what the target is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gemvbw import system


@dataclass(frozen=True)
class Tier:
    """One instruction set the int8 kernels are written for; variants are named packed-4x2-<name>."""

    name: str
    arch: str  # "x86_64" or "aarch64"
    cpu_flags: tuple[str, ...]  # as /proc/cpuinfo and the HWCAPs name them
    llvm_features: tuple[str, ...]  # the LLVM subtarget features its instructions need
    priority: int  # higher is preferred where no calibration says otherwise
    summary: str
    # rows of the column-tile variant, packed-<rows>c4-<name> (gemvbw.kernels.tile), 0 where the tier has none:
    # it needs a dot product that adds into int32 lanes without saturating (VNNI); and its preference, above
    # every packed-4x2 variant (measured on Zen 4, see gemvbw.kernels.tile)
    tile_rows: int = 0
    tile_priority: int = 0

    def needs(self) -> str:
        return " ".join(self.cpu_flags)

    def variants(self) -> list[str]:
        """The int8 variant names of this tier, the preferred first: its column tile, the tile's -prfm twin and
        its -1stream twin where it has tiles, then packed-4x2 (every width has each)."""
        tile = f"packed-{self.tile_rows}c4-{self.name}"
        tiles = [tile, f"{tile}-prfm", f"{tile}-1stream"]
        return (tiles if self.tile_rows else []) + [f"packed-4x2-{self.name}"]


# Best first within an architecture. The dot product of each: what it does per instruction.
TIERS: tuple[Tier, ...] = (
    Tier("avx512vnni", "x86_64", ("avx512_vnni", "avx512vl", "avx512bw", "f16c"),
         ("avx512vnni", "avx512vl", "avx512bw", "f16c"), 30,
         "AVX-512 VNNI vpdpbusd on 256-bit registers (4 u8 x s8 products into each int32 lane)", tile_rows=8,
         tile_priority=40),
    Tier("avx512vnni-zmm", "x86_64", ("avx512_vnni", "avx512vl", "avx512bw", "f16c"),
         ("avx512vnni", "avx512vl", "avx512bw", "f16c"), 29,
         "AVX-512 VNNI vpdpbusd on 512-bit registers (two 256-bit layout vectors per instruction; w3 on 256-bit)",
         tile_rows=16, tile_priority=41),
    Tier("avxvnni", "x86_64", ("avx_vnni", "avx2", "f16c"), ("avxvnni", "avx2", "f16c"), 25,
         "AVX-VNNI vpdpbusd, VEX-encoded (4 u8 x s8 products into each int32 lane), for CPUs without AVX-512",
         tile_rows=8, tile_priority=35),
    Tier("avx512bw", "x86_64", ("avx512bw", "avx2", "fma", "f16c"), ("avx512bw", "avx2", "fma", "f16c"), 15,
         "AVX-512BW vpmaddubsw + vpmaddwd on 512-bit registers (u8 x s8 pairs into int16, then int32), for CPUs "
         "with AVX-512 but without VNNI"),
    Tier("avx2", "x86_64", ("avx2", "fma", "f16c"), ("avx2", "fma", "f16c"), 10,
         "AVX2 vpmaddubsw + vpmaddwd (u8 x s8 pairs into int16, then int32)"),
    Tier("neon-dotprod", "aarch64", ("asimd", "asimddp"), ("neon", "dotprod"), 20,
         "NEON sdot (4 int8 products into each int32 lane)"),
    Tier("neon", "aarch64", ("asimd",), ("neon",), 10,
         "baseline NEON smull/smlal + sadalp (int8 products into int16, then int32), for cores without dotprod"),
)

# Features that could appear in any code LLVM generates for its target, not just in gemvbw's tiers:
# if the target has one the CPU lacks, any compiled function may die of SIGILL.
RISKY_FEATURES = {
    "x86_64": {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512bw": "avx512bw",
               "avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni"},
    "aarch64": {"dotprod": "asimddp", "i8mm": "i8mm", "sve": "sve", "sve2": "sve2", "fullfp16": "asimdhp"},
}


def by_name(name: str) -> Tier:
    return next(t for t in TIERS if t.name == name)


def arch_of(machine: str) -> str:
    return "aarch64" if system.is_arm(machine) else "x86_64" if machine in ("x86_64", "AMD64", "amd64") else machine


# --- numba's compiler target ---------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """What numba will compile for: LLVM triple, CPU name and feature string, and where they came from."""

    triple: str
    cpu: str
    features: str  # "+a,-b,..." as numba passes it to LLVM ("" = the CPU name's own defaults)
    cpu_source: str
    features_source: str
    explicit: dict[str, bool] = field(default_factory=dict)

    def describe(self) -> str:
        return f"cpu {self.cpu} ({self.cpu_source}), features from {self.features_source}"


def parse_features(text: str) -> dict[str, bool]:
    """'+neon,-sve' -> {'neon': True, 'sve': False}."""
    out = {}
    for item in text.split(","):
        item = item.strip()
        if len(item) > 1 and item[0] in "+-":
            out[item[1:]] = item[0] == "+"
    return out


def numba_target(environ=None) -> Target | None:
    """The target numba's JIT uses, read the way numba reads it (numba.core.codegen); None without llvmlite."""
    env = os.environ if environ is None else environ
    try:
        import llvmlite.binding as ll
    except Exception:
        return None
    cpu = env.get("NUMBA_CPU_NAME")
    cpu_source = "NUMBA_CPU_NAME"
    if cpu is None:
        cpu, cpu_source = ll.get_host_cpu_name(), "LLVM's host detection"
    features = env.get("NUMBA_CPU_FEATURES")
    features_source = "NUMBA_CPU_FEATURES"
    if features is None and str(cpu).lower() == "generic" and "NUMBA_CPU_NAME" in env:
        features, features_source = "", "none (NUMBA_CPU_NAME=generic)"
    if features is None:
        try:
            host = ll.get_host_cpu_features()
        except RuntimeError:
            host = None
        if host is not None and env.get("NUMBA_ENABLE_AVX", "1").strip() == "0":
            for key in host:  # numba's NUMBA_ENABLE_AVX=0 turns off every avx* feature
                if key.startswith("avx"):
                    host[key] = False
        features = "" if host is None else host.flatten()
        features_source = "LLVM's host detection"
    return Target(ll.get_process_triple(), cpu, features, cpu_source, features_source, parse_features(features))


# Per LLVM feature, a function whose instruction LLVM selects only when its target has the feature, and
# a pattern (a regular expression) that finds that instruction in one line of the assembly. Compiled in a subprocess: where the target lacks an intrinsic's feature,
# LLVM aborts the process.
def _call(decl: str, ret: str, params: list[str]) -> str:
    args = ", ".join(f"{t} %a{i}" for i, t in enumerate(params))
    callee = "@" + decl.split("@", 1)[1].split("(")[0]
    return f"declare {decl}\ndefine {ret} @probe({args}) {{\n  %r = call {ret} {callee}({args})\n  ret {ret} %r\n}}\n"


_PROBES = {
    "neon": (_call("<8 x i16> @llvm.aarch64.neon.smull.v8i16(<8 x i8>, <8 x i8>)", "<8 x i16>",
                   ["<8 x i8>", "<8 x i8>"]), "smull"),
    "dotprod": (_call("<4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32>, <16 x i8>, <16 x i8>)", "<4 x i32>",
                      ["<4 x i32>", "<16 x i8>", "<16 x i8>"]), "sdot"),
    "i8mm": (_call("<4 x i32> @llvm.aarch64.neon.smmla.v4i32.v16i8(<4 x i32>, <16 x i8>, <16 x i8>)", "<4 x i32>",
                   ["<4 x i32>", "<16 x i8>", "<16 x i8>"]), "smmla"),
    "avx2": (_call("<16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)", "<16 x i16>",
                   ["<32 x i8>", "<32 x i8>"]), "vpmaddubsw"),
    # 512-bit registers are AVX-512's alone, so a zmm vpdpbusd is selected only with avx512vnni, not avxvnni
    "avx512vnni": (_call("<16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
                         "<16 x i32>", ["<16 x i32>"] * 3), "vpdpbusd"),
    # LLVM marks the VEX form it picks when only AVX-VNNI has the instruction (it prefers EVEX where both do)
    "avxvnni": (_call("<8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32>, <8 x i32>, <8 x i32>)", "<8 x i32>",
                      ["<8 x i32>"] * 3), r"\{vex\} vpdpbusd"),
    # a masked 256-bit operation: EVEX on ymm with a mask register exists only with AVX512VL
    "avx512vl": ("define <8 x i32> @probe(i8 %m, <8 x i32> %a, <8 x i32> %b) {\n"
                 "  %k = bitcast i8 %m to <8 x i1>\n  %r = select <8 x i1> %k, <8 x i32> %a, <8 x i32> %b\n"
                 "  ret <8 x i32> %r\n}\n", r"ymm.*\{%k"),
    "avx512bw": (_call("<32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8>, <64 x i8>)", "<32 x i16>",
                       ["<64 x i8>", "<64 x i8>"]), "vpmaddubsw"),
    # generic IR: lowered to the instruction with the feature, to other code without it (no abort)
    "fma": (_call("<8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)", "<8 x float>",
                  ["<8 x float>"] * 3), "vfmadd"),
    "f16c": ("define <8 x float> @probe(<8 x half> %a) {\n  %r = fpext <8 x half> %a to <8 x float>\n"
             "  ret <8 x float> %r\n}\n", "vcvtph2ps"),
}

_PROBE_SCRIPT = r"""
import sys
import llvmlite.binding as ll
ll.initialize_native_target()
ll.initialize_native_asmprinter()
triple, cpu, features, text, mnemonic = sys.argv[1:6]
mod = ll.parse_assembly(text)
mod.triple = triple
mod.verify()
tm = ll.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2)
asm = tm.emit_assembly(mod)
import re
lines = [" ".join(line.split()) for line in asm.splitlines()]  # one space between the words
print("selected" if any(re.search(mnemonic, line) for line in lines) else "not selected")
"""


def _probe_cache_path():
    from gemvbw.cache import cache_dir

    return cache_dir() / "llvm-features.json"


def probe_feature(target: Target, feature: str, timeout: float = 600.0) -> bool:
    """Whether LLVM can select ``feature``'s instructions for ``target``, by compiling a one-instruction
    function in a subprocess (an abort there costs nothing here). Cached per llvmlite version and target."""
    import llvmlite

    key = "|".join([llvmlite.__version__, target.triple, target.cpu, target.features, feature])
    path = _probe_cache_path()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached, dict) and isinstance(cached.get(key), bool):
        return cached[key]
    text, mnemonic = _PROBES[feature]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT, target.triple, target.cpu, target.features,
                               text, mnemonic], capture_output=True, text=True, timeout=timeout, env=env)
        found = done.returncode == 0 and done.stdout.strip() == "selected"
    except (OSError, subprocess.TimeoutExpired):
        return False  # not cached: may work next time
    if isinstance(cached, dict):
        cached[key] = found
        try:
            from gemvbw.report.files import write_atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(path), json.dumps(cached, indent=1))
        except OSError:
            pass  # an unwritable cache only costs a probe next time
    return found


def target_has(target: Target, feature: str) -> bool:
    """The feature as numba's target has it: named in its feature string, else implied by its CPU name
    (asked of LLVM itself through :func:`probe_feature`)."""
    if feature in target.explicit:
        return target.explicit[feature]
    if feature in _PROBES:
        return probe_feature(target, feature)
    return False  # an implied feature gemvbw cannot ask about: assume absent, which only costs speed


# --- the gate ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TierStatus:
    tier: Tier
    usable: bool
    reason: str


def status(tier: Tier, cpu_flags: Iterable[str], has: Callable[[str], bool], target: Target | None,
           no_target: str = "llvmlite is not importable") -> TierStatus:
    """Whether a tier may be compiled and run here, and why (or why not)."""
    flags = set(cpu_flags)
    missing = [f for f in tier.cpu_flags if f not in flags]
    if missing:
        return TierStatus(tier, False, f"this CPU lacks {' '.join(missing)}")
    if target is None:
        return TierStatus(tier, False, f"the CPU has {tier.needs()}; numba's LLVM target is unknown "
                                       f"({no_target}), so nothing may be compiled for it")
    lacking = [f for f in tier.llvm_features if not has(f)]
    if lacking:
        plus = ",".join("+" + f for f in lacking)
        example = "cortex-a76" if tier.arch == "aarch64" else "znver4"
        return TierStatus(tier, False, (
            f"the CPU has {tier.needs()}, but numba's LLVM target ({target.describe()}) lacks {plus}; tell numba "
            f"the CPU: NUMBA_CPU_NAME=<this core, e.g. {example}> or NUMBA_CPU_FEATURES={plus}"))
    return TierStatus(tier, True, f"CPU has {tier.needs()}; numba's target ({target.cpu}) has "
                                  + " ".join("+" + f for f in tier.llvm_features))


@dataclass(frozen=True)
class Report:
    """Every tier of this architecture with its status, and features numba would use that the CPU lacks."""

    arch: str
    cpu_flags: tuple[str, ...]
    cpu_flags_source: str
    target: Target | None
    statuses: tuple[TierStatus, ...]
    unsafe: tuple[str, ...]  # LLVM features the target has and the CPU lacks

    @property
    def usable(self) -> list[Tier]:
        return [s.tier for s in self.statuses if s.usable]

    def to_dict(self) -> dict:
        return {"arch": self.arch, "cpu_flags": list(self.cpu_flags), "cpu_flags_source": self.cpu_flags_source,
                "target": None if self.target is None else {
                    "triple": self.target.triple, "cpu": self.target.cpu, "cpu_source": self.target.cpu_source,
                    "features_source": self.target.features_source},
                "tiers": [{"name": s.tier.name, "usable": s.usable, "reason": s.reason, "summary": s.tier.summary,
                           "variants": s.tier.variants(), "tile_priority": s.tier.tile_priority}
                          for s in self.statuses],
                "unsafe_target_features": list(self.unsafe), "unsafe_message": unsafe_target_message(self)}


def build_report(machine: str, cpu_flags: Iterable[str], flags_source: str, target: Target | None,
                 has: Callable[[str], bool] | None = None, no_target: str = "llvmlite is not importable") -> Report:
    arch = arch_of(machine)
    flags = tuple(cpu_flags)
    has = has or (lambda f: target is not None and target_has(target, f))
    statuses = tuple(status(t, flags, has, target, no_target) for t in sorted(TIERS, key=lambda t: -t.priority)
                     if t.arch == arch)
    unsafe: tuple[str, ...] = ()
    # LLVM's own host detection is trusted; a CPU named by the user may promise what this one lacks
    if target is not None and (target.cpu_source == "NUMBA_CPU_NAME" or target.features_source == "NUMBA_CPU_FEATURES"):
        unsafe = tuple(f for f, cpu_name in RISKY_FEATURES.get(arch, {}).items() if cpu_name not in flags and has(f))
    return Report(arch, flags, flags_source, target, statuses, unsafe)


# CPU features of interest that no tier uses, and why: said by gemvbw info where the CPU has them.
UNUSED = {
    "i8mm": "i8mm (smmla) available, not used: smmla multiplies 2x8 by 8x2 int8, and with one activation vector "
            "(batch 1) half its products are wasted, so it does no more useful work per instruction than sdot",
    "sve": "sve available, not used: the NEON tiers cover 128-bit vectors, the SVE width of today's phone cores",
}


_REPORT: Report | None = None


def report() -> Report:
    """This process's tier report (computed once: the CPU and numba's target do not change while it runs)."""
    global _REPORT
    if _REPORT is None:
        cpu = system.describe_cpu()
        _REPORT = build_report(str(cpu["machine"]), cpu["isa"], str(cpu["isa_source"]), numba_target())
    return _REPORT


def numba_target_key() -> list[str] | None:
    """What identifies numba's target in a cache key: triple, CPU name and feature string."""
    t = report().target
    return None if t is None else [t.triple, t.cpu, t.features]


def usable() -> list[Tier]:
    return report().usable


def unsafe_target_message(rep: Report) -> str | None:
    """The error to stop on when numba would compile instructions this CPU does not have."""
    if not rep.unsafe or rep.target is None:
        return None
    names = ", ".join(f"+{f}" for f in rep.unsafe)
    # the feature string is to blame for what it names; the CPU name for what it implies
    named = rep.target.features_source == "NUMBA_CPU_FEATURES" and any(rep.target.explicit.get(f) for f in rep.unsafe)
    var = "NUMBA_CPU_FEATURES" if named else "NUMBA_CPU_NAME"
    return (f"{var}: numba would compile for {rep.target.cpu} with {names}, which this CPU lacks "
            f"(its features, from {rep.cpu_flags_source}: {' '.join(rep.cpu_flags) or 'none of interest'}); "
            f"such code dies of SIGILL. Unset {var}, or name this CPU's core")

"""One validated Settings object for a sweep.

Precedence: command-line flag > MNN_GEMVBW_* environment variable > default.
Flags and variables go through the same parsers, so a bad value gets the same
kind of message wherever it came from: the flag or variable named, what was
wrong, and a value that would work. Unlike MNN, a malformed variable is an
error, never silently ignored.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from gemvbw import system
from gemvbw.system import format_cpus  # noqa: F401  (re-exported)
from gemvbw.quant import ALL_BITS, BLOCK_GRANULE, FLOAT_BITS, row_nbytes, num_blocks

ENV_VARS = {
    "M": "MNN_GEMVBW_M",
    "K": "MNN_GEMVBW_K",
    "bits": "MNN_GEMVBW_BITS",
    "threads": "MNN_GEMVBW_THREADS",
    "block": "MNN_GEMVBW_BLOCK",
    "iters": "MNN_GEMVBW_ITERS",
    "reps": "MNN_GEMVBW_REPS",
}

FLAGS = {
    "M": "--M", "K": "--K", "bits": "--bits", "threads": "--threads", "block": "--block",
    "iters": "--iters", "reps": "--reps", "flush_mib": "--flush-mib", "meta_bytes": "--meta-bytes",
    "seed": "--seed", "max_seconds": "--max-seconds", "llc_mib": "--llc-mib",
}

EXAMPLES = {
    "M": "4096", "K": "14336", "bits": "8,4,3,2", "threads": "2", "block": "64",
    "iters": "200", "reps": "3", "flush_mib": "64", "meta_bytes": "2", "seed": "0",
    "max_seconds": "30", "llc_mib": "32",
}

DEFAULTS = {
    "M": 4096, "K": 14336, "bits": (8, 4, 3, 2), "block": 64, "iters": 200, "reps": 3,
    "flush_mib": None, "meta_bytes": 2, "seed": 0, "act": "auto", "kernel": "auto",
}  # flush_mib None: by the last-level cache, default_flush_mib()

# The cache flush before each cold call: MNN's 64 MiB, or four times the last-level cache where that is more.
# Twice was not enough: on Zen 4 (32 MiB L3, 1 thread, 2026-12-05) a plain read of 15 MiB after a 64 MiB flush
# ran at 37.8 GB/s against 32.2-32.4 after 128 or 512 MiB, and of 56 MiB (4096x14336 w8) 35.1 against
# 33.1-33.4: lines outlive a read-only flush of twice the L3 (its replacement is not LRU), and the kernels'
# figures with them. Four times read the same as sixteen.
FLUSH_MIN_MIB = 64
FLUSH_LLC_FACTOR = 4
THIS_MACHINE = object()  # resolve(llc_bytes=...): read the last-level cache from /sys


def default_flush_mib(llc_bytes: int | None) -> int:
    """The flush, in MiB, a run uses unless told: FLUSH_MIN_MIB, or FLUSH_LLC_FACTOR times the last-level
    cache (``llc_bytes``; None when unknown) where that is larger."""
    if not llc_bytes:
        return FLUSH_MIN_MIB
    return max(FLUSH_MIN_MIB, FLUSH_LLC_FACTOR * -(-llc_bytes // (1 << 20)))


def machine_llc_bytes() -> int | None:
    """This machine's last-level cache in bytes, from /sys; None when it cannot be read."""
    llc = system.last_level_cache_bytes()
    return None if isinstance(llc, system.Unknown) else llc


def llc_in_force(llc_mib: int | None, machine_llc: int | None) -> tuple[int | None, str]:
    """The last-level cache a run assumes, in bytes (None: unknown), and where it comes from: --llc-mib where
    given, else the machine's (``machine_llc``, from /sys). The default flush, the read roofline's buffer, the
    memory check and the run's notes all take it from here, so that they agree."""
    return (machine_llc, "/sys") if llc_mib is None else (llc_mib << 20, "--llc-mib")


def machine_flush_mib() -> int:
    """What `gemvbw sweep` flushes on this machine when --flush-mib is not given (the benchmarks' default)."""
    return default_flush_mib(machine_llc_bytes())


# what the roofline needs at once: memcpy source + destination (the read buffer comes later)
ROOFLINE_BYTES = 2 * (256 << 20)
# working room for verification: a float64 chunk of W, |W|, and numpy temporaries
VERIFY_BYTES = 128 << 20


class SettingsError(ValueError):
    """A bad input. ``source`` is the flag or variable that carried it."""

    def __init__(self, source: str, message: str):
        super().__init__(f"{source}: {message}")
        self.source, self.message = source, message


@dataclass(frozen=True)
class Settings:
    M: int
    K: int
    bits: tuple[int, ...]
    block: int
    threads: int
    iters: int
    reps: int
    flush_mib: int
    meta_bytes: int
    act: str
    kernel: str
    seed: int
    json_path: str | None = None
    csv_path: str | None = None
    compare_warm: bool = False
    max_seconds: float = 0.0  # > 0: add groups until they agree, for at most this long per kernel
    llc_mib: int | None = None  # overrides the last-level cache size read from /sys
    cpus: list[int] | None = None  # pinned with --cpus (None: the affinity mask as inherited)
    shapes: tuple[tuple[int, int], ...] = ()  # (M, K) pairs swept in order; () means just (M, K)
    recalibrate: bool = False  # --kernel auto: measure the choice again instead of taking the cached one
    thread_limit: int | None = None  # numba's most threads (NUMBA_NUM_THREADS), when it caps the default

    @property
    def shape_list(self) -> list[tuple[int, int]]:
        return list(self.shapes) if self.shapes else [(self.M, self.K)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bits"] = list(self.bits)
        d["cpus"] = None if self.cpus is None else list(self.cpus)
        d["shapes"] = [list(s) for s in self.shape_list]
        return d


def _source(name: str, from_env: bool) -> str:
    return ENV_VARS[name] if from_env else FLAGS[name]


def _example(name: str, from_env: bool) -> str:
    src = _source(name, from_env)
    return f"{src}={EXAMPLES[name]}" if from_env else f"{src} {EXAMPLES[name]}"


_INT = re.compile(r"^\s*\+?\d+\s*$")


def parse_int(name: str, raw: str, from_env: bool, minimum: int = 1) -> int:
    src = _source(name, from_env)
    if not _INT.match(raw):
        what = "is empty" if not raw.strip() else f"{raw!r} is not a whole number"
        raise SettingsError(src, f"{what}; use e.g. {_example(name, from_env)}")
    value = int(raw)
    if value < minimum:
        bound = "positive" if minimum == 1 else f"at least {minimum}"
        raise SettingsError(src, f"must be {bound}, got {value}; use e.g. {_example(name, from_env)}")
    return value


_SHAPE = re.compile(r"^\s*(\d+)\s*[xX*,]\s*(\d+)\s*$")


def parse_shape(raw: str, source: str = "--shape") -> tuple[int, int]:
    """'4096x14336' -> (4096, 14336)."""
    m = _SHAPE.match(raw)
    if not m or int(m.group(1)) <= 0 or int(m.group(2)) <= 0:
        raise SettingsError(source, f"{raw!r} is not MxK with positive M and K; use e.g. {source} 4096x14336")
    return int(m.group(1)), int(m.group(2))


def parse_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan  # refused below, with the same message as "nan"
    if not 0 <= value < math.inf:
        # a flag's example (from_env=False; None would read the same)
        raise SettingsError("--max-seconds", f"{raw!r} is not a number of seconds >= 0; use e.g. {_example('max_seconds', False)}")
    return value


def parse_bits(raw: str, from_env: bool) -> tuple[int, ...]:
    src = _source("bits", from_env)
    allowed = ",".join(map(str, ALL_BITS))
    items = [s.strip() for s in raw.split(",")]
    if not raw.strip() or any(not s for s in items):
        raise SettingsError(src, f"{raw!r} lists no bit width; use a comma list of {allowed}, e.g. {_example('bits', from_env)}")
    out = []
    for s in items:
        if not _INT.match(s) or int(s) not in ALL_BITS:
            raise SettingsError(src, f"{s!r} is not a supported width; use one or more of {allowed}, e.g. {_example('bits', from_env)}")
        b = int(s)
        if b in out:
            raise SettingsError(src, f"w{b} is listed twice in {raw!r}; list each width once, e.g. {_example('bits', from_env)}")
        out.append(b)
    return tuple(out)


def resolve(
    flags: Mapping[str, object | None],
    environ: Mapping[str, str] | None = None,
    cpus: list[int] | None = None,
    available_bytes: int | None = None,
    thread_limit: int | None = None,
    defaults: Mapping[str, object] | None = None,
    llc_bytes: object = THIS_MACHINE,
) -> Settings:
    """Build Settings from raw flag values (strings or None) and the environment.

    ``cpus`` is the affinity mask (what taskset set); ``available_bytes`` the
    memory psutil reports; ``llc_bytes`` the last-level cache (None: unknown), which
    sets the default flush unless ``--llc-mib`` gives it. All default to this
    process's. ``defaults``: a command's own defaults (soak's one width), below
    flags and variables like DEFAULTS.
    """
    environ = os.environ if environ is None else environ
    default = {**DEFAULTS, **(defaults or {})}
    cpus = system.affinity() if cpus is None else cpus

    # (Equivalent mutants: "came from env" is read only with a raw value, so (None, True) for an unset one reads
    # the same; flush_mib, seed, llc_mib and meta_bytes have no variable, so their env is always False, and None
    # in its place reads the same.)
    def pick(name: str):
        """(raw string, came from env?) or (None, False) when unset."""
        raw = flags.get(name)
        if raw is not None:
            return str(raw), False
        var = ENV_VARS.get(name)
        if var is not None and var in environ:
            return environ[var], True
        return None, False

    values: dict[str, object] = {}
    for name in ("M", "K", "block", "iters", "reps"):
        raw, env = pick(name)
        values[name] = default[name] if raw is None else parse_int(name, raw, env)
    for name, minimum in (("flush_mib", 0), ("seed", 0)):
        raw, env = pick(name)
        values[name] = default[name] if raw is None else parse_int(name, raw, env, minimum=minimum)

    raw, env = pick("llc_mib")
    values["llc_mib"] = None if raw is None else parse_int("llc_mib", raw, env)
    llc, _ = llc_in_force(values["llc_mib"], machine_llc_bytes() if llc_bytes is THIS_MACHINE else llc_bytes)
    if values["flush_mib"] is None:
        values["flush_mib"] = default_flush_mib(llc)
    raw, env = pick("max_seconds")
    values["max_seconds"] = 0.0 if raw is None else parse_seconds(raw)
    values["compare_warm"] = bool(flags.get("compare_warm"))
    values["recalibrate"] = bool(flags.get("recalibrate"))

    raw, env = pick("bits")
    values["bits"] = default["bits"] if raw is None else parse_bits(raw, env)

    raw, env = pick("meta_bytes")
    meta = default["meta_bytes"] if raw is None else parse_int("meta_bytes", raw, env)
    if meta not in (2, 4):
        raise SettingsError("--meta-bytes", f"must be 2 (float16 scale/offset, MNN's published formula) or 4 (float32, MNN's CPU backend), got {meta}")
    values["meta_bytes"] = meta

    block = values["block"]
    if block % BLOCK_GRANULE:
        raw, env = pick("block")
        lower = max(BLOCK_GRANULE, block // BLOCK_GRANULE * BLOCK_GRANULE)
        raise SettingsError(
            _source("block", env),
            f"must be a multiple of {BLOCK_GRANULE} so every packed layout tiles it, got {block}; "
            f"use e.g. {lower} or {lower + BLOCK_GRANULE}",
        )

    raw, env = pick("threads")
    if raw is None:  # the CPUs of the affinity mask, as far as NUMBA_NUM_THREADS lets numba run them
        threads = len(cpus) if thread_limit is None else min(len(cpus), thread_limit)
    else:
        threads = parse_int("threads", raw, env)
        if threads > len(cpus):
            raise SettingsError(
                _source("threads", env),
                f"{threads} threads asked for, but this process may run on {len(cpus)} CPU(s) "
                f"({format_cpus(cpus)}); use 1..{len(cpus)}, or allow more CPUs (taskset or --cpus)",
            )
        if thread_limit is not None and threads > thread_limit:
            raise SettingsError(
                _source("threads", env),
                f"{threads} threads asked for, but numba runs at most {thread_limit} here (NUMBA_NUM_THREADS="
                f"{environ.get('NUMBA_NUM_THREADS', thread_limit)}); use 1..{thread_limit}, or raise NUMBA_NUM_THREADS",
            )
    values["threads"] = threads
    values["thread_limit"] = thread_limit

    values["act"] = check_act(str(flags.get("act") or default["act"]), values["bits"], values["block"])
    values["kernel"] = check_kernel(str(flags.get("kernel") or default["kernel"]), values["bits"], values["act"],
                                    values["block"])
    for key in ("json_path", "csv_path"):
        path = flags.get(key)
        if path is not None:
            check_writable(str(path), "--json" if key == "json_path" else "--csv")
        values[key] = path
    check_distinct({"--json": flags.get("json_path"), "--csv": flags.get("csv_path"), "--md": flags.get("md_path")})

    shapes = flags.get("shapes") or ()
    if shapes:
        if flags.get("M") is not None or flags.get("K") is not None:
            raise SettingsError("--shape", "give the shapes with --shape (or --shapes-from), or one shape with --M/--K, "
                                "not both")
        parsed = tuple(s if isinstance(s, tuple) else parse_shape(str(s)) for s in shapes)
        if len(set(parsed)) != len(parsed):
            raise SettingsError("--shape", "a shape is listed twice; list each once")
        values["shapes"] = parsed
        values["M"], values["K"] = parsed[0]
    settings = Settings(**values)  # type: ignore[arg-type]
    check_memory(settings, system.available_memory_bytes() if available_bytes is None else available_bytes, llc)
    return settings


ACTS = ("auto", "i8", "f32")


def check_act(act: str, bits: tuple[int, ...], block: int) -> str:
    """--act as asked: auto (int8 where a kernel exists, else f32), f32, or i8 (an error where a width
    has no int8 kernel here, naming what the CPU has)."""
    from gemvbw import kernels

    if act not in ACTS:
        raise SettingsError("--act", f"{act!r} is not one of {', '.join(ACTS)}; use e.g. --act auto")
    if act != "i8":
        return act
    unquantized = [f"w{b}" for b in bits if b in FLOAT_BITS]
    if unquantized:
        raise SettingsError("--act", f"{' and '.join(unquantized)} are unquantized weights, multiplied with f32 "
                                     "activations; use --act auto (int8 where it applies) or drop them from --bits")
    for b in bits:
        missing = kernels.int8_unavailable(b, block)
        if missing is not None:
            if "blocks of" in missing:
                raise SettingsError("--act", f"{missing}; use --block 64, or --act auto (f32 where int8 cannot run)")
            cpu = system.describe_cpu()
            isa = " ".join(cpu["isa"]) or "none of the relevant ones"
            raise SettingsError("--act", f"{missing}; this CPU's features ({cpu['isa_source']}): {isa}. "
                                         "Use --act auto or --act f32")
    return act


def check_kernel(kernel: str, bits: tuple[int, ...], act: str, block: int = 64) -> str:
    from gemvbw import kernels

    if kernel in ("auto", "all"):
        return kernel

    def has(b: int) -> bool:
        for a, _ in kernels.acts_for(b, block, act, kernel):
            try:
                kernels.get(b, a, kernel)
                return True
            except KeyError:
                pass
        return False

    missing = [b for b in bits if not has(b)]
    if missing:
        acts = ("f32", "i8") if act == "auto" else (act,)
        # the names the missing widths do have (a w32-only 'blas' is no advice for w4)
        found = {n for a in acts for n in kernels.variant_names(a, tuple(missing))}
        names = ", ".join(["auto", "all"] + sorted(found))
        widths = ",".join(f"w{b}" for b in missing)
        raise SettingsError("--kernel", f"no variant {kernel!r} for {widths} (act={act}); choose one of: {names}")
    return kernel


def weight_bytes(M: int, K: int, bits: int, block: int, meta_bytes: int) -> int:
    """Bytes a packed matrix really occupies (codes with last-block padding, plus metadata; fp32 and fp16
    weights, their M*K values)."""
    if bits in FLOAT_BITS:
        return M * K * bits // 8
    return M * row_nbytes(K, bits, block) + 2 * M * num_blocks(K, block) * meta_bytes


def copies_held(bits: int, block: int, act: str) -> int:
    """How many copies of a width's weights a sweep holds at its peak: generating random codes makes a
    temporary as large as the codes (2), and every int8 layout that may run (calibration binds them all)
    repacks one more, held while the matrix lives."""
    if bits in FLOAT_BITS or act == "f32" or block != 64:
        return 2
    from gemvbw import kernels

    layouts = {s.layout for s in kernels.variants(bits, "i8") if s.layout is not None}
    return max(2, 1 + len(layouts))


def sweep_bytes(s: Settings) -> tuple[int, int, tuple[int, int]]:
    """(peak bytes of the measuring part, the width and the shape that set it)."""
    # (every width holds more than a byte, so a start of 1 instead of 0 is the same)
    best = (0, s.bits[0], s.shape_list[0])
    for M, K in s.shape_list:
        for b in s.bits:
            need = weight_bytes(M, K, b, s.block, s.meta_bytes) * copies_held(b, s.block, s.act)
            if need > best[0]:
                best = (need, b, (M, K))
    M, K = best[2]
    return best[0] + 8 * (M + K) * 4 + (s.flush_mib << 20) + VERIFY_BYTES, best[1], best[2]


def roofline_bytes(llc_bytes: int | None) -> int:
    """The rooflines' buffers, never alive with the sweep's: memcpy's two, then the read buffer alone."""
    from gemvbw.roofline import MEMCPY_MIB, read_buffer_bytes

    return max(2 * (MEMCPY_MIB << 20), read_buffer_bytes(llc_bytes))


def memory_needed(s: Settings, llc_bytes: int | None = None) -> int:
    """Peak bytes a sweep holds at once: the weights with their temporaries and repacked copies, x and y, the
    flush buffer and verification; or the roofline buffers, whichever is larger."""
    return max(sweep_bytes(s)[0], roofline_bytes(llc_bytes))


def _flush_that_fits(llc: int | None, available: int) -> str:
    """Advice for a flush buffer that does not fit: the default size for the cache in force (``llc``, see
    :func:`llc_in_force`) where it fits, else the largest that does, said to be smaller than the cache wants."""
    wanted = default_flush_mib(llc)
    fits = (available - VERIFY_BYTES) >> 20
    if wanted <= fits:
        return f"use e.g. --flush-mib {wanted}"
    if fits < 1:
        return "free memory first"
    return (f"use --flush-mib {fits} at most (what fits; less than the {wanted} MiB this cache wants, so the run "
            "will warn flush-small), or free memory first")


def check_memory(s: Settings, available: int | None, llc: int | None) -> None:
    """Refuse a run that would not fit, naming what would: the shape, a width, or the flush buffer. ``llc``:
    the last-level cache in force (:func:`llc_in_force`), which sizes the read roofline's buffer."""
    if available is None:
        return
    if (s.flush_mib << 20) + VERIFY_BYTES > available:
        raise SettingsError("--flush-mib", f"a {s.flush_mib} MiB flush buffer does not fit in the {available / 1e9:.1f} GB "
                                           f"available; {_flush_that_fits(llc, available)}")
    if roofline_bytes(llc) > available:
        raise SettingsError("memory", f"the rooflines need {roofline_bytes(llc) / 1e9:.1f} GB at once but "
                                      f"{available / 1e9:.1f} GB is available; free memory first")
    need, worst, (M, K) = sweep_bytes(s)
    if need > available:
        advice = f"drop {worst} from --bits, " if len(s.bits) > 1 else ""
        raise SettingsError(
            "--shape" if s.shapes else "--M/--K",
            f"M={M} x K={K} needs about {need / 1e9:.1f} GB at once (w{worst}: its weights, their temporary and "
            f"repacked copies, the buffers, verification) but {available / 1e9:.1f} GB is available; "
            f"{advice}reduce M or K",
        )


def check_distinct(outputs: Mapping[str, object]) -> None:
    """Two outputs given the same file would overwrite each other: refused, naming both."""
    seen: dict[str, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        real = os.path.realpath(str(path))
        if real in seen:
            raise SettingsError(flag, f"{path!r} is also the file of {seen[real]}; give each output its own file")
        seen[real] = flag


def check_writable(path: str, flag: str) -> None:
    """Fail before measuring, not after, when a result file could not be written."""
    from gemvbw.report.files import UnwritablePath, destination

    p = Path(path)
    if p.is_dir():
        raise SettingsError(flag, f"{path!r} is a directory; give a file name, e.g. {flag} run.json")
    try:
        p = Path(destination(path))
    except UnwritablePath as exc:
        raise SettingsError(flag, str(exc)) from None
    parent = p.parent  # Path("run.json").parent is Path(".")
    if not parent.is_dir():
        raise SettingsError(flag, f"directory {str(parent)!r} does not exist; create it or choose another path")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".gemvbw-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SettingsError(flag, f"cannot write in {str(parent)!r} ({exc.strerror}); choose a writable path") from None

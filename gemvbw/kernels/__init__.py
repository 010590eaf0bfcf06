"""The GEMV kernels and their registry, keyed by (bits, act, variant).

Every variant is a plain numba function over the packed arrays of a
:class:`~gemvbw.quant.QuantizedMatrix`; ``bind`` turns a matrix into a
``run(x, y)`` callable that the harness times. The ``ref`` variant of each
width is the simple loop: the baseline other variants are measured against.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np

import numba

from gemvbw.kernels._common import serial_twin  # noqa: F401 - part of this package's API
from gemvbw.kernels.w2 import gemv_w2_ref, gemv_w2_rows4
from gemvbw.kernels.w3 import gemv_w3_ref, gemv_w3_rows4
from gemvbw.kernels.w4 import gemv_w4_ref, gemv_w4_rows4
from gemvbw.kernels.w8 import gemv_w8_ref, gemv_w8_rows4
from gemvbw.metrics import FLOAT_BITS
from gemvbw.quant import QuantizedMatrix

Runner = Callable[[np.ndarray, np.ndarray], None]


def _fingerprint() -> str:
    """A hash of every kernel source: numba's cache keys a compiled function by its own file only, and
    --kernel auto's calibration by names, so either would keep what was made from an older primitive."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for f in sorted([*here.glob("*.py"), *here.glob("isa/*.py")]):
        h.update(f.relative_to(here).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


FINGERPRINT = _fingerprint()


@dataclass(frozen=True)
class KernelSpec:
    bits: int
    act: str
    variant: str
    description: str
    bind: Callable[[QuantizedMatrix], Runner]
    # preference for --kernel auto when no calibration says otherwise: higher wins
    priority: int = 0
    # accepted max_rel_err against the float64 reference (see gemvbw.verify)
    tolerance: float = 1e-4
    # the activations the kernel really multiplies with (int8 kernels: x quantized per block);
    # the reference is computed from them, and their own error is reported apart
    activations: Callable[[np.ndarray, int], np.ndarray] | None = None
    # blocks the kernel handles (None: any multiple of 8)
    blocks: tuple[int, ...] | None = None
    # a context the variant is verified and timed in, given the thread count (numpy's BLAS threads)
    context: Callable[[int], ContextManager] | None = None
    # what ran, said beside its row (which BLAS, with how many threads)
    facts: Callable[[], str] | None = None
    # int8 variants: the instruction-set tier (gemvbw.tiers) and the repacked layout the variant binds;
    # variants of one layout share one repacked copy of a matrix
    tier: str | None = None
    layout: tuple | None = None
    # column tiles: bytes the variant prefetches ahead in its stream (0: none; the -prfm variants)
    ahead: int = 0
    # int8 variants: (qm, x, y, chunks) -> the arguments of gemvbw.kernels.streams.gemv_streams that bind
    # uses, tag included; benchmarks/asm_check.py compiles from them, so it reads the code that runs
    kernel_args: Callable[..., tuple] | None = None

    def session(self, threads: int) -> ContextManager:
        return self.context(threads) if self.context is not None else contextlib.nullcontext()

    def reference_x(self, x: np.ndarray, block: int) -> np.ndarray:
        return x if self.activations is None else self.activations(x, block)


_REGISTRY: dict[tuple[int, str, str], KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    _REGISTRY[(spec.bits, spec.act, spec.variant)] = spec
    return spec


def unregister(bits: int, act: str, variant: str) -> None:
    _REGISTRY.pop((bits, act, variant), None)


def variants(bits: int, act: str = "f32") -> list[KernelSpec]:
    """Every registered variant for a width, best first by priority."""
    found = [s for (b, a, _), s in _REGISTRY.items() if b == bits and a == act]
    return sorted(found, key=lambda s: (-s.priority, s.variant))


def variant_names(act: str = "f32", bits: tuple[int, ...] | None = None) -> list[str]:
    """The variant names --kernel accepts for an activation type (aliases included), of ``bits`` only if given."""
    names = {v for (b, a, v) in _REGISTRY if a == act and (bits is None or b in bits)}
    names |= {alias for alias, prefix in ALIASES.items() if any(n.startswith(prefix) for n in names)}
    return sorted(names)


def get(bits: int, act: str = "f32", variant: str = "auto") -> KernelSpec:
    """The kernel for a width; 'auto' is the preferred one for this machine, an alias ('packed') the
    preferred variant whose name it begins."""
    if variant == "auto" or variant in ALIASES:
        prefix = ALIASES.get(variant, "")
        found = [s for s in variants(bits, act) if s.variant.startswith(prefix)]
        if not found:
            raise KeyError(f"no kernel{' ' + repr(variant) if prefix else ''} for w{bits} act={act}")
        return found[0]
    try:
        return _REGISTRY[(bits, act, variant)]
    except KeyError:
        raise KeyError(f"no kernel variant {variant!r} for w{bits} act={act}") from None


def compiled(dispatcher, *args):
    """The machine code of a numba function for these arguments' types (compiled, or loaded from numba's
    cache, now), to be called without numba's type dispatch. Dispatch costs little warm but much after a
    cache flush, when its Python objects must come back from DRAM: measured on a 4x128 w4 call, 1 thread,
    warm 5.4 -> 1.9 us and cold 65 -> 28 us per call (with a Python object among the arguments, which
    numba types in Python). The caller passes arrays of exactly the types given here.

    With one thread in force, a parallel function is compiled without its parallel launch (its serial
    twin, see :func:`serial_twin`): a launch costs about 1 us warm but 20-30 us after a cache flush,
    and one thread has nothing to launch."""
    if numba.get_num_threads() == 1 and dispatcher.targetoptions.get("parallel"):
        dispatcher = serial_twin(dispatcher)
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    found = dispatcher.overloads.get(sig)
    return found.entry_point if found is not None else dispatcher.compile(sig)


def typed_like(qm: QuantizedMatrix) -> tuple[np.ndarray, np.ndarray]:
    """An x and a y of the types every kernel is called with (float32, C-contiguous)."""
    return np.empty(qm.K, np.float32), np.empty(qm.M, np.float32)


_F32 = np.dtype(np.float32)


def check_xy(x: np.ndarray, y: np.ndarray, K: int, M: int, checked: list) -> None:
    """Refuse an x or a y the machine code would misread: it reads x as K float32 and writes y as M float32,
    both C arrays, without looking at their types. A bound call checks only a pair it has not just checked
    (``checked`` keeps the last pair that passed), because the check is not cheap in a cold call: after a
    64 MiB flush, on Zen 4 with 1 thread, two dtype and two contiguity tests cost 3-4 us a call of a 16 us
    call (each numpy attribute comes back from DRAM), while an ``is`` against the last pair costs nothing.
    An array changed in place after its check (its dtype or shape set) keeps its buffer and its size in bytes:
    the f32 kernels' unboxing refuses it when its element size changed, and the int8 kernels, which take x and
    y by address (:mod:`gemvbw.kernels.streams`), read the same bytes as float32, as ``x.view(np.float32)``
    would; none reads outside the buffer."""
    if not (x.dtype is _F32 and y.dtype is _F32 and x.flags.c_contiguous and y.flags.c_contiguous):
        raise TypeError("a bound kernel takes x and y as C-contiguous float32 arrays")
    if x.shape != (K,) or y.shape != (M,):
        raise ValueError(f"a bound kernel takes x of shape ({K},) and y of shape ({M},), got {x.shape} and {y.shape}")
    checked[:] = x, y


def bound_runner(call, args_of: Callable[[np.ndarray, np.ndarray], tuple], K: int, M: int) -> Runner:
    """run(x, y) of ``call`` (compiled code) on ``args_of(x, y)``, x and y checked when they are not the pair
    checked last; and its ``call_on(x, y)`` (see :func:`call_on`): ``call`` bound to ``args_of(x, y)`` by a
    :func:`functools.partial`, that pair checked once, now. For bindings that pass x and y as arrays (the
    int8 ones pass addresses: :func:`gemvbw.kernels.streams.bind`)."""
    checked = [None, None]

    def run(x: np.ndarray, y: np.ndarray) -> None:
        if x is not checked[0] or y is not checked[1]:
            check_xy(x, y, K, M, checked)
        call(*args_of(x, y))

    def bound_call_on(x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
        check_xy(x, y, K, M, [None, None])
        return functools.partial(call, *args_of(x, y))

    run.call_on = bound_call_on
    return run


def call_on(run: Runner, x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
    """A call of ``run`` on x and y, for timing: where the binding offers it, its machine code bound to every
    argument (x and y checked once, now), called from C with no Python frame between the timer's two reads;
    else ``run(x, y)`` in a lambda. After a cache flush every Python frame costs its objects' trips to DRAM:
    measured on Zen 4, 1 thread, each call after a 128 MiB flush, 15 rounds of 20, a 16x128 int8 call
    12.3-13.4 us through the lambda and run(x, y), 9.3-9.6 us bound (2026-12-05). Not for calls whose x or y
    changes between calls: it is bound to these."""
    bound = getattr(run, "call_on", None)
    return bound(x, y) if bound is not None else (lambda: run(x, y))


def _binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    def bind(qm: QuantizedMatrix) -> Runner:
        codes, scale, offset, block = qm.codes, qm.scale_raw, qm.offset_raw, qm.block
        call = compiled(fn, codes, scale, offset, *typed_like(qm)[:1], block, typed_like(qm)[1])
        return bound_runner(call, lambda x, y: (codes, scale, offset, x, block, y), qm.K, qm.M)

    return bind


def _bound_call(fn, qm: QuantizedMatrix) -> Runner:
    """run(x, y) for a kernel that splits rows into chunks: a few chunks per thread in force when bound."""
    codes, scale, offset, block = qm.codes, qm.scale_raw, qm.offset_raw, qm.block
    chunks = 4 * numba.get_num_threads()
    x0, y0 = typed_like(qm)
    call = compiled(fn, codes, scale, offset, x0, block, y0, chunks)
    return bound_runner(call, lambda x, y: (codes, scale, offset, x, block, y, chunks), qm.K, qm.M)


def _chunked_binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    return lambda qm: _bound_call(fn, qm)


def _describe(fn) -> str:
    return " ".join((fn.__doc__ or "").split())


# The int8-activation variants, named by format, tile and instruction-set tier (as XNNPACK and KleidiAI name
# theirs), once per tier this CPU and numba's target can run:
# - packed-4x2-<tier>: four rows x two blocks per step, each row's codes against a vector of activations
#   (gemvbw.kernels.packed), every width, every tier;
# - packed-<R>c4-<tier>: column tiles of R rows, four weights of a row per 32-bit lane against four
#   activations broadcast (gemvbw.kernels.tile), every width on the VNNI tiers (w3 two whole codes and a split one
#   to a byte), each with a -prfm twin that prefetches ahead and a -1stream twin reading one group of rows per thread.
# The alias "packed" means the preferred one of them: a column tile where the tier has one (each tier's
# tile_priority, above every packed-4x2; measured, see gemvbw.kernels.tile).
PACKED_PREFIX = "packed-4x2-"
PRFM_SUFFIX = "-prfm"  # a column tile that prefetches ahead in its stream (XNNPACK names its own so)
ONE_STREAM_SUFFIX = "-1stream"  # a column tile that reads one group of rows per thread (gemvbw.kernels.tile.ONE_STREAM)
ALIASES = {"packed": "packed-"}


def _packed_args(tier: str) -> Callable[..., tuple]:
    def args(qm: QuantizedMatrix, x: np.ndarray, y: np.ndarray, chunks: int) -> tuple:
        from gemvbw.kernels import packed

        return packed.kernel_args(tier, qm, x, y, chunks)

    return args


def _tile_args(tier: str, ahead: int, nstreams: int | None, w2_stack: bool,
               turn: int | None = None) -> Callable[..., tuple]:
    def args(qm: QuantizedMatrix, x: np.ndarray, y: np.ndarray, chunks: int) -> tuple:
        from gemvbw.kernels import tile

        return tile.kernel_args(tier, qm, x, y, chunks, ahead, nstreams=nstreams, w2_stack=w2_stack, turn=turn)

    return args


def _streams_binder(kernel_args: Callable[..., tuple]) -> Callable[[QuantizedMatrix], Runner]:
    def bind(qm: QuantizedMatrix) -> Runner:
        from gemvbw.kernels import streams

        return streams.bind(kernel_args(qm, *typed_like(qm), 4 * numba.get_num_threads()))

    return bind


def _i8_spec(bits: int, variant: str, description: str, kernel_args: Callable[..., tuple], **fields) -> KernelSpec:
    """An int8 variant whose bind and whose kernel_args build the same call."""
    from gemvbw.kernels.activations import SUPPORTED_BLOCK, dequantized_activations

    return KernelSpec(bits, "i8", variant, description, _streams_binder(kernel_args),
                      activations=dequantized_activations, blocks=(SUPPORTED_BLOCK,), kernel_args=kernel_args,
                      **fields)


def i8_specs(usable_tiers) -> list[KernelSpec]:
    """The int8-activation variants of the given tiers, every width."""
    from gemvbw.kernels import packed, tile

    specs = []
    for t in usable_tiers:
        prim = packed.PRIMITIVES[t.name]
        for bits in (8, 4, 3, 2):
            specs.append(_i8_spec(
                bits, PACKED_PREFIX + t.name,
                f"int8 activations, weights repacked for four rows x two blocks per step; {t.summary}",
                _packed_args(t.name), priority=t.priority, tier=t.name,
                layout=("4x2", packed.layout_bytes(prim), packed.code_bias(prim, bits))))
        if t.name in tile.tile_tiers():
            rows = tile.tile_rows(t.name)
            for bits in tile.WIDTHS:
                # the plain tile, and where prefetching may pay (a CPU's call: both are calibrated), its -prfm twin
                ahead = tile.prfm_ahead(bits)
                hint = tile.HINTS[tile.PREFETCH_LOCALITY]
                # groups of rows per thread: this CPU's count for each; the plain tile's also depends on the threads,
                # so it is found when bound (None; gemvbw.kernels.tile.plain_streams), the registry built before
                twin = tile.prfm_streams(bits)
                alone, shared = (tile.plain_streams(bits, threads=n, tier=t.name) for n in (1, 2))
                # w2's plain tile stacks four rows' codes in a byte; its twin keeps one row's four groups (measured:
                # stacked tiles read ahead lost on Zen 4, and the twin is what Intel and Zen 5 were measured to want)
                stacked = tile.W2_STACK and bits == 2
                turn = tile.plain_turn(bits, stacked, t.name)
                layout = (f"; w2 as four rows per lane, one to each 2-bit field (tiles of {4 * rows} rows"
                          if stacked else "")
                ways = [("", tile.PREFETCH_AHEAD[bits], None, None, stacked, _groups(alone, shared) + (
                    f"{layout}{', two tiles of a group in turn' if turn == 2 else ''})" if stacked else "")
                )] + ([(
                    PRFM_SUFFIX, ahead, twin, None, False,
                    f"; prefetches {ahead} bytes ahead in its stream ({hint}){_groups(twin)}"
                )] if ahead else []) + [(
                    # the plain tile with one group per thread (it reads two or more): for memory that serves one
                    # stream per core best, which no per-CPU table can foresee (tile.ONE_STREAM)
                    ONE_STREAM_SUFFIX, tile.PREFETCH_AHEAD[bits], tile.ONE_STREAM, 1, stacked,
                    f", one group of rows at once per thread{layout + ')' if stacked else ''}"
                )]
                specs += [_i8_spec(
                    bits, f"packed-{rows}c4-{t.name}{suffix}",
                    f"int8 activations, weights repacked in column tiles of {rows} rows x 4 weights per lane, four "
                    f"activations broadcast per instruction{what}; {t.summary}",
                    _tile_args(t.name, ahead, nstreams, stack, each_turn),
                    priority=t.tile_priority - {"": 0, PRFM_SUFFIX: 1, ONE_STREAM_SUFFIX: 2}[suffix],
                    tier=t.name, layout=tile.layout_key(t.name, bits, w2_stack=stack), ahead=ahead)
                    for suffix, ahead, nstreams, each_turn, stack, what in ways]
    return specs


def _groups(alone: int, shared: int | None = None) -> str:
    """What a tile variant's description says of its groups of rows per thread at 1 thread and, where it differs,
    at more (nothing for the usual count)."""
    from gemvbw.kernels import tile

    if shared is not None and shared != alone:
        return f", {alone} groups of rows at once per thread at 1 thread and {shared} at more"
    return f", {alone} group{'s' if alone > 1 else ''} of rows at once per thread" if alone != tile.STREAMS else ""


def _register_i8() -> None:
    """Registered only for tiers the gate found usable: a tier's kernels are never compiled elsewhere."""
    from gemvbw import tiers

    for spec in i8_specs(tiers.usable()):
        register(spec)


def _float_binder(fn, chunked: bool) -> Callable[[QuantizedMatrix], Runner]:
    """run(x, y) for the unquantized baselines: the kernel takes the weights, x, y (and row chunks)."""
    def bind(qm) -> Runner:
        W = qm.weights
        x0, y0 = typed_like(qm)
        extra = (4 * numba.get_num_threads(),) if chunked else ()
        call = compiled(fn, W, x0, y0, *extra)
        return bound_runner(call, lambda x, y: (W, x, y, *extra), qm.K, qm.M)

    return bind


def _register_float() -> None:
    from gemvbw.kernels import wfloat

    for bits, ref, rows4 in ((32, wfloat.gemv_w32_ref, wfloat.gemv_w32_rows4),
                             (16, wfloat.gemv_w16_ref, wfloat.gemv_w16_rows4)):
        register(KernelSpec(bits, "f32", "ref", _describe(ref), _float_binder(ref, False)))
        register(KernelSpec(bits, "f32", "rows4", _describe(rows4), _float_binder(rows4, True), priority=1))
    register(KernelSpec(32, "f32", "blas", "numpy's W @ x on the float32 matrix (the BLAS numpy links), as many "
                        "BLAS threads as the run's", wfloat.bind_blas, context=wfloat.blas_threads,
                        facts=wfloat.blas_facts))


for _bits, _ref, _rows4 in ((8, gemv_w8_ref, gemv_w8_rows4), (4, gemv_w4_ref, gemv_w4_rows4),
                            (3, gemv_w3_ref, gemv_w3_rows4), (2, gemv_w2_ref, gemv_w2_rows4)):
    register(KernelSpec(_bits, "f32", "ref", _describe(_ref), _binder(_ref)))
    register(KernelSpec(_bits, "f32", "rows4", _describe(_rows4), _chunked_binder(_rows4), priority=1))
_register_float()
_register_i8()


def int8_unavailable(bits: int, block: int) -> str | None:
    """Why no int8 kernel runs for this width and block here, or None when one does."""
    found = variants(bits, "i8")
    if not found:
        from gemvbw import tiers

        rep = tiers.report()
        why = "; ".join(f"{s.tier.name}: {s.reason}" for s in rep.statuses) or f"none for {rep.arch}"
        return f"no int8 tier for this CPU ({why})"
    blocks = sorted({b for s in found for b in (s.blocks or ())})
    if blocks and block not in blocks:
        return f"the int8 kernels take blocks of {', '.join(map(str, blocks))}, not {block}"
    return None


def acts_for(bits: int, block: int, act: str, kernel: str = "auto") -> list[tuple[str, str]]:
    """The activation types a width runs with, each with why: --act auto takes int8 where an int8 kernel
    exists for this CPU, width and block, f32 otherwise; with --kernel all, f32 and int8 both."""
    if bits in FLOAT_BITS:
        return [("f32", "f32 activations: unquantized weights are multiplied in float")]
    if act != "auto":
        return [(act, f"--act {act}")]
    missing = int8_unavailable(bits, block)
    if missing is not None:
        return [("f32", f"f32 activations: {missing}")]
    i8 = (f"int8 activations: {variants(bits, 'i8')[0].tier} "
          "kernels exist for this CPU and block")
    if kernel == "all":
        return [("f32", "f32 activations (--kernel all: every variant)"), ("i8", i8)]
    if kernel != "auto" and kernel not in variant_names("i8"):
        return [("f32", f"f32 activations: --kernel {kernel} is an f32 variant")]
    return [("i8", i8)]


def gemv(qm: QuantizedMatrix, x: np.ndarray, variant: str = "auto", act: str = "f32") -> np.ndarray:
    """y = W x for a packed matrix and a float32 activation vector of length K.

    act="i8" quantizes x per block to int8 inside the kernel (where a tier exists for this CPU, block 64);
    act="auto" does so where it can and keeps x float32 otherwise.
    """
    if act == "auto":
        act = acts_for(qm.bits, qm.block, "auto", variant)[0][0]
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape != (qm.K,):
        raise ValueError(f"x must have shape ({qm.K},), got {x.shape}")
    y = np.empty(qm.M, dtype=np.float32)
    get(qm.bits, act, variant).bind(qm)(x, y)
    return y

"""The GEMV kernels and their registry, keyed by (bits, act, variant).

Every variant is a plain numba function over the packed arrays of a
:class:`~gemvbw.quant.QuantizedMatrix`; ``bind`` turns a matrix into a
``run(x, y)`` callable that the harness times. The ``ref`` variant of each
width is the simple loop: the baseline other variants are measured against.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

import numba

from gemvbw.kernels.w2 import gemv_w2_ref, gemv_w2_rows4
from gemvbw.kernels.w3 import gemv_w3_ref, gemv_w3_rows4
from gemvbw.kernels.w4 import gemv_w4_ref, gemv_w4_rows4
from gemvbw.kernels.w8 import gemv_w8_ref, gemv_w8_rows4
from gemvbw.quant import QuantizedMatrix

Runner = Callable[[np.ndarray, np.ndarray], None]


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


def variant_names(act: str = "f32") -> list[str]:
    return sorted({v for (_, a, v) in _REGISTRY if a == act})


def get(bits: int, act: str = "f32", variant: str = "auto") -> KernelSpec:
    """The kernel for a width; 'auto' is the preferred one for this machine."""
    if variant == "auto":
        found = variants(bits, act)
        if not found:
            raise KeyError(f"no kernel for w{bits} act={act}")
        return found[0]
    try:
        return _REGISTRY[(bits, act, variant)]
    except KeyError:
        raise KeyError(f"no kernel variant {variant!r} for w{bits} act={act}") from None


def _binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    def bind(qm: QuantizedMatrix) -> Runner:
        codes, scale, offset, block = qm.codes, qm.scale_raw, qm.offset_raw, qm.block

        def run(x: np.ndarray, y: np.ndarray) -> None:
            fn(codes, scale, offset, x, block, y)

        return run

    return bind


def _bound_call(fn, qm: QuantizedMatrix, lead: tuple = (), tail: tuple = ()) -> Runner:
    """run(x, y) for a kernel that splits rows into chunks: a few chunks per thread in force when bound.
    lead and tail are arguments prepared once at binding that the kernel takes before and after its own."""
    codes, scale, offset, block = qm.codes, qm.scale_raw, qm.offset_raw, qm.block
    chunks = 4 * numba.get_num_threads()

    def run(x: np.ndarray, y: np.ndarray) -> None:
        fn(*lead, codes, scale, offset, x, block, y, chunks, *tail)

    return run


def _chunked_binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    return lambda qm: _bound_call(fn, qm)


def _describe(fn) -> str:
    return " ".join((fn.__doc__ or "").split())


def _require_block64(qm: QuantizedMatrix) -> None:
    if qm.block != 64:
        raise ValueError("int8-activation kernels handle block 64 only")


def _i8_binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    def bind(qm: QuantizedMatrix) -> Runner:
        _require_block64(qm)
        return _bound_call(fn, qm)

    return bind


# repacked copies, kept while their matrix lives (a matrix's arrays are not changed once it is
# bound: the copy would go stale)
_PACKED: "weakref.WeakKeyDictionary[QuantizedMatrix, tuple]" = weakref.WeakKeyDictionary()


def _packed_binder(fn) -> Callable[[QuantizedMatrix], Runner]:
    """Repacks the matrix for the kernel (untimed, as an engine does when it loads a model)."""
    def bind(qm: QuantizedMatrix) -> Runner:
        from gemvbw.kernels.i8_packed import PREFETCH_AHEAD, pack

        _require_block64(qm)
        if qm not in _PACKED:  # verification, calibration and the timed run share one copy
            _PACKED[qm] = pack(qm.codes, qm.scale_raw, qm.offset_raw, qm.bits, qm.K)
        return _bound_call(fn, qm, lead=_PACKED[qm], tail=(PREFETCH_AHEAD[qm.bits],))

    return bind


def _register_i8() -> None:
    """int8-activation kernels use AVX2 instructions: registered only where the CPU has them."""
    from gemvbw import system

    cpu = system.describe_cpu()
    if cpu["machine"] not in ("x86_64", "AMD64") or "avx2" not in cpu["isa"]:
        return
    from gemvbw.kernels.i8 import dequantized_activations, gemv_w2_i8, gemv_w3_i8, gemv_w4_i8, gemv_w8_i8

    from gemvbw.kernels import i8_packed

    for bits, fn in ((8, gemv_w8_i8), (4, gemv_w4_i8), (3, gemv_w3_i8), (2, gemv_w2_i8)):
        register(KernelSpec(bits, "i8", "rows4", _describe(fn), _i8_binder(fn), priority=1,
                            activations=dequantized_activations, blocks=(64,)))
        packed = i8_packed.KERNELS[bits]
        register(KernelSpec(bits, "i8", "packed", _describe(packed), _packed_binder(packed), priority=2,
                            activations=dequantized_activations, blocks=(64,)))


for _bits, _ref, _rows4 in ((8, gemv_w8_ref, gemv_w8_rows4), (4, gemv_w4_ref, gemv_w4_rows4),
                            (3, gemv_w3_ref, gemv_w3_rows4), (2, gemv_w2_ref, gemv_w2_rows4)):
    register(KernelSpec(_bits, "f32", "ref", _describe(_ref), _binder(_ref)))
    register(KernelSpec(_bits, "f32", "rows4", _describe(_rows4), _chunked_binder(_rows4), priority=1))
_register_i8()


def gemv(qm: QuantizedMatrix, x: np.ndarray, variant: str = "auto", act: str = "f32") -> np.ndarray:
    """y = W x for a packed matrix and a float32 activation vector of length K.

    act="i8" quantizes x per block to int8 inside the kernel (x86 with AVX2, block 64).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape != (qm.K,):
        raise ValueError(f"x must have shape ({qm.K},), got {x.shape}")
    y = np.empty(qm.M, dtype=np.float32)
    get(qm.bits, act, variant).bind(qm)(x, y)
    return y

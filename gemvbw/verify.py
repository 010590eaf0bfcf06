"""Check a kernel against the slow, obvious numpy reference before it is timed.

The error measure is condition-aware: for each output row,
``|y - y_ref| / sum_k |w_k| |x_k|`` (the bound rounding errors scale with), and
``max_rel_err`` is its maximum over rows. The reference is computed in float64
from ``qm.dequantize()``, a few thousand rows at a time so that no M x K float
matrix is ever held whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemvbw.kernels import KernelSpec
from gemvbw.quant import QuantizedMatrix

_CHUNK_ELEMS = 1 << 22  # float64 elements of W dequantized at once (32 MiB)


def reference_gemv(qm: QuantizedMatrix, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W x, |W| |x|) in float64, from the dequantized weights."""
    x64 = x.astype(np.float64)
    ax = np.abs(x64)
    y = np.empty(qm.M)
    bound = np.empty(qm.M)
    rows = max(1, _CHUNK_ELEMS // qm.K)
    for r0 in range(0, qm.M, rows):
        W = qm.dequantize(slice(r0, r0 + rows), dtype=np.float64)
        y[r0:r0 + rows] = W @ x64
        bound[r0:r0 + rows] = np.abs(W) @ ax
    return y, bound


@dataclass(frozen=True)
class Verification:
    max_rel_err: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.max_rel_err)) and self.max_rel_err <= self.tolerance


def relative_error(y: np.ndarray, y_ref: np.ndarray, bound: np.ndarray) -> float:
    err = np.abs(y.astype(np.float64) - y_ref) / np.maximum(bound, np.finfo(np.float64).tiny)
    if not np.all(np.isfinite(err)):
        return float("inf")
    return float(err.max())


def verify(spec: KernelSpec, qm: QuantizedMatrix, x: np.ndarray, reference=None) -> Verification:
    """Run the kernel once on (qm, x) and compare with the reference (computed if not given).

    The reference is computed from the activations the kernel really uses (for int8 kernels,
    x quantized per block), so quantizing x is not counted as a kernel error.
    """
    y_ref, bound = reference if reference is not None else reference_gemv(qm, spec.reference_x(x, qm.block))
    y = np.full(qm.M, np.nan, dtype=np.float32)
    spec.bind(qm)(x, y)
    return Verification(relative_error(y, y_ref, bound), spec.tolerance)


def activation_error(exact, quantized) -> float:
    """What quantizing the activations alone changes: the exact reference against the one on quantized x."""
    (y_exact, bound), (y_q, _) = exact, quantized
    return relative_error(y_q.astype(np.float32), y_exact, bound)

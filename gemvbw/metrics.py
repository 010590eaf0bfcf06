"""The formulas, exactly as in MNN's GemvBW test (and DESIGN.md), as pure functions.

Nothing else in gemvbw computes a reported figure: renderers only format.
"""

from __future__ import annotations

import math


FLOAT_BITS = (32, 16)  # unquantized fp32 and fp16 weights: no blocks, no metadata


def logical_bytes(M: int, K: int, bits: int, block: int, meta_bytes: int) -> int:
    """Packed codes plus one (scale, offset) pair per row and block: ceil(M*K*bits/8) + M*blocks*2*meta_bytes.
    Unquantized weights (bits 16 and 32) have no metadata: M*K*2 and M*K*4."""
    if bits in FLOAT_BITS:
        return M * K * bits // 8
    blocks = -(-K // block)
    return -(-(M * K * bits) // 8) + M * blocks * 2 * meta_bytes


def bytes_per_elem(logical: int, M: int, K: int) -> float:
    return logical / (M * K)


def eff_gbps(logical: int, best_avg_s: float) -> float:
    """Logical weight bytes per second of the best group mean, in GB/s (1e9)."""
    return logical / best_avg_s / 1e9


def pct_peak(eff: float, memcpy_gbps: float) -> float:
    """MNN's %peak: against the memcpy roofline (which counts read + write)."""
    return 100.0 * eff / memcpy_gbps


def pct_read(eff: float, read_gbps: float) -> float:
    """Against the read-only roofline: the bound a GEMV (which only reads weights) can reach."""
    return 100.0 * eff / read_gbps


def gflops(M: int, K: int, best_avg_s: float) -> float:
    return 2.0 * M * K / best_avg_s / 1e9


def ai(bpe: float) -> float:
    """Arithmetic intensity in operations per byte: 2 / bytes_per_elem."""
    return 2.0 / bpe


def memcpy_gbps(buffer_bytes: int, seconds: float) -> float:
    """A copy reads and writes every byte: 2 * buffer_bytes per copy."""
    return 2.0 * buffer_bytes / seconds / 1e9


def read_gbps(buffer_bytes: int, seconds: float) -> float:
    return buffer_bytes / seconds / 1e9


def mean(values) -> float:
    values = list(values)
    return math.fsum(values) / len(values)


def sample_sd(values) -> float:
    """Sample standard deviation (n - 1); 0 for a single value."""
    values = list(values)
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def median(values) -> float:
    v = sorted(values)
    n = len(v)
    mid = n // 2
    return float(v[mid]) if n % 2 else (v[mid - 1] + v[mid]) / 2.0


def cv(values) -> float:
    """Coefficient of variation (sample SD / mean)."""
    m = mean(values)
    return sample_sd(values) / m if m else 0.0


def robust_spread(values) -> float:
    """1.4826 x median absolute deviation / median: the spread of the bulk of the values (as an SD would be for
    a normal distribution), which a few outliers do not move."""
    values = list(values)
    med = median(values)
    if not med:
        return 0.0
    return 1.4826 * median([abs(v - med) for v in values]) / med


def spread(values) -> float:
    """(max - min) / min: how far apart group means are."""
    values = list(values)
    lo = min(values)
    return (max(values) - lo) / lo if lo else 0.0


def ratio(value: float, base: float) -> float:
    """value / base, as used for speed-ups and latency ratios."""
    return value / base


def bound_seconds(bytes_per_token: int, read_gbps: float) -> float:
    """The least time reading bytes_per_token can take at the read roofline."""
    return bytes_per_token / (read_gbps * 1e9)


def tokens_per_s(seconds_per_token: float) -> float:
    return 1.0 / seconds_per_token

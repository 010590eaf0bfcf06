"""Helpers shared by the kernels: metadata loads and per-call activation sums.

numba cannot load float16 arrays on the CPU, so float16 metadata arrives as its
raw uint16 bits and is converted here, in registers: the kernel reads exactly
the bytes gemvbw counts. float32 metadata (meta_bytes=4) is loaded as is.
"""

from __future__ import annotations

import types as pytypes

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

# 2**(max(e, 1) - 25) for each float16 exponent field e: value = mantissa * this
_HALF_POW2 = np.array([2.0 ** (max(e, 1) - 25) for e in range(32)], dtype=np.float32)

# Reassociation lets LLVM vectorize float reductions and contraction lets it use
# FMA; NaN/inf semantics are kept (no nnan/ninf) so a broken kernel shows NaN
# rather than being optimised into a plausible number.
FASTMATH = {"reassoc", "contract", "nsz"}


@njit(cache=True)
def half_to_f32(h):
    bits = np.int32(h)
    e = (bits >> 10) & 31
    m = bits & 1023
    if e != 0:
        m += 1024
    v = np.float32(m) * _HALF_POW2[e]
    if e == 31:
        v = np.float32(np.inf) if m == 1024 else np.float32(np.nan)
    if bits & 0x8000:
        v = -v
    return v


def load_meta(a, r, b):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(load_meta)
def _load_meta_impl(a, r, b):
    if a.dtype == types.uint16:
        def impl(a, r, b):
            return half_to_f32(a[r, b])
    else:
        def impl(a, r, b):
            return np.float32(a[r, b])
    return impl


_TWINS: dict = {}


def serial_twin(dispatcher):
    """The same numba function compiled without ``parallel`` (prange runs as range), cached apart.

    Measured on Zen 4, 1 thread, each call after a 64 MiB flush: an empty parallel call 29.7 us
    against an empty serial one 9.4 us; a 1024x1024 w4 column-tile call 71-88 -> 55-70 us; 4096x14336
    the same within the noise. numba's cache names a function's files by its qualified name and keys
    them by signature only, not by its flags: a twin under the original's name would load the
    parallel machine code (or overwrite it), so the twin is the same code under a name of its own.
    """
    twin = _TWINS.get(dispatcher)
    if twin is None:
        f = dispatcher.py_func
        g = pytypes.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__)
        g.__qualname__, g.__module__, g.__doc__ = f.__qualname__ + "_serial", f.__module__, f.__doc__
        options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("parallel", "nopython")}
        twin = _TWINS[dispatcher] = numba.njit(cache=True, **options)(g)  # (every kernel here is cached)
    return twin


CACHE_LINE = 64


def aligned_empty(n: int, dtype=np.uint8, align: int = CACHE_LINE) -> np.ndarray:
    """An uninitialised array of ``n`` items that starts on an ``align``-byte boundary, allocated by numpy.

    numpy's large arrays start 16 bytes into a page (glibc's mmap chunk header), so every 64-byte load of
    one straddles two cache lines. Measured on Zen 5 (2026-12-04): a plain read of a 56 MiB buffer, cold,
    interleaved, 1 thread 38.3 GB/s 16 bytes off against 40.2 aligned, 2 threads 44.0 against 45.7; the
    column tiles warm (L2-resident, 1 thread) w8/w4/w3/w2 131-172/79/68-76/53 -> 196/94/74/61 GB/s.
    Still numpy's allocation (not numba's), for its transparent huge pages."""
    nbytes = n * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype)


def aligned_full(n: int, value, dtype=np.uint8) -> np.ndarray:
    """:func:`aligned_empty`, every item set to ``value`` (which also maps its pages now, not when first read)."""
    a = aligned_empty(n, dtype)
    a[:] = value
    return a


@njit(cache=True, fastmath=FASTMATH)
def block_sums(x, block, nblocks):
    """Sum of x over each block: the offset term is offset[r, b] * sum(x in block b)."""
    out = np.empty(nblocks, dtype=np.float32)
    K = x.shape[0]
    for b in range(nblocks):
        s = np.float32(0.0)
        for k in range(b * block, min(b * block + block, K)):
            s += x[k]
        out[b] = s
    return out


@njit(parallel=True, cache=True)
def empty_parallel_call(out):
    """The fixed cost of one parallel kernel call: fork, trivial work, join."""
    for i in prange(out.shape[0]):
        out[i] = i


# --- helpers of the fast ("rows4") variants ---------------------------------------------

ROWS = 4  # rows per group: each loaded activation vector serves four rows

_TWO112 = np.float32(2.0 ** 112)


@njit(cache=True, fastmath=FASTMATH)
def _half_row_to_f32(src, r, tmp, dst):
    # Branch-free so it vectorizes: move the half's exponent and mantissa to where float32
    # keeps them, then rescale by 2**112 (the difference of the exponent biases); zero and
    # subnormal halves come out right too. Assumes finite metadata (quantize ensures it).
    row = src[r]
    for i in range(row.shape[0]):
        h = np.uint32(row[i])
        tmp[i] = ((h & np.uint32(0x8000)) << np.uint32(16)) | ((h & np.uint32(0x7FFF)) << np.uint32(13))
    bits = tmp.view(np.float32)
    for i in range(row.shape[0]):
        dst[i] = bits[i] * _TWO112


def meta_row(src, r, tmp, dst):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(meta_row)
def _meta_row_impl(src, r, tmp, dst):
    """One row of scale or offset as float32, into dst: converted from fp16 bits, or copied."""
    if src.dtype == types.uint16:
        def impl(src, r, tmp, dst):
            _half_row_to_f32(src, r, tmp, dst)
    else:
        def impl(src, r, tmp, dst):
            row = src[r]
            for i in range(row.shape[0]):
                dst[i] = row[i]
    return impl


@njit(cache=True)
def row_chunks(groups, chunks):
    """(number of chunks, groups per chunk); each chunk allocates its scratch once.

    The caller passes a few chunks per thread (numba.get_num_threads() cannot be
    called inside a cached kernel: it is a ctypes global).
    """
    nchunks = min(groups, chunks)
    if nchunks == 0:
        return 0, 0
    return nchunks, (groups + nchunks - 1) // nchunks


@njit(cache=True)
def group_meta(scale, offset, r, tmp, s, o):
    """Scales and offsets of rows r..r+ROWS-1 as float32 into s and o (ROWS x nblocks)."""
    for i in range(s.shape[0]):
        meta_row(scale, r + i, tmp, s[i])
        meta_row(offset, r + i, tmp, o[i])

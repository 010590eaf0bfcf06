"""The unquantized baselines: w32 (fp32) and w16 (fp16) weights, f32 activations.

What quantization buys is measured against these. The w16 kernels read the weights' raw
half-precision bits and convert them in registers (fpext: vcvtph2ps on x86, fcvtl on
aarch64), so they read exactly the bytes counted, 2 per weight. The ``blas`` variant of w32
is numpy's ``W @ x`` on the float32 matrix, with as many BLAS threads as the run's
``--threads`` for that row (threadpoolctl), so a user sees numba's GEMV beside the vendor
library's on the same machine.
"""

from __future__ import annotations

import contextlib

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from gemvbw.kernels._common import FASTMATH, ROWS, half_to_f32, row_chunks
from gemvbw.kernels.isa.common import F16, F32, I16, fn, vec

LANES = 8  # floats per step: one 256-bit register on x86, two NEON registers


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w32_ref(w, x, y):
    """Reference loop: per row, sum w*x."""
    for r in prange(w.shape[0]):
        row = w[r]
        s = np.float32(0.0)
        for k in range(row.shape[0]):
            s += row[k] * x[k]
        y[r] = s


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w32_rows4(w, x, y, chunks):
    """Four rows per step sharing each activation load, 8 lanes of FMA per row."""
    M, K = w.shape
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            w0, w1, w2, w3 = w[r], w[r + 1], w[r + 2], w[r + 3]
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for k in range(K):
                xv = x[k]
                s0 += w0[k] * xv
                s1 += w1[k] * xv
                s2 += w2[k] * xv
                s3 += w3[k] * xv
            y[r] = s0
            y[r + 1] = s1
            y[r + 2] = s2
            y[r + 3] = s3
    for r in range(groups * ROWS, M):
        s = np.float32(0.0)
        for k in range(K):
            s += w[r, k] * x[k]
        y[r] = s


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w16_ref(w, x, y):
    """Reference loop over the fp16 bits: per row, convert each weight and sum w*x."""
    for r in prange(w.shape[0]):
        row = w[r]
        s = np.float32(0.0)
        for k in range(row.shape[0]):
            s += half_to_f32(row[k]) * x[k]
        y[r] = s


@intrinsic
def _dot4_f16(typingctx, w, r, x):
    """(sum w[r+i, :] * x for i in 0..3) as float32: the loop in IR, 8 fp16 weights per row and step converted
    by fpext and multiplied into 8-lane accumulators, then reduced (fast-math: any order)."""
    sig = types.UniTuple(types.float32, 4)(w, r, x)

    def codegen(context, builder, sig, args):
        wty, _, xty = sig.args
        W = context.make_array(wty)(context, builder, args[0])
        X = context.make_array(xty)(context, builder, args[2])
        row = context.cast(builder, args[1], sig.args[1], types.intp)
        K = builder.extract_value(X.shape, 0)
        stride = builder.extract_value(W.strides, 0)  # bytes per row
        base = builder.ptrtoint(W.data, ir.IntType(64))
        v8f, v8h = vec(F32, LANES), vec(I16, LANES)
        rows = [builder.inttoptr(builder.add(base, builder.mul(builder.add(row, ir.Constant(row.type, i)), stride)),
                                 ir.IntType(16).as_pointer()) for i in range(ROWS)]
        accs = [cgutils.alloca_once_value(builder, ir.Constant(v8f, [0.0] * LANES)) for _ in range(ROWS)]
        steps = builder.udiv(K, ir.Constant(K.type, LANES))
        flags = ("reassoc", "contract", "nsz")
        with cgutils.for_range(builder, steps) as loop:
            k = builder.mul(loop.index, ir.Constant(K.type, LANES))
            xv = builder.load(builder.bitcast(builder.gep(X.data, [k]), v8f.as_pointer()), align=4)
            for p, acc in zip(rows, accs):
                h = builder.load(builder.bitcast(builder.gep(p, [k]), v8h.as_pointer()), align=2)
                wv = builder.fpext(builder.bitcast(h, vec(F16, LANES)), v8f)
                builder.store(builder.fadd(builder.load(acc), builder.fmul(wv, xv, flags=flags), flags=flags), acc)
        reduce = fn(builder, "llvm.vector.reduce.fadd.v8f32", F32, [F32, v8f])
        sums = []
        tail_start = builder.mul(steps, ir.Constant(K.type, LANES))
        for p, acc in zip(rows, accs):
            s = builder.call(reduce, [ir.Constant(F32, 0.0), builder.load(acc)], fastmath=flags)
            sp = cgutils.alloca_once_value(builder, s)
            with cgutils.for_range_slice(builder, tail_start, K, ir.Constant(K.type, 1)) as (k, _):  # K % 8 weights left
                wk = builder.fpext(builder.bitcast(builder.load(builder.gep(p, [k])), F16), F32)
                xk = builder.load(builder.gep(X.data, [k]))
                builder.store(builder.fadd(builder.load(sp), builder.fmul(wk, xk)), sp)
            sums.append(builder.load(sp))
        return context.make_tuple(builder, sig.return_type, sums)

    return sig, codegen


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_w16_rows4(w, x, y, chunks):
    """Four rows per step; the fp16 bits converted in registers (fpext, 8 lanes), FMA against x."""
    M = w.shape[0]
    groups = M // ROWS
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        for g in range(c * per, min(groups, (c + 1) * per)):
            r = g * ROWS
            s0, s1, s2, s3 = _dot4_f16(w, r, x)
            y[r] = s0
            y[r + 1] = s1
            y[r + 2] = s2
            y[r + 3] = s3
    for r in range(groups * ROWS, M):
        row = w[r]
        s = np.float32(0.0)
        for k in range(row.shape[0]):
            s += half_to_f32(row[k]) * x[k]
        y[r] = s


# --- numpy's BLAS --------------------------------------------------------------------------------

def blas_threads(threads: int):
    """A context in which numpy's BLAS runs ``threads`` threads (restored after); gemvbw otherwise keeps it
    at one, so that its idle threads do not take the cores from the kernels timed next."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; without it the BLAS keeps its thread count
        return contextlib.nullcontext()
    return threadpool_limits(threads, user_api="blas")


def blas_facts() -> str:
    """Which BLAS numpy runs and with how many threads now (threadpoolctl reports it)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover
        return "numpy's BLAS (threadpoolctl not installed: library unknown)"
    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not libs:
        return "numpy's BLAS (threadpoolctl finds none loaded)"
    i = libs[0]
    layer = f", {i['threading_layer']}" if i.get("threading_layer") else ""
    return f"{i.get('internal_api')} {i.get('version')}{layer}, {i.get('num_threads')} thread(s)"


def bind_blas(qm):
    W = qm.weights

    def run(x: np.ndarray, y: np.ndarray) -> None:
        np.dot(W, x, out=y)

    return run

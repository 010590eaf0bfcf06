"""LLVM IR helpers shared by every tier: vector types, loads, splats, prefetch, fp16 metadata.

All of this is generic IR that any LLVM backend lowers (to AVX2, AVX-512 or NEON): only the
integer dot products and the per-row reduction differ by tier (see x86.py and neon.py).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils
from numba.core import types

I1, I8, I16, I32 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32)
F32, F16 = ir.FloatType(), ir.HalfType()


def vec(elem, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


V8F = vec(F32, 8)
V8I32 = vec(I32, 8)


def fn(builder, name: str, ret, args) -> ir.Function:
    """Declare (once per module) and return an LLVM function or intrinsic by its full name."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


def ptr(context, builder, arrty, arr, offset, vty):
    """A pointer of vector type vty to arr.data + offset (in elements)."""
    a = context.make_array(arrty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [offset]), vty.as_pointer())


def load(context, builder, arrty, arr, offset, vty):
    """An unaligned vector load from arr.data + offset (in elements)."""
    return builder.load(ptr(context, builder, arrty, arr, offset, vty), align=1)


def splat(vty, value):
    return ir.Constant(vty, [value] * vty.count)


def broadcast(builder, value, vty):
    """A value computed at run time in every lane of vty (LLVM folds a broadcast load into an instruction's
    memory operand where the ISA has one, as AVX-512's {1to16})."""
    one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, const(0))
    return builder.shuffle_vector(one, one, ir.Constant(vec(I32, vty.count), [0] * vty.count))


def const(value, ty=I32):
    return ir.Constant(ty, value)


def off(builder, base, k: int):
    return builder.add(base, ir.Constant(base.type, k))


def concat(builder, a, b):
    n = a.type.count
    return builder.shuffle_vector(a, b, ir.Constant(vec(I32, 2 * n), list(range(2 * n))))


def halves(builder, v):
    """The low and high halves of a vector."""
    n = v.type.count // 2
    lo = builder.shuffle_vector(v, v, ir.Constant(vec(I32, n), list(range(n))))
    hi = builder.shuffle_vector(v, v, ir.Constant(vec(I32, n), list(range(n, 2 * n))))
    return lo, hi


# llvm.prefetch locality -> the x86 instruction it becomes (aarch64: 0 prfm pldl1strm, 1-3 pldl3/2/1keep)
HINTS = {0: "prefetchnta", 1: "prefetcht2", 2: "prefetcht1", 3: "prefetcht0"}


def prefetch(context, builder, arrty, arr, offset, nbytes: int, locality: int = 0) -> None:
    """Ask for the cache lines of arr[offset:offset+nbytes]: a hint that never faults, even past the end.
    locality 0 (prefetchnta, used once) to 3 (prefetcht0, keep in every level)."""
    f = fn(builder, "llvm.prefetch.p0", ir.VoidType(), [I8.as_pointer(), I32, I32, I32])
    for line in range(0, nbytes, 64):  # read, the given locality, data cache
        p = ptr(context, builder, arrty, arr, off(builder, offset, line), I8)
        builder.call(f, [p, const(0), const(locality), const(1)])


def meta(context, builder, mty, arr, mofs, lanes: int = 8, half: bool | None = None):
    """lanes metadata values as <lanes x float> from arr at mofs (in arr's elements): fp16 bits through fpext
    (vcvtph2ps on x86, fcvtl on aarch64), or float32 as they are. half: whether they are fp16 (default: arr is
    uint16), for metadata stored among other bytes."""
    if (mty.dtype == types.uint16) if half is None else half:
        raw = load(context, builder, mty, arr, mofs, vec(I16, lanes))
        return builder.fpext(builder.bitcast(raw, vec(F16, lanes)), vec(F32, lanes))
    return load(context, builder, mty, arr, mofs, vec(F32, lanes))

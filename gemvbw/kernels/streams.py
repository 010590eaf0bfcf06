"""The skeleton every int8-activation kernel runs on: row groups, several streams per thread, leftovers.

Both layouts (the row-chunk block pairs of :mod:`gemvbw.kernels.packed`, the column tiles of
:mod:`gemvbw.kernels.tile`) split the rows the same way: groups of R rows, each stored as a
sequence of steps (a block pair of 4 rows, a tile of R rows x one block), a chunk of groups per
thread. Each thread streams several groups at once (:func:`stream_count`: two, the column tiles as
many as their CPU wants, gemvbw.kernels.tile.plain_streams), one from each part of its chunk: two
streams keep more cache misses in flight than one stream of dense work (measured on Zen 4, 4096x14336
cold, one process, against a plain read of the same bytes: packed-4x2 at 1 thread w8 88 -> 95 %, w4
70 -> 82 %, w2 57 -> 68 %; 2 threads w8 92 -> 97 %, w3 89 -> 94 %, w2 77 -> 83 %; three or four
streams did no better for packed-4x2, while the column tiles gain from four on Zen 4). Blocks after
the layout's last step (an odd last full block of a pair, a shorter last block) and the last M % R
rows are read from the matrix as stored, by the width's f32 loop.

A layout is the kernel's first three arguments: its tag (a numba type carrying tier, width and
whatever else is compile-time), its repacked copy and its metadata (the copy again where the tiles
hold their own). Inside, :func:`layout` makes of them ``lay``, a tuple ``(copy, steps per group,
...)`` of whatever its steps read. It supplies, as overloads on its tag type, the functions below:

- :func:`layout`: that tuple, from the copy, the metadata and K;
- :func:`group_rows`, :func:`acc_lanes`: rows per group, float accumulators per group;
- :func:`scratch_bytes`, :func:`prepare`: the workspace bytes its activations take, and what its steps
  read of the quantized activations, written there (packed-4x2 permutes them);
- :func:`step`: adds step s of a group, stored at index k of the copy, to the accumulators;
- :func:`row_sum`, :func:`first_leftover`: row i's sum from stream k's accumulators, and the first block left over.

numba compiles :func:`gemv_streams` once per tag type, with everything above inlined: one
skeleton in the source, one specialised loop per (layout, tier, width) in the machine code.

A call allocates nothing: the quantized activations, the layout's scratch and each chunk's accumulators
live in a workspace allocated when the kernel is bound (:func:`work_layout`). A bound call passes x and y as
arrays and everything fixed at binding (the copy, the metadata, the workspace and the matrix as stored) as
addresses and sizes (:func:`bind`, :func:`_gemv_at`), since unboxing an array costs far more than an integer
after a cache flush (a tuple is unboxed item by item, so it is no way round). Both are what a small shape
pays after a flush: measured on Zen 4, 1 thread, each call after a 64 MiB flush, an empty function of two
arrays 7.0 us, of five arrays 9.2 us, of a tuple (array, int) and two arrays 10.5 us; quantizing K=1024
into new arrays 4.9 us above an empty call, into kept ones 1.2 us; and on Zen 4 again (2026-12-04,
interleaved, 15 rounds of 20 cold calls, medians), the six fixed arrays passed by address instead of as
arrays: 16x128 calls 1.7-3.3 us faster at 1 and 2 threads, 1024x1024 ones 1.6-2.9 us. A bound kernel is
therefore not reentrant: two calls at once on one binding would share its workspace (gemvbw calls one at a
time).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import carray, njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

from gemvbw.kernels import w2 as _w2
from gemvbw.kernels import w3 as _w3
from gemvbw.kernels import w4 as _w4
from gemvbw.kernels import w8 as _w8
from gemvbw.kernels._common import FASTMATH, aligned_full, load_meta, row_chunks, serial_twin
from gemvbw.kernels.activations import quantize_into

# --- what each layout supplies (stubs: the overloads live beside each layout) ----------------------


def group_rows(tag):  # pragma: no cover - replaced by the overloads inside numba
    raise NotImplementedError


def acc_lanes(tag):  # pragma: no cover
    raise NotImplementedError


def layout(tag, copy, meta, K):  # pragma: no cover
    raise NotImplementedError


def scratch_bytes(tag, K):  # pragma: no cover
    raise NotImplementedError


def prepare(tag, lay, xq, d, xs, scratch):  # pragma: no cover
    raise NotImplementedError


def step(tag, lay, k, s, act, acc):  # pragma: no cover
    raise NotImplementedError


def row_sum(tag, accs, k, i):  # pragma: no cover
    raise NotImplementedError


def first_leftover(tag, lay):  # pragma: no cover
    raise NotImplementedError


def stream_count(tag):  # pragma: no cover
    raise NotImplementedError


# --- what is read as stored: the f32 loop of the width ---------------------------------------------

_F32_LOOPS = {8: _w8, 4: _w4, 3: _w3, 2: _w2}


def leftover_dot(tag, row, x, b, block):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(leftover_dot)
def _leftover_dot_impl(tag, row, x, b, block):
    dot_block = _F32_LOOPS[tag.bits]._dot_block
    return lambda tag, row, x, b, block: dot_block(row, x, b, block)


def row_ref(tag, codes, scale, offset, x, xsum, block, r):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(row_ref)
def _row_ref_impl(tag, codes, scale, offset, x, xsum, block, r):
    ref = _F32_LOOPS[tag.bits]._row_ref
    return lambda tag, codes, scale, offset, x, xsum, block, r: ref(codes, scale, offset, x, xsum, block, r)


# --- the workspace ---------------------------------------------------------------------------------

@njit(cache=True)
def _up64(n):
    return (n + 63) // 64 * 64


@njit(cache=True)
def work_layout(K, nb, lanes, chunks, scratch, nstreams):
    """Byte offsets in a kernel's workspace of d (nb + 1 float32, the last a scratch word), d*sum(xq)
    (nb), xq*d (K), the accumulators (``nstreams`` of ``lanes`` float32 per chunk, each chunk on its own
    cache lines), the layout's scratch (``scratch`` bytes); and the workspace's size. xq (nb * 64 int8) comes
    first, at 0; every section starts on a 64-byte line. Called from Python to allocate it (zeroed: xq's
    padding after K stays zero) and from the kernel to find its sections."""
    o_d = _up64(nb * 64)
    o_xs = o_d + _up64(4 * (nb + 1))
    o_xdq = o_xs + _up64(4 * nb)
    o_acc = o_xdq + _up64(4 * K)
    o_scratch = o_acc + chunks * _up64(4 * nstreams * lanes)
    return o_d, o_xs, o_xdq, o_acc, o_scratch, o_scratch + _up64(scratch)


def new_work(K: int, nb: int, lanes: int, chunks: int, scratch: int, nstreams: int) -> np.ndarray:
    """A zeroed workspace for a binding (see :func:`work_layout`), on a cache line, so that its sections are."""
    return aligned_full(work_layout(K, nb, lanes, chunks, scratch, nstreams)[-1], 0)


def bind(args: tuple):
    """run(x, y) of :func:`gemv_streams` on a layout's ``kernel_args`` (whose x and y give the types it is
    compiled for), for either layout. Not reentrant: its calls share the workspace in ``args``.

    The call passes the six arrays fixed at binding (copy, metadata, workspace, codes, scale, offset) as
    their addresses and sizes, and only x and y as arrays: see :func:`_gemv_at`. ``run`` keeps ``args``,
    so those arrays live as long as it does."""
    from gemvbw.kernels import check_xy, compiled

    tag, copy, meta, work, codes, scale, offset, x, block, y, chunks = args
    for a in (copy, meta, work, codes, scale, offset):
        if not a.flags.c_contiguous:  # the addresses are read as C arrays
            raise ValueError("a kernel's fixed arrays must be C-contiguous")
    if codes.dtype != np.uint8 or work.dtype != np.uint8 or offset.dtype != scale.dtype:
        raise TypeError("codes and the workspace are uint8, offset has scale's type")
    head = (tag, _address_of(copy), copy.size, copy.dtype.type(0), _address_of(meta), meta.size,
            meta.dtype.type(0), _address_of(work), work.size, _address_of(codes), codes.shape[0], codes.shape[1],
            _address_of(scale), _address_of(offset), scale.shape[1], scale.dtype.type(0))
    entry = _gemv_at_serial if numba.get_num_threads() == 1 else _gemv_at
    call = compiled(entry, *head, x, block, y, chunks)
    K, M, checked = x.shape[0], y.shape[0], [None, None]

    def run(x: np.ndarray, y: np.ndarray) -> None:
        if x is not checked[0] or y is not checked[1]:
            check_xy(x, y, K, M, checked)
        call(*head, x, block, y, chunks)

    run.args = args  # what the addresses point into, kept alive with the binding
    return run


def _address_of(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# --- the skeleton ---------------------------------------------------------------------------------

@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_streams(tag, copy, meta, work, codes, scale, offset, x, block, y, chunks):
    """y = W x with int8 activations on a repacked layout (see the module's docstring). Blocks of 64 only.
    ``work``: the binding's workspace, of :func:`work_layout`'s size for these shapes and ``chunks``."""
    M = codes.shape[0]
    K = x.shape[0]
    nb = scale.shape[1]
    R = group_rows(tag)
    lanes = acc_lanes(tag)
    lay = layout(tag, copy, meta, K)
    steps = lay[1]
    o_d, o_xs, o_xdq, o_acc, o_scratch, size = work_layout(K, nb, lanes, chunks, scratch_bytes(tag, K),
                                                           stream_count(tag))
    if work.shape[0] < size:
        raise ValueError("the kernel's workspace is smaller than its shapes need")
    xq = work[:nb * 64].view(np.int8)
    d = work[o_d:o_d + 4 * (nb + 1)].view(np.float32)
    xs = work[o_xs:o_xs + 4 * nb].view(np.float32)
    xdq = work[o_xdq:o_xdq + 4 * K].view(np.float32)
    groups = M // R
    # xq * d is read only by the leftovers (blocks after the last step, rows after the last group)
    quantize_into(x, block, nb, xq, d, xs, xdq, first_leftover(tag, lay) < nb or groups * R < M)
    act = prepare(tag, lay, xq, d, xs, work[o_scratch:size])
    nchunks, per = row_chunks(groups, chunks)
    S = stream_count(tag)
    for c in prange(nchunks):
        acc_at = o_acc + c * _up64(4 * S * lanes)
        accs = work[acc_at:acc_at + 4 * S * lanes].view(np.float32).reshape(S, lanes)
        lo, hi = c * per, min(groups, (c + 1) * per)
        q = (hi - lo + S - 1) // S  # stream k starts at group lo + k*q of the chunk
        for j in range(q):
            accs[:] = 0
            if lo + (S - 1) * q + j < hi:  # every stream has a group j
                for s in range(steps):
                    for k in range(S):
                        step(tag, lay, (lo + k * q + j) * steps + s, s, act, accs[k])
            else:  # the last streams are one group shorter: the rest one at a time
                for k in range(S):
                    if lo + k * q + j < hi:
                        for s in range(steps):
                            step(tag, lay, (lo + k * q + j) * steps + s, s, act, accs[k])
            # the groups' sums into y, plus the blocks left over. Written out here: as a function (even one
            # numba inlines) it cost a call, or the reference counts of its array arguments, per group: about
            # 300 cycles per pair of groups, measured on Zen 5 (1 thread, warm, 16c4-zmm w2 at K=1024: 10.5 ns
            # per tile out of line, 9.4 inlined by numba, 5.6 written out)
            for k in range(S):
                g = lo + k * q + j
                if g < hi:
                    for i in range(R):
                        a = row_sum(tag, accs, k, i)
                        for b in range(first_leftover(tag, lay), nb):
                            a += load_meta(scale, g * R + i, b) * leftover_dot(tag, codes[g * R + i], xdq, b, block) \
                                + load_meta(offset, g * R + i, b) * xs[b]
                        y[g * R + i] = a
    for r in range(groups * R, M):
        y[r] = row_ref(tag, codes, scale, offset, xdq, xs, block, r)


# --- the call: arrays fixed at binding passed by address ------------------------------------------

@intrinsic
def _voidptr(typingctx, address):
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(address), codegen


def _array_at(address, shape, kind):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(_array_at, inline="always")
def _array_at_impl(address, shape, kind):
    dtype = as_dtype(kind)  # a scalar of the array's type says which
    return lambda address, shape, kind: carray(_voidptr(address), shape, dtype)


# Each array argument is unboxed per call (its object, shape and strides read, a reference made and
# dropped), which after a cache flush costs about 0.7 us an array on Zen 4 (an empty function of two arrays
# 7.0 us, of five 9.2 us); an integer or a scalar costs next to nothing. So the six arrays a binding fixes
# arrive as addresses and sizes (and a scalar of each one's type), the binding holding the arrays, and are
# made arrays again here, without a copy or a reference count.
@njit(inline="always")
def _fixed_arrays(copy_at, copy_n, copy_kind, meta_at, meta_n, meta_kind, work_at, work_n, codes_at, M, row_bytes,
                  scale_at, offset_at, nb, meta_value_kind):
    return (_array_at(copy_at, copy_n, copy_kind), _array_at(meta_at, meta_n, meta_kind),
            _array_at(work_at, work_n, np.uint8(0)), _array_at(codes_at, (M, row_bytes), np.uint8(0)),
            _array_at(scale_at, (M, nb), meta_value_kind), _array_at(offset_at, (M, nb), meta_value_kind))


@njit(cache=True)
def _gemv_at(tag, copy_at, copy_n, copy_kind, meta_at, meta_n, meta_kind, work_at, work_n, codes_at, M, row_bytes,
             scale_at, offset_at, nb, meta_value_kind, x, block, y, chunks):
    copy, meta, work, codes, scale, offset = _fixed_arrays(copy_at, copy_n, copy_kind, meta_at, meta_n, meta_kind,
                                                           work_at, work_n, codes_at, M, row_bytes, scale_at,
                                                           offset_at, nb, meta_value_kind)
    gemv_streams(tag, copy, meta, work, codes, scale, offset, x, block, y, chunks)


# with one thread: gemv_streams without its parallel launch (see gemvbw.kernels.compiled)
_gemv_streams_serial = serial_twin(gemv_streams)


@njit(cache=True)
def _gemv_at_serial(tag, copy_at, copy_n, copy_kind, meta_at, meta_n, meta_kind, work_at, work_n, codes_at, M,
                    row_bytes, scale_at, offset_at, nb, meta_value_kind, x, block, y, chunks):
    copy, meta, work, codes, scale, offset = _fixed_arrays(copy_at, copy_n, copy_kind, meta_at, meta_n, meta_kind,
                                                           work_at, work_n, codes_at, M, row_bytes, scale_at,
                                                           offset_at, nb, meta_value_kind)
    _gemv_streams_serial(tag, copy, meta, work, codes, scale, offset, x, block, y, chunks)

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
- :func:`row_sum`, :func:`first_leftover`: row i's sum from stream k's accumulators, and the first block left over;
- :func:`stream_count`, :func:`stream_turn`: groups each thread reads at once, and steps of one group before the
  next group's turn (1 or 2, :data:`TURNS`; see :func:`steps_of_groups`).

numba compiles :func:`gemv_streams` once per tag type, with everything above inlined: one
skeleton in the source, one specialised loop per (layout, tier, width) in the machine code.

A call allocates nothing: the quantized activations, the layout's scratch and each chunk's accumulators
live in a workspace allocated when the kernel is bound (:func:`work_layout`), so a bound kernel is not
reentrant: two calls at once on one binding would share it (gemvbw calls one at a time). A bound call passes
everything (the copy, the metadata, the workspace and the matrix as stored, block, chunks, x and y) as the
address of one frame of integers (:func:`bind`, :func:`_gemv_at`), since after a cache
flush unboxing an array costs far more than an integer, and even integers add up (a tuple is unboxed item by
item, so it is no way round). Both are what a small shape pays after a flush: measured on Zen 4, 1 thread,
each call after a 64 MiB flush, an empty function of two arrays 7.0 us, of five arrays 9.2 us, of a tuple
(array, int) and two arrays 10.5 us; quantizing K=1024 into new arrays 4.9 us above an empty call, into kept
ones 1.2 us. On Zen 4 again, interleaved, 15 rounds of 20 cold calls, medians: the six fixed arrays passed by
address instead of as arrays made 16x128 calls 1.7-3.3 us faster at 1 and 2 threads, 1024x1024 ones 1.6-2.9 us
(2026-12-04); their fourteen addresses and sizes passed as one frame instead of as arguments, and x and y
checked only when they change (:func:`gemvbw.kernels.check_xy`), made a 16x128 w4 call 15.9 -> 7.9 us and
1024x1024 w4 ones 36-38 -> 30-31 us at 1 thread, 40-42 -> 32-35 us at 2 (2026-12-05); x and y in the frame
too, and the timed call a partial of the machine code (:func:`gemvbw.kernels.call_on`), see the note above
:data:`FRAME_ITEMS`.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import carray, njit, prange, types
from numba.core import cgutils
from numba.extending import (NativeValue, intrinsic, models, overload, register_model, typeof_impl,
                             unbox)

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


def stream_turn(tag):  # pragma: no cover
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

    The call passes three things: the tag, the fixed arrays' element types (:class:`ArrayKinds`, nothing at
    run time) and the address of a frame of integers (the six arrays fixed at binding as addresses and sizes,
    block, chunks, and x's and y's addresses and sizes, written when a new pair is checked): see
    :func:`_gemv_at`. ``run`` keeps ``args``, the frame and the last pair, so the arrays live as long as it
    does; ``run.call_on(x, y)`` (see :func:`gemvbw.kernels.call_on`) gets a frame of its own."""
    from gemvbw.kernels import check_xy, compiled

    tag, copy, meta, work, codes, scale, offset, x, block, y, chunks = args
    for a in (copy, meta, work, codes, scale, offset):
        if not a.flags.c_contiguous:  # the addresses are read as C arrays
            raise ValueError("a kernel's fixed arrays must be C-contiguous")
    if codes.dtype != np.uint8 or work.dtype != np.uint8 or offset.dtype != scale.dtype:
        raise TypeError("codes and the workspace are uint8, offset has scale's type")
    kinds = ArrayKinds(copy.dtype, meta.dtype, scale.dtype)
    K, M, checked = x.shape[0], y.shape[0], [None, None]
    frame = np.array([_address_of(copy), copy.size, _address_of(meta), meta.size, _address_of(work), work.size,
                      _address_of(codes), codes.shape[0], codes.shape[1], _address_of(scale), _address_of(offset),
                      scale.shape[1], block, chunks, 0, K, 0, M], np.int64)
    frame_at = _address_of(frame)
    entry = _gemv_at_serial if numba.get_num_threads() == 1 else _gemv_at
    call = compiled(entry, tag, kinds, frame_at)

    def run(x: np.ndarray, y: np.ndarray) -> None:
        if x is not checked[0] or y is not checked[1]:
            check_xy(x, y, K, M, checked)  # ``checked`` now holds x and y: their addresses stay good
            frame[XY_AT], frame[XY_AT + 2] = _address_of(x), _address_of(y)
        call(tag, kinds, frame_at)

    def call_on(x: np.ndarray, y: np.ndarray):
        check_xy(x, y, K, M, [None, None])
        own = frame.copy()  # its own x and y: run(x, y) with another pair leaves this call as it is
        own[XY_AT], own[XY_AT + 2] = _address_of(x), _address_of(y)
        fixed = functools.partial(call, tag, kinds, _address_of(own))
        fixed.keep = run, own, x, y  # what its addresses point into
        return fixed

    run.args, run.frame, run.call_on = args, frame, call_on  # the arrays the addresses point into, kept alive
    return run


def _address_of(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# --- the skeleton ---------------------------------------------------------------------------------

TURNS = (1, 2)  # steps of a group before the next group's turn that steps_of_groups writes out


@njit(inline="always")
def steps_of_groups(tag, lay, first, q, steps, act, accs):
    """Every step of the S groups ``first``, ``first + q``, .., ``first + (S - 1) q`` (S: :func:`stream_count`) into
    accs[0 .. S-1], the groups taking turns: T steps of the first (T: :func:`stream_turn`), T of the second, ..,
    then the next T of the first; with T = 2 and an odd count of steps, the last step of each group alone. Each
    group's steps are added in their order whatever S and T, so its sums are the same bit for bit.

    T is 1 or 2 and the second call is written out, not looped over: in an ad hoc copy, a loop of two calls was
    left a loop by LLVM and read at 51 % of a plain read, the calls written out at 93 % (Zen 4, 16c4-zmm stacked
    w2, 4 groups, 1 thread, two runs minutes apart, 2026-12-07)."""
    S = stream_count(tag)
    T = stream_turn(tag)
    whole = steps - steps % T
    for s in range(0, whole, T):
        for k in range(S):
            at = (first + k * q) * steps + s
            step(tag, lay, at, s, act, accs[k])
            if T == 2:
                step(tag, lay, at + 1, s + 1, act, accs[k])
    if T == 2:
        for s in range(whole, steps):
            for k in range(S):
                step(tag, lay, (first + k * q) * steps + s, s, act, accs[k])


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
                steps_of_groups(tag, lay, lo + j, q, steps, act, accs)
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

class ArrayKinds:
    """The element types of a binding's copy, metadata and scales, as an argument that passes nothing at run
    time: its numba type carries them (a numpy scalar of each type, as these were passed before, is unboxed
    on every call)."""

    def __init__(self, copy, meta, scale):
        self.names = (np.dtype(copy).str, np.dtype(meta).str, np.dtype(scale).str)


class ArrayKindsType(types.Type):
    def __init__(self, names: tuple[str, str, str]):
        self.names = names
        super().__init__(name=f"ArrayKinds({','.join(names)})")


@typeof_impl.register(ArrayKinds)
def _typeof_kinds(val, c):
    return ArrayKindsType(val.names)


register_model(ArrayKindsType)(models.OpaqueModel)


@unbox(ArrayKindsType)
def _unbox_kinds(typ, obj, c):
    return NativeValue(c.context.get_dummy_value())  # the type is the value


@intrinsic
def _voidptr(typingctx, address):
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(address), codegen


def _array_at(address, shape, kinds, which):  # pragma: no cover - replaced by the overload inside numba
    raise NotImplementedError


@overload(_array_at, inline="always", prefer_literal=True)
def _array_at_impl(address, shape, kinds, which):
    """An array at an address: its element type one of ``kinds``' (``which``-th) or named by a literal."""
    if isinstance(which, types.IntegerLiteral) and isinstance(kinds, (ArrayKindsType, types.StringLiteral)):
        name = kinds.names[which.literal_value] if isinstance(kinds, ArrayKindsType) else kinds.literal_value
        dtype = np.dtype(name)
        return lambda address, shape, kinds, which: carray(_voidptr(address), shape, dtype)


# Each argument is unboxed per call, which after a cache flush is not free: an array (its object, shape and
# strides read, a reference made and dropped) about 0.7 us on Zen 4 (an empty function of two arrays 7.0 us,
# of five 9.2 us), and even an integer about 0.1 us (an empty function of 18 integers and two arrays 5.9 us,
# of two arrays alone 3.6 us, 2026-12-05). So everything arrives as the address of one frame of integers (the
# six fixed arrays' addresses and sizes, block, chunks, then x's and y's: an empty function of the tag, the kinds,
# an integer and two arrays 4.9-5.0 us after a 128 MiB flush, of the first three alone 3.4-3.8 us, 2026-12-05), the binding
# holding the arrays, and the arrays are made again here, without a copy or a reference count.
FRAME_ITEMS = 18
XY_AT = 14  # x's address, K, y's address, M


@njit(inline="always")
def _unframe(kinds, frame_at):
    f = _array_at(frame_at, FRAME_ITEMS, "<i8", 0)
    copy = _array_at(f[0], f[1], kinds, 0)
    meta = _array_at(f[2], f[3], kinds, 1)
    work = _array_at(f[4], f[5], "|u1", 0)
    codes = _array_at(f[6], (f[7], f[8]), "|u1", 0)
    scale = _array_at(f[9], (f[7], f[11]), kinds, 2)
    offset = _array_at(f[10], (f[7], f[11]), kinds, 2)
    x = _array_at(f[XY_AT], f[XY_AT + 1], "<f4", 0)
    y = _array_at(f[XY_AT + 2], f[XY_AT + 3], "<f4", 0)
    return copy, meta, work, codes, scale, offset, f[12], f[13], x, y


@njit(cache=True)
def _gemv_at(tag, kinds, frame_at):
    copy, meta, work, codes, scale, offset, block, chunks, x, y = _unframe(kinds, frame_at)
    gemv_streams(tag, copy, meta, work, codes, scale, offset, x, block, y, chunks)


# with one thread: gemv_streams without its parallel launch (see gemvbw.kernels.compiled)
_gemv_streams_serial = serial_twin(gemv_streams)


@njit(cache=True)
def _gemv_at_serial(tag, kinds, frame_at):
    copy, meta, work, codes, scale, offset, block, chunks, x, y = _unframe(kinds, frame_at)
    _gemv_streams_serial(tag, copy, meta, work, codes, scale, offset, x, block, y, chunks)

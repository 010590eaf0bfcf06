"""The skeleton every int8-activation kernel runs on: row groups, two streams per thread, leftovers.

Both layouts (the row-chunk block pairs of :mod:`gemvbw.kernels.packed`, the column tiles of
:mod:`gemvbw.kernels.tile`) split the rows the same way: groups of R rows, each stored as a
sequence of steps (a block pair of 4 rows, a tile of R rows x one block), a chunk of groups per
thread. Each thread streams two groups at once, one from each half of its chunk: two streams keep
more cache misses in flight than one stream of dense work (measured on Zen 4, 4096x14336 cold, one
process, against a plain read of the same bytes: packed-4x2 at 1 thread w8 88 -> 95 %, w4 70 ->
82 %, w2 57 -> 68 %; 2 threads w8 92 -> 97 %, w3 89 -> 94 %, w2 77 -> 83 %; three or four streams
did no better). Blocks after the layout's last step (an odd last full block of a pair, a shorter
last block) and the last M % R rows are read from the matrix as stored, by the width's f32 loop.

A layout is the kernel's first two arguments: its tag (a numba type carrying tier, width and
whatever else is compile-time) and ``lay``, a tuple ``(copy, steps per group, ...)`` of its
repacked copy and whatever else its steps read. It supplies, as overloads on its tag type, of the functions below:

- :func:`group_rows`, :func:`acc_lanes`: rows per group, float accumulators per group;
- :func:`prepare`: what its steps read of the quantized activations (packed-4x2 permutes them);
- :func:`step`: adds step s of a group, stored at index k of the copy, to the accumulators;
- :func:`row_sum`, :func:`first_leftover`: row i's sum from them, and the first block left over.

numba compiles :func:`gemv_streams` once per tag type, with everything above inlined: one
skeleton in the source, one specialised loop per (layout, tier, width) in the machine code.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from gemvbw.kernels import w2 as _w2
from gemvbw.kernels import w3 as _w3
from gemvbw.kernels import w4 as _w4
from gemvbw.kernels import w8 as _w8
from gemvbw.kernels._common import FASTMATH, load_meta, row_chunks
from gemvbw.kernels.activations import quantize_activations

# --- what each layout supplies (stubs: the overloads live beside each layout) ----------------------


def group_rows(tag):  # pragma: no cover - replaced by the overloads inside numba
    raise NotImplementedError


def acc_lanes(tag):  # pragma: no cover
    raise NotImplementedError


def prepare(tag, lay, xq, d, xs):  # pragma: no cover
    raise NotImplementedError


def step(tag, lay, k, s, act, acc):  # pragma: no cover
    raise NotImplementedError


def row_sum(tag, acc, i):  # pragma: no cover
    raise NotImplementedError


def first_leftover(tag, lay):  # pragma: no cover
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


# --- the skeleton ---------------------------------------------------------------------------------

@njit(cache=True, fastmath=FASTMATH)
def _finish(tag, lay, acc, r0, codes, scale, offset, xdq, xs, block, y):
    """A group's sums into y, plus the blocks left over."""
    nb = scale.shape[1]
    for i in range(group_rows(tag)):
        a = row_sum(tag, acc, i)
        for b in range(first_leftover(tag, lay), nb):
            a += load_meta(scale, r0 + i, b) * leftover_dot(tag, codes[r0 + i], xdq, b, block) \
                + load_meta(offset, r0 + i, b) * xs[b]
        y[r0 + i] = a


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def gemv_streams(tag, lay, codes, scale, offset, x, block, y, chunks):
    """y = W x with int8 activations on a repacked layout (see the module's docstring). Blocks of 64 only."""
    M = codes.shape[0]
    nb = scale.shape[1]
    R = group_rows(tag)
    steps = lay[1]
    xq, d, xs, xdq = quantize_activations(x, block, nb)
    act = prepare(tag, lay, xq, d, xs)
    groups = M // R
    nchunks, per = row_chunks(groups, chunks)
    for c in prange(nchunks):
        acc = np.zeros(acc_lanes(tag), np.float32)
        acc2 = np.zeros(acc_lanes(tag), np.float32)
        lo, hi = c * per, min(groups, (c + 1) * per)
        h = (hi - lo + 1) // 2  # the second stream starts half-way through the chunk
        for j in range(h):
            g, g2 = lo + j, lo + h + j
            acc[:] = 0
            if g2 < hi:
                acc2[:] = 0
                for s in range(steps):
                    step(tag, lay, g * steps + s, s, act, acc)
                    step(tag, lay, g2 * steps + s, s, act, acc2)
                _finish(tag, lay, acc2, g2 * R, codes, scale, offset, xdq, xs, block, y)
            else:  # an odd number of groups: the last one alone
                for s in range(steps):
                    step(tag, lay, g * steps + s, s, act, acc)
            _finish(tag, lay, acc, g * R, codes, scale, offset, xdq, xs, block, y)
    for r in range(groups * R, M):
        y[r] = row_ref(tag, codes, scale, offset, xdq, xs, block, r)

"""Every registered kernel against the slow numpy reference, on small shapes and both thread counts."""

import os
from pathlib import Path

import numba
import numpy as np
import pytest
from numba import njit

from gemvbw import kernels
from gemvbw.kernels import packed, tile
from gemvbw.kernels._common import half_to_f32
from gemvbw.quant import quantize, random_activations, random_quantized
from gemvbw.verify import reference_gemv, verify

SHAPES = [(1, 8, 8), (7, 64, 64), (13, 100, 64), (33, 1000, 64), (5, 37, 8), (16, 200, 32), (3, 64, 128)]
ALL_SPECS = [s for act in ("f32", "i8") for b in (32, 16, 8, 4, 3, 2) for s in kernels.variants(b, act)]
# Under emulation (the aarch64 stage of CI) compiling is about 8x slower and dominates: there the f32 loops,
# which no tier changes, are checked with fp16 metadata only; every int8 tier with both.
EMULATED = os.environ.get("GEMVBW_EMULATED_CPU") is not None


def spec_id(s):
    return f"w{s.bits}-{s.act}-{s.variant}"


@njit
def _convert_all(h, out):
    for i in range(h.shape[0]):
        out[i] = half_to_f32(h[i])


def test_half_conversion_is_exact_for_every_float16():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.empty(65536, dtype=np.float32)
    _convert_all(h, out)
    expected = h.view(np.float16).astype(np.float32)
    assert np.array_equal(out, expected, equal_nan=True)


@pytest.mark.parametrize("spec", ALL_SPECS, ids=spec_id)
@pytest.mark.parametrize("M,K,block", SHAPES + [(9, 14336, 64), (21, 130, 64)])
@pytest.mark.parametrize("meta_bytes", [2, 4])
def test_kernel_matches_reference(spec, M, K, block, meta_bytes):
    if spec.blocks is not None and block not in spec.blocks:
        pytest.skip(f"{spec_id(spec)} handles blocks {spec.blocks}")
    if EMULATED and spec.act == "f32" and meta_bytes == 4:
        pytest.skip("emulated: the f32 loops are checked with fp16 metadata only (compiling is 8x slower)")
    if spec.bits in (32, 16) and (meta_bytes == 4 or block != 64):
        pytest.skip("unquantized weights have no blocks and no metadata: checked once per shape")
    qm = random_quantized(M, K, bits=spec.bits, block=block, meta_bytes=meta_bytes, seed=M + K)
    x = random_activations(K, seed=K)
    result = verify(spec, qm, x)
    assert result.ok, f"max rel err {result.max_rel_err}"
    assert result.max_rel_err < 1e-5


def test_blas_runs_with_the_threads_asked_for_that_row_and_restores_them():
    from threadpoolctl import threadpool_info

    spec = kernels.get(32, "f32", "blas")
    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    with spec.session(2):
        inside = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert "2 thread(s)" in spec.facts() or not inside
    assert inside == [2] * len(inside)
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", ALL_SPECS, ids=spec_id)
def test_kernel_thread_counts_agree(spec, threads):
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    qm = random_quantized(67, 320, bits=spec.bits, block=64, seed=3)
    x = random_activations(320, seed=3)
    old = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        y = np.empty(qm.M, dtype=np.float32)
        spec.bind(qm)(x, y)
    finally:
        numba.set_num_threads(old)
    ref, bound = reference_gemv(qm, spec.reference_x(x, qm.block))
    assert np.all(np.abs(y - ref) <= 1e-5 * bound)


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_gemv_on_quantized_real_weights(bits, rng):
    W = (rng.standard_normal((24, 192)) * 0.02).astype(np.float32)
    x = rng.standard_normal(192).astype(np.float32)
    qm = quantize(W, bits=bits)
    y = kernels.gemv(qm, x)
    expected = qm.dequantize().astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_gemv_rejects_wrong_x_shape():
    qm = random_quantized(4, 64, bits=4)
    with pytest.raises(ValueError, match="shape"):
        kernels.gemv(qm, np.zeros(63, np.float32))


def test_verification_catches_a_wrong_kernel(spec_off_at_y0):
    broken = spec_off_at_y0(kernels.get(4), "broken")  # the default w4 f32 kernel, then 1 added to y[0]
    qm = random_quantized(8, 128, bits=4)
    result = verify(broken, qm, random_activations(128))
    assert not result.ok and result.max_rel_err > 1e-2


def test_registry_lookup():
    assert kernels.get(8).bits == 8
    assert "ref" in {s.variant for s in kernels.variants(3)}
    with pytest.raises(KeyError):
        kernels.get(4, "f32", "nope")


I8 = [s for b in (8, 4, 3, 2) for s in kernels.variants(b, "i8")]
NO_I8 = "no int8 tier is usable on this CPU and compiler target (see gemvbw info)"


@pytest.mark.skipif(not I8, reason=NO_I8)
def test_int8_activations_are_quantized_per_block():
    from gemvbw.kernels.activations import quantize_activations

    x = np.array([0.5, -1.0, 0.25, 0.0] * 16 + [2.0, -0.01] * 8 + [0.0] * 4, dtype=np.float32)  # K = 84
    xq, d, xs, xdq = quantize_activations(x, 64, 2)
    assert d[0] == np.float32(1.0 / 127) and d[1] == np.float32(2.0 / 127)
    assert xq[1] == -127 and xq[0] == 64 and xq[64] == 127 and xq[65] == -1
    assert xq.size == 128 and not xq[84:].any()  # padded with zeros to whole blocks
    assert xs[0] == pytest.approx(d[0] * xq[:64].sum()) and np.allclose(xdq, xq[:84] * np.repeat(d, 64)[:84])


def _quantized_slowly(x, block):
    """Per block, by the documented rule: d = max|x| / 127 (1 for a block of zeros), xq = round(x * (1 / d))."""
    nb = -(-x.size // block)
    xq, d, xs = np.zeros(nb * block, np.int8), np.empty(nb, np.float32), np.empty(nb, np.float32)
    for b in range(nb):
        xb = x[b * block:(b + 1) * block]
        amax = np.float32(np.abs(xb).max())
        d[b] = amax / np.float32(127.0) if amax > 0 else np.float32(1.0)
        q = np.rint(xb * (np.float32(1.0) / d[b])).astype(np.int32)
        xq[b * block:b * block + xb.size] = q
        xs[b] = d[b] * np.float32(q.sum())
    return xq, d, xs, (xq[:x.size] * np.repeat(d, block)[:x.size]).astype(np.float32)


@pytest.mark.parametrize("K,block", [(14336, 64), (1000, 64), (37, 8), (130, 64), (192, 64)])
def test_activation_quantization_against_the_slow_rule(K, block):
    from gemvbw.kernels.activations import quantize_activations, quantize_into

    x = random_activations(K, seed=K)
    x[:block] = 0.0  # a block of zeros: d = 1
    x[block:2 * block] = -np.abs(x[block:2 * block])  # a block whose largest magnitude is negative
    x[block] = -4.0
    x[2 * block + 1] = -0.0
    got = quantize_activations(x, block, -(-K // block))
    slow = _quantized_slowly(x, block)
    for name, a, b in zip(("xq", "d", "xs", "xdq"), got, slow):
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got[1][0] == 1.0 and got[1][1] == np.float32(4.0) / np.float32(127.0) and got[0][block] == -127
    # as the kernels call it, into a kept workspace and without xq * d: the same bits, and xdq left alone
    nb = -(-K // block)
    xq, d, xs, xdq = np.zeros(nb * block, np.int8), np.empty(nb + 1, np.float32), np.empty(nb, np.float32), \
        np.full(K, 7.0, np.float32)
    quantize_into(x, block, nb, xq, d, xs, xdq, False)
    for name, a, b in zip(("xq", "d", "xs"), (xq, d[:nb], xs), slow):
        assert np.array_equal(a, b), name
    assert (xdq == 7.0).all()


@pytest.mark.skipif(not I8, reason=NO_I8)
@pytest.mark.parametrize("spec", I8, ids=spec_id)
@pytest.mark.parametrize("code", [255, 0])
def test_int8_kernel_extremes_do_not_saturate(spec, code):
    # extreme codes against the largest activations of both signs: 8-bit codes as they are would
    # saturate vpmaddubsw, and stored as c - 128 the code 0 becomes -128, whose magnitude is 128
    qm = random_quantized(40, 256, bits=spec.bits)  # 40 rows: whole column tiles of 8 and 16, and rows left over
    qm.codes[:] = code
    x = np.where(np.arange(256) % 2 == 0, 1.0, -1.0).astype(np.float32)
    x[:64] = 1.0
    result = verify(spec, qm, x)
    assert result.ok, result.max_rel_err


def _stored_pairs(pc, order, groups, npairs):
    """The stored code bytes back from a repacked buffer, by the documented order (slow and obvious)."""
    pair_bytes = len(order)
    out = np.zeros((groups * 4, npairs * pair_bytes), np.uint8)
    for g in range(groups):
        for q in range(npairs):
            for i in range(4):
                start = ((g * npairs + q) * 4 + i) * pair_bytes
                for j in range(pair_bytes):
                    out[g * 4 + i, q * pair_bytes + order[j]] = pc[start + j]
    return out


def _stored_high_bits(new, V):
    """A pair's 16 stored high-plane bytes (bit i of byte j of block h: position 8i + j) from the repacked
    ones, by the kernel's documented lanes: lane l's bit for tile t = 4c + p is the high bit of position
    16p + c*V/2 + l % (V/2) of block l // (V/2); 128/V bits per lane, lanes l and l + 16 sharing a byte."""
    H, per_lane = V // 2, 128 // V
    old = np.zeros(16, np.uint8)
    for lane in range(V):
        for tile in range(per_lane):
            c, p = tile // 4, tile % 4
            byte, bit = lane % 16, tile + per_lane * (lane // 16)
            pos, h = 16 * p + c * H + lane % H, lane // H
            if (int(new[byte]) >> bit) & 1:
                old[8 * h + pos % 8] |= 1 << (pos // 8)
    return old


@pytest.mark.parametrize("tier", sorted(packed.PRIMITIVES), ids=str)
@pytest.mark.parametrize("bits", [8, 4, 3, 2])
@pytest.mark.parametrize("meta_bytes", [2, 4])
def test_repacked_layout_holds_the_same_bytes(tier, bits, meta_bytes):
    # repacking is plain numba code, so every tier's layout is checked here, whatever this CPU runs
    M, K = 10, 64 * 7 + 24  # two rows outside the row groups, an odd full block and a short one left over
    V = packed.layout_bytes(packed.PRIMITIVES[tier])
    qm = random_quantized(M, K, bits=bits, meta_bytes=meta_bytes, seed=bits)
    pc, pm, npairs = packed.pack(qm.codes, qm.scale_raw, qm.offset_raw, bits, K, tier)
    assert pc.ctypes.data % 64 == 0 and pm.ctypes.data % 64 == 0  # every vector load within one cache line
    order = packed.pair_order(bits, V)
    assert npairs == 3 and sorted(order) == list(range(len(order))) and len(order) == 2 * 64 * bits // 8
    pc = pc.copy()
    bias = packed.code_bias(packed.PRIMITIVES[tier], bits)
    if bits == 3:
        for start in range(0, pc.size, 48):
            pc[start + 32:start + 48] = _stored_high_bits(pc[start + 32:start + 48], V)
    if bits == 8 and bias:  # stored as c - 128
        pc ^= np.uint8(0x80)
    assert np.array_equal(_stored_pairs(pc, order, 2, npairs), qm.codes[:8, :npairs * len(order)])
    assert pc.nbytes == 8 * npairs * 2 * 64 * bits // 8 and pm.dtype == qm.scale_raw.dtype
    # metadata of group 1, pair 2: scales then offsets, block-major (block 4: rows 4-7, block 5: rows 4-7)
    k = 1 * npairs + 2
    assert np.array_equal(pm[k * 16:k * 16 + 8], qm.scale_raw[4:8, 4:6].T.ravel())
    assert np.array_equal(pm[k * 16 + 8:k * 16 + 16], qm.offset_raw[4:8, 4:6].T.ravel())


def _unpacked_codes(qm):
    """codes[r, k] of a matrix's full blocks, read from its stored bytes by the documented formats."""
    out = np.zeros((qm.M, (qm.K // 64) * 64), np.int64)
    for r in range(qm.M):
        for k in range(out.shape[1]):
            b, j = divmod(k, 64)
            if qm.bits == 8:
                out[r, k] = qm.codes[r, k]
            elif qm.bits == 4:  # byte j of a block: codes j and j + 32
                out[r, k] = (qm.codes[r, b * 32 + j % 32] >> (4 * (j // 32))) & 15
            elif qm.bits == 3:  # w2's 16 bytes for the low two bits, then 8 bytes: byte j holds j + 8p's high bit at p
                low = (qm.codes[r, b * 24 + j % 16] >> (2 * (j // 16))) & 3
                out[r, k] = low | ((qm.codes[r, b * 24 + 16 + j % 8] >> (j // 8)) & 1) << 2
            else:  # w2, byte j: codes j + 16p at bits 2p
                out[r, k] = (qm.codes[r, b * 16 + j % 16] >> (2 * (j // 16))) & 3
    return out


def _documented_tile_byte(codes, bits, s, t, w3_split):
    """Byte t of a row's lane in code vector s of a tile, from that row's 64 codes of the block, as the
    tile's docstring lays them out (group q: weights 4q .. 4q + 3)."""
    c = [int(codes[4 * q + t]) for q in range(16)]
    if bits != 3:  # P = 8 / bits whole codes to a byte: groups P*s + p at bits bits*p
        P = 8 // bits
        return sum(c[P * s + p] << (bits * p) for p in range(P))
    if w3_split:  # groups 2s and 2s + 1 whole at bits 0-2 and 3-5; bits 6-7: groups 12-15 split
        byte = c[2 * s] | c[2 * s + 1] << 3
        if s < 4:
            return byte | (c[12 + s] & 3) << 6  # group 12 + s's low two bits
        return byte | (c[12 + 2 * (s - 4)] >> 2) << 6 | (c[13 + 2 * (s - 4)] >> 2) << 7  # two high bits
    if s < 4:  # two bit planes: the low two bits of groups 4s + p at bits 2p, then
        return sum((c[4 * s + p] & 3) << (2 * p) for p in range(4))
    return sum((c[8 * (s - 4) + p] >> 2) << p for p in range(8))  # the high bits of groups 8(s - 4) + p at bit p


def _documented_stacked_byte(codes, s, t):
    """Byte t of lane r in code vector s of a stacked w2 tile, from the 64 codes of the block of each of its rows
    r, r + R, r + 2R, r + 3R (``codes``, 4 x 64): row set p's code of weight 4s + t at bits 2p."""
    return sum(int(codes[p][4 * s + t]) << (2 * p) for p in range(4))


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("bits,w3_split,w2_stack",
                         [(8, True, True), (4, True, True), (3, True, True), (3, False, True), (2, True, False),
                          (2, True, True)])
@pytest.mark.parametrize("meta_bytes", [2, 4])
def test_column_tiles_hold_the_documented_bytes(rows, bits, w3_split, w2_stack, meta_bytes):
    if EMULATED:
        pytest.skip("emulated: the column tiles are x86 kernels; their layout is checked where they run")
    # vector s of tile (g, b), lane r, byte t at (s * rows + r) * 4 + t: 2 * bits vectors of codes, one row per lane;
    # stacked w2 16 vectors, one per group, of four row sets (a tile of 4 * rows rows)
    stacked = bits == 2 and w2_stack
    tile_rows, vectors = (4 * rows, 16) if stacked else (rows, 2 * bits)
    M, K = 2 * tile_rows + 3, 64 * 3 + 24  # three rows outside the tiles, a short block left over
    qm = random_quantized(M, K, bits=bits, meta_bytes=meta_bytes, seed=bits + rows)
    pc, nfull = tile.pack(qm.codes, qm.scale_raw, qm.offset_raw, bits, K, rows, w3_split, w2_stack)
    assert pc.ctypes.data % 64 == 0  # every tile on a cache line: its vector loads split none
    codes = _unpacked_codes(qm)
    size = tile.tile_bytes(bits, tile_rows, meta_bytes)  # codes, then [rows x scale | rows x offset] as stored
    assert nfull == 3 and pc.size == 2 * 3 * size == 2 * 3 * (tile_rows * 64 * bits // 8 + 2 * tile_rows * meta_bytes)
    for g in range(2):
        for b in range(3):
            t = g * 3 + b
            base = t * size
            for s in range(vectors):
                for r in range(rows):
                    block = codes[g * tile_rows + r::rows][:tile_rows // rows, 64 * b:64 * (b + 1)]
                    for j in range(4):
                        if stacked:
                            want = _documented_stacked_byte(block, s, j)
                        else:
                            want = _documented_tile_byte(block[0], bits, s, j, w3_split)
                        assert pc[base + (s * rows + r) * 4 + j] == want, (g, b, s, r, j)
            base += vectors * rows * 4
            meta = pc[base:(t + 1) * size].view(qm.scale_raw.dtype)
            assert meta.size == 2 * tile_rows
            assert np.array_equal(meta[:tile_rows], qm.scale_raw[g * tile_rows:(g + 1) * tile_rows, b])
            assert np.array_equal(meta[tile_rows:], qm.offset_raw[g * tile_rows:(g + 1) * tile_rows, b])


def test_stacked_w2_fields_hold_each_rows_code_once():
    # 16 vectors x 4 fields: every (row set, group) pair once, each in its own 2 bits of one vector
    layout = tile.fields(2, w2_stack=True)
    assert sorted((f.rowset, f.group) for f in layout) == [(p, q) for p in range(4) for q in range(16)]
    assert len({(f.vector, f.pos) for f in layout}) == 64 and all(f.width == 2 and f.start == 0 for f in layout)
    assert all(f.vector == f.group and f.pos == 2 * f.rowset for f in layout)
    assert len(tile.fields(2, w2_stack=False)) == 16 and {f.rowset for f in tile.fields(2, w2_stack=False)} == {0}


def test_w3_tile_fields_cover_every_bit_of_every_group_once():
    for split in (True, False):
        layout = tile.fields(3, split)
        bits = {(f.group, f.start + i) for f in layout for i in range(f.width)}
        assert bits == {(q, i) for q in range(16) for i in range(3)} and sum(f.width for f in layout) == 48
        taken = [(f.vector, f.pos + i) for f in layout for i in range(f.width)]
        assert len(set(taken)) == 48 and all(0 <= v < 6 and 0 <= bit < 8 for v, bit in taken)
    assert len(tile.fields(3, True)) == 20 and len(tile.fields(3, False)) == 32  # dot products per tile


@pytest.mark.skipif(not I8, reason=NO_I8)
@pytest.mark.parametrize("spec", I8, ids=spec_id)
@pytest.mark.parametrize("M,K", [(323, 200), (150, 320)])
def test_int8_kernel_on_many_row_groups(spec, M, K):
    # enough groups that a thread's chunk holds several: both streams of the skeleton run, and the lone
    # last group of an odd chunk; a short last block and rows outside the groups
    qm = random_quantized(M, K, bits=spec.bits, seed=M)
    result = verify(spec, qm, random_activations(K, seed=M))
    assert result.ok and result.max_rel_err < 1e-5, result.max_rel_err


# the skeleton is the same for every tier (each tier's step is checked above): one tier, to keep compiling short
TILE_TIERS = sorted({s.tier for s in I8 if s.layout[0] != "4x2"})[:1]


@pytest.mark.skipif(not TILE_TIERS, reason="no column-tile tier runs on this CPU")
@pytest.mark.parametrize("tier", TILE_TIERS)
@pytest.mark.parametrize("bits", [8, 4, 3, 2])
@pytest.mark.parametrize("M", [16 * 13 + 5, 16 * 4, 8 * 7])
def test_column_tiles_give_the_same_rows_whatever_the_streams_per_thread(tier, bits, M):
    # 1, 2 (the default), 3, 4 and 8 (Zen 4's counts) groups read at once by each thread: chunks whose group
    # count each of those divides or does not (the last streams one group short), down to fewer groups than
    # streams; every row is summed the same way whichever stream reads it, so the outputs are bit for bit
    # equal, and equal to the reference
    from gemvbw.verify import reference_gemv, relative_error

    K = 200  # three full blocks and a short last one
    qm = random_quantized(M, K, bits=bits, seed=M + bits)
    x = random_activations(K, seed=bits)
    spec = next(s for s in I8 if s.tier == tier and s.bits == bits and s.layout[0] != "4x2")
    y_ref, bound = reference_gemv(qm, spec.reference_x(x, qm.block))
    outs = []
    for nstreams in (1, 2, 3, 4, 8):
        for chunks in (1, 3):
            y = np.full(M, np.nan, np.float32)
            tile.bind(tier, qm, chunks, None, nstreams=nstreams)(x, y)
            assert relative_error(y, y_ref, bound) < 1e-5, (nstreams, chunks)
            outs.append(y)
    # and in turns of the other length than the tile's own (1 or 2 tiles of a group before the next group's; with
    # three steps, two in a turn and the last alone): each group's steps still added in their order
    other = 3 - tile.plain_turn(bits, tier=tier)
    for nstreams in (1, 2, 3):
        y = np.full(M, np.nan, np.float32)
        tile.bind(tier, qm, 3, None, nstreams=nstreams, turn=other)(x, y)
        outs.append(y)
    assert all(np.array_equal(outs[0], y) for y in outs[1:])
    if bits == 3:  # w3's other layout (two bit planes; benchmarks/tile_variants.py's split=0): the same sums
        y = np.full(M, np.nan, np.float32)
        tile.bind(tier, qm, 3, None, w3_split=not tile.W3_SPLIT)(x, y)
        assert np.array_equal(y, outs[0])  # integer sums are exact whichever way the fields are grouped
    if bits == 2:  # w2 with one row per lane (its -prfm twin's layout, tile_variants.py's stack=0), any streams
        for nstreams in (1, 4):
            y = np.full(M, np.nan, np.float32)
            tile.bind(tier, qm, 3, None, nstreams=nstreams, w2_stack=not tile.W2_STACK)(x, y)
            assert relative_error(y, y_ref, bound) < 1e-5, nstreams


@pytest.mark.skipif(not TILE_TIERS, reason="no column-tile tier runs on this CPU")
@pytest.mark.parametrize("bits", [8, 3, 2])
def test_a_tile_variant_stores_its_copy_under_the_layout_its_spec_names(bits):
    # the memory estimate counts one repacked copy per distinct spec.layout; a variant that stored its copy
    # under another key would hold a copy the estimate never counted
    from gemvbw.kernels.packed import _PACKED

    tier = TILE_TIERS[0]
    qm = random_quantized(16, 128, bits=bits, seed=bits)
    specs = [s for s in I8 if s.tier == tier and s.bits == bits and s.layout[0] == "c4"]
    x, y = kernels.typed_like(qm)
    for spec in specs:
        spec.kernel_args(qm, x, y, 1)
    assert len(specs) >= 1 and set(_PACKED[qm]) == {spec.layout for spec in specs}
    # w2's plain tile and its -1stream twin are stacked and its -prfm twin not: two copies, both counted
    assert len(_PACKED[qm]) == (2 if bits == 2 and len(specs) == 3 else 1)


@pytest.mark.parametrize("options", [{"nstreams": 0}, {"locality": 4}, {"locality": -1}, {"turn": 0}, {"turn": 3}])
def test_a_tile_tag_refuses_options_no_kernel_is_built_for(options):
    # TileTag is built before anything compiles: a stream count or prefetch hint LLVM has no meaning for
    # is refused there, whatever the CPU (tile_tiers lists every tile tier, usable or not)
    with pytest.raises(ValueError, match="no column-tile kernel"):
        tile.TileTag(tile.tile_tiers()[0], 4, 2, **options)


@pytest.mark.parametrize("options", [{"ahead": -64}, {"locality": 4}, {"locality": -1}])
def test_a_packed_tag_refuses_options_no_kernel_is_built_for(options):
    from gemvbw.kernels import packed

    with pytest.raises(ValueError, match="no packed kernel"):
        packed.KernelTag("avx2", 4, **options)
    tag = packed.KernelTag("neon", 4)  # the tier's own prefetch when none is asked for
    assert (tag.ahead, tag.locality) == (packed.PRIMITIVES["neon"].prefetch_ahead[4], 0)


@pytest.mark.skipif(not I8, reason=NO_I8)
@pytest.mark.parametrize("spec", I8, ids=spec_id)
@pytest.mark.parametrize("M,K", [(40, 200), (32, 256)])
def test_int8_kernel_calls_share_their_workspace_and_stay_exact(spec, M, K):
    # one binding, called on three activations in turn (the quantized activations, the layout's scratch and the
    # accumulators are kept between calls): each result is that call's own. 40x200 has a short last block and
    # rows outside the groups (x * d is written for them), 32x256 none (it is skipped).
    from gemvbw.verify import reference_gemv, relative_error

    qm = random_quantized(M, K, bits=spec.bits, seed=M + K)
    run = spec.bind(qm)
    xs = [random_activations(K, seed=1), 40 * random_activations(K, seed=2), random_activations(K, seed=1)]
    outs = []
    for x in xs:
        y = np.full(M, np.nan, np.float32)
        run(x, y)
        y_ref, bound = reference_gemv(qm, spec.reference_x(x, qm.block))
        assert relative_error(y, y_ref, bound) < 1e-5
        outs.append(y)
    assert np.array_equal(outs[0], outs[2])


@pytest.mark.parametrize("n", [1, 100, 100_003, 3_000_001])  # the large ones numpy maps 16 bytes into a page
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_aligned_arrays_start_on_a_cache_line_and_hold_what_they_are_given(n, dtype):
    from gemvbw.kernels._common import aligned_empty

    a = aligned_empty(n, dtype)
    assert a.ctypes.data % 64 == 0 and a.shape == (n,) and a.dtype == dtype and a.flags.c_contiguous
    a[:] = np.arange(n) % 7
    assert np.array_equal(a, (np.arange(n) % 7).astype(dtype))  # its own bytes, not shared with another array


def test_kernel_workspace_sections_are_lines_apart_and_checked():
    from gemvbw.kernels import streams

    K, nb, lanes, chunks, scratch, nstreams = 200, 4, 16, 3, 100, 3
    o_d, o_xs, o_xdq, o_acc, o_scratch, size = streams.work_layout(K, nb, lanes, chunks, scratch, nstreams)
    starts = [0, o_d, o_xs, o_xdq, o_acc, o_scratch, size]
    needs = [nb * 64, 4 * (nb + 1), 4 * nb, 4 * K, chunks * 4 * nstreams * lanes, scratch]
    assert all(s % 64 == 0 for s in starts)
    assert all(b - a >= n for a, b, n in zip(starts, starts[1:], needs))
    assert size - o_scratch < scratch + 64 and o_d == 256 and o_xs - o_d == 64
    work = streams.new_work(K, nb, lanes, chunks, scratch, nstreams)
    assert work.dtype == np.uint8 and work.shape == (size,) and not work.any() and work.ctypes.data % 64 == 0
    if I8:  # a kernel given a workspace too small for its shapes refuses to run
        spec = I8[0]
        qm = random_quantized(20, 200, bits=spec.bits)
        mod = packed if spec.layout[0] == "4x2" else tile
        x, y = kernels.typed_like(qm)
        args = list(mod.kernel_args(spec.tier, qm, x, y, 2))
        args[3] = args[3][:-64]
        with pytest.raises(ValueError, match="workspace is smaller"):
            numba.njit(lambda *a: streams.gemv_streams(*a))(*args)


@pytest.mark.skipif(not I8, reason=NO_I8)
def test_bound_int8_kernel_reads_its_fixed_arrays_by_address_and_keeps_them_alive():
    import gc

    from gemvbw.kernels import streams

    spec = I8[0]
    qm = random_quantized(20, 200, bits=spec.bits)  # a leftover block and leftover rows: codes, scale, offset read
    x = random_activations(200)
    args = list(spec.kernel_args(qm, *kernels.typed_like(qm), 2))
    expected = args[9] = np.zeros(20, np.float32)
    args[7] = x
    numba.njit(lambda *a: streams.gemv_streams(*a))(*args)  # the arrays passed as arrays
    del args
    run = spec.bind(qm)
    del qm  # the binding alone now holds the matrix's arrays and its repacked copy
    gc.collect()
    noise = [np.full(n, 255, np.uint8) for n in (64, 1920, 9216, 17408, 65536) for _ in range(4)]  # reuse freed memory
    y = np.zeros(20, np.float32)
    run(x, y)
    assert np.array_equal(y, expected) and noise  # the same sums, bit for bit

    qm = random_quantized(20, 200, bits=spec.bits)
    args = spec.kernel_args(qm, *kernels.typed_like(qm), 2)
    codes = np.zeros((20, 2 * args[4].shape[1]), np.uint8)[:, ::2]  # the codes' shape, strided
    with pytest.raises(ValueError, match="C-contiguous"):
        streams.bind(args[:4] + (codes,) + args[5:])
    with pytest.raises(TypeError, match="offset"):  # offset of another type than scale
        streams.bind(args[:6] + (args[6].astype(np.float32),) + args[7:])


@pytest.mark.parametrize("V", [16, 32])
@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_activation_order_matches_the_code_vectors(V, bits):
    # every position of a block is covered once, V/2 at a time, in the order the kernel multiplies them
    starts = packed.act_order(bits, V)
    covered = sorted(p for s in starts for p in range(s, s + V // 2))
    assert covered == list(range(64)) and len(starts) == 128 // V
    assert starts[0] == 0 and (bits != 4 or starts[1] == 32)  # w4: a vector's low nibbles, then its high


@pytest.mark.skipif(not I8, reason=NO_I8)
def test_gemv_act_i8_and_block_check():
    qm = random_quantized(12, 640, bits=4)
    x = random_activations(640)
    y = kernels.gemv(qm, x, act="i8")
    exact = qm.dequantize().astype(np.float64) @ x.astype(np.float64)
    assert np.abs(y - exact).max() < 1e-2 * np.abs(exact).max()  # int8 activations: close, not exact
    assert np.array_equal(kernels.gemv(qm, x, act="auto"), y)  # auto takes int8 where a kernel exists
    with pytest.raises(ValueError, match="block 64"):
        kernels.gemv(random_quantized(4, 128, bits=4, block=32), np.ones(128, np.float32), act="i8")
    y32 = kernels.gemv(random_quantized(4, 128, bits=4, block=32), np.ones(128, np.float32), act="auto")
    assert y32.shape == (4,)  # auto falls back to f32 for a block the int8 kernels do not take


def test_bound_kernel_refuses_arrays_it_would_misread():
    spec = kernels.get(4, "f32", "rows4")
    qm = random_quantized(8, 128, bits=4)
    run = spec.bind(qm)
    y = np.empty(8, np.float32)
    with pytest.raises(TypeError, match="float32"):
        run(np.ones(128, np.float64), y)
    with pytest.raises(TypeError, match="C-contiguous"):
        run(np.ones(256, np.float32)[::2], y)
    with pytest.raises(ValueError, match=r"y of shape \(8,\), got \(128,\) and \(4,\)"):
        run(np.ones(128, np.float32), np.empty(4, np.float32))
    with pytest.raises(ValueError, match=r"x of shape \(128,\)"):
        run(np.ones(64, np.float32), y)


@pytest.mark.parametrize("act", ["f32", "i8"])
def test_bound_kernel_checks_each_new_pair_not_only_the_first(act):
    """A call skips the check only for the very pair it last checked: a new x or y is checked again, and a
    pair that failed is not remembered."""
    if act == "i8" and not I8:
        pytest.skip(NO_I8)
    qm = random_quantized(8, 128, bits=4)
    run = kernels.get(4, act).bind(qm)
    x, y = random_activations(128), np.empty(8, np.float32)
    run(x, y)
    first = y.copy()
    run(x, y)  # the same pair again: the same result
    assert np.array_equal(y, first)
    for bad_x, bad_y, error in ((x, np.empty(8, np.float64), TypeError), (x.astype(np.float64), y, TypeError),
                                (x, np.empty(16, np.float32)[::2], TypeError), (x, np.empty(9, np.float32), ValueError)):
        for _ in range(2):
            with pytest.raises(error):
                run(bad_x, bad_y)
    y2 = np.empty(8, np.float32)
    run(x.copy(), y2)
    assert np.array_equal(y2, first)


@pytest.mark.parametrize("act,variant", [("f32", "ref"), ("f32", "rows4"), ("i8", None)])
def test_call_on_is_the_bound_kernel_on_that_pair_checked_once_and_keeps_its_binding(act, variant):
    """kernels.call_on: the machine code bound to x and y (no Python frame), the same y bit for bit as
    run(x, y); the pair refused as run refuses it; alive after the binding is dropped."""
    import gc

    if act == "i8" and not I8:
        pytest.skip(NO_I8)
    spec = kernels.get(4, act) if variant is None else kernels.get(4, act, variant)
    qm = random_quantized(20, 192, bits=4)  # leftover rows and a leftover block for the int8 layouts
    x = random_activations(192)
    run = spec.bind(qm)
    expected = np.zeros(20, np.float32)
    run(x, expected)
    for bad_x, bad_y, error in ((x, np.empty(20, np.float64), TypeError), (x[::2].copy(), expected, ValueError),
                                (np.ones(384, np.float32)[::2], expected, TypeError)):
        with pytest.raises(error):
            kernels.call_on(run, bad_x, bad_y)
    y = np.zeros(20, np.float32)
    call = kernels.call_on(run, x, y)
    assert not hasattr(call, "__code__")  # no Python function: a partial of the compiled code
    del run, qm
    gc.collect()
    noise = [np.full(n, 255, np.uint8) for n in (64, 1920, 9216, 17408, 65536) for _ in range(4)]  # reuse freed memory
    call()
    assert np.array_equal(y, expected) and noise


def test_call_on_falls_back_to_a_call_of_run_where_a_binding_offers_nothing():
    seen = []
    x, y = np.ones(3, np.float32), np.empty(2, np.float32)
    call = kernels.call_on(lambda a, b: seen.append((a, b)), x, y)
    call()
    assert len(seen) == 1 and seen[0][0] is x and seen[0][1] is y


def test_one_thread_compiles_the_serial_twin_cached_under_its_own_name():
    from gemvbw.kernels._common import empty_parallel_call

    out = np.zeros(2, np.int64)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        serial = kernels.compiled(empty_parallel_call, out)
        if numba.config.NUMBA_NUM_THREADS >= 2:
            numba.set_num_threads(2)
            parallel = kernels.compiled(empty_parallel_call, out)
            assert parallel is empty_parallel_call.overloads[(numba.typeof(out),)].entry_point
    finally:
        numba.set_num_threads(old)
    twin = kernels.serial_twin(empty_parallel_call)
    assert kernels.serial_twin(empty_parallel_call) is twin  # one twin per function
    assert serial is twin.overloads[(numba.typeof(out),)].entry_point
    assert "parallel" not in twin.targetoptions and empty_parallel_call.targetoptions["parallel"]
    assert twin.py_func.__qualname__ == "empty_parallel_call_serial" and twin.py_func.__code__ is \
        empty_parallel_call.py_func.__code__
    # cached, in files of its own name: under the original's name it would load the parallel code
    cached = sorted(p.name for p in Path(twin.stats.cache_path).glob("_common.empty_parallel_call_serial-*"))
    assert cached and all(n.endswith((".nbi", ".nbc")) for n in cached)
    serial(out)
    assert list(out) == [0, 1]


def test_serial_twin_keeps_the_kernels_flags():
    from gemvbw.kernels import streams

    twin = kernels.serial_twin(streams.gemv_streams)
    assert twin.targetoptions["fastmath"] == streams.gemv_streams.targetoptions["fastmath"]
    assert twin.py_func.__module__ == "gemvbw.kernels.streams" and twin.__doc__ == streams.gemv_streams.__doc__

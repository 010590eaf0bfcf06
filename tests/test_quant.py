"""Packing, quantization error, byte counts, and random generation without an M x K float matrix."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gemvbw.quant import (
    QuantizedMatrix, block_nbytes, pack_codes, padded_len, quantize, random_quantized, row_nbytes, unpack_codes,
)

GRANULE = {8: 1, 4: 2, 3: 8, 2: 4}


@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from([8, 4, 3, 2]), groups=st.integers(1, 40), rows=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_pack_unpack_round_trip(bits, groups, rows, seed):
    Lp = groups * GRANULE[bits]
    codes = np.random.default_rng(seed).integers(0, 1 << bits, size=(rows, Lp), dtype=np.uint8)
    packed = pack_codes(codes, bits)
    assert packed.shape == (rows, Lp * bits // 8)  # exactly `bits` bits per code
    assert np.array_equal(unpack_codes(packed, bits, Lp), codes)


def test_layouts_put_codes_where_documented():
    codes = np.arange(8, dtype=np.uint8)[None, :] % 4  # 0 1 2 3 0 1 2 3
    # w2 planes: byte j holds codes j, j+2, j+4, j+6 (Lp=8, Lp/4=2)
    assert pack_codes(codes, 2).tolist() == [[0 | 2 << 2 | 0 << 4 | 2 << 6, 1 | 3 << 2 | 1 << 4 | 3 << 6]]
    # w4 nibble halves: byte j holds code j (low) and j + 4 (high)
    assert pack_codes(np.array([[1, 2, 3, 4, 5, 6, 7, 8]], np.uint8), 4).tolist() == [[0x51, 0x62, 0x73, 0x84]]
    # w3: 2-bit plane of low bits then 1-bit plane of the high bit
    c3 = np.array([[7, 0, 0, 0, 0, 0, 0, 4]], np.uint8)
    # Lp=8: low plane 2 bytes (codes j, j+2, j+4, j+6), high plane 1 byte (bit p = code p)
    assert pack_codes(c3, 3).tolist() == [[3, 0, 1 | 1 << 7]]


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
@pytest.mark.parametrize("K,block", [(64, 64), (128, 64), (100, 64), (37, 64), (1000, 32), (24, 8), (13, 8)])
@pytest.mark.parametrize("meta_bytes", [2, 4])
def test_quantize_error_within_half_a_step(bits, K, block, meta_bytes, rng):
    W = (rng.standard_normal((5, K)) * 0.05).astype(np.float32)
    qm = quantize(W, bits=bits, block=block, meta_bytes=meta_bytes)
    D = qm.dequantize()
    assert D.shape == (5, K) and D.dtype == np.float32
    scale = np.repeat(qm.scale, block, axis=1)[:, :K]
    # half a step, plus what rounding the metadata to its storage type can add
    slack = 2e-3 * np.abs(W).max() if meta_bytes == 2 else 1e-6
    assert np.all(np.abs(W - D) <= scale / 2 * (1 + 1e-3) + slack)


def test_constant_block_is_exact():
    W = np.full((2, 64), 0.25, dtype=np.float32)
    assert np.array_equal(quantize(W, bits=2).dequantize(), W)


@pytest.mark.parametrize("bits,row_bytes", [(8, 64), (4, 32), (3, 24), (2, 16)])
def test_stored_bytes_are_bits_per_weight(bits, row_bytes):
    qm = random_quantized(10, 64, bits=bits, block=64)
    assert qm.codes.shape == (10, row_bytes)
    assert qm.nbytes == 10 * row_bytes + 10 * 1 * 2 * 2
    assert qm.nbytes == qm.logical_bytes
    assert qm.scale_raw.dtype == np.uint16 and qm.offset_raw.dtype == np.uint16


def test_fp32_metadata_is_counted_as_four_bytes():
    qm = random_quantized(3, 128, bits=4, meta_bytes=4)
    assert qm.scale_raw.dtype == np.float32
    assert qm.logical_bytes == 3 * 128 // 2 + 3 * 2 * 2 * 4


def test_ragged_last_block_padding_is_reported():
    # K=100, block 64: a full block and a block of 36, padded to the w3 granule of 8 (40 codes)
    assert padded_len(36, 3) == 40
    assert row_nbytes(100, 3, 64) == block_nbytes(64, 3) + block_nbytes(36, 3) == 24 + 15
    qm = random_quantized(4, 100, bits=3)
    assert qm.nbytes == 4 * 39 + 4 * 2 * 2 * 2
    assert qm.logical_bytes == -(-4 * 100 * 3 // 8) + 4 * 2 * 2 * 2  # MNN's count has no padding


def test_random_quantized_codes_in_range_and_deterministic():
    a = random_quantized(8, 100, bits=3, seed=5)
    b = random_quantized(8, 100, bits=3, seed=5)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scale_raw, b.scale_raw)
    q = a.codes_unpacked()
    assert q.shape == (8, 100) and q.max() <= 7
    assert np.all(a.scale > 0)


def test_random_quantized_never_holds_an_M_by_K_float_matrix():
    M, K = 2048, 4096
    tracemalloc.start()
    qm = random_quantized(M, K, bits=8)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(qm, QuantizedMatrix)
    assert peak < 2 * qm.nbytes < M * K * 4  # a float32 M x K would be 4x the w8 codes


@pytest.mark.parametrize("kwargs,msg", [
    (dict(bits=5), "bits"), (dict(block=7), "block"), (dict(block=0), "block"), (dict(meta_bytes=3), "meta_bytes"),
])
def test_bad_format_rejected(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        random_quantized(4, 64, **kwargs)


@pytest.mark.parametrize("bits,dtype", [(32, np.float32), (16, np.uint16)])
def test_unquantized_baselines(bits, dtype):
    from gemvbw.quant import FloatMatrix, float_matrix

    W = np.array([[0.5, -1.25, 3.0], [65504.0, 1e-3, 0.0]], np.float32)
    fm = quantize(W, bits=bits)
    assert isinstance(fm, FloatMatrix) and fm.weights.dtype == dtype and fm.weights.shape == (2, 3)
    assert fm.logical_bytes == fm.nbytes == 2 * 3 * bits // 8 and fm.block == 3 and fm.meta_bytes == 0
    expected = W if bits == 32 else W.astype(np.float16).astype(np.float32)
    assert np.array_equal(fm.dequantize(), expected) and fm.dequantize(slice(1, 2), np.float64).shape == (1, 3)
    if bits == 16:
        with pytest.raises(ValueError, match="beyond float16's range"):
            float_matrix(np.array([[70000.0]], np.float32), 16)


def test_random_fp16_holds_one_copy_of_the_weights():
    M, K = 4096, 2048
    tracemalloc.start()
    fm = random_quantized(M, K, bits=16, seed=3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert fm.weights.dtype == np.uint16 and fm.nbytes == M * K * 2
    # the weights, plus one chunk of 256 rows drawn as float32 at a time (and its temporaries): well under the
    # float32 M x K matrix that generating the whole thing at once would hold
    assert peak < fm.nbytes + 4 * (256 * K * 4) < M * K * 4
    w = fm.dequantize()
    assert np.all(np.isfinite(w)) and 0.015 < float(w.std()) < 0.025

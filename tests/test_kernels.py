"""Every registered kernel against the slow numpy reference, on small shapes and both thread counts."""

import numba
import numpy as np
import pytest
from numba import njit

from gemvbw import kernels
from gemvbw.kernels._common import half_to_f32
from gemvbw.quant import quantize, random_activations, random_quantized
from gemvbw.verify import reference_gemv, verify

SHAPES = [(1, 8, 8), (7, 64, 64), (13, 100, 64), (33, 1000, 64), (5, 37, 8), (16, 200, 32), (3, 64, 128)]
ALL_SPECS = [s for b in (8, 4, 3, 2) for s in kernels.variants(b, "f32")]


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


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"w{s.bits}-{s.variant}")
@pytest.mark.parametrize("M,K,block", SHAPES)
@pytest.mark.parametrize("meta_bytes", [2, 4])
def test_kernel_matches_reference(spec, M, K, block, meta_bytes):
    qm = random_quantized(M, K, bits=spec.bits, block=block, meta_bytes=meta_bytes, seed=M + K)
    x = random_activations(K, seed=K)
    result = verify(spec, qm, x)
    assert result.ok, f"max rel err {result.max_rel_err}"
    assert result.max_rel_err < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"w{s.bits}-{s.variant}")
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
    ref, bound = reference_gemv(qm, x)
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


def test_verification_catches_a_wrong_kernel():
    good = kernels.get(4)

    def bind(qm):
        run = good.bind(qm)

        def wrong(x, y):
            run(x, y)
            y[0] += 1.0

        return wrong

    broken = kernels.KernelSpec(4, "f32", "broken", "adds 1 to y[0]", bind)
    qm = random_quantized(8, 128, bits=4)
    result = verify(broken, qm, random_activations(128))
    assert not result.ok and result.max_rel_err > 1e-2


def test_registry_lookup():
    assert kernels.get(8).bits == 8
    assert "ref" in {s.variant for s in kernels.variants(3)}
    with pytest.raises(KeyError):
        kernels.get(4, "f32", "nope")

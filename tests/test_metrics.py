"""The formulas against values computed by hand."""

import pytest

from gemvbw import metrics


@pytest.mark.parametrize("bits,bpe,ai", [(8, 1.0625, 1.88), (4, 0.5625, 3.56), (3, 0.4375, 4.57), (2, 0.3125, 6.40)])
def test_bytes_per_elem_and_ai_block64_fp16(bits, bpe, ai):
    M, K = 4096, 14336
    lb = metrics.logical_bytes(M, K, bits, 64, 2)
    assert metrics.bytes_per_elem(lb, M, K) == pytest.approx(bpe, abs=1e-12)
    assert round(metrics.ai(metrics.bytes_per_elem(lb, M, K)), 2) == ai


def test_logical_bytes_by_hand():
    # w4, 4096 x 14336: codes 29,360,128 B; 224 blocks/row x 4096 rows x 2 x 2 B = 3,670,016 B
    assert metrics.logical_bytes(4096, 14336, 4, 64, 2) == 29_360_128 + 3_670_016
    # fp32 metadata doubles the metadata part
    assert metrics.logical_bytes(4096, 14336, 4, 64, 4) == 29_360_128 + 7_340_032
    # ragged: K=100 -> 2 blocks; 3 bits: ceil(3*100*3/8) = 113
    assert metrics.logical_bytes(3, 100, 3, 64, 2) == 113 + 3 * 2 * 2 * 2


def test_bandwidth_and_flops():
    assert metrics.eff_gbps(2_000_000, 0.001) == pytest.approx(2.0)
    assert metrics.pct_peak(10.0, 40.0) == pytest.approx(25.0)
    assert metrics.pct_read(10.0, 20.0) == pytest.approx(50.0)
    assert metrics.gflops(1000, 1000, 0.001) == pytest.approx(2.0)
    assert metrics.memcpy_gbps(1_000_000_000, 1.0) == pytest.approx(2.0)  # read + write
    assert metrics.read_gbps(1_000_000_000, 0.5) == pytest.approx(2.0)


def test_statistics():
    xs = [2, 4, 4, 4, 5, 5, 7, 9]
    assert metrics.mean(xs) == 5
    assert metrics.sample_sd(xs) == pytest.approx(2.138089935299395)
    assert metrics.median(xs) == 4.5
    assert metrics.median([3, 1, 2]) == 2
    assert metrics.sample_sd([1.0]) == 0.0
    assert metrics.cv(xs) == pytest.approx(2.138089935299395 / 5)


@pytest.mark.parametrize("bits,nbytes,bpe,ai", [(32, 4096 * 14336 * 4, 4.0, 0.5), (16, 4096 * 14336 * 2, 2.0, 1.0)])
def test_unquantized_weights_count_no_metadata(bits, nbytes, bpe, ai):
    lb = metrics.logical_bytes(4096, 14336, bits, 64, 2)  # block and metadata size do not apply
    assert lb == nbytes
    assert metrics.bytes_per_elem(lb, 4096, 14336) == bpe and metrics.ai(bpe) == ai


def test_bound_seconds_exactly():
    from gemvbw import metrics

    assert metrics.bound_seconds(2_000_000_000, 4.0) == 0.5  # 2 GB at 4 GB/s
    assert metrics.tokens_per_s(0.5) == 2.0


def test_report_names_a_missing_attribute():
    import gemvbw.report as report

    with pytest.raises(AttributeError, match=r"^module 'gemvbw.report' has no attribute 'nope'$"):
        report.nope


def test_spreads_of_all_zero_values_are_zero_not_a_division():
    # a timer that read 0 ns for every call (too coarse for the call) gives zeros: no spread, not a crash
    assert metrics.cv([0, 0, 0]) == 0.0
    assert metrics.robust_spread([0, 0, 5]) == 0.0  # median 0
    assert metrics.spread([0, 3]) == 0.0
    assert metrics.spread([2, 3]) == 0.5 and metrics.robust_spread([1, 2, 4]) == pytest.approx(1.4826 * 1 / 2)


def test_unquantized_bytes_are_a_whole_number():
    got = [metrics.logical_bytes(3, 5, bits, 64, 2) for bits in (32, 16)]
    assert got == [60, 30] and all(type(b) is int for b in got)  # a count of bytes, never a float

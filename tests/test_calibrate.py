"""--kernel auto: measured once per machine, cached, never a variant that fails verification."""

import json

import pytest

from gemvbw import calibrate, kernels


@pytest.fixture
def small_calibration(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMVBW_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "CALIB_M", 16)
    monkeypatch.setattr(calibrate, "CALIB_K", 256)
    monkeypatch.setattr(calibrate, "CALIB_ITERS", 2)
    return tmp_path


def test_choice_is_measured_then_cached(small_calibration, monkeypatch):
    first = calibrate.choose(4, "f32", 1)
    assert first.source == "calibrated now"
    assert set(first.timings_us) == {s.variant for s in kernels.variants(4)}
    assert first.spec.variant == min(first.timings_us, key=first.timings_us.get)
    doc = json.loads((small_calibration / "calibration.json").read_text())
    assert [e["variant"] for e in doc.values()] == [first.spec.variant]

    def no_measuring(*a, **k):
        raise AssertionError("a cached choice must not be measured again")

    monkeypatch.setattr(calibrate, "measure", no_measuring)
    again = calibrate.choose(4, "f32", 1)
    assert again.source == "cached" and again.spec.variant == first.spec.variant


def test_thread_count_and_shape_are_part_of_the_key(small_calibration):
    assert calibrate.machine_key(4, "f32", 1) != calibrate.machine_key(4, "f32", 2)
    assert calibrate.machine_key(4, "f32", 1) != calibrate.machine_key(2, "f32", 1)
    assert calibrate.machine_key(4, "f32", 1, (64, 256, 64, 2)) != calibrate.machine_key(4, "f32", 1, (64, 512, 64, 2))


def test_choice_is_made_on_the_given_shape(small_calibration):
    from gemvbw.quant import random_activations, random_quantized

    qm = random_quantized(40, 320, bits=3)
    choice = calibrate.choose(3, "f32", 1, qm, random_activations(320))
    assert choice.source == "calibrated now"
    doc = json.loads((small_calibration / "calibration.json").read_text())
    assert [e["shape"] for e in doc.values()] == [[40, 320, 64, 2]]
    assert calibrate.choose(3, "f32", 1, qm, random_activations(320)).source == "cached"


def test_unreadable_cache_is_measured_again(small_calibration):
    (small_calibration / "calibration.json").write_text("{broken")
    assert calibrate.choose(8, "f32", 1).source == "calibrated now"


def test_failing_variant_is_never_chosen(small_calibration):
    good = kernels.get(2, "f32", "ref")

    def bind(qm):
        def fast_but_wrong(x, y):
            y[:] = 0.0

        return fast_but_wrong

    kernels.register(kernels.KernelSpec(2, "f32", "zero", "writes zeros", bind, priority=5))
    try:
        choice = calibrate.choose(2, "f32", 1)
        assert "zero" not in choice.timings_us
        assert choice.spec.variant != "zero"
    finally:
        kernels.unregister(2, "f32", "zero")
    assert good.variant == "ref"

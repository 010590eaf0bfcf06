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


def fixed(timings):
    """A measure() that returns given round timings (us) instead of timing anything."""
    def measure(bits, act, qm=None, x=None, exclude=frozenset(), threads=1, flusher=None):
        return {name: calibrate.robust(rounds) for name, rounds in timings.items() if name not in exclude}
    return measure


def test_choice_is_measured_then_cached(small_calibration, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [30, 31, 29, 30, 90], "rows4": [10, 11, 10, 12, 10]}))
    first = calibrate.choose(4, "f32", 1)
    assert first.source == "calibrated now" and first.spec.variant == "rows4"
    assert first.timings_us == {"ref": 30, "rows4": 10}  # medians: the outlier of 90 us does not count
    doc = json.loads((small_calibration / "calibration.json").read_text())
    assert [(e["variant"], e["timings_us"]) for e in doc.values()] == [("rows4", {"ref": 30, "rows4": 10})]

    def no_measuring(*a, **k):
        raise AssertionError("a cached choice must not be measured again")

    monkeypatch.setattr(calibrate, "measure", no_measuring)
    again = calibrate.choose(4, "f32", 1)
    assert again.source == "cached" and again.spec.variant == "rows4"


def test_a_lead_within_the_noise_is_used_but_not_cached(small_calibration, monkeypatch):
    # rows4 ahead by 2%: under the 3% margin, so the next run measures again
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [10.2] * 5, "rows4": [10.0] * 5}))
    choice = calibrate.choose(4, "f32", 1)
    assert choice.spec.variant == "rows4" and choice.source == "calibrated now; lead within the noise, not cached"
    assert not (small_calibration / "calibration.json").exists()
    # ahead by 20%, but the rounds spread by 17% and 10% (median absolute deviation / median): within the noise
    noisy = {"ref": [12, 9, 15, 10, 14], "rows4": [10, 8, 12, 9, 11]}
    monkeypatch.setattr(calibrate, "measure", fixed(noisy))
    assert calibrate.decide({n: calibrate.robust(v) for n, v in noisy.items()}) == ("rows4", False)
    assert calibrate.decide({"ref": calibrate.robust([12] * 5), "rows4": calibrate.robust([10] * 5)}) == ("rows4", True)


def test_recalibrate_measures_again_and_replaces_the_cached_choice(small_calibration, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [5] * 5, "rows4": [10] * 5}))
    assert calibrate.choose(2, "f32", 1).spec.variant == "ref"  # a busy moment made ref look faster: cached
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [20] * 5, "rows4": [10] * 5}))
    assert calibrate.choose(2, "f32", 1).source == "cached"
    redone = calibrate.choose(2, "f32", 1, recalibrate=True)
    assert (redone.spec.variant, redone.source) == ("rows4", "recalibrated")
    assert calibrate.choose(2, "f32", 1).spec.variant == "rows4"


def test_no_variant_left_is_a_calibration_failure(small_calibration, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", fixed({}))
    with pytest.raises(calibrate.CalibrationFailed, match="no w4 f32 variant passed verification"):
        calibrate.choose(4, "f32", 1)


def test_thread_count_and_shape_are_part_of_the_key(small_calibration):
    assert calibrate.machine_key(4, "f32", 1) != calibrate.machine_key(4, "f32", 2)
    assert calibrate.machine_key(4, "f32", 1) != calibrate.machine_key(2, "f32", 1)
    assert calibrate.machine_key(4, "f32", 1, (64, 256, 64, 2)) != calibrate.machine_key(4, "f32", 1, (64, 512, 64, 2))


def test_choice_is_made_on_the_given_shape(small_calibration, monkeypatch):
    from gemvbw.quant import random_activations, random_quantized

    shapes = []

    def measure(bits, act, qm=None, x=None, exclude=frozenset(), threads=1, flusher=None):
        shapes.append((qm.M, qm.K))
        return {"ref": calibrate.robust([20] * 5), "rows4": calibrate.robust([10] * 5)}

    monkeypatch.setattr(calibrate, "measure", measure)
    qm = random_quantized(40, 320, bits=3)
    choice = calibrate.choose(3, "f32", 1, qm, random_activations(320))
    assert shapes == [(40, 320)] and choice.spec.variant == "rows4"
    assert choice.source == "calibrated now"
    doc = json.loads((small_calibration / "calibration.json").read_text())
    assert [e["shape"] for e in doc.values()] == [[40, 320, 64, 2]]
    assert calibrate.choose(3, "f32", 1, qm, random_activations(320)).source == "cached"


def test_unreadable_cache_is_measured_again(small_calibration, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [20] * 5, "rows4": [10] * 5}))
    (small_calibration / "calibration.json").write_text("{broken")
    assert calibrate.choose(8, "f32", 1).source == "calibrated now"


def test_failing_variant_is_never_chosen(small_calibration):
    def bind(qm):
        def fast_but_wrong(x, y):
            y[:] = 0.0

        return fast_but_wrong

    kernels.register(kernels.KernelSpec(2, "f32", "zero", "writes zeros", bind, priority=5))
    try:
        timings = calibrate.measure(2, "f32", None, None, frozenset(), 1)  # the real measurement: zero is the fastest, but fails
        assert set(timings) == {"ref", "rows4"}
        choice = calibrate.choose(2, "f32", 1)
        assert set(choice.timings_us) == {"ref", "rows4"} and choice.spec.variant in ("ref", "rows4")
    finally:
        kernels.unregister(2, "f32", "zero")


def test_a_cached_choice_that_now_fails_is_reported_and_replaced(small_calibration):
    """The cache names a variant that fails verification on this shape: its failed row, then a new choice."""
    from click.testing import CliRunner

    from gemvbw.cli import main

    def bind(qm):
        def wrong(x, y):
            y[:] = 0.0

        return wrong

    kernels.register(kernels.KernelSpec(4, "f32", "broken", "writes zeros", bind, priority=5))
    try:
        key = calibrate.machine_key(4, "f32", 1, (64, 256, 64, 2), 1)  # the run's shape and flush
        (small_calibration / "calibration.json").write_text(json.dumps({key: {"variant": "broken"}}))
        res = CliRunner().invoke(main, ["sweep", "--M", "64", "--K", "256", "--bits", "4", "--act", "f32", "--iters",
                                        "2", "--reps", "1", "--flush-mib", "1", "--threads", "1", "--format", "json"])
        assert res.exit_code == 1, res.output
        doc = json.loads(res.stdout)
        assert [f["variant"] for f in doc["failures"]] == ["broken"]
        assert [r["variant"] for r in doc["results"]] in (["ref"], ["rows4"])
        assert doc["kernel_choice"]["w4"]["source"].endswith("after broken failed verification")
    finally:
        kernels.unregister(4, "f32", "broken")


def test_robust_is_the_median_and_its_relative_absolute_deviation():
    from gemvbw.calibrate import robust

    t = robust([1.0, 2.0, 3.0, 10.0])  # median 2.5; deviations 1.5 0.5 0.5 7.5, their median 1.0
    assert (t.median_us, t.spread) == (2.5, 0.4)
    assert robust([0.0, 0.0]).spread == 0.0 and robust([4.0]).median_us == 4.0


@pytest.mark.parametrize("timings,expected", [
    ({"a": (10.0, 0.0)}, ("a", True)),                                  # alone: nothing to be unsure about
    ({"b": (10.5, 0.01), "a": (10.0, 0.01)}, ("a", True)),             # 5 % lead, beyond 3 % and 2 % spread
    ({"a": (10.0, 0.0), "b": (10.2, 0.0)}, ("a", False)),              # 2 %: under the 3 % margin
    ({"a": (10.0, 0.0), "b": (10.29, 0.0), "c": (20.0, 0.0)}, ("a", False)),  # 2.9 %, just under the margin
    ({"a": (10.0, 0.0), "b": (10.31, 0.0), "c": (20.0, 0.0)}, ("a", True)),   # 3.1 %, just over it
    ({"a": (10.0, 0.03), "b": (10.5, 0.03)}, ("a", False)),            # 5 % lead inside 6 % of spread
    ({"a": (10.0, 0.0), "b": (12.0, 0.25), "c": (10.4, 0.0)}, ("a", True)),  # the runner-up by median is c
])
def test_decide_takes_the_fastest_median_and_caches_only_a_clear_lead(timings, expected):
    from gemvbw.calibrate import Timing, decide

    assert decide({n: Timing(*t) for n, t in timings.items()}) == expected


def test_measure_verifies_on_the_small_matrix_then_times_warm_rounds_within_the_budget(small_calibration,
                                                                                       monkeypatch):
    """measure() with its parts replaced: what each variant is verified on, how many calls a round gets from the
    first call's time, that a failing or crashing variant is skipped (not the end), rounds rotated, no flush."""
    import contextlib
    from types import SimpleNamespace

    import numpy as np

    from gemvbw.quant import random_activations, random_quantized

    first_s = {"slow": 0.5, "mid": 0.004, "fast": 1e-12}
    clock = iter([0.0, first_s["slow"], 10.0, 10.0 + first_s["mid"], 20.0, 20.0 + first_s["fast"]])
    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: next(clock))
    sessions = []

    def spec(name):
        def bind(qm):
            return lambda x, y: None

        return SimpleNamespace(variant=name, bind=bind,
                               session=lambda threads: sessions.append((name, threads)) or contextlib.nullcontext())

    specs = [spec(n) for n in ("wrong", "slow", "crash", "mid", "left out", "fast")]
    monkeypatch.setattr(kernels, "variants", lambda bits, act: specs if (bits, act) == (4, "i8") else [])
    verified = []

    def verify(s, qm, x):
        verified.append((s.variant, qm, x))
        if s.variant == "crash":
            raise RuntimeError("the kernel crashed")
        return SimpleNamespace(ok=s.variant != "wrong")

    monkeypatch.setattr(calibrate, "verify", verify)
    timed = []

    def time_groups(call, iters, groups, flusher):
        timed.append((iters, groups, flusher.flush_mib))
        return SimpleNamespace(best_avg_us=float(len(timed)))

    monkeypatch.setattr(calibrate, "time_groups", time_groups)
    monkeypatch.setattr(calibrate, "CALIB_ITERS", 20)
    qm = random_quantized(8, 128, 4, 32, 4, seed=1)
    got = calibrate.measure(4, "i8", qm, np.ones(128, np.float32), exclude=frozenset({"left out"}), threads=3)

    small = random_quantized(16, 256, 4, 32, 4, seed=99)  # CALIB_M x CALIB_K, the shape's block and metadata
    assert [v for v, _, _ in verified] == ["wrong", "slow", "crash", "mid", "fast"]
    for _, m, x in verified:
        assert (m.M, m.K, m.block, m.meta_bytes) == (16, 256, 32, 4) and np.array_equal(m.codes, small.codes)
        assert np.array_equal(x, random_activations(256, seed=99))
    assert sorted(got) == ["fast", "mid", "slow"]
    assert len(timed) == 3 * 7 and all(g == 1 and mib == 0 for _, g, mib in timed)  # one group, warm
    # rotated rounds: round r starts at candidate r mod 3 of [slow, mid, fast]
    order = ["slow", "mid", "fast"]
    expected = [order[(r + i) % 3] for r in range(7) for i in range(3)]
    # calls per round: BUDGET_S / CALIB_ROUNDS / the first call (0.5 / 7 / 0.004 s = 17), at least 1, at most
    # CALIB_ITERS
    iters = {"slow": 1, "mid": 17, "fast": 20}
    assert [t[0] for t in timed] == [iters[n] for n in expected]
    samples = {n: [float(i + 1) for i, e in enumerate(expected) if e == n] for n in order}
    assert got == {n: calibrate.robust(samples[n]) for n in order}
    assert sessions == [(n, 3) for n in expected]


def test_one_variant_or_an_emulated_cpu_is_chosen_without_measuring(small_calibration, monkeypatch):
    from types import SimpleNamespace

    from gemvbw import system

    def no_measuring(*a, **k):
        raise AssertionError("nothing is timed")

    monkeypatch.setattr(calibrate, "measure", no_measuring)
    one, two = SimpleNamespace(variant="one"), SimpleNamespace(variant="two")
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [one, two] if act == "i8" else [])
    only = calibrate.choose(4, "i8", 1, exclude=frozenset({"one"}))
    assert (only.spec, only.source, only.timings_us, only.spread) == (two, "only variant", {}, {})
    with pytest.raises(calibrate.CalibrationFailed) as err:
        calibrate.choose(4, "f32", 1)
    assert str(err.value) == "no w4 f32 kernel is left to choose from"
    monkeypatch.setattr(system, "describe_cpu", lambda: {"emulated": True})
    emulated = calibrate.choose(4, "i8", 1)
    assert (emulated.spec, emulated.source, emulated.timings_us) == (one, "preferred; not calibrated under emulation", {})
    assert emulated.to_dict() == {"variant": "one", "source": "preferred; not calibrated under emulation",
                                  "timings_us": {}, "spread": {}, "flush_mib": 0}


def test_a_cached_choice_keeps_its_timings_and_spread(small_calibration, monkeypatch):
    monkeypatch.setattr(calibrate, "measure", fixed({"ref": [20, 21, 19, 20, 20], "rows4": [10, 10, 11, 10, 9]}))
    first = calibrate.choose(8, "f32", 1)
    cached = calibrate.choose(8, "f32", 1)
    assert cached.source == "cached" and cached.spec.variant == "rows4"
    assert cached.timings_us == first.timings_us == {"ref": 20, "rows4": 10}
    assert cached.spread == first.spread == {"ref": 0.0, "rows4": 0.0}
    assert cached.to_dict() == {"variant": "rows4", "source": "cached", "timings_us": {"ref": 20, "rows4": 10},
                                "spread": {"ref": 0.0, "rows4": 0.0}, "flush_mib": 0}


def test_a_cache_file_that_is_not_a_mapping_is_measured_again(small_calibration, monkeypatch):
    calibrate.cache_path().parent.mkdir(parents=True, exist_ok=True)
    calibrate.cache_path().write_text("[1, 2]")
    assert calibrate._load() == {}


def test_spread_below_one_microsecond_and_a_lead_exactly_at_the_noise():
    assert calibrate.robust([0.5, 0.5, 0.6]) == calibrate.Timing(0.5, 0.0)
    assert calibrate.robust([0.4, 0.5, 0.7]) == calibrate.Timing(0.5, pytest.approx(0.2))
    exact = {"a": calibrate.Timing(1.0, 0.25), "b": calibrate.Timing(1.5, 0.25)}  # lead 0.5 = the two spreads
    assert calibrate.decide(exact) == ("a", False)  # not beyond the noise: used, not cached


def test_the_cache_file_holds_the_whole_choice(small_calibration, monkeypatch):
    nested = small_calibration / "a" / "b"  # a cache directory that does not exist yet, two levels down
    monkeypatch.setenv("GEMVBW_CACHE_DIR", str(nested))
    seen = []

    def measure(bits, act, qm, x, exclude, threads, flusher):
        seen.append(threads)
        return {"ref": calibrate.Timing(20.0, 0.123456), "rows4": calibrate.Timing(10.0, 0.0)}

    monkeypatch.setattr(calibrate, "measure", measure)
    got = calibrate.choose(8, "f32", 2)
    assert seen == [2] and got.spread == {"ref": 0.1235, "rows4": 0.0}
    text = (nested / "calibration.json").read_text()
    key = calibrate.machine_key(8, "f32", 2, ())
    assert json.loads(text) == {key: {"bits": 8, "act": "f32", "threads": 2, "variant": "rows4",
                                      "timings_us": {"ref": 20.0, "rows4": 10.0}, "spread": {"ref": 0.1235, "rows4": 0.0},
                                      "shape": [16, 256], "flush_mib": 0}}
    assert text.startswith('{\n "' + key + '": {\n  "bits": 8,')  # indented by one: a file a person can read


def test_the_key_changes_with_the_cpu_and_the_variant_set(monkeypatch):
    from types import SimpleNamespace

    from gemvbw import system

    base = calibrate.machine_key(4, "i8", 1)
    monkeypatch.setattr(system, "describe_cpu", lambda: {"cpu": "another"})
    other_cpu = calibrate.machine_key(4, "i8", 1)
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [SimpleNamespace(variant="only")])
    assert len({base, other_cpu, calibrate.machine_key(4, "i8", 1)}) == 3
    # the variant set is the width's own, of the activation type asked for: another width's or type's new variant
    # leaves the key alone, its own changes it
    sets = {(4, "i8"): ["a", "b"], (8, "i8"): ["a"], (4, "f32"): ["ref"]}
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [SimpleNamespace(variant=v) for v in sets[(bits, act)]])
    w4 = calibrate.machine_key(4, "i8", 1)
    sets[(8, "i8")].append("c")
    sets[(4, "f32")].append("rows4")
    assert calibrate.machine_key(4, "i8", 1) == w4
    sets[(4, "i8")] = ["a,b"]  # one variant whose name holds the separator is not the two of them
    assert calibrate.machine_key(4, "i8", 1) != w4


def test_the_key_is_the_cpus_facts_whatever_order_they_were_read_in(monkeypatch):
    from gemvbw import system

    monkeypatch.setattr(system, "describe_cpu", lambda: {"cpu": "x", "isa": ["a", "b"], "cores": 2})
    first = calibrate.machine_key(4, "i8", 1)
    monkeypatch.setattr(system, "describe_cpu", lambda: {"cores": 2, "isa": ["a", "b"], "cpu": "x"})
    assert calibrate.machine_key(4, "i8", 1) == first
    assert len(first) == 16 and int(first, 16) >= 0  # the cache file's keys: 16 hex digits


def test_measure_with_every_variant_failing_times_nothing(small_calibration, monkeypatch):
    from types import SimpleNamespace

    spec = SimpleNamespace(variant="wrong", bind=lambda qm: lambda x, y: None)
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [spec])
    monkeypatch.setattr(calibrate, "verify", lambda s, qm, x: SimpleNamespace(ok=False))
    assert calibrate.measure(4, "f32", None, None, frozenset(), 1) == {}


def test_the_choice_is_made_under_the_runs_flush_and_kept_apart_from_a_warm_one(small_calibration, monkeypatch):
    """A cold run calibrates cold (each call after the run's own flush), and its choice is cached under a key of
    its own: a warm run of the same shape does not take it, and the note says which it was."""
    from types import SimpleNamespace

    from gemvbw.report.text import note_lines

    given = []
    ranking = {8: {"ref": [10] * 5, "rows4": [20] * 5}, 0: {"ref": [20] * 5, "rows4": [10] * 5}}

    def measure(bits, act, qm, x, exclude, threads, flusher):
        given.append(flusher)
        mib = 0 if flusher is None else flusher.flush_mib
        return {n: calibrate.robust(r) for n, r in ranking[mib].items()}

    monkeypatch.setattr(calibrate, "measure", measure)
    cold_flush = SimpleNamespace(flush_mib=8)
    cold = calibrate.choose(8, "f32", 1, flusher=cold_flush)
    warm = calibrate.choose(8, "f32", 1)
    assert given == [cold_flush, None]  # the run's flusher itself, not one of the calibration's own
    assert (cold.spec.variant, cold.flush_mib, warm.spec.variant, warm.flush_mib) == ("ref", 8, "rows4", 0)
    assert calibrate.machine_key(8, "f32", 1, (), 8) != calibrate.machine_key(8, "f32", 1, (), 0)
    doc = json.loads(calibrate.cache_path().read_text())
    assert sorted((e["variant"], e["flush_mib"]) for e in doc.values()) == [("ref", 8), ("rows4", 0)]
    again = calibrate.choose(8, "f32", 1, flusher=cold_flush)
    assert (again.source, again.spec.variant, again.flush_mib, len(given)) == ("cached", "ref", 8, 2)
    record = SimpleNamespace(notes=[], results=[], roofline=None, read_after=None,
                             kernel_choice={"w8": cold.to_dict(), "w4": warm.to_dict(),
                                            "w2": {**warm.to_dict(), "flush_mib": None}})
    record.kernel_choice["w2"].pop("flush_mib")  # a record written before calibration followed the flush
    assert note_lines(record) == [
        "--kernel auto chose ref for w8 (calibrated now; cold calibration on this shape (8 MiB flush before each "
        "call): ref 10 us, rows4 20 us)",
        "--kernel auto chose rows4 for w4 (calibrated now; warm calibration on this shape: rows4 10 us, ref 20 us)",
        "--kernel auto chose rows4 for w2 (calibrated now; warm calibration on this shape: rows4 10 us, ref 20 us)",
    ]


def test_measure_flushes_before_every_call_and_counts_the_flush_in_the_budget(small_calibration, monkeypatch):
    """With the run's flusher: the first call (which sets the calls per round) is timed with its flush, and every
    round is timed under that same flusher."""
    import contextlib
    from types import SimpleNamespace

    import numpy as np

    from gemvbw.quant import random_quantized

    events = []

    class Flusher:
        flush_mib = 64

        def flush(self):
            events.append("flush")

    flusher = Flusher()
    # the first call's clock: 0 before the flush, 0.002 s after the call; a flush that were left out of it
    # would make the call look free (iters at CALIB_ITERS)
    clock = iter([0.0, 0.002])
    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: next(clock))
    spec = SimpleNamespace(variant="only", bind=lambda qm: lambda x, y: events.append("call"),
                           session=lambda threads: contextlib.nullcontext())
    monkeypatch.setattr(kernels, "variants", lambda bits, act: [spec])
    monkeypatch.setattr(calibrate, "verify", lambda s, qm, x: SimpleNamespace(ok=True))
    timed = []

    def time_groups(call, iters, groups, used):
        timed.append((iters, used))
        call()  # what is timed is the variant's own call
        return SimpleNamespace(best_avg_us=1.0)

    monkeypatch.setattr(calibrate, "time_groups", time_groups)
    monkeypatch.setattr(calibrate, "CALIB_ITERS", 100)
    calibrate.measure(4, "f32", random_quantized(8, 128, 4, 32, 4, seed=1), np.ones(128, np.float32),
                      frozenset(), 1, flusher)
    assert events == ["flush", "call"] + ["call"] * calibrate.CALIB_ROUNDS  # the first call after its flush, then
    # each round's (the fake time_groups calls once and does not flush)
    # 0.5 s / 7 rounds / 0.002 s = 35 calls per round
    assert timed == [(35, flusher)] * calibrate.CALIB_ROUNDS


def test_soak_calibrates_under_its_own_flush(small_calibration, monkeypatch):
    from gemvbw import soak
    from gemvbw.settings import resolve

    given = []

    def choose(bits, act, threads, qm, x, recalibrate=False, flusher=None):
        given.append((bits, act, threads, (qm.M, qm.K), flusher.flush_mib))
        return calibrate.Choice(kernels.get(bits, act, "ref"), "test", {})

    monkeypatch.setattr(calibrate, "choose", choose)
    s = resolve({"M": "16", "K": "128", "bits": "4", "act": "f32", "threads": "1", "flush_mib": "3"}, environ={},
                cpus=[0], available_bytes=1 << 40, defaults={"bits": (4,)})
    record = soak.soak(s, 0.2, 0.1)
    assert given == [(4, "f32", 1, (16, 128), 3)] and record.variant == "ref"


def test_a_cached_entry_with_only_its_variant_is_used_as_it_is(small_calibration):
    key = calibrate.machine_key(8, "f32", 1, ())
    calibrate.cache_path().write_text(json.dumps({key: {"variant": "rows4"}}))  # an older or hand-made entry
    got = calibrate.choose(8, "f32", 1)
    assert (got.spec.variant, got.source, got.timings_us, got.spread, got.flush_mib) == ("rows4", "cached", {}, {}, 0)

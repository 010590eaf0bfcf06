"""compare: rows matched by shape, width, block, activations and variant; the ratios; what differs; bad files."""

import pytest

from gemvbw.compare import MalformedResult, check_results, compare


def result(M=64, K=256, bits=4, variant="rows4", gbps=10.0, us=2.0, act="f32", block=64):
    return {"M": M, "K": K, "bits": bits, "block": block, "act": act, "variant": variant, "eff_gbps": gbps,
            "best_avg_us": us}


def doc(results, kernel="rows4", threads=2, cpu="A", **settings):
    return {"settings": {"kernel": kernel, "threads": threads, **settings}, "system": {"cpu": cpu},
            "results": results}


def test_three_runs_side_by_side_exactly():
    first = doc([result(gbps=10.0, us=2.0), result(bits=2, gbps=8.0, us=1.5)])
    second = doc([result(gbps=12.5, us=1.6), result(bits=8, gbps=20.0, us=3.0)], threads=1)
    third = doc([result(gbps=5.0, us=4.0), result(bits=2, gbps=4.0, us=3.0), result(act="i8", gbps=30.0, us=0.7)],
                cpu="B")
    cmp = compare([first, second, third], ["a.json", "b.json", "c.json"])
    assert cmp.to_dict() == {
        "runs": ["a.json", "b.json", "c.json"],
        "rows": [
            {"M": 64, "K": 256, "bits": 4, "block": 64, "act": "f32", "variant": "rows4", "eff_gbps": [10.0, 12.5, 5.0],
             "best_avg_us": [2.0, 1.6, 4.0], "ratio_to_first": [1.0, 1.25, 0.5]},
            {"M": 64, "K": 256, "bits": 2, "block": 64, "act": "f32", "variant": "rows4", "eff_gbps": [8.0, None, 4.0],
             "best_avg_us": [1.5, None, 3.0], "ratio_to_first": [1.0, None, 0.5]},
            {"M": 64, "K": 256, "bits": 8, "block": 64, "act": "f32", "variant": "rows4",
             "eff_gbps": [None, 20.0, None], "best_avg_us": [None, 3.0, None], "ratio_to_first": [None, None, None]},
            {"M": 64, "K": 256, "bits": 4, "block": 64, "act": "i8", "variant": "rows4",
             "eff_gbps": [None, None, 30.0], "best_avg_us": [None, None, 0.7], "ratio_to_first": [None, None, None]},
        ],
        "differences": ["settings.threads: 2 vs 1 vs 2", "system.cpu: A vs A vs B"],
    }


def test_only_runs_that_all_chose_their_kernel_match_by_width():
    auto = doc([result(variant="packed-4x2-avx2", gbps=10.0)], kernel="auto")
    other = doc([result(variant="packed-4x2-avxvnni", gbps=11.0)], kernel="auto")
    named = doc([result(variant="packed-4x2-avxvnni", gbps=11.0)], kernel="packed-4x2-avxvnni")
    both = compare([auto, other], ["a", "b"])
    assert [(r.key, r.ratios) for r in both.rows] == [((64, 256, 4, 64, "f32", "auto"), (1.0, 1.1))]
    assert both.differences == ("variant w4 64x256: packed-4x2-avx2 vs packed-4x2-avxvnni",)
    mixed = compare([auto, named], ["a", "b"])
    assert [r.key[-1] for r in mixed.rows] == ["packed-4x2-avx2", "packed-4x2-avxvnni"]
    assert mixed.differences == ("settings.kernel: auto vs packed-4x2-avxvnni",)
    same = compare([auto, auto], ["a", "b"])
    assert same.differences == ()


def test_a_missing_act_means_f32_and_a_missing_block_matches_nothing_else():
    old = {"settings": {}, "system": {}, "results": [{"M": 8, "K": 64, "bits": 4, "variant": "ref", "eff_gbps": 1.0,
                                                      "best_avg_us": 1.0}]}
    new = doc([result(M=8, K=64, variant="ref", gbps=2.0, block=None)])
    cmp = compare([old, new], ["old", "new"])
    assert [r.ratios for r in cmp.rows] == [(1.0, 2.0)]


@pytest.mark.parametrize("bad,message", [
    ({"results": {}}, "x: 'results' is dict, not a list"),
    ({"results": [3]}, "x: results[0] is int, not a mapping"),
    ({"results": [{**result(), "M": "64"}]}, "x: results[0].M is '64', not a number gemvbw writes"),
    ({"results": [{**result(), "bits": True}]}, "x: results[0].bits is True, not a number gemvbw writes"),
    ({"results": [result(), {**result(), "eff_gbps": None}]},
     "x: results[1].eff_gbps is None, not a number gemvbw writes"),
    ({"results": [{**result(), "best_avg_us": "1"}]}, "x: results[0].best_avg_us is '1', not a number gemvbw writes"),
    ({"results": [{**result(), "K": 1.5}]}, "x: results[0].K is 1.5, not a number gemvbw writes"),
    ({"results": [], "settings": []}, "x: 'settings' is not a mapping"),
    ({"results": [], "system": "cpu"}, "x: 'system' is not a mapping"),
])
def test_malformed_results_are_named(bad, message):
    with pytest.raises(MalformedResult) as err:
        check_results(bad, "x")
    assert str(err.value) == message


def test_well_formed_results_pass():
    check_results({"results": [result(gbps=3), result(us=1)], "settings": {}, "system": {}}, "x")
    check_results({}, "x")


def test_a_file_without_results_or_system_compares_as_empty():
    cmp = compare([{"settings": {"kernel": "rows4"}}, doc([result(gbps=4.0)])], ["old", "new"])
    assert [(r.eff_gbps, r.ratios) for r in cmp.rows] == [((None, 4.0), (None, None))]
    assert "system.cpu: None vs A" in cmp.differences


def test_a_malformed_file_is_named_by_its_label_through_compare():
    with pytest.raises(MalformedResult, match=r"^second: results\[0\] is int, not a mapping$"):
        compare([doc([result()]), {"results": [1]}], ["first", "second"])

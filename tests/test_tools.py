"""tools/mutation.py's bookkeeping (mutmut itself is not run here: too slow for the suite)."""

import json

import pytest


@pytest.fixture(scope="module")
def mutation(load_script):
    return load_script("tools/mutation.py", "mutation_tool")


def test_retrace_forgets_only_which_tests_were_traced(mutation, tmp_path):
    assert mutation.forget_traces(tmp_path) is False  # no run yet: nothing to forget
    (tmp_path / "mutants").mkdir()
    stats = {"duration_by_test": {"tests/a.py::t": 0.5}, "tests_by_mangled_function_name": {"f": ["tests/a.py::t"]},
             "function_hashes": {"f": "abc"}}
    (tmp_path / "mutants" / "mutmut-stats.json").write_text(json.dumps(stats))
    assert mutation.forget_traces(tmp_path) is True
    # every test is new to mutmut again (it traces those it has no duration for); the mutants' hashes are kept,
    # so no result is thrown away
    assert json.loads((tmp_path / "mutants" / "mutmut-stats.json").read_text()) == {**stats, "duration_by_test": {}}


def test_the_score_counts_kills_of_generated_and_of_run(mutation):
    found = {"gemvbw/a.py": {"a1": "killed", "a2": "timeout", "a3": "survived", "a4": "not checked"},
             "gemvbw/b.py": {"b1": "no tests"}}
    lines = mutation.report(found).splitlines()
    assert lines[2] == "| gemvbw/a.py | 4 | 3 | 2 | 1 | 1 | 0 | 0 | 50.0 % | 66.7 % |"
    assert lines[3] == "| gemvbw/b.py | 1 | 1 | 0 | 0 | 0 | 1 | 0 | 0.0 % | 0.0 % |"
    assert lines[4] == "| all | 5 | 4 | 2 | 1 | 1 | 1 | 0 | 40.0 % | 50.0 % |"
    assert lines[6:] == ["2 run and not killed (see one with: mutmut show NAME):", "  a3", "  b1"]

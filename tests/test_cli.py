"""The CLI end to end on a tiny shape, for every format, plus errors and failing kernels."""

import csv
import io
import json
import math

import pytest
from click.testing import CliRunner

from gemvbw import kernels
from gemvbw.cli import main

# --llc-mib: the read roofline's buffer follows the cache (8x it), so without it a machine reporting a large L3
# (a VM's 480 MiB) reads 3840 MiB in every one of these sweeps
TINY = ["sweep", "--M", "64", "--K", "256", "--iters", "3", "--reps", "2", "--flush-mib", "1",
        "--llc-mib", "32", "--threads", "1"]


def run(args, env=None):
    return CliRunner().invoke(main, args, env=env or {}, catch_exceptions=False)


@pytest.fixture(scope="module")
def json_run():
    res = run(TINY + ["--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_json_schema_fields(json_run):
    doc = json_run
    assert doc["schema"] == "gemvbw.sweep/1"
    assert doc["partial"] is False
    for key in ("version", "created", "system", "settings", "roofline", "results"):
        assert key in doc
    for key in ("cpu", "isa", "cores", "affinity", "numba", "threading_layer"):
        assert key in doc["system"]
    assert doc["settings"]["M"] == 64 and doc["settings"]["bits"] == [8, 4, 3, 2]
    assert {"threads", "memcpy_gbps", "read_gbps"}.issubset(doc["roofline"])
    assert [r["bits"] for r in doc["results"]] == [8, 4, 3, 2]
    fields = {"bits", "M", "K", "block", "threads", "act", "variant", "best_avg_us", "overall_mean_us",
              "overall_sd_us", "median_us", "groups", "logical_bytes", "stored_bytes", "bytes_per_elem",
              "eff_gbps", "pct_peak", "pct_read", "gflops", "ai", "verified", "max_rel_err"}
    for r in doc["results"]:
        assert fields <= set(r)
        assert r["verified"] is True
        assert len(r["groups"]) == 2 and all(g["iters"] == 3 for g in r["groups"])


def test_json_read_roofline_measured_again_after_the_rows(json_run):
    # the second reading follows from its trial times as the first does, and the warning is there exactly when
    # the two differ by more than a tenth (either way, on this machine: both are the run's own figures)
    rf = json_run["roofline"]
    assert rf["read_after_gbps"] == pytest.approx(rf["read_buffer_bytes"] / min(rf["read_after_trials_s"]) / 1e9)
    assert rf["read_after_streams"] in (1, 4, 8) and len(rf["read_after_trials_s"]) == 5
    moved = abs(rf["read_after_gbps"] / rf["read_gbps"] - 1) > 0.10
    assert ("read-roofline-moved" in [w["code"] for w in json_run["warnings"]]) == moved


def test_json_figures_follow_from_raw_latencies(json_run):
    doc = json_run
    memcpy, read = doc["roofline"]["memcpy_gbps"], doc["roofline"]["read_gbps"]
    for r in doc["results"]:
        lat = [t for g in r["groups"] for t in g["latencies_ns"]]
        means = [sum(g["latencies_ns"]) / len(g["latencies_ns"]) / 1e3 for g in r["groups"]]
        for g, m in zip(r["groups"], means):
            assert g["mean_us"] == pytest.approx(m)
        best_s = min(means) / 1e6
        assert r["best_avg_us"] == pytest.approx(min(means))
        assert r["overall_mean_us"] == pytest.approx(sum(lat) / len(lat) / 1e3)
        lb = math.ceil(r["M"] * r["K"] * r["bits"] / 8) + r["M"] * math.ceil(r["K"] / r["block"]) * 2 * 2
        assert r["logical_bytes"] == lb
        assert r["bytes_per_elem"] == pytest.approx(lb / (r["M"] * r["K"]))
        assert r["eff_gbps"] == pytest.approx(lb / best_s / 1e9)
        assert r["pct_peak"] == pytest.approx(100 * r["eff_gbps"] / memcpy)
        assert r["pct_read"] == pytest.approx(100 * r["eff_gbps"] / read)
        assert r["gflops"] == pytest.approx(2 * r["M"] * r["K"] / best_s / 1e9)
        assert r["ai"] == pytest.approx(2 / r["bytes_per_elem"])


def test_small_shape_is_flagged_as_call_overhead(json_run):
    # each row carries its kernel's fixed cost (the same kernel on a 16 x 2-block matrix after the run's flush) and
    # is flagged exactly when that is at least 10% of its latency: the rule, checked on the run's own figures, since
    # whether 64 x 256 falls under it on a busy host is a timing (the rule's edges are in test_coverage.py)
    from gemvbw.results import FIXED_COST_SHARE

    assert json_run["call_overhead_us"] > 0 and json_run["call_overhead_cold_us"] > 0
    for r in json_run["results"]:
        fixed = r["fixed_cost"]
        assert (fixed["M"], fixed["K"], fixed["flush_mib"]) == (16, 2 * r["block"], 1) and fixed["median_us"] > 0
        flagged = "call-overhead" in {n["code"] for n in r["notes"]}
        assert flagged == (fixed["median_us"] >= FIXED_COST_SHARE * r["best_avg_us"]), (r["bits"], r["best_avg_us"], fixed)


def test_mnn_format_tables():
    res = run(TINY + ["--bits", "4,2", "--format", "mnn"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "## GemvBW (" in out and "blocksize=64" in out
    assert "## Peak streaming bandwidth (memcpy, 256 MiB buffer)" in out
    assert "(used as roofline)" in out and "Read-only bandwidth" in out
    assert "type | thr | us/iter | W MiB | bytes/elem | eff GB/s | %peak | GFLOPS | AI (op/B)" in out
    rows = [l for l in out.splitlines() if l.startswith("w4 ") or l.startswith("w2 ")]
    assert rows[0].split("|")[4].strip() == "0.5625" and rows[0].split("|")[8].strip() == "3.56"
    assert rows[1].split("|")[4].strip() == "0.3125"
    assert "## Notes" in out and "memcpy GB/s counts each byte twice" in out


def test_auto_format_is_mnn_when_piped():
    res = run(TINY + ["--bits", "8"])
    assert res.exit_code == 0 and "type | thr | us/iter" in res.stdout


def test_rich_format():
    res = run(TINY + ["--bits", "3", "--format", "rich"])
    assert res.exit_code == 0, res.output
    assert "eff GB/s" in res.stdout and "w3" in res.stdout and "0.4375" in res.stdout


def test_csv_format_and_files(tmp_path):
    jpath, cpath = tmp_path / "r.json", tmp_path / "r.csv"
    res = run(TINY + ["--bits", "8,3", "--format", "csv", "--json", str(jpath), "--csv", str(cpath)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["type"] for r in rows] == ["w8", "w3"]
    assert float(rows[1]["bytes_per_elem"]) == pytest.approx(0.4375)
    assert cpath.read_text() == res.stdout
    assert json.loads(jpath.read_text())["results"][1]["bits"] == 3


def test_environment_settings_reach_the_run():
    res = run(["sweep", "--iters", "2", "--reps", "1", "--flush-mib", "0", "--format", "json"],
              env={"MNN_GEMVBW_M": "32", "MNN_GEMVBW_K": "128", "MNN_GEMVBW_BITS": "4", "MNN_GEMVBW_THREADS": "1"})
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["settings"]["M"], doc["settings"]["K"], doc["settings"]["bits"]) == (32, 128, [4])
    assert doc["results"][0]["threads"] == 1


@pytest.mark.parametrize("args,env,fragment", [
    (["--M", "abc"], {}, "--M: 'abc' is not a whole number"),
    ([], {"MNN_GEMVBW_K": "0"}, "MNN_GEMVBW_K: must be positive"),
    ([], {"MNN_GEMVBW_M": "4096.5"}, "MNN_GEMVBW_M"),
    ([], {"MNN_GEMVBW_M": ""}, "MNN_GEMVBW_M: is empty"),
    (["--bits", "5"], {}, "--bits: '5' is not a supported width"),
    (["--bits", "4,4"], {}, "listed twice"),
    (["--bits", ""], {}, "--bits: '' lists no bit width"),
    (["--block", "0"], {}, "--block: must be positive"),
    ([], {"MNN_GEMVBW_M": "-5"}, "MNN_GEMVBW_M: '-5' is not a whole number"),
    ([], {"MNN_GEMVBW_M": "abc"}, "MNN_GEMVBW_M: 'abc' is not a whole number"),
    (["--block", "7"], {}, "--block: must be a multiple of 8"),
    (["--threads", "64"], {}, "--threads: 64 threads asked for"),
    (["--threads", "0"], {}, "--threads: must be positive"),
    (["--M", "200000", "--K", "200000"], {}, "GB is available"),
    (["--json", "/nonexistent/dir/x.json"], {}, "--json: directory '/nonexistent/dir' does not exist"),
    (["--kernel", "nope"], {}, "--kernel: no variant 'nope'"),
    (["--bits", "8", "--bits=4"], {}, "--bits was given 2 times ('8', then '4'); only one would count. "
                                      "List the values once, comma separated, e.g. --bits 8,4"),
    (["--bits", "8,4", "--bits", "4", "--bits", "2"], {}, "e.g. --bits 8,4,2"),
    (["--M", "16", "--K", "128", "--M", "32"], {}, "--M was given 2 times ('16', then '32'); only one would count. "
                                                   "Give it once, e.g. --M 32"),
])
def test_bad_input_exit_2_one_line(args, env, fragment):
    res = run(["sweep"] + args, env=env)
    assert res.exit_code == 2
    assert fragment in res.stderr
    assert "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_failing_kernel_is_an_error_row_and_exit_1(monkeypatch):
    good = kernels.get(4)

    def bind(qm):
        run_good = good.bind(qm)

        def wrong(x, y):
            run_good(x, y)
            y *= 1.01

        return wrong

    spec = kernels.KernelSpec(4, "f32", "broken", "scales y by 1.01", bind, priority=-1)
    kernels.register(spec)
    try:
        res = run(TINY + ["--bits", "4", "--kernel", "all", "--format", "mnn"])
        assert res.exit_code == 1
        row = [l for l in res.stdout.splitlines() if l.startswith("w4 f32 broken")][0]  # --kernel all: f32 and i8
        assert "FAILED verification" in row and "GB/s" not in row
        assert [l for l in res.stdout.splitlines() if l.startswith("w4 f32 ref |")]
        res = run(TINY + ["--bits", "4", "--kernel", "broken", "--format", "json"])
        assert res.exit_code == 1
        doc = json.loads(res.stdout)
        assert doc["results"] == [] and doc["failures"][0]["verified"] is False
    finally:
        kernels.unregister(4, "f32", "broken")


def test_help_and_module_entry():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gemvbw", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "sweep" in out.stdout
    assert "MNN_GEMVBW_M" in run(["sweep", "--help"]).stdout


def test_compare_warm_shows_both(tmp_path):
    res = run(TINY + ["--bits", "4", "--compare-warm", "--format", "json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)["results"][0]
    # the warm figure follows from its own group means by the same formula as the cold one
    warm_best = min(g["mean_us"] for g in r["warm"]["groups"])
    assert r["warm"]["best_avg_us"] == pytest.approx(warm_best) and math.isfinite(warm_best)
    assert r["warm"]["eff_gbps"] == pytest.approx(r["logical_bytes"] / (warm_best / 1e6) / 1e9)
    assert len(r["warm"]["groups"]) == 2
    res = run(TINY + ["--bits", "4", "--compare-warm", "--format", "mnn"])
    assert "## Warm versus cold cache" in res.stdout
    # the tiny matrix fits in any last-level cache: the warm figure is called a cache figure
    assert "warm-cache" in {n["code"] for n in r["notes"]} or "the warm (no flush) figure is a cache figure" in res.stdout


def test_llc_override_and_small_flush_warning():
    res = run(["sweep", "--M", "64", "--K", "256", "--iters", "3", "--reps", "2", "--flush-mib", "4", "--threads", "1",
               "--bits", "8", "--llc-mib", "8", "--format", "json"])
    doc = json.loads(res.stdout)
    assert doc["system"]["llc_bytes_used"] == 8 << 20
    warn = [w for w in doc["warnings"] if w["code"] == "flush-small"]
    assert warn and "from --llc-mib" in warn[0]["message"] and "--flush-mib 64" in warn[0]["advice"]


def test_the_default_flush_is_four_times_the_last_level_cache_where_that_is_over_64_mib():
    res = run(["sweep", "--M", "64", "--K", "256", "--iters", "2", "--reps", "1", "--threads", "1", "--bits", "8",
               "--llc-mib", "40", "--format", "json"])
    doc = json.loads(res.stdout)
    assert doc["settings"]["flush_mib"] == 160
    assert "flush-small" not in {w["code"] for w in doc["warnings"]}


def test_max_seconds_adds_groups_until_stable_or_time_is_up():
    res = run(TINY + ["--bits", "8", "--max-seconds", "2", "--format", "json"])  # TINY's --reps 2
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)["results"][0]
    assert r["stable"] in (True, False)
    assert len(r["groups"]) >= 2
    assert r["groups_extended"] == (len(r["groups"]) > 2)
    if not r["stable"]:
        assert "groups-disagree" in {n["code"] for n in r["notes"]}


def test_an_option_given_twice_is_refused_in_every_command_but_repeatable_ones_and_help_still_work():
    res = run(["soak", "--bits", "4", "--bits", "2"])
    assert res.exit_code == 2 and res.stderr.strip() == (
        "Error: --bits was given 2 times ('4', then '2'); only one would count. Give it once, e.g. --bits 2")
    assert run(["sweep", "--bits", "8", "--bits", "4", "--help"]).exit_code == 0
    res = run(["sweep", "--shape", "16x128", "--shape", "8x128", "--bits", "4", "--iters", "2", "--reps", "1",
               "--flush-mib", "0", "--threads", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert {(r["M"], r["K"]) for r in json.loads(res.stdout)["results"]} == {(16, 128), (8, 128)}


def test_bad_max_seconds():
    res = run(["sweep", "--max-seconds", "soon"])
    assert res.exit_code == 2 and "--max-seconds" in res.stderr


def test_rerun_repeats_settings_and_compares(tmp_path):
    first = tmp_path / "first.json"
    res = run(TINY + ["--bits", "4,2", "--seed", "7", "--format", "json", "--json", str(first)])
    assert res.exit_code == 0
    res = run(["sweep", "--rerun", str(first), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["settings"]["seed"] == 7 and doc["settings"]["M"] == 64 and doc["settings"]["bits"] == [4, 2]
    rows = doc["comparison"]["rows"]
    assert [r["bits"] for r in rows] == [4, 2]
    for r in rows:
        assert r["ratio_to_first"][1] == pytest.approx(r["eff_gbps"][1] / r["eff_gbps"][0])
    # a flag given with --rerun wins, and the difference is marked
    res = run(["sweep", "--rerun", str(first), "--iters", "2", "--format", "mnn"])
    assert "## Rerun: against" in res.stdout and "! differs: settings.iters: 3 vs 2" in res.stdout


def test_rerun_repeats_the_activations_and_kernel_recorded(tmp_path):
    # click's defaults must not override what the file recorded: a run with --act f32 --kernel all reruns so
    first = tmp_path / "first.json"
    res = run(TINY + ["--bits", "4", "--act", "f32", "--kernel", "all", "--format", "json", "--json", str(first)])
    assert res.exit_code == 0, res.output
    doc = json.loads(run(["sweep", "--rerun", str(first), "--format", "json"]).stdout)
    assert (doc["settings"]["act"], doc["settings"]["kernel"]) == ("f32", "all")
    assert sorted(r["variant"] for r in doc["results"]) == ["ref", "rows4"]
    assert {r["act"] for r in doc["results"]} == {"f32"}
    doc = json.loads(run(["sweep", "--rerun", str(first), "--kernel", "ref", "--format", "json"]).stdout)
    assert [r["variant"] for r in doc["results"]] == ["ref"]  # a flag given beside --rerun wins


@pytest.mark.parametrize("content,fragment", [(None, "cannot read"), ("{not json", "is not JSON"),
                                               ('{"schema": "other"}', "is not a gemvbw.sweep/1 result")])
def test_rerun_bad_file(tmp_path, content, fragment):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    res = run(["sweep", "--rerun", str(path)])
    assert res.exit_code == 2 and fragment in res.stderr


def test_unwritable_directory_fails_before_measuring(tmp_path, monkeypatch):
    import tempfile

    pytest.importorskip("numba")  # imported first, so numba's cache check is not probed with the refusal below

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)  # root ignores mode bits, so simulate a read-only dir
    res = run(TINY + ["--json", str(tmp_path / "x.json")])
    assert res.exit_code == 2
    assert "--json: cannot write in" in res.stderr and "Permission denied" in res.stderr


def test_block_larger_than_K_is_announced_in_the_header():
    res = run(["sweep", "--M", "8", "--K", "40", "--bits", "3", "--iters", "2", "--reps", "1", "--flush-mib", "0",
               "--threads", "1", "--format", "mnn"])
    assert res.exit_code == 0, res.output
    head = res.stdout.split("## Peak")[0]
    assert "note: block 64 is larger than K=40: each row is a single block of 40 elements" in head
    assert "0.4375" not in res.stdout  # ragged: 40*3/8 + 2*2*2 bytes per row over 40 elements


def test_act_i8_reports_activation_error():
    from gemvbw import kernels

    if not kernels.variants(4, "i8"):
        pytest.skip("int8-activation kernels need x86 AVX2")
    res = run(TINY + ["--bits", "4,2", "--act", "i8", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for r in doc["results"]:
        assert r["act"] == "i8" and r["verified"] is True
        assert r["max_rel_err"] < 1e-5 < r["act_quant_err"] < 1e-2
    res = run(TINY + ["--bits", "4", "--act", "i8", "--block", "32"])
    assert res.exit_code == 2 and "--act: the int8 kernels take blocks of 64, not 32" in res.stderr


def test_roofline_command_per_thread_count(tmp_path):
    res = run(["roofline", "--threads", "1", "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"),
               "--md", str(tmp_path / "r.md")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema"] == "gemvbw.roofline/1" and doc["rooflines"][0]["threads"] == 1
    assert (tmp_path / "r.csv").read_text().startswith("threads,memcpy_gbps,read_gbps\n1,")
    assert "memcpy GB/s" in (tmp_path / "r.md").read_text()
    rows = [l for l in res.stdout.splitlines() if l.strip().startswith("1 |")]
    assert len(rows) == 1 and float(rows[0].split("|")[1]) > 0 and float(rows[0].split("|")[2]) > 0
    assert run(["roofline", "--threads", "99"]).exit_code == 2


def test_f32_activations_note_points_to_act_i8_where_it_exists():
    from gemvbw import kernels

    codes = {}
    for act in ("f32", "i8"):
        if act == "i8" and not kernels.variants(8, "i8"):
            continue
        res = run(TINY + ["--bits", "8", "--act", act, "--format", "json"])
        codes[act] = {w["code"] for w in json.loads(res.stdout)["warnings"]}
    assert ("f32-activations" in codes["f32"]) == bool(kernels.variants(8, "i8"))
    assert "f32-activations" not in codes.get("i8", set())
    res = run(TINY + ["--bits", "8", "--block", "32", "--format", "json"])  # i8 kernels take block 64 only
    assert "f32-activations" not in {w["code"] for w in json.loads(res.stdout)["warnings"]}


def test_blas_threads_default_to_one_unless_set():
    import os
    import subprocess
    import sys

    probe = "import gemvbw.cli, os; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "OPENBLAS_NUM_THREADS": "3"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "1"]


def test_unquantized_baselines_beside_the_quantized_widths():
    res = run(["sweep", "--M", "64", "--K", "256", "--bits", "32,16,8,4", "--iters", "2", "--reps", "1",
               "--flush-mib", "1", "--threads", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {r["bits"]: r for r in doc["results"]}
    assert [r["bits"] for r in doc["results"]] == [32, 16, 8, 4] and all(r["verified"] for r in rows.values())
    assert [rows[b]["bytes_per_elem"] for b in (32, 16, 8, 4)] == [4.0, 2.0, 1.0625, 0.5625]
    assert [rows[b]["ai"] for b in (32, 16)] == [0.5, 1.0]
    assert rows[32]["act"] == rows[16]["act"] == "f32"
    assert doc["act_choice"]["w16"] == [{"act": "f32", "why": "f32 activations: unquantized weights are multiplied "
                                                             "in float"}]
    mnn = run(["sweep", "--M", "64", "--K", "256", "--bits", "32", "--kernel", "all", "--iters", "2", "--reps", "1",
               "--flush-mib", "1", "--threads", "1", "--format", "mnn"]).stdout
    assert "w32 blas |" in mnn and "w32 rows4 |" in mnn and "w32 ref |" in mnn
    assert "w32 blas: ran openblas" in mnn or "w32 blas: ran " in mnn


def test_unquantized_widths_have_no_int8_activations():
    res = run(TINY + ["--bits", "16", "--act", "i8"])
    assert res.exit_code == 2 and "--act: w16 are unquantized weights" in res.stderr
    res = run(TINY + ["--bits", "33"])
    assert res.exit_code == 2 and "32,16,8,4,3,2" in res.stderr


# --- a recorded run read back (--rerun, compare), as functions: every message whole --------------

def _refused(capsys, fn, *args):
    from gemvbw import cli

    with pytest.raises(SystemExit) as stop:
        getattr(cli, fn)(*args)
    assert stop.value.code == 2
    return capsys.readouterr().err.removeprefix("Error: ").rstrip("\n")


def test_recorded_settings_become_flags(capsys):
    from gemvbw.cli import settings_as_flags

    doc = {"settings": {"shapes": [[8, 64], [16, 128]], "bits": [4, 2], "block": 64, "threads": 2, "act": "i8",
                        "kernel": "auto", "max_seconds": 1.5, "compare_warm": False, "seed": None, "flush_mib": 0}}
    assert settings_as_flags(doc, "r.json") == {"shapes": ((8, 64), (16, 128)), "bits": "4,2", "block": 64, "threads": 2,
                                      "act": "i8", "kernel": "auto", "max_seconds": 1.5, "flush_mib": 0}
    one = settings_as_flags({"settings": {"shapes": [[1, 1]], "compare_warm": True}}, "r.json")
    assert one == {"shapes": None, "M": 1, "K": 1, "compare_warm": True}  # one shape: --M/--K, as typed
    assert settings_as_flags({"settings": {"bits": ["8", 4]}}, "r.json") == {"bits": "8,4"}


@pytest.mark.parametrize("settings,message", [
    (None, "--rerun: 'r.json' has no settings mapping; give a file written by gemvbw sweep --json"),
    ({"shapes": []}, "--rerun r.json: settings.shapes must be a list of [M, K] pairs of positive integers, got []"),
    ({"shapes": [[0, 64]]},
     "--rerun r.json: settings.shapes must be a list of [M, K] pairs of positive integers, got [[0, 64]]"),
    ({"shapes": [[8, 64, 1]]},
     "--rerun r.json: settings.shapes must be a list of [M, K] pairs of positive integers, got [[8, 64, 1]]"),
    ({"shapes": [8, 64]}, "--rerun r.json: settings.shapes must be a list of [M, K] pairs of positive integers, "
                          "got [8, 64]"),
    ({"shapes": "8x64"}, "--rerun r.json: settings.shapes must be a list of [M, K] pairs of positive integers, "
                         "got '8x64'"),
    ({"bits": [True, 4]}, "--rerun r.json: settings.bits is [True, 4], not a value gemvbw records"),
    ({"threads": {"n": 2}}, "--rerun r.json: settings.threads is {'n': 2}, not a value gemvbw records"),
])
def test_a_malformed_recorded_setting_is_named(capsys, settings, message):
    doc = {} if settings is None else {"settings": settings}
    assert _refused(capsys, "settings_as_flags", doc, "r.json") == message


def test_a_result_file_is_read_or_refused_by_its_flag(tmp_path, capsys):
    from gemvbw.cli import load_baseline, load_result

    good = {"schema": "gemvbw.sweep/1", "settings": {}, "created": "2026-12-01T10:00:00", "results": []}
    path = tmp_path / "caf\u00e9.json"
    path.write_text(json.dumps(good | {"note": "\u00e9"}), encoding="utf-8")
    assert load_result(str(path), "--x")["note"] == "\u00e9"
    assert load_baseline(str(path)) == (f"{path} (2026-12-01T10:00:00)", good | {"note": "\u00e9"})
    undated = tmp_path / "undated.json"
    undated.write_text(json.dumps({k: v for k, v in good.items() if k != "created"}))
    assert load_baseline(str(undated))[0] == f"{undated} (?)"
    for doc in ([], {"schema": "gemvbw.sweep/2", "settings": {}}, {"schema": "gemvbw.sweep/1"}):
        path.write_text(json.dumps(doc))
        assert _refused(capsys, "load_result", str(path), "--flag") == (
            f"--flag: {str(path)!r} is not a gemvbw.sweep/1 result; give a file written by gemvbw sweep/model --json")
    assert _refused(capsys, "load_result", str(tmp_path / "none.json"), "--flag") == (
        f"--flag: cannot read {str(tmp_path / 'none.json')!r} (No such file or directory)")
    path.write_text(json.dumps(good | {"results": [{"bits": 4}]}))
    message = _refused(capsys, "load_baseline", str(path))
    assert message.startswith(f"--rerun: {path}") and message.endswith("; give a file written by gemvbw sweep --json")
    path.write_text("{")
    assert _refused(capsys, "load_baseline", str(path)).startswith(f"--rerun: {str(path)!r} is not JSON (")


def test_a_bad_value_from_a_rerun_file_names_its_entry():
    from gemvbw.cli import from_file
    from gemvbw.settings import SettingsError

    exc = SettingsError("--iters", "must be a positive integer, got 0")
    assert from_file(exc, {"iters": 0}, "r.json") == (
        "--rerun r.json: settings.iters = 0 from the file: must be a positive integer, got 0")
    assert from_file(exc, {"iters": 0}, None) == str(exc)  # no file: the flag's own message
    assert from_file(exc, {"reps": 0}, "r.json") == str(exc)  # not from the file
    act = SettingsError("--act", "must be one of auto, f32, i8: got 'x'")
    assert from_file(act, {"act": "x"}, "r.json") == (
        "--rerun r.json: settings.act = 'x' from the file: must be one of auto, f32, i8: got 'x'")
    assert from_file(act, {"kernel": "x"}, "r.json") == str(act)
    shape = SettingsError("--M/--K", "M must be positive")
    assert from_file(shape, {"M": 0}, "r.json") == str(shape)  # a flag no recorded key maps to


def test_an_unwritable_output_is_refused_with_its_flag(tmp_path, capsys):
    assert _refused(capsys, "check_path", str(tmp_path), "--json") == (
        f"--json: {str(tmp_path)!r} is a directory; give a file name, e.g. --json run.json")


def test_the_fastest_verified_result_of_each_shape_counts_once():
    from types import SimpleNamespace as R

    from gemvbw.cli import fastest_per_shape

    rec = R(results=[R(bits=4, M=8, K=8, best_avg_us=5.0, logical_bytes=10, variant="a"),
                     R(bits=4, M=8, K=8, best_avg_us=5.0, logical_bytes=10, variant="b"),  # a tie keeps the first
                     R(bits=4, M=8, K=8, best_avg_us=6.0, logical_bytes=10, variant="c"),
                     R(bits=8, M=8, K=8, best_avg_us=1.0, logical_bytes=20, variant="d")])
    assert fastest_per_shape(rec, 4) == {(8, 8): (10, 5.0, "a")}

"""The parsing in benchmarks/ scripts: the peers' printed tables (their figures go into RESULTS.md), tile variants."""

import sys
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def run(load_script):
    return load_script("benchmarks/run.py", "bench_run")


MNN_OUT = """
## GEMV: y = W(1024x1024) * x(1024), block=64
type | thr |   us/iter |  W MiB | bytes/elem | eff GB/s | %peak |  GFLOPS |  AI (op/B)
-----|----:|----------:|-------:|-----------:|---------:|------:|--------:|----------:
w8   |   2 |     284.9 |    1.1 |     1.0625 |      3.9 |  29.0 |     7.4 |      1.88
w4   |   2 |     213.0 |    0.6 |     0.5625 |      2.8 |  20.5 |     9.8 |      3.56
w3   |   2 |     209.2 |    0.4 |     0.4375 |      2.2 |  16.3 |    10.0 |      4.57
w2   |   2 |     234.3 |    0.3 |     0.3125 |      1.4 |  10.4 |     9.0 |      6.40
"""

GGML_OUT = ("  MUL_MAT(type_a=q4_K,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,"
            "src_overlap=0):                    345 runs -  2975.56 us/run - 117.44 MFLOP/run -  39.47 GFLOPS\n")


def test_mnn_table_is_read_per_width(run):
    widths = {int(m.group(1)): float(m.group(3)) for m in run.MNN_LINE.finditer(MNN_OUT)}
    assert widths == {8: 284.9, 4: 213.0, 3: 209.2, 2: 234.3}


def test_mnn_side_by_side_counts_mnn_bytes(run):
    i8 = {"results": [{"M": 1024, "K": 1024, "bits": 4, "best_avg_us": 135.0, "eff_gbps": 4.37, "variant": "packed",
                       "pct_read": 61.2}]}
    lines = run.mnn_side_by_side(i8, {4: 213.0}, "1024x1024")
    row = next(line for line in lines if line.startswith("w4 |"))
    # MNN's bytes: 1024*1024/2 codes + 1024 rows * 16 blocks * 2 values * 2 bytes = 589824
    assert row.split(" | ")[2:] == ["61", "-", f"213 us, {589824 / 213.0 / 1e3:.2f} GB/s", "-", "1.58"]
    assert next(line for line in lines if line.startswith("w8 |")) == "w8 | - | - | - | - | - | -"
    # a row with its kernel's fixed cost: the figure and its share of the row's latency
    i8["results"][0]["fixed_cost"] = {"median_us": 13.4, "M": 16, "K": 128, "flush_mib": 64}
    row = next(line for line in run.mnn_side_by_side(i8, {4: 213.0}, "1024x1024") if line.startswith("w4 |"))
    assert row.split(" | ")[3] == "13 us (10%)"
    del i8["results"][0]["fixed_cost"]
    # with the reads taken around MNN's run: its GB/s against the faster and the slower of the two
    row = next(line for line in run.mnn_side_by_side(i8, {4: 213.0}, "1024x1024", {4: (2.5, 4.0)})
               if line.startswith("w4 |"))
    assert (f"{100 * 589824 / 213.0 / 1e3 / 4.0:.0f}", f"{100 * 589824 / 213.0 / 1e3 / 2.5:.0f}") == ("69", "111")
    assert row.split(" | ")[5] == "69-111 (reads 2.5 / 4.0 GB/s)"
    assert run.share_of_reads(30.0, (40.0, 40.0)) == "75"  # one figure when the two reads agree


def test_each_mnn_width_keeps_the_reads_around_the_pass_that_gave_its_best(run):
    first = run.MnnPass({"1024x1024": ("", {8: 300.0, 4: 200.0})}, (30.0, 31.0))
    second = run.MnnPass({"1024x1024": ("", {8: 280.0, 4: 210.0})}, (50.0, 45.0))
    assert run.best_of([first, second], "1024x1024") == {8: 280.0, 4: 200.0}
    assert run.reads_of_best([first, second], "1024x1024") == {8: (50.0, 45.0), 4: (30.0, 31.0)}


def test_read_now_takes_the_roofline_at_the_thread_count_asked(run, monkeypatch):
    calls = []

    def fake(cmd, check, stdout):  # what `gemvbw roofline --json` writes: one row per thread count 1..N
        calls.append(cmd)
        path = cmd[cmd.index("--json") + 1]
        Path(path).write_text('{"rooflines": [{"threads": 1, "read_gbps": 40.0}, {"threads": 2, "read_gbps": 47.5}]}')

    monkeypatch.setattr(run.subprocess, "run", fake)
    assert run.read_now(2) == 47.5
    assert calls[0][1:5] == ["-m", "gemvbw", "roofline", "--threads"] and calls[0][5] == "2"


def test_ggml_line_is_read(run):
    m = run.GGML_LINE.search(GGML_OUT)
    assert (m.group(1), m.group(2), m.group(3), float(m.group(4))) == ("q4_K", "4096", "14336", 2975.56)


def test_bars_judge_each_width_by_the_issue_thresholds(run):
    def row(bits, us, pct):
        return {"M": 4096, "K": 14336, "bits": bits, "best_avg_us": us, "eff_gbps": 30.0, "pct_read": pct,
                "variant": "packed-4x2-x"}

    i8 = {"roofline": {"read_gbps": 33.0, "threads": 2},
          "results": [row(8, 2000.0, 91.0), row(4, 1150.0, 89.0), row(3, 870.0, 86.0), row(2, 660.0, 80.0)]}
    lines = run.bars(i8, {8: 2100.0, 4: 1000.0, 3: 2000.0, 2: 2000.0})
    cells = {line.split(" | ")[0]: line.split(" | ")[2:] for line in lines if line.startswith("w")}
    assert cells["w8"] == ["91.0 (met, >= 90)", "-", "1.05 (NOT met)"]  # not 1.3x, and under 95% of read
    assert cells["w4"] == ["89.0 (NOT met, >= 90)", "0.57 (NOT met, <= 0.56)", "0.87 (NOT met)"]
    assert cells["w3"] == ["86.0 (met, >= 85)", "0.43 (met, <= 0.44)", "2.30 (met)"]
    assert cells["w2"] == ["80.0 (NOT met, >= 85)", "0.33 (NOT met, <= 0.32)", "3.03 (met)"]
    near_wall = {"roofline": {"read_gbps": 33.0, "threads": 1}, "results": [row(8, 2000.0, 96.0)]}
    w8 = next(l for l in run.bars(near_wall, {8: 2050.0}) if l.startswith("w8"))
    assert w8.endswith("| 1.02 (met)")  # at the wall: no slower than MNN is enough
    # MNN's own minutes beside the ratio: 4096x14336 w8 at 2050 us is 30.43 GB/s, 95 % of a 32.0 GB/s read and
    # 101 % of a 30.0 one
    w8 = next(l for l in run.bars(near_wall, {8: 2050.0}, mnn_reads={8: (30.0, 32.0)}) if l.startswith("w8"))
    assert w8.endswith("| 1.02 (met; MNN at 95-101 % of the reads around its run)")


@pytest.fixture(scope="module")
def bars(load_script):
    return load_script("benchmarks/bars.py", "bench_bars")


def test_a_figure_beside_its_bar_never_rounds_across_it(bars):
    assert bars.beside(89.98, 90.0, 1) == "89.98"  # not "90.0" beside "NOT met, >= 90"
    assert bars.beside(0.3227, 0.32, 2) == "0.323"  # not "0.32" beside "NOT met, <= 0.32"
    assert bars.beside(1.2996, 1.3, 2) == "1.2996"  # 1.300 would still read as the bar itself
    assert bars.beside(0.31999, 0.32, 2) == "0.31999"  # under a <= bar: not shown as the bar either
    assert bars.beside(90.4, 90.0, 0) == "90.4"  # printed as the bar itself would leave the side open
    assert bars.beside(90.06, 90.0, 1) == "90.1" and bars.beside(94.6, 95.0, 0) == "94.6"
    assert bars.beside(1.3, 1.3, 2) == "1.30" and bars.beside(0.5, 0.56, 2) == "0.50"  # on the bar, or far off
    assert bars.beside(1.3 + 1e-9, 1.3, 2) == repr(1.3 + 1e-9)  # closer than any decimals it prints


def test_a_bar_is_met_on_its_own_side(bars):
    assert [bars.verdict(v, 90.0) for v in (89.98, 90.0, 90.1)] == ["NOT met", "met", "met"]  # a share: at least
    assert [bars.verdict(v, 0.32, at_most=True) for v in (0.3227, 0.32, 0.31)] == ["NOT met", "met", "met"]


def test_bars_near_the_thresholds_print_what_they_judge(run):
    def row(bits, us, pct):
        return {"M": 4096, "K": 14336, "bits": bits, "best_avg_us": us, "eff_gbps": 30.0, "pct_read": pct,
                "variant": "packed-4x2-x"}

    # run 59's 1-thread sweep: w4 at 89.98 % of its read, w2 at 486.1 / 1506.1 = 0.3227 of w8's latency
    i8 = {"roofline": {"read_gbps": 43.1, "threads": 1},
          "results": [row(8, 1506.1, 94.4), row(4, 851.8, 89.98), row(2, 486.1, 86.0)]}
    lines = run.bars(i8, {8: 2225.6, 4: 1712.5, 2: 631.9})
    cells = {line.split(" | ")[0]: line.split(" | ")[2:] for line in lines if line.startswith("w")}
    assert cells["w4"][:2] == ["89.98 (NOT met, >= 90)", "0.57 (NOT met, <= 0.56)"]  # 0.5656: no need
    assert cells["w2"][1] == "0.323 (NOT met, <= 0.32)"
    assert cells["w2"][2] == "1.2999 (NOT met)"  # 631.9 / 486.1: under 1.3, and gemvbw under 95 % of its read


def test_paired_rounds_print_a_ratio_under_the_bar_under_it(paired):
    rounds = [paired.Round({8: 1299.0}, {8: 1000.0}, {8: 94.6}, 40.0, True, {8: "a"}),
              paired.Round({8: 1302.0}, {8: 1000.0}, {8: 95.2}, 40.0, False, {8: "a"})]
    w8 = next(line for line in paired.table(rounds, "4096x14336", 1) if line.startswith("w8 |")).split(" | ")
    assert w8[1:5] == ["1.299 1.302", "1.3005", "1 of 2", "94.6 95.2"]


def test_empty_call_as_each_record_states_it(run):
    assert run._empty_call({"call_overhead_us": 1.62}) == "empty parallel call 1.6 us warm"  # an older record
    assert run._empty_call({"call_overhead_us": 0.2, "call_overhead_cold_us": 9.44, "call_overhead_serial": True}) \
        == "empty serial call 0.2 us warm, 9.4 us cold"
    assert run._empty_call({"call_overhead_us": 1.3, "call_overhead_cold_us": None, "call_overhead_serial": False}) \
        == "empty parallel call 1.3 us warm"


def test_fixed_cost_cell_says_when_it_came_out_above_its_row(run):
    assert run.fixed_cost({"best_avg_us": 40.0, "fixed_cost": {"median_us": 12.0}}) == "12 us (30%)"
    assert run.fixed_cost({"best_avg_us": 30.0, "fixed_cost": {"median_us": 51.0}}) \
        == "51 us (170%: above the row, calls this variable)"
    assert run.fixed_cost({"best_avg_us": 30.0}) == run.fixed_cost(None) == "-"


def test_two_sweeps_merge_into_the_faster_row_of_each(run):
    # the int8 sweeps run twice, as each peer does; every (shape, width, variant) keeps its faster row, with the
    # %read of its own sweep, and both rooflines are said
    def row(bits, variant, us, pct):
        return {"M": 64, "K": 128, "bits": bits, "variant": variant, "best_avg_us": us, "pct_read": pct}

    first = {"system": "s1", "roofline": {"read_gbps": 30.0, "threads": 2},
             "results": [row(4, "a", 10.0, 90.0), row(4, "b", 12.0, 75.0), row(8, "a", 20.0, 95.0)]}
    second = {"system": "s2", "roofline": {"read_gbps": 40.0, "threads": 2, "read_streams": 8},
              "results": [row(4, "a", 11.0, 61.0), row(4, "b", 9.0, 75.0), row(2, "a", 5.0, 99.0)]}
    doc = run.merged(first, second)
    assert doc["system"] == "s1" and [rf["read_gbps"] for rf in doc["rooflines"]] == [30.0, 40.0]
    got = {(r["bits"], r["variant"]): (r["best_avg_us"], r["pct_read"]) for r in doc["results"]}
    assert got == {(4, "a"): (10.0, 90.0), (4, "b"): (9.0, 75.0), (8, "a"): (20.0, 95.0), (2, "a"): (5.0, 99.0)}
    assert run.reads(doc) == "30.0 GB/s and 40.0 GB/s (8 streams per thread)" and run.reads(first) == "30.0 GB/s"
    assert run.best(doc, "64x128", 4)["variant"] == "b"


def test_reads_say_how_far_the_roofline_moved_under_the_rows(run):
    # a sweep since 2026-12-07 measures the read again after its rows: the table says both and the change
    first = {"roofline": {"read_gbps": 40.0, "read_streams": 8, "read_after_gbps": 50.0}}
    second = {"roofline": {"read_gbps": 36.0, "read_after_gbps": 27.0}}
    assert run.reads(first) == "40.0 GB/s (8 streams per thread), 50.0 GB/s after the rows (+25%)"
    doc = {"rooflines": [first["roofline"], second["roofline"]]}
    assert run.reads(doc) == ("40.0 GB/s (8 streams per thread), 50.0 GB/s after the rows (+25%) and "
                              "36.0 GB/s, 27.0 GB/s after the rows (-25%)")
    # an interrupted sweep's second reading is null: nothing said about it
    assert run.reads({"roofline": {"read_gbps": 40.0, "read_after_gbps": None}}) == "40.0 GB/s"



def test_steps_are_kept_as_they_end_and_a_resume_must_be_the_same_run(load_script, tmp_path, capsys):
    steps = load_script("benchmarks/steps.py", "bench_steps")
    root = tmp_path / "R.md.steps"
    run = steps.Steps(root, {"--iters": "50", "CPU": "x"}, resume=False)
    measured = []
    assert run.step("a", lambda: measured.append("a") or (1, 2), list, tuple) == (1, 2)
    assert sorted(f.name for f in root.iterdir()) == ["a.json", "run.json"] and run.resumed == []
    with pytest.raises(steps.StepsError, match="pass --resume to go on with it, or delete"):
        steps.Steps(root, {"--iters": "50", "CPU": "x"}, resume=False)
    with pytest.raises(steps.StepsError, match=r"--iters was '50', now '20'.*Resume with the same settings"):
        steps.Steps(root, {"--iters": "20", "CPU": "x"}, resume=True)
    again = steps.Steps(root, {"--iters": "50", "CPU": "x"}, resume=True)
    assert again.step("a", lambda: measured.append("again") or (3, 4), list, tuple) == (1, 2)  # kept, not measured
    assert measured == ["a"] and len(again.resumed) == 1 and again.started == run.started
    assert "= a: kept from" in capsys.readouterr().err
    again.finish()
    assert not root.exists()
    with pytest.raises(steps.StepsError, match="--resume: .* holds no unfinished run"):
        steps.Steps(root, {}, resume=True)


def test_an_mnn_pass_comes_back_from_its_kept_step_as_it_was(run):
    p = run.MnnPass({"1024x1024": ("table", {8: 284.9, 4: 213.0})}, (30.5, 31.0))
    assert run.mnn_pass_of_json(run.mnn_pass_json(p)) == p


def test_a_run_stopped_part_way_keeps_its_steps_and_resumes_from_the_first_it_lacks(run, tmp_path, monkeypatch,
                                                                                       capsys):
    calls: list[str] = []
    stop_at: list[str] = []

    def measured(name, value):
        calls.append(name)
        if name in stop_at:
            raise KeyboardInterrupt
        return value

    def fake_sweep(*args):
        name = args[0] if args[0] != "sweep" else ("warm" if "0" in args[args.index("--flush-mib") + 1:][:1]
                                                   else args[args.index("--act") + 1])
        return measured(name, {"args": list(args), "results": [], "roofline": {}})

    monkeypatch.setattr(run, "gemvbw", fake_sweep)
    monkeypatch.setattr(run, "run_ggml", lambda binary: measured("ggml", ("out", {"q8_0": 1.0})))
    monkeypatch.setattr(run, "mnn_pass", lambda binary, t, flush: measured(
        "mnn", run.MnnPass({s: ("t", {8: 1.0}) for s in run.SHAPES}, (1.0, 2.0))))
    monkeypatch.setattr(run, "script_md", lambda script, *args: measured(script, ["| md |"]))
    monkeypatch.setattr(run, "asm_check_md", lambda: measured("asm", []))
    for binary in ("mnn", "ggml"):
        (tmp_path / binary).write_bytes(b"\x7fELF")
    out = tmp_path / "R.md"
    argv = ["run.py", "--threads", "1", "--flush-mib", "64", "--paired-rounds", "1", "--out", str(out),
            "--mnn-bin", str(tmp_path / "mnn"), "--ggml-bin", str(tmp_path / "ggml")]

    monkeypatch.setattr(sys, "argv", argv)
    stop_at[:] = ["warm"]  # Ctrl-C in the first warm sweep
    with pytest.raises(run.Stopped, match=r"stopped in step warm-1t-a; kept in .*: f32, ggml-a, i8-1t-a, mnn-1t-a\. "
                                          "The same command with --resume"):
        run.main()
    assert calls == ["ggml", "mnn", "f32", "i8", "warm"]
    kept = sorted(f.name for f in run.steps_dir(out).iterdir())
    assert kept == ["f32.json", "ggml-a.json", "i8-1t-a.json", "mnn-1t-a.json", "run.json"]

    with pytest.raises(SystemExit) as stopped:  # the same command again would mix two runs: refused
        run.main()
    assert stopped.value.code == 2 and "pass --resume" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", argv[:2] + ["2"] + argv[3:] + ["--resume"])
    with pytest.raises(SystemExit) as stopped:
        run.main()
    assert stopped.value.code == 2 and "--threads was [1], now [2]" in capsys.readouterr().err

    monkeypatch.setattr(sys, "argv", argv + ["--resume"])
    calls.clear()
    stop_at[:] = ["model"]  # stopped again at the model runs: everything before them was measured once
    with pytest.raises(run.Stopped):
        run.main()
    assert calls == ["warm", "wall.py", "wall.py", "row_read.py", "ggml", "mnn", "i8", "warm", "paired.py", "model"]
    assert "= f32: kept from" in capsys.readouterr().err
    assert not out.exists()

def test_tile_variants_are_read_as_tile_tag_options(load_script):
    variants = load_script("benchmarks/tile_variants.py", "bench_tile_variants")
    got = variants.parse_variants("; streams=4;streams=3, ahead=4096 ,locality=3")
    assert got == {"default": {}, "streams=4": {"nstreams": 4},
                   "streams=3, ahead=4096 ,locality=3": {"nstreams": 3, "ahead": 4096, "locality": 3}}
    for bad in ("stream=2", "ahead=x", "ahead", "turns=2"):
        with pytest.raises(ValueError, match="a variant's options are streams=N, ahead=N, locality=N, split=N, "
                                             "stack=N, turn=N"):
            variants.parse_variants(bad)


def test_tile_variants_says_where_the_variants_y_differ(load_script):
    # a shape whose M is not a multiple of 64 leaves rows to the f32 loop in some layouts and not in others, so
    # their y differ there by rounding: the message must say so rather than leave it looking like a wrong kernel
    variants = load_script("benchmarks/tile_variants.py", "bench_tile_variants")
    assert variants.LARGEST_GROUP == 64
    a = np.arange(160, dtype=np.float32)
    tail, early = a.copy(), a.copy()
    tail[[130, 159]] += 1
    early[[3, 130]] += 1
    said = variants.mismatch([a, a, tail])
    assert said.startswith("2 of 160 rows, the first 130: only rows after the last 64-row group")
    assert "an M that is a multiple of 64 compares every row" in said
    assert variants.mismatch([a, early, tail]) == "3 of 160 rows, the first 3"


def test_tile_variants_checks_what_each_format_can_build(load_script):
    variants = load_script("benchmarks/tile_variants.py", "bench_tile_variants")
    prfm = {"default": {}, "t0": {"ahead": 4096, "locality": 3}}
    variants.check_options("4x2", "avx2", prfm)  # builds tags only: nothing compiles, on any CPU
    variants.check_options("c4", "avx512vnni-zmm", {**prfm, "s4": {"nstreams": 4}})
    with pytest.raises(ValueError, match="streams=N: packed-4x2 kernels read 2 groups per thread"):
        variants.check_options("4x2", "avx2", {"s4": {"nstreams": 4}})
    with pytest.raises(ValueError, match="split=N: packed-4x2 kernels have one w3 layout"):
        variants.check_options("4x2", "avx2", {"planes": {"w3_split": 0}})
    assert variants.parse_variants("split=0") == {"split=0": {"w3_split": 0}}
    with pytest.raises(ValueError, match="stack=N: packed-4x2 kernels have one w2 layout"):
        variants.check_options("4x2", "avx2", {"rows": {"w2_stack": 0}})
    assert variants.parse_variants("stack=0,streams=4") == {"stack=0,streams=4": {"w2_stack": 0, "nstreams": 4}}
    assert variants.parse_variants("turn=2,streams=2") == {"turn=2,streams=2": {"turn": 2, "nstreams": 2}}
    variants.check_options("c4", "avx512vnni-zmm", {"t2": {"turn": 2}})
    with pytest.raises(ValueError, match="turn=N: packed-4x2 kernels take turns step by step"):
        variants.check_options("4x2", "avx2", {"t2": {"turn": 2}})
    with pytest.raises(ValueError, match="in turns of 3 tile"):  # the skeleton writes out turns of 1 and 2 only
        variants.check_options("c4", "avx512vnni-zmm", {"t3": {"turn": 3}})
    with pytest.raises(ValueError, match="no packed kernel for tier 'avx2', w8, prefetch 4096 bytes ahead, locality 5"):
        variants.check_options("4x2", "avx2", {"bad": {"ahead": 4096, "locality": 5}})
    with pytest.raises(ValueError, match="prefetch -1 bytes ahead"):
        variants.check_options("4x2", "neon", {"bad": {"ahead": -1}})


def test_read_ratios_set_each_widths_fastest_read_against_w8s(load_script, monkeypatch):
    wall = load_script("benchmarks/wall.py", "bench_wall")
    timed = {}

    def medians(runs, rounds, flush_mib=64):  # fixed figures in place of timing: w8's reads 100/90/95 us, w2's 40/35/45
        timed.update(runs)
        assert flush_mib == 256
        figures = {"w8": (100.0, 90.0, 95.0), "w2": (40.0, 35.0, 45.0)}
        return {name: figures[name.split()[0]][i % 3] for i, name in enumerate(runs)}

    monkeypatch.setattr(wall, "interleaved_medians", medians)
    monkeypatch.setattr(wall, "read_runs", lambda nbytes, threads: {f"read {s}": None for s in (1, 4, 8)})
    lines = wall.read_ratios(64, 128, [8, 2], 1, 3, flush_mib=256)
    assert list(timed) == [f"w{b} read {s}" for b in (8, 2) for s in (1, 4, 8)]  # every width in one rotation
    w8_bytes, w2_bytes = 64 * 128 + 64 * 2 * 4, 64 * 128 // 4 + 64 * 2 * 4
    assert lines[2] == f"w8 | {w8_bytes} | 90 us, {w8_bytes / 90e3:.1f} GB/s (4 streams per thread) | 1.00 | 1.00"
    assert lines[3] == (f"w2 | {w2_bytes} | 35 us, {w2_bytes / 35e3:.1f} GB/s (4 streams per thread) | "
                        f"{35 / 90:.2f} | {w2_bytes / w8_bytes:.2f}")


def test_latency_ratios_set_each_widths_fastest_kernel_and_read_against_w8s(load_script, monkeypatch):
    wall = load_script("benchmarks/wall.py", "bench_wall")
    timed = {}
    figures = {"w8 read 1": 100.0, "w8 read 4": 90.0, "w8 a": 80.0, "w8 b": 85.0,
               "w2 read 1": 30.0, "w2 read 4": 36.0, "w2 a": 40.0, "w2 b": 27.0}

    def medians(runs, rounds, flush_mib=64):  # fixed figures in place of timing
        timed.update(runs)
        assert flush_mib == wall.SWEEP_FLUSH_MIB  # the sweep's flush on this machine unless asked
        return {name: figures[name] for name in runs}

    monkeypatch.setattr(wall, "interleaved_medians", medians)
    monkeypatch.setattr(wall, "read_runs", lambda nbytes, threads: {f"read {s}": None for s in (1, 4)})
    monkeypatch.setattr(wall, "verified_runs", lambda qm, x, y, prefix: {prefix + v: None for v in "ab"})
    lines = wall.latency_ratios(64, 128, [8, 2], 1, 3)
    assert list(timed) == ["w8 read 1", "w8 read 4", "w8 a", "w8 b", "w2 read 1", "w2 read 4", "w2 a", "w2 b"]
    w8_bytes, w2_bytes = 64 * 128 + 64 * 2 * 4, 64 * 128 // 4 + 64 * 2 * 4
    assert lines[2] == f"w8 | 1.00 | 90 us, {w8_bytes / 90e3:.1f} GB/s (4 streams per thread) | 1.00 | a 80 us | 112 | 1.00"
    assert lines[3] == (f"w2 | {w2_bytes / w8_bytes:.2f} | 30 us, {w2_bytes / 30e3:.1f} GB/s (1 stream per thread) | "
                        f"{30 / 90:.2f} | b 27 us | 111 | {27 / 80:.2f}, NOT met <= 0.32")


def test_wall_refuses_a_negative_flush(load_script, capsys):
    wall = load_script("benchmarks/wall.py", "bench_wall")
    with pytest.raises(SystemExit) as exc:
        wall.main(["--flush-mib", "-1", "--latency-ratios"])
    assert exc.value.code == 2 and "--flush-mib: -1 MiB; give 0 (warm) or more" in capsys.readouterr().err


def test_flush_option_is_one_flag_with_one_check_for_every_script(load_script, capsys):
    import argparse

    flush = load_script("benchmarks/flush_option.py", "bench_flush_option")
    driver, timer = argparse.ArgumentParser(), argparse.ArgumentParser()
    flush.add_flush_mib(driver, "MiB", sweep_default=True)  # run.py, paired.py: None is the sweep's own
    flush.add_flush_mib(timer, "MiB")
    assert driver.parse_args([]).flush_mib is None and timer.parse_args([]).flush_mib == flush.SWEEP_FLUSH_MIB
    assert f"default {flush.SWEEP_FLUSH_MIB}" in " ".join(timer.format_help().split())
    assert flush.sweep_flush_flags(None) == [] and flush.sweep_flush_flags(96) == ["--flush-mib", "96"]
    assert flush.flush_mib_or_sweeps(None) == flush.SWEEP_FLUSH_MIB and flush.flush_mib_or_sweeps(96) == 96
    for value in (None, 1, 512):
        flush.check_flush_mib(timer, value)
    flush.check_flush_mib(timer, 0, warm_ok=True)
    for value, warm_ok, advice in ((0, False, "give 1 or more"), (-1, True, "give 0 (warm) or more")):
        with pytest.raises(SystemExit) as exc:
            flush.check_flush_mib(timer, value, warm_ok=warm_ok)
        assert exc.value.code == 2 and f"--flush-mib: {value} MiB; " in (err := capsys.readouterr().err)
        assert advice in err


def test_wall_never_times_a_variant_that_fails_verification(load_script, monkeypatch, capsys, wrong_i8_w4):
    from gemvbw.quant import random_activations, random_quantized

    wall = load_script("benchmarks/wall.py", "bench_wall")
    good, bad = wrong_i8_w4
    monkeypatch.setattr(wall.kernels, "variants", lambda bits, act: [good, bad])
    qm = random_quantized(32, 128, 4, seed=1)
    runs = wall.verified_runs(qm, random_activations(128, 0), np.empty(32, np.float32), "w4 ")
    assert list(runs) == [f"w4 {good.variant}"]
    assert "w4 wrong: FAILED verification" in capsys.readouterr().err


@pytest.fixture
def paired(load_script):
    return load_script("benchmarks/paired.py", "bench_paired")


def test_paired_rounds_swap_which_side_runs_first(paired, monkeypatch):
    calls = []
    sweep = {"results": [{"bits": 8, "best_avg_us": 100.0, "pct_read": 96.0, "variant": "packed-8c4-avx512vnni"}],
             "roofline": {"read_gbps": 40.0}}
    monkeypatch.setattr(paired, "gemvbw", lambda *args: calls.append(("gemvbw", args)) or sweep)
    monkeypatch.setattr(paired, "run_mnn", lambda binary, t, shape, flush, bits: calls.append(
                        ("mnn", (binary, t, shape, flush, bits))) or ("table", {8: 130.0}))
    monkeypatch.setattr(paired, "read_row_us", lambda shape, bits, t, flush: calls.append(
                        ("read", (shape, bits, t, flush))) or 90.0)
    first = paired.run_round("bin", 2, "64x128", 0, 8)
    second = paired.run_round("bin", 2, "64x128", 1, 8)
    assert [c[0] for c in calls] == ["mnn", "read", "gemvbw", "gemvbw", "read", "mnn"]  # the read between the two
    assert calls[1][1] == ("64x128", 8, 2, None)
    assert first.read_row_us == {8: 90.0}
    calls.clear()
    assert paired.run_round("bin", 2, "64x128", 0, 8, read_row=False).read_row_us is None  # --no-read-row
    assert [c[0] for c in calls] == ["mnn", "gemvbw"]
    assert calls[0][1] == ("bin", 2, "64x128", sys.modules["flush_option"].SWEEP_FLUSH_MIB, 8)  # the sweep's flush
    assert calls[1][1] == ("sweep", "--M", "64", "--K", "128", "--bits", "8", "--threads", "2")  # auto, 200 x 3
    assert first.mnn_first and not second.mnn_first
    assert first._replace(mnn_first=False) == second
    assert first.gemvbw_us == {8: 100.0} and first.gemvbw_pct_read == {8: 96.0} and first.read_gbps == 40.0
    assert first.mnn_us == {8: 130.0}
    assert first.gemvbw_variant == {8: "packed-8c4-avx512vnni"}  # what auto timed


def test_paired_round_keeps_a_width_without_figures_out(paired, monkeypatch):
    sweep = {"results": [{"bits": 4, "best_avg_us": None, "pct_read": None}], "roofline": {"read_gbps": 40.0}}
    monkeypatch.setattr(paired, "gemvbw", lambda *args: sweep)
    monkeypatch.setattr(paired, "run_mnn", lambda *args: ("table", {4: 60.0}))
    monkeypatch.setattr(paired, "read_row_us", lambda *args: 30.0)
    done = paired.run_round("bin", 1, "64x128", 0, 4)
    assert done.gemvbw_us == {} and done.mnn_us == {4: 60.0}
    line = next(line for line in paired.table([done], "64x128", 1) if line.startswith("w4 |"))
    assert line == "w4 | - | - | - | - | - | - | - | - | -"  # the two read-row columns too


def test_paired_round_gives_both_sides_the_flush_asked_for(paired, monkeypatch):
    calls = []
    sweep = {"results": [{"bits": 2, "best_avg_us": 100.0, "pct_read": 96.0}], "roofline": {"read_gbps": 40.0}}
    monkeypatch.setattr(paired, "gemvbw", lambda *args: calls.append(args) or sweep)
    monkeypatch.setattr(paired, "run_mnn", lambda binary, t, shape, flush, bits: calls.append(flush) or ("t", {2: 1.0}))
    monkeypatch.setattr(paired, "read_row_us", lambda shape, bits, t, flush: calls.append(("read", flush)) or 1.0)
    paired.run_round("bin", 1, "64x128", 0, 2, 512)
    assert calls == [512, ("read", 512),
                     ("sweep", "--M", "64", "--K", "128", "--bits", "2", "--flush-mib", "512", "--threads", "1")]


def test_paired_round_stops_when_mnn_ran_another_shape(paired, monkeypatch):
    monkeypatch.setattr(paired, "run_mnn", lambda *args: ("table", {}))
    with pytest.raises(SystemExit, match="MNN printed no figures for 64x128: a build that ignores MNN_GEMVBW_M/K"):
        paired.run_round("bin", 1, "64x128", 0, 8)


def test_paired_runs_each_width_in_its_own_rounds(paired, monkeypatch, capsys):
    done = []
    monkeypatch.setattr(paired, "run_round", lambda binary, t, shape, i, bits, flush, read_row: done.append(
                        (i, bits, read_row)) or paired.Round({bits: 130.0}, {bits: 100.0}, {bits: 96.0}, 40.0,
                                                            i % 2 == 0, {}))
    monkeypatch.setattr(paired, "thread_counts", lambda threads: [1])
    monkeypatch.setattr(sys, "argv", ["paired.py", "--mnn-bin", sys.executable, "--rounds", "2", "--bits", "2,8"])
    assert paired.main() == 0
    assert done == [(0, 8, True), (0, 2, True), (1, 8, True), (1, 2, True)]  # widths in table order, each round
    table = capsys.readouterr().out
    assert "#### 4096x14336, 1 thread(s), 2 rounds per width" in table
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith(("w8 |", "w4 |", "w3 |", "w2 |"))]
    assert rows == ["w8", "w2"]  # only the widths asked for
    done.clear()
    monkeypatch.setattr(sys, "argv", ["paired.py", "--mnn-bin", sys.executable, "--rounds", "1", "--bits", "4",
                                      "--no-read-row"])
    assert paired.main() == 0 and done == [(0, 4, False)]
    monkeypatch.setattr(sys, "argv", ["paired.py", "--mnn-bin", sys.executable, "--bits", "16"])
    with pytest.raises(SystemExit) as stop:
        paired.main()
    assert stop.value.code == 2 and "--bits 16: a comma list of widths among 8, 4, 3, 2" in capsys.readouterr().err


def test_paired_bar_is_the_ratio_or_the_wall_and_no_slower(paired):
    assert paired.meets_bar(1.3, 50.0) and paired.meets_bar(1.0, 95.0)
    assert not paired.meets_bar(1.29, 94.9) and not paired.meets_bar(0.99, 100.0)


def test_paired_keeps_the_rounds_that_ended_when_stopped(paired, monkeypatch, capsys, tmp_path):
    done = []

    def one(binary, t, shape, i, bits, flush, read_row):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(bits)
        return paired.Round({bits: 130.0}, {bits: 100.0}, {bits: 96.0}, 40.0, i % 2 == 0, {})

    monkeypatch.setattr(paired, "run_round", one)
    monkeypatch.setattr(paired, "thread_counts", lambda threads: [1, 2])
    md = tmp_path / "paired.md"
    monkeypatch.setattr(sys, "argv", ["paired.py", "--mnn-bin", sys.executable, "--rounds", "2", "--bits", "8,4",
                                      "--md", str(md)])
    assert paired.main() == 130
    out = capsys.readouterr().out
    assert "w8 | 1.30 1.30 |" in out and "w4 | 1.30 |" in out  # rounds 1 and 2 of w8, round 1 of w4
    assert "Stopped (Ctrl-C) at 4096x14336, 1 thread(s), after 3 of 4 rounds" in out
    assert "2 thread(s)" not in out and md.read_text().count("Stopped (Ctrl-C)") == 1  # no further thread count
    done[:] = [8, 8, 8]  # stopped before the first round ended: no table, no "table above"
    assert paired.main() == 130
    assert capsys.readouterr().out.strip() == "Stopped (Ctrl-C) at 4096x14336, 1 thread(s), after 0 of 4 rounds."


def test_paired_table_sets_each_round_side_by_side(paired, run):
    shape, mib = "4096x14336", 4096 * 14336 * 1.0625 / 1e3  # w8 bytes / 1e3: GB/s from us
    rounds = [paired.Round({8: 1300.0}, {8: 1000.0}, {8: 90.0}, 40.0, True, {8: "a"}),
              paired.Round({4: 1000.0}, {}, {}, 45.0, True, {}),  # gemvbw gave no w4 figure
              paired.Round({8: 1100.0}, {8: 1000.0}, {8: 96.0}, 50.0, False, {8: "b"}),
              paired.Round({}, {4: 500.0}, {4: 99.0}, 55.0, False, {4: "c"}),  # MNN gave none
              paired.Round({8: 1200.0}, {8: 1000.0}, {8: 80.0}, 30.0, True, {8: "a"})]
    lines = paired.table(rounds, shape, 2)
    assert lines[0] == "#### 4096x14336, 2 thread(s), 3 rounds per width"
    w8 = next(line for line in lines if line.startswith("w8 |")).split(" | ")
    # 1.30 meets the ratio, 1.10 with gemvbw at 96 % meets the wall clause, 1.20 at 80 % meets neither
    assert w8[1:5] == ["1.30 1.10 1.20", "1.20", "2 of 3", "90 96 80"]
    assert w8[5] == " ".join(f"{100 * mib / us / read:.0f}" for us, read in ((1300, 40), (1100, 50), (1200, 30)))
    assert w8[5] == "120 113 173" and f"{100 * run.mnn_gbps(1300.0, shape, 8) / 40:.0f}" == "120"  # MNN's count
    assert w8[6] == "40.0 50.0 30.0"  # each round's own read, the one its width was set against
    assert w8[7] == "a / b / a"  # the variant auto timed in each round
    assert next(line for line in lines if line.startswith("w4 |")) == "w4 | - | - | - | - | - | - | -"  # never both
    assert all(line.count("|") == 7 for line in lines[2:6])  # header, rule and the two widths: eight columns
    assert not any(line.startswith(("w3", "w2")) for line in lines)  # no round of theirs: not asked for


def test_paired_table_sets_mnn_and_gemvbw_against_the_plain_read_row(paired):
    rounds = [paired.Round({8: 1300.0}, {8: 1040.0}, {8: 92.0}, 40.0, True, {8: "a"}, {8: 1000.0}),
              paired.Round({8: 1260.0}, {8: 1000.0}, {8: 97.0}, 40.0, False, {8: "a"}, {8: 1050.0}),
              paired.Round({4: 700.0}, {4: 500.0}, {4: 90.0}, 40.0, True, {4: "c"}, None)]  # one without a read
    lines = paired.table(rounds, "4096x14336", 1)
    assert lines[2].endswith("| MNN / plain read row per round | gemvbw / plain read row per round")
    assert lines[3].count("|") == lines[2].count("|") == 9
    w8 = next(line for line in lines if line.startswith("w8 |")).split(" | ")
    assert w8[8:] == ["1.30 1.20", "1.04 0.95"]  # 1300 / 1000, 1260 / 1050; 1040 / 1000, 1000 / 1050
    w4 = next(line for line in lines if line.startswith("w4 |")).split(" | ")
    assert w4[8:] == ["-", "-"]
    assert "MNN / read is the ratio a kernel costing nothing beyond its reads" in lines[-2]
    assert not any("plain read" in line for line in paired.table([r._replace(read_row_us=None) for r in rounds],
                                                                  "4096x14336", 1))  # --no-read-row: as before


def test_paired_read_row_is_the_fastest_way_over_the_bytes_mnn_counts(paired, monkeypatch):
    seen = {}
    ways = {"read 1": object(), "read 4": object(), "read 8": object()}
    timed = {id(ways["read 1"]): 1200.0, id(ways["read 4"]): 1100.0, id(ways["read 8"]): 1500.0}
    monkeypatch.setattr(paired, "read_runs", lambda nbytes, threads: seen.update(nbytes=nbytes, threads=threads) or ways)
    monkeypatch.setattr(paired, "row_us", lambda f, iters, reps, flusher: seen.update(
        iters=iters, reps=reps, mib=flusher.flush_mib) or timed[id(f)])
    monkeypatch.setattr(paired.numba, "set_num_threads", lambda n: seen.update(numba_threads=n))
    assert paired.read_row_us("4096x14336", 4, 2, 96) == 1100.0
    assert seen == {"nbytes": 4096 * 14336 // 2 + 4096 * 224 * 4, "threads": 2, "numba_threads": 2, "iters": 200,
                    "reps": 3, "mib": 96}


def test_paired_table_names_one_variant_once_when_every_round_timed_it(paired):
    rounds = [paired.Round({2: 900.0}, {2: 300.0}, {2: 91.0}, 40.0, i % 2 == 0, {2: "packed-16c4-avx512vnni-zmm"})
              for i in range(3)]
    w2 = next(line for line in paired.table(rounds, "4096x14336", 1) if line.startswith("w2 |")).split(" | ")
    assert w2[1:4] == ["3.00 3.00 3.00", "3.00", "3 of 3"]
    assert w2[7] == "packed-16c4-avx512vnni-zmm (every round)"
    unnamed = paired.Round({2: 900.0}, {2: 300.0}, {2: 91.0}, 40.0, True, {})  # a sweep row without "variant"
    assert paired.variants([unnamed, rounds[0]], 2) == "? / packed-16c4-avx512vnni-zmm"


@pytest.fixture
def call_cost(load_script):
    return load_script("benchmarks/call_cost.py", "bench_call_cost")


def test_call_cost_refuses_what_it_cannot_measure_naming_the_flag(call_cost, capsys):
    for argv, flag in ((["--variants", "packed-nothing"], "--variants"), (["--shape", "10x"], "--shape"),
                       (["--rounds", "0"], "--rounds"), (["--threads", "999"], "--threads"),
                       (["--flush-mib", "0"], "--flush-mib")):
        with pytest.raises(SystemExit) as e:
            call_cost.main(argv)
        assert e.value.code == 2
        assert flag in capsys.readouterr().err


def test_call_cost_warms_the_code_after_the_flush_not_before(call_cost):
    events = []

    class Flusher:
        flush_mib = 8

        def flush(self):
            events.append("flush")

    f = call_cost.FlushThenCall(Flusher(), lambda: events.append("tiny"))
    f.flush()
    assert (events, f.flush_mib) == (["flush", "tiny"], 8)


def test_call_cost_measures_every_way_of_every_verified_variant(call_cost):
    import numba

    from gemvbw import kernels

    variants = [s.variant for s in kernels.variants(8, "i8")][:2]
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        per_variant, read, nbytes = call_cost.measure(32, 128, 8, 1, variants, rounds=1, flush_mib=1, calls=2)
    finally:
        numba.set_num_threads(old)
    assert list(per_variant) == variants and nbytes == 32 * 128 + 32 * 2 * 2 * 2
    assert all(set(m) == set(call_cost.WAYS) and min(m.values()) > 0 for m in per_variant.values()) and read > 0


@pytest.fixture
def hot_loop(load_script):
    return load_script("benchmarks/hot_loop.py", "bench_hot_loop")


def _one_of_each_format(hot_loop):
    """The first column-tile kernel and the first packed-4x2 kernel this CPU runs (the tool's checks compile each)."""
    here = hot_loop.variants_here(None, None)
    return [next(v for v in here if v[1] == fmt) for fmt in ("c4", "4x2") if any(v[1] == fmt for v in here)]


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_hot_loop_adds_what_the_kernel_adds(hot_loop, bits):
    from gemvbw.kernels import packed, tile

    checked = _one_of_each_format(hot_loop)
    assert checked, "no int8 kernel on this CPU"
    for name, fmt, tier in checked:
        # exits unless the kernel matches the reference and the loop's sums are its y bit for bit
        tag, copy, meta, work, nb, accs, weights = hot_loop.prepared(fmt, tier, bits, 256)
        rows = tile.group_rows(tier, bits) * tile.plain_streams(bits, tier=tier) if fmt == "c4" else packed.ROWS * packed.STREAMS
        assert (nb, weights) == (4, rows * 256), name
        before = accs.copy()
        assert hot_loop._hot_steps(tag, copy, meta, work, 256, nb, accs, 3) == weights
        assert np.array_equal(accs, before), name  # every pass starts from zero: the same sums


def test_hot_loop_never_times_a_kernel_off_the_reference_or_a_loop_off_the_kernel(hot_loop, monkeypatch):
    name, fmt, tier = _one_of_each_format(hot_loop)[-1]
    monkeypatch.setattr(hot_loop, "relative_error", lambda *a: 1.0)
    with pytest.raises(SystemExit, match="w4: the .* kernel of .* is off the reference .*; not timed"):
        hot_loop.measure(fmt, tier, 4, 128, 1)
    monkeypatch.undo()
    monkeypatch.setattr(hot_loop, "_row_sums", lambda tag, accs, rows: np.zeros(1, np.float32))
    with pytest.raises(SystemExit, match="w4: the hot loop's sums differ from the .* kernel's y .*; not timed"):
        hot_loop.measure(fmt, tier, 4, 128, 1)


def test_hot_loop_refuses_what_it_cannot_measure_naming_the_flag(hot_loop, capsys):
    for argv, flag in ((["--K", "100"], "--K"), (["--rounds", "0"], "--rounds"), (["--shape", "10x"], "--shape"),
                       (["--bits", "5"], "--bits"), (["--tier", "no-such-tier"], "--tier")):
        with pytest.raises(SystemExit) as e:
            hot_loop.main(argv)
        assert e.value.code == 2
        assert flag in capsys.readouterr().err


def test_hot_loop_lists_the_tiers_asked_for(hot_loop, monkeypatch):
    from gemvbw import tiers

    monkeypatch.setattr(tiers, "usable", lambda: [tiers.by_name("avx512vnni-zmm"), tiers.by_name("avx2")])
    assert hot_loop.variants_here(None, None) == [
        ("packed-16c4-avx512vnni-zmm", "c4", "avx512vnni-zmm"), ("packed-4x2-avx512vnni-zmm", "4x2", "avx512vnni-zmm"),
        ("packed-4x2-avx2", "4x2", "avx2")]
    assert hot_loop.variants_here("avx2", None) == [("packed-4x2-avx2", "4x2", "avx2")]
    assert hot_loop.variants_here(None, "c4") == [("packed-16c4-avx512vnni-zmm", "c4", "avx512vnni-zmm")]


def test_mnn_flush_is_read_from_its_output_and_is_64_without_the_line(run):
    table = "## GEMV: y = W(64x128) * x(128), block=64\ncold cache: 128 MiB flush before each iter\ntype | thr\n"
    assert run.mnn_flush_mib(table) == 128
    assert run.mnn_flush_mib("## GEMV: y = W(64x128) * x(128), block=64\ntype | thr\n") == 64


def test_run_mnn_passes_the_sweeps_flush_to_mnn(run, monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, capture_output, text, check, cwd, env):
        seen.update(env)
        out = (f"## GEMV: y = W(64x128) * x(128), block=64\ncold cache: {env['MNN_GEMVBW_FLUSH_MIB']} MiB flush "
               "before each iter\nw4   |   1 |      12.5 |    0.0 |     0.5000 |      0.4 |   1.0 |     1.3 |      2.00\n")
        return type("Done", (), {"stdout": out})()

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    run.run_mnn(str(tmp_path / "run_test.out"), 1, "64x128")
    assert seen["MNN_GEMVBW_FLUSH_MIB"] == str(run.SWEEP_FLUSH_MIB)  # unless told: the sweep's own on this machine
    out, widths = run.run_mnn(str(tmp_path / "run_test.out"), 1, "64x128", 96)  # run.py --flush-mib 96
    assert (seen["MNN_GEMVBW_M"], seen["MNN_GEMVBW_K"], seen["MNN_GEMVBW_FLUSH_MIB"]) == ("64", "128", "96")
    assert widths == {4: 12.5} and run.mnn_flush_mib(out) == 96
    passes = [run.MnnPass({"64x128": (out, widths)}, (1.0, 1.0))]
    assert run.mnn_flush_note(passes, 96) == "a 96 MiB read before every call, MNN's through MNN_GEMVBW_FLUSH_MIB"
    assert run.mnn_flush_note(passes, 128).startswith("gemvbw reads 128 MiB before every call, MNN 96 MiB")
    old = [run.MnnPass({"64x128": (out.replace("cold cache: 96 MiB flush before each iter\n", ""), widths)},
                       (1.0, 1.0))]
    assert run.mnn_flush_note(old, 96).startswith("gemvbw reads 96 MiB before every call, MNN 64 MiB: its build lacks")


def test_run_mnn_asks_for_one_width_and_keeps_only_it(run, monkeypatch, tmp_path, capsys):
    seen = {}
    line = "w{} |   1 |      12.5 |    0.0 |     0.5000 |      0.4 |   1.0 |     1.3 |      2.00\n"

    def fake_run(cmd, capture_output, text, check, cwd, env):
        seen.update(env)
        asked = [int(env["MNN_GEMVBW_BITS"])] if honours and "MNN_GEMVBW_BITS" in env else [8, 4, 3, 2]
        out = "## GEMV: y = W(64x128) * x(128), block=64\n" + "".join(line.format(b) for b in asked)
        return type("Done", (), {"stdout": out})()

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    honours = True
    assert run.run_mnn(str(tmp_path / "run_test.out"), 1, "64x128", 96, 4)[1] == {4: 12.5}
    assert seen["MNN_GEMVBW_BITS"] == "4" and "ignores" not in capsys.readouterr().err
    honours = False  # a build without the published test's MNN_GEMVBW_BITS: every width, one kept
    assert run.run_mnn(str(tmp_path / "run_test.out"), 1, "64x128", 96, 3)[1] == {3: 12.5}
    assert "MNN timed w8 w4 w3 w2 where w3 was asked for: a build that ignores MNN_GEMVBW_BITS" in \
        capsys.readouterr().err
    seen.clear()
    honours = True
    monkeypatch.setenv("MNN_GEMVBW_BITS", "2")  # left in the shell from a sweep: MNN still times every width
    assert len(run.run_mnn(str(tmp_path / "run_test.out"), 1, "64x128", 96)[1]) == 4 and "MNN_GEMVBW_BITS" not in seen


@pytest.fixture
def row_read(load_script):
    return load_script("benchmarks/row_read.py", "bench_row_read")


def test_row_read_sets_each_row_against_the_rooflines_around_it(row_read):
    # 1e6 bytes: a 25 us row is 40 GB/s; rooflines 50 and 40 GB/s around the round
    first = row_read.RowReading(0, 8, 1_000_000, 50.0, 40.0, {"read 1": 30.0, "read 4": 25.0}, "tile", 40.0)
    again = row_read.RowReading(1, 8, 1_000_000, 40.0, 40.0, {"read 1": 20.0}, "tile", 25.0)
    failed = row_read.RowReading(0, 2, 300_000, 50.0, 40.0, {"read 1": 10.0}, "bad", None)
    assert first.read_way == "read 4" and first.pct_of_rooflines(25.0) == (80.0, 100.0)
    assert row_read.reading_line(first) == ("1 | w8 | 50.0 / 40.0 GB/s | 25.0 us, 40.0 GB/s (4 streams per thread) "
                                            "| 80-100 | tile 40.0 us, 25.0 GB/s | 50-62 | 1.60")
    assert row_read.reading_line(failed).endswith("| bad: FAILED verification, not timed | - | -")
    lines = row_read.summary([first, failed, again], llc_bytes=500_000)
    # read rows: 40 GB/s of a 45 GB/s mean (89 %), 50 of 40 (125 %); kernel rows 25/45 (56 %), 40/40 (100 %)
    assert lines[2] == "w8 | 2 | 107 (89-125) | 78 (56-100) | 1.43 (1.25-1.60) | tile"
    assert lines[3] == "w2 | 1 | 67 (67-67) | - (not timed) | - (not timed) | bad"
    assert lines[5].startswith("w8: a read row above the faster roofline, with more bytes than the last-level "
                               "cache: the bandwidth moved during the round")
    cached = row_read.RowReading(0, 2, 300_000, 50.0, 40.0, {"read 1": 5.0}, "tile", 6.0)  # 60 GB/s, 300 kB
    assert "w2: a read row above the faster roofline, with bytes that fit in the last-level cache" in \
        "\n".join(row_read.summary([cached], llc_bytes=500_000))
    assert len(row_read.summary([first, again], llc_bytes=None)) == 5  # cache unknown: no claim that it fits
    # a read row of 25 us against an empty call of 1.5 us after the flush (20 x = 30 us): short; of 1.0 us: not
    assert row_read.summary([first], empty_call_us=1.5)[-1].startswith(
        "w8: read rows under 20 times an empty call after the flush (1.5 us)")
    assert not any("empty call" in line for line in row_read.summary([first], empty_call_us=1.0))


def test_row_read_times_each_width_as_rows_between_two_rooflines(row_read, monkeypatch):
    events = []
    rooflines = iter([30.0, 32.0, 34.0, 36.0])

    class Spec:
        variant = "tile"

        def session(self, threads):
            import contextlib
            return contextlib.nullcontext()

    def bandwidth(threads, nbytes):
        events.append("roofline")
        return type("Bandwidth", (), {"gbps": next(rooflines)})()

    def row(call, iters, reps, flusher):
        assert (iters, reps, flusher.flush_mib) == (7, 2, 3)
        events.append(call)
        return {"w8 read 1": 20.0, "w8 read 4": 18.0, "w8 kernel": 19.0,
                "w2 read 1": 6.0, "w2 read 4": 7.0, "w2 kernel": 9.0}[call]

    monkeypatch.setattr(row_read, "read_bandwidth", bandwidth)
    monkeypatch.setattr(row_read, "row_us", row)
    monkeypatch.setattr(row_read, "read_runs", lambda nbytes, threads: {
        f"read {s}": f"w{8 if nbytes > 10_000 else 2} read {s}" for s in (1, 4)})
    monkeypatch.setattr(row_read, "verified_kernel", lambda qm, x, y, threads, flusher, variant:
                        (Spec(), f"w{qm.bits} kernel"))
    seen = []
    readings = row_read.measure(64, 256, [8, 2], 1, 2, 7, 2, 3, roofline_bytes=1 << 20, on_reading=seen.append)
    # round 1: widths in order, each read first; round 2: widths rotated, each kernel first
    assert events == ["roofline", "w8 read 1", "w8 read 4", "w8 kernel", "w2 read 1", "w2 read 4", "w2 kernel",
                      "roofline", "roofline", "w2 kernel", "w2 read 1", "w2 read 4", "w8 kernel", "w8 read 1",
                      "w8 read 4", "roofline"]
    assert seen == readings and [(g.round, g.bits) for g in readings] == [(0, 8), (0, 2), (1, 8), (1, 2)]
    assert [(g.roofline_before, g.roofline_after) for g in readings] == [(30.0, 32.0)] * 2 + [(34.0, 36.0)] * 2
    w8 = readings[0]  # bytes: 64 rows x 256 codes, + 64 rows x 4 blocks x 2 fp16 values
    assert (w8.nbytes, w8.read_way, w8.fastest_read_us, w8.kernel_us) == (64 * 256 + 64 * 4 * 2 * 2, "read 4", 18.0, 19.0)
    assert (readings[1].read_way, readings[1].kernel_us) == ("read 1", 9.0)


def test_row_read_never_times_a_kernel_that_fails_verification(row_read, monkeypatch, capsys, wrong_i8_w4):
    from gemvbw.harness import CacheFlusher
    from gemvbw.quant import random_activations, random_quantized

    good, bad = wrong_i8_w4
    monkeypatch.setattr(row_read.kernels, "get", lambda bits, act, variant: {"wrong": bad, good.variant: good}[variant])
    qm, x, y = random_quantized(32, 128, 4, seed=1), random_activations(128, 0), np.empty(32, np.float32)
    spec, call = row_read.verified_kernel(qm, x, y, 1, CacheFlusher(1), "wrong")
    assert spec is bad and call is None
    assert "w4 wrong: FAILED verification" in capsys.readouterr().err
    spec, call = row_read.verified_kernel(qm, x, y, 1, CacheFlusher(1), good.variant)
    assert spec is good and call is not None


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds: 0; give 1 or more"),
    (["--iters", "-1"], "--iters: -1; give 1 or more"),
    (["--bits", "8,5"], "--bits: '8,5'; give widths from 8,4,3,2"),
    (["--shape", "4096"], "--shape: '4096'; give MxK"),
    (["--flush-mib", "0"], "--flush-mib: 0 MiB; the cold figures need a flush"),
    (["--variant", "no-such-tile", "--bits", "8"], "--variant: no w8 int8 variant 'no-such-tile' on this CPU"),
])
def test_row_read_refuses_bad_input_naming_the_flag(row_read, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        row_read.main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_row_read_runs_end_to_end_on_a_tiny_shape(row_read, monkeypatch, tmp_path, capsys):
    from gemvbw import kernels

    monkeypatch.setattr(row_read, "read_buffer_bytes", lambda llc: 1 << 20)  # a small roofline buffer: quick
    md = tmp_path / "rows.md"
    assert row_read.main(["--shape", "32x128", "--threads", "1", "--bits", "8,2", "--rounds", "2", "--iters", "2",
                          "--reps", "1", "--flush-mib", "1", "--md", str(md)]) == 0
    text = md.read_text()
    rows = [line for line in text.splitlines() if line[:1] in "12" and " | w" in line]
    assert [line.split(" | ")[:2] for line in rows] == [["1", "w8"], ["1", "w2"], ["2", "w8"], ["2", "w2"]]
    names = {s.variant for b in (8, 2) for s in kernels.variants(b, "i8")}
    assert all(line.split(" | ")[5].split()[0] in names for line in rows)  # auto's verified choice, timed
    assert "w8 | 2 | " in text and "w2 | 2 | " in text and text == capsys.readouterr().out.replace("\n\n\n", "\n\n")


def test_row_read_says_so_when_no_variant_of_a_width_verifies(row_read, monkeypatch, capsys):
    def none_left(*args, **kwargs):
        raise row_read.calibrate.CalibrationFailed("no w8 i8 variant passed verification during calibration")

    monkeypatch.setattr(row_read.calibrate, "choose", none_left)
    assert row_read.main(["--shape", "32x128", "--bits", "8", "--rounds", "1", "--iters", "1", "--reps", "1",
                          "--flush-mib", "1"]) == 1
    assert "no w8 i8 variant passed verification during calibration; no kernel row can be timed" in \
        capsys.readouterr().err

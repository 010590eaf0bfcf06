"""The emulated aarch64 stage of CI (.ci/arm64): what a user of each kind of ARM core would get.

Run there under QEMU_CPU=max, cortex-a76 and cortex-a53 (GEMVBW_EMULATED_CPU names which), with
numba told the CPU as a real device's LLVM would detect it (NUMBA_CPU_NAME). Each test runs
gemvbw in a subprocess, as a user would, so a kernel dying of SIGILL or SIGABRT fails the test
instead of the run. Elsewhere these tests skip.
"""

import json
import os
import subprocess
import sys

import pytest

CPU = os.environ.get("GEMVBW_EMULATED_CPU")
pytestmark = pytest.mark.skipif(CPU is None, reason="the emulated aarch64 stage sets GEMVBW_EMULATED_CPU (.ci/arm64)")

# what each QEMU CPU model has, and so which tiers gemvbw must find (the preferred first)
EXPECTED = {
    "max": (["neon-dotprod", "neon"], True),  # (tiers, has i8mm)
    "cortex-a76": (["neon-dotprod", "neon"], False),
    "cortex-a53": (["neon"], False),
}
SWEEP = ["sweep", "--iters", "2", "--reps", "1"]  # each test gives its shape (an option given twice is refused)


def gemvbw(*args, env=None):
    done = subprocess.run([sys.executable, "-m", "gemvbw", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=3600)
    assert done.returncode >= 0, f"gemvbw {' '.join(args)} died of signal {-done.returncode}: {done.stderr[-3000:]}"
    return done


def test_info_names_the_tiers_this_cpu_has():
    done = gemvbw("info", "--format", "json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    tiers, i8mm = EXPECTED[CPU]
    assert [t["name"] for t in facts["tiers"]["tiers"] if t["usable"]] == tiers
    assert ("i8mm" in facts["isa"]) is i8mm and facts["isa_source"].startswith("HWCAP")
    assert facts["emulated"].startswith("QEMU user mode")
    text = gemvbw("info").stdout
    assert f"int8 tiers: packed-4x2-{tiers[0]}" in text and ("i8mm (smmla) available, not used" in text) is i8mm


def test_default_sweep_runs_int8_on_the_tier_this_cpu_has(tmp_path):
    out = tmp_path / "run.json"
    done = gemvbw(*SWEEP, "--M", "256", "--K", "1000", "--json", str(out), "--format", "mnn")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    tier = EXPECTED[CPU][0][0]
    assert doc["settings"]["act"] == "auto" and not doc["failures"]
    assert [r["bits"] for r in doc["results"]] == [8, 4, 3, 2]
    for r in doc["results"]:
        assert r["verified"] and r["max_rel_err"] < 1e-5
        assert r["act"] == "i8" and r["variant"] == f"packed-4x2-{tier}"
    assert {w: c[0]["act"] for w, c in doc["act_choice"].items()} == {"w8": "i8", "w4": "i8", "w3": "i8", "w2": "i8"}
    assert "emulated" in {n["code"] for n in doc["warnings"]}
    assert f"int8 activations: {tier} kernels exist" in done.stdout


def test_every_tier_and_f32_verify_under_kernel_all(tmp_path):
    out = tmp_path / "all.json"
    done = gemvbw(*SWEEP, "--M", "13", "--K", "200", "--kernel", "all", "--json", str(out), "--format", "mnn")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    names = {(r["bits"], r["variant"]) for r in doc["results"] if r["verified"]}
    for bits in (8, 4, 3, 2):
        expected = {"ref", "rows4"} | {f"packed-4x2-{t}" for t in EXPECTED[CPU][0]}
        assert {v for b, v in names if b == bits} == expected


def test_block_32_runs_f32_and_says_why(tmp_path):
    out = tmp_path / "b32.json"
    done = gemvbw(*SWEEP, "--M", "16", "--K", "128", "--bits", "4", "--block", "32", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["results"][0]["act"] == "f32" and "take blocks of 64, not 32" in doc["act_choice"]["w4"][0]["why"]


def test_a_numba_target_beyond_this_cpu_is_refused_not_run():
    beyond = {"cortex-a53": "cortex-a76", "cortex-a76": "neoverse-n2"}.get(CPU)
    if beyond is None:
        pytest.skip(f"QEMU's {CPU} has every feature of the CPUs numba could be told")
    done = gemvbw(*SWEEP, "--M", "8", "--K", "64", env={"NUMBA_CPU_NAME": beyond})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Error: NUMBA_CPU_NAME: numba would compile for {beyond} with +")

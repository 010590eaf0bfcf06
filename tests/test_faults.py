"""Interruptions, broken installs and other faults, run as a user would (subprocesses)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ctrl_c_as_at_a_terminal():
    # a job started in the background (nohup cmd &, a CI runner, mutmut's workers) inherits SIGINT ignored,
    # and Python then never raises KeyboardInterrupt: give the child the disposition a terminal gives
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def gemvbw(*args, env=None, **kw):
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "gemvbw", *args], cwd=ROOT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_at_a_terminal, **kw)


def wait_for_line(proc, prefix, timeout=240):
    """Read stdout until a line starts with ``prefix``; return everything read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(prefix):
            return seen
    proc.kill()
    raise AssertionError(f"no line starting with {prefix!r} in:\n{''.join(seen)}")


# w8 and w4 finish quickly; w3's f32 loop is then busy for seconds (12000 calls of about 0.2 ms), so a signal
# sent as soon as w4's row is printed lands during the third of four widths
INTERRUPTIBLE = ["sweep", "--M", "256", "--K", "4096", "--bits", "8,4,3,2", "--iters", "4000", "--reps", "3",
                 "--flush-mib", "1", "--threads", "1", "--act", "f32", "--kernel", "rows4", "--format", "mnn"]


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_during_third_width_keeps_finished_widths(tmp_path, sig, code, name):
    out = tmp_path / "partial.json"
    proc = gemvbw(*INTERRUPTIBLE, "--json", str(out))
    wait_for_line(proc, "w4 ")
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert f"INTERRUPTED by {name}" in stdout
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and name in doc["interrupted"]
    assert [r["bits"] for r in doc["results"]] == [8, 4]
    assert doc["roofline"]["read_after_gbps"] is None  # an interrupted run ends without reading again
    assert not list(tmp_path.glob(".gemvbw-*"))  # no temporary file left behind


def test_numba_missing_exit_1_with_install_hint():
    code = "import sys; sys.modules['numba'] = None; from gemvbw.cli import main; main()"
    res = subprocess.run([sys.executable, "-c", code, "sweep", "--M", "8", "--K", "64"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert "pip install numba" in res.stderr and "termux-user-repository" in res.stderr
    assert "Traceback" not in res.stderr


def test_corrupted_numba_cache_recompiles(tmp_path):
    cache = tmp_path / "numba-cache"
    env = {"NUMBA_CACHE_DIR": str(cache)}
    args = ["sweep", "--M", "16", "--K", "64", "--bits", "4", "--iters", "2", "--reps", "1", "--flush-mib", "0",
            "--threads", "1", "--format", "json"]
    first = gemvbw(*args, env=env)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    files = [p for p in cache.rglob("*") if p.is_file() and p.suffix in (".nbi", ".nbc")]
    assert files, "numba wrote no cache files"
    for p in files:
        p.write_bytes(b"\x00garbage, not a numba cache file\xff" * 3)
    second = gemvbw(*args, env=env)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert json.loads(out)["results"][0]["verified"] is True


TINY_MODEL = """
name = "Tiny"
source = "https://huggingface.co/example/tiny"
hidden_size = 128
layers = 2
vocab_size = 512
published_params = 1
[[projection]]
name = "up"
M = 256
K = 4096
count = 1
[[projection]]
name = "down"
M = 4096
K = 256
count = 1
"""


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_during_model_keeps_the_finished_shapes(tmp_path, sig, code, name):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY_MODEL)
    out = tmp_path / "model.json"
    # the first shape is quick; the second runs thousands of f32 calls, so the signal lands during it
    proc = gemvbw("model", "--config", str(preset), "--bits", "3", "--iters", "4000", "--reps", "3",
                  "--flush-mib", "1", "--threads", "1", "--act", "f32", "--kernel", "rows4", "--format", "mnn",
                  "--json", str(out))
    wait_for_line(proc, "256x4096 | w3")
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and f"INTERRUPTED by {name}" in stdout
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and name in doc["interrupted"]
    assert [(r["M"], r["K"]) for r in doc["results"]] == [(256, 4096)]
    assert doc["model"]["per_bits"] == []  # no per-token total from half a model


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_during_soak_keeps_the_windows_measured(tmp_path, sig, code, name):
    out = tmp_path / "soak.json"
    proc = gemvbw("soak", "--M", "256", "--K", "1024", "--seconds", "120", "--interval", "0.25", "--threads", "1",
                  "--flush-mib", "1", "--format", "text", "--json", str(out))
    seen = wait_for_line(proc, "t_s |")
    seen += [proc.stdout.readline(), proc.stdout.readline()]  # two windows done (their t_s depends on the load)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    doc = json.loads(out.read_text())
    assert doc["interrupted"] == ("SIGINT (Ctrl-C)" if code == 130 else "SIGTERM") and len(doc["windows"]) >= 2
    assert f"interrupted by {doc['interrupted']}: summary of the {len(doc['windows'])} window(s)" in "".join(seen) + stdout

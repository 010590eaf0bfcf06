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


def gemvbw(*args, env=None, **kw):
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "gemvbw", *args], cwd=ROOT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


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

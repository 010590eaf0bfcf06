"""Bad input, a hostile environment and failing files: one clear line and a documented exit code, never a
traceback, a silent wrong result or a damaged file (each class of fault at its root)."""

import errno
import json
import os
import stat
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from gemvbw import cli, numba_env
from gemvbw.cli import main
from gemvbw.quant import QuantizedMatrix, quantize, random_quantized
from gemvbw.report import files

# --llc-mib: the read roofline's buffer follows the cache (8x it), so without it a machine reporting a large L3
# (a VM's 480 MiB) reads 3840 MiB in every one of these sweeps
TINY = ["sweep", "--M", "64", "--K", "256", "--iters", "2", "--reps", "1", "--flush-mib", "1",
        "--llc-mib", "32", "--threads", "1"]


def run(args, env=None):
    return CliRunner().invoke(main, args, env=env or {}, catch_exceptions=False)


# --- result files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("umask,mode", [(0o027, 0o640), (0o002, 0o664)])
def test_a_new_result_file_gets_the_umask_permissions(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        files.write_atomic(str(tmp_path / "r.json"), "{}")
        assert os.umask(umask) == umask  # and the umask is left as it was
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r.json").st_mode) == mode  # 0666 less the umask, not mkstemp's 0600


def test_an_existing_file_keeps_its_mode_and_a_symlink_stays_a_link(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old")
    os.chmod(target, 0o604)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    files.write_atomic(str(link), "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o604
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gemvbw-")] == []  # no temporary left


def test_a_node_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(files.UnwritablePath, match="is a FIFO, not a regular file"):
        files.write_atomic(str(fifo), "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO
    res = run(TINY + ["--json", str(fifo)])
    assert res.exit_code == 2 and "--json:" in res.stderr and "is a FIFO" in res.stderr
    res = run(TINY + ["--csv", "/dev/null"])
    assert res.exit_code == 2 and "is a device node" in res.stderr


def test_a_crash_mid_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text('{"complete": true}')

    def fail_fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail_fsync)
    with pytest.raises(OSError) as info:
        files.write_atomic(str(path), '{"complete": false, "but trunc')
    assert info.value.filename == str(path) and info.value.errno == errno.ENOSPC
    assert str(info.value) == f"[Errno {errno.ENOSPC}] No space left on device: {str(path)!r}"
    assert json.loads(path.read_text()) == {"complete": True}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_temporary_is_a_hidden_file_beside_the_result(tmp_path, monkeypatch):
    """Beside it, so the rename is atomic (one file system); hidden and marked, so a listing or a glob of the
    results never picks a half-written one; removed when the write is interrupted."""
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "r.json"
    seen = []

    def interrupted_fsync(fd):
        seen.extend(p.name for p in path.parent.iterdir())
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):  # not turned into an OSError about the result file
        files.write_atomic(str(path), "x")
    assert len(seen) == 1 and seen[0].startswith(".gemvbw-") and seen[0].endswith(".tmp")
    assert list(path.parent.iterdir()) == []


def test_result_and_preset_files_are_utf8_whatever_the_locale(tmp_path):
    """Under a C locale with Python's UTF-8 mode off, open() would encode as ASCII: results, presets and
    --rerun files are still written and read as UTF-8."""
    script = (
        "import sys; from gemvbw.report import files; from gemvbw import cli, models\n"
        "path = sys.argv[1]\n"
        "files.write_atomic(path, '{\"schema\": \"gemvbw.sweep/1\", \"settings\": {}, \"cpu\": \"caf' + chr(233) + '\"}')\n"
        "print(ascii(cli.load_result(path, '--x')['cpu']))\n"
        "print(ascii(models.load(sys.argv[2]).name))\n")
    from gemvbw import cli as gcli, models

    preset = tmp_path / "p.toml"
    preset.write_bytes('name = "caf\u00e9"\nhidden_size = 1\nlayers = 1\n[[projection]]\nname = "p"\nM = 1\nK = 1\n'
                       .encode())
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "r.json"), str(preset)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["'caf\\xe9'", "'caf\\xe9'"]
    assert (tmp_path / "r.json").read_bytes().endswith('"caf\u00e9"}'.encode("utf-8"))
    # the same calls in this process too, under an ASCII C locale set here (mutation testing maps a test to the
    # code it calls in-process only; open() without an encoding takes the locale's at the time of the call)
    import locale

    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        if sys.flags.utf8_mode:
            pytest.skip("Python's UTF-8 mode is on: open() is UTF-8 whatever the locale")
        files.write_atomic(str(tmp_path / "r2.json"), '{"schema": "gemvbw.sweep/1", "settings": {}, "cpu": "caf\u00e9"}')
        assert gcli.load_result(str(tmp_path / "r2.json"), "--x")["cpu"] == "caf\u00e9"
        assert models.load(str(preset)).name == "caf\u00e9"
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert (tmp_path / "r2.json").read_bytes().endswith('"caf\u00e9"}'.encode("utf-8"))


@pytest.mark.parametrize("kind", ["a directory", "a FIFO", "a socket", "a device node"])
def test_each_node_that_is_not_a_file_is_named(tmp_path, kind):
    import socket

    path = tmp_path / "node"
    if kind == "a directory":
        path.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    else:
        path = "/dev/null"
    with pytest.raises(files.UnwritablePath) as info:
        files.write_atomic(str(path), "x")
    assert str(info.value) == (f"{str(path)!r} is {kind}, not a regular file: gemvbw writes its results atomically "
                               "(a new file renamed over the old one), which would replace it; choose a file name")


def test_the_write_probe_is_made_in_the_results_directory_and_removed(tmp_path, monkeypatch):
    from gemvbw import settings as st

    made = []
    real = st.tempfile.mkstemp

    def recording(**kw):
        made.append(kw)
        return real(**kw)

    monkeypatch.setattr(st.tempfile, "mkstemp", recording)
    (tmp_path / "sub").mkdir()
    st.check_writable(str(tmp_path / "sub" / "r.json"), "--json")
    assert made == [{"dir": tmp_path / "sub", "prefix": ".gemvbw-probe-"}] and list((tmp_path / "sub").iterdir()) == []
    monkeypatch.chdir(tmp_path / "sub")
    st.check_writable("r.json", "--json")  # a bare file name: the current directory, as an absolute path
    assert made[-1]["dir"] == tmp_path / "sub"

    def refused(**kw):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(st.tempfile, "mkstemp", refused)
    with pytest.raises(st.SettingsError) as info:
        st.check_writable(str(tmp_path / "sub" / "r.json"), "--csv")
    assert str(info.value) == (f"--csv: cannot write in {str(tmp_path / 'sub')!r} (Permission denied); "
                               "choose a writable path")


def test_the_same_file_for_two_outputs_is_refused(tmp_path):
    res = run(TINY + ["--json", str(tmp_path / "a"), "--md", str(tmp_path / "a")])
    assert res.exit_code == 2 and res.stderr.startswith("Error: --md: ") and "also the file of --json" in res.stderr


def test_a_full_disk_mid_run_keeps_measuring_and_says_so(tmp_path, monkeypatch):
    calls = []
    real = files.write_atomic

    def full_after_first(path, text):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(path, text)

    monkeypatch.setattr("gemvbw.report.write_atomic", full_after_first)
    out = tmp_path / "r.json"
    res = run(TINY + ["--bits", "4,2", "--json", str(out), "--format", "mnn"])
    assert res.exit_code == 1
    assert "w4   |" in res.stdout and "w2   |" in res.stdout  # both widths were measured and shown
    assert res.stderr.count(f"Error: could not write {out} (No space left on device)") == 1


# --- signals and pipes, at any moment --------------------------------------------------------------

@pytest.mark.parametrize("raised,code,said", [(KeyboardInterrupt, 130, "Interrupted (Ctrl-C).\n"), (BrokenPipeError, 141, "")])
def test_entry_point_ends_a_signal_or_a_closed_pipe_with_its_status(monkeypatch, capsys, raised, code, said):
    def boom(*a, **k):
        raise raised()

    monkeypatch.setattr(main, "main", boom)
    with pytest.raises(SystemExit) as info:
        cli.entry()
    assert info.value.code == code
    assert capsys.readouterr().err == said


def entry_exit(monkeypatch, argv) -> int:
    monkeypatch.setattr(sys, "argv", ["gemvbw", *argv])
    with pytest.raises(SystemExit) as info:
        cli.entry()
    return info.value.code


def test_entry_point_keeps_click_from_handling_errors_itself(monkeypatch, capsys):
    """click's own handling would turn Ctrl-C into 'Aborted!' and exit 1; a usage error is still 2, shown once."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    assert entry_exit(monkeypatch, ["sweep", "--M", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: --M: 'abc' is not") and err.count("Error:") == 1
    monkeypatch.setattr(cli, "prepare_numba_env", interrupted)
    assert entry_exit(monkeypatch, ["info"]) == 130
    assert capsys.readouterr().err == "\nInterrupted (Ctrl-C).\n"  # click ends the interrupted line first


def test_entry_point_passes_clicks_own_codes_on(monkeypatch, capsys):
    assert entry_exit(monkeypatch, ["sweep", "--no-such-flag"]) == 2  # click's usage error, shown by click
    assert capsys.readouterr().err.endswith("\nError: No such option '--no-such-flag'.\n")
    assert entry_exit(monkeypatch, ["--help"]) == 0
    assert "Usage: " in capsys.readouterr().out


@pytest.mark.parametrize("returned,code", [(None, 0), ("not a status", 0), (3, 3)])
def test_entry_point_exits_with_what_the_command_returned(monkeypatch, returned, code):
    monkeypatch.setattr(main, "main", lambda *a, **k: returned)
    with pytest.raises(SystemExit) as info:
        cli.entry()
    assert info.value.code == code


def test_a_closed_pipe_points_stdout_at_devnull(monkeypatch, tmp_path):
    def pipe_closed(*a, **k):
        raise BrokenPipeError

    monkeypatch.setattr(main, "main", pipe_closed)
    target = tmp_path / "stdout"
    with open(target, "w") as out:
        saved = os.dup(out.fileno())
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(SystemExit):
            cli.entry()
        out.write("after the reader went away")
        out.flush()
        os.dup2(saved, out.fileno())
        os.close(saved)
    assert target.read_text() == ""  # the late write went to /dev/null, not to the pipe (and raised nothing)
    import io

    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a stdout without a file descriptor
    with pytest.raises(SystemExit):
        cli.entry()
    assert sys.stdout.name == os.devnull and sys.stdout.writable()
    sys.stdout.close()


def test_a_closed_pipe_ends_quietly():
    done = subprocess.run(f"{sys.executable} -m gemvbw info | head -1", shell=True, capture_output=True, text=True)
    assert done.stdout.startswith("cpu:") and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


# --- numba's own variables -------------------------------------------------------------------------

@pytest.mark.parametrize("var,value,fragment", [
    ("NUMBA_NUM_THREADS", "0", "NUMBA_NUM_THREADS: '0' is not a positive number of threads"),
    ("NUMBA_NUM_THREADS", "two", "NUMBA_NUM_THREADS: 'two' is not a positive number"),
    ("NUMBA_THREADING_LAYER", "bogus", "NUMBA_THREADING_LAYER: 'bogus' is not one of numba's threading layers"),
])
def test_a_malformed_numba_variable_is_named(var, value, fragment):
    assert numba_env.check({var: value}).startswith(fragment)
    for command in (TINY, ["info"], ["roofline"]):
        res = run(command, env={var: value})
        assert res.exit_code == 2 and res.stderr.startswith(f"Error: {fragment}"), (command, res.output)


def test_a_cache_numba_cannot_write_is_moved_and_announced(monkeypatch, tmp_path):
    monkeypatch.setattr(numba_env, "_writable", lambda d: str(d).startswith(str(tmp_path / "ok")))
    env = {"HOME": str(tmp_path / "home")}
    note = numba_env.prepare_cache(env, tmp_path / "pkg")
    assert env["NUMBA_CACHE_DIR"].startswith(os.path.join(os.path.dirname(env["NUMBA_CACHE_DIR"]), "gemvbw-numba-"))
    assert "compiled kernels are cached in" in note
    ok = {"HOME": str(tmp_path / "home"), "NUMBA_CACHE_DIR": str(tmp_path / "ok")}
    assert numba_env.prepare_cache(ok, tmp_path / "pkg") is None
    with pytest.raises(ValueError, match="NUMBA_CACHE_DIR: numba cannot write its cache"):
        numba_env.prepare_cache({"NUMBA_CACHE_DIR": str(tmp_path / "no")}, tmp_path / "pkg")


# --- what is checked before numba is imported, and what it must do once imported ------------------

def exit_of(call) -> int:
    with pytest.raises(SystemExit) as info:
        call()
    return info.value.code


def test_numbas_variables_and_cache_are_settled_before_it_is_imported(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(numba_env, "check", lambda environ: seen.append(environ) or "NUMBA_X: 'y' is bad; use z")
    monkeypatch.setattr(numba_env, "prepare_cache", lambda environ: pytest.fail("a refused run prepares no cache"))
    assert exit_of(cli.prepare_numba_env) == 2
    assert capsys.readouterr().err == "Error: NUMBA_X: 'y' is bad; use z\n" and seen == [os.environ]
    monkeypatch.setattr(numba_env, "check", lambda environ: None)
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", SimpleNamespace()))
    cli.prepare_numba_env()  # numba already imported: its cache was settled then, nothing is done
    assert capsys.readouterr().err == ""
    monkeypatch.delitem(sys.modules, "numba")  # as in a fresh process
    for outcome, err in (("the cache moved", "note: the cache moved\n"), (None, "")):
        monkeypatch.setattr(numba_env, "prepare_cache", lambda environ, _o=outcome: seen.append(environ) or _o)
        cli.prepare_numba_env()
        assert capsys.readouterr().err == err and seen[-1] is os.environ

    def unwritable(environ):
        raise ValueError("NUMBA_CACHE_DIR: numba cannot write its cache in /x; use a writable directory")

    monkeypatch.setattr(numba_env, "prepare_cache", unwritable)
    assert exit_of(cli.prepare_numba_env) == 2
    assert capsys.readouterr().err == "Error: NUMBA_CACHE_DIR: numba cannot write its cache in /x; use a writable directory\n"


@pytest.fixture
def numba_checks(monkeypatch):
    """require_numba's steps after the import, each replaceable; the order they ran in."""
    from gemvbw import jitcache, tiers
    from gemvbw.kernels import _common

    order = []
    monkeypatch.setattr(cli, "prepare_numba_env", lambda: order.append("variables"))
    monkeypatch.setattr(tiers, "unsafe_target_message", lambda report: order.append("target") or None)
    monkeypatch.setattr(jitcache, "repair", lambda: order.append("cache") or [])
    monkeypatch.setattr(_common, "empty_parallel_call", lambda out: order.append(("threads", out.dtype, out.shape)))
    return SimpleNamespace(order=order, tiers=tiers, jitcache=jitcache, common=_common)


def test_require_numba_checks_variables_target_cache_and_threads_in_that_order(numba_checks, capsys):
    cli.require_numba()
    assert numba_checks.order == ["variables", "target", "cache", ("threads", np.dtype(np.int64), (1,))]
    assert capsys.readouterr().err == ""


def test_numba_that_cannot_be_imported_is_said_with_how_to_install_it(numba_checks, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ModuleNotFoundError
    assert exit_of(cli.require_numba) == 1
    err = capsys.readouterr().err
    assert err == ("Error: numba could not be imported (ModuleNotFoundError: import of numba halted; None in sys.modules).\n"
                   f"{cli.NUMBA_HELP}\n")
    assert numba_checks.order == ["variables"]


def test_a_target_this_cpu_cannot_run_is_refused_before_anything_compiles(numba_checks, monkeypatch, capsys):
    monkeypatch.setattr(numba_checks.tiers, "unsafe_target_message", lambda report: "NUMBA_CPU_FEATURES: +avx512f "
                        "is not on this CPU; unset it")
    assert exit_of(cli.require_numba) == 2
    assert capsys.readouterr().err == "Error: NUMBA_CPU_FEATURES: +avx512f is not on this CPU; unset it\n"
    assert numba_checks.order == ["variables"]


def test_each_unreadable_cache_file_removed_is_announced(numba_checks, monkeypatch, capsys):
    from pathlib import Path

    monkeypatch.setattr(numba_checks.jitcache, "repair", lambda: [Path("/c/a.nbi"), Path("/c/b.nbc")])
    cli.require_numba()
    assert capsys.readouterr().err == (
        "note: removed unreadable numba cache file /c/a.nbi; the kernel is compiled afresh\n"
        "note: removed unreadable numba cache file /c/b.nbc; the kernel is compiled afresh\n")


def test_a_threading_layer_numba_cannot_load_is_named_with_what_would_work(numba_checks, monkeypatch, capsys):
    def no_layer(out):
        raise ValueError("No threading layer could be loaded.\nHINT: ...")

    monkeypatch.setattr(numba_checks.common, "empty_parallel_call", no_layer)
    monkeypatch.setenv("NUMBA_THREADING_LAYER", "tbb")
    assert exit_of(cli.require_numba) == 2
    assert capsys.readouterr().err == ("Error: NUMBA_THREADING_LAYER=tbb: No threading layer could be loaded. "
                                       "Unset it, or use NUMBA_THREADING_LAYER=omp or workqueue\n")

    def other(out):
        raise ValueError("something else")

    monkeypatch.setattr(numba_checks.common, "empty_parallel_call", other)
    with pytest.raises(ValueError, match="something else"):  # not a user's error: not dressed as one
        cli.require_numba()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to be capped below them")
def test_numba_thread_limit_below_the_cpus_is_respected_and_reported(tmp_path):
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "GEMVBW_CACHE_DIR": str(tmp_path)}
    out = tmp_path / "r.json"
    base = [sys.executable, "-m", "gemvbw"] + TINY[:-2] + ["--bits", "4", "--json", str(out), "--format", "json"]
    done = subprocess.run(base, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["settings"]["threads"] == 1 and "numba-thread-limit" in {n["code"] for n in doc["warnings"]}
    done = subprocess.run(base + ["--threads", "2"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "numba runs at most 1 here (NUMBA_NUM_THREADS=1)" in done.stderr
    assert "Traceback" not in done.stderr


# --- --rerun repeats the recorded run, and a bad record is named ---------------------------------

def test_rerun_takes_a_new_shape_beside_the_recorded_settings(tmp_path):
    first = tmp_path / "first.json"
    assert run(TINY + ["--bits", "4", "--seed", "5", "--json", str(first), "--format", "json"]).exit_code == 0
    doc = json.loads(run(["sweep", "--rerun", str(first), "--M", "32", "--format", "json"]).stdout)
    assert (doc["settings"]["M"], doc["settings"]["K"], doc["settings"]["seed"]) == (32, 256, 5)
    doc = json.loads(run(["sweep", "--rerun", str(first), "--shape", "16x128", "--format", "json"]).stdout)
    assert doc["settings"]["shapes"] == [[16, 128]]


@pytest.mark.parametrize("settings,fragment", [
    ([1, 2], "'settings' is not a mapping"),
    ({"shapes": [[64, -1]]}, "settings.shapes must be a list of [M, K] pairs of positive integers"),
    ({"shapes": "64x64"}, "settings.shapes must be a list"),
    ({"shapes": [[64, 256]], "iters": {"n": 2}}, "settings.iters is {'n': 2}, not a value gemvbw records"),
    ({"shapes": [[64, 256]], "bits": [5]}, "settings.bits = '5' from the file: '5' is not a supported width"),
    ({"shapes": [[64, 256]], "act": "int4"},
     "settings.act = 'int4' from the file: 'int4' is not one of auto, i8, f32; use e.g. --act auto"),
    ({"shapes": [[64, 256]], "act": "f32", "kernel": "nope"},
     "settings.kernel = 'nope' from the file: no variant 'nope' for w8,w4,w3,w2 (act=f32); choose one of: auto, all"),
])
def test_a_malformed_record_is_refused_before_anything_is_measured(tmp_path, settings, fragment):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "gemvbw.sweep/1", "settings": settings}))
    res = run(["sweep", "--rerun", str(path)])
    assert res.exit_code == 2 and fragment in res.stderr, res.stderr
    if "from the file" in fragment:
        assert res.stderr.startswith(f"Error: --rerun {path}: {fragment}")
    assert "Traceback" not in res.output and "memcpy" not in res.stdout  # nothing was measured


# --- the library API validates what it is given ----------------------------------------------------

def test_a_hand_built_matrix_with_short_arrays_is_refused():
    good = random_quantized(8, 128, bits=4)
    with pytest.raises(ValueError, match=r"codes must be a C-contiguous uint8 array of shape \(8, 64\)"):
        QuantizedMatrix(8, 128, 4, 64, 2, good.codes[:, :32].copy(), good.scale_raw, good.offset_raw)
    with pytest.raises(ValueError, match="scale_raw must be a C-contiguous uint16"):
        QuantizedMatrix(8, 128, 4, 64, 2, good.codes, good.scale_raw.astype(np.float32), good.offset_raw)
    inf = good.offset_raw.copy()
    inf[0, 0] = 0x7C00  # +inf in fp16
    with pytest.raises(ValueError, match="offset_raw holds NaN or infinity"):
        QuantizedMatrix(8, 128, 4, 64, 2, good.codes, good.scale_raw, inf)


def test_fp16_metadata_that_cannot_hold_the_weights_is_refused_with_advice():
    big = np.full((2, 64), 70000.0, np.float32)
    big[:, 0] = 0
    with pytest.raises(ValueError, match="do not fit fp16 metadata.*use meta_bytes=4"):
        quantize(big, bits=4)
    tiny = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32) * 1e-6
    with pytest.raises(ValueError, match="below fp16's normal range.*use meta_bytes=4"):
        quantize(tiny, bits=8)
    for W in (big, tiny):  # fp32 metadata holds both
        qm = quantize(W, bits=8, meta_bytes=4)
        assert np.abs(qm.dequantize() - W).max() <= qm.scale.max() / 2 * 1.0001


# --- memory, ranges, and errors naming the option at fault -----------------------------------------

def test_memory_counts_the_weights_their_temporary_and_repacked_copies():
    from gemvbw import kernels, settings as st

    s = st.resolve({"M": "65536", "K": "14336", "bits": "8", "act": "f32"}, environ={}, cpus=[0], available_bytes=1 << 40,
                   llc_bytes=None)  # the 64 MiB flush
    w8 = 65536 * 14336 + 2 * 65536 * 224 * 2
    assert st.copies_held(8, 64, "f32") == 2  # the codes and the temporary they were generated in
    assert st.sweep_bytes(s)[0] == 2 * w8 + 8 * (65536 + 14336) * 4 + (64 << 20) + st.VERIFY_BYTES
    # with int8 activations every layout the calibration may bind holds one more copy; variants of one layout
    # share theirs (the layouts stand for: two tiers on one 32-byte layout, one with w8 stored as c - 128, a tile)
    specs = [SimpleNamespace(layout=layout) for layout in
             (("4x2", 32, 0), ("4x2", 32, 0), ("4x2", 32, 128), ("c4", 16))]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "variants", lambda bits, act: specs if act == "i8" else [])
        assert st.copies_held(8, 64, "auto") == 1 + 3
        assert st.copies_held(8, 64, "i8") == 4 and st.copies_held(8, 32, "auto") == 2  # block 32: f32 kernels
        specs = []
        assert st.copies_held(8, 64, "auto") == 2  # no int8 variant here: the f32 loops read the codes as stored


def test_memory_errors_name_what_does_not_fit():
    from gemvbw import settings as st

    with pytest.raises(st.SettingsError) as info:
        st.resolve({"flush_mib": "100000"}, environ={}, cpus=[0], available_bytes=2 << 30, llc_bytes=None)
    assert info.value.source == "--flush-mib"
    with pytest.raises(st.SettingsError) as info:
        st.resolve({"M": "65536", "K": "65536", "bits": "8"}, environ={}, cpus=[0], available_bytes=2 << 30, llc_bytes=None)
    assert info.value.source == "--M/--K" and "drop 8 from --bits" not in str(info.value)  # 8 is the only width
    with pytest.raises(st.SettingsError, match="drop 8 from --bits"):
        st.resolve({"M": "65536", "K": "65536", "bits": "8,2"}, environ={}, cpus=[0], available_bytes=6 << 30, llc_bytes=None)


def test_cpu_ranges_are_bounded_before_they_are_expanded():
    from gemvbw import system

    with pytest.raises(ValueError, match="beyond CPU 8191"):
        system.parse_cpu_list("0-99999999")
    res = run(TINY + ["--cpus", "0-99999999"])
    assert res.exit_code == 2 and res.stderr.startswith("Error: --cpus:")


# --- every command, not just sweep -------------------------------------------------------------

@pytest.mark.parametrize("content,fragment", [
    ('{"schema": "gemvbw.sweep/1", "settings": {}, "results": 3}', "'results' is int, not a list"),
    ('{"schema": "gemvbw.sweep/1", "settings": {}, "results": [{"M": 1}]}', "results[0].K is None"),
    ('{"schema": "gemvbw.sweep/1", "settings": [], "results": []}', "'settings' is not a mapping"),
])
def test_compare_and_plot_name_a_malformed_result(tmp_path, content, fragment):
    path = tmp_path / "r.json"
    path.write_text(content)
    for args in (["compare", str(path), str(path)], ["plot", str(path), "-o", str(tmp_path / "p.png")]):
        res = run(args)
        assert res.exit_code == 2 and fragment in res.stderr and "Traceback" not in res.output, res.output


def test_plot_refuses_an_output_it_cannot_write(tmp_path):
    good = tmp_path / "r.json"
    assert run(TINY + ["--bits", "4", "--json", str(good), "--format", "json"]).exit_code == 0
    res = run(["plot", str(good), "-o", str(tmp_path / "chart.bmpx")])
    assert res.exit_code == 2 and "does not end in .png, .svg or .pdf" in res.stderr


def test_compare_works_without_numba(tmp_path):
    good = tmp_path / "r.json"
    assert run(TINY + ["--bits", "4", "--json", str(good), "--format", "json"]).exit_code == 0
    code = ("import sys, builtins; real = builtins.__import__\n"
            "def no_numba(name, *a, **k):\n"
            "    if name.split('.')[0] in ('numba', 'llvmlite'): raise ImportError('no numba here')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = no_numba\n"
            "from gemvbw.cli import entry; sys.argv = ['gemvbw', 'compare', sys.argv[1], sys.argv[1]]; entry()")
    done = subprocess.run([sys.executable, "-c", code, str(good)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same settings and machine facts in every file" in done.stdout


@pytest.mark.parametrize("body,fragment", [
    ('name = "x"\nhidden_size = 64\nlayers = 1\n[[projection]]\nname = "q"\nM = 64.9\nK = 64\n',
     "projection 'q': M = 64.9 must be a whole number"),
    ('name = "x"\nhidden_size = 64\nlayers = 1\n[[projection]]\nname = "q"\nM = 64\nK = "64"\n',
     "projection 'q': K = '64' must be a whole number"),
    (b"\xff\xfe not utf-8", "not a readable UTF-8 TOML file"),
])
def test_an_ill_typed_preset_is_named(tmp_path, body, fragment):
    path = tmp_path / "m.toml"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    res = run(["model", "--config", str(path)])
    assert res.exit_code == 2 and fragment in res.stderr and "Traceback" not in res.output, res.output


@pytest.mark.parametrize("args,fragment", [
    (["--seconds", "nan"], "--seconds/--interval: give a finite number"),
    (["--kernel", "all"], "--kernel: soak runs one variant"),
])
def test_soak_refuses_what_it_cannot_run(args, fragment):
    res = run(["soak", "--M", "8", "--K", "64", *args])
    assert res.exit_code == 2 and fragment in res.stderr, res.output


def test_noisy_is_judged_by_the_bulk_of_the_calls_not_a_few_outliers():
    from gemvbw.harness import CallOverhead, Group, Measurement
    from gemvbw.results import result_notes
    from gemvbw.roofline import Bandwidth, Roofline

    calm = [100_000] * 95 + [1_000_000] * 5  # five outliers: CV far above 10 %, the bulk steady
    m = Measurement((Group(tuple(calm)),))
    assert m.cv > 0.10 and m.robust_spread == 0.0
    rf = Roofline(Bandwidth("memcpy", 1, 1, 1.0, (1.0,), 10.0), Bandwidth("read", 1, 1, 1.0, (1.0,), 10.0))
    codes = {n.code for n in result_notes(m, 1.0, CallOverhead(1.0, 1.0, 40.0), rf, 1 << 40, None, 64)}
    assert "noisy" not in codes
    spread = [int(100_000 * (1 + 0.2 * ((i % 5) - 2))) for i in range(100)]  # the bulk itself varies by 20-40 %
    assert "noisy" in {n.code for n in result_notes(Measurement((Group(tuple(spread)),)), 1.0,
                                                     CallOverhead(1.0, 1.0, 40.0), rf, 1 << 40, None, 64)}


def test_contention_is_detected_from_preemptions_inside_the_calls_and_steal():
    from gemvbw import contention
    from gemvbw.harness import Group, Measurement

    quiet_snap, busy_snap = contention.Snapshot(10, 5.0, 100.0), contention.Snapshot(90, 5.0, 110.0)
    # 80 switches in the whole timing, 1 inside a call of the slower group: the flushes took the rest
    flushes = contention.between(quiet_snap, busy_snap,
                                 Measurement((Group((100,) * 50, (0,) * 50), Group((100,) * 49 + (3000,), (0,) * 49 + (1,)))))
    assert flushes == {"calls": 100, "preempted_calls": 1, "switches_in_calls": 1, "involuntary_switches": 80,
                       "best_group_slowdown": 0.0, "steal_share": 0.0, "contended": False}
    # the best group itself: one preempted call of 100 us calls made its mean 58 % slower
    best = Group((100,) * 49 + (3000,), (0,) * 49 + (3,))
    busy = contention.between(quiet_snap, busy_snap, Measurement((best, Group((200,) * 50, (0,) * 50))))
    assert busy["contended"] and busy["best_group_slowdown"] == pytest.approx(0.58)
    assert contention.message(busy).startswith(
        "1 of the 100 timed calls was preempted (3 involuntary context switches inside them, 80 in the whole "
        "timing with its flushes), which made the best group's mean 58.0% slower than its other calls; "
        "the hypervisor took 0% of the CPU time (steal)")
    # a long call preempted once in a hundred barely moves the mean: no note
    mild = Group((2_000_000,) * 99 + (2_500_000,), (0,) * 99 + (1,))
    assert not contention.between(quiet_snap, busy_snap, Measurement((mild,)))["contended"]
    every = contention.between(quiet_snap, busy_snap, Measurement((Group((100, 100), (1, 2)),)))
    assert every["contended"] and every["best_group_slowdown"] is None
    assert "every call of the best group among them" in contention.message(every)
    stolen = contention.between(contention.Snapshot(0, 5.0, 100.0), contention.Snapshot(0, 6.0, 110.0),
                                Measurement((Group((100,) * 10, (0,) * 10),)))
    assert stolen["contended"] and stolen["steal_share"] == pytest.approx(0.1)


def test_time_groups_counts_the_switches_inside_each_call_only():
    from gemvbw.harness import CacheFlusher, Measurement, time_groups

    count = {"n": 0, "call": 0}

    class BusyFlush(CacheFlusher):  # every flush is preempted 5 times
        def flush(self):
            count["n"] += 5

    def call():  # every third call is preempted twice
        count["call"] += 1
        count["n"] += 2 if count["call"] % 3 == 0 else 0

    m = time_groups(call, 4, 2, BusyFlush(0), switches=lambda: count["n"])
    # the warm-up is call 1: the timed calls are 2..9, and 3, 6 and 9 were preempted
    assert [g.switches for g in m.groups] == [(0, 2, 0, 0), (2, 0, 0, 2)]
    assert m.switches_per_call == [0, 2, 0, 0, 2, 0, 0, 2]
    assert time_groups(call, 2, 1, BusyFlush(0)).switches_per_call is None  # not counted unless asked
    assert Measurement(m.groups[:1] + (m.groups[1].__class__((1, 2)),)).switches_per_call is None


def test_model_and_soak_honour_the_variables_of_their_options(tmp_path):
    from tests.test_models import TINY_MODEL

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_MODEL)
    doc = json.loads(run(["model", "--config", str(path), "--bits", "4", "--reps", "1", "--flush-mib", "0",
                          "--threads", "1", "--format", "json"], env={"MNN_GEMVBW_ITERS": "2"}).stdout)
    assert doc["settings"]["iters"] == 2
    res = run(["model", "--config", str(path)], env={"MNN_GEMVBW_ITERS": "two"})
    assert res.exit_code == 2 and res.stderr.startswith("Error: MNN_GEMVBW_ITERS: 'two' is not a whole number")
    res = run(["soak", "--M", "8", "--K", "64"], env={"MNN_GEMVBW_BITS": "5"})
    assert res.exit_code == 2 and res.stderr.startswith("Error: MNN_GEMVBW_BITS: '5' is not a supported width")
    out = tmp_path / "soak.json"
    res = run(["soak", "--M", "8", "--K", "64", "--seconds", "1", "--interval", "0.5", "--flush-mib", "0",
               "--threads", "1", "--format", "text", "--json", str(out)], env={"MNN_GEMVBW_BITS": "2"})
    assert res.exit_code == 0 and json.loads(out.read_text())["settings"]["bits"] == [2]


def test_options_the_help_mentions_exist():
    import re

    for command in ("sweep", "model", "soak", "roofline", "compare", "plot", "info"):
        text = run([command, "--help"]).stdout
        own = set(re.findall(r"(?m)^\s+(--[a-z][\w-]*)", text))
        for mentioned in set(re.findall(r"gemvbw " + command + r" [^\n]*?(--[a-z][\w-]*)", text)):
            assert mentioned in own, f"gemvbw {command} --help mentions {mentioned}, which it does not have"


def test_soak_of_a_kernel_that_fails_verification_times_nothing(broken_w4_kernel):
    res = run(["soak", "--M", "64", "--K", "256", "--seconds", "1", "--threads", "1", "--act", "f32",
               "--kernel", broken_w4_kernel, "--format", "text"])
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: w4 broken failed verification (max rel err ") and "nothing was timed" in res.stderr
    assert "|" not in res.stdout.split("\n", 2)[-1]  # no window row after the header


def test_a_bad_flag_beside_rerun_is_the_flag_s_fault_not_the_file_s(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "gemvbw.sweep/1", "settings": {"shapes": [[64, 256]], "M": 64, "act": "f32"}}))
    res = run(["sweep", "--rerun", str(path), "--M", "abc"])
    assert res.exit_code == 2 and res.stderr == "Error: --M: 'abc' is not a whole number; use e.g. --M 4096\n"
    res = run(["sweep", "--rerun", str(path), "--kernel", "nope"])
    assert res.exit_code == 2 and res.stderr.startswith("Error: --kernel: no variant 'nope'")

"""Topology, features and advice from captured /proc and /sys trees; pinning; android; throttling."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemvbw import info, system
from gemvbw.cli import main
from gemvbw.sampling import Sample, frequency_findings

FIX = Path(__file__).parent / "fixtures"


def facts(name, affinity):
    return info.gather(FIX / name, affinity=affinity, with_numba=False)


def test_x86_server():
    f = facts("x86-server", [0, 1, 2, 3])
    assert f["cpu"].startswith("Intel(R) Xeon(R) Platinum 8375C")
    assert f["isa"] == ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]
    assert [t["name"] for t in f["tiers"]["tiers"]] == ["avx512vnni", "avx512vnni-zmm", "avxvnni", "avx512bw", "avx2"]
    assert not any(t["usable"] for t in f["tiers"]["tiers"])  # a fixture: no compiler to ask
    assert len(f["clusters"]) == 1  # four policies of equal speed are one cluster
    c = f["clusters"][0]
    assert c["cpus"] == [0, 1, 2, 3] and c["max_mhz"] == 3500 and c["governor"] == "performance"
    assert f["caches"] == {"L1d": 48 << 10, "L1i": 32 << 10, "L2": 1280 << 10, "L3": 55296 << 10}
    assert f["temperatures"] == [{"zone": "thermal_zone0", "type": "x86_pkg_temp", "celsius": 47.0}]
    assert f["advice"]["command"] == "taskset f gemvbw sweep --threads 4"
    assert not f["affinity_mixed"]


def test_the_cpu_vendor_is_read_on_x86_only(tmp_path):
    assert system.cpu_vendor(FIX / "x86-server", machine="x86_64") == "GenuineIntel"
    assert system.cpu_vendor(FIX / "x86-server", machine="AMD64") == "GenuineIntel"  # Windows names it so
    # an aarch64 userland under QEMU reads the host's /proc/cpuinfo: its vendor_id is not the emulated CPU's
    assert system.cpu_vendor(FIX / "x86-server", machine="aarch64") is None
    assert system.cpu_vendor(FIX / "phone-3cluster", machine="x86_64") is None  # no vendor_id line
    assert system.cpu_vendor(tmp_path, machine="x86_64") is None  # no /proc/cpuinfo at all


def test_the_cpu_family_is_read_on_x86_only(tmp_path):
    assert system.cpu_family(FIX / "x86-server", machine="x86_64") == 6
    assert system.cpu_family(FIX / "x86-server", machine="aarch64") is None  # the host's, under QEMU
    assert system.cpu_family(FIX / "phone-3cluster", machine="x86_64") is None  # no cpu family line
    assert system.cpu_family(tmp_path, machine="x86_64") is None
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\n")
    assert system.cpu_family(tmp_path, machine="x86_64") == 25
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu family\t: unknown\n\n")
    assert system.cpu_family(tmp_path, machine="x86_64") is None


def test_phone_with_three_clusters():
    f = facts("phone-3cluster", list(range(8)))
    assert f["cpu"] == "Qualcomm Technologies, Inc SM8650"
    assert f["machine"] == "aarch64"
    assert f["isa"] == ["asimd", "asimddp", "i8mm", "sve2", "fphp", "asimdhp"]
    assert [c["cpus"] for c in f["clusters"]] == [[6, 7], [4, 5], [0, 1, 2, 3]]  # fastest first
    assert [c["max_mhz"] for c in f["clusters"]] == [3302.4, 3014.4, 2265.6]
    assert [c["capacity"] for c in f["clusters"]] == [1024, 871, 411]
    assert f["clusters"][0]["mask"] == "c0"
    # MNN's own advice for such a phone: taskset c0 ... with 2 threads
    assert f["advice"]["command"] == "taskset c0 gemvbw sweep --threads 2"
    assert f["advice"]["mask"] == "c0" and f["advice"]["threads"] == 2
    assert f["affinity_mixed"] is True  # all eight CPUs span three kinds of core
    assert f["temperatures"] == [{"zone": "thermal_zone3", "type": "cpu-1-0-usr", "celsius": 52.3}]
    text = "\n".join(info.render(f))
    assert "! these CPUs span clusters of different speed" in text
    assert "taskset c0 gemvbw sweep --threads 2" in text and "--cpus 6,7 --threads 2" in text


def test_device_without_cpufreq_reports_unknown_with_reason():
    f = facts("no-cpufreq", [0, 1, 2, 3])
    assert f["cpu"] == "ARM implementer 0x41 part 0xd03"
    assert f["isa"] == ["asimd"]
    assert len(f["clusters"]) == 1 and f["clusters"][0]["max_mhz"] is None
    assert f["clusters"][0]["source"].startswith("unknown: no readable")
    assert f["advice"]["command"] is None and "cannot be told apart" in f["advice"]["why"]
    assert f["temperatures"].startswith("unknown (")
    assert f["caches"].startswith("unknown (no ")
    assert "advice:     cores cannot be told apart" in "\n".join(info.render(f))


@pytest.mark.parametrize("cpus,mixed", [([6, 7], False), ([4, 5, 6, 7], True), ([0, 1], False), ([3, 4], True)])
def test_mixed_cluster_detection(cpus, mixed):
    groups = system.clusters(FIX / "phone-3cluster")
    assert system.spans_mixed_clusters(cpus, groups) is mixed


@pytest.mark.parametrize("text,cpus", [("6,7", [6, 7]), ("4-7", [4, 5, 6, 7]), ("0-2,5", [0, 1, 2, 5]),
                                       ("3 1", [1, 3]), ("2,2", [2])])
def test_parse_cpu_list(text, cpus):
    assert system.parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["a", "3-1", "1-x", "-2"])
def test_parse_cpu_list_errors(text):
    with pytest.raises(ValueError):
        system.parse_cpu_list(text)


@pytest.mark.parametrize("name,expected", [("linux", True), ("android", True), ("darwin", False), ("win32", False)])
def test_platform_check_accepts_android(name, expected):
    assert system.is_linux_like(name) is expected


def test_psutil_refusals_are_reported_not_raised(monkeypatch):
    import psutil

    def forbidden(*a, **k):
        raise PermissionError(13, "Permission denied: '/proc/stat'")

    monkeypatch.setattr(psutil, "virtual_memory", forbidden)
    monkeypatch.setattr(psutil, "cpu_freq", forbidden)
    assert isinstance(system.memory(), system.Unknown)
    assert "Permission denied" in system.cpu_freq_mhz()["unknown"]
    assert system.available_memory_bytes() is None
    assert "memory" in system.describe()


def test_frequency_findings():
    samples = [Sample(0.0, (3300.0,), 40.0), Sample(1.0, (3000.0,), 45.0), Sample(2.0, (2700.0,), 50.0)]
    codes = [code for code, _ in frequency_findings(samples, [3302.4])]
    assert codes == ["below-max-frequency", "frequency-fell"]
    steady = [Sample(0.0, (3300.0,), None), Sample(1.0, (3290.0,), None)]
    assert frequency_findings(steady, [3302.4]) == []
    assert frequency_findings(steady, [None]) == []  # max unknown: nothing claimed


def test_info_cli_on_fixture_tree():
    res = CliRunner().invoke(main, ["info", "--root", str(FIX / "phone-3cluster"), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["advice"]["command"] == "taskset c0 gemvbw sweep --threads 2"
    res = CliRunner().invoke(main, ["info"])
    assert res.exit_code == 0 and "advice:" in res.stdout and "numba:" in res.stdout


TINY = ["sweep", "--M", "16", "--K", "128", "--bits", "4", "--iters", "2", "--reps", "1", "--flush-mib", "0"]


def test_sweep_pinned_with_cpus_says_so():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "gemvbw", *TINY, "--cpus", "0", "--threads", "1", "--format", "json"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["system"]["affinity"] == [0] and doc["settings"]["cpus"] == [0]
    assert doc["results"][0]["threads"] == 1
    res = subprocess.run([sys.executable, "-m", "gemvbw", *TINY, "--cpus", "0", "--threads", "1", "--format", "mnn"],
                         capture_output=True, text=True)
    assert "cpus: CPU 0 (pinned with --cpus)" in res.stdout


@pytest.mark.parametrize("cpus,fragment", [("a", "--cpus: 'a' is not a CPU number"), ("9999", "does not exist here"),
                                           ("1-0", "runs backwards"), (",", "no CPU listed")])
def test_bad_cpus(cpus, fragment):
    res = CliRunner().invoke(main, TINY + ["--cpus", cpus])
    assert res.exit_code == 2 and fragment in res.stderr


def test_more_threads_than_pinned_cpus():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "gemvbw", *TINY, "--cpus", "0", "--threads", "2"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "may run on 1 CPU(s) (CPU 0)" in res.stderr


def test_soak_time_series_and_summary(tmp_path):
    out, csv_path = tmp_path / "soak.json", tmp_path / "soak.csv"
    res = CliRunner().invoke(main, ["soak", "--M", "64", "--K", "256", "--seconds", "1", "--interval", "0.2",
                                    "--flush-mib", "0", "--threads", "1", "--format", "text",
                                    "--json", str(out), "--csv", str(csv_path), "--md", str(tmp_path / "soak.md")])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gemvbw.soak/1" and len(doc["windows"]) >= 3
    effs = [w["eff_gbps"] for w in doc["windows"]]
    assert doc["summary"]["peak_gbps"] == max(effs)
    tail = effs[len(effs) - max(1, len(effs) // 3):]
    assert doc["summary"]["sustained_gbps"] == pytest.approx(sorted(tail)[len(tail) // 2] if len(tail) % 2
                                                             else sum(sorted(tail)[len(tail) // 2 - 1:len(tail) // 2 + 1]) / 2)
    assert csv_path.read_text().startswith("t_s,calls,mean_us,eff_gbps,mhz,celsius\n")
    assert "sustained" in res.stdout and "peak" in res.stdout
    assert "sustained/peak" in (tmp_path / "soak.md").read_text()


@pytest.mark.parametrize("act", ["i8", "f32"])
def test_soak_takes_act(tmp_path, act):
    from gemvbw import kernels

    if act == "i8" and not kernels.variants(4, "i8"):
        pytest.skip("no int8 tier is usable on this CPU and compiler target (see gemvbw info)")
    out = tmp_path / "soak.json"
    res = CliRunner().invoke(main, ["soak", "--M", "64", "--K", "256", "--seconds", "1", "--interval", "0.5",
                                    "--flush-mib", "0", "--threads", "1", "--act", act, "--format", "text",
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["act"] == act and doc["act"] == act


def test_soak_takes_one_width():
    res = CliRunner().invoke(main, ["soak", "--bits", "4,2", "--seconds", "1"])
    assert res.exit_code == 2 and "soak runs one width" in res.stderr


def _pin_refusal(monkeypatch, capsys, raw, online=(0, 1, 2, 3), pin=None):
    from gemvbw import cli, system

    monkeypatch.setattr(system, "online_cpus", lambda: list(online))
    pinned = []
    monkeypatch.setattr(system, "pin", pin or pinned.append)
    with pytest.raises(SystemExit) as exit_:
        cli.pin_cpus(raw)
    assert exit_.value.code == 2 and pinned == []
    return capsys.readouterr().err


def test_pin_cpus_refusals_whole(monkeypatch, capsys):
    assert _pin_refusal(monkeypatch, capsys, ",") == \
        "Error: --cpus: no CPU listed; give CPU numbers and ranges, e.g. --cpus 6,7 or --cpus 4-7\n"
    assert _pin_refusal(monkeypatch, capsys, "1,5,7-8", online=(0, 1, 2, 3, 7)) == \
        "Error: --cpus: CPU 5,8 does not exist here (online: CPUs 0-3,7)\n"

    def refuse(cpus, err=OSError(22, "Invalid argument")):
        raise err

    assert _pin_refusal(monkeypatch, capsys, "2-3", pin=refuse) == (
        "Error: --cpus: cannot pin to CPUs 2-3 (Invalid argument); choose CPUs this process may use (see gemvbw info)\n")
    assert _pin_refusal(monkeypatch, capsys, "2", pin=lambda c: refuse(c, OSError("no such call"))) == (
        "Error: --cpus: cannot pin to CPU 2 (no such call); choose CPUs this process may use (see gemvbw info)\n")


def test_pin_cpus_pins_what_was_listed(monkeypatch):
    from gemvbw import cli, system

    pinned = []
    monkeypatch.setattr(system, "online_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(system, "pin", pinned.append)
    assert cli.pin_cpus("3,1-2") == [1, 2, 3] and pinned == [[1, 2, 3]]
    assert cli.pin_cpus(None) is None and pinned == [[1, 2, 3]]

"""The command line: parse -> Settings -> run -> render. Thin on purpose.

Exit codes: 0 ok; 1 a failure while running (e.g. a kernel failed
verification); 2 bad input; 130 interrupted by Ctrl-C, 143 by SIGTERM (what
was measured is still printed and written, marked partial).
"""

from __future__ import annotations

import signal
import sys

import click

from gemvbw import __version__

NUMBA_HELP = (
    "gemvbw needs numba (and llvmlite). Install it with: pip install numba\n"
    "On Android/Termux: pkg install python python-numpy, then\n"
    "  pip install numba --extra-index-url https://termux-user-repository.github.io/pypi/\n"
    "or run gemvbw inside proot-distro (Debian/Ubuntu), where the regular aarch64 wheels install."
)


class Terminated(Exception):
    """SIGTERM, turned into an exception so the run can close its record like Ctrl-C does."""


def _on_sigterm(signum, frame):
    raise Terminated()


def usage_error(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def require_numba() -> None:
    """numba importable, and its cache of gemvbw's kernels readable (a corrupt file is dropped, then recompiled)."""
    try:
        import numba  # noqa: F401
    except Exception as exc:  # ImportError, or a broken llvmlite raising OSError
        click.echo(f"Error: numba could not be imported ({type(exc).__name__}: {exc}).\n{NUMBA_HELP}", err=True)
        sys.exit(1)
    from gemvbw import jitcache

    for path in jitcache.repair():
        click.echo(f"note: removed unreadable numba cache file {path}; the kernel is compiled afresh", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gemvbw")
def main() -> None:
    """How close do w8/w4/w3/w2 GEMV kernels get to this machine's memory bandwidth?

    Follows MNN's GemvBW method: packed block-wise weights, cold-cache timing,
    best of N groups, against a memcpy and a read-only roofline.
    """


@main.command()
@click.option("--M", "M", metavar="INT", help="Output rows (default 4096; env MNN_GEMVBW_M).")
@click.option("--K", "K", metavar="INT", help="Input columns (default 14336; env MNN_GEMVBW_K).")
@click.option("--bits", metavar="LIST", help="Bit widths, comma list of 8,4,3,2 (default all; env MNN_GEMVBW_BITS).")
@click.option("--block", metavar="INT", help="Quantization block along K, a multiple of 8 (default 64; env MNN_GEMVBW_BLOCK).")
@click.option("--threads", metavar="INT",
              help="Threads (default: CPUs in the affinity mask, what taskset sets; env MNN_GEMVBW_THREADS).")
@click.option("--iters", metavar="INT", help="Timed calls per group (default 200; env MNN_GEMVBW_ITERS).")
@click.option("--reps", metavar="INT", help="Groups; the best group mean is reported (default 3; env MNN_GEMVBW_REPS).")
@click.option("--flush-mib", "flush_mib", metavar="INT", help="MiB read before each timed call; 0 = warm cache (default 64).")
@click.option("--meta-bytes", "meta_bytes", metavar="2|4", help="Bytes per scale/offset: 2 = fp16 (default), 4 = fp32.")
@click.option("--act", type=click.Choice(["f32"]), default="f32", show_default=True, help="Activation type.")
@click.option("--kernel", default="auto", show_default=True, metavar="auto|all|NAME",
              help="Kernel variant: auto (preferred), all (every variant), or a variant name.")
@click.option("--seed", metavar="INT", help="Seed of the random weights and activations (default 0).")
@click.option("--compare-warm", "compare_warm", is_flag=True, default=None,
              help="Also time every kernel without the flush and show warm beside cold.")
@click.option("--max-seconds", "max_seconds", metavar="S",
              help="Add groups until the last --reps group means agree within 5%, for at most S seconds per kernel.")
@click.option("--llc-mib", "llc_mib", metavar="INT", help="Last-level cache size, if /sys does not tell it or is wrong.")
@click.option("--rerun", "rerun_path", metavar="RESULT.json",
              help="Repeat the run recorded in a JSON result (its settings; flags given here still win) and compare.")
@click.option("--format", "fmt", type=click.Choice(["auto", "mnn", "rich", "json", "csv"]), default="auto",
              show_default=True, help="Screen output; auto = rich on a terminal, MNN markdown when piped.")
@click.option("--json", "json_path", metavar="PATH", help="Also write the result (schema gemvbw.sweep/1) to PATH.")
@click.option("--csv", "csv_path", metavar="PATH", help="Also write one CSV row per kernel to PATH.")
def sweep(fmt: str, **flags) -> None:
    """Measure each bit width's GEMV on one (M, K) shape.

    \b
    Examples:
      gemvbw sweep
      gemvbw sweep --M 1024 --K 1024 --bits 4,2 --threads 2
      MNN_GEMVBW_M=151936 MNN_GEMVBW_K=1024 MNN_GEMVBW_BITS=4 gemvbw sweep
      gemvbw sweep --format json > run.json
    """
    require_numba()
    from gemvbw import report
    from gemvbw.runner import Sweep
    from gemvbw.settings import SettingsError, resolve

    rerun_path = flags.pop("rerun_path")
    baseline = None
    if rerun_path:
        baseline = load_baseline(rerun_path)
        flags = {**settings_as_flags(baseline[1]), **{k: v for k, v in flags.items() if v is not None}}
    try:
        settings = resolve(flags)
    except SettingsError as exc:
        usage_error(str(exc))
    exporters = []
    if settings.json_path:
        exporters.append(report.json_file(settings.json_path))
    if settings.csv_path:
        exporters.append(report.csv_file(settings.csv_path))
    run = Sweep(settings, report.screen_reporter(fmt), exporters, baseline)

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        record = run.run()
    except KeyboardInterrupt:
        run.interrupted("SIGINT (Ctrl-C)")
        sys.exit(130)
    except Terminated:
        run.interrupted("SIGTERM")
        sys.exit(143)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if record.failures:
        click.echo(f"Error: {len(record.failures)} kernel(s) failed verification or did not run; "
                   "their rows carry no figures.", err=True)
        sys.exit(1)


RERUN_KEYS = ("M", "K", "bits", "block", "threads", "iters", "reps", "flush_mib", "meta_bytes", "act", "kernel",
              "seed", "max_seconds", "llc_mib", "compare_warm")


def load_baseline(path: str) -> tuple[str, dict]:
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        usage_error(f"--rerun: cannot read {path!r} ({exc.strerror})")
    except ValueError as exc:
        usage_error(f"--rerun: {path!r} is not JSON ({exc}); give a file written by gemvbw sweep --json")
    if not isinstance(doc, dict) or doc.get("schema") != "gemvbw.sweep/1" or "settings" not in doc:
        usage_error(f"--rerun: {path!r} is not a gemvbw.sweep/1 result; give a file written by gemvbw sweep --json")
    return f"{path} ({doc.get('created', '?')})", doc


def settings_as_flags(doc: dict) -> dict:
    """A recorded run's settings, as the raw flag values resolve() takes."""
    s = doc["settings"]
    flags = {}
    for key in RERUN_KEYS:
        value = s.get(key)
        if value is None or value is False:
            continue
        flags[key] = ",".join(map(str, value)) if isinstance(value, list) else value
    return flags


@main.command()
@click.option("--threads", metavar="INT", help="Largest thread count to measure (default: CPUs in the affinity mask).")
def roofline(threads: str | None) -> None:
    """memcpy (MNN's roofline, read+write counted) and read-only bandwidth for 1..N threads."""
    require_numba()
    import numba

    from gemvbw import system
    from gemvbw.roofline import measure_roofline
    from gemvbw.settings import SettingsError, format_cpus, resolve

    try:
        top = resolve({"threads": threads, "bits": "8"}).threads
    except SettingsError as exc:
        usage_error(str(exc))
    llc = system.last_level_cache_bytes()
    llc = None if isinstance(llc, system.Unknown) else llc
    click.echo(f"affinity: {format_cpus(system.affinity())}")
    click.echo("threads | memcpy GB/s (2x bytes) | read GB/s")
    click.echo("-------:|----------------------:|---------:")
    for t in range(1, top + 1):
        numba.set_num_threads(t)
        rf = measure_roofline(t, llc)
        click.echo(f"{t:7d} | {rf.memcpy.gbps:21.1f} | {rf.read.gbps:9.1f}")

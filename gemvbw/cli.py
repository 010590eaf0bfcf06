"""The command line: parse -> Settings -> run -> render. Thin on purpose.

Exit codes: 0 ok; 1 a failure while running (e.g. a kernel failed
verification); 2 bad input; 130 interrupted by Ctrl-C, 143 by SIGTERM (what
was measured is still printed and written, marked partial).
"""

from __future__ import annotations

import math
import os
import signal
import sys
from dataclasses import replace

# Before numpy loads its BLAS: the verification reference is a float64 numpy product, after which
# OpenBLAS's threads keep spinning for a while and, on a machine with few cores, take them from the
# kernel timed next. Measured on 2 cores (1024x1024, --act i8, 10 calls per group): the first group
# after each verification averaged 2.3-3.7 ms per call, the second 0.11-0.15 ms; with one BLAS thread
# both groups took 0.11-0.14 ms. A user's own setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

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


def report_export_errors(run) -> bool:
    """Files that could not be written (a full disk): said once each; the screen kept every result."""
    for message in run.export_errors:
        click.echo(f"Error: {message}; the results are on the screen above", err=True)
    return bool(run.export_errors)


def load_preset(name: str, flag: str):
    from gemvbw.models import PresetError, load

    try:
        return load(name)
    except PresetError as exc:
        usage_error(f"{flag}: {exc}")


def check_path(path: str, flag: str) -> None:
    from gemvbw.settings import SettingsError, check_writable

    try:
        check_writable(path, flag)
    except SettingsError as exc:
        usage_error(str(exc))


def pin_cpus(raw: str | None) -> list[int] | None:
    """--cpus: parse, check against the CPUs that exist, pin the process. None when not given."""
    if raw is None:
        return None
    from gemvbw import system  # numpy-free: numpy's BLAS threads must start after the pinning
    from gemvbw.system import format_cpus

    try:
        cpus = system.parse_cpu_list(raw)
    except ValueError as exc:
        usage_error(f"--cpus: {exc}; give CPU numbers and ranges, e.g. --cpus 6,7 or --cpus 4-7")
    if not cpus:
        usage_error("--cpus: no CPU listed; give CPU numbers and ranges, e.g. --cpus 6,7 or --cpus 4-7")
    online = system.online_cpus()
    missing = [c for c in cpus if c not in online]
    if missing:
        usage_error(f"--cpus: CPU {','.join(map(str, missing))} does not exist here (online: {format_cpus(online)})")
    try:
        system.pin(cpus)
    except OSError as exc:
        usage_error(f"--cpus: cannot pin to {format_cpus(cpus)} ({exc.strerror or exc}); "
                    "choose CPUs this process may use (see gemvbw info)")
    return cpus


def prepare_numba_env() -> None:
    """numba's variables checked, and a writable cache found, before numba is imported (it reads them then)."""
    from gemvbw import numba_env

    bad = numba_env.check(os.environ)
    if bad:
        usage_error(bad)
    if "numba" in sys.modules:
        return  # its cache was settled when it was imported (a second command in one process, as in tests)
    try:
        note = numba_env.prepare_cache(os.environ)
    except ValueError as exc:
        usage_error(str(exc))
    if note:
        click.echo(f"note: {note}", err=True)


def require_numba() -> None:
    """numba importable, its variables sound, and its cache of gemvbw's kernels readable (a corrupt file is
    dropped, then recompiled)."""
    prepare_numba_env()
    try:
        import numba  # noqa: F401
    except Exception as exc:  # ImportError, or a broken llvmlite raising OSError
        click.echo(f"Error: numba could not be imported ({type(exc).__name__}: {exc}).\n{NUMBA_HELP}", err=True)
        sys.exit(1)
    from gemvbw import tiers

    unsafe = tiers.unsafe_target_message(tiers.report())
    if unsafe:  # before anything is compiled: such code would die of SIGILL, which nothing can catch
        usage_error(unsafe)
    from gemvbw import jitcache

    for path in jitcache.repair():
        click.echo(f"note: removed unreadable numba cache file {path}; the kernel is compiled afresh", err=True)
    try:  # the threading layer is loaded by the first parallel call: one that does nothing, so that it fails here
        import numpy as np

        from gemvbw.kernels._common import empty_parallel_call

        empty_parallel_call(np.zeros(1, np.int64))
    except ValueError as exc:
        if "threading layer" not in str(exc):
            raise
        usage_error(f"NUMBA_THREADING_LAYER={os.environ.get('NUMBA_THREADING_LAYER')}: "
                    f"{str(exc).splitlines()[0]} Unset it, or use NUMBA_THREADING_LAYER=omp or workqueue")


def numba_threads() -> int:
    from gemvbw.numba_env import thread_limit

    return thread_limit()


def _values_given(args: list[str], names: list[str]) -> list[str]:
    """What followed each of an option's names in args (as --name VALUE or --name=VALUE), for the message."""
    values = []
    for i, token in enumerate(args):
        if token == "--":
            break
        for name in names:
            if token == name and i + 1 < len(args):
                values.append(args[i + 1])
            elif token.startswith(name + "="):
                values.append(token[len(name) + 1:])
    return values


def _given_twice(param: click.Option, args: list[str]) -> str:
    name = max(param.opts, key=len)
    given = _values_given(args, param.opts)
    if not given:
        return f"{name} was given more than once; only one would count. Give it once"
    if param.metavar == "LIST":
        listed = dict.fromkeys(v.strip() for value in given for v in value.split(",") if v.strip())
        advice = f"List the values once, comma separated, e.g. {name} {','.join(listed)}"
    else:
        advice = f"Give it once, e.g. {name} {given[-1]}"
    shown = ", then ".join(repr(v) for v in given)
    return f"{name} was given {len(given)} times ({shown}); only one would count. {advice}"


class _OnceCommand(click.Command):
    """A command that refuses an option given twice: click keeps the last value without a word, so
    `--bits 8 --bits 4` would sweep w4 alone. Options meant to repeat (--shape) and flags are left alone."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.resilient_parsing or any(a in ctx.help_option_names for a in args):
            return super().parse_args(ctx, args)
        parser = self.make_parser(ctx)
        _, _, order = parser.parse_args(args=list(args))
        seen = set()
        for param in order:
            if not isinstance(param, click.Option) or param.multiple or param.count or param.is_flag:
                continue
            if param.name in seen:
                usage_error(_given_twice(param, list(args)))
            seen.add(param.name)
        return super().parse_args(ctx, args)


class _Group(click.Group):
    command_class = _OnceCommand


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gemvbw")
def main() -> None:
    """How close do w8/w4/w3/w2 GEMV kernels get to this machine's memory bandwidth?

    Follows MNN's GemvBW method: packed block-wise weights, cold-cache timing,
    best of N groups, against a memcpy and a read-only roofline.
    """


@main.command()
@click.option("--M", "M", metavar="INT", help="Output rows (default 4096; env MNN_GEMVBW_M).")
@click.option("--K", "K", metavar="INT", help="Input columns (default 14336; env MNN_GEMVBW_K).")
@click.option("--bits", metavar="LIST",
              help="Bit widths, comma list of 8,4,3,2 (default) and the unquantized baselines 16 (fp16) and 32 (fp32); "
                   "env MNN_GEMVBW_BITS.")
@click.option("--block", metavar="INT", help="Quantization block along K, a multiple of 8 (default 64; env MNN_GEMVBW_BLOCK).")
@click.option("--threads", metavar="INT",
              help="Threads (default: CPUs in the affinity mask, what taskset sets; env MNN_GEMVBW_THREADS).")
@click.option("--cpus", metavar="LIST",
              help="Pin the run to these CPUs (e.g. 6,7 or 4-7), like taskset; see gemvbw info for the fastest cluster.")
@click.option("--iters", metavar="INT", help="Timed calls per group (default 200; env MNN_GEMVBW_ITERS).")
@click.option("--reps", metavar="INT", help="Groups; the best group mean is reported (default 3; env MNN_GEMVBW_REPS).")
@click.option("--flush-mib", "flush_mib", metavar="INT", help="MiB read before each timed call; 0 = warm cache (default: 64, or 4x the last-level cache where that is more).")
@click.option("--meta-bytes", "meta_bytes", metavar="2|4", help="Bytes per scale/offset: 2 = fp16 (default), 4 = fp32.")
@click.option("--act", type=click.Choice(["auto", "f32", "i8"]), default=None,
              help="Activations (default auto): auto = int8 where an int8 kernel exists for this CPU, width and block (x quantized per block on the fly, as MNN and llama.cpp do), else f32; f32; or i8.")
@click.option("--kernel", default=None, metavar="auto|all|NAME",
              help="Kernel variant (default auto: the fastest verified one, calibrated): all (every variant "
                   "and tier this CPU runs), or a name (ref, rows4, packed, packed-4x2-<tier>, packed-<rows>c4-<tier> "
                   "and its -prfm and -1stream twins; "
                   "see gemvbw info).")
@click.option("--seed", metavar="INT", help="Seed of the random weights and activations (default 0).")
@click.option("--recalibrate", is_flag=True, default=None,
              help="--kernel auto: measure the choice again on this machine and shape, replacing the cached one.")
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
@click.option("--md", "md_path", metavar="PATH", help="Also write the MNN markdown tables to PATH.")
@click.option("--shape", "shapes", multiple=True, metavar="MxK",
              help="Sweep this shape (repeatable, e.g. --shape 4096x14336 --shape 1024x1024); one table with a shape column.")
@click.option("--shapes-from", "shapes_from", metavar="PRESET",
              help="Sweep the distinct shapes of a model preset (a name from configs/ or a .toml path).")
def sweep(fmt: str, **flags) -> None:
    """Measure each bit width's GEMV on one (M, K) shape.

    \b
    Examples:
      gemvbw sweep
      gemvbw sweep --M 1024 --K 1024 --bits 4,2 --threads 2
      MNN_GEMVBW_M=151936 MNN_GEMVBW_K=1024 MNN_GEMVBW_BITS=4 gemvbw sweep
      gemvbw sweep --format json > run.json
    """
    cpus = pin_cpus(flags.pop("cpus"))  # before numba starts its thread pool: its threads inherit the mask
    require_numba()
    from gemvbw import report
    from gemvbw.runner import Sweep
    from gemvbw.settings import SettingsError, resolve

    md_path = flags.pop("md_path")
    flags["md_path"] = md_path  # only checked against --json and --csv by resolve
    shapes_from = flags.pop("shapes_from")
    if shapes_from:
        if flags["shapes"]:
            usage_error("--shapes-from: give --shape or --shapes-from, not both")
        flags["shapes"] = tuple(load_preset(shapes_from, "--shapes-from").shapes)
    flags["shapes"] = tuple(flags["shapes"]) or None
    rerun_path = flags.pop("rerun_path")
    baseline = None
    recorded: dict = {}
    if rerun_path:
        baseline = load_baseline(rerun_path)
        recorded = settings_as_flags(baseline[1], rerun_path)
        given = {k: v for k, v in flags.items() if v is not None}
        # a shape given here replaces the recorded one: --shape all of them, --M or --K its dimension of a
        # recorded single shape (several recorded shapes become the one shape asked for)
        if "shapes" in given or ({"M", "K"} & set(given) and recorded.get("shapes")):
            recorded = {k: v for k, v in recorded.items() if k not in ("M", "K", "shapes")}
        recorded = {k: v for k, v in recorded.items() if k not in given}
        flags = {**flags, **recorded}
    try:
        settings = resolve(flags, thread_limit=numba_threads())
    except SettingsError as exc:
        usage_error(from_file(exc, recorded, rerun_path))
    settings = replace(settings, cpus=cpus)
    exporters = []
    if settings.json_path:
        exporters.append(report.json_file(settings.json_path))
    if settings.csv_path:
        exporters.append(report.csv_file(settings.csv_path))
    if md_path:
        check_path(md_path, "--md")
        exporters.append(report.md_file(md_path))
    run = Sweep(settings, report.screen_reporter(fmt), exporters, baseline)

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        record = run.run()
    except KeyboardInterrupt:
        run.interrupted("SIGINT (Ctrl-C)")
        report_export_errors(run)
        sys.exit(130)
    except Terminated:
        run.interrupted("SIGTERM")
        report_export_errors(run)
        sys.exit(143)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report_export_errors(run):
        sys.exit(1)
    if record.failures:
        click.echo(f"Error: {len(record.failures)} kernel(s) failed verification or did not run; "
                   "their rows carry no figures.", err=True)
        sys.exit(1)


@main.command()
@click.argument("name", metavar="NAME|PATH", required=False)
@click.option("--config", "config_path", metavar="PATH", help="A model preset file (instead of NAME).")
@click.option("--bits", metavar="LIST", help="Bit widths (default 8,4,3,2; 16 and 32 for fp16 and fp32 weights).")
@click.option("--block", metavar="INT", help="Quantization block (default 64).")
@click.option("--threads", metavar="INT", help="Threads (default: CPUs in the affinity mask).")
@click.option("--cpus", metavar="LIST", help="Pin to these CPUs first, like taskset.")
@click.option("--iters", metavar="INT", help="Timed calls per group (default 100; env MNN_GEMVBW_ITERS).")
@click.option("--reps", metavar="INT", help="Groups; the best group mean is used (default 3).")
@click.option("--flush-mib", "flush_mib", metavar="INT", help="MiB read before each call (default: 64, or 4x the last-level cache where that is more).")
@click.option("--meta-bytes", "meta_bytes", metavar="2|4", help="Bytes per scale/offset (default 2).")
@click.option("--act", type=click.Choice(["auto", "f32", "i8"]), default=None,
              help="Activations (default auto): auto = int8 where an int8 kernel exists for this CPU, width and block (x quantized per block on the fly, as MNN and llama.cpp do), else f32; f32; or i8.")
@click.option("--kernel", default=None, metavar="auto|NAME",
              help="Kernel variant (default auto: the fastest verified one); or a name (see gemvbw info).")
@click.option("--seed", metavar="INT", help="Seed of the random weights (default 0).")
@click.option("--recalibrate", is_flag=True, default=None,
              help="--kernel auto: measure the choice again on this machine, replacing the cached one.")
@click.option("--format", "fmt", type=click.Choice(["auto", "mnn", "rich", "json"]), default="auto",
              show_default=True, help="auto = rich on a terminal, markdown when piped.")
@click.option("--json", "json_path", metavar="PATH", help="Also write the result (sweep record plus 'model').")
@click.option("--csv", "csv_path", metavar="PATH", help="Also write one CSV row per measured shape and width.")
@click.option("--md", "md_path", metavar="PATH", help="Also write the markdown tables.")
def model(name: str | None, config_path: str | None, fmt: str, md_path: str | None, **flags) -> None:
    """Measure every decode GEMV of a model preset and turn it into time and tokens per second.

    Each distinct shape is measured once per bit width (layers share shapes) and multiplied
    by how often it runs per token. Presets: the files in configs/ (a NAME that is none of them lists them).
    """
    flags["md_path"] = md_path  # checked against --json and --csv
    if (name is None) == (config_path is None):
        usage_error("model: give a preset NAME (e.g. qwen3-0.6b) or --config PATH, one of them; "
                    "known presets: " + ", ".join(sorted(_preset_names())))
    cpus = pin_cpus(flags.pop("cpus"))
    preset = load_preset(config_path or name, "--config" if config_path else "NAME")
    require_numba()
    from gemvbw import report
    from gemvbw.models import token_summary
    from gemvbw.report import model_view
    from gemvbw.runner import Sweep
    from gemvbw.settings import SettingsError, resolve

    flags["shapes"] = tuple(preset.shapes)
    try:
        settings = replace(resolve(flags, thread_limit=numba_threads(), defaults={"iters": 100}), cpus=cpus)
    except SettingsError as exc:
        usage_error(str(exc))
    if md_path:
        check_path(md_path, "--md")
    screen = report.resolve_format(fmt, sys.stdout)
    summaries: list = []

    def doc_of(record):
        doc = record.to_dict()
        doc["model"] = {"name": preset.name, "source": preset.source, "path": preset.path, "layers": preset.layers,
                        "hidden_size": preset.hidden_size, "caveat": model_view.CAVEAT,
                        "per_bits": [s.to_dict() for s in summaries]}
        return doc

    exporters = []
    if settings.json_path:
        exporters.append(lambda rec: report.write_atomic(settings.json_path, report.dumps(doc_of(rec))))
    if settings.csv_path:
        exporters.append(report.csv_file(settings.csv_path))
    if md_path:
        exporters.append(lambda rec: report.write_atomic(md_path, report.mnn_text(rec) + "\n"
                                                         + model_view.markdown(preset, summaries)))
    run = Sweep(settings, report.screen_reporter("mnn" if screen == "json" else screen,
                                                 sys.stderr if screen == "json" else None), exporters)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    code = 0
    try:
        record = run.run()
    except (KeyboardInterrupt, Terminated) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else 143
        record = run.interrupted("SIGINT (Ctrl-C)" if code == 130 else "SIGTERM")
    finally:
        signal.signal(signal.SIGTERM, previous)
    for bits in settings.bits:
        measured = fastest_per_shape(record, bits)
        if all(shape in measured for shape in preset.shapes):  # a width with a failed or missing shape has no total
            summaries.append(token_summary(preset, bits, measured, record.roofline.read.gbps))
    for export in exporters:
        export(record)
    if screen == "json":
        click.echo(report.dumps(doc_of(record)), nl=False)
    elif screen == "rich":
        from rich.console import Console

        model_view.print_rich(Console(), preset, summaries)
    else:
        click.echo(model_view.markdown(preset, summaries), nl=False)
    if record.failures:
        click.echo(f"Error: {len(record.failures)} kernel(s) failed verification; widths with a failed shape have "
                   "no per-token total.", err=True)
        code = code or 1
    sys.exit(code)


def fastest_per_shape(record, bits: int) -> dict:
    """(M, K) -> (logical bytes, best_avg_us, variant) of the fastest verified result: with --kernel all the
    per-token figures are those of the best variant of each projection, as an engine would pick it."""
    best: dict = {}
    for r in record.results:
        if r.bits == bits and ((r.M, r.K) not in best or r.best_avg_us < best[(r.M, r.K)][1]):
            best[(r.M, r.K)] = (r.logical_bytes, r.best_avg_us, r.variant)
    return best


def _preset_names() -> list[str]:
    from gemvbw.models import available

    return list(available())


@main.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--root", default="/", show_default=True, hidden=True,
              help="Read /proc and /sys under this directory (for captured trees).")
def info(fmt: str, root: str) -> None:
    """CPU, ISA features, clusters and frequencies, affinity, caches, memory, temperatures, versions,
    and the taskset command that pins a run to the fastest cores."""
    from pathlib import Path

    from gemvbw import info as info_mod

    prepare_numba_env()
    try:
        import numba  # noqa: F401
        with_numba = True
    except Exception:
        with_numba = False  # info still describes the device; sweep would say how to install numba
    facts = info_mod.gather(Path(root), with_numba=with_numba)
    if fmt == "json":
        from gemvbw.report import dumps

        click.echo(dumps(facts), nl=False)
    else:
        for line in info_mod.render(facts):
            click.echo(line)
        if not with_numba:
            click.echo("numba:      not importable; " + NUMBA_HELP.splitlines()[0])


@main.command()
@click.option("--bits", metavar="W", help="One bit width: 32, 16, 8, 4, 3 or 2 (default 4; env MNN_GEMVBW_BITS).")
@click.option("--M", "M", metavar="INT", help="Output rows (default 4096; env MNN_GEMVBW_M).")
@click.option("--K", "K", metavar="INT", help="Input columns (default 14336; env MNN_GEMVBW_K).")
@click.option("--block", metavar="INT", help="Quantization block (default 64).")
@click.option("--threads", metavar="INT", help="Threads (default: CPUs in the affinity mask).")
@click.option("--cpus", metavar="LIST", help="Pin to these CPUs first, like taskset.")
@click.option("--act", type=click.Choice(["auto", "f32", "i8"]), default=None,
              help="Activations (default auto): auto = int8 where an int8 kernel exists for this CPU, width and block (x quantized per block on the fly, as MNN and llama.cpp do), else f32; f32; or i8.")
@click.option("--kernel", default=None, metavar="auto|NAME",
              help="Kernel variant (default auto: the fastest verified one); or a name (see gemvbw info).")
@click.option("--flush-mib", "flush_mib", metavar="INT", help="MiB read before each call (default: 64, or 4x the last-level cache where that is more).")
@click.option("--recalibrate", is_flag=True, default=None,
              help="--kernel auto: measure the choice again on this machine, replacing the cached one.")
@click.option("--seconds", default=60.0, show_default=True, type=click.FloatRange(min=1.0),
              help="How long to run.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05),
              help="Seconds per window (one line of the time series).")
@click.option("--format", "fmt", type=click.Choice(["auto", "rich", "text", "json", "csv"]), default="auto",
              show_default=True, help="auto = a live view on a terminal, text lines when piped.")
@click.option("--json", "json_path", metavar="PATH", help="Also write the time series and summary as JSON.")
@click.option("--csv", "csv_path", metavar="PATH", help="Also write the time series as CSV.")
@click.option("--md", "md_path", metavar="PATH", help="Also write the time series and summary as markdown.")
def soak(seconds: float, interval: float, fmt: str, md_path: str | None, **flags) -> None:
    """Run one width and shape continuously: sustained bandwidth, frequency and temperature over time.

    The summary's sustained figure (median of the last third) is what a phone's decode speed
    settles at once it has heated up.
    """
    cpus = pin_cpus(flags.pop("cpus"))
    require_numba()
    from gemvbw import report
    from gemvbw import soak as soak_mod
    from gemvbw.report.soak_view import SoakView
    from gemvbw.settings import SettingsError, resolve

    try:
        settings = replace(resolve(flags, thread_limit=numba_threads(), defaults={"bits": (4,)}), cpus=cpus)
    except SettingsError as exc:
        usage_error(str(exc))
    if len(settings.bits) != 1:
        usage_error(f"--bits: soak runs one width, got {','.join(map(str, settings.bits))}; e.g. --bits 4")
    if settings.kernel == "all":
        usage_error("--kernel: soak runs one variant; give auto (the default) or a name, e.g. --kernel packed")
    if not (math.isfinite(seconds) and math.isfinite(interval)):
        usage_error("--seconds/--interval: give a finite number of seconds, e.g. --seconds 60")
    view = SoakView(report.resolve_format(fmt, sys.stdout))  # auto: rich on a terminal, text lines when piped
    files = []
    if settings.json_path:
        files.append(lambda rec: report.write_atomic(settings.json_path, report.dumps(rec.to_dict())))
    if settings.csv_path:
        files.append(lambda rec: report.write_atomic(settings.csv_path, soak_mod.csv_text(rec)))
    if md_path:
        check_path(md_path, "--md")
        files.append(lambda rec: report.write_atomic(md_path, soak_mod.markdown(rec)))

    def on_window(rec, window):
        view.window(rec, window)
        for write in files:
            write(rec)

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    code = 0
    view.start(seconds, interval)
    try:
        record = soak_mod.soak(settings, seconds, interval, on_window)
    except (KeyboardInterrupt, Terminated) as exc:
        record = getattr(soak_mod.soak, "record", None)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 143
        if record is not None:
            record.interrupted = "SIGINT (Ctrl-C)" if code == 130 else "SIGTERM"
    except RuntimeError as exc:
        view.stop()
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    view.stop()
    if record is not None:
        view.finish(record)
        for write in files:
            write(record)
    sys.exit(code)


def load_result(path: str, flag: str) -> dict:
    import json

    try:
        # (an explicit codec, whatever the locale; "UTF-8" would name the same one)
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        usage_error(f"{flag}: cannot read {path!r} ({exc.strerror})")
    except ValueError as exc:
        usage_error(f"{flag}: {path!r} is not JSON ({exc}); give a file written by gemvbw sweep/model --json")
    if not isinstance(doc, dict) or doc.get("schema") != "gemvbw.sweep/1" or "settings" not in doc:
        usage_error(f"{flag}: {path!r} is not a gemvbw.sweep/1 result; give a file written by gemvbw sweep/model --json")
    return doc


@main.command()
@click.argument("files", nargs=-1, required=True, metavar="A.json B.json ...")
@click.option("--format", "fmt", type=click.Choice(["auto", "mnn", "rich", "json"]), default="auto", show_default=True)
def compare(files: tuple[str, ...], fmt: str) -> None:
    """Results of several runs side by side (same shape, width and variant matched up), with ratios to the first.

    Settings or machines that differ between the runs are marked.
    """
    from gemvbw.compare import compare as compare_docs
    from gemvbw.report import dumps, resolve_format

    if len(files) < 2:
        usage_error("compare: give at least two result files, e.g. gemvbw compare before.json after.json")
    from gemvbw.compare import MalformedResult

    docs = [load_result(f, "compare") for f in files]
    try:
        cmp = compare_docs(docs, list(files))
    except MalformedResult as exc:
        usage_error(f"compare: {exc}; give files written by gemvbw sweep/model --json")
    screen = resolve_format(fmt, sys.stdout)
    if screen == "json":
        click.echo(dumps(cmp.to_dict()), nl=False)
        return
    header = ["shape", "type", "variant"] + [f"GB/s [{i}]" for i in range(len(files))] + \
             [f"[{i}]/[0]" for i in range(1, len(files))]
    rows = []
    for row in cmp.rows:
        M, K, bits, _, act, variant = row.key
        rows.append([f"{M}x{K}", f"w{bits}" + ("" if act == "f32" else f" {act}"), str(variant)]
                    + ["-" if v is None else f"{v:.2f}" for v in row.eff_gbps]
                    + ["-" if v is None else f"{v:.2f}x" for v in row.ratios[1:]])
    for i, f in enumerate(files):
        click.echo(f"[{i}] {f} ({docs[i].get('created', '?')}, {docs[i].get('system', {}).get('cpu', '?')})")
    if screen == "rich":
        from rich import box
        from rich.console import Console
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), pad_edge=False)
        for i, col in enumerate(header):
            table.add_column(col, justify="left" if i < 3 else "right")
        for r in rows:
            table.add_row(*r)
        Console().print(table)
    else:
        click.echo(" | ".join(header))
        click.echo("|".join("---" for _ in header))
        for r in rows:
            click.echo(" | ".join(r))
    for diff in cmp.differences:
        click.echo(f"! differs: {diff}")
    if not cmp.differences:
        click.echo("same settings and machine facts in every file")


@main.command()
@click.argument("result", metavar="RESULT.json")
@click.option("-o", "--output", "out", required=True, metavar="FILE.png", help="Where to write the chart.")
def plot(result: str, out: str) -> None:
    """Draw the roofline (eff GB/s against arithmetic intensity, read and memcpy ceilings) of a result;
    for a model result also the time per token by projection. Needs matplotlib (pip install 'gemvbw[plot]')."""
    from gemvbw.plot import PlotUnavailable, plot as draw

    from gemvbw.compare import MalformedResult, check_results

    doc = load_result(result, "plot")
    try:
        check_results(doc, result)
    except MalformedResult as exc:
        usage_error(f"plot: {exc}; give a file written by gemvbw sweep/model --json")
    suffix = os.path.splitext(out)[1].lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        usage_error(f"-o: {out!r} does not end in .png, .svg or .pdf, the formats gemvbw plot writes; e.g. -o roofline.png")
    check_path(out, "-o")
    try:
        draw(doc, out)
    except PlotUnavailable as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"wrote {out}")


RERUN_KEYS = ("shapes", "bits", "block", "threads", "iters", "reps", "flush_mib", "meta_bytes", "act", "kernel",
              "seed", "max_seconds", "llc_mib", "compare_warm")  # --cpus is not repeated: pin as you did then


def load_baseline(path: str) -> tuple[str, dict]:
    from gemvbw.compare import MalformedResult, check_results

    doc = load_result(path, "--rerun")
    try:  # compared with at the end: a malformed file is refused now, before anything is measured
        check_results(doc, path)
    except MalformedResult as exc:
        usage_error(f"--rerun: {exc}; give a file written by gemvbw sweep --json")
    return f"{path} ({doc.get('created', '?')})", doc


def settings_as_flags(doc: dict, path: str) -> dict:
    """A recorded run's settings, as the raw flag values resolve() takes; a malformed record is a usage error
    (exit 2) before anything is measured."""
    s = doc.get("settings")
    if not isinstance(s, dict):
        usage_error(f"--rerun: {path!r} has no settings mapping; give a file written by gemvbw sweep --json")
    flags = {}
    for key in RERUN_KEYS:
        value = s.get(key)
        if value is None or value is False:
            continue
        if key == "shapes":
            if not isinstance(value, list) or not value or not all(
                    isinstance(mk, list) and len(mk) == 2 and all(type(v) is int and v > 0 for v in mk) for mk in value):
                usage_error(f"--rerun {path}: settings.shapes must be a list of [M, K] pairs of positive integers, "
                            f"got {value!r}")
            flags[key] = tuple(tuple(mk) for mk in value) if len(value) > 1 else None
            if len(value) == 1:
                flags["M"], flags["K"] = value[0]
            continue
        if isinstance(value, list) and all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
            flags[key] = ",".join(map(str, value))
        elif isinstance(value, (int, float, str)):
            flags[key] = value
        else:
            usage_error(f"--rerun {path}: settings.{key} is {value!r}, not a value gemvbw records")
    return flags


def from_file(exc, recorded: dict, path: str | None) -> str:
    """A bad value that came from a --rerun file says so, and which entry it was."""
    from gemvbw.settings import FLAGS

    key = next((k for k, flag in FLAGS.items() if flag == exc.source and k in recorded), None)
    if exc.source in ("--act", "--kernel"):  # choices, not in FLAGS
        key = exc.source[2:] if exc.source[2:] in recorded else None
    if path is None or key is None:
        return str(exc)
    return f"--rerun {path}: settings.{key} = {recorded[key]!r} from the file: {exc.message}"


@main.command()
@click.option("--threads", metavar="INT", help="Largest thread count to measure (default: CPUs in the affinity mask).")
@click.option("--json", "json_path", metavar="PATH", help="Also write the figures as JSON.")
@click.option("--csv", "csv_path", metavar="PATH", help="Also write the figures as CSV.")
@click.option("--md", "md_path", metavar="PATH", help="Also write the table as markdown.")
def roofline(threads: str | None, json_path: str | None, csv_path: str | None, md_path: str | None) -> None:
    """memcpy (MNN's roofline, read+write counted) and read-only bandwidth for 1..N threads."""
    require_numba()
    import numba

    from gemvbw import report, system
    from gemvbw.roofline import gbps_by_streams_json, measure_roofline, read_ways
    from gemvbw.settings import SettingsError, format_cpus, resolve

    try:
        top = resolve({"threads": threads, "bits": "8"}, thread_limit=numba_threads()).threads
    except SettingsError as exc:
        usage_error(str(exc))
    for path, flag in ((json_path, "--json"), (csv_path, "--csv"), (md_path, "--md")):
        if path:
            check_path(path, flag)
    llc = system.last_level_cache_bytes()
    llc = None if isinstance(llc, system.Unknown) else llc
    lines = [f"affinity: {format_cpus(system.affinity())}",
             "threads | memcpy GB/s (2x bytes) | read GB/s | read: how",
             "-------:|----------------------:|---------:|:---"]
    for line in lines:
        click.echo(line)
    rows = []
    for t in range(1, top + 1):
        numba.set_num_threads(t)
        rf = measure_roofline(t, llc)
        rows.append({"threads": t, "memcpy_gbps": rf.memcpy.gbps, "read_gbps": rf.read.gbps,
                     "memcpy_buffer_bytes": rf.memcpy.buffer_bytes, "read_buffer_bytes": rf.read.buffer_bytes,
                     "read_streams": rf.read.streams,
                     "read_gbps_by_streams": gbps_by_streams_json(rf.read)})
        lines.append(f"{t:7d} | {rf.memcpy.gbps:21.1f} | {rf.read.gbps:9.1f} | {read_ways(rf.read)}")
        click.echo(lines[-1])
    if json_path:
        report.write_atomic(json_path, report.dumps({"schema": "gemvbw.roofline/1", "system": system.describe(),
                                                     "rooflines": rows}))
    if csv_path:
        report.write_atomic(csv_path, "threads,memcpy_gbps,read_gbps\n" + "".join(
            f"{r['threads']},{r['memcpy_gbps']:.4f},{r['read_gbps']:.4f}\n" for r in rows))
    if md_path:
        report.write_atomic(md_path, "\n".join(lines) + "\n")


def entry() -> None:
    """The console script: the click group, with Ctrl-C at any moment (start-up and the roofline included)
    exiting 130 after what was measured, and a closed pipe (gemvbw sweep | head -1) ending quietly."""
    try:  # outside standalone mode click returns the code of a ctx.exit() (--help, --version) rather than raising it
        code = main.main(standalone_mode=False)  # (click tests only its truth: None would do the same)
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("Interrupted (Ctrl-C).", err=True)
        code = 130
    except BrokenPipeError:
        # the reader went away: no more output, no traceback; the shell's status for SIGPIPE
        try:  # and no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout without a file descriptor
            sys.stdout = open(os.devnull, "w")
        code = 141
    sys.exit(code if isinstance(code, int) else 0)

"""The ``--flush-mib`` option the benchmark scripts share, defined once.

A cold figure needs the caches emptied before every call, so each script reads ``--flush-mib`` MiB first, as
``gemvbw sweep`` does. The sweep's own default is four times the last-level cache the machine reports
(``gemvbw.settings.machine_flush_mib``); where that cache is reported large (480 MiB on one VM) the default
makes a run take hours, and the option lets it choose less. Scripts that drive ``gemvbw sweep`` (run.py,
paired.py) keep None as "the sweep's own": they then pass no flag, and the sweep reports its own default.
"""

from __future__ import annotations

import argparse

from gemvbw.settings import machine_flush_mib

SWEEP_FLUSH_MIB = machine_flush_mib()  # what `gemvbw sweep` flushes here unless told


def add_flush_mib(ap: argparse.ArgumentParser, help_text: str, *, sweep_default: bool = False) -> None:
    """Add ``--flush-mib`` to ``ap``. ``sweep_default``: leave it None unless given (see above); otherwise
    its default is the sweep's on this machine."""
    ap.add_argument("--flush-mib", type=int, default=None if sweep_default else SWEEP_FLUSH_MIB,
                    help=f"{help_text} (default {SWEEP_FLUSH_MIB}, the sweep's own on this machine)")


def check_flush_mib(ap: argparse.ArgumentParser, flush_mib: int | None, *, warm_ok: bool = False) -> None:
    """Exit 2 through ``ap.error``, naming the flag, if a run cannot use ``flush_mib``: below 1 for the
    scripts whose figures are only cold, below 0 for those where 0 means warm."""
    if flush_mib is None or flush_mib >= (0 if warm_ok else 1):
        return
    advice = "give 0 (warm) or more" if warm_ok else "the cold figures need a flush, give 1 or more"
    ap.error(f"--flush-mib: {flush_mib} MiB; {advice}")


def flush_mib_or_sweeps(flush_mib: int | None) -> int:
    """The MiB a side flushes: the one asked for, or the sweep's own."""
    return SWEEP_FLUSH_MIB if flush_mib is None else flush_mib


def sweep_flush_flags(flush_mib: int | None) -> list[str]:
    """The ``gemvbw sweep`` arguments for ``flush_mib``: none for the sweep's own default, so that the sweep's
    output says it used its default."""
    return [] if flush_mib is None else ["--flush-mib", str(flush_mib)]

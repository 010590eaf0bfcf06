"""Renderers: MNN markdown, rich tables, JSON and CSV. They format; they never compute.

A screen reporter follows the run (see :class:`gemvbw.runner.Reporter`);
file exporters rewrite their file atomically after every result, so an
interrupted run leaves a complete, partial-marked file, never a truncated one.

The reporters are imported when first used: ``compare`` and ``plot`` need only
``dumps`` and ``resolve_format``, and run where numba is not installed.
"""

from __future__ import annotations

import importlib
import sys
from typing import TextIO

from gemvbw.report.files import dumps, write_atomic

FORMATS = ("auto", "mnn", "rich", "json", "csv")

_LAZY = {"CsvReporter": "csv_out", "csv_text": "csv_out", "JsonReporter": "json_out", "json_text": "json_out",
         "MnnReporter": "mnn", "mnn_text": "mnn"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"gemvbw.report.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'gemvbw.report' has no attribute {name!r}")


def resolve_format(fmt: str, stream: TextIO) -> str:
    """'auto' is rich on a terminal and MNN markdown when piped."""
    if fmt != "auto":
        return fmt
    return "rich" if stream.isatty() else "mnn"


def screen_reporter(fmt: str, stream: TextIO | None = None):
    stream = sys.stdout if stream is None else stream
    fmt = resolve_format(fmt, stream)
    if fmt == "mnn":
        from gemvbw.report.mnn import MnnReporter

        return MnnReporter(stream)
    if fmt == "json":
        from gemvbw.report.json_out import JsonReporter

        return JsonReporter(stream)
    if fmt == "csv":
        from gemvbw.report.csv_out import CsvReporter

        return CsvReporter(stream)
    from gemvbw.report.rich_view import RichReporter

    return RichReporter(stream)


def json_file(path: str):
    from gemvbw.report.json_out import json_text

    return lambda record: write_atomic(path, json_text(record))


def csv_file(path: str):
    from gemvbw.report.csv_out import csv_text

    return lambda record: write_atomic(path, csv_text(record))


def md_file(path: str):
    """MNN-style markdown of the whole record (what `gemvbw sweep | cat` prints)."""
    from gemvbw.report.mnn import mnn_text

    return lambda record: write_atomic(path, mnn_text(record))

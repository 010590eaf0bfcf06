"""Renderers: MNN markdown, rich tables, JSON and CSV. They format; they never compute.

A screen reporter follows the run (see :class:`gemvbw.runner.Reporter`);
file exporters rewrite their file atomically after every result, so an
interrupted run leaves a complete, partial-marked file, never a truncated one.
"""

from __future__ import annotations

import sys
from typing import TextIO

from gemvbw.report.csv_out import CsvReporter, csv_text
from gemvbw.report.files import write_atomic
from gemvbw.report.json_out import JsonReporter, dumps, json_text
from gemvbw.report.mnn import MnnReporter, mnn_text

FORMATS = ("auto", "mnn", "rich", "json", "csv")


def resolve_format(fmt: str, stream: TextIO) -> str:
    """'auto' is rich on a terminal and MNN markdown when piped."""
    if fmt != "auto":
        return fmt
    return "rich" if stream.isatty() else "mnn"


def screen_reporter(fmt: str, stream: TextIO | None = None):
    stream = sys.stdout if stream is None else stream
    fmt = resolve_format(fmt, stream)
    if fmt == "mnn":
        return MnnReporter(stream)
    if fmt == "json":
        return JsonReporter(stream)
    if fmt == "csv":
        return CsvReporter(stream)
    from gemvbw.report.rich_view import RichReporter

    return RichReporter(stream)


def json_file(path: str):
    return lambda record: write_atomic(path, json_text(record))


def csv_file(path: str):
    return lambda record: write_atomic(path, csv_text(record))


def md_file(path: str):
    """MNN-style markdown of the whole record (what `gemvbw sweep | cat` prints)."""
    return lambda record: write_atomic(path, mnn_text(record))

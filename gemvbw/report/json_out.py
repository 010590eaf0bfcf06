"""JSON (schema gemvbw.sweep/1): the whole record, printed when the run ends."""

from __future__ import annotations

from typing import TextIO

from gemvbw.report.files import dumps
from gemvbw.results import SweepRecord


def json_text(record: SweepRecord) -> str:
    return dumps(record.to_dict())


class FinalOnlyReporter:
    """A screen format that prints the whole record once, when the run ends (or is interrupted)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def start(self, record, total_groups): pass
    def roofline(self, record): pass
    def group_done(self, label, index, group): pass
    def result(self, record, result): pass
    def failure(self, record, failure): pass

    def text(self, record: SweepRecord) -> str:
        raise NotImplementedError

    def finish(self, record: SweepRecord) -> None:
        self.stream.write(self.text(record))
        self.stream.flush()


class JsonReporter(FinalOnlyReporter):
    def text(self, record: SweepRecord) -> str:
        return json_text(record)

"""A long benchmark run's steps, kept on disk as each one ends.

run.py takes hours (about three on a 2-core VM at a 512 MiB flush) and used to hold everything in memory until
it wrote RESULTS.md: a run stopped in its last step kept nothing. Here each step's result is written to its own
JSON file the moment it ends, so a run stopped part way (Ctrl-C, a closed terminal, a crash) keeps what it
measured, and ``--resume`` goes on from the first step it lacks.

A resumed run is only one run if it measures the same code with the same settings on the same CPU: the directory
records those (the identity) when the run starts, and a resume that differs in any of them is refused, naming
what differs. The orchestration and rendering (run.py, this file) are not part of the identity: a fix to how
the results are written can be resumed into.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")
RUN_FILE = "run.json"


class StepsError(Exception):
    """The directory cannot go on as asked: the message says why and what to do."""


class Stopped(Exception):
    """Ctrl-C in a step: the message says what was kept and how to go on."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def code_fingerprint(files: list[Path]) -> str:
    """sha256 over the files' paths (relative to their common root, sorted) and contents: what was measured."""
    h = hashlib.sha256()
    root = Path(os.path.commonpath([str(f.parent) for f in files])) if files else Path(".")
    for f in sorted(files, key=lambda p: str(p.relative_to(root))):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _write_json(path: Path, doc: dict) -> None:
    # write then rename: a run killed mid-write leaves the old file or none, never half a step
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


class Steps:
    """The steps of one run in ``root``: :meth:`step` measures a step once and keeps it; :meth:`finish` removes
    the directory after the results are written."""

    def __init__(self, root: Path, identity: dict, resume: bool):
        self.root = root
        run_file = root / RUN_FILE
        if not run_file.exists():
            if resume:
                raise StepsError(f"--resume: {root} holds no unfinished run (a finished run removes its steps); "
                                 "leave --resume out to start one")
            root.mkdir(parents=True, exist_ok=True)
            self.run = {"identity": identity, "started": now(), "resumed": []}
            _write_json(run_file, self.run)
            return
        self.run = json.loads(run_file.read_text())
        if not resume:
            raise StepsError(f"{root} holds the steps of a run started {self.run['started']} that did not finish: "
                             "pass --resume to go on with it, or delete that directory to start over")
        differs = [f"{key} was {self.run['identity'].get(key)!r}, now {value!r}" for key, value in identity.items()
                   if self.run["identity"].get(key) != value]
        if differs:
            raise StepsError(f"--resume: the run in {root} was started with other settings, code or CPU ("
                             + "; ".join(differs) + "): its steps would not be one run. Resume with the same "
                             "settings, or delete that directory to start over")
        self.run["resumed"].append(now())
        _write_json(run_file, self.run)

    @property
    def started(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.run["started"])

    @property
    def resumed(self) -> list[dt.datetime]:
        return [dt.datetime.fromisoformat(t) for t in self.run["resumed"]]

    def step(self, name: str, measure: Callable[[], T], encode: Callable[[T], object] = lambda v: v,
             decode: Callable[[object], T] = lambda v: v) -> T:
        """The result of step ``name``: kept from an earlier session of this run, or measured now and kept.
        ``encode``/``decode`` map a result that is not plain JSON (tuples, int keys) to JSON and back."""
        path = self.root / f"{name}.json"
        if path.exists():
            kept = json.loads(path.read_text())
            print(f"= {name}: kept from {kept['ended']}", file=sys.stderr, flush=True)
            return decode(kept["value"])
        try:
            doc = {"started": now(), "value": encode(measure())}
        except KeyboardInterrupt:
            ended = sorted(f.stem for f in self.root.glob("*.json") if f.name != RUN_FILE)
            raise Stopped(f"stopped in step {name}; kept in {self.root}: {', '.join(ended) or 'no step yet'}. The "
                          "same command with --resume measures the rest") from None
        _write_json(path, {**doc, "ended": now()})
        # the same way back as a kept step takes, so a resumed run renders exactly what a straight one does
        return decode(json.loads(json.dumps(doc["value"])))

    def finish(self) -> None:
        shutil.rmtree(self.root)

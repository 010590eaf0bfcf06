"""Mutation testing of gemvbw's pure-Python modules with mutmut, and the score per module.

    pip install -e '.[test]' mutmut
    python tools/mutation.py                      # every module in [tool.mutmut] only_mutate
    python tools/mutation.py 'gemvbw.metrics.*'   # one module (mutmut's mutant-name patterns)
    python tools/mutation.py --report-only        # the table of the last run, nothing rerun
    python tools/mutation.py --baseline ../old    # only what survived in another checkout's run, merged
    python tools/mutation.py --resume             # go on: every mutant here not yet killed, fastest first
    python tools/mutation.py --retrace --resume   # the same, after mutmut traced every test again

Every module takes the time of its survivors (each runs every test that reaches it): on 2
cores, minutes for metrics, an hour or more for all of them. --baseline makes a second run
after new tests cheap: mutants already killed there stay killed (tests were added, not
removed), and only the rest are run again here. --resume does the same within one checkout:
a run stopped early, or survivors after new tests, are run again (mutmut otherwise reruns
every mutant a pattern names, killed or not, and none that has a result when given none);
mutmut takes them fastest first, so a run stopped again has checked the most it could.

mutmut runs a mutant against the tests it saw reach the mutated function, traced in-process
once per test and kept: a test that later calls more (an in-process check added beside a
subprocess) is not run against the functions it now reaches. Seen here: five mutants of the
result-file encoding showed as survivors until their test was traced again. --retrace forgets
every test's trace, so mutmut traces the whole suite again (one run of it) before it runs.

Not part of CI. mutmut copies the package
to mutants/ (ignored by git), and keeps each mutant's result there, so a second run only
tests what changed. The score is mutants killed (a test failed, or the mutant hung until
mutmut's timeout) out of mutants generated; survivors are listed so each can be killed by
a test or explained as equivalent.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAUGHT = {"killed", "timeout", "caught by type check"}


# mutmut runs a mutant's tests in the order of a set (arbitrary), stopping at the first failure. Most mutants of
# settings or cli are killed by a test of a millisecond but reached by a hundred, some of which run whole sweeps:
# taken in arbitrary order, a mutant of resolve() cost about 20 s, 2.7 mutants a minute on 2 cores. Run fastest
# first (by the durations mutmut recorded), the same tests decide the same verdict, sooner.
FASTEST_FIRST = """
import sys
from mutmut.__main__ import cli
from mutmut.runners.harness import PytestRunner
from mutmut.state import state

def run_tests(self, *, mutant_name, tests, _run=PytestRunner.run_tests):
    durations = state().duration_by_test
    return _run(self, mutant_name=mutant_name, tests=sorted(tests, key=lambda t: (durations.get(t, 0.0), t)))

PytestRunner.run_tests = run_tests
sys.argv[0] = "mutmut"
sys.exit(cli())
"""


def run_mutmut(patterns: list[str], max_children: int) -> int:
    env = dict(os.environ)
    # numba's default threading layer here is GNU OpenMP, which raises SIGTERM in a child
    # forked after it started ("fork() called from a process already using GNU OpenMP"):
    # mutmut forks one child per mutant, so every such mutant would read as 'suspicious'.
    env["NUMBA_THREADING_LAYER"] = "workqueue"
    cmd = [sys.executable, "-c", FASTEST_FIRST, "run", "--max-children", str(max_children), *patterns]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def statuses(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """{module: {mutant: status}} from the .meta files mutmut keeps beside each mutated file."""
    from mutmut.stats import status_by_exit_code

    found: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        module = meta.relative_to(root / "mutants").as_posix()[: -len(".meta")]
        for mutant, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[module][mutant] = status_by_exit_code[code]
    return found


def matches(mutant: str, patterns: list[str]) -> bool:
    return not patterns or any(fnmatch.fnmatch(mutant, p) for p in patterns)


def merged(baseline: dict, now: dict) -> dict:
    """The baseline's kills kept; every other verdict taken from this run where it checked the mutant."""
    out = {module: dict(by_mutant) for module, by_mutant in baseline.items()}
    for module, by_mutant in now.items():
        for mutant, status in by_mutant.items():
            before = out.get(module, {}).get(mutant)
            if before not in CAUGHT and (status != "not checked" or before is None):
                out.setdefault(module, {})[mutant] = status
    return out


def only(found: dict, patterns: list[str]) -> dict:
    kept = {module: {m: st for m, st in by.items() if matches(m, patterns)} for module, by in found.items()}
    return {module: by for module, by in kept.items() if by}


def report(found: dict[str, dict[str, str]]) -> str:
    """Per module: generated, run (a run stopped early leaves some unchecked), killed, the rest, and the score
    both ways: killed out of generated, and killed out of run."""
    lines = ["| module | generated | run | killed | of them by timeout | survived | no tests | other | "
             "killed / generated | killed / run |", "|---|---|---|---|---|---|---|---|---|---|"]
    total: Counter = Counter()
    survivors: list[str] = []

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f} %" if b else "-"

    for module, by_mutant in sorted(found.items()):
        counts = Counter(by_mutant.values())
        run = len(by_mutant) - counts["not checked"]
        caught = sum(counts[s] for s in CAUGHT)
        other = run - caught - counts["survived"] - counts["no tests"]
        row = dict(generated=len(by_mutant), run=run, caught=caught, timeout=counts["timeout"],
                   survived=counts["survived"], no_tests=counts["no tests"], other=other)
        total.update(row)
        lines.append(f"| {module} | {row['generated']} | {run} | {caught} | {row['timeout']} | {row['survived']} | "
                     f"{row['no_tests']} | {other} | {pct(caught, row['generated'])} | {pct(caught, run)} |")
        survivors += [m for m, s in by_mutant.items() if s not in CAUGHT | {"not checked"}]
    if total["generated"]:
        lines.append(f"| all | {total['generated']} | {total['run']} | {total['caught']} | {total['timeout']} | "
                     f"{total['survived']} | {total['no_tests']} | {total['other']} | "
                     f"{pct(total['caught'], total['generated'])} | {pct(total['caught'], total['run'])} |")
    lines += ["", f"{len(survivors)} run and not killed (see one with: mutmut show NAME):"] + [f"  {m}" for m in survivors]
    return "\n".join(lines)


def forget_traces(root: Path = ROOT) -> bool:
    """Drop mutmut's record of which tests it has traced, so that it traces them all again on its next run (it
    traces the tests it has no duration for). False when there is nothing to forget."""
    path = root / "mutants" / "mutmut-stats.json"
    if not path.exists():
        return False
    stats = json.loads(path.read_text())
    stats["duration_by_test"] = {}
    path.write_text(json.dumps(stats))
    return True


def not_killed(patterns: list[str]) -> list[str]:
    return [m for by in only(statuses(), patterns).values() for m, st in by.items() if st not in CAUGHT]


def resume(patterns: list[str], max_children: int) -> int:
    """Run every mutant here that is not killed yet, named, so mutmut reruns survivors too. Two passes: mutmut
    regenerates the mutants of changed functions first (their numbering may change, so names taken before
    can miss some), and the second pass takes whatever is still unchecked after it."""
    for _ in range(2):
        names = not_killed(patterns)
        if not names:
            break
        if run_mutmut(names, max_children) != 0:
            print("Error: mutmut failed (its output above says why); no score", file=sys.stderr)
            return 1
        if not [m for by in only(statuses(), patterns).values() for m, st in by.items() if st == "not checked"]:
            break
    print(report(only(statuses(), patterns)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="mutant names or patterns, e.g. 'gemvbw.metrics.*'")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--report-only", action="store_true", help="print the last run's table, run nothing")
    parser.add_argument("--resume", action="store_true",
                        help="run only the mutants here that are not killed yet (survivors and unchecked ones)")
    parser.add_argument("--retrace", action="store_true",
                        help="make mutmut trace every test again first (after tests changed what they call)")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="run only the mutants not killed in CHECKOUT's mutants/, and report the two merged")
    args = parser.parse_args()
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("Error: mutmut is not installed; pip install mutmut", file=sys.stderr)
        return 2
    if args.resume and args.baseline:
        print("Error: --resume and --baseline are two ways of choosing what to run; give one", file=sys.stderr)
        return 2
    if args.retrace and args.report_only:
        print("Error: --retrace changes what the next run does; --report-only runs nothing", file=sys.stderr)
        return 2
    if args.retrace and not forget_traces():
        print("note: no traces to forget (mutmut traces every test on its first run anyway)", file=sys.stderr)
    if args.resume:
        return resume(args.patterns, args.max_children)
    baseline = only(statuses(args.baseline), args.patterns) if args.baseline else None
    patterns = args.patterns
    if baseline is not None:
        patterns = [m for by in baseline.values() for m, st in by.items() if st not in CAUGHT | {"not checked"}]
        if not patterns:
            print("nothing survived in the baseline")
    if not args.report_only and (baseline is None or patterns):
        code = run_mutmut(patterns, args.max_children)
        if code != 0:  # e.g. the suite failed without mutants: no score means anything then
            print(f"Error: mutmut exited with {code} (its output above says why); no score", file=sys.stderr)
            return 1
    found = statuses()
    if baseline is not None:
        found = only(merged(baseline, found), args.patterns)
    if not found:
        print("Error: no results in mutants/; run without --report-only first", file=sys.stderr)
        return 2
    print(report(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

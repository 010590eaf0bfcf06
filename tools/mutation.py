"""Mutation testing of gemvbw's pure-Python modules with mutmut, and the score per module.

    pip install -e '.[test]' mutmut
    python tools/mutation.py                      # every module in [tool.mutmut] only_mutate
    python tools/mutation.py 'gemvbw.metrics.*'   # one module (mutmut's mutant-name patterns)
    python tools/mutation.py --report-only        # the table of the last run, nothing rerun

Not part of CI: on 2 cores the whole set takes an hour or more. mutmut copies the package
to mutants/ (ignored by git), and keeps each mutant's result there, so a second run only
tests what changed. The score is mutants killed (a test failed, or the mutant hung until
mutmut's timeout) out of mutants generated; survivors are listed so each can be killed by
a test or explained as equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAUGHT = {"killed", "timeout", "caught by type check"}


def run_mutmut(patterns: list[str], max_children: int) -> int:
    env = dict(os.environ)
    # numba's default threading layer here is GNU OpenMP, which raises SIGTERM in a child
    # forked after it started ("fork() called from a process already using GNU OpenMP"):
    # mutmut forks one child per mutant, so every such mutant would read as 'suspicious'.
    env["NUMBA_THREADING_LAYER"] = "workqueue"
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *patterns]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def statuses() -> dict[str, dict[str, str]]:
    """{module: {mutant: status}} from the .meta files mutmut keeps beside each mutated file."""
    from mutmut.stats import status_by_exit_code

    found: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        module = meta.relative_to(ROOT / "mutants").as_posix()[: -len(".meta")]
        for mutant, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[module][mutant] = status_by_exit_code[code]
    return found


def report(found: dict[str, dict[str, str]]) -> str:
    lines = ["| module | generated | killed | of them by timeout | survived | no tests | other | score |",
             "|---|---|---|---|---|---|---|---|"]
    total: Counter = Counter()
    survivors: list[str] = []
    for module, by_mutant in sorted(found.items()):
        counts = Counter(by_mutant.values())
        caught = sum(counts[s] for s in CAUGHT)
        other = len(by_mutant) - caught - counts["survived"] - counts["no tests"]
        total.update(generated=len(by_mutant), caught=caught, timeout=counts["timeout"], survived=counts["survived"],
                     no_tests=counts["no tests"], other=other)
        score = f"{100 * caught / len(by_mutant):.1f} %" if by_mutant else "-"
        lines.append(f"| {module} | {len(by_mutant)} | {caught} | {counts['timeout']} | {counts['survived']} | "
                     f"{counts['no tests']} | "
                     f"{other} | {score} |")
        survivors += [m for m, s in by_mutant.items() if s not in CAUGHT]
    if total["generated"]:
        lines.append(f"| all | {total['generated']} | {total['caught']} | {total['timeout']} | {total['survived']} | "
                     f"{total['no_tests']} | "
                     f"{total['other']} | {100 * total['caught'] / total['generated']:.1f} % |")
    lines += ["", f"{len(survivors)} not killed (see one with: mutmut show NAME):"] + [f"  {m}" for m in survivors]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="mutant names or patterns, e.g. 'gemvbw.metrics.*'")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--report-only", action="store_true", help="print the last run's table, run nothing")
    args = parser.parse_args()
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("Error: mutmut is not installed; pip install mutmut", file=sys.stderr)
        return 2
    if not args.report_only:
        code = run_mutmut(args.patterns, args.max_children)
        if code != 0:  # e.g. the suite failed without mutants: no score means anything then
            print(f"Error: mutmut exited with {code} (its output above says why); no score", file=sys.stderr)
            return 1
    found = statuses()
    if not found:
        print("Error: no results in mutants/; run without --report-only first", file=sys.stderr)
        return 2
    print(report(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

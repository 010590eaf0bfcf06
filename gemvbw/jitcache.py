"""Keep numba's on-disk cache from crashing a run.

numba raises on a cache index or data file it cannot unpickle (a disk that
filled up, an interrupted write, a copy from another machine). Before any
kernel runs, every cache file of gemvbw's compiled functions is read back; a
file that does not load is removed, and numba then compiles afresh and
rewrites it.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def _cache_dirs() -> set[Path]:
    from numba.core.dispatcher import Dispatcher

    dirs = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("gemvbw") or module is None:
            continue
        for obj in vars(module).values():
            cache = getattr(obj, "_cache", None) if isinstance(obj, Dispatcher) else None
            path = getattr(cache, "_cache_path", None)
            if path:
                dirs.add(Path(path))
    return dirs


def _loads(path: Path) -> None:
    with open(path, "rb") as fh:
        if path.suffix == ".nbi":
            pickle.load(fh)  # numba's version stamp
            pickle.loads(fh.read())  # (source stamp, overloads)
        else:
            pickle.loads(fh.read())


def repair() -> list[Path]:
    """Remove unreadable cache files of gemvbw's functions; return what was removed."""
    import gemvbw.harness  # noqa: F401  (import every module with cached functions)
    import gemvbw.kernels  # noqa: F401
    import gemvbw.roofline  # noqa: F401

    removed = []
    for directory in _cache_dirs():
        if not directory.is_dir():
            continue
        for path in list(directory.glob("*.nbi")) + list(directory.glob("*.nbc")):
            try:
                _loads(path)
            except Exception:
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:
                    pass
    return removed

"""numba's own environment variables, checked before numba is imported.

numba reads NUMBA_NUM_THREADS, NUMBA_THREADING_LAYER and NUMBA_CACHE_DIR once, when it is
imported, and fails later and deep inside (a ValueError at import, at the first parallel call,
or when a cached function is defined) with a traceback that names none of them. Here each is
checked first, so a bad value is one line naming the variable and what would work, and a
machine where numba could not write its cache gets a cache directory it can write, announced.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping

LAYERS = ("default", "safe", "forksafe", "threadsafe", "omp", "tbb", "workqueue")


def check(environ: Mapping[str, str]) -> str | None:
    """The error to stop on for a malformed numba variable, or None."""
    raw = environ.get("NUMBA_NUM_THREADS")
    if raw is not None:
        if not raw.strip().isdigit() or int(raw) < 1:
            return (f"NUMBA_NUM_THREADS: {raw!r} is not a positive number of threads; unset it, or use e.g. "
                    f"NUMBA_NUM_THREADS={os.cpu_count() or 2}")
    layer = environ.get("NUMBA_THREADING_LAYER")
    if layer is not None and layer.strip().lower() not in LAYERS:
        return (f"NUMBA_THREADING_LAYER: {layer!r} is not one of numba's threading layers ({', '.join(LAYERS)}); "
                "unset it, or use e.g. NUMBA_THREADING_LAYER=omp or workqueue")
    return None


def _writable(directory: Path) -> bool:
    """Whether files can be created in directory (or in its nearest existing parent, where it would be made)."""
    d = directory
    while not d.exists():
        if d.parent == d:
            return False
        d = d.parent
    if not d.is_dir():
        return False
    try:
        fd, probe = tempfile.mkstemp(dir=d, prefix=".gemvbw-probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def prepare_cache(environ: dict, package_dir: Path | None = None) -> str | None:
    """Make sure numba will find a writable cache for gemvbw's kernels (cache=True fails as the kernels are
    defined when it finds none). Returns a note when NUMBA_CACHE_DIR was set here, raises ValueError naming
    NUMBA_CACHE_DIR when the user's own is not writable."""
    given = environ.get("NUMBA_CACHE_DIR")
    if given:
        if not _writable(Path(given)):
            raise ValueError(f"NUMBA_CACHE_DIR: numba cannot write its cache in {given!r}; choose a writable "
                             "directory, or unset it")
        return None
    package_dir = package_dir or Path(__file__).resolve().parent / "kernels"
    user_wide = Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME") or "~").expanduser() / ".cache") / "numba"
    if _writable(package_dir / "__pycache__") or _writable(user_wide):
        return None  # numba's own locators will find a place
    fallback = Path(tempfile.gettempdir()) / f"gemvbw-numba-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    environ["NUMBA_CACHE_DIR"] = str(fallback)
    return (f"numba cannot write its cache next to gemvbw or in {user_wide}: compiled kernels are cached in "
            f"{fallback} for this run (set NUMBA_CACHE_DIR to choose the place)")


def thread_limit() -> int:
    """The most threads numba will run (NUMBA_NUM_THREADS, else the CPU count numba saw). numba is imported."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)

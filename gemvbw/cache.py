"""Where gemvbw keeps what it learns about a machine: calibration choices and compiler-target probes."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$GEMVBW_CACHE_DIR, else $XDG_CACHE_HOME/gemvbw, else ~/.cache/gemvbw."""
    base = os.environ.get("GEMVBW_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gemvbw")
    return Path(base)

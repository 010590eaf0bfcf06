"""The x86 issue's bars at 4096x14336 cold, and how a figure is printed beside one.

run.py, paired.py and wall.py judge the same bars; they live here so the three cannot drift apart.
"""

from __future__ import annotations

WALL = {8: 90.0, 4: 90.0, 3: 85.0, 2: 85.0}  # eff GB/s as a % of the same run's read roofline, at least
LATENCY = {4: 0.56, 3: 0.44, 2: 0.32}  # t(wN)/t(w8), at most (the bytes' ratios are 0.53 / 0.41 / 0.29)
MNN_BAR = 1.3  # MNN / gemvbw latency ...
AT_WALL = 95.0  # ... or gemvbw at this % of its read roofline and no slower than MNN

MAX_DIGITS = 6


def meets_mnn_bar(ratio: float, gemvbw_pct_read: float) -> bool:
    """The bar against MNN for one width: MNN / gemvbw >= 1.3, or gemvbw at >= 95 % of its read and no slower."""
    return ratio >= MNN_BAR or (gemvbw_pct_read >= AT_WALL and ratio >= 1.0)


def verdict(value: float, bar: float, at_most: bool = False) -> str:
    """"met" or "NOT met": ``value`` at least ``bar`` (a share of the read), or at most it (a latency ratio)."""
    return "met" if (value <= bar if at_most else value >= bar) else "NOT met"


def beside(value: float, bar: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, or with as many more as it takes for the figure printed to fall on the
    same side of ``bar`` as the value itself: a 0.3227 against a bar of 0.32 prints as 0.323 and an 89.98 against
    90 as 89.98, so that no figure printed beside "NOT met" reads as meeting its bar, nor the other way round
    (and a figure prints as the bar itself only where it is the bar)."""
    side = (value > bar) - (value < bar)
    for d in range(digits, MAX_DIGITS + 1):
        text = f"{value:.{d}f}"
        shown = float(text)
        if (shown > bar) - (shown < bar) == side:
            return text
    return repr(value)  # closer to the bar than MAX_DIGITS decimals: the float itself

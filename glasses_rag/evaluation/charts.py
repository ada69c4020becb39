"""What the benchmarks' bar charts share: each bar says its value, so a bar of length 0 is still seen.

A slice (or a preset) that scored exactly 0 draws no bar; without a mark it looks like one with no data. Every bar
gets its value written at its end, and a value of 0 a diamond on the axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ZERO_MARK = {"marker": "D", "color": "black", "markersize": 4, "linestyle": "none", "zorder": 3}


def mark_bars(
    ax: Any,
    values: Sequence[float | None],
    positions: Sequence[float] | None = None,
    horizontal: bool = True,
    suffixes: Sequence[str] | None = None,
    labels: bool = True,
) -> None:
    """On matplotlib axes `ax` whose bars are `values` at `positions` (default 0, 1, ...): each value written at
    its bar's end (with its `suffixes`, e.g. " *"), unless `labels` is False, and a diamond at 0 for each value of 0.

    Example: `mark_bars(ax, [0.25, 0.0, -0.5])` after `ax.barh(range(3), [0.25, 0.0, -0.5])`."""
    where = list(positions) if positions is not None else list(range(len(values)))
    ends = suffixes or [""] * len(values)
    zeros = [p for p, v in zip(where, values) if v == 0]
    if zeros:
        xy = ([0.0] * len(zeros), zeros) if horizontal else (zeros, [0.0] * len(zeros))
        ax.plot(*xy, **ZERO_MARK)
    for p, v, end in zip(where, values, ends):
        if v is None or not (labels or end):
            continue
        text = f" {v:+.3f}{end}" if labels else end
        if horizontal:
            ax.text(v, p, text, va="center", ha="left" if v >= 0 else "right", fontsize=7)
        else:
            ax.text(p, v, text.strip(), ha="center", va="bottom" if v >= 0 else "top", fontsize=6, rotation=90)

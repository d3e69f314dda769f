"""How well runs of one campaign agree on a figure, and whether each run's interval says so.

For K runs of the same campaign, each with an estimate x_i of one figure and its 95 % interval
[lo_i, hi_i]:

* the between-run coefficient of variation, sd(x) / mean(x);
* the spread, max(x) / min(x);
* the coverage: the share of ordered pairs (i, j), i ≠ j, whose run i's interval holds run j's
  estimate. An interval that describes only the sizes and iterations inside one launch covers the
  next run rarely (issue #33: λ spanned 0.33–0.50 µs over four quiet runs while each run's interval
  was ±5–10 %); one over launches covers it in most pairs (about 90 % for three launches of
  independent, normal figures: Student's t with 2 degrees of freedom at ±t(0.975)/√2).

bench/repeatability.py prints these per headline figure; the targets are coverage ≥ 80 % and
max/min ≤ 1.25.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

COVERAGE_TARGET = 0.80
SPREAD_TARGET = 1.25


@dataclass(frozen=True)
class Agreement:
    """The agreement of K runs on one figure (see the module docstring)."""

    runs: int
    cv: float
    max_over_min: float
    coverage: float

    @property
    def meets_targets(self) -> bool:
        return self.coverage >= COVERAGE_TARGET and self.max_over_min <= SPREAD_TARGET


def agreement(estimates: Sequence[float], intervals: Sequence[tuple[float, float]]) -> Agreement:
    """The agreement of runs with ``estimates`` and their 95 % ``intervals`` (one per run, same order).

    Raises ValueError with fewer than two runs, unequal lengths, or an estimate that is not finite
    and positive (a run without the figure cannot be compared: drop it and say so)."""
    if len(estimates) != len(intervals):
        raise ValueError(f"{len(estimates)} estimates but {len(intervals)} intervals")
    if len(estimates) < 2:
        raise ValueError(f"agreement needs at least 2 runs, got {len(estimates)}")
    bad = [x for x in estimates if not (math.isfinite(x) and x > 0)]
    if bad:
        raise ValueError(f"estimates must be finite and > 0, got {bad}")
    pairs = [(i, j) for i in range(len(estimates)) for j in range(len(estimates)) if i != j]
    held = sum(1 for i, j in pairs if _holds(intervals[i], estimates[j]))
    mean = statistics.fmean(estimates)
    return Agreement(runs=len(estimates), cv=statistics.stdev(estimates) / mean,
                     max_over_min=max(estimates) / min(estimates), coverage=held / len(pairs))


def _holds(interval: tuple[float, float], value: float) -> bool:
    lo, hi = interval
    return math.isfinite(lo) and math.isfinite(hi) and lo <= value <= hi

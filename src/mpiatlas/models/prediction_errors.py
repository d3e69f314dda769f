"""How far a prediction is from a measurement, across process counts.

The relative error at one process count is ``(predicted - measured) / measured``: +1.0 means
twice the measured time, -0.5 half of it. :func:`error_summary` condenses a series into the
figures the closing notes quote: the median of ``|error|``, the signed median (which way the
model leans), and the worst ``|error|`` with the process count where it happens.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ErrorSummary", "error_summary"]


@dataclass(frozen=True)
class ErrorSummary:
    points: int
    median_abs: float
    median_signed: float
    worst_abs: float
    worst_np: int

    def line(self) -> str:
        return (f"n={self.points} median |e| {self.median_abs:.0%} (signed {self.median_signed:+.0%}), "
                f"worst {self.worst_abs:.0%} at P={self.worst_np}")  # fmt: skip


def error_summary(predicted: Mapping[int, float], measured: Mapping[int, float]) -> ErrorSummary:
    """Errors over the process counts both series have; ValueError if none or a measurement ≤ 0."""
    common = sorted(set(predicted) & set(measured))
    if not common:
        raise ValueError("prediction and measurement share no process count")
    bad = [n for n in common if measured[n] <= 0]
    if bad:
        raise ValueError(f"measured time must be > 0 (process counts {bad[:5]})")
    errors = {n: (predicted[n] - measured[n]) / measured[n] for n in common}
    worst = max(common, key=lambda n: abs(errors[n]))
    return ErrorSummary(
        points=len(common),
        median_abs=statistics.median(abs(e) for e in errors.values()),
        median_signed=statistics.median(errors.values()),
        worst_abs=abs(errors[worst]),
        worst_np=worst,
    )

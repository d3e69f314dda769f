"""Adaptive repetitions: how many launches a cell series needs for a precise enough median.

``campaign.repetitions`` is either an integer (that many launches of every cell, as always) or a
mapping ``{min, max, ci_halfwidth}``: every *series* (a cell minus its ``rep``) starts with ``min``
launches and gets more, in rounds, until the 95 % CI of the median of EVERY message size is
narrow enough, ``(high - low) / 2 <= ci_halfwidth x median``, or ``max`` launches exist
(ReproMPI's "repeat until precise" instead of a fixed count that wastes time or leaves wide CIs).

This module is the pure logic: the spec, the stopping rule and the round sizing. The CI is the
package's own (mpiatlas.stats.aggregate.median_cis: the same seeded bootstrap the summary reports), so
the decision and the report agree. Which cells a round adds and how they reach the DAG is in
mpiatlas.campaign.adaptive_rounds. Imported by the programs' cell expansion, so it imports nothing heavy
at module level (a run-cell process starts without numpy/polars).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpiatlas.stats.aggregate import median_cis

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

# A series' state after a decision.
MORE = "more"  # below the target and below max: another round adds repetitions
REACHED = "reached"  # every size's CI half-width is within the target
AT_MAX = "max"  # max repetitions exist, the target was not reached
NO_DATA = "no data"  # no usable per-size values (every launch failed, or a program without a measure)
FIXED = "fixed"  # a campaign of fixed repetitions (rounds only for later re-measures, adaptive_rounds)
FINAL_STATES = (REACHED, AT_MAX, NO_DATA, FIXED)


@dataclass(frozen=True)
class AdaptiveSpec:
    """``campaign.repetitions`` as a mapping: at least ``min``, at most ``max`` launches per series,
    and the relative CI half-width of the median (0.03 = ±3 %) every size must reach."""

    min: int
    max: int
    ci_halfwidth: float


def spec_of(config: Campaign) -> AdaptiveSpec | None:
    """The adaptive spec of a validated config, or None for a fixed count (an integer)."""
    reps = config.campaign.repetitions
    if isinstance(reps, Mapping):
        return AdaptiveSpec(int(reps["min"]), int(reps["max"]), float(reps["ci_halfwidth"]))
    return None


# The headline series (the point-to-point curves whose λ and bandwidths the closing lines and the report
# open with) keep at least this many launches when the auto plan's budget cut the campaign's
# repetitions: their intervals are over launches from 3 on (mpiatlas.models.hockney.MIN_LAUNCHES).
HEADLINE_REPETITIONS = 3
HEADLINE_KEY = "headline_repetitions"  # under the config's ``auto`` record (mpiatlas.campaign.auto_plan)
# Which series are the headline: IMB PingPong (the closing lines' λ and bandwidths; PingPing and the
# collectives keep the campaign's count) and the kernels whose program says so (pingpong's ``headline``).
HEADLINE_IMB: tuple[str, ...] = ("PingPong",)


def initial_repetitions(config: Campaign, headline: bool = False) -> range:
    """The repetitions every cell is expanded with before any decision: ``range(n)`` for a fixed
    count (today's cells and ids, unchanged), ``range(min)`` for an adaptive one. A ``headline``
    series (IMB PingPong/PingPing, the pingpong kernel) keeps the floor the auto plan recorded when it
    cut the repetitions below it."""
    reps = config.campaign.repetitions
    n = int(reps["min"]) if isinstance(reps, Mapping) else int(reps)
    floor = config.auto.get(HEADLINE_KEY) if headline and config.auto is not None else None
    return range(max(n, int(floor)) if isinstance(floor, int) else n)


def spec_problem(reps: Any) -> str | None:
    """What is wrong with a schema-valid ``campaign.repetitions`` beyond its schema (min > max), or None."""
    if isinstance(reps, Mapping) and reps["min"] > reps["max"]:
        return f"min {reps['min']} is larger than max {reps['max']}"
    return None


# -- the stopping rule ---------------------------------------------------------------------------


def relative_halfwidths(values_by_size: Mapping[Any, Sequence[float]]) -> dict[Any, float]:
    """Per size: the 95 % CI half-width of the median over repetitions, relative to the median
    (inf where it cannot be known: fewer than 2 finite values, or a median of 0)."""
    sizes = list(values_by_size)
    low, high = median_cis([_finite(values_by_size[s]) for s in sizes])
    out: dict[Any, float] = {}
    for size, lo, hi in zip(sizes, low, high):
        values = _finite(values_by_size[size])
        median = _median(values) if values else math.nan
        ok = len(values) >= 2 and math.isfinite(lo) and math.isfinite(hi) and median > 0
        out[size] = (hi - lo) / 2 / median if ok else math.inf
    return out


def worst_halfwidth(values_by_size: Mapping[Any, Sequence[float]]) -> float | None:
    """The largest relative half-width over the sizes (the rule is "every size"); None without sizes."""
    widths = relative_halfwidths(values_by_size)
    return max(widths.values()) if widths else None


def decide(n: int, halfwidth: float | None, spec: AdaptiveSpec) -> tuple[str, int]:
    """(state, repetitions wanted) for a series with ``n`` launches whose worst relative CI
    half-width is ``halfwidth`` (None: no usable values)."""
    if halfwidth is None:
        return NO_DATA, n
    if halfwidth <= spec.ci_halfwidth:
        return REACHED, n
    if n >= spec.max:
        return AT_MAX, n
    return MORE, next_count(n, halfwidth, spec)


def next_count(n: int, halfwidth: float, spec: AdaptiveSpec) -> int:
    """How many launches the series should have after the next round.

    The half-width of a median shrinks roughly as 1/sqrt(n), so n x (halfwidth / target)^2
    launches should reach the target: ask for that many at once, so that few rounds (each a
    barrier of the DAG, and a batch job under SLURM) are needed, but at least one more, at most
    doubling (the estimate from a few launches is itself noisy) and never beyond max."""
    if math.isfinite(halfwidth):
        estimate = math.ceil(n * (halfwidth / spec.ci_halfwidth) ** 2)
    else:
        estimate = 2 * n  # no spread could be measured yet: as many again
    wanted = min(max(estimate, n + 1), 2 * n)
    return max(n, min(wanted, spec.max))


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

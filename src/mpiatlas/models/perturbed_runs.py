"""Launches perturbed while they ran: a rule, derived from recorded data, that a calibration skips them by.

One launch of an OSU-style benchmark measures every message size in turn. Below a few tens of bytes a
message costs its latency, whatever its size: a healthy launch times 1, 2, 4, 8 and 16 B alike. A launch
whose latency-bound sizes differ by a large factor was disturbed by something other than the algorithm
(another job, a daemon, busy-polling ranks that the OS put on one core) for part of its run, and its
figures at any size say as much about that episode as about the collective.

The rule: a launch (one algorithm, mapping, P, ...) is **perturbed** when the largest of its times at the
sizes 1..:data:`LATENCY_BOUND_BYTES` exceeds :data:`SPREAD` times the smallest (a size measured twice, a
re-run appended to the file, counts by its median).

The threshold comes from the ORFEO EPYC OSU Bcast runs (valentinis dataset, Open MPI 4.1.5, one launch per
P = 2..256 and mapping), tests/test_measured_vs_predicted.py: under ``--map-by core`` (every rank bound to
its own core) no launch of the four algorithms spreads more than 1.70x over 1..16 B, so a factor of 2
flags none of them; under ``--map-by socket`` (Open MPI then binds each rank to a whole socket) nearly
every launch from P = 128 on spreads more (473 of 503, the median launch 11x), presumably because
from then on node 0 holds 128 ranks on its 128 cores and two ranks free to move over a socket can meet
on one core (core-mapped launches fill node 0 too, bound, and stay below 1.70x).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

__all__ = ["LATENCY_BOUND_BYTES", "SPREAD", "launch_spread", "perturbed_launches"]

LATENCY_BOUND_BYTES = 16
SPREAD = 2.0


def launch_spread(samples: pl.DataFrame, by: Sequence[str], *, time: str = "t_usec",
                  max_bytes: int = LATENCY_BOUND_BYTES) -> pl.DataFrame:  # fmt: skip
    """One row per launch (the ``by`` columns, which include the process count): ``spread``, the
    largest over the smallest of its times at 1..``max_bytes`` B (each size's median)."""
    lacking = [c for c in (*by, "bytes", time) if c not in samples.columns]
    if lacking:
        raise ValueError(f"samples lack column(s) {', '.join(lacking)}")
    small = samples.filter((pl.col("bytes") >= 1) & (pl.col("bytes") <= max_bytes) & (pl.col(time) > 0))
    per_size = small.group_by(*by, "bytes").agg(pl.col(time).median())
    return per_size.group_by(*by).agg((pl.col(time).max() / pl.col(time).min()).alias("spread")).sort(*by)


def perturbed_launches(samples: pl.DataFrame, by: Sequence[str], *, time: str = "t_usec",
                       max_bytes: int = LATENCY_BOUND_BYTES, spread: float = SPREAD) -> pl.DataFrame:  # fmt: skip
    """:func:`launch_spread` with a boolean ``perturbed`` column: the launches the rule flags."""
    return launch_spread(samples, by, time=time, max_bytes=max_bytes).with_columns(
        (pl.col("spread") > spread).alias("perturbed"))

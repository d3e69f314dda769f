"""Runs perturbed by a transient episode: a rule, derived from recorded data, that a calibration skips them by.

A collective's time is smooth in the process count P (a model's terms grow with P, an algorithm's switch
is a step, not a spike), so a run far above the runs of its neighbouring P measured something else than
the algorithm: an episode of the machine (another job, a daemon, two busy-polling ranks that the OS put on
one core) that hit it while it ran. The rule: a run of a series (one algorithm, mapping and size over P) is
**perturbed** when its time exceeds :data:`FACTOR` times the median of the up to 2 · :data:`WINDOW` runs
nearest in P on either side of it in the same series (itself left out).

The threshold comes from the ORFEO EPYC OSU Bcast runs (valentinis dataset, 4 B, P = 2..256, one launch
per P), tests/test_measured_vs_predicted.py: under ``--map-by core`` (every rank bound to its own core)
no run of the four algorithms exceeds 1.71 times its neighbours' median (the default Bcast where Open
MPI's decision switches algorithm, P = 9, 17, 33), so a factor of 2 flags none of them; under ``--map-by
socket`` (ranks bound to a whole socket, free to meet on one core once node 0 holds 128 ranks, P >= 128)
it flags 139 runs at P >= 128 and 9 below. The excess is an episode, not a property of (algorithm, P):
the same launch's 1 B measurement, taken seconds before, is within the factor in most flagged cases.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import polars as pl

__all__ = ["FACTOR", "WINDOW", "flag_perturbed", "neighbour_ratios", "perturbed"]

FACTOR = 2.0
WINDOW = 4


def neighbour_ratios(times: Mapping[int, float], *, window: int = WINDOW) -> dict[int, float]:
    """P -> its time over the median time of the up to ``window`` runs nearest in P on each side."""
    nps = sorted(times)
    out: dict[int, float] = {}
    for i, n in enumerate(nps):
        around = [times[k] for k in (*nps[max(0, i - window):i], *nps[i + 1:i + 1 + window])]
        if around:
            out[n] = times[n] / statistics.median(around)
    return out


def perturbed(times: Mapping[int, float], *, factor: float = FACTOR, window: int = WINDOW) -> set[int]:
    """The process counts of a series (P -> µs) whose run is perturbed (module docstring: the rule)."""
    return {n for n, ratio in neighbour_ratios(times, window=window).items() if ratio > factor}


def flag_perturbed(measured: pl.DataFrame, by: Sequence[str] = ("group", "collective", "algorithm", "bytes"),
                   *, factor: float = FACTOR, window: int = WINDOW) -> pl.DataFrame:  # fmt: skip
    """``measured`` (``np``, ``measured_us`` and the ``by`` columns) with a boolean ``perturbed`` column,
    the rule applied to each series of the ``by`` columns over P; call it on every P measured (a subset of P
    thins the neighbourhood the rule compares a run with)."""
    flags: set[tuple[object, ...]] = set()
    for key, g in measured.group_by(list(by), maintain_order=True):
        times = dict(zip(g.get_column("np").to_list(), g.get_column("measured_us").to_list()))
        flags |= {(*key, n) for n in perturbed(times, factor=factor, window=window)}
    keys = measured.select(*by, "np").iter_rows()
    return measured.with_columns(pl.Series("perturbed", [k in flags for k in keys], dtype=pl.Boolean))

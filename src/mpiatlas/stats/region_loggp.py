"""LogGP's o and g per region, from the loggp kernel's cells: what the region table's
``overhead_us,gap_us`` columns hold.

The loggp kernel (src/kernels/loggp.c, method in :mod:`mpiatlas.parsers.loggp`) measures, per
message size, ``trials`` values each of the round trip, the gap g, the send overhead o_s and the
receive overhead o_r between ranks 0 and 1. A series is one stack, transport and knob set (as the
region PingPong fits, :func:`mpiatlas.models.ring_regions.region_pingpong_fits`); its cells are
filed by the region their ranks 0 and 1 shared (the cells' ``region``), every trial of every cell
of one region pooled (the region is the experiment, whatever mapping put the pair there).

Per series and region, at 4 B (else the smallest positive size measured): the median over trials
of ``o = (o_s + o_r) / 2`` (LogGP's one o, which :mod:`mpiatlas.models.loggp` charges at each end
of a message), of o_s, o_r, g, the round trip and L, each with its 95 % bootstrap CI
(:func:`mpiatlas.stats.aggregate.median_ci`). Trials of cells that failed, reported ``valid:
false`` or were perturbed (:func:`mpiatlas.stats.quality.trusted`) are left out.

* :func:`region_loggp` — that table (:data:`LOGGP_SCHEMA`);
* :func:`loggp_by_series` — its rows per (stack, transport, knobs) and region;

A region table takes those o and g through :func:`mpiatlas.models.region_latency.with_loggp` (models read
stats, never the other way).
"""

from __future__ import annotations

import math
from typing import TypedDict, cast

import numpy as np
import polars as pl

from mpiatlas.parsers.loggp import LoggpParseError, loggp_trials
from mpiatlas.stats.aggregate import median_ci
from mpiatlas.stats.quality import trusted
from mpiatlas.stats.regions import region_rank

__all__ = ["LOGGP_BYTES", "LOGGP_SCHEMA", "LoggpRegion", "Series", "loggp_by_series", "region_loggp"]

LOGGP_BYTES = 4  # LogGP's o and g are the small-message ones: the conventional 4-byte message
Series = tuple[str, str, str]  # stack, transport, knobs
# (output name, per-trial expression): the figures of each region, median and 95 % CI.
_FIGURES: dict[str, pl.Expr] = {
    "overhead": (pl.col("o_s_usec") + pl.col("o_r_usec")) / 2,
    "o_s": pl.col("o_s_usec"),
    "o_r": pl.col("o_r_usec"),
    "gap": pl.col("g_usec"),
    "rtt": pl.col("rtt_usec"),
    "L": pl.col("L_usec"),
}
LOGGP_SCHEMA: dict[str, pl.DataType] = {
    **dict.fromkeys(("stack", "transport", "knobs", "region"), pl.String()),
    "bytes": pl.Int64(), "n_cells": pl.Int64(), "n_trials": pl.Int64(),
    **{f"{name}_{part}": pl.Float64() for name in _FIGURES for part in ("us", "ci_low", "ci_high")},
    "labels": pl.String(),
}  # fmt: skip


class LoggpRegion(TypedDict):
    """One row of :func:`region_loggp` (:data:`LOGGP_SCHEMA`'s columns): a series' figures in one region,
    medians over its trials in microseconds with their 95 % CI."""

    stack: str
    transport: str
    knobs: str
    region: str
    bytes: int
    n_cells: int
    n_trials: int
    overhead_us: float
    overhead_ci_low: float | None
    overhead_ci_high: float | None
    o_s_us: float
    o_s_ci_low: float | None
    o_s_ci_high: float | None
    o_r_us: float
    o_r_ci_low: float | None
    o_r_ci_high: float | None
    gap_us: float
    gap_ci_low: float | None
    gap_ci_high: float | None
    rtt_us: float
    rtt_ci_low: float | None
    rtt_ci_high: float | None
    L_us: float
    L_ci_low: float | None
    L_ci_high: float | None
    labels: str


def _usable(trials: pl.DataFrame) -> pl.DataFrame:
    ok = trusted(trials).filter(pl.col("valid").fill_null(False) & pl.col("region").is_not_null())
    if "cell_status" in ok.columns:
        ok = ok.filter(pl.col("cell_status") == "ok")
    return ok


def _size(sizes: list[int]) -> int | None:
    if LOGGP_BYTES in sizes:
        return LOGGP_BYTES
    positive = sorted(b for b in sizes if b > 0)
    return positive[0] if positive else None


def _figure(values: list[float]) -> tuple[float, float | None, float | None]:
    arr = np.asarray(values, dtype=float)
    low, high = median_ci(arr)
    return float(np.median(arr)), (low if math.isfinite(low) else None), (high if math.isfinite(high) else None)


def region_loggp(table: pl.DataFrame | None) -> pl.DataFrame:
    """Per (stack, transport, knobs, region): o, o_s, o_r, g, round trip and L at 4 B (else the smallest
    positive size), medians over the pooled trials with 95 % CIs (:data:`LOGGP_SCHEMA`). ``table``: the
    tidy ``kernel_loggp`` table (None or empty: an empty frame)."""
    if table is None or table.height == 0:
        return pl.DataFrame(schema=LOGGP_SCHEMA)
    lacking = [c for c in ("stack", "transport", "region") if c not in table.columns]
    if lacking:
        raise LoggpParseError(f"kernel_loggp: lacks column(s) {', '.join(lacking)}: region_loggp needs the tidy "
                              "table (the cells' coordinates), not the kernel's bare records")
    trials = _usable(loggp_trials(table))
    if "knobs" not in trials.columns:
        trials = trials.with_columns(pl.lit("").alias("knobs"))
    trials = trials.with_columns(pl.col("knobs").fill_null(""), *[e.alias(f"_{n}") for n, e in _FIGURES.items()])
    rows: list[dict[str, str | int | float | None]] = []
    keys = ["stack", "transport", "knobs", "region"]
    for key, g in trials.group_by(keys, maintain_order=True):
        size = _size(g.get_column("bytes").unique().to_list())
        if size is None:
            continue
        at = g.filter(pl.col("bytes") == size)
        row: dict[str, str | int | float | None] = dict(zip(keys, key))
        row.update(bytes=size, n_cells=at.get_column("cell").n_unique() if "cell" in at.columns else 1,
                   n_trials=at.height,
                   labels=", ".join(sorted(set(at.get_column("label").to_list()))) if "label" in at.columns else "")
        for name in _FIGURES:
            median, low, high = _figure(at.get_column(f"_{name}").to_list())
            row.update({f"{name}_us": median, f"{name}_ci_low": low, f"{name}_ci_high": high})
        rows.append(row)
    out = pl.DataFrame(rows, schema=LOGGP_SCHEMA)
    return (out.with_columns(pl.col("region").map_elements(region_rank, return_dtype=pl.Int32).alias("_rank"))
            .sort("stack", "transport", "knobs", "_rank").drop("_rank"))


def loggp_by_series(rows: pl.DataFrame) -> dict[Series, dict[str, LoggpRegion]]:
    """:func:`region_loggp`'s rows per (stack, transport, knobs), then region."""
    lacking = [c for c in LoggpRegion.__required_keys__ if c not in rows.columns]
    if lacking:
        raise ValueError(f"LogGP region rows lack column(s) {', '.join(sorted(lacking))} (region_loggp's table)")
    out: dict[Series, dict[str, LoggpRegion]] = {}
    for r in rows.iter_rows(named=True):
        out.setdefault((r["stack"], r["transport"], r["knobs"] or ""), {})[r["region"]] = cast(LoggpRegion, r)
    return out

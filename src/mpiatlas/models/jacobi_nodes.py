"""Hybrid MPI + OpenMP vs pure MPI Jacobi over 1..N nodes at equal core counts (issue 24, item 2).

From ``kernel_jacobi.parquet`` (one record per rank per cell, ``ok`` cells only): for every placement
(stack / transport / mapping over its nodes: ``core`` on one node, ``node2`` over two, ``core-n2`` filling
two, ...), problem (mode and size), nodes used (the ranks' distinct hosts) and core count, each hybrid launch shape (ranks × threads, threads > 1) beside the pure
MPI one at the same cores (cores × 1). Per cell (one launch): the bytes a rank sends per step (its
halo faces; mean over ranks) and their total over ranks, messages per rank, the halo-exchange and
Allreduce times per step, mean and minimum over ranks (the minimum is the rank that waited least for
the others), and the slowest rank's iteration. Over repetitions: the median of each time with its 95 %
bootstrap CI, the hybrid/pure ratio of the medians with a bootstrap CI (repetitions of each side
resampled), and the run-to-run spread of the iteration time, (max − min) / median. Ratios are formed
only where both launches solved the same global grid (the records' ``global_dims``; weak mode gives
every core L³ points, so hybrid and pure MPI on the same cores do).

Bytes and messages are the decomposition's, the same in every repetition: their ratio is exact.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import polars as pl

from mpiatlas.models.kernel_common import json_num, percentile_ci, usable
from mpiatlas.models.kernel_jacobi import problem_of
from mpiatlas.stats.aggregate import median_ci

# Per-cell times whose medians over repetitions the study reports (column: what it is).
TIMES = ("halo_mean_us", "halo_min_us", "allreduce_mean_us", "allreduce_min_us", "iteration_us")
N_BOOT = 999
SEED = 0


def cell_rows(df: pl.DataFrame) -> pl.DataFrame:
    """One row per cell: its shape, bytes and messages, and its times over ranks."""
    threads = "threads" if "threads" in df.columns else "cell_threads"
    # The nodes a launch used: its ranks' hosts (a cell filling nodes, core-n2, may use fewer than it was
    # given), else the cell's own count (1 for tables written before cells spanned nodes).
    nodes = (pl.col("host").n_unique() if "host" in df.columns else
             pl.col("nodes").first() if "nodes" in df.columns else pl.lit(1))
    cells = (df.group_by("cell", maintain_order=True).agg(
        pl.col("label").first(), pl.col("stack").first(), pl.col("transport").first(),
        nodes.cast(pl.Int64).alias("nodes"), pl.col("np").first().cast(pl.Int64),
        pl.col(threads).first().cast(pl.Int64).alias("threads"), pl.col("rep").first(),
        pl.col("oversubscribed").any(), pl.col("mode").first(), pl.col("L").first() if "L" in df.columns
        else pl.lit(None).alias("L"), pl.col("N").first() if "N" in df.columns else pl.lit(None).alias("N"),
        pl.col("bytes_sent").mean().alias("bytes_per_rank"), pl.col("bytes_sent").sum().alias("bytes_total"),
        pl.col("messages").mean().alias("messages_per_rank"),
        pl.col("halo_us").mean().alias("halo_mean_us"), pl.col("halo_us").min().alias("halo_min_us"),
        pl.col("allreduce_us").mean().alias("allreduce_mean_us"),
        pl.col("allreduce_us").min().alias("allreduce_min_us"), pl.col("iteration_us").max(),
        (pl.col("global_dims").first() if "global_dims" in df.columns
         else pl.lit(None, dtype=pl.List(pl.Int64)).alias("global_dims"))))
    problems = [problem_of(r) for r in cells.select("mode", "L", "N").iter_rows(named=True)]
    return cells.with_columns(pl.Series("problem", problems, dtype=pl.String),
                              (pl.col("np") * pl.col("threads")).alias("cores"))


class MedianCI(TypedDict):
    """A time's median over repetitions and its 95 % CI (None: non-finite; no CI from one repetition)."""

    median: float | None
    ci: list[float | None]


class RatioCI(TypedDict):
    """A ratio of medians and its 95 % percentile-bootstrap CI (None where there is none)."""

    ratio: float | None
    ci: list[float | None]


def _median_ci(values: list[float]) -> MedianCI:
    arr = np.asarray(values, dtype=float)
    low, high = median_ci(arr) if arr.size > 1 else (float("nan"), float("nan"))
    return {"median": json_num(np.median(arr)), "ci": [json_num(low), json_num(high)]}


def ratio_ci(a: list[float], b: list[float], *, seed: int = SEED) -> RatioCI:
    """median(a) / median(b) and its 95 % percentile-bootstrap CI, each side's repetitions resampled
    (no CI with a single repetition on either side)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0 or np.median(xb) == 0:
        return {"ratio": None, "ci": [None, None]}
    ratio = float(np.median(xa) / np.median(xb))
    if xa.size < 2 or xb.size < 2:
        return {"ratio": json_num(ratio), "ci": [None, None]}
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(xa, size=(N_BOOT, xa.size)), axis=1)
    mb = np.median(rng.choice(xb, size=(N_BOOT, xb.size)), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"ratio": json_num(ratio), "ci": percentile_ci(ma / mb)}


def _point(cells: pl.DataFrame) -> dict[str, Any]:
    """A launch shape's repetitions: its counts and each time's median and CI."""
    first = cells.row(0, named=True)
    iteration = cells["iteration_us"].to_numpy()
    middle = float(np.median(iteration))
    return {
        "np": first["np"], "threads": first["threads"], "n_reps": cells.height,
        "global_dims": list(first["global_dims"] or []),
        "oversubscribed": bool(cells["oversubscribed"].any()),
        "bytes_per_rank": json_num(cells["bytes_per_rank"].median()),
        "bytes_total": json_num(cells["bytes_total"].median()),
        "messages_per_rank": json_num(cells["messages_per_rank"].median()),
        **{t: _median_ci(cells[t].to_list()) for t in TIMES},
        "spread": json_num((iteration.max() - iteration.min()) / middle) if cells.height > 1 and middle else None,
        "_reps": {t: cells[t].to_list() for t in TIMES},
    }


def hybrid_over_nodes(df: pl.DataFrame | None) -> list[dict[str, Any]]:
    """Every hybrid shape beside the pure MPI shape at its core count, per placement and problem,
    ordered by stack/transport, problem, nodes and cores (see the module docstring)."""
    df = usable(df)
    if df is not None and "grid_explicit" in df.columns:
        # Process grids asked for (procdims) are compared at their P elsewhere (kernel_grids): here each
        # shape runs on the stack's own grid, so repetitions of one shape are one decomposition.
        df = df.filter(~pl.col("grid_explicit").fill_null(False))
    if df is None or df.height == 0:
        return []
    cells = cell_rows(df)
    out = []
    for (label, problem, _, cores), group in cells.group_by(["label", "problem", "nodes", "cores"],
                                                              maintain_order=True):
        pure_cells = group.filter(pl.col("threads") == 1)
        pure = _point(pure_cells) if pure_cells.height else None
        for _, shape in group.filter(pl.col("threads") > 1).group_by(["np", "threads"], maintain_order=True):
            hybrid = _point(shape)
            first = shape.row(0, named=True)
            row = {
                "label": label, "stack": first["stack"], "transport": first["transport"], "problem": problem,
                "nodes": first["nodes"], "cores": cores,
                "hybrid": f"{hybrid['np'] // first['nodes']} × {hybrid['threads']}"
                if hybrid["np"] % first["nodes"] == 0 else f"{hybrid['np']} × {hybrid['threads']} (filled)",
                "pure": f"{pure['np'] // first['nodes']} × 1" if pure and pure["np"] % first["nodes"] == 0
                else (f"{pure['np']} × 1 (filled)" if pure else None),
                **{f"hybrid_{k}": v for k, v in hybrid.items() if not k.startswith("_")},
                **{f"pure_{k}": (v if pure else None) for k, v in (pure or hybrid).items() if not k.startswith("_")},
            }
            # Ratios compare equal work only: both launches solved the same global grid.
            equal = pure is not None and bool(hybrid["global_dims"]) and hybrid["global_dims"] == pure["global_dims"]
            row["equal_work"] = equal
            row["bytes_ratio"] = (json_num(hybrid["bytes_total"] / pure["bytes_total"])
                                  if pure and equal and pure["bytes_total"] else None)
            for t in ("halo_mean_us", "allreduce_mean_us", "iteration_us"):
                row[f"{t[:-3]}_ratio"] = (ratio_ci(hybrid["_reps"][t], pure["_reps"][t]) if pure and equal
                                          else {"ratio": None, "ci": [None, None]})
            out.append(row)
    return sorted(out, key=lambda r: (r["stack"], r["transport"], r["problem"], r["nodes"], r["cores"], r["hybrid"]))

"""Process grids compared at one P: what the shape of the grid costs matsum and jacobi.

For every stack/transport/mapping, problem and P that ran more than one grid (the explicit
``procdims`` grids of mpiatlas.matrix.kernel_sweeps, or the MPI_Dims_create grids of several matsum
``topo`` values) or any explicit grid: each grid's time per iteration of its slowest rank, the
median over repetitions with a 95 % bootstrap CI of that median, and its ratio to the fastest
grid. A grid is a fact of each record (``procdims``); ``grid_explicit`` (added when tidy builds
the rows) says whether it was asked for.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mpiatlas.models.kernel_common import LABEL_COLUMNS, bootstrap_medians, json_num, percentile_ci, size_text
from mpiatlas.models.kernel_records import GridComparison, GridPoint

N_BOOT_GRIDS = 400


def grid_expr(column: str = "procdims") -> pl.Expr:
    """A grid list column as text: [2, 1] -> ``2×1`` (``?`` where a record has none)."""
    return (pl.col(column).list.eval(pl.element().cast(pl.String)).list.join("×")
            .replace("", None).fill_null("?"))


def with_grid_facts(df: pl.DataFrame) -> pl.DataFrame:
    """``grid`` (``2×1``) and ``explicit`` columns; tables tidied before grid sweeps existed have
    only MPI_Dims_create grids."""
    if "procdims" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.List(pl.Int64)).alias("procdims"))
    explicit = pl.col("grid_explicit").fill_null(False) if "grid_explicit" in df.columns else pl.lit(False)
    return df.with_columns(grid_expr().alias("grid"), explicit.alias("explicit"))


def compare_grids(cells: pl.DataFrame, keys: list[str], value: str, extras: list[str], *,
                  seed: int = 0) -> list[GridComparison]:
    """``cells``: one row per cell and grid, with ``keys``, ``grid``, ``explicit``, ``procdims``,
    ``value`` and ``extras``. Per key with several grids (or an explicit one): every grid, fastest first."""
    rng = np.random.default_rng(seed)
    out = []
    extras = [c for c in extras if c in cells.columns]
    for key, grp in cells.group_by(keys, maintain_order=True):
        per_grid = (grp.group_by(["grid", "explicit"], maintain_order=True)
                    .agg(pl.col("procdims").first(), pl.col(value).median().alias("measured"),
                         pl.col(value).alias("reps"), *(pl.col(c).median() for c in extras))
                    .sort("measured"))
        if per_grid.height < 2 and not per_grid["explicit"].any():
            continue
        best = per_grid.row(0, named=True)
        grids = []
        for r in per_grid.iter_rows(named=True):
            boots = np.fromiter((b[0] for b in bootstrap_medians([r["reps"]], rng, N_BOOT_GRIDS)), dtype=float)
            low, high = percentile_ci(boots) if len(r["reps"]) > 1 else [None, None]
            grids.append(GridPoint(
                grid=r["grid"], procdims=tuple(r["procdims"] or ()), explicit=bool(r["explicit"]),
                measured_us=json_num(r["measured"]), ci_us=(low, high), n_reps=len(r["reps"]),
                reps_us=tuple(json_num(v) for v in r["reps"]),
                vs_best=json_num(r["measured"] / best["measured"]) if best["measured"] else None,
                extras={c: json_num(r[c]) for c in extras}))
        slowest = grids[-1]
        out.append(GridComparison(
            key=dict(zip(keys, key)), value=value, grids=tuple(grids), best=best["grid"], spread=slowest.vs_best,
            headline=f"fastest grid {best['grid']}" + (
                f"; {slowest.grid} takes {slowest.vs_best:.2f}×" if len(grids) > 1 and slowest.vs_best is not None
                else "")))
    return out


def matsum_grids(df: pl.DataFrame | None, *, seed: int = 0) -> list[GridComparison]:
    """Grid comparisons of matsum: per stack/transport/mapping, dims, dist and P; the time is the
    slowest rank's ``total_us`` (scatter + compute + gather), phases beside it."""
    if df is None or df.height == 0:
        return []
    df = with_grid_facts(df)
    if "dims" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("dims"))
    df = df.with_columns(pl.col("dims").map_elements(size_text, return_dtype=pl.String).alias("dims"))
    phases: list[str] = [c for c in ("scatter_us", "compute_us", "gather_us") if c in df.columns]
    keys = [*LABEL_COLUMNS, "dims", "dist", "np"]
    cells = (df.group_by([*keys, "cell", "topo", "grid", "explicit"], maintain_order=True)
             .agg(pl.col("procdims").first(), pl.col("total_us").max(), *(pl.col(c).max() for c in phases)))
    return compare_grids(cells, keys, "total_us", phases, seed=seed)


def jacobi_grids(cells: pl.DataFrame, *, seed: int = 0) -> list[GridComparison]:
    """Grid comparisons of one stack/transport/mapping's jacobi cells (kernel_jacobi's per-cell
    rows): per problem (mode and size), threads and P; the time is the slowest rank's iteration."""
    cells = cells.with_columns(grid_expr().alias("grid"))
    return compare_grids(cells, ["problem", "threads", "np"], "iteration_us",
                         ["halo_us", "bytes_per_rank", "mlups_total"], seed=seed)

"""What the kernel sections (ring, matsum, jacobi, pingpong/coll) share: titles, cells, notices, tables.

Each kernel section reads ``kernel_<name>.parquet`` (``data.kernel_table``) and ``fits/kernels.json``
(``data.kernel_fits``, :mod:`mpiatlas.models.kernels`, :mod:`mpiatlas.models.kernel_p2p`).
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl

from mpiatlas.models.json_fields import JsonObject
from mpiatlas.models.kernel_records import GridComparison
from mpiatlas.stats.quality import trusted
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Heading, Notice, Table, Text, cell
from mpiatlas.report.charts import CHART_H, OVER, chart_spec, rounded
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_bool, fmt_ci, fmt_num

KERNEL_TITLES = {
    "ring": "Kernel: message ring",
    "matsum": "Kernel: distributed matrix sum",
    "jacobi": "Kernel: 3-D Jacobi halo exchange",
}


@dataclass
class KernelOpening:
    """What a modelled kernel's section (ring, matsum, jacobi) starts from: its table and the opening
    blocks (the description, then the notices); the section reads its fits as records."""

    df: pl.DataFrame | None
    blocks: list[Block]


def kernel_opening(data: ReportData, name: str, description: str) -> KernelOpening | None:
    """None when the campaign has neither records nor fits of kernel ``name`` (no section)."""
    df, fits = data.kernel_table(name), data.kernel_fits(name)
    if df is None and not fits:
        return None
    blocks: list[Block] = [Text(description), *no_fit_notice(name, fits)]
    if df is not None:
        blocks += status_notice(df, name)
    return KernelOpening(df, blocks)


def over_cell(over: object) -> Cell:
    return Cell(fmt_bool(over), cls="bad" if over else None, title=OVER if over else None)


def err_cell(rel: float | None) -> Cell:
    if rel is None:
        return Cell(DASH)
    return Cell(f"{100 * rel:+.0f} %", cls="bad" if abs(rel) > 0.25 else "ok", title="model / measured − 1")


def status_notice(df: pl.DataFrame, name: str) -> list[Block]:
    if "cell_status" not in df.columns:
        return []
    bad = df.filter(pl.col("cell_status") != "ok").get_column("cell").unique().sort().to_list()
    if not bad:
        return []
    return [Notice(f"{len(bad)} {name} cell(s) produced records but are not ok (see Campaign): their rows are "
                   "kept in the table but left out of the models.", "warn", bad[:20])]


def no_fit_notice(name: str, fits: list[JsonObject] | None) -> list[Block]:
    if fits is None:
        return [Notice(f"No {name} model (fits/kernels.json missing or without '{name}'): measurements only.", "warn")]
    errors = [f"{f.get('label')}: {f['error']}" for f in fits if "error" in f]
    return [Notice(f"Some {name} models could not be fitted.", "warn", errors)] if errors else []


def raw_table(df: pl.DataFrame, keys: list[str], value: str) -> Table:
    keys = [k for k in keys if k in df.columns]
    ok = trusted(df.filter(pl.col("cell_status") == "ok") if "cell_status" in df.columns else df)
    agg = (ok.group_by(keys).agg(pl.col(value).median().alias("median"), pl.col("cell").n_unique().alias("cells"))
           .sort(keys))
    return Table([*keys, f"median {value}", "cells"],
                 [[cell(r[k]) for k in keys] + [Cell(fmt_num(r["median"]), cls="num"), cell(r["cells"])]
                  for r in agg.iter_rows(named=True)], caption="Measurements (no model available).")


def topo_text(topo: object) -> str:
    if isinstance(topo, (list, tuple)):  # a record's topo is a tuple, a file's a list
        return ",".join(map(str, topo))
    return DASH if topo is None else str(topo)



# -- process grids compared at one P (matsum, jacobi: mpiatlas.models.kernel_grids) --------------

GRID_EXPLICIT = "asked for (procdims)"
GRID_DEFAULT = "MPI_Dims_create"


def grid_blocks(entries: list[GridComparison], facet_keys: list[tuple[str, str, str]], value_title: str,
                extras: list[tuple[str, str]], title: str) -> list[Block]:
    """A table of every grid (fastest first per comparison) and a chart of their times with the
    95 % CI of the median and every repetition, one facet per comparison. ``facet_keys``: (coordinate
    of the comparison's key, column title, prefix in the facet's title) naming a comparison; ``extras``:
    (grid extra, column title) of the per-grid numbers beside the time."""
    if not entries:
        return []
    rows, points, reps = [], [], []
    for entry in entries:
        facet = " · ".join(f"{prefix}{entry.key.get(key)}" for key, _, prefix in facet_keys)
        for g in entry.grids:
            lo, hi = g.ci_us
            source = GRID_EXPLICIT if g.explicit else GRID_DEFAULT
            rows.append([cell(entry.key.get(key)) for key, _, _ in facet_keys] + [
                cell(g.grid), cell(source), Cell(f"{fmt_num(g.measured_us)} {fmt_ci(g.ci_us)}", cls="num"),
                Cell(f"{fmt_num(g.vs_best)}×", cls="ok" if g.grid == entry.best else "num"),
                *(Cell(fmt_num(g.extras.get(key)), cls="num") for key, _ in extras), cell(g.n_reps)])
            points.append({"comparison": facet, "grid": g.grid, "measured_us": g.measured_us, "ci_low_us": lo,
                           "ci_high_us": hi, "source": source, "vs_best": g.vs_best, "n_reps": g.n_reps})
            reps += [{"comparison": facet, "grid": g.grid, "rep_us": v} for v in g.reps_us]
    table = Table([*(name for _, name, _ in facet_keys), "grid", "grid from", f"{value_title} [95 % CI]",
                   "vs fastest", *(name for _, name in extras), "reps"], rows, filterable=True,
                  scroll=len(rows) > 25,
                  caption="Median over repetitions of the slowest rank; CI: bootstrap of the median. "
                          "Fastest grid first in each comparison.")
    chart = grid_chart(pl.DataFrame(points), pl.DataFrame(reps, schema={"comparison": pl.String, "grid": pl.String,
                                                                        "rep_us": pl.Float64}), value_title)
    return [Heading(title), table, ChartBlock(chart_spec(chart))]


def grid_chart(points: pl.DataFrame, reps: pl.DataFrame, value_title: str) -> alt.TopLevelMixin:
    """Per grid the median (dot, colour: asked for or MPI_Dims_create) with its CI (rule) and every
    repetition (grey ticks), log time axis (a grid costs a factor), one facet per comparison."""
    data = pl.concat([rounded(points), rounded(reps)], how="diagonal_relaxed")
    data = data.select(c for c, t in data.schema.items() if t != pl.Null)
    x = alt.X("grid:N", title="process grid", sort=None)
    y_scale = alt.Scale(type="log")
    tips = ["comparison:N", "grid:N", "source:N", alt.Tooltip("measured_us:Q", format=".4~g"),
            alt.Tooltip("vs_best:Q", format=".3~g"), "n_reps:Q"]
    median = alt.Chart().transform_filter("isValid(datum.measured_us)").mark_point(size=90, filled=True).encode(
        x=x, y=alt.Y("measured_us:Q", title=value_title, scale=y_scale),
        color=alt.Color("source:N", title="grid", scale=alt.Scale(domain=[GRID_EXPLICIT, GRID_DEFAULT])),
        tooltip=tips)
    layers = [median]
    if "ci_low_us" in data.columns and "ci_high_us" in data.columns:
        layers.insert(0, alt.Chart().transform_filter("isValid(datum.ci_low_us)").mark_rule().encode(
            x=x, y=alt.Y("ci_low_us:Q", scale=y_scale), y2="ci_high_us:Q", tooltip=tips))
    if "rep_us" in data.columns:
        layers.insert(0, alt.Chart().transform_filter("isValid(datum.rep_us)").mark_tick(color="#999").encode(
            x=x, y=alt.Y("rep_us:Q", scale=y_scale), tooltip=["comparison:N", "grid:N",
                                                             alt.Tooltip("rep_us:Q", format=".4~g")]))
    chart: alt.FacetChart = alt.layer(*layers, data=data).properties(
        width=max(120, 60 * data["grid"].n_unique()), height=CHART_H - 60).facet(
        facet=alt.Facet("comparison:N", title=None), columns=3).resolve_scale(x="independent", y="independent")
    return chart

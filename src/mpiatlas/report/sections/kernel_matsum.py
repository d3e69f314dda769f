"""Section "Kernel: distributed matrix sum": Amdahl with communication, and the gather tree's signature."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.models.matsum_records import PHASES, MatsumFit, MatsumPoint, Topo
from mpiatlas.report.blocks import Cell, ChartBlock, Details, Heading, Notice, Section, Table, cell
from mpiatlas.report.charts import CHART_H, CHART_W, FITTED, OVER, chart_spec, color, measured_vs_model, rounded
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import fmt_ci, fmt_num
from mpiatlas.report.kernel_blocks import KERNEL_TITLES, err_cell, grid_blocks, kernel_opening
from mpiatlas.report.kernel_blocks import over_cell, raw_table, topo_text


def section_kernel_matsum(data: ReportData) -> Section | None:
    opening = kernel_opening(data, "matsum", (
        "Rank 0 scatters A and B, every rank adds its part, rank 0 gathers C; T = total time of one iteration "
        "(slowest rank, median over repetitions). Model (Amdahl with communication): T(P) = s + p/min(P, cores) "
        "+ c·⌈log₂ P⌉, fitted with bounded least squares (s, p, c ≥ 0) on relative residuals; 95 % CIs from a "
        "bootstrap over repetitions; serial fraction s/(s+p). P beyond the node's cores cannot divide the work "
        "(oversubscribed ranks share cores). One series per dims, topo and dist over the stack's own grids "
        "(MPI_Dims_create); grids asked for (procdims) run at one P each and are compared below. With dist slab "
        "the grid only orders the ranks (slabs along x); with block it splits the matrix."))
    if opening is None:
        return None
    df, blocks = opening.df, opening.blocks
    fits = data.matsum_fits() or []
    good = [f for f in fits if f.fitted]
    # Several dims (a sweep) make several series per stack: their names say which.
    several_dims = len({f.dims for f in fits}) > 1
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "dims", "topo", "dist", "cores", "s (µs) [CI]", "p (µs) [CI]",
             "c (µs) [CI]", "serial fraction [CI]", "max speedup 1/f"],
            [[cell(f.label), cell(f.dims), cell(topo_text(f.topo)), cell(f.dist), cell(f.cores),
              Cell(f"{fmt_num(f.s_us)} {fmt_ci(f.s_ci_us)}", cls="num"),
              Cell(f"{fmt_num(f.p_us)} {fmt_ci(f.p_ci_us)}", cls="num"),
              Cell(f"{fmt_num(f.c_us)} {fmt_ci(f.c_ci_us)}", cls="num"),
              Cell(f"{fmt_num(f.serial_fraction)} {fmt_ci(f.serial_fraction_ci)}", cls="num"),
              Cell(fmt_num(f.max_speedup), cls="num")] for f in good],
            caption="Fitted Amdahl parameters.",
        ))
        failing = [f"{f.label}{_series_extra(f)}: {f.fails_where}" for f in good if f.fails_where]
        if failing:
            blocks.append(Notice("Where the model fails:", "info", failing))
        rows = []
        residuals: list[tuple[str, MatsumPoint]] = []
        curves = []
        for f in good:
            series = (f"{f.label} · {'dims ' + str(f.dims) + ' · ' if several_dims else ''}"
                      f"topo {topo_text(f.topo)} · {f.dist}")
            for p in f.points:
                residuals.append((series, p))
                rows.append({"label": f.label, "series": series, "np": p.np, "measured_us": p.measured_us,
                             "predicted_us": p.predicted_us, "rel_err": p.rel_err,
                             "placement": OVER if p.oversubscribed else FITTED, "n_reps": p.n_reps,
                             **{k: p.phases.get(k) for k in PHASES}})
            if f.s_us is None or f.p_us is None or f.c_us is None:
                continue  # a fit the bootstrap left without a figure: no curve to draw
            grid = np.arange(1, max(p.np for p in f.points) + 1, dtype=float)
            model = (f.s_us + f.p_us / np.minimum(grid, f.cores) + f.c_us * np.ceil(np.log2(grid)))
            curves += [{"label": f.label, "series": series, "np": int(g), "model_us": float(m)}
                       for g, m in zip(grid, model)]
        if rows:
            pts = pl.DataFrame(rows)
            curve = pl.DataFrame(curves)
            chart = measured_vs_model(pts, "np", "processes P", "measured_us", None, "time per iteration (µs)",
                                 "Matsum: measured (marks) and Amdahl fit (dashed) vs P", facet=None)
            line = alt.Chart(rounded(curve)).mark_line(strokeDash=[5, 3]).encode(
                x="np:Q", y=alt.Y("model_us:Q", scale=alt.Scale(type="log")),
                color=color(sorted(curve.get_column("series").unique().to_list())),
                tooltip=["series:N", "np:Q", alt.Tooltip("model_us:Q", format=".4~g")])
            blocks.append(ChartBlock(chart_spec(alt.layer(line, chart).properties(
                width=2 * CHART_W, height=CHART_H + 40))))
            blocks.append(Details("Matsum residuals", [Table(
                ["Series", "P", "Oversub.", "Measured (µs)", "Model (µs)", "Error", "scatter (µs)", "compute (µs)",
                 "gather (µs)", "Reps"],
                [[cell(series), cell(p.np), over_cell(p.oversubscribed),
                  Cell(fmt_num(p.measured_us), cls="num"), Cell(fmt_num(p.predicted_us), cls="num"),
                  err_cell(p.rel_err), *(Cell(fmt_num(p.phases.get(k)), cls="num") for k in PHASES),
                  cell(p.n_reps)] for series, p in residuals],
                filterable=True, caption="Phases: slowest rank, median over repetitions.")], open=True))
    blocks += grid_blocks(
        data.matsum_grids() or [],
        [("label", "Stack / transport / mapping", ""), ("dims", "dims", "dims "), ("dist", "dist", ""),
         ("np", "P", "P=")], "time per iteration (µs)",
        [("scatter_us", "scatter (µs)"), ("compute_us", "compute (µs)"), ("gather_us", "gather (µs)")],
        "Process grids at equal P: the cost of the grid's shape")
    gather = [(f, g) for f in fits for g in f.gather_order]
    if gather:
        blocks.append(Heading("Gather time per rank: the tree's signature"))
        blocks.append(Table(
            ["Stack / transport / mapping", "P", "gather µs by rank", "slowest first", "binomial subtree sizes",
             "ρ(binomial)", "ρ(linear)", "verdict"],
            [[cell(f.label), cell(g.np),
              Cell(", ".join(f"{r}: {fmt_num(v)}" for r, v in g.gather_us_by_rank.items())),
              Cell(" > ".join(map(str, g.slowest_first))),
              Cell(", ".join(f"{r}: {s}" for r, s in g.binomial_subtree.items())),
              Cell(fmt_num(g.spearman_binomial)), Cell(fmt_num(g.spearman_linear)),
              cell(g.verdict)] for f, g in gather],
            caption="A binomial-tree gather keeps a rank waiting in proportion to its subtree (rank 2 of 4 waits "
                    "for rank 3); a linear gather serves ranks in order. ρ = Spearman correlation over the non-root "
                    "ranks.",
        ))
    per_rank = [(f, p, r) for f in fits for p in f.phases_by_rank for r in p.ranks]
    if per_rank:
        blocks.append(Heading("Phases per rank: scatter, compute, gather"))
        blocks.append(Table(
            ["Stack / transport / mapping", "dims", "topo", "dist", "P", "rank", "scatter (µs)", "compute (µs)",
             "gather (µs)", "total (µs)", "reps"],
            [[cell(f.label), cell(f.dims), cell(_topo_cell(f.topo)), cell(f.dist), cell(p.np),
              cell(r.get("rank")), Cell(fmt_num(r.get("scatter_us")), cls="num"),
              Cell(fmt_num(r.get("compute_us")), cls="num"), Cell(fmt_num(r.get("gather_us")), cls="num"),
              Cell(fmt_num(r.get("total_us")), cls="num"), cell(r.get("n_reps"))] for f, p, r in per_rank],
            filterable=True, scroll=len(per_rank) > 25,
            caption="Each rank's own times (medians over repetitions): the root's scatter and gather are the "
                    "sends and receives of every block; a rank's gather time includes its wait for the root."))
    if not good and not data.matsum_grids() and df is not None:
        blocks.append(raw_table(df, ["label", "dims", "variant_group", "np", "topo", "dist", "oversubscribed"],
                                "total_us"))
    return Section(KERNEL_TITLES["matsum"], blocks, id="kernel-matsum")


def _series_extra(f: MatsumFit) -> str:
    """`` (dims=…, topo=…, dist=…)``: which of a stack's matsum series a line is about."""
    topo = f.topo
    parts = [f"dims={f.dims}" if f.dims not in (None, "?") else None,
             f"topo={''.join(map(str, topo))}" if isinstance(topo, tuple) else
             (f"topo={topo}" if topo is not None else None),
             f"dist={f.dist}" if f.dist is not None else None]
    shown = [p for p in parts if p]
    return f" ({', '.join(shown)})" if shown else ""


def _topo_cell(topo: Topo) -> object:
    """The topo as the per-rank table has always shown it (a list as a list)."""
    return list(topo) if isinstance(topo, tuple) else topo

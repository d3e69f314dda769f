"""Section "Collectives: measured against predicted": latency vs P of every modelled collective ×
algorithm measured at several P, with the region model's prediction and, where the campaign measured
several algorithms, LogGP calibrated on the others; the error per P and the median |error| per
algorithm. The figures come from :func:`mpiatlas.models.measured_vs_predicted.campaign_comparison`;
this module only draws them."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from mpiatlas.matrix.layout import TOPOLOGIES_TABLE
from mpiatlas.models.measured_vs_predicted import campaign_comparison
from mpiatlas.node.topology import Topology, TopologyError
from mpiatlas.node.topology_record import read_topologies
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.charts import CHART_H, CHART_W, chart_spec, rounded
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, finite, fmt_bytes, fmt_ci, fmt_num, fmt_pct
from mpiatlas.report.imb import family_summary
from mpiatlas.stats.region_loggp import region_loggp

TITLE = "Collectives: measured against predicted"
SECTION_ID = "predicted"
MEASURED, REGION, CALIBRATED = "measured", "region model", "LogGP, calibrated on the others"
MEASURED_OG = "LogGP, measured o and g"
_KINDS = [MEASURED, REGION, MEASURED_OG, CALIBRATED]
_DASHES = {MEASURED: [1, 0], REGION: [6, 3], MEASURED_OG: [8, 2, 2, 2], CALIBRATED: [2, 2]}


def _long(points: pl.DataFrame) -> pl.DataFrame:
    """One row per (algorithm, P, kind): measured, region model, calibrated, with the error."""
    base = ["algorithm", "np", "bytes", "measured_us"]
    parts = [
        points.select(*base, pl.lit(MEASURED).alias("kind"), pl.col("measured_us").alias("t_us"),
                      pl.lit(None, dtype=pl.Float64).alias("error")),
        points.select(*base, pl.lit(REGION).alias("kind"), pl.col("predicted_us").alias("t_us"), "error"),
        points.select(*base, pl.lit(MEASURED_OG).alias("kind"), pl.col("loggp_us").alias("t_us"),
                      pl.col("loggp_error").alias("error")),
        points.select(*base, pl.lit(CALIBRATED).alias("kind"), pl.col("calibrated_us").alias("t_us"),
                      pl.col("calibrated_error").alias("error")),
    ]  # fmt: skip
    return rounded(pl.concat(parts).filter(pl.col("t_us").is_not_null()))


def _charts(title: str, points: pl.DataFrame) -> list[ChartBlock]:
    data = _long(points)
    algs = sorted(data.get_column("algorithm").unique().to_list())
    nps = sorted(data.get_column("np").unique().to_list())
    kinds = [k for k in _KINDS if k in set(data.get_column("kind").to_list())]
    axis = alt.Axis(format="d", values=nps) if len(nps) <= 16 else alt.Axis(format="d")
    x = alt.X("np:Q", title="processes (P)", scale=alt.Scale(type="log", base=2), axis=axis)
    colour = alt.Color("algorithm:N", scale=alt.Scale(domain=algs, scheme="tableau10"), title="algorithm")
    dash = alt.StrokeDash("kind:N", scale=alt.Scale(domain=kinds, range=[_DASHES[k] for k in kinds]),
                          title="line")  # fmt: skip
    tips = [alt.Tooltip("algorithm:N"), alt.Tooltip("kind:N"), alt.Tooltip("np:Q", title="P"),
            alt.Tooltip("t_us:Q", title="t (µs)", format=".4~g"),
            alt.Tooltip("measured_us:Q", title="measured (µs)", format=".4~g"),
            alt.Tooltip("error:Q", title="error", format="+.1%")]  # fmt: skip
    latency = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=25)).encode(
        x=x, y=alt.Y("t_us:Q", title="latency (µs)", scale=alt.Scale(type="log")), color=colour, strokeDash=dash,
        detail="kind:N", tooltip=tips,
    ).properties(width=CHART_W, height=CHART_H, title=f"{title}: latency vs P")  # fmt: skip
    errors = alt.Chart(data.filter(pl.col("error").is_not_null())).mark_line(point=alt.OverlayMarkDef(size=25)).encode(
        x=x, y=alt.Y("error:Q", title="(predicted − measured) / measured", axis=alt.Axis(format="+%")),
        color=colour, strokeDash=dash, detail="kind:N", tooltip=tips,
    ).properties(width=CHART_W, height=CHART_H, title=f"{title}: error per P")  # fmt: skip
    zero = alt.Chart(pl.DataFrame({"error": [0.0]})).mark_rule(color="#6b7280").encode(y="error:Q")
    return [
        ChartBlock(
            chart_spec(alt.hconcat(latency, alt.layer(errors, zero))),
            f"{title}: measured median (solid), region model (dashed), LogGP with the o and g measured per region "
            "(dash-dot, where the campaign ran loggp cells), LogGP calibrated leave-one-algorithm-out (dotted); "
            "right: the error of each prediction per P.",
        )
    ]


def _figures(r: dict[str, Any], prefix: str) -> list[Cell]:
    """Median |error|, its signed median (which way the model leans) and the worst |error| with its P."""
    if r[f"{prefix}median_abs"] is None:
        return [Cell(DASH, cls="num"), Cell(DASH, cls="num")]
    signed = r[f"{prefix}median_signed"]
    return [Cell(f"{fmt_pct(r[f'{prefix}median_abs'])} ({'+' if signed >= 0 else ''}{fmt_pct(signed)})", cls="num"),
            Cell(f"{fmt_pct(r[f'{prefix}worst_abs'])} at P={r[f'{prefix}worst_np']}", cls="num")]  # fmt: skip


def _table(title: str, summary: pl.DataFrame) -> Table:
    rows: list[list[Cell]] = []
    og = summary.get_column("loggp_median_abs").drop_nulls().len() > 0
    for r in summary.iter_rows(named=True):
        rows.append([cell(r["algorithm"]), Cell(fmt_bytes(r["bytes"])), cell(r["points"]), *_figures(r, ""),
                     *(_figures(r, "loggp_") if og else []), *_figures(r, "calibrated_"),
                     cell(r["calibrated_on"] or DASH)])  # fmt: skip
    og_heads = ["measured o, g: median |error| (signed)", "worst |error|"] if og else []
    return Table(["Algorithm", "Size", "P measured", "region model: median |error| (signed)", "worst |error|",
                  *og_heads, "calibrated: median |error| (signed)", "worst |error|", "calibrated on"], rows,
                 caption=f"{title}: error over P per algorithm (median of |error|, the signed median in "
                 "brackets, and the worst with its P)")  # fmt: skip


def _og_cell(r: dict[str, Any], name: str) -> Cell:
    """``median [low, high]`` (the CI only where there is one: a single trial has no spread)."""
    ci = [r[f"{name}_ci_low"], r[f"{name}_ci_high"]]
    text = fmt_num(r[f"{name}_us"]) + (f" {fmt_ci(ci)}" if all(finite(v) for v in ci) else "")
    return Cell(text, cls="num")


def loggp_blocks(og: pl.DataFrame) -> list[Block]:
    """LogGP's o and g per region as the loggp kernel measured them, with their 95 % CIs."""
    rows = [[cell(f"{r['stack']}/{r['transport']}" + (f" [{r['knobs']}]" if r["knobs"] else "")), cell(r["region"]),
             Cell(fmt_bytes(r["bytes"])), _og_cell(r, "overhead"), _og_cell(r, "o_s"), _og_cell(r, "o_r"),
             _og_cell(r, "gap"), _og_cell(r, "rtt"), _og_cell(r, "L"), cell(f"{r['n_trials']} ({r['n_cells']})")]
            for r in og.iter_rows(named=True)]  # fmt: skip
    # L = rtt/2 - o_s - o_r below 0 (its whole CI): the overheads overlap the flight, or, for two
    # ranks time-sharing one cpu (same_core without SMT), hold the peer's turn on it.
    negative = sorted({str(r["region"]) for r in og.iter_rows(named=True)
                       if finite(r["L_ci_high"]) and r["L_ci_high"] < 0})  # fmt: skip
    caveat = ([Notice(f"L < 0 in {', '.join(negative)} (its whole 95 % CI): o_s + o_r exceed half the round trip, "
                      "so the overheads hold time that is not the sender's or receiver's own work (for ranks "
                      "time-sharing one core, the other rank's turn on the cpu); o is an upper bound there and "
                      "LogGP with it over-prices those hops.", "info")] if negative else [])  # fmt: skip
    return [Heading("LogGP parameters measured per region"), *caveat,
            Text("The loggp kernel (src/kernels/loggp.c) between ranks 0 and 1 of each region, by Kielmann's "
                 "parameterised round trip: g = (PRTT(n, 0, s) − PRTT(1, 0, s)) / (n − 1) from bursts of n back-to-"
                 "back messages, o_s the time in MPI_Send, o_r the time in MPI_Recv of a message that has already "
                 "arrived, L = rtt / 2 − o_s − o_r; o = (o_s + o_r) / 2 is what the LogGP model charges at each end "
                 "of a message. Medians over all trials of the region's cells, 95 % bootstrap CIs."),
            Table(["Stack/transport", "Region", "Size", "o (µs)", "o_s (µs)", "o_r (µs)", "g (µs)", "round trip (µs)",
                   "L (µs)", "trials (cells)"], rows,
                  caption="LogGP o and g per region: median [95 % CI]")]  # fmt: skip


def recorded_topologies(data: ReportData) -> tuple[dict[str, Topology], str | None]:
    """Host -> the topology the cells' nodes recorded (the tidy directory's ``topologies.json``; none
    without one), and why the file could not be read."""
    if data.tidy_dir is None:
        return {}, None
    try:
        return read_topologies(data.tidy_dir / TOPOLOGIES_TABLE), None
    except TopologyError as exc:
        return {}, str(exc)


def section_predicted(data: ReportData) -> Section | None:
    s = family_summary(data, "collective")
    if s is None or s.height == 0:
        return None  # the Collectives section says why there is nothing
    og = region_loggp(data.kernel_table("loggp"))
    topologies, unreadable = recorded_topologies(data)
    comparison = campaign_comparison(s, data.cells, data.provenance or [], data.hockney, data.node_topology,
                                     loggp_rows=og, topologies=topologies)
    blocks: list[Block] = [
        Text(
            "Every collective × algorithm measured at several process counts, at one message size (4 B, or the "
            "smallest size every P has), against two predictions. Region model: the campaign's own per-region "
            "PingPong λ and B (the λ and B per region table) priced on the schedule Open MPI 4.1 builds, over the "
            "ranks' recorded placement, as the time the last rank has its data. LogGP calibrated: o, g and a "
            "per-level term fitted on the other algorithms of the same series (leave-one-algorithm-out), as the mean "
            "over ranks (IMB's t_avg). Error = (predicted − measured) / measured of the median over repetitions."
        )
    ]
    if og.height:
        blocks += loggp_blocks(og)
    problem = data.topology_problem
    if problem:
        blocks.append(Notice(problem, "info"))
    points = comparison.points
    for (group, coll), g in points.group_by(["group", "collective"], maintain_order=True):
        title = f"{group} · {coll}"
        blocks.append(Heading(title))
        blocks += _charts(title, g)
        blocks.append(
            _table(title, comparison.summary.filter((pl.col("group") == group) & (pl.col("collective") == coll)))
        )
    lines = comparison.note_lines() + ([f"the recorded topologies: {unreadable}"] if unreadable else [])
    if points.height == 0:
        blocks.append(Notice("Nothing is predicted:", "info", lines or ["no modelled collective was measured"]))
    elif lines:
        blocks.append(Notice("Not predicted:", "info", lines))
    return Section(TITLE, blocks, id=SECTION_ID)

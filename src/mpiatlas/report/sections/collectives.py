"""Section "Collectives": IMB collectives per algorithm, latency heatmaps over (size, np), and the
fastest algorithm per point with its gain over the stack's default."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from mpiatlas.models.best_algorithm import best_algorithms
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Details, Heading, Notice, Section, Table, Text, cell, num_cell
from mpiatlas.report.charts import chart_spec, latency_lines, np_chart, rounded, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, finite, fmt_bytes, fmt_pct
from mpiatlas.report.imb import bench_sort_key, coll_series, family_summary, no_summary_text

TITLE = "Collectives"
SECTION_ID = "collectives"
_ROW_HEADER = alt.Header(labelAngle=0, labelAlign="left", labelLimit=260)


def _where(r: dict[str, Any]) -> str:
    size = f" @ {fmt_bytes(r['bytes'])}" if r.get("bytes") is not None else ""
    return f"{r['best']}{size}, np={r['np']}"


def _size_order(df: pl.DataFrame) -> list[str]:
    return [fmt_bytes(b) if b is not None else "n/a" for b in df.get_column("bytes").unique().sort(nulls_last=False)
            .to_list()]


def _latency_blocks(bench: str, df: pl.DataFrame, sized: pl.DataFrame, nps: list[Any]) -> list[Block]:
    out: list[Block] = []
    if sized.height == 0:
        out.append(ChartBlock(chart_spec(np_chart(df, f"{bench}: latency vs processes")),
                              f"{bench} has no message size: latency against the number of processes."))
    else:
        pos = with_size(sized.filter(pl.col("bytes") > 0)).sort("series", "bytes")
        if pos.height:
            chart, n = latency_lines(pos, f"{bench}: latency")
            out.append(ChartBlock(chart_spec(chart), f"{bench}: {n} lines (label · algorithm · np)."))
    if len(nps) > 1 and sized.height:
        hm = with_size(df).with_columns(pl.col("size").fill_null("n/a"))
        sizes = _size_order(df)
        heat = alt.Chart(rounded(hm.select("label", "algorithm", "np", "bytes", "size", "t_median_usec"))).mark_rect(
        ).encode(
            x=alt.X("size:O", sort=sizes, title="message size"),
            y=alt.Y("np:O", sort="descending", title="np"),
            color=alt.Color("t_median_usec:Q", scale=alt.Scale(type="log", scheme="viridis"), title="median t (µs)",
                            legend=alt.Legend(format=".3~g")),
            tooltip=["label:N", "algorithm:N", "np:O", "size:N",
                     alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g")],
        ).properties(width=max(160, 16 * len(sizes)), height=max(60, 18 * len(nps))).facet(
            row=alt.Row("label:N", title=None, header=_ROW_HEADER), column=alt.Column("algorithm:N", title="algorithm"),
        ).properties(title=f"{bench}: latency over (size, np)")
        out.append(ChartBlock(chart_spec(heat), f"{bench}: median latency per algorithm (columns) and label (rows)."))
    elif len(nps) == 1:
        out.append(Text(f"Only np = {nps[0]} was measured for {bench}: no (size × np) heatmap.", cls="muted"))
    return out


def _best_chart(bench: str, best: pl.DataFrame, df: pl.DataFrame, sized: bool, nps: list[Any]) -> ChartBlock:
    b = rounded(with_size(best).with_columns(
        pl.col("size").fill_null("n/a"),
        pl.when(pl.col("speedup").is_not_null())
        .then(pl.concat_str([pl.lit("×"), pl.col("speedup").round(2).cast(pl.String),
                             pl.when(pl.col("separated").fill_null(False)).then(pl.lit("*")).otherwise(pl.lit(""))]))
        .otherwise(pl.lit("")).alias("gain"),
    ).select("label", "np", "bytes", "size", "best", "t_best", "t_default", "speedup", "gain", "n_algorithms"))
    sizes = _size_order(df)
    # Sized collectives: (size × np) per label; size-less ones (Barrier): np × label.
    height: int | alt.Step
    if sized:
        xenc, yenc = alt.X("size:O", sort=sizes, title="message size"), alt.Y("np:O", sort="descending")
        width, height = max(160, 34 * len(sizes)), max(40, 20 * len(nps))
    else:
        xenc, yenc = alt.X("np:O", title="processes (np)"), alt.Y("label:N", title=None)
        width, height = max(120, 40 * len(nps)), alt.Step(22)
    base = alt.Chart().encode(x=xenc, y=yenc)
    chart = alt.layer(
        base.mark_rect().encode(
            color=alt.Color("best:N", title="fastest algorithm", scale=alt.Scale(scheme="set2")),
            tooltip=["label:N", "np:O", "size:N", alt.Tooltip("best:N", title="fastest"),
                     alt.Tooltip("t_best:Q", title="t best (µs)", format=".4~g"),
                     alt.Tooltip("t_default:Q", title="t default (µs)", format=".4~g"),
                     alt.Tooltip("speedup:Q", title="speed-up vs default", format=".3f"),
                     alt.Tooltip("n_algorithms:Q", title="algorithms compared")]),
        base.mark_text(fontSize=9).encode(text="gain:N"),
    ).properties(width=width, height=height)
    chart = chart.facet(row=alt.Row("label:N", title=None, header=_ROW_HEADER), data=b) if sized \
        else chart.properties(data=b)
    chart = chart.properties(title=f"{bench}: fastest algorithm per (size, np)")
    return ChartBlock(chart_spec(chart), f"{bench}: fastest algorithm; text = speed-up over default "
                                         "(* = CIs separated).")


def _choice_tables(bench: str, best: pl.DataFrame) -> list[Block]:
    wins = best.filter((pl.col("best") != "default") & pl.col("speedup").is_not_null())
    summary_rows = []
    for (lab,), g in best.group_by(["label"], maintain_order=True):
        w = g.filter((pl.col("best") != "default") & pl.col("speedup").is_not_null())
        top = w.sort("speedup", descending=True).head(1)
        summary_rows.append([
            cell(lab), cell(g.height), cell(w.height), cell(w.filter(pl.col("separated").fill_null(False)).height),
            num_cell(top.get_column("speedup").item() if top.height else None),
            Cell(_where(top.row(0, named=True)) if top.height else DASH),
        ])
    detail_rows = [[cell(r["label"]), cell(r["np"]), Cell(fmt_bytes(r["bytes"]) if r["bytes"] is not None else "n/a"),
                    cell(r["best"]), num_cell(r["t_best"]), num_cell(r["t_default"]), num_cell(r["speedup"]),
                    Cell(fmt_pct(1 - 1 / r["speedup"]) if finite(r["speedup"]) and r["speedup"] > 0 else DASH,
                         cls="num"),
                    cell(r["separated"])] for r in best.iter_rows(named=True)]
    return [
        Table(["Label", "(size, np) points", "non-default wins", "… with separated CIs", "max speed-up", "where"],
              summary_rows, caption=f"{bench}: algorithm choice vs default"),
        Details(f"{bench}: best algorithm per (label, np, size) — {best.height} rows, {wins.height} non-default wins",
                [Table(["Label", "np", "Size", "Best", "t best (µs)", "t default (µs)", "speed-up", "time saved",
                        "CIs separated"], detail_rows, scroll=True)]),
    ]


def collective_blocks(bench: str, df: pl.DataFrame) -> list[Block]:
    sized = df.filter(pl.col("bytes").is_not_null())
    nps = df.get_column("np").drop_nulls().unique().sort().to_list()
    algs = df.get_column("algorithm").unique().sort().to_list()
    out = _latency_blocks(bench, df, sized, nps)
    if len(algs) <= 1:
        out.append(Text(f"Only algorithm \"{algs[0] if algs else 'default'}\" was measured for {bench}: "
                        "no algorithm comparison.", cls="muted"))
        return out
    best = best_algorithms(df)
    if "default" not in algs:
        out.append(Notice(f"{bench}: no \"default\" algorithm run, so gains over default cannot be computed.",
                          "warn"))
    out.append(_best_chart(bench, best, df, sized.height > 0, nps))
    return out + _choice_tables(bench, best)


def section_collectives(data: ReportData) -> Section:
    s = family_summary(data, "collective")
    if s is None:
        return Section(TITLE, [Notice(no_summary_text(data), "error")], id=SECTION_ID)
    if s.height == 0:
        return Section(TITLE, [Notice("No collective benchmark in the summary.", "info")], id=SECTION_ID)
    s = coll_series(s)
    blocks: list[Block] = [Text(
        "Median latency over repetitions per collective, one line per label · algorithm · np (click the legend "
        "to highlight). With several process counts, heatmaps show latency over (size, np) per algorithm, and "
        "the fastest algorithm per point (lowest median time) with its speed-up over \"default\" "
        "(t_default / t_best; * = the 95 % confidence intervals do not overlap).")]
    over = s.filter(pl.col("oversubscribed").fill_null(False))
    if over.height:
        blocks.append(Notice("Oversubscribed series (timings not representative):", "warn",
                             sorted({f"{b}: {x}" for b, x in over.select("benchmark", "series").iter_rows()})))
    for bench in sorted(s.get_column("benchmark").unique().to_list(), key=bench_sort_key):
        blocks.append(Heading(bench))
        blocks.extend(collective_blocks(bench, s.filter(pl.col("benchmark") == bench)))
    return Section(TITLE, blocks, id=SECTION_ID)

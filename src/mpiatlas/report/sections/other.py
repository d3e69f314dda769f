"""Section "Other benchmarks": IMB benchmarks that are neither point-to-point nor collectives (shown,
never dropped)."""

from __future__ import annotations


import polars as pl

from mpiatlas.report.blocks import Block, ChartBlock, Heading, Section, Text
from mpiatlas.report.charts import chart_spec, latency_lines, np_chart, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.imb import coll_series, family_summary

TITLE = "Other benchmarks"
SECTION_ID = "other"


def section_other(data: ReportData) -> Section | None:
    s = family_summary(data, "other")
    if s is None or s.height == 0:
        return None
    s = coll_series(s)
    blocks: list[Block] = [Text("Benchmarks this report version does not model specifically.")]
    for bench in sorted(s.get_column("benchmark").unique().to_list()):
        df = s.filter(pl.col("benchmark") == bench)
        blocks.append(Heading(bench))
        pos = with_size(df.filter(pl.col("bytes") > 0)).sort("series", "bytes")
        if pos.height:
            blocks.append(ChartBlock(chart_spec(latency_lines(pos, f"{bench}: latency")[0])))
        else:
            blocks.append(ChartBlock(chart_spec(np_chart(df, f"{bench}: latency vs processes"))))
    return Section(TITLE, blocks, id=SECTION_ID)

"""Section "Knob sets": IMB series run with named environment variable sets, compared like algorithms.

Per benchmark: a heatmap of the median time of each knob set relative to the baseline (size x knob
set, one row of panels per series), and the fastest knob set per size with its 95 % CI, chosen by
the same function that names the fastest collective algorithm
(:func:`mpiatlas.models.best_algorithm.best_algorithms`: lowest median, a tie goes to the baseline).
The baseline is ``none`` (the cells without a knob set) when the campaign ran it, else the first
knob set by name.
"""

from __future__ import annotations


import altair as alt
import polars as pl

from mpiatlas.models.best_algorithm import DEFAULT, best_algorithms
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Details, Heading, Notice, Section, Table, Text, cell, num_cell
from mpiatlas.report.charts import chart_spec, rounded, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import fmt_bytes
from mpiatlas.report.imb import bench_sort_key
from mpiatlas.spine.series import knobs_part, without_part

TITLE = "Knob sets"
SECTION_ID = "knobs"
NO_SET = "none"
_ROW_HEADER = alt.Header(labelAngle=0, labelAlign="left", labelLimit=320)


def knob_rows(data: ReportData) -> pl.DataFrame | None:
    """The summary with ``knob_set`` (``none`` for no set) and ``series`` (the label without its knob
    set, the algorithm and np); None when no series ran with a knob set."""
    s = data.summary
    if s is None or not {"knobs", "label", "benchmark", "t_median_usec"} <= set(s.columns):
        return None
    s = s.with_columns(pl.col("knobs").fill_null("").alias("knobs"))
    if s.filter(pl.col("knobs") != "").height == 0:
        return None
    algorithm = pl.col("algorithm").fill_null(DEFAULT) if "algorithm" in s.columns else pl.lit(DEFAULT)
    np_ = pl.col("np").cast(pl.String).fill_null("?") if "np" in s.columns else pl.lit("?")
    return s.with_columns(
        pl.when(pl.col("knobs") == "").then(pl.lit(NO_SET)).otherwise(pl.col("knobs")).alias("knob_set"),
        pl.concat_str([label_without_knobs(), pl.lit(" · "), algorithm,
                       pl.lit(" · np="), np_]).alias("series"),
    )


def label_without_knobs() -> pl.Expr:
    """A row's label without its knob set: the part :func:`mpiatlas.spine.series.knobs_part` rendered
    from the row's own ``knobs`` taken out, whatever follows it (a placement over nodes), so a knob
    series and its baseline share one series name."""
    def one(row: dict[str, str]) -> str:
        return without_part(row["label"], knobs_part(row["knobs"]))
    return pl.struct(pl.col("label").cast(pl.String), pl.col("knobs").fill_null("")).map_elements(
        one, return_dtype=pl.String)


def baseline_of(df: pl.DataFrame) -> str:
    sets = sorted(df.get_column("knob_set").unique().to_list())
    return NO_SET if NO_SET in sets else sets[0]


def relative(df: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """Each row's median time relative to the baseline's at the same series and size (null without one)."""
    base = df.filter(pl.col("knob_set") == baseline).select(
        "series", "bytes", pl.col("t_median_usec").alias("t_baseline"))
    return df.join(base, on=["series", "bytes"], how="left", nulls_equal=True).with_columns(
        (pl.col("t_median_usec") / pl.col("t_baseline")).alias("relative"))


def best_knob_sets(df: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """Per series and size: the fastest knob set (best_algorithms, with the baseline as its
    ``default``), its median and 95 % CI, and its speed-up over the baseline."""
    as_algorithms = df.with_columns(
        pl.when(pl.col("knob_set") == baseline).then(pl.lit(DEFAULT)).otherwise(pl.col("knob_set")).alias("algorithm"))
    best = best_algorithms(as_algorithms, keys=("series", "bytes"))
    ci = as_algorithms.select("series", "bytes", pl.col("algorithm").alias("best"),
                              pl.col("t_ci_low_usec").alias("best_ci_low"))
    best = best.join(ci, on=["series", "bytes", "best"], how="left", nulls_equal=True)
    return best.with_columns(pl.when(pl.col("best") == DEFAULT).then(pl.lit(baseline)).otherwise(pl.col("best"))
                             .alias("best"))


def _heatmap(bench: str, df: pl.DataFrame, baseline: str) -> ChartBlock:
    d = rounded(with_size(relative(df, baseline)).with_columns(pl.col("size").fill_null("n/a")).select(
        "series", "knob_set", "bytes", "size", "t_median_usec", "t_baseline", "relative"))
    sizes = [fmt_bytes(b) if b is not None else "n/a"
             for b in df.get_column("bytes").unique().sort(nulls_last=False).to_list()]
    sets = sorted(df.get_column("knob_set").unique().to_list(), key=lambda k: (k != baseline, k))
    chart = alt.Chart(d).mark_rect().encode(
        x=alt.X("size:O", sort=sizes, title="message size"),
        y=alt.Y("knob_set:N", sort=sets, title="knob set"),
        color=alt.Color("relative:Q", title=f"t / t({baseline})",
                        # Clamped to 1/4..4: one noisy point must not wash out the rest of the map.
                        scale=alt.Scale(type="log", scheme="redblue", reverse=True, domain=[0.25, 4], clamp=True),
                        legend=alt.Legend(values=[0.25, 0.5, 1, 2, 4])),
        tooltip=["series:N", "knob_set:N", "size:N",
                 alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
                 alt.Tooltip("t_baseline:Q", title=f"t {baseline} (µs)", format=".4~g"),
                 alt.Tooltip("relative:Q", title=f"t / t({baseline})", format=".3f")],
    ).properties(width=max(160, 22 * len(sizes)), height=max(40, 20 * len(sets))).facet(
        row=alt.Row("series:N", title=None, header=_ROW_HEADER),
    ).properties(title=f"{bench}: median time relative to knob set {baseline}")
    return ChartBlock(chart_spec(chart), f"{bench}: t / t({baseline}) per size and knob set (blue: faster than "
                                         f"{baseline}, red: slower).")


def _best_table(bench: str, best: pl.DataFrame, baseline: str) -> list[Block]:
    rows = [[cell(r["series"]), Cell(fmt_bytes(r["bytes"]) if r["bytes"] is not None else "n/a"), cell(r["best"]),
             num_cell(r["t_best"]), num_cell(r["best_ci_low"]), num_cell(r["best_ci_high"]), num_cell(r["t_default"]),
             num_cell(r["speedup"]), cell(r["separated"])] for r in best.iter_rows(named=True)]
    wins = best.filter(pl.col("best") != baseline)
    separated = wins.filter(pl.col("separated").fill_null(False))
    return [
        Text(f"{bench}: a knob set other than {baseline} is fastest at {wins.height} of {best.height} (series, size) "
             f"points, {separated.height} of them with separated 95 % CIs.", cls="muted"),
        Details(f"{bench}: fastest knob set per series and size ({best.height} rows)", [Table(
            ["Series", "Size", "Fastest", "t (µs)", "CI low", "CI high", f"t {baseline} (µs)",
             f"speed-up vs {baseline}", "CIs separated"], rows, scroll=True)], open=best.height <= 24),
    ]


def knob_blocks(bench: str, df: pl.DataFrame) -> list[Block]:
    baseline = baseline_of(df)
    sets = df.get_column("knob_set").unique().to_list()
    if len(sets) < 2:
        return [Text(f"{bench}: only knob set {sets[0]} was measured: nothing to compare.", cls="muted")]
    best = best_knob_sets(df, baseline)
    return [_heatmap(bench, df, baseline), *_best_table(bench, best, baseline)]


def section_knobs(data: ReportData) -> Section | None:
    df = knob_rows(data)
    if df is None:
        return None
    sets = sorted(df.get_column("knob_set").unique().to_list())
    baseline = baseline_of(df)
    blocks: list[Block] = [Text(
        f"IMB series measured with the knob sets {', '.join(sets)} (environment variables applied over the shell's, "
        "the stack's and the transport's settings; provenance.json of each cell lists the variables and what they "
        f"replaced). Each set is compared like a collective algorithm: time relative to {baseline}, and the "
        "fastest set per size by the lowest median over repetitions, with its 95 % bootstrap CI; a tie goes to "
        f"{baseline}.")]
    if baseline != NO_SET:
        blocks.append(Notice(f"No cells without a knob set (none) were run: {baseline} is the baseline.", "info"))
    for bench in sorted(df.get_column("benchmark").unique().to_list(), key=bench_sort_key):
        blocks.append(Heading(bench))
        blocks.extend(knob_blocks(bench, df.filter(pl.col("benchmark") == bench)))
    return Section(TITLE, blocks, id=SECTION_ID)

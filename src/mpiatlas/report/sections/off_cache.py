"""Section "In and out of cache": IMB series measured with and without ``-off_cache``.

By default IMB sends the same buffer every repetition, so once a message fits in a cache it is
sent from there; ``-off_cache`` marches the buffers through ~2 x the last-level cache size so that
no repetition finds its message cached. Per benchmark: latency and bandwidth against message size,
in cache and off cache, with vertical rules at the L2 and L3 cache sizes of the machine the cells
ran on (their provenance's topology), and the off/on ratios at those sizes with the 95 % bootstrap CI
of the latency ratio (the repetitions of each side resampled, as ``mpiatlas compare`` does).

Bandwidth is IMB's own column where it reports one (PingPong: bytes / half round trip); for the
benchmarks it reports none (Alltoall) the section shows message size / time, so as to compare on
and off cache alike, and says so on the axis.
"""

from __future__ import annotations

from typing import Any
import math

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.stats.aggregate import usable_samples
from mpiatlas.stats.ratios import ratio_cis
from mpiatlas.report.blocks import Block, ChartBlock, Heading, Section, Table, Text, cell, num_cell
from mpiatlas.report.charts import CHART_H, CHART_W, chart_spec, color, rounded, size_x, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci
from mpiatlas.report.imb import bench_sort_key
from mpiatlas.spine.series import options_part, without_part

TITLE = "In and out of cache"
SECTION_ID = "off-cache"
IN_CACHE = "in cache"
CACHE_LEVELS = ("L2", "L3")


def cache_state(options: str) -> str:
    """``off cache (-1)`` for an options segment with off_cache, else ``in cache``."""
    for part in (options or "").split(","):
        if part.startswith("off_cache="):
            return f"off cache ({part.removeprefix('off_cache=')})"
    return IN_CACHE


def other_options(options: str) -> str:
    return ",".join(p for p in (options or "").split(",") if p and not p.startswith("off_cache="))


def label_without_options() -> pl.Expr:
    """A row's label without its IMB options: the part :func:`mpiatlas.spine.series.options_part`
    rendered from the row's own ``options`` taken out; its knob set and placement over nodes stay, so
    series of different knob sets are not compared in and off cache as one."""
    def one(row: dict[str, str]) -> str:
        return without_part(row["label"], options_part(row["options"]))
    return pl.struct(pl.col("label").cast(pl.String), pl.col("options").fill_null("")).map_elements(
        one, return_dtype=pl.String)


def with_cache_series(df: pl.DataFrame, benches: list[str] | None = None) -> pl.DataFrame:
    """``df`` (summary or samples rows) with ``cache`` (state) and ``series`` (what is compared in
    and off cache: label without options, algorithm, np, other options), sized rows only."""
    df = df.with_columns(pl.col("options").fill_null("").map_elements(cache_state, return_dtype=pl.String).alias("cache"))
    if benches is not None:
        df = df.filter(pl.col("benchmark").is_in(benches))
    df = df.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") > 0))
    rest = pl.col("options").fill_null("").map_elements(other_options, return_dtype=pl.String)
    algorithm = pl.col("algorithm").fill_null("default") if "algorithm" in df.columns else pl.lit("default")
    return df.with_columns(pl.concat_str([
        label_without_options(), pl.lit(" · "), algorithm,
        pl.lit(" · np="), pl.col("np").cast(pl.String).fill_null("?"),
        pl.when(rest != "").then(pl.concat_str([pl.lit(" · "), rest])).otherwise(pl.lit(""))]).alias("series"))


def cache_rows(data: ReportData) -> pl.DataFrame | None:
    """Summary rows of the benchmarks measured off cache (:func:`with_cache_series`), with ``bw``
    (bandwidth, MB/s); None when nothing ran off cache."""
    s = data.summary
    if s is None or not {"options", "label", "benchmark", "bytes", "t_median_usec"} <= set(s.columns):
        return None
    states = s.select("benchmark", pl.col("options").fill_null("").map_elements(cache_state, return_dtype=pl.String))
    benches = states.filter(pl.col("options") != IN_CACHE).get_column("benchmark").unique().to_list()
    if not benches:
        return None
    bw = pl.col("bw_median_MBps") if "bw_median_MBps" in s.columns else pl.lit(None, dtype=pl.Float64)
    # IMB's MB/s are 10^6 bytes per second: bytes / µs is the same unit.
    return with_cache_series(s, benches).with_columns(
        pl.coalesce(bw.cast(pl.Float64), pl.col("bytes") / pl.col("t_median_usec")).alias("bw"))


def repetition_times(data: ReportData, benches: list[str]) -> dict[tuple[str, str, str, int], np.ndarray]:
    """(benchmark, series, cache state, bytes) -> the sorted times of its repetitions (samples table)."""
    s = data.samples
    if s is None or not {"options", "label", "benchmark", "bytes", "t_usec", "status"} <= set(s.columns):
        return {}
    rows = with_cache_series(usable_samples(s), benches).group_by("benchmark", "series", "cache", "bytes").agg(
        pl.col("t_usec").sort())
    return {(r["benchmark"], r["series"], r["cache"], r["bytes"]): np.asarray(r["t_usec"], dtype=float)
            for r in rows.iter_rows(named=True)}


def cache_sizes(data: ReportData) -> dict[str, list[int]]:
    """Level -> the distinct sizes (bytes) the cells' hosts reported (provenance topology)."""
    sizes: dict[str, set[int]] = {}
    for record in data.provenance or []:
        topo = record.get("topology") if isinstance(record, dict) else None
        known = topo.get("cache_sizes") if isinstance(topo, dict) else None
        for level in CACHE_LEVELS:
            value = known.get(level) if isinstance(known, dict) else None
            if isinstance(value, int) and value > 0:
                sizes.setdefault(level, set()).add(value)
    return {level: sorted(values) for level, values in sizes.items()}


def _rules(caches: dict[str, list[int]]) -> pl.DataFrame:
    return pl.DataFrame([{"level": level, "bytes": size, "text": f"{level} {fmt_bytes(size)}"}
                         for level, values in caches.items() for size in values],
                        schema={"level": pl.String, "bytes": pl.Int64, "text": pl.String})


def _chart(bench: str, df: pl.DataFrame, caches: dict[str, list[int]], y: str, y_title: str
           ) -> alt.LayerChart | alt.FacetChart:
    data = rounded(with_size(df).select("series", "cache", "bytes", "size", "t_median_usec", "t_ci_low_usec",
                                        "t_ci_high_usec", "bw", "n_reps"))
    data = data.with_columns(pl.concat_str([pl.col("series"), pl.lit(" · "), pl.col("cache")]).alias("line"))
    domain = sorted(data.get_column("cache").unique().to_list(), key=lambda c: (c != IN_CACHE, c))
    x = size_x(pl.concat([data.select("bytes"), _rules(caches).select("bytes")]))
    lines = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=x, y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), title=y_title),
        color=color(domain, "buffers", field_="cache"), detail="series:N",
        strokeDash=alt.StrokeDash("series:N", title="series", legend=alt.Legend(labelLimit=320)),
        tooltip=["series:N", "cache:N", alt.Tooltip("size:N", title="size"),
                 alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"),
                 alt.Tooltip("bw:Q", title="bandwidth (MB/s)", format=",.4~g"), alt.Tooltip("n_reps:Q")],
    )
    rules = _rules(caches)
    layers: list[Any] = [lines]
    if rules.height:
        rule = alt.Chart(rules).encode(x=alt.X("bytes:Q"))
        layers += [rule.mark_rule(strokeDash=[4, 3], color="#666"),
                   rule.mark_text(align="left", dx=3, dy=-4, baseline="top", color="#444", fontSize=10).encode(
                       y=alt.value(0), text="text:N")]
    return alt.layer(*layers).properties(width=CHART_W, height=CHART_H, title=f"{bench}: {y_title}")


def nearest_size(sizes: list[int], target: int) -> int | None:
    """The measured size closest to ``target`` on a log scale, if within a factor of 2."""
    best = min(sizes, key=lambda s: abs(math.log2(s / target)), default=None)
    return best if best is not None and abs(math.log2(best / target)) <= 1 else None


def ratios(df: pl.DataFrame, caches: dict[str, list[int]],
           times: dict[tuple[str, str, str, int], np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Per series, off-cache state and cache level: off/on latency and bandwidth at that size, and
    the 95 % CI of the latency ratio from the repetitions in ``times`` (:func:`repetition_times`)."""
    out = []
    bench = df.get_column("benchmark")[0] if df.height else None
    for (series,), g in df.group_by(["series"], maintain_order=True):
        on = {r["bytes"]: r for r in g.filter(pl.col("cache") == IN_CACHE).iter_rows(named=True)}
        for state in sorted(set(g.get_column("cache").to_list()) - {IN_CACHE}):
            off = {r["bytes"]: r for r in g.filter(pl.col("cache") == state).iter_rows(named=True)}
            for level, values in caches.items():
                for size in values:
                    at = nearest_size(sorted(set(on) & set(off)), size)
                    low, high = _ratio_ci(times or {}, (bench, series, IN_CACHE, at), (bench, series, state, at))
                    out.append({"series": series, "cache": state, "level": level, "cache_bytes": size, "bytes": at,
                                "t_ratio": off[at]["t_median_usec"] / on[at]["t_median_usec"] if at else None,
                                "t_ratio_ci": (low, high),
                                "bw_ratio": off[at]["bw"] / on[at]["bw"] if at and on[at]["bw"] else None})
    return out


def _ratio_ci(times: dict[tuple[str, str, str, int], np.ndarray], on: tuple[Any, ...],
              off: tuple[Any, ...]) -> tuple[float | None, float | None]:
    if on not in times or off not in times:
        return None, None
    low, high = ratio_cis([times[on]], [times[off]])
    return (float(low[0]), float(high[0])) if np.isfinite(low[0]) and np.isfinite(high[0]) else (None, None)


def cache_blocks(bench: str, df: pl.DataFrame, caches: dict[str, list[int]], imb_bw: bool,
                 times: dict[tuple[str, str, str, int], np.ndarray]) -> list[Block]:
    bw_title = "bandwidth (MB/s, IMB)" if imb_bw else "message size / time (MB/s)"
    chart = alt.hconcat(_chart(bench, df, caches, "t_median_usec", "latency t (µs)"),
                        _chart(bench, df, caches, "bw", bw_title))
    rows = [[cell(r["series"]), cell(r["cache"]), cell(f"{r['level']} ({fmt_bytes(r['cache_bytes'])})"),
             cell(fmt_bytes(r["bytes"]) if r["bytes"] else DASH), num_cell(r["t_ratio"]),
             cell(fmt_ci(r["t_ratio_ci"]), cls="num"),
             num_cell(r["bw_ratio"])]
            for r in ratios(df, caches, times)]
    out: list[Block] = [ChartBlock(chart_spec(chart), f"{bench}: in cache and off cache; dashed rules: cache sizes.")]
    if rows:
        out.append(Table(["Series", "Buffers", "Cache", "Size measured", "t off / t in", "95 % CI", "bw off / bw in"], rows,
                         caption=f"{bench}: off-cache / in-cache ratios at the cache sizes"))
    return out


def section_off_cache(data: ReportData) -> Section | None:
    df = cache_rows(data)
    if df is None:
        return None
    caches = cache_sizes(data)
    times = repetition_times(data, df.get_column("benchmark").unique().to_list())
    blocks: list[Block] = [Text(
        "IMB reuses one buffer for every repetition of a message size unless -off_cache is given, so its "
        "results may come from cache; off cache, buffers march through about twice the last-level cache size. "
        "Both curves per series (median over repetitions); the ratios compare them at the L2 and L3 sizes.")]
    if not caches:
        blocks.append(Text("The cells' provenance records no L2/L3 cache size: no cache rules.", cls="muted"))
    for bench in sorted(df.get_column("benchmark").unique().to_list(), key=bench_sort_key):
        g = df.filter(pl.col("benchmark") == bench)
        imb_bw = "bw_median_MBps" in g.columns and g.get_column("bw_median_MBps").drop_nulls().len() > 0
        blocks.append(Heading(bench))
        blocks.extend(cache_blocks(bench, g, caches, imb_bw, times))
    return Section(TITLE, blocks, id=SECTION_ID)

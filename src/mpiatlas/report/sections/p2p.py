"""Section "Point-to-point": IMB p2p benchmarks, latency and bandwidth vs size with the Hockney model."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.hockney import HockneyFit
from mpiatlas.report.blocks import Block, ChartBlock, Heading, Notice, Section, Text
from mpiatlas.report.charts import (
    chart_spec,
    color,
    hockney_curve,
    p2p_chart,
    residual_chart,
    rounded,
    size_tip,
    with_size,
)
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import finite, fmt_bytes, fmt_num
from mpiatlas.report.imb import bench_sort_key, family_summary, fit_matches, no_summary_text, series_name

TITLE = "Point-to-point"
SECTION_ID = "p2p"


def _p2p_series(df: pl.DataFrame) -> tuple[pl.DataFrame, bool, bool]:
    multi_np = df.get_column("np").n_unique() > 1
    multi_alg = df.get_column("algorithm").fill_null("default").n_unique() > 1
    names = [series_name(lab, n, a, multi_np=multi_np, multi_alg=multi_alg)
             for lab, n, a in df.select("label", "np", "algorithm").iter_rows()]
    return df.with_columns(pl.Series("series", names, dtype=pl.String)), multi_np, multi_alg


def bw_factor(df: pl.DataFrame) -> float | None:
    """IMB's bytes-counted-per-time factor for a benchmark (1 PingPong, 2 Sendrecv, 4 Exchange),
    estimated from the data as median(bw * t / m)."""
    r = df.filter((pl.col("bytes") > 0) & (pl.col("t_median_usec") > 0) & (pl.col("bw_median_MBps") > 0))
    if r.height == 0:
        return None
    k = r.select((pl.col("bw_median_MBps") * pl.col("t_median_usec") / pl.col("bytes")).median()).item()
    return float(k) if finite(k) and k > 0 else None


def _model_rows(fits: list[tuple[HockneyRecord, str]], ranges: dict[str, tuple[float, float]],
                factor: float | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Model curve, breakpoint and residual rows of the fits drawn over each series' measured sizes."""
    model, bps, res = [], [], []
    for f, name in fits:
        if name in ranges:
            lo, hi = ranges[name]
        else:
            # Fit for a series without summary rows: draw over the fit's own residual sizes.
            sizes = [r.bytes for r in f.residuals if r.bytes > 0]
            if not sizes:
                continue
            lo, hi = min(sizes), max(sizes)
        for p in hockney_curve(f, lo, hi):
            p["series"] = name
            p["bw_model_MBps"] = factor * p["bytes"] / p["t_model_usec"] if factor and p["t_model_usec"] > 0 else None
            model.append(p)
        for b in f.breakpoints_bytes:
            if b > 0:
                bps.append({"series": name, "bytes": b, "size": fmt_bytes(b)})
        for r in f.residuals:
            if r.bytes > 0 and finite(r.rel_err):
                res.append({"series": name, "bytes": r.bytes, "size": fmt_bytes(r.bytes), "rel_err": r.rel_err,
                            "measured_us": r.measured_us, "predicted_us": r.predicted_us})
    return model, bps, res


def bench_blocks(bench: str, df: pl.DataFrame, fits: list[tuple[HockneyRecord, str]]) -> list[Block]:
    pos = with_size(df.filter(pl.col("bytes") > 0).sort("series", "bytes"))
    if pos.height == 0:
        return [Notice(f"{bench}: no positive message sizes to plot.", "info")]
    factor = bw_factor(pos)
    ranges = {r[0]: (r[1], r[2]) for r in pos.group_by("series").agg(pl.col("bytes").min(), pl.col("bytes").max()
                                                                     .alias("hi")).iter_rows()}
    model_rows, bp_rows, res_rows = _model_rows(fits, ranges, factor)
    meas = rounded(pos.select("series", "label", "np", "bytes", "size", "t_median_usec", "t_ci_low_usec",
                              "t_ci_high_usec", "t_min_usec", "t_cv", "n_reps", "bw_median_MBps"))
    model = with_size(rounded(pl.DataFrame(model_rows, infer_schema_length=None))) if model_rows else None
    if model is not None and not factor:
        model = model.drop("bw_model_MBps")  # no bytes-per-time convention known: no model bandwidth
    chart = p2p_chart(meas, bench, model=model, breakpoints=pl.DataFrame(bp_rows) if bp_rows else None)
    caption = f"{bench}: {pos.get_column('series').n_unique()} series, {pos.height} (series, size) points."
    if model_rows and factor and meas.filter(pl.col("bw_median_MBps") > 0).height:
        caption += (f" Model bandwidth = {fmt_num(factor)} × m / t(m); the factor is IMB's bytes-per-time "
                    "convention for this benchmark, estimated from the measured medians.")
    out: list[Block] = [ChartBlock(chart_spec(chart), caption)]
    if res_rows:
        res = rounded(pl.DataFrame(res_rows, infer_schema_length=None))
        series = sorted(set(pos.get_column("series").to_list()) | {name for _, name in fits})
        tips = [alt.Tooltip("series:N"), size_tip(), alt.Tooltip("rel_err:Q", format=".2%"),
                alt.Tooltip("measured_us:Q", title="measured (µs)", format=".4~g"),
                alt.Tooltip("predicted_us:Q", title="predicted (µs)", format=".4~g")]
        out.append(ChartBlock(chart_spec(residual_chart(res, color(series), f"{bench}: Hockney fit residuals",
                                                        tooltip=tips)),
                              f"{bench}: relative error of the fitted model per size."))
    return out


def _fits_of(bench: str, measured: list[tuple[Any, ...]], fits: list[HockneyRecord] | None, multi_np: bool,
             multi_alg: bool) -> tuple[list[tuple[HockneyRecord, str]], list[str], list[str]]:
    """(fit, series name) of the benchmark's usable fits; failed fits; measured series without a fit."""
    bench_fits = [f for f in (fits or []) if f.benchmark == bench]
    named, failed = [], []
    for f in bench_fits:
        match = [sr for lab, n, a, sr in measured if fit_matches(f, lab, n, a)]
        name = match[0] if len(match) == 1 else series_name(
            f.label, f.np, f.algorithm, multi_np=multi_np, multi_alg=multi_alg)
        if f.error is not None:
            failed.append(f"{bench}: {name}: {f.error}")
            continue
        try:
            HockneyFit.from_record(f)  # the model's segments are usable
        except ValueError as exc:
            failed.append(f"{bench}: {name}: model unusable: {exc}")
            continue
        named.append((f, name))
    unfitted = [f"{bench}: {sr}" for lab, n, a, sr in measured
                if bench_fits and not any(fit_matches(f, lab, n, a) for f in bench_fits)]
    return named, failed, unfitted


def section_p2p(data: ReportData) -> Section:
    s = family_summary(data, "p2p")
    if s is None:
        return Section(TITLE, [Notice(no_summary_text(data), "error")], id=SECTION_ID)
    if s.height == 0:
        return Section(TITLE, [Notice("No point-to-point benchmark in the summary.", "info")], id=SECTION_ID)
    fits = data.hockney
    blocks: list[Block] = []
    if fits is None:
        blocks.append(Notice("No fits: the Hockney model (fits/hockney.json) is missing, so no model is overlaid.",
                             "warn"))
    blocks.append(Text(
        "Median over repetitions (line), 95 % confidence interval of the median (band), fitted Hockney model "
        "t(m) = λ + m/B per segment (dashed) and its breakpoints (dotted rules). Click a legend entry to "
        "highlight a series. 0-byte messages cannot be drawn on a log axis; their medians are listed in the "
        "parameters table."))
    unfitted: list[str] = []
    failed_fits: list[str] = []
    for bench in sorted(s.get_column("benchmark").unique().to_list(), key=bench_sort_key):
        df, multi_np, multi_alg = _p2p_series(s.filter(pl.col("benchmark") == bench))
        measured = df.select("label", "np", "algorithm", "series").unique().sort("series").rows()
        named, failed, missing = _fits_of(bench, measured, fits, multi_np, multi_alg)
        failed_fits += failed
        unfitted += missing
        blocks.append(Heading(bench))
        if fits is not None and not any(f.benchmark == bench for f in fits):
            blocks.append(Text(f"hockney.json has no fit for {bench}: measurements only.", cls="muted"))
        blocks.extend(bench_blocks(bench, df, named))
    if failed_fits:
        blocks.insert(0, Notice("The Hockney fit failed for these series:", "warn", failed_fits))
    if unfitted:
        blocks.insert(0, Notice("No Hockney fit for these measured series:", "warn", unfitted))
    over = s.filter(pl.col("oversubscribed").fill_null(False))
    if over.height:
        blocks.insert(0, Notice("These series ran oversubscribed (more ranks than cores); their timings are not "
                                "representative:", "warn",
                                sorted({f"{b}: {lab} np={n}" for b, lab, n in
                                        over.select("benchmark", "label", "np").iter_rows()})))
    return Section(TITLE, blocks, id=SECTION_ID)

"""The HTML diff report of ``mpiatlas compare``, in the main report's look.

Reuses, read-only, the main report's blocks, chart helpers and renderer
(:func:`mpiatlas.report.render.render_html`: the autoescaped template, its CSS and the inlined
Vega bundle), so the page needs no network and every label is escaped.
"""

from __future__ import annotations

import math
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from mpiatlas.compare.campaigns import Comparison
from mpiatlas.stats.ratios import FASTER, MIN_REPS, MIN_RUNS, NOT_JUDGED, SLOWER, regressions
from mpiatlas.compare.summary import kernel_lines, method_line, series_name, summary_lines
from mpiatlas.files import write_text_atomic
from mpiatlas.report.blocks import Block, Bullets, Cell, ChartBlock, Details, KeyValues, Notice, Section, Table, cell, num_cell
from mpiatlas.report.charts import chart_spec
from mpiatlas.report.formatting import fmt_bytes, fmt_ci
from mpiatlas.report.data import ReportData
from mpiatlas.report.render import render_html

VERDICT_CLASS = {SLOWER: "bad", FASTER: "ok"}
# Heatmap colour range: at least ×1.25 either way, so that noise-level ratios stay pale.
MIN_COLOUR_SPAN = 1.25


def _p_axis(cmp: Comparison) -> str | None:
    """The process-count axis of the heatmaps: IMB's ``processes`` when matched on, else ``np``."""
    return next((k for k in ("processes", "np") if k in cmp.matching.keys), None)


def _cell_label(ratio: float | None) -> str:
    """The ratio printed in a heatmap cell: two digits, no exponent notation (cells are narrow)."""
    if ratio is None or not math.isfinite(ratio):
        return ""
    if ratio >= 99.5:
        return f"{ratio:.0f}"
    return f"{ratio:.2g}" if ratio >= 0.01 else "<.01"


def _heatmap_frame(sizes: pl.DataFrame, series: list[str], p_axis: str | None) -> pl.DataFrame:
    rest = [k for k in series if k not in ("benchmark", p_axis)]
    rows = sizes.to_dicts()
    return pl.DataFrame({
        "row": [series_name(r, rest) or "all" for r in rows],
        "P": [r.get(p_axis) if p_axis else None for r in rows],
        "bytes": [r["bytes"] for r in rows],
        "size": [fmt_bytes(r["bytes"]) for r in rows],
        "ratio": [r["ratio"] for r in rows],
        "ci": [fmt_ci((r["ratio_ci_low"], r["ratio_ci_high"])) for r in rows],
        "a": [r["median_a_usec"] for r in rows], "b": [r["median_b_usec"] for r in rows],
        "reps": [_reps(r) for r in rows],
        "verdict": [r["verdict"] for r in rows],
        "label": [_cell_label(r["ratio"]) for r in rows],
    }).filter(pl.col("ratio").is_finite() & (pl.col("ratio") > 0))


def _reps(row: dict[str, Any]) -> str:
    """``7 / 7`` (repetitions per side), or ``3 runs, 18 / 3 runs, 17`` with several runs."""
    if max(row.get("runs_a") or 1, row.get("runs_b") or 1) > 1:
        return f"{row['runs_a']} runs, {row['n_a']} / {row['runs_b']} runs, {row['n_b']}"
    return f"{row['n_a']} / {row['n_b']}"


def _legend_values(span: float) -> list[float]:
    """Ratios for the colour legend: 1, the span's ends and round steps between."""
    steps = [v for v in (1.1, 1.25, 1.5, 2, 5, 10, 100, 1000, 10000) if v < span]
    top = [*steps[-2:], span]
    return sorted({1.0, *top, *(1 / v for v in top)})


def _short(path: Path) -> str:
    """The last two components of a path (``a1/results/cmp`` -> ``results/cmp``): a title, not an address."""
    return "/".join(path.parts[-2:]) or str(path)


def heatmap(sizes: pl.DataFrame, series: list[str], p_axis: str | None, title: str) -> dict[str, Any] | None:
    """Ratio B/A per size (x) and P (y), one row of panels per other series; significant cells outlined."""
    d = _heatmap_frame(sizes, series, p_axis)
    if d.height == 0:
        return None
    span = max(MIN_COLOUR_SPAN, *(max(r, 1 / r) for r in d.get_column("ratio").to_list()))
    # Size-less benchmarks (Barrier) have a null size: one column, first.
    order = [fmt_bytes(b) for b in sorted(set(d.get_column("bytes").to_list()), key=lambda b: -1 if b is None else b)]
    x = alt.X("size:O", sort=order, title="message size")
    y = alt.Y("P:O", title=p_axis or "P")
    tips = [alt.Tooltip("row:N", title="series"), alt.Tooltip("P:O", title=p_axis or "P"),
            alt.Tooltip("size:N"), alt.Tooltip("ratio:Q", title="ratio B/A", format=".4~g"),
            alt.Tooltip("ci:N", title="95 % CI"), alt.Tooltip("a:Q", title="median A (µs)", format=".4~g"),
            alt.Tooltip("b:Q", title="median B (µs)", format=".4~g"), alt.Tooltip("reps:N", title="reps A / B"),
            alt.Tooltip("verdict:N")]
    significant = (alt.datum.verdict == SLOWER) | (alt.datum.verdict == FASTER)
    base = alt.Chart(d)
    rect = base.mark_rect(strokeWidth=2).encode(
        x=x, y=y, tooltip=tips,
        color=alt.Color("ratio:Q", title="ratio B/A", scale=alt.Scale(
            type="log", scheme="redblue", reverse=True, domain=[1 / span, span], domainMid=1, clamp=True),
            legend=alt.Legend(format=".3~g", values=_legend_values(span))),
        stroke=alt.condition(significant, alt.value("#1d2330"), alt.value(None)),
        opacity=alt.condition(alt.FieldOneOfPredicate(field="verdict", oneOf=list(NOT_JUDGED)), alt.value(0.45),
                              alt.value(1.0)),
    )
    text = base.mark_text(fontSize=9).encode(x=x, y=y, text="label:N", tooltip=tips)
    n_sizes = len(order)
    chart = alt.layer(rect, text).properties(width=max(260, 34 * n_sizes), height=alt.Step(22))
    faceted = chart.facet(row=alt.Row("row:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left",
                                                                               labelLimit=420)))
    return chart_spec(faceted.properties(title=title))


def _size_rows(sizes: pl.DataFrame, series: list[str]) -> list[list[Cell]]:
    rows = []
    for r in sizes.to_dicts():
        rows.append([cell(series_name(r, series)), cell(fmt_bytes(r["bytes"])), cell(_reps(r)),
                     num_cell(r["median_a_usec"], 4), num_cell(r["median_b_usec"], 4), num_cell(r["ratio"], 4),
                     Cell(fmt_ci((r["ratio_ci_low"], r["ratio_ci_high"])), cls="num"),
                     cell(r["verdict"], cls=VERDICT_CLASS.get(r["verdict"]))])
    return rows


SIZE_COLUMNS = ["series", "size", "reps (runs) A / B", "median A (µs)", "median B (µs)", "ratio B/A", "95 % CI", "verdict"]


def _statistic(cmp: Comparison) -> str:
    if cmp.two_level:
        return (f"median(B) / median(A) per size, all runs' repetitions pooled; 95 % two-level percentile bootstrap "
                f"(runs resampled, then repetitions within each drawn run; each side independently), widened for "
                f"few runs; judged with ≥ {MIN_RUNS} runs and ≥ {MIN_REPS} repetitions per side")
    return (f"median(B) / median(A) per size; 95 % percentile bootstrap over repetitions, each side resampled "
            f"independently; judged with ≥ {MIN_REPS} repetitions per side")


def _summary_section(cmp: Comparison, threshold: float | None) -> Section:
    kv = [("A", cell(", ".join(str(p) for p in cmp.a.paths or [cmp.a.path]))),
          ("B", cell(", ".join(str(p) for p in cmp.b.paths or [cmp.b.path]))),
          ("matched on", cell(", ".join(cmp.matching.keys))),
          *[(f"compared setting: {k}", cell(f"{va} → {vb}")) for k, (va, vb) in cmp.matching.settings.items()],
          ("statistic", cell(_statistic(cmp)))]
    blocks: list[Block] = [Bullets(summary_lines(cmp, threshold), cls="findings"), KeyValues(kv)]
    if not cmp.two_level:
        blocks.insert(0, Notice(method_line(cmp), "warn"))
    if threshold is not None:
        n = regressions(cmp.all_sizes(), threshold).height
        blocks.insert(0, Notice(f"{n} sizes significantly slower by more than {threshold:.1%}",
                                "error" if n else "info"))
    return Section("Summary", blocks, id="summary")


def _heatmap_section(cmp: Comparison) -> Section | None:
    p_axis = _p_axis(cmp)
    blocks: list[Block] = []
    for bench in sorted(set(cmp.sizes.get_column("benchmark").to_list())):
        spec = heatmap(cmp.sizes.filter(pl.col("benchmark") == bench), cmp.series_keys, p_axis, f"{bench}: B / A")
        if spec is not None:
            blocks.append(ChartBlock(spec, caption="Blue: faster in B, red: slower; outlined: significant (the "
                                     "95 % CI excludes 1); faded: too few repetitions or runs to judge."))
    return Section("Ratio heatmaps", blocks, id="heatmaps") if blocks else None


def _changes_section(cmp: Comparison) -> Section:
    sig = cmp.sizes.filter(pl.col("significant")).sort("ratio", descending=True)
    blocks: list[Block] = []
    if sig.height:
        blocks.append(Table(SIZE_COLUMNS, _size_rows(sig, cmp.series_keys), filterable=True, scroll=True))
    else:
        blocks.append(Notice("No size changed significantly.", "neutral"))
    blocks.append(Details(f"All {cmp.sizes.height} matched sizes",
                          [Table(SIZE_COLUMNS, _size_rows(cmp.sizes, cmp.series_keys), filterable=True, scroll=True)]))
    return Section("Significant changes", blocks, id="changes")


def _fits_section(cmp: Comparison) -> Section | None:
    if cmp.fits.height == 0:
        return None
    rows = [[cell(r["model"]), cell(r["series"]), cell(f"{r['parameter']} ({r['unit']})" if r["unit"] else r["parameter"]),
             num_cell(r["a"], 4), Cell(fmt_ci((r["a_ci_low"], r["a_ci_high"])), cls="num"),
             num_cell(r["b"], 4), Cell(fmt_ci((r["b_ci_low"], r["b_ci_high"])), cls="num"),
             num_cell(r["diff"], 4), Cell(fmt_ci((r["diff_ci_low"], r["diff_ci_high"])), cls="num"),
             Cell(f"{r['rel_diff']:+.1%}" if math.isfinite(r["rel_diff"]) else "—", cls="num"),
             cell(r["direction"], cls=VERDICT_CLASS.get(r["direction"]))] for r in cmp.fits.to_dicts()]
    cols = ["model", "series", "parameter", "A", "A 95 % CI", "B", "B 95 % CI", "B − A", "95 % CI (MOVER)",
            "relative", "verdict"]
    several = cmp.a.runs > 1 or cmp.b.runs > 1
    if several:
        cols[-3] = "95 % CI (Welch)"
    lead = ("Fits both campaigns have, one per run: each side's mean over its runs with its t interval, and "
            "Welch's interval of the difference (the spread over runs is the run-to-run variation)." if several
            else "Fits both campaigns have; the CI of the difference combines the two fits' CIs (MOVER).")
    return Section("Model parameters", [Table(cols, rows, filterable=True)], id="fits", lead=lead)


def _one_side_section(cmp: Comparison) -> Section | None:
    blocks: list[Block] = []
    for side, only in (("A", cmp.only_a), ("B", cmp.only_b)):
        if only.height:
            rows = [[cell(series_name(r, cmp.series_keys)), num_cell(r["sizes"], 0),
                     cell(r["other_status"], cls="bad" if r["other_status"] else None)] for r in only.to_dicts()]
            other = "B" if side == "A" else "A"
            blocks.append(Table(["series", "sizes", f"cells in {other} that gave no samples"], rows, caption=f"only in {side} ({only.height} series)",
                                filterable=True, scroll=True))
    for side, lone in (("A", cmp.lone_a), ("B", cmp.lone_b)):
        if lone.height:
            rows = [[cell(series_name(r, cmp.series_keys)), cell(fmt_bytes(r["bytes"]))] for r in lone.to_dicts()]
            blocks.append(Table(["series", "size"], rows, caption=f"sizes of matched series measured in {side} only "
                                f"({lone.height})", filterable=True, scroll=True))
    return Section("Cells on one side only", blocks, id="one-side") if blocks else None


def _kernels_section(cmp: Comparison) -> Section | None:
    """Per kernel both sides measured: its summary lines, the ratio heatmap over P and size, every point."""
    blocks: list[Block] = []
    for kc in cmp.kernels:
        blocks.append(Bullets(kernel_lines(kc), cls="findings"))
        p_axis = "np" if "np" in kc.matching.keys else None
        spec = heatmap(kc.sizes, kc.series_keys, p_axis, f"{kc.kernel}: B / A")
        if spec is not None:
            blocks.append(ChartBlock(spec, caption=f"{kc.kernel}: ratio B/A of the median time per launch; blue: "
                                     "faster in B, red: slower; outlined: significant; faded: not judged."))
        blocks.append(Details(f"{kc.kernel}: all {kc.sizes.height} matched points", [
            Table(SIZE_COLUMNS, _size_rows(kc.sizes, kc.series_keys), filterable=True, scroll=True)]))
    lead = ("Each kernel's time per launch (ring: the exchange, matsum: scatter + compute + gather, Jacobi: one "
            "iteration, each the slowest rank's; pingpong and coll: rank 0's time per size), matched and judged as "
            "the IMB sizes are.")
    return Section("Kernels", blocks, id="kernels", lead=lead) if blocks else None


def build_sections(cmp: Comparison, threshold: float | None) -> list[Section]:
    found = [_summary_section(cmp, threshold), _heatmap_section(cmp), _changes_section(cmp), _kernels_section(cmp),
             _fits_section(cmp), _one_side_section(cmp)]
    return [s for s in found if s is not None]


def render(cmp: Comparison, threshold: float | None = None, *, now: datetime | None = None) -> str:
    title = f"mpiatlas compare: {_short(cmp.a.path)} → {_short(cmp.b.path)}"
    data = ReportData(title=title, generated=now or datetime.now(UTC))
    return render_html(data, build_sections(cmp, threshold))


def write_report(cmp: Comparison, out: str | Path, threshold: float | None = None) -> Path:
    """Write the diff report atomically and return its path."""
    return write_text_atomic(out, render(cmp, threshold))

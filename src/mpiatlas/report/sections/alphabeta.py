"""Section "Alltoall / Allgather over nodes": the α-β models of ``fits/alphabeta.json``.

Shows, per fitted series (stack · transport · algorithm · IMB options · knob set · placement over nodes ·
k ranks per node: every axis that tells cells apart, :data:`mpiatlas.models.alphabeta.SERIES_KEYS`): the measured median time per
node count m against the message size, the fitted model per m, the "speed of light" (α = 1,
β = 0: the nominal link and nothing else) for the largest m, the relative residuals, and one
table of α, β with their 95 % CIs. Then the model choice: every algorithm family fitted to each
series (per k and pooled over k), which one fits best and by how much (ΔAIC), and the winner's α,
β and 1/α (the fraction of the line rate) per message size. The section is left out of single-node campaigns that have no
``alphabeta.json``; with a file that holds no fits it says so.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.stats.aggregate import scalar
from mpiatlas.models.alphabeta import FORMULAS, predict, speed_of_light
from mpiatlas.models.alphabeta_records import AlphaBetaFits, AlphaBetaRecord, PerSize, PooledRecord
from mpiatlas.models.fit_records import FitRecordError
from mpiatlas.matrix.layout import ALPHABETA_FIT
from mpiatlas.tables.samples import SERIES_AXES
from mpiatlas.models.alphabeta_models import DELTA_AIC_CLEAR, MODELS
from mpiatlas.report.blocks import Cell, ChartBlock, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.charts import CHART_H, CHART_W, chart_spec, residual_chart, rounded, size_tip, size_x, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci, fmt_num, fmt_pct

TITLE = "Alltoall / Allgather over nodes (α-β model)"
SECTION_ID = "alphabeta"
MODEL_CURVE = "model (fit)"
LIGHT_CURVE = "speed of light (α = 1, β = 0)"
CURVE_POINTS = 32
SHAPES = {"fitted": "circle", "not fitted (m = 1)": "cross"}
# A per-k fit or one pooled over k: both name a series and may carry its model comparison.
Entry = AlphaBetaRecord | PooledRecord


def _series_base(f: Entry) -> str:
    """``intelmpi · ofi-tcp · off_cache=-1 · knobs=eager · block``: every axis of the fit's series key that
    is set (files from before the options/knobs/placement axes name none)."""
    parts = [f.stack or "?", f.transport or "?"]
    if f.algorithm not in (None, "default"):
        parts.append(str(f.algorithm))
    if any(_axes(f)):
        parts.append(_axes_text(f))
    return " · ".join(parts)


def _series_name(f: AlphaBetaRecord) -> str:
    """:func:`_series_base` and k: ``intelmpi · ofi-tcp · k = 2``."""
    return f"{_series_base(f)} · k = {f.ppn}"


def _multinode_samples(data: ReportData) -> bool:
    """Whether the samples hold multi-node Alltoall/Allgather rows (then a missing fit is worth saying)."""
    s = data.samples
    if s is None or "nodes" not in s.columns or "benchmark" not in s.columns:
        return False
    return s.filter(pl.col("benchmark").is_in(list(FORMULAS)) & (pl.col("nodes") > 1)).height > 0


def _usable(f: AlphaBetaRecord) -> bool:
    return (f.fitted and f.benchmark in FORMULAS and f.ppn is not None and f.b_bytes_per_us is not None
            and f.alpha is not None and f.beta_us is not None)


# -- chart ---------------------------------------------------------------------------------


def _points_frame(f: AlphaBetaRecord) -> pl.DataFrame:
    rows = [p.to_json() for p in f.points if p.bytes > 0 and (p.measured_us or 0) > 0]
    df = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    if df.height == 0:
        return df
    return with_size(df.with_columns(
        pl.format("m = {}", pl.col("nodes")).alias("m"),
        pl.when(pl.col("used")).then(pl.lit("fitted")).otherwise(pl.lit("not fitted (m = 1)")).alias("point")))


def _curves(f: AlphaBetaRecord, pts: pl.DataFrame) -> pl.DataFrame:
    """Model per m, and the speed of light of the largest m, on a log grid of sizes."""
    lo, hi = scalar(pts.get_column("bytes").min()), scalar(pts.get_column("bytes").max())
    grid = np.geomspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
    bench, k, b = f.benchmark, f.ppn, f.b_bytes_per_us
    if b is None or k is None or f.alpha is None or f.beta_us is None:
        raise ValueError(f"{bench}: a fit without α, β, k or the network's bandwidth has no curves (not _usable)")
    rows: list[dict[str, str | int | float]] = []
    nodes = sorted(set(pts.get_column("nodes").to_list()))
    for m in nodes:
        t = predict(bench, f.alpha, f.beta_us, m, grid, k, b)
        rows += [{"m": f"m = {m}", "nodes": m, "bytes": float(x), "t_us": float(v), "curve": MODEL_CURVE}
                 for x, v in zip(grid, t) if v > 0]  # Allgather's model is 0 at m = 1: nothing to draw
    top = max(nodes)
    if top > 1:
        # Drawn down to half the fastest measurement only: below, it would stretch the log axis by decades.
        floor = 0.5 * scalar(pts.get_column("measured_us").min())
        t = speed_of_light(bench, top, grid, k, b)
        rows += [{"m": f"m = {top}", "nodes": top, "bytes": float(x), "t_us": float(v), "curve": LIGHT_CURVE}
                 for x, v in zip(grid, t) if v >= floor]
    return with_size(pl.DataFrame(rows)) if rows else pl.DataFrame()


def _fit_chart(f: AlphaBetaRecord, pts: pl.DataFrame) -> alt.LayerChart | alt.FacetChart | alt.HConcatChart:
    domain = [f"m = {m}" for m in sorted(set(pts.get_column("nodes").to_list()))]
    color = alt.Color("m:N", scale=alt.Scale(domain=domain, scheme="tableau10"), title="nodes",
                      sort=domain, legend=alt.Legend(symbolOpacity=1))
    x = size_x(pts, max_ticks=8)
    y = alt.Y("measured_us:Q", scale=alt.Scale(type="log"), title="time t (µs)")
    shapes = [v for v in SHAPES if v in set(pts.get_column("point").to_list())]
    meas = rounded(pts.select("m", "nodes", "bytes", "size", "measured_us", "min_us", "max_us", "n_reps",
                             "predicted_us", "point"))
    tips = [alt.Tooltip("m:N", title="nodes"), alt.Tooltip("size:N"),
            alt.Tooltip("measured_us:Q", title="median t (µs)", format=".4~g"),
            alt.Tooltip("min_us:Q", title="min (µs)", format=".4~g"),
            alt.Tooltip("max_us:Q", title="max (µs)", format=".4~g"),
            alt.Tooltip("predicted_us:Q", title="model (µs)", format=".4~g"),
            alt.Tooltip("n_reps:Q", title="repetitions"), alt.Tooltip("point:N")]
    layers: list[alt.Chart] = [
        alt.Chart(meas).mark_rule(opacity=0.5).encode(x=x, y=alt.Y("min_us:Q", scale=alt.Scale(type="log")),
                                                      y2="max_us:Q", color=color),
        alt.Chart(meas).mark_point(size=30, filled=True).encode(
            x=x, y=y, color=color, tooltip=tips,
            shape=alt.Shape("point:N", title="point",
                            scale=alt.Scale(domain=shapes, range=[SHAPES[v] for v in shapes]))),
    ]
    curves = _curves(f, pts)
    if curves.height:
        curves = rounded(curves)
        ctips = [alt.Tooltip("curve:N"), alt.Tooltip("m:N", title="nodes"), alt.Tooltip("size:N"),
                 alt.Tooltip("t_us:Q", title="t (µs)", format=".4~g")]
        dash = alt.StrokeDash("curve:N", title="line", scale=alt.Scale(domain=[MODEL_CURVE, LIGHT_CURVE],
                                                                       range=[[1, 0], [6, 4]]))
        layers.append(alt.Chart(curves.filter(pl.col("curve") == MODEL_CURVE)).mark_line(strokeWidth=1.8).encode(
            x=x, y="t_us:Q", color=color, strokeDash=dash, tooltip=ctips))
        layers.append(alt.Chart(curves.filter(pl.col("curve") == LIGHT_CURVE)).mark_line(
            strokeWidth=1.6, color="#444").encode(x=x, y="t_us:Q", strokeDash=dash, tooltip=ctips))
    main: alt.LayerChart = alt.layer(*layers).resolve_scale(color="shared").properties(
        width=CHART_W, height=CHART_H, title=f"{f.benchmark}: {_series_name(f)}")
    res = meas.filter(pl.col("point") == "fitted").with_columns(
        (pl.col("predicted_us") / pl.col("measured_us") - 1.0).alias("rel_err"))
    if res.height == 0:
        return main
    resid = residual_chart(res, color, "residuals of the fit", width=CHART_W, height=CHART_H,
                           tooltip=[alt.Tooltip("m:N", title="nodes"), size_tip(),
                                    alt.Tooltip("rel_err:Q", format=".2%")])
    return alt.hconcat(main, resid)


# -- table ---------------------------------------------------------------------------------

# What the section is made of.
Block = Text | Heading | Notice | Table | ChartBlock


def _param_table(fits: list[AlphaBetaRecord]) -> Table:
    show_alg = any(f.algorithm not in (None, "default") for f in fits)
    show_axes = any(any(_axes(f)) for f in fits)
    cols = ["Benchmark", "Stack", "Transport", *(["Algorithm"] if show_alg else []),
            *(["Options · knobs · placement"] if show_axes else []), "k (ranks/node)",
            "nodes m", "b (Gbit/s)", "α", "α 95 % CI", "β (µs)", "β 95 % CI", "points", "R²", "rel. RMS",
            "CI method", "notes"]
    rows: list[list[Cell]] = []
    for f in sorted(fits, key=lambda f: (f.benchmark, _series_name(f))):
        ident = [cell(f.benchmark), cell(f.stack), cell(f.transport), *([cell(f.algorithm)] if show_alg else []),
                 *([Cell(_axes_text(f))] if show_axes else []), cell(f.ppn)]
        note_cell = Cell("; ".join(n.split(":")[0] for n in f.notes) or DASH, title="\n".join(f.notes) or None)
        if f.error is not None:
            rows.append([*ident, Cell(f"not fitted: {f.error}", cls="bad wrap", colspan=len(cols) - len(ident) - 1),
                         note_cell])
            continue
        rows.append([
            *ident, Cell(", ".join(str(m) for m in f.nodes) or DASH),
            Cell(fmt_num(f.bandwidth_gbit_s), cls="num"),
            Cell(fmt_num(f.alpha), cls="num"), Cell(fmt_ci(f.alpha_ci), cls="num"),
            Cell(fmt_num(f.beta_us), cls="num"), Cell(fmt_ci(f.beta_ci_us), cls="num"),
            cell(f.n_points), Cell(fmt_num(f.r2, 4), cls="num"),
            Cell(fmt_pct(f.rel_rms), cls="num"), cell(f.ci_method), note_cell,
        ])
    return Table(cols, rows, caption="α-β parameters (α dimensionless, β in µs)")


def _axes(f: Entry) -> dict[str, str]:
    """The fit's IMB options, knob set and placement over nodes that are set (tables.samples.SERIES_AXES)."""
    given = {"options": f.options, "knobs": f.knobs, "placement": f.placement}
    return {axis: value for axis in SERIES_AXES if (value := given[axis])}


def _axes_text(f: Entry) -> str:
    """The fit's IMB options, knob set and placement over nodes ("—" for none of them)."""
    return " · ".join(v if a != "knobs" else f"knobs={v}" for a, v in _axes(f).items()) or DASH


# -- model choice and per-size tables ---------------------------------------------------------


def _choice_name(f: Entry) -> str:
    if isinstance(f, PooledRecord):
        return f"{_series_base(f)} · pooled over k = {', '.join(str(k) for k in f.ppns)}"
    return _series_name(f)


def _with_families(result: AlphaBetaFits) -> list[Entry]:
    """Per-k entries and pooled entries that carry a model comparison (files from before have none)."""
    given: list[Entry] = [*result.fits, *(result.pooled or ())]
    out = [f for f in given if f.families is not None and f.fitted]
    return sorted(out, key=lambda f: (f.benchmark, isinstance(f, PooledRecord), _choice_name(f)))


def _choice_table(entries: list[Entry]) -> Table:
    cols = ["Benchmark", "Series", "Model", "α", "α 95 % CI", "β (µs)", "β 95 % CI", "rel. RMS",
            "median |rel. res.|", "ΔAIC", "choice"]
    rows: list[list[Cell]] = []
    for f in entries:
        assert f.families is not None  # _with_families keeps only these
        sel = f.families.selection
        for mf in f.families.models:
            ident = [cell(f.benchmark), Cell(_choice_name(f)), Cell(mf.label or mf.model, title=mf.formula or None)]
            if mf.error:
                rows.append([*ident, Cell(f"not fitted: {mf.error}", cls="wrap", colspan=len(cols) - 3)])
                continue
            if mf.model == f.families.best_model:
                mark = Cell(f"best ({sel.verdict})", cls="ok" if sel.verdict == "clear" else None)
            elif mf.plausible is False:
                mark = Cell("excluded: α < 1", title="its whole α 95 % CI is below 1: faster than the link's line rate")
            elif mf.model in sel.tied:
                mark = Cell("tied", title=f"ΔAIC < {DELTA_AIC_CLEAR:g}")
            else:
                mark = Cell(DASH)
            rows.append([*ident, Cell(fmt_num(mf.alpha), cls="num"), Cell(fmt_ci(mf.alpha_ci), cls="num"),
                         Cell(fmt_num(mf.beta_us), cls="num"), Cell(fmt_ci(mf.beta_ci_us), cls="num"),
                         Cell(fmt_pct(mf.rel_rms), cls="num"), Cell(fmt_pct(mf.median_abs_rel), cls="num"),
                         Cell(fmt_num(mf.delta_aic, 2), cls="num"), mark])
    return Table(cols, rows, caption="Model families fitted to the same multi-node points (ΔAIC to the lowest AIC)",
                 filterable=True)


def _per_size_table(entries: list[Entry]) -> Table:
    cols = ["Benchmark", "Series", "Model", "which", "size", "points (m, k)", "α", "α 95 % CI", "1/α (of line rate)",
            "β (µs)", "β", "β at the all-size α (µs)", "its 95 % CI"]
    rows: list[list[Cell]] = []
    for f in entries:
        assert f.families is not None  # _with_families keeps only these
        best, named = f.families.per_size, f.families.per_size_named
        if best is not None:
            rows += _per_size_rows(f, best, "best")
        if named is not None and not (best is not None and best.model == named.model):
            rows += _per_size_rows(f, named, "named")  # unless the named model is the best one: shown already
    return Table(cols, rows, caption="α, β and 1/α per message size, for the best model of each series and for the "
                 "named (original) model (Alltoall linear, Allgather node ring), and the β each size implies at the "
                 "all-size α", filterable=True, scroll=True)


def _per_size_rows(f: Entry, ps: PerSize, which: str) -> list[list[Cell]]:
    model = MODELS.get(ps.model)
    label = model.label if model else ps.model
    rows: list[list[Cell]] = []
    for r in ps.rows:
        rows.append([cell(f.benchmark), Cell(_choice_name(f)), Cell(label, title=model.formula if model else None),
                     Cell(which),
                     Cell(fmt_bytes(r.bytes)), cell(r.n_points),
                     Cell(fmt_num(r.alpha), cls="num"), Cell(fmt_ci(r.alpha_ci), cls="num"),
                     Cell(fmt_pct(r.inv_alpha), cls="num"), Cell(fmt_num(r.beta_us), cls="num"),
                     Cell("held at the all-size fit" if r.beta_fixed else "fitted",
                          title=("this size's points cannot separate α from β (fewer than 3 (m, k), or the ring "
                                 "at one k): β is the all-size value, α alone is fitted") if r.beta_fixed else None),
                     Cell(fmt_num(r.beta_at_alpha_us), cls="num",
                          title="the β this size implies with α held at the all-size fit: a drift over sizes "
                                "is a per-message cost the model lacks"),
                     Cell(fmt_ci(r.beta_at_alpha_ci_us), cls="num")])
    return rows


def _choice_blocks(result: AlphaBetaFits) -> list[Block]:
    entries = _with_families(result)
    if not entries:
        return []
    selections = [(f, f.families.selection) for f in entries if f.families is not None]
    texts = [f"{f.benchmark}: {_choice_name(f)}: {sel.text}" for f, sel in selections if sel.text]
    criterion = next((sel.criterion for _, sel in selections), "")
    return [Heading("Which algorithm model fits"),
            Text("Each family counts only the bytes that cross a node's link (k ranks per node, m nodes, block "
                 "placement) and one β per step that crosses it: Alltoall linear, pairwise, Bruck; Allgather ring, "
                 "linear, recursive doubling, Bruck (hover a model for its formula). Beside them the naive Allgather "
                 "model, t = α · x · (P − 1) / b + β: every rank takes in the P − 1 other blocks over a link of its "
                 "own, placement ignored, so its α is not a fraction of a real link's rate; it shows what the "
                 f"placement explains. Choice: {criterion}."),
            Notice("Best model per series:", "info", texts), _choice_table(entries), _per_size_table(entries)]


# -- the section ---------------------------------------------------------------------------


def section_alphabeta(data: ReportData) -> Section | None:
    document = data.fits.get("alphabeta")
    if document is None:
        if not _multinode_samples(data):
            return None  # a single-node campaign: nothing to model, nothing to miss
        return Section(TITLE, [Notice("Multi-node Alltoall/Allgather samples exist but fits/alphabeta.json is "
                                      "missing: no α-β model.", "warn")], id=SECTION_ID)
    try:
        result = AlphaBetaFits.from_json(document, f"fits/{ALPHABETA_FIT}")
    except FitRecordError as exc:
        return Section(TITLE, [Notice(f"{exc}: not an α-β fits object (network, fits, notes): ignored.", "error")],
                       id=SECTION_ID)
    blocks: list[Block] = [Text(
        f"Alltoall: {FORMULAS['Alltoall']};  Allgather (ring): {FORMULAS['Allgather']}; x = message size "
        "(IMB's per-pair / per-rank block), m = nodes, k = ranks per node, "
        f"b = nominal link bandwidth ({result.network.name or 'network'}: "
        f"{fmt_num(result.network.bandwidth_gbit_s)} Gbit/s). α is the time relative to the link at line rate: "
        "α = 1 is the speed of light, α > 1 slower; "
        "α ≫ 1 says the link is not what limits the collective (intra-node copies, protocol, contention), α < 1 "
        "would beat the link (check b and k). β ≥ 0 is a latency (µs; per ring step for Allgather). Fitted over "
        "all sizes and node counts by relative least squares with α, β ≥ 0; medians over repetitions; 95 % "
        f"bootstrap CIs; time = {result.time_column or 'IMB t'}. Points: median, bars: min–max over "
        "repetitions; solid lines: the fit per m; dashed grey: the speed of light for the largest m.")]
    fits, notes = list(result.fits), list(result.notes)
    if not fits:  # e.g. a single-node campaign: say so, without the model's explanation
        return Section(TITLE, [Notice("No multi-node Alltoall/Allgather series: nothing fitted.", "info", notes)],
                       id=SECTION_ID)
    if notes:
        blocks.append(Notice("Fit notes:", "info", notes))
    failed = [f"{f.benchmark}: {_series_name(f)}: {f.error}" for f in fits if f.error is not None]
    if failed:
        blocks.append(Notice("The α-β fit was refused for these series:", "warn", failed))
    over = [f"{f.benchmark}: {_series_name(f)}" for f in fits if f.oversubscribed]
    if over:
        blocks.append(Notice("These series include oversubscribed cells (more ranks than cores); their timings "
                             "are not representative:", "warn", over))
    blocks.append(_param_table(fits))
    blocks += _choice_blocks(result)
    for bench in FORMULAS:
        good = [f for f in fits if f.benchmark == bench and _usable(f)]
        if good:
            blocks += [Heading(bench), *(_fit_block(f) for f in sorted(good, key=_series_name))]
    return Section(TITLE, list(blocks), id=SECTION_ID)


def _fit_block(f: AlphaBetaRecord) -> Block:
    """One fitted series: its chart and residuals, or why there is nothing to draw."""
    pts = _points_frame(f)
    if pts.height == 0:
        return Notice(f"{f.benchmark}: {_series_name(f)}: no positive points to draw.", "info")
    return ChartBlock(chart_spec(_fit_chart(f, pts)), (
        f"{f.benchmark}, {_series_name(f)}: α = {fmt_num(f.alpha)} ({fmt_ci(f.alpha_ci)}), "
        f"β = {fmt_num(f.beta_us)} µs, {f.n_points} points, rel. RMS {fmt_pct(f.rel_rms)}."))

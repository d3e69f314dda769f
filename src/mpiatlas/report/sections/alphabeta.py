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

from typing import Any

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.stats.aggregate import scalar
from mpiatlas.models.alphabeta import FORMULAS, predict, speed_of_light
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


def _series_name(f: dict[str, Any]) -> str:
    """``intelmpi · ofi-tcp · off_cache=-1 · knobs=eager · block · k = 2``: every axis of the fit's series
    key that is set (files from before the options/knobs/placement axes name none)."""
    alg = f.get("algorithm")
    parts = [str(f.get("stack") or "?"), str(f.get("transport") or "?")]
    if alg not in (None, "default"):
        parts.append(str(alg))
    if any(f.get(axis) for axis in SERIES_AXES):
        parts.append(_axes_text(f))
    return f"{' · '.join(parts)} · k = {f.get('ppn')}"


def _multinode_samples(data: ReportData) -> bool:
    """Whether the samples hold multi-node Alltoall/Allgather rows (then a missing fit is worth saying)."""
    s = data.samples
    if s is None or "nodes" not in s.columns or "benchmark" not in s.columns:
        return False
    return s.filter(pl.col("benchmark").is_in(list(FORMULAS)) & (pl.col("nodes") > 1)).height > 0


def _b_bytes_per_us(f: dict[str, Any]) -> float | None:
    gbit = f.get("bandwidth_gbit_s")
    return gbit * 1e9 / 8 / 1e6 if isinstance(gbit, (int, float)) and gbit > 0 else None


def _usable(f: dict[str, Any]) -> bool:
    return (f.get("error") is None and f.get("benchmark") in FORMULAS and isinstance(f.get("ppn"), int)
            and _b_bytes_per_us(f) is not None and isinstance(f.get("alpha"), (int, float))
            and isinstance(f.get("beta_us"), (int, float)) and isinstance(f.get("points"), list))


# -- chart ---------------------------------------------------------------------------------


def _points_frame(f: dict[str, Any]) -> pl.DataFrame:
    rows = [p for p in f["points"] if isinstance(p, dict) and (p.get("bytes") or 0) > 0
            and (p.get("measured_us") or 0) > 0 and isinstance(p.get("nodes"), int)]
    df = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    if df.height == 0:
        return df
    return with_size(df.with_columns(
        pl.format("m = {}", pl.col("nodes")).alias("m"),
        pl.when(pl.col("used")).then(pl.lit("fitted")).otherwise(pl.lit("not fitted (m = 1)")).alias("point")))


def _curves(f: dict[str, Any], pts: pl.DataFrame) -> pl.DataFrame:
    """Model per m, and the speed of light of the largest m, on a log grid of sizes."""
    lo, hi = scalar(pts.get_column("bytes").min()), scalar(pts.get_column("bytes").max())
    grid = np.geomspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
    bench, k, b = f["benchmark"], f["ppn"], _b_bytes_per_us(f)
    if b is None:
        raise ValueError(f"{bench}: a fit without network.bandwidth_gbit_s has no curves (not _usable)")
    rows: list[dict[str, Any]] = []
    nodes = sorted(set(pts.get_column("nodes").to_list()))
    for m in nodes:
        t = predict(bench, f["alpha"], f["beta_us"], m, grid, k, b)
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


def _fit_chart(f: dict[str, Any], pts: pl.DataFrame) -> alt.LayerChart | alt.FacetChart | alt.HConcatChart:
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
        width=CHART_W, height=CHART_H, title=f"{f['benchmark']}: {_series_name(f)}")
    res = meas.filter(pl.col("point") == "fitted").with_columns(
        (pl.col("predicted_us") / pl.col("measured_us") - 1.0).alias("rel_err"))
    if res.height == 0:
        return main
    resid = residual_chart(res, color, "residuals of the fit", width=CHART_W, height=CHART_H,
                           tooltip=[alt.Tooltip("m:N", title="nodes"), size_tip(),
                                    alt.Tooltip("rel_err:Q", format=".2%")])
    return alt.hconcat(main, resid)


# -- table ---------------------------------------------------------------------------------


def _param_table(fits: list[dict[str, Any]]) -> Table:
    show_alg = any(f.get("algorithm") not in (None, "default") for f in fits)
    show_axes = any(f.get(axis) for f in fits for axis in SERIES_AXES)
    cols = ["Benchmark", "Stack", "Transport", *(["Algorithm"] if show_alg else []),
            *(["Options · knobs · placement"] if show_axes else []), "k (ranks/node)",
            "nodes m", "b (Gbit/s)", "α", "α 95 % CI", "β (µs)", "β 95 % CI", "points", "R²", "rel. RMS",
            "CI method", "notes"]
    rows: list[list[Cell]] = []
    for f in sorted(fits, key=lambda f: (str(f.get("benchmark")), _series_name(f))):
        ident = [cell(f.get("benchmark")), cell(f.get("stack")), cell(f.get("transport")),
                 *([cell(f.get("algorithm"))] if show_alg else []),
                 *([Cell(_axes_text(f))] if show_axes else []), cell(f.get("ppn"))]
        notes = [n for n in f.get("notes") or [] if isinstance(n, str)]
        note_cell = Cell("; ".join(n.split(":")[0] for n in notes) or DASH, title="\n".join(notes) or None)
        if f.get("error") is not None:
            rows.append([*ident, Cell(f"not fitted: {f['error']}", cls="bad wrap", colspan=len(cols) - len(ident) - 1),
                         note_cell])
            continue
        nodes = f.get("nodes") or []
        rows.append([
            *ident, Cell(", ".join(str(m) for m in nodes) or DASH),
            Cell(fmt_num(f.get("bandwidth_gbit_s")), cls="num"),
            Cell(fmt_num(f.get("alpha")), cls="num"), Cell(fmt_ci(f.get("alpha_ci")), cls="num"),
            Cell(fmt_num(f.get("beta_us")), cls="num"), Cell(fmt_ci(f.get("beta_ci_us")), cls="num"),
            cell(f.get("n_points")), Cell(fmt_num(f.get("r2"), 4), cls="num"),
            Cell(fmt_pct(f.get("rel_rms")), cls="num"), cell(f.get("ci_method")), note_cell,
        ])
    return Table(cols, rows, caption="α-β parameters (α dimensionless, β in µs)")


def _axes_text(f: dict[str, Any]) -> str:
    """The fit's IMB options, knob set and placement over nodes ("—" for none of them)."""
    return " · ".join(str(f[a]) if a != "knobs" else f"knobs={f[a]}" for a in SERIES_AXES if f.get(a)) or DASH


# -- model choice and per-size tables ---------------------------------------------------------


def _choice_name(f: dict[str, Any]) -> str:
    if f.get("ppn") is None and isinstance(f.get("ppns"), list):
        base = _series_name({**f, "ppn": None}).rsplit(" · k = ", 1)[0]
        return f"{base} · pooled over k = {', '.join(str(k) for k in f['ppns'])}"
    return _series_name(f)


def _with_families(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-k entries and pooled entries that carry a model comparison (files from before have none)."""
    pooled = given if isinstance(given := result.get("pooled"), list) else []
    out = [f for f in [*result["fits"], *pooled] if isinstance(f, dict) and isinstance(f.get("models"), list)
           and f.get("error") is None]
    return sorted(out, key=lambda f: (str(f.get("benchmark")), f.get("ppn") is None, _choice_name(f)))


def _choice_table(entries: list[dict[str, Any]]) -> Table:
    cols = ["Benchmark", "Series", "Model", "α", "α 95 % CI", "β (µs)", "β 95 % CI", "rel. RMS",
            "median |rel. res.|", "ΔAIC", "choice"]
    rows: list[list[Cell]] = []
    for f in entries:
        sel = given if isinstance(given := f.get("selection"), dict) else {}
        for mf in f["models"]:
            if not isinstance(mf, dict):
                continue
            ident = [cell(f.get("benchmark")), Cell(_choice_name(f)), Cell(str(mf.get("label") or mf.get("model")),
                                                                           title=mf.get("formula"))]
            if mf.get("error"):
                rows.append([*ident, Cell(f"not fitted: {mf['error']}", cls="wrap", colspan=len(cols) - 3)])
                continue
            if mf.get("model") == f.get("best_model"):
                mark = Cell(f"best ({sel.get('verdict')})", cls="ok" if sel.get("verdict") == "clear" else None)
            elif mf.get("plausible") is False:
                mark = Cell("excluded: α < 1", title="its whole α 95 % CI is below 1: faster than the link's line rate")
            elif mf.get("model") in (sel.get("tied") or []):
                mark = Cell("tied", title=f"ΔAIC < {DELTA_AIC_CLEAR:g}")
            else:
                mark = Cell(DASH)
            rows.append([*ident, Cell(fmt_num(mf.get("alpha")), cls="num"), Cell(fmt_ci(mf.get("alpha_ci")), cls="num"),
                         Cell(fmt_num(mf.get("beta_us")), cls="num"), Cell(fmt_ci(mf.get("beta_ci_us")), cls="num"),
                         Cell(fmt_pct(mf.get("rel_rms")), cls="num"), Cell(fmt_pct(mf.get("median_abs_rel")), cls="num"),
                         Cell(fmt_num(mf.get("delta_aic"), 2), cls="num"), mark])
    return Table(cols, rows, caption="Model families fitted to the same multi-node points (ΔAIC to the lowest AIC)",
                 filterable=True)


_PER_SIZE_KINDS = (("per_size", "best"), ("per_size_named", "named"))


def _per_size_table(entries: list[dict[str, Any]]) -> Table:
    cols = ["Benchmark", "Series", "Model", "which", "size", "points (m, k)", "α", "α 95 % CI", "1/α (of line rate)",
            "β (µs)", "β", "β at the all-size α (µs)", "its 95 % CI"]
    rows: list[list[Cell]] = []
    for f in entries:
        for key, which in _PER_SIZE_KINDS:
            ps = f.get(key) if isinstance(f.get(key), dict) else None
            if ps is None or not isinstance(ps.get("rows"), list):
                continue
            if which == "named" and isinstance(f.get("per_size"), dict) and f["per_size"].get("model") == ps.get("model"):
                continue  # the named model is the best one: its rows are already there
            rows += _per_size_rows(f, ps, which)
    return Table(cols, rows, caption="α, β and 1/α per message size, for the best model of each series and for the "
                 "named (original) model (Alltoall linear, Allgather node ring), and the β each size implies at the "
                 "all-size α", filterable=True, scroll=True)


def _per_size_rows(f: dict[str, Any], ps: dict[str, Any], which: str) -> list[list[Cell]]:
    model = MODELS.get(str(ps.get("model")))
    label = model.label if model else str(ps.get("model"))
    rows: list[list[Cell]] = []
    for r in ps["rows"]:
        if not isinstance(r, dict):
            continue
        fixed = bool(r.get("beta_fixed"))
        rows.append([cell(f.get("benchmark")), Cell(_choice_name(f)), Cell(label, title=model.formula if model else None),
                     Cell(which),
                     Cell(fmt_bytes(r.get("bytes"))), cell(r.get("n_points")),
                     Cell(fmt_num(r.get("alpha")), cls="num"), Cell(fmt_ci(r.get("alpha_ci")), cls="num"),
                     Cell(fmt_pct(r.get("inv_alpha")), cls="num"), Cell(fmt_num(r.get("beta_us")), cls="num"),
                     Cell("held at the all-size fit" if fixed else "fitted",
                          title=("this size's points cannot separate α from β (fewer than 3 (m, k), or the ring "
                                 "at one k): β is the all-size value, α alone is fitted") if fixed else None),
                     Cell(fmt_num(r.get("beta_at_alpha_us")), cls="num",
                          title="the β this size implies with α held at the all-size fit: a drift over sizes "
                                "is a per-message cost the model lacks"),
                     Cell(fmt_ci(r.get("beta_at_alpha_ci_us")), cls="num")])
    return rows


def _choice_blocks(result: dict[str, Any]) -> list[Any]:
    entries = _with_families(result)
    if not entries:
        return []
    texts = [f"{f.get('benchmark')}: {_choice_name(f)}: {f['selection'].get('text')}" for f in entries
             if isinstance(f.get("selection"), dict) and f["selection"].get("text")]
    criterion = next((f["selection"].get("criterion") for f in entries if isinstance(f.get("selection"), dict)), "")
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
    result = data.fits.get("alphabeta")
    if result is None:
        if not _multinode_samples(data):
            return None  # a single-node campaign: nothing to model, nothing to miss
        return Section(TITLE, [Notice("Multi-node Alltoall/Allgather samples exist but fits/alphabeta.json is "
                                      "missing: no α-β model.", "warn")], id=SECTION_ID)
    if not isinstance(result, dict) or not isinstance(result.get("fits"), list):
        return Section(TITLE, [Notice("fits/alphabeta.json is not an α-β fits object (network, fits, notes): "
                                      "ignored.", "error")], id=SECTION_ID)
    net = given if isinstance(given := result.get("network"), dict) else {}
    fits = [f for f in result["fits"] if isinstance(f, dict)]
    blocks: list[Any] = [Text(
        f"Alltoall: {FORMULAS['Alltoall']};  Allgather (ring): {FORMULAS['Allgather']}; x = message size "
        "(IMB's per-pair / per-rank block), m = nodes, k = ranks per node, "
        f"b = nominal link bandwidth ({net.get('name') or 'network'}: {fmt_num(net.get('bandwidth_gbit_s'))} "
        "Gbit/s). α is the time relative to the link at line rate: α = 1 is the speed of light, α > 1 slower; "
        "α ≫ 1 says the link is not what limits the collective (intra-node copies, protocol, contention), α < 1 "
        "would beat the link (check b and k). β ≥ 0 is a latency (µs; per ring step for Allgather). Fitted over "
        "all sizes and node counts by relative least squares with α, β ≥ 0; medians over repetitions; 95 % "
        f"bootstrap CIs; time = {result.get('time_column') or 'IMB t'}. Points: median, bars: min–max over "
        "repetitions; solid lines: the fit per m; dashed grey: the speed of light for the largest m.")]
    notes = [n for n in result.get("notes") or [] if isinstance(n, str)]
    if not fits:  # e.g. a single-node campaign: say so, without the model's explanation
        return Section(TITLE, [Notice("No multi-node Alltoall/Allgather series: nothing fitted.", "info", notes)],
                       id=SECTION_ID)
    if notes:
        blocks.append(Notice("Fit notes:", "info", notes))
    failed = [f"{f.get('benchmark')}: {_series_name(f)}: {f['error']}" for f in fits if f.get("error") is not None]
    if failed:
        blocks.append(Notice("The α-β fit was refused for these series:", "warn", failed))
    over = [f"{f.get('benchmark')}: {_series_name(f)}" for f in fits if f.get("oversubscribed")]
    if over:
        blocks.append(Notice("These series include oversubscribed cells (more ranks than cores); their timings "
                             "are not representative:", "warn", over))
    blocks.append(_param_table(fits))
    blocks += _choice_blocks(result)
    for bench in FORMULAS:
        good = [f for f in fits if f.get("benchmark") == bench and _usable(f)]
        if not good:
            continue
        blocks.append(Heading(bench))
        for f in sorted(good, key=_series_name):
            pts = _points_frame(f)
            if pts.height == 0:
                blocks.append(Notice(f"{bench}: {_series_name(f)}: no positive points to draw.", "info"))
                continue
            blocks.append(ChartBlock(chart_spec(_fit_chart(f, pts)), (
                f"{bench}, {_series_name(f)}: α = {fmt_num(f['alpha'])} ({fmt_ci(f.get('alpha_ci'))}), "
                f"β = {fmt_num(f['beta_us'])} µs, {f.get('n_points')} points, rel. RMS "
                f"{fmt_pct(f.get('rel_rms'))}.")))
    return Section(TITLE, blocks, id=SECTION_ID)

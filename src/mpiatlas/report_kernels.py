"""Report sections of the C kernels (ring, matsum, jacobi): measurements with the model overlaid.

Registered by :mod:`mpiatlas.report` (thin wrappers before the Cells section, so the sections
keep their place in the page). Each reads ``kernel_<name>.parquet`` from the tidy directory and
``fits/kernels.json`` (``data.fits["kernels"]``, :mod:`mpiatlas.models.kernels`), and shows: the
model formula, measured points with the model overlaid, the residuals, the one-line statement of
where the model fails, and which cells were oversubscribed (more ranks × threads than cores).
A section is left out when the campaign has no cell of its kernel.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.report import (
    CHART_H,
    CHART_W,
    DASH,
    Cell,
    ChartBlock,
    Details,
    Heading,
    InputFile,
    Notice,
    ReportData,
    Section,
    Table,
    Text,
    _color,
    _round,
    cell,
    chart_spec,
    fmt_bool,
    fmt_bytes,
    fmt_ci,
    fmt_num,
)

KERNEL_TITLES = {
    "ring": "Kernel: message ring",
    "matsum": "Kernel: distributed matrix sum",
    "jacobi": "Kernel: 3-D Jacobi halo exchange",
}
OVER = "oversubscribed (ranks × threads > cores)"
FITTED = "P ≤ cores"


def kernel_table(data: ReportData, name: str) -> pl.DataFrame | None:
    """``kernel_<name>.parquet`` of the tidy directory (cached on ``data``), None when absent or empty."""
    cache = data.__dict__.setdefault("_kernel_tables", {})
    if name in cache:
        return cache[name]
    df = None
    if data.tidy_dir is not None:
        path = data.tidy_dir / f"kernel_{name}.parquet"
        if path.is_file():
            try:
                df = pl.read_parquet(path)
                data.inputs.append(InputFile(f"kernel:{name}", str(path), "ok", f"{df.height} rows"))
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                data.inputs.append(InputFile(f"kernel:{name}", str(path), "error", f"{type(exc).__name__}: {exc}"))
    cache[name] = df if df is not None and df.height else None
    return cache[name]


def kernel_fits(data: ReportData, name: str) -> list[dict[str, Any]] | None:
    fits = data.fits.get("kernels")
    if not isinstance(fits, dict):
        return None
    entries = fits.get(name)
    return [f for f in entries if isinstance(f, dict)] if isinstance(entries, list) else None


def _over_cell(over: Any) -> Cell:
    return Cell(fmt_bool(over), cls="bad" if over else None, title=OVER if over else None)


def _err_cell(rel: Any) -> Cell:
    if rel is None:
        return Cell(DASH)
    return Cell(f"{100 * rel:+.0f} %", cls="bad" if abs(rel) > 0.25 else "ok", title="model / measured − 1")


def _status_notice(df: pl.DataFrame, name: str) -> list[Any]:
    if "cell_status" not in df.columns:
        return []
    bad = df.filter(pl.col("cell_status") != "ok").get_column("cell").unique().sort().to_list()
    if not bad:
        return []
    return [Notice(f"{len(bad)} {name} cell(s) produced records but are not ok (see Campaign): their rows are "
                   "kept in the table but left out of the models.", "warn", bad[:20])]


def _no_fit_notice(name: str, fits: list[dict[str, Any]] | None) -> list[Any]:
    if fits is None:
        return [Notice(f"No {name} model (fits/kernels.json missing or without '{name}'): measurements only.", "warn")]
    errors = [f"{f.get('label')}: {f['error']}" for f in fits if "error" in f]
    return [Notice(f"Some {name} models could not be fitted.", "warn", errors)] if errors else []


def _failure_notice(fits: list[dict[str, Any]], prefix: str = "") -> Notice | None:
    items = [f"{prefix}{f.get('label')}{_extra(f)}: {f['fails_where']}" for f in fits if f.get("fails_where")]
    if not items:
        return None
    return Notice("Where the model fails:", "info", items)


def _extra(f: dict[str, Any]) -> str:
    parts = [f"topo={''.join(map(str, f['topo']))}" if isinstance(f.get("topo"), list) else
             (f"topo={f['topo']}" if f.get("topo") is not None else None),
             f"dist={f['dist']}" if f.get("dist") is not None else None]
    parts = [p for p in parts if p]
    return f" ({', '.join(parts)})" if parts else ""


def _layer_chart(points: pl.DataFrame, x: str, x_title: str, y_meas: str, y_pred: str | None, y_title: str,
                 title: str, *, facet: str | None = "label", log_y: bool = True) -> alt.TopLevelMixin:
    """Measured points (circles: P ≤ cores, triangles: oversubscribed) with the model as a dashed line
    (hollow squares at the measured P)."""
    # All-null columns have no type a chart can take (e.g. a phase time the kernel did not report).
    data = _round(points.select(c for c, t in points.schema.items() if t != pl.Null))
    domain = sorted(data.get_column("series").unique().to_list())
    sel = alt.selection_point(name="pick", fields=["series"], bind="legend")
    xs = sorted(data.get_column(x).drop_nulls().unique().to_list())
    x_enc = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(values=xs, format="d"), scale=alt.Scale(zero=False))
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=True)
    tips = [c for c in data.columns if c not in ("series",)]
    base = alt.Chart(data)
    measured = base.mark_point(size=60, filled=True).encode(
        x=x_enc, y=alt.Y(f"{y_meas}:Q", title=y_title, scale=y_scale),
        color=_color(domain), shape=alt.Shape("placement:N", title="placement",
                                              scale=alt.Scale(domain=[FITTED, OVER], range=["circle", "triangle-up"])),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.1)), tooltip=tips,
    )
    layers = [measured]
    if y_pred:
        # Hollow squares on the dashed line: the model stays visible at a single P too.
        layers.insert(0, base.mark_line(strokeDash=[5, 3], point=alt.OverlayMarkDef(
            shape="square", filled=False, size=45)).encode(
            x=x_enc, y=alt.Y(f"{y_pred}:Q", scale=y_scale), color=_color(domain),
            opacity=alt.condition(sel, alt.value(0.8), alt.value(0.05)), tooltip=tips,
        ))
    chart = alt.layer(*layers).add_params(sel)
    if facet and data.get_column(facet).n_unique() > 1:
        return chart.properties(width=CHART_W, height=CHART_H).facet(
            facet=alt.Facet(f"{facet}:N", title=None), columns=2).properties(title=title)
    return chart.properties(width=2 * CHART_W, height=CHART_H + 40, title=title)


# --------------------------------------------------------------------------------------------- ring


def section_ring(data: ReportData) -> Section | None:
    df = kernel_table(data, "ring")
    fits = kernel_fits(data, "ring")
    if df is None and not fits:
        return None
    blocks: list[Any] = [Text(
        "Each rank passes a left- and a right-going message around a periodic ring for P steps "
        "(one full exchange); times are per full exchange, the slowest rank's, median over repetitions. "
        "Model (m = streams, t(s) = one-way PingPong time, φ(P) = message phases per shift): "
        "nonblocking T = P·m·t(s) (= 2·P·λ for small messages and 2 streams); blocking T = P·m·φ(P)·t(s) with "
        "φ = 2 for even P and 3 for odd P (ranks 0 and P−1 are both even: the wrap-around pair adds a phase when "
        "a send waits for its receive); ssend T = P·m·φ(P)·(2λ + s/B) (rendezvous: ≈ 2λ per message). "
        "Dashed lines with hollow squares: model; circles: measured with P ≤ cores; triangles: oversubscribed.")]
    blocks += _no_fit_notice("ring", fits)
    if df is not None:
        blocks += _status_notice(df, "ring")
    good = [f for f in fits or [] if "error" not in f]
    if good:
        blocks.append(Heading("Latency λ: ring-implied vs PingPong"))
        blocks.append(Table(
            ["Stack / transport / mapping", "λ source", "PingPong λ (µs)", "ring λ (µs) [95 % CI]",
             "ring / PingPong", "ring B (MB/s)", "Nonblocking points within 25 %"],
            [[cell(f.get("label")), Cell(f.get("lambda_source") or DASH, title=f.get("lambda_note")),
              Cell(fmt_num(f.get("pingpong_latency_us")), cls="num"),
              Cell(f"{fmt_num(f.get('ring_latency_us'))} {fmt_ci(f.get('ring_latency_ci_us'))}", cls="num"),
              Cell(fmt_num(f.get("ring_vs_pingpong_latency")), cls="num"),
              Cell(fmt_num(f.get("ring_bandwidth_MBps"), 0) if f.get("ring_bandwidth_MBps") else DASH, cls="num"),
              cell(f.get("nonblocking_points_within_25pct"))] for f in good],
            caption="Ring-implied λ: T_nonblocking/(P·m) = λ + s/B fitted over the cells with P ≤ cores.",
        ))
        notes = [f"{f['label']}: {f['lambda_note']}" for f in good if f.get("lambda_source") == "ring"]
        if notes:
            blocks.append(Notice("λ taken from the ring itself (no PingPong for these):", "warn", notes))
        notice = _failure_notice(good)
        if notice:
            blocks.append(notice)
        rows = [{**p, "label": f["label"]} for f in good for p in f.get("points", [])]
        if rows:
            pts = pl.DataFrame(rows).with_columns(
                pl.concat_str([pl.col("variant"), pl.lit(" · "),
                               pl.col("bytes").map_elements(fmt_bytes, return_dtype=pl.String),
                               pl.lit(" · "), pl.col("streams").cast(pl.String), pl.lit(" streams")]).alias("series"),
                pl.when(pl.col("oversubscribed")).then(pl.lit(OVER)).otherwise(pl.lit(FITTED)).alias("placement"),
            ).select("label", "series", "np", "measured_us", "predicted_us", "rel_err", "phases_measured",
                     "phases_model", "placement", "n_reps")
            blocks.append(ChartBlock(chart_spec(_layer_chart(
                pts, "np", "processes P", "measured_us", "predicted_us", "time per full exchange (µs)",
                "Ring: measured (marks) and model (dashed) vs P"))))
            blocks.append(Details("Ring residuals", [Table(
                ["Stack / transport / mapping", "Variant", "Streams", "Bytes", "P", "Oversub.", "Measured (µs)",
                 "Model (µs)", "Error", "Phases/shift measured", "Phases/shift model", "Reps"],
                [[cell(f["label"]), cell(p["variant"]), cell(p["streams"]), Cell(fmt_bytes(p["bytes"])),
                  cell(p["np"]), _over_cell(p["oversubscribed"]), Cell(fmt_num(p["measured_us"]), cls="num"),
                  Cell(fmt_num(p["predicted_us"]), cls="num"), _err_cell(p["rel_err"]),
                  Cell(fmt_num(p.get("phases_measured")), cls="num"), cell(p.get("phases_model")), cell(p["n_reps"])]
                 for f in good for p in f.get("points", [])],
                filterable=True, scroll=True,
                caption="Error = model / measured − 1. Phases/shift measured = T / (P·m·t(s)).")], open=True))
    elif df is not None:
        blocks.append(_raw_table(df, ["label", "variant", "streams", "bytes", "np", "oversubscribed"], "time_us"))
    return Section(KERNEL_TITLES["ring"], blocks, id="kernel-ring")


def _raw_table(df: pl.DataFrame, keys: list[str], value: str) -> Table:
    keys = [k for k in keys if k in df.columns]
    ok = df.filter(pl.col("cell_status") == "ok") if "cell_status" in df.columns else df
    agg = (ok.group_by(keys).agg(pl.col(value).median().alias("median"), pl.col("cell").n_unique().alias("cells"))
           .sort(keys))
    return Table([*keys, f"median {value}", "cells"],
                 [[cell(r[k]) for k in keys] + [Cell(fmt_num(r["median"]), cls="num"), cell(r["cells"])]
                  for r in agg.iter_rows(named=True)], caption="Measurements (no model available).")


# ------------------------------------------------------------------------------------------- matsum


def section_matsum(data: ReportData) -> Section | None:
    df = kernel_table(data, "matsum")
    fits = kernel_fits(data, "matsum")
    if df is None and not fits:
        return None
    blocks: list[Any] = [Text(
        "Rank 0 scatters A and B, every rank adds its part, rank 0 gathers C; T = total time of one iteration "
        "(slowest rank, median over repetitions). Model (Amdahl with communication): T(P) = s + p/min(P, cores) "
        "+ c·⌈log₂ P⌉, fitted with bounded least squares (s, p, c ≥ 0) on relative residuals; 95 % CIs from a "
        "bootstrap over repetitions; serial fraction s/(s+p). P beyond the node's cores cannot divide the work "
        "(oversubscribed ranks share cores).")]
    blocks += _no_fit_notice("matsum", fits)
    if df is not None:
        blocks += _status_notice(df, "matsum")
    good = [f for f in fits or [] if "error" not in f]
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "topo", "dist", "cores", "s (µs) [CI]", "p (µs) [CI]", "c (µs) [CI]",
             "serial fraction [CI]", "max speedup 1/f"],
            [[cell(f["label"]), cell(_topo(f.get("topo"))), cell(f.get("dist")), cell(f.get("cores")),
              Cell(f"{fmt_num(f['s_us'])} {fmt_ci(f.get('s_ci_us'))}", cls="num"),
              Cell(f"{fmt_num(f['p_us'])} {fmt_ci(f.get('p_ci_us'))}", cls="num"),
              Cell(f"{fmt_num(f['c_us'])} {fmt_ci(f.get('c_ci_us'))}", cls="num"),
              Cell(f"{fmt_num(f.get('serial_fraction'))} {fmt_ci(f.get('serial_fraction_ci'))}", cls="num"),
              Cell(fmt_num(f.get("max_speedup")), cls="num")] for f in good],
            caption="Fitted Amdahl parameters.",
        ))
        notice = _failure_notice(good)
        if notice:
            blocks.append(notice)
        rows = []
        curves = []
        for f in good:
            series = f"{f['label']} · topo {_topo(f.get('topo'))} · {f.get('dist')}"
            for p in f.get("points", []):
                rows.append({"label": f["label"], "series": series, "np": p["np"], "measured_us": p["measured_us"],
                             "predicted_us": p["predicted_us"], "rel_err": p["rel_err"],
                             "placement": OVER if p["oversubscribed"] else FITTED, "n_reps": p["n_reps"],
                             **{k: p.get(k) for k in ("scatter_us", "compute_us", "gather_us")}})
            grid = np.arange(1, max(p["np"] for p in f["points"]) + 1, dtype=float)
            model = (f["s_us"] + f["p_us"] / np.minimum(grid, f["cores"]) + f["c_us"] * np.ceil(np.log2(grid)))
            curves += [{"label": f["label"], "series": series, "np": int(g), "model_us": float(m)}
                       for g, m in zip(grid, model)]
        if rows:
            pts = pl.DataFrame(rows)
            curve = pl.DataFrame(curves)
            chart = _layer_chart(pts, "np", "processes P", "measured_us", None, "time per iteration (µs)",
                                 "Matsum: measured (marks) and Amdahl fit (dashed) vs P", facet=None)
            line = alt.Chart(_round(curve)).mark_line(strokeDash=[5, 3]).encode(
                x="np:Q", y=alt.Y("model_us:Q", scale=alt.Scale(type="log")),
                color=_color(sorted(curve.get_column("series").unique().to_list())),
                tooltip=["series:N", "np:Q", alt.Tooltip("model_us:Q", format=".4~g")])
            blocks.append(ChartBlock(chart_spec(alt.layer(line, chart).properties(
                width=2 * CHART_W, height=CHART_H + 40))))
            blocks.append(Details("Matsum residuals", [Table(
                ["Series", "P", "Oversub.", "Measured (µs)", "Model (µs)", "Error", "scatter (µs)", "compute (µs)",
                 "gather (µs)", "Reps"],
                [[cell(r["series"]), cell(r["np"]), _over_cell(r["placement"] == OVER),
                  Cell(fmt_num(r["measured_us"]), cls="num"), Cell(fmt_num(r["predicted_us"]), cls="num"),
                  _err_cell(r["rel_err"]), Cell(fmt_num(r.get("scatter_us")), cls="num"),
                  Cell(fmt_num(r.get("compute_us")), cls="num"), Cell(fmt_num(r.get("gather_us")), cls="num"),
                  cell(r["n_reps"])] for r in rows],
                filterable=True, caption="Phases: slowest rank, median over repetitions.")], open=True))
    gather = [(f, g) for f in fits or [] for g in f.get("gather_order", [])]
    if gather:
        blocks.append(Heading("Gather time per rank: the tree's signature"))
        blocks.append(Table(
            ["Stack / transport / mapping", "P", "gather µs by rank", "slowest first", "binomial subtree sizes",
             "ρ(binomial)", "ρ(linear)", "verdict"],
            [[cell(f["label"]), cell(g["np"]),
              Cell(", ".join(f"{r}: {fmt_num(v)}" for r, v in g["gather_us_by_rank"].items())),
              Cell(" > ".join(map(str, g["slowest_first"]))),
              Cell(", ".join(f"{r}: {s}" for r, s in g["binomial_subtree"].items())),
              Cell(fmt_num(g.get("spearman_binomial"))), Cell(fmt_num(g.get("spearman_linear"))),
              cell(g["verdict"])] for f, g in gather],
            caption="A binomial-tree gather keeps a rank waiting in proportion to its subtree (rank 2 of 4 waits "
                    "for rank 3); a linear gather serves ranks in order. ρ = Spearman correlation over the non-root "
                    "ranks.",
        ))
    if not good and df is not None:
        blocks.append(_raw_table(df, ["label", "np", "topo", "dist", "oversubscribed"], "total_us"))
    return Section(KERNEL_TITLES["matsum"], blocks, id="kernel-matsum")


def _topo(topo: Any) -> str:
    if isinstance(topo, list):
        return ",".join(map(str, topo))
    return DASH if topo is None else str(topo)


# ------------------------------------------------------------------------------------------- jacobi


def section_jacobi(data: ReportData) -> Section | None:
    df = kernel_table(data, "jacobi")
    fits = kernel_fits(data, "jacobi")
    if df is None and not fits:
        return None
    blocks: list[Any] = [Text(
        "3-D 7-point Jacobi on a Cartesian process grid, 6-face halo exchange per iteration (non-blocking, one "
        "Waitall), residual by Allreduce; MPI + OpenMP cells run `threads` threads per rank on the rank's own "
        "cores. Halo model: T_c = c/B + k·λ, c = bytes a rank sends per iteration, k = decomposed directions "
        "(process-grid axes with more than one rank), λ and B from the point-to-point fits. The measured halo time "
        "compared with the model is the least-waiting rank's (a rank's halo time also holds its wait for a late "
        "neighbour); the mean over ranks is shown beside it. Medians over repetitions.")]
    blocks += _no_fit_notice("jacobi", fits)
    if df is not None:
        blocks += _status_notice(df, "jacobi")
    good = [f for f in fits or [] if "error" not in f]
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "λ (µs)", "B (MB/s)", "source", "summary"],
            [[cell(f["label"]), Cell(fmt_num(f.get("latency_us")), cls="num"),
              Cell(fmt_num(f.get("bandwidth_MBps"), 0) if f.get("bandwidth_MBps") else DASH, cls="num"),
              Cell(f.get("lambda_source") or DASH, title=f.get("lambda_note")), cell(f.get("headline"))]
             for f in good]))
        notice = _failure_notice(good)
        if notice:
            blocks.append(notice)
        rows = [{**p, "label": f["label"]} for f in good for p in f.get("points", [])]
        blocks.append(Heading("Halo time: model vs measured, MLUP/s and scaling"))
        blocks.append(Table(
            ["Stack / transport / mapping", "Group", "P", "threads", "cores", "grid", "k", "bytes/rank", "msgs/rank",
             "Oversub.", "halo mean over ranks (µs)", "halo measured (µs)", "halo model (µs)", "Error",
             "iteration (µs)", "MLUP/s",
             "scaling efficiency"],
            [[cell(r["label"]), cell(r["variant_group"]), cell(r["np"]), cell(r["threads"]), cell(r["cores"]),
              cell("×".join(map(str, r.get("procdims") or [])) or DASH), cell(r["k"]),
              Cell(fmt_num(r["bytes_per_rank"], 0), cls="num"), Cell(fmt_num(r["messages_per_rank"]), cls="num"),
              _over_cell(r["oversubscribed"]), Cell(fmt_num(r.get("halo_mean_us")), cls="num"),
              Cell(fmt_num(r["halo_measured_us"]), cls="num"),
              Cell(fmt_num(r["halo_predicted_us"]), cls="num"), _err_cell(r.get("rel_err")),
              Cell(fmt_num(r["iteration_us"]), cls="num"), Cell(fmt_num(r["mlups_total"]), cls="num"),
              Cell(fmt_num(r.get("efficiency")), cls="num",
                   title=f"relative to P={r.get('efficiency_base_np')}" if r.get("efficiency") is not None else None)]
             for r in rows],
            filterable=True, scroll=len(rows) > 25,
            caption="Scaling efficiency of the pure MPI cells: weak T(1)/T(P), strong T(1)/(P·T(P)) "
                    "(relative to the smallest P). k = 0 cells have no halo to model.",
        ))
        modelled = [r for r in rows if r.get("halo_predicted_us") is not None and r["k"]]
        if modelled:
            pts = pl.DataFrame([{
                "label": r["label"], "series": f"{r['label']} · {r['variant_group']}", "np": r["np"],
                "halo_measured_us": r["halo_measured_us"], "halo_predicted_us": r["halo_predicted_us"],
                "rel_err": r.get("rel_err"), "bytes_per_rank": r["bytes_per_rank"], "k": r["k"],
                "placement": OVER if r["oversubscribed"] else FITTED} for r in modelled])
            blocks.append(ChartBlock(chart_spec(_layer_chart(
                pts, "np", "processes P", "halo_measured_us", "halo_predicted_us", "halo time per iteration (µs)",
                "Jacobi halo: measured (marks) and c/B + k·λ (dashed)"))))
        eff = [r for r in rows if r.get("efficiency") is not None]
        if eff:
            pts = pl.DataFrame([{"label": r["label"], "series": f"{r['label']} · {r['variant_group']}",
                                 "np": r["np"], "efficiency": r["efficiency"], "mlups_total": r["mlups_total"],
                                 "placement": OVER if r["oversubscribed"] else FITTED} for r in eff])
            blocks.append(ChartBlock(chart_spec(_layer_chart(
                pts, "np", "processes P", "efficiency", None, "scaling efficiency",
                "Jacobi: scaling efficiency of the pure MPI cells", log_y=False))))
        hybrid = [(f, h) for f in good for h in f.get("hybrid_vs_pure", [])]
        if hybrid:
            blocks.append(Heading("Pure MPI vs hybrid MPI + OpenMP at equal cores"))
            blocks.append(Table(
                ["Stack / transport / mapping", "cores", "hybrid ranks × threads", "pure ranks × threads",
                 "bytes/rank hybrid", "bytes/rank pure", "msgs/rank hybrid", "msgs/rank pure", "halo µs hybrid",
                 "halo µs pure", "MLUP/s hybrid", "MLUP/s pure"],
                [[cell(f["label"]), cell(h["cores"]), cell(h["hybrid"]), cell(h["pure"]),
                  Cell(fmt_num(h["hybrid_bytes_per_rank"], 0), cls="num"),
                  Cell(fmt_num(h["pure_bytes_per_rank"], 0), cls="num"),
                  Cell(fmt_num(h["hybrid_messages_per_rank"]), cls="num"),
                  Cell(fmt_num(h["pure_messages_per_rank"]), cls="num"),
                  Cell(fmt_num(h["hybrid_halo_us"]), cls="num"), Cell(fmt_num(h["pure_halo_us"]), cls="num"),
                  Cell(fmt_num(h["hybrid_mlups"]), cls="num"), Cell(fmt_num(h["pure_mlups"]), cls="num")]
                 for f, h in hybrid],
                caption="Fewer ranks per node send fewer halo bytes and messages per core; in weak mode the hybrid "
                        "rank owns L³ points for all its threads.",
            ))
    elif df is not None:
        blocks.append(_raw_table(df, ["label", "np", "cell_threads", "oversubscribed"], "halo_us"))
    return Section(KERNEL_TITLES["jacobi"], blocks, id="kernel-jacobi")



# ------------------------------------------------------------------------- pingpong / coll (own kernels)

P2P_COLL_TITLE = "mpiatlas pingpong / collectives (own kernels; Open MPI where IMB is unavailable)"
P2P_COLL_INTRO = (
    "These are mpiatlas's own OSU-style micro-benchmark kernels (src/kernels/pingpong.c and coll.c), not the "
    "Intel MPI Benchmarks (IMB): they are named pingpong and coll, never PingPong, Bcast or Allreduce, and their "
    "numbers are kept apart from IMB's. Open MPI has no IMB here (IMB must be built from source, which is not "
    "reachable offline), so for Open MPI these kernels are its only point-to-point and collective data; for the "
    "stacks with IMB they are a cross-check, and IMB PingPong's λ is shown next to the kernel's. "
    "pingpong: rank 0 sends, rank 1 echoes the message; t = half a round trip (IMB PingPong's convention), mean "
    "over the timed iterations, rank 0's, median over repetitions; bandwidth = bytes / t (MB/s = 10⁶ B/s). "
    "λ and B: the piecewise Hockney fit of models/hockney.py (the same procedure as IMB PingPong's fit), 95 % CIs "
    "from a bootstrap over repetitions. coll: OSU's convention, time per call with a barrier after each call "
    "(untimed), averaged over ranks (MPI_Reduce to rank 0), median over repetitions; 'default' is the stack's own "
    "algorithm choice, the others are forced with the same knobs as IMB's algorithm cells.")
MIB4 = 4 * 2**20


def _pingpong_medians(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rank 0's median time and bandwidth per (label, bytes) over the ok, valid repetitions."""
    if df is None:
        return None
    ok = df.filter(pl.col("rank") == 0)
    if "cell_status" in ok.columns:
        ok = ok.filter(pl.col("cell_status") == "ok")
    if "valid" in ok.columns:
        ok = ok.filter(pl.col("valid").fill_null(False))
    if ok.height == 0:
        return None
    return (ok.group_by("label", "bytes").agg(pl.col("t_usec").median(), pl.col("MBps").median(),
                                              pl.col("t_usec").min().alias("t_best_usec"),
                                              pl.col("rep").n_unique().alias("n_reps"))
            .sort("label", "bytes"))


def _imb_labels(data: ReportData) -> set[str]:
    """Stack/transport/mapping labels with an IMB PingPong fit (results/fits/hockney.json)."""
    return {f.get("label") for f in data.fits.get("hockney") or [] if isinstance(f, dict)
            and f.get("benchmark") == "PingPong" and "error" not in f}


def _pingpong_blocks(data: ReportData, df: pl.DataFrame | None, fits: list[dict[str, Any]] | None) -> list[Any]:
    blocks: list[Any] = [Heading("pingpong (2 ranks, half round trip)")]
    if df is not None:
        blocks += _status_notice(df, "pingpong")
    if fits is None:
        blocks.append(Notice("No pingpong fit (fits/kernels.json missing or without 'pingpong'): medians only.",
                             "warn"))
    good = [f for f in fits or [] if "error" not in f]
    errors = [f"{f.get('label')}: {f['error']}" for f in fits or [] if "error" in f]
    if errors:
        blocks.append(Notice("The Hockney fit failed for these pingpong series:", "warn", errors))
    imb = _imb_labels(data)
    labels = sorted({f["label"] for f in fits or []} | (set(df["label"].unique().to_list()) if df is not None else
                                                         set()))
    # Without hockney.json nothing is known about IMB: say nothing rather than "no IMB".
    without = [lab for lab in labels if lab not in imb] if "hockney" in data.fits else []
    if without:
        blocks.append(Notice("No IMB PingPong for these stack/transport/mapping series: the pingpong kernel is "
                             "their only point-to-point measurement.", "info", without))
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "kernel λ (µs) [95 % CI]", "kernel B (MB/s) [95 % CI]", "breakpoints",
             "IMB PingPong λ (µs) [95 % CI]", "kernel λ / IMB λ", "IMB PingPong B (MB/s)", "reps"],
            [[cell(f["label"]),
              Cell(f"{fmt_num(f.get('latency_us'))} {fmt_ci(f.get('latency_ci_us'))}", cls="num"),
              Cell(f"{fmt_num(f.get('bandwidth_MBps'), 4) if f.get('bandwidth_MBps') else '∞'} "
                   f"{fmt_ci(f.get('bandwidth_ci_MBps'), 4, unbounded='∞')}", cls="num"),
              cell(", ".join(fmt_bytes(b) for b in f.get("breakpoints_bytes") or []) or DASH),
              Cell(f"{fmt_num(f.get('imb_latency_us'))} {fmt_ci(f.get('imb_latency_ci_us'))}"
                   if f.get("imb_latency_us") is not None else "no IMB", cls="num"),
              Cell(fmt_num(f.get("kernel_vs_imb_latency")), cls="num"),
              Cell(fmt_num(f.get("imb_bandwidth_MBps"), 4), cls="num"), cell(f.get("n_reps"))] for f in good],
            caption="λ = the first (small-message) segment's latency, B = the last segment's bandwidth of the "
                    "piecewise Hockney fit t(m) = λ + m/B to the kernel's samples; IMB PingPong's from "
                    "fits/hockney.json where that stack/transport/mapping has IMB (a cross-check of two programs "
                    "measuring the same thing).",
        ))
    med = _pingpong_medians(df)
    rows = []
    for f in good:
        # The label's placement (node2), not the bare mapping: one row per node count.
        placement = str(f["label"]).split("/")[-1]
        rows.append((f["stack"], f["transport"], placement, f.get("latency_4B_us"), f.get("bandwidth_4MiB_MBps"),
                     f.get("n_reps")))
    if not rows and med is not None:
        for lab in med["label"].unique().sort().to_list():
            part = med.filter(pl.col("label") == lab)
            at4 = part.filter(pl.col("bytes") == 4)
            at4m = part.filter(pl.col("bytes") == MIB4)
            stack, transport, mapping = (lab.split("/") + [None, None, None])[:3]
            rows.append((stack, transport, mapping, at4["t_usec"][0] if at4.height else None,
                         at4m["MBps"][0] if at4m.height else None, part["n_reps"].max()))
    if rows:
        blocks.append(Table(
            ["Stack", "Transport", "Mapping", "4 B latency (µs)", "4 MiB bandwidth (MB/s)", "reps"],
            [[cell(s), cell(t), cell(m), Cell(fmt_num(lat), cls="num"), Cell(fmt_num(bw, 4), cls="num"), cell(n)]
             for s, t, m, lat, bw, n in rows],
            caption="Medians over repetitions of rank 0's half round trip at 4 bytes and of the bandwidth at "
                    "4 MiB (a dash: that size was not in the sweep).",
        ))
    if med is not None:
        blocks.append(_pingpong_chart(med, good))
    return blocks


def _pingpong_chart(med: pl.DataFrame, fits: list[dict[str, Any]]) -> ChartBlock:
    """Latency and bandwidth vs size per stack/transport/mapping, the Hockney model dashed."""
    from mpiatlas.report import _opacity, _pick, _size_x, hockney_curve

    pos = med.filter(pl.col("bytes") > 0).with_columns(pl.col("label").alias("series"))
    series = sorted(pos["series"].unique().to_list())
    sel, color, x = _pick(), _color(series), _size_x(pos, max_ticks=8)
    meas = _round(pos.with_columns(pl.col("bytes").map_elements(fmt_bytes, return_dtype=pl.String).alias("size")))
    tips = [alt.Tooltip("series:N"), alt.Tooltip("size:N"), alt.Tooltip("t_usec:Q", title="median t (µs)",
                                                                         format=".4~g"),
            alt.Tooltip("MBps:Q", title="median bw (MB/s)", format=",.4~g"), alt.Tooltip("n_reps:Q", title="reps")]
    lat = [alt.Chart(meas).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20)).encode(
        x=x, y=alt.Y("t_usec:Q", scale=alt.Scale(type="log"), title="half round trip t (µs)"), color=color,
        opacity=_opacity(sel, 1.0), tooltip=tips).add_params(sel)]
    bw = [alt.Chart(meas.filter(pl.col("MBps") > 0)).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20))
          .encode(x=x, y=alt.Y("MBps:Q", scale=alt.Scale(type="log"), title="bandwidth (MB/s, 10⁶ B/s)"),
                  color=color, opacity=_opacity(sel, 1.0), tooltip=tips)]
    model = []
    lo, hi = float(pos["bytes"].min()), float(pos["bytes"].max())
    for f in fits:
        for p in hockney_curve(f, lo, hi):
            model.append({**p, "series": f["label"], "bw_model_MBps": p["bytes"] / p["t_model_usec"]
                          if p["t_model_usec"] > 0 else None})
    if model:
        mdf = _round(pl.DataFrame(model, infer_schema_length=None))
        mtips = [alt.Tooltip("series:N"), alt.Tooltip("bytes:Q", format=",.0f"),
                 alt.Tooltip("t_model_usec:Q", title="model t (µs)", format=".4~g")]
        lat.append(alt.Chart(mdf).mark_line(strokeDash=[5, 3], strokeWidth=2).encode(
            x=x, y="t_model_usec:Q", color=color, detail="segment:N", opacity=_opacity(sel, 0.8), tooltip=mtips))
        bw.append(alt.Chart(mdf).mark_line(strokeDash=[5, 3], strokeWidth=2).encode(
            x=x, y="bw_model_MBps:Q", color=color, detail="segment:N", opacity=_opacity(sel, 0.8), tooltip=mtips))
    chart = alt.hconcat(alt.layer(*lat).properties(width=CHART_W, height=CHART_H, title="pingpong: latency"),
                        alt.layer(*bw).properties(width=CHART_W, height=CHART_H, title="pingpong: bandwidth"))
    return ChartBlock(chart_spec(chart), "Medians over repetitions (lines with points) and the fitted Hockney model "
                                         "(dashed) per stack/transport/mapping; 0 bytes is left out of the log axis.")


def _coll_blocks(df: pl.DataFrame | None, fits: list[dict[str, Any]] | None) -> list[Any]:
    from mpiatlas.models.kernel_p2p import fit_coll

    blocks: list[Any] = [Heading("coll (Bcast, Allreduce, Alltoall per algorithm)")]
    if df is not None:
        blocks += _status_notice(df, "coll")
    if fits is None and df is not None:
        fits = fit_coll(df)  # medians only: the same per-size medians fit_kernels writes
    if not fits:
        return blocks + [Notice("No coll measurements of ok cells.", "info")]
    blocks.append(Table(
        ["Stack / transport / mapping", "collective", "P", "oversubscribed", "algorithms measured", "summary"],
        [[cell(f["label"]), cell(f["collective"]), cell(f["np"]), _over_cell(f.get("oversubscribed")),
          cell(", ".join(f["algorithms"])), cell(f.get("headline"))] for f in fits],
        caption="One row per stack/transport/mapping, collective and process count P. Only the stacks listed in "
                "kernels.coll.forced_algorithms run forced algorithms; the others run their default only."))
    rows = [{"series": p["algorithm"], "facet": f"{f['label']} · {f['collective']} · P={f['np']}",
             "bytes": p["bytes"], "t_avg_usec": p["t_avg_usec"], "t_min_usec": p["t_min_usec"],
             "t_max_usec": p["t_max_usec"], "n_reps": p["n_reps"]}
            for f in fits for p in f["points"] if p["bytes"] > 0 and p["t_avg_usec"]]
    if rows:
        from mpiatlas.report import _opacity, _pick, _size_x

        pts = _round(pl.DataFrame(rows).with_columns(
            pl.col("bytes").map_elements(fmt_bytes, return_dtype=pl.String).alias("size")))
        algos = sorted(pts["series"].unique().to_list(), key=lambda a: (a != "default", a))
        sel = _pick()
        chart = alt.Chart(pts).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=16)).encode(
            x=_size_x(pts, max_ticks=6), y=alt.Y("t_avg_usec:Q", scale=alt.Scale(type="log"),
                                                 title="time per call, avg over ranks (µs)"),
            color=_color(algos, title="algorithm"), opacity=_opacity(sel, 1.0),
            tooltip=["facet:N", alt.Tooltip("series:N", title="algorithm"), "size:N",
                     alt.Tooltip("t_avg_usec:Q", format=".4~g"), alt.Tooltip("t_min_usec:Q", format=".4~g"),
                     alt.Tooltip("t_max_usec:Q", format=".4~g"), "n_reps:Q"],
        ).add_params(sel).properties(width=CHART_W - 40, height=CHART_H - 60).facet(
            facet=alt.Facet("facet:N", title=None), columns=3).resolve_scale(y="independent")
        blocks.append(ChartBlock(chart_spec(chart), "Median over repetitions of the per-call time averaged over "
                                                    "ranks, per algorithm; click a legend entry to highlight it."))
    # Only where algorithms compete (a stack measured with its default alone has nothing to rank).
    best = [(f, b) for f in fits for b in f.get("best", []) if b["candidates"] > 1]
    if best:
        blocks.append(Details("Best algorithm per (collective, P, size)", [Table(
            ["Stack / transport / mapping", "collective", "P", "size", "best algorithm", "time (µs)",
             "runner-up", "margin", "default (µs)", "default / best", "candidates"],
            [[cell(f["label"]), cell(f["collective"]), cell(f["np"]), Cell(fmt_bytes(b["bytes"])),
              cell(b["algorithm"]), Cell(fmt_num(b["t_avg_usec"]), cls="num"), cell(b.get("runner_up")),
              Cell(f"{100 * b['margin']:.0f} %" if b.get("margin") is not None else DASH, cls="num",
                   title="runner-up's median time / best's − 1"),
              Cell(fmt_num(b.get("default_usec")), cls="num"), Cell(fmt_num(b.get("default_over_best")), cls="num"),
              cell(b["candidates"])] for f, b in best],
            filterable=True, scroll=len(best) > 30,
            caption="Best = smallest median (over repetitions) time per call averaged over ranks, among the "
                    "algorithms measured; a margin of a few percent is within run-to-run noise.")], open=True))
    return blocks


def section_p2p_coll(data: ReportData) -> Section | None:
    pp, coll = kernel_table(data, "pingpong"), kernel_table(data, "coll")
    pp_fits, coll_fits = kernel_fits(data, "pingpong"), kernel_fits(data, "coll")
    if pp is None and coll is None and not pp_fits and not coll_fits:
        return None
    blocks: list[Any] = [Text(P2P_COLL_INTRO)]
    if pp is not None or pp_fits:
        blocks += _pingpong_blocks(data, pp, pp_fits)
    if coll is not None or coll_fits:
        blocks += _coll_blocks(coll, coll_fits)
    return Section(P2P_COLL_TITLE, blocks, id="kernel-p2p-coll")


SECTIONS = (section_ring, section_matsum, section_jacobi, section_p2p_coll)

"""Section "Kernel: message ring": ring times per P against the model built on PingPong's λ and B."""

from __future__ import annotations


import polars as pl

from mpiatlas.report.blocks import Block, Cell, ChartBlock, Details, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.charts import FITTED, OVER, chart_spec, measured_vs_model
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci, fmt_num
from mpiatlas.models.ring_records import RingFit, RingRegionPoint
from mpiatlas.report.kernel_blocks import KERNEL_TITLES, err_cell, kernel_opening, over_cell, raw_table


def section_kernel_ring(data: ReportData) -> Section | None:
    opening = kernel_opening(data, "ring", (
        "Each rank passes a left- and a right-going message around a periodic ring for P steps "
        "(one full exchange); times are per full exchange, the slowest rank's, median over repetitions. "
        "Model (m = streams, t(s) = one-way PingPong time, φ(P) = message phases per shift): "
        "nonblocking T = P·m·t(s) (= 2·P·λ for small messages and 2 streams); blocking T = P·m·φ(P)·t(s) with "
        "φ = 2 for even P and 3 for odd P (ranks 0 and P−1 are both even: the wrap-around pair adds a phase when "
        "a send waits for its receive); ssend T = P·m·φ(P)·(2λ + s/B) (rendezvous: ≈ 2λ per message). "
        "Dashed lines with hollow squares: model; circles: measured with P ≤ cores; triangles: oversubscribed. "
        "Dotted vertical rules: where the ranks, in the cells' recorded placement, first reach another socket "
        "or another node (block over nodes fills a node's cores first: a node boundary at P = cores + 1)."))
    if opening is None:
        return None
    df, blocks = opening.df, opening.blocks
    good = [f for f in data.ring_fits() or [] if f.fitted]
    if good:
        blocks.append(Heading("Latency λ: ring-implied vs PingPong"))
        blocks.append(Table(
            ["Stack / transport / mapping", "λ source", "PingPong λ (µs)", "ring λ (µs) [95 % CI]",
             "ring / PingPong", "ring B (MB/s)", "Nonblocking points within 25 %"],
            [[cell(f.label), Cell(f.lambda_source or DASH, title=f.lambda_note),
              Cell(fmt_num(f.pingpong_latency_us), cls="num"),
              Cell(f"{fmt_num(f.ring_latency_us)} {fmt_ci(f.ring_latency_ci_us)}", cls="num"),
              Cell(fmt_num(f.ring_vs_pingpong_latency), cls="num"),
              Cell(fmt_num(f.ring_bandwidth_MBps, 0) if f.ring_bandwidth_MBps else DASH, cls="num"),
              cell(f.nonblocking_points_within_25pct)] for f in good],
            caption="Ring-implied λ: T_nonblocking/(P·m) = λ + s/B fitted over the cells with P ≤ cores.",
        ))
        ranges = [(f, r) for f in good for r in f.ring_ranges]
        if ranges:
            blocks.append(Heading("λ and B per message-size range, from the ring alone"))
            blocks.append(Table(
                ["Stack / transport / mapping", "range", "sizes", "P", "points", "λ (µs)", "B (MB/s)"],
                [[cell(f.label), cell(r.range), Cell(", ".join(fmt_bytes(b) for b in r.sizes)),
                  cell(", ".join(map(str, r.np))), cell(r.n_points), Cell(fmt_num(r.latency_us), cls="num"),
                  Cell(fmt_num(r.bandwidth_MBps, 0) if r.bandwidth_MBps else DASH, cls="num")]
                 for f, r in ranges],
                caption="T_nonblocking/(P·m) = λ + s/B fitted within each range (P ≤ cores; no PingPong used); a "
                        "range of one size has its per-message time as λ and no B."))
        notes = [f"{f.label}: {f.lambda_note}" for f in good if f.lambda_source == "ring"]
        if notes:
            blocks.append(Notice("λ taken from the ring itself (no PingPong for these):", "warn", notes))
        failing = [f"{f.label}: {f.fails_where}" for f in good if f.fails_where]
        if failing:
            # Where the region-aware model changes the prediction, it says so on the same list.
            failing += [f"{f.label}: {f.region_changes}" for f in good if f.region_changes]
            blocks.append(Notice("Where the model fails:", "info", failing))
        blocks += _region_blocks(good)
        rows = [{**p.to_json(), "label": f.label} for f in good for p in f.points]
        if rows:
            pts = pl.DataFrame(rows).with_columns(
                pl.concat_str([pl.col("variant"), pl.lit(" · "),
                               pl.col("bytes").map_elements(fmt_bytes, return_dtype=pl.String),
                               pl.lit(" · "), pl.col("streams").cast(pl.String), pl.lit(" streams")]).alias("series"),
                pl.when(pl.col("oversubscribed")).then(pl.lit(OVER)).otherwise(pl.lit(FITTED)).alias("placement"),
            ).select("label", "series", "np", "measured_us", "predicted_us", "rel_err", "phases_measured",
                     "phases_model", "placement", "n_reps")
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "measured_us", "predicted_us", "time per full exchange (µs)",
                "Ring: measured (marks) and model (dashed) vs P", boundaries=boundary_rows(good)))))
            # T/P: the time of one shift (a full exchange is P of them), the ring study's per-step view; flat
            # in P where every step costs the same, rising where steps reach a slower region.
            per_step = pts.with_columns((pl.col("measured_us") / pl.col("np")).alias("measured_per_p_us"),
                                        (pl.col("predicted_us") / pl.col("np")).alias("predicted_per_p_us"))
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                per_step, "np", "processes P", "measured_per_p_us", "predicted_per_p_us",
                "T/P: time per shift (µs)", "Ring: T/P, measured (marks) and model (dashed) vs P",
                boundaries=boundary_rows(good)))))
            regional = any(p.region.region_predicted_us is not None for f in good for p in f.points)
            region_head = ["Region model (µs)", "Region error", "Boundary hops", "Slowest hop"] if regional else []
            blocks.append(Details("Ring residuals", [Table(
                ["Stack / transport / mapping", "Variant", "Streams", "Bytes", "P", "Oversub.", "Measured (µs)",
                 "Model (µs)", "Error", *region_head, "Phases/shift measured", "Phases/shift model", "Reps"],
                [[cell(f.label), cell(p.variant), cell(p.streams), Cell(fmt_bytes(p.bytes)),
                  cell(p.np), over_cell(p.oversubscribed), Cell(fmt_num(p.measured_us), cls="num"),
                  Cell(fmt_num(p.predicted_us), cls="num"), err_cell(p.rel_err),
                  *(_region_cells(p.region) if regional else []),
                  Cell(fmt_num(p.phases_measured), cls="num"), cell(p.phases_model), cell(p.n_reps)]
                 for f in good for p in f.points],
                filterable=True, scroll=True,
                caption="Error = model / measured − 1. Phases/shift measured = T / (P·m·t(s))."
                + (" Region model: every hop priced by its region's λ, B, the slowest hop setting each phase; "
                   "boundary hops cross a socket or a node." if regional else ""))], open=True))
    elif df is not None:
        blocks.append(raw_table(df, ["label", "variant", "streams", "bytes", "np", "oversubscribed"], "time_us"))
    return Section(KERNEL_TITLES["ring"], blocks, id="kernel-ring")



# How the chart names a boundary of the ranks' placement (ring_regions.placement_boundaries' regions).
BOUNDARY_NAMES = {"other_socket": "socket boundary", "other_node": "node boundary"}


def boundary_rows(fits: list[RingFit]) -> pl.DataFrame | None:
    """(label, np, boundary) of every fit's placement boundaries: the ring chart's vertical rules."""
    rows = [{"label": f.label, "np": b.np, "boundary": f"{BOUNDARY_NAMES.get(b.region, b.region)} (P ≥ {b.np})"}
            for f in fits for b in f.boundaries]
    return pl.DataFrame(rows) if rows else None


def _region_cells(p: RingRegionPoint) -> list[Cell]:
    hops = p.hop_regions or {}
    title = ", ".join(f"{n} × {r}" for r, n in hops.items()) or None
    return [Cell(fmt_num(p.region_predicted_us), cls="num"), err_cell(p.region_rel_err),
            Cell(DASH if p.boundary_hops is None else str(p.boundary_hops), cls="num", title=title),
            cell(p.slowest_region or DASH)]


def _region_blocks(fits: list[RingFit]) -> list[Block]:
    """The region-aware model: the per-region λ, B it used, per label, or why it is absent."""
    with_model = [(f, f.region_model) for f in fits if f.region_model is not None]
    if not with_model:
        notes = sorted({f"{f.label}: {f.region_note}" for f in fits if f.region_note})
        return [Notice("No region-aware ring prediction:", "info", notes)] if notes else []
    rows = []
    for f, model in with_model:
        for region, lam in model.latency_us.items():
            bw = model.bandwidth_MBps.get(region)
            rows.append([cell(f.label), cell(region), Cell(fmt_num(lam), cls="num"),
                         Cell(fmt_num(bw, 0) if bw else DASH, cls="num"), Cell(model.source)])
    return [Heading("Region-aware ring model"), Text(
        "Each hop r → r+1 (and the wrap-around) of the cell's actual placement is priced by the region its two "
        "ranks share, t = λ_region + s/B_region (ssend: 2λ_region + s/B_region); every rank waits for its "
        "neighbour in every phase, so the slowest hop sets the pace: T = P·m·φ(P)·max over hops t. A ring "
        "placed block-wise over sockets jumps at P = cores per socket + 1, where two hops (the crossing and the "
        "wrap-around) reach the other socket."),
        Table(["Stack / transport / mapping", "Region", "λ (µs)", "B (MB/s)", "From"], rows,
              caption="Per-region λ and B the region-aware prediction used.")]

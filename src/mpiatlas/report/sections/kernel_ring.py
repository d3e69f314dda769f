"""Section "Kernel: message ring": ring times per P against the model built on PingPong's λ and B."""

from __future__ import annotations

from typing import Any

import polars as pl

from mpiatlas.report.blocks import Cell, ChartBlock, Details, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.charts import FITTED, OVER, chart_spec, measured_vs_model
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci, fmt_num
from mpiatlas.report.kernel_blocks import (
    KERNEL_TITLES,
    err_cell,
    failure_notice,
    no_fit_notice,
    over_cell,
    raw_table,
    status_notice,
)


def section_kernel_ring(data: ReportData) -> Section | None:
    df = data.kernel_table("ring")
    fits = data.kernel_fits("ring")
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
    blocks += no_fit_notice("ring", fits)
    if df is not None:
        blocks += status_notice(df, "ring")
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
        notice = failure_notice(good)
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
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "measured_us", "predicted_us", "time per full exchange (µs)",
                "Ring: measured (marks) and model (dashed) vs P"))))
            blocks.append(Details("Ring residuals", [Table(
                ["Stack / transport / mapping", "Variant", "Streams", "Bytes", "P", "Oversub.", "Measured (µs)",
                 "Model (µs)", "Error", "Phases/shift measured", "Phases/shift model", "Reps"],
                [[cell(f["label"]), cell(p["variant"]), cell(p["streams"]), Cell(fmt_bytes(p["bytes"])),
                  cell(p["np"]), over_cell(p["oversubscribed"]), Cell(fmt_num(p["measured_us"]), cls="num"),
                  Cell(fmt_num(p["predicted_us"]), cls="num"), err_cell(p["rel_err"]),
                  Cell(fmt_num(p.get("phases_measured")), cls="num"), cell(p.get("phases_model")), cell(p["n_reps"])]
                 for f in good for p in f.get("points", [])],
                filterable=True, scroll=True,
                caption="Error = model / measured − 1. Phases/shift measured = T / (P·m·t(s)).")], open=True))
    elif df is not None:
        blocks.append(raw_table(df, ["label", "variant", "streams", "bytes", "np", "oversubscribed"], "time_us"))
    return Section(KERNEL_TITLES["ring"], blocks, id="kernel-ring")


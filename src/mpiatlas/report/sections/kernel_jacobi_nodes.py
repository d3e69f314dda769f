"""Section "Jacobi: hybrid vs pure MPI over nodes at equal cores" (mpiatlas.models.jacobi_nodes): bytes per rank and
per step, their totals and ratio, halo-exchange and Allreduce times (mean and minimum over ranks) with CIs,
hybrid/pure time ratios with CIs and the run-to-run spread, over 1..N nodes; hybrid cells that could
not run are named once, in one line."""

from __future__ import annotations

from typing import Any

import polars as pl

from mpiatlas.models.jacobi_nodes import hybrid_over_nodes
from mpiatlas.report.blocks import Block, Cell, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_ci, fmt_num, fmt_pct

TITLE = "Jacobi: hybrid vs pure MPI over nodes at equal cores"
HEADING = "Hybrid vs pure MPI over nodes at equal cores"


def _timed(value: dict[str, Any] | None) -> Cell:
    """A median over repetitions with its 95 % CI."""
    if not value:
        return Cell(DASH, cls="num")
    ci = fmt_ci(value.get("ci"))
    return Cell(fmt_num(value.get("median")) + ("" if ci == DASH else f" {ci}"), cls="num")


def _grid(dims: list[int] | None) -> str:
    return "×".join(map(str, dims)) if dims else DASH


def _ratio(value: dict[str, Any] | None) -> Cell:
    if not value or value.get("ratio") is None:
        return Cell(DASH, cls="num")
    ci = fmt_ci(value.get("ci"))
    return Cell(fmt_num(value["ratio"]) + ("" if ci == DASH else f" {ci}"), cls="num")


def not_run_line(cells: pl.DataFrame | None) -> str | None:
    """One line for the hybrid Jacobi cells that ended ``unavailable``: how many, and each distinct reason once."""
    if cells is None or cells.height == 0 or not {"benchmark", "status", "cell"} <= set(cells.columns):
        return None
    gone = cells.filter((pl.col("benchmark") == "jacobi") & (pl.col("status") == "unavailable")
                        & ~pl.col("cell").str.contains(r"-t1(-|/)"))
    if gone.height == 0:
        return None
    reasons = gone.group_by("reason").len().sort("len", descending=True)
    text = "; ".join(f"{r['reason']} ({r['len']})" for r in reasons.iter_rows(named=True))
    return f"{gone.height} hybrid cell(s) could not run: {text}"


def section_kernel_jacobi_nodes(data: ReportData) -> Section | None:
    rows = hybrid_over_nodes(data.kernel_table("jacobi"))
    missing = not_run_line(data.cells)
    if not rows and missing is None:
        return None
    blocks: list[Block] = [Heading(HEADING), Text(
        "Each hybrid launch (ranks per node × OpenMP threads, each thread pinned to one of its rank's cores and "
        "checked) beside the pure MPI launch at the same cores (ranks per node × 1), on one node and over nodes. "
        "Bytes: what a rank sends per Jacobi step (its halo faces; mean over ranks) and the total over ranks; "
        "their ratio is exact (the decomposition's). Times per step: halo exchange and residual Allreduce, the "
        "mean over ranks and the minimum (the rank that waited least); medians over repetitions with 95 % "
        "bootstrap CIs [low, high], hybrid/pure ratios of the medians with bootstrap CIs, and the run-to-run "
        "spread of the iteration time ((max − min) / median over repetitions).")]
    if missing:
        blocks.append(Notice(missing, "neutral"))
    if rows:
        blocks.append(Table(
            ["Stack / transport / placement", "Problem", "nodes", "cores", "hybrid ranks/node × threads",
             "pure ranks/node × threads", "bytes/rank/step hybrid", "bytes/rank/step pure", "bytes/step total hybrid",
             "bytes/step total pure", "bytes hybrid/pure", "msgs/rank hybrid", "msgs/rank pure",
             "halo mean µs hybrid", "halo mean µs pure", "halo min µs hybrid", "halo min µs pure",
             "Allreduce mean µs hybrid", "Allreduce mean µs pure", "Allreduce min µs hybrid",
             "Allreduce min µs pure", "global grid hybrid", "global grid pure", "halo hybrid/pure", "Allreduce hybrid/pure", "iteration hybrid/pure",
             "spread hybrid", "spread pure", "reps hybrid / pure"],
            [[cell(r["label"]), cell(r["problem"]), cell(r["nodes"]), cell(r["cores"]), cell(r["hybrid"]),
              cell(r["pure"] or DASH),
              Cell(fmt_num(r["hybrid_bytes_per_rank"], 0), cls="num"),
              Cell(fmt_num(r["pure_bytes_per_rank"], 0), cls="num"),
              Cell(fmt_num(r["hybrid_bytes_total"], 0), cls="num"), Cell(fmt_num(r["pure_bytes_total"], 0), cls="num"),
              Cell(fmt_num(r["bytes_ratio"]), cls="num"),
              Cell(fmt_num(r["hybrid_messages_per_rank"]), cls="num"),
              Cell(fmt_num(r["pure_messages_per_rank"]), cls="num"),
              _timed(r["hybrid_halo_mean_us"]), _timed(r["pure_halo_mean_us"]),
              _timed(r["hybrid_halo_min_us"]), _timed(r["pure_halo_min_us"]),
              _timed(r["hybrid_allreduce_mean_us"]), _timed(r["pure_allreduce_mean_us"]),
              _timed(r["hybrid_allreduce_min_us"]), _timed(r["pure_allreduce_min_us"]),
              cell(_grid(r.get("hybrid_global_dims"))), cell(_grid(r.get("pure_global_dims")) if r["pure"] else DASH),
              _ratio(r["halo_mean_ratio"]), _ratio(r["allreduce_mean_ratio"]), _ratio(r["iteration_ratio"]),
              Cell(fmt_pct(r["hybrid_spread"]) if r["hybrid_spread"] is not None else DASH, cls="num"),
              Cell(fmt_pct(r["pure_spread"]) if r.get("pure_spread") is not None else DASH, cls="num"),
              cell(f"{r['hybrid_n_reps']} / {r['pure_n_reps'] if r['pure'] else 0}")]
             for r in rows],
            filterable=True, scroll=len(rows) > 25,
            caption="Oversubscribed launches (more threads than cores on a machine, e.g. emulated nodes sharing "
                    "one) measure placement, not speed. Equal work: weak mode gives every core L³ points, so "
                    "hybrid and pure MPI at the same cores solve the same global grid (printed beside the ratios); "
                    "a dash ratio: no pure launch at those cores, unequal global grids, or one repetition (no CI)."))
    return Section(TITLE, blocks, id="kernel-jacobi-nodes")

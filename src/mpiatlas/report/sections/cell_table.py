"""Section "Cells": every campaign cell with its status, checks, placement and sample count, and the
launches measured again because the machine disturbed them (runner.run, campaign.remeasure)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.report.blocks import Cell, Heading, Notice, Section, Table, Text, cell, num_cell
from mpiatlas.report.cells import has_columns, status_cls, status_rank
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_binding, fmt_bool, fmt_pins, shorten

TITLE = "Cells"
SECTION_ID = "cells"
COLUMNS = ["Cell", "Stack", "Transport", "Mapping", "np", "Benchmark", "Algorithm", "Rep", "Status", "Reason",
           "Transport req → obtained", "Binding req → obtained", "Region", "Oversub.", "Container", "Image",
           "Wall (s)", "Samples"]


@dataclass
class CellSamples:
    """What a cell's samples say: whether any rank was oversubscribed, the regions its ranks sat in
    (comma-joined) and its number of rows (IMB samples, or a kernel cell's records)."""

    n_samples: int = 0
    oversubscribed: bool | None = None
    region: str | None = None


def _per_cell_samples(samples: pl.DataFrame | None, kernels: Mapping[str, pl.DataFrame]) -> dict[str, CellSamples]:
    """cell -> oversubscribed, regions and number of rows: IMB samples, or a kernel cell's records."""
    out: dict[str, CellSamples] = {}
    if has_columns(samples, "cell"):
        assert samples is not None
        aggs = [pl.col("oversubscribed").any() if "oversubscribed" in samples.columns
                else pl.lit(None, dtype=pl.Boolean).alias("oversubscribed"),
                pl.col("region").drop_nulls().unique().sort().str.join(",") if "region" in samples.columns
                else pl.lit(None, dtype=pl.String).alias("region"),
                pl.len().alias("n_samples")]
        out = {str(c): CellSamples(int(n), over, region)
               for c, over, region, n in samples.group_by("cell").agg(aggs).iter_rows()}
    for df in kernels.values():
        if "cell" in df.columns:
            for c, n in df.group_by("cell").len().iter_rows():
                out.setdefault(str(c), CellSamples()).n_samples += n
    return out


# A check's mark and class: passed (True), failed (False), anything else not checked.
_MARKS: dict[object, str] = {True: "✓", False: "✗"}
_CLASSES: dict[object, str] = {True: "ok", False: "bad"}


def check_cell(req: object, obt: object, ok: object, fmt_req: Callable[[object], str] = str,
               fmt_obt: Callable[[object], str] = str) -> Cell:
    """``✓ requested → obtained`` (✗ failed, ? not checked), the full value on hover when shortened."""
    obt_s = fmt_obt(obt) if obt is not None else DASH
    req_s = fmt_req(req) if req is not None else DASH
    mark = _MARKS.get(ok, "?")
    title = f"requested {req_s}; obtained {obt_s}" if shorten(obt_s) != obt_s else None
    return Cell(f"{mark} {req_s} → {shorten(obt_s)}", title=title, cls=_CLASSES.get(ok))


def _row(r: dict[str, Any], e: CellSamples | None, counted: bool) -> list[Cell]:
    over = r.get("oversubscribed")
    over = (e.oversubscribed if e else None) if over is None else over
    digest = r.get("image_digest")
    return [
        cell(r.get("cell")), cell(r.get("stack")), cell(r.get("transport")), cell(r.get("mapping")),
        cell(r.get("np")), cell(r.get("benchmark")), cell(r.get("algorithm")), cell(r.get("rep")),
        Cell(str(r.get("status")), cls=status_cls(r.get("status"))), cell(r.get("reason")),
        check_cell(r.get("requested_transport"), r.get("obtained_transport"), r.get("transport_ok")),
        check_cell(r.get("requested_pins"), r.get("obtained_binding"), r.get("binding_ok"), fmt_pins, fmt_binding),
        cell(r.get("region") or (e.region if e else None) or None),
        Cell(fmt_bool(over), cls="bad" if over else None),
        cell(r.get("containerized")),
        Cell(shorten(str(digest), 19), title=str(digest)) if digest else Cell(DASH),
        num_cell(r.get("wall_s")),
        cell(e.n_samples if e else (0 if counted else None)),
    ]


def section_cells(data: ReportData) -> Section:
    cells = data.cells
    if cells is None:
        return Section(TITLE, [Notice(f"{layout.CELLS_TABLE} is missing: no per-cell status.", "error")],
                       id=SECTION_ID)
    extra = _per_cell_samples(data.samples_all, data.kernels_all)  # every launch: this table counts them
    recs = sorted(cells.iter_rows(named=True), key=lambda r: (status_rank(r.get("status")), str(r.get("cell"))))
    rows = [_row(r, extra.get(str(r.get("cell"))), bool(extra)) for r in recs]
    caption = (f"{len(rows)} cells (problems first). ✓/✗ = check passed/failed, ? = not checked. "
               "Samples: IMB rows, or the kernel's records.")
    return Section(TITLE, [*remeasured_blocks(cells), *unknown_quality_blocks(cells),
                           Table(COLUMNS, rows, filterable=True, scroll=True, caption=caption)], id=SECTION_ID)


def unknown_quality_blocks(cells: pl.DataFrame) -> list[Notice]:
    """The launches whose quality could not be judged (``unknown``: no evidence of where their OpenMP
    threads ran), how many and why, each distinct reason once: not judged good, and said so."""
    if "quality" not in cells.columns:
        return []
    unknown = cells.filter(pl.col("quality") == "unknown")
    if unknown.is_empty():
        return []
    reasons = sorted({str(r) for r in unknown.get_column("quality_reason").to_list() if r}) \
        if "quality_reason" in unknown.columns else []
    return [Notice(f"{unknown.height} launch(es) of quality unknown: their threads' placement could not be "
                   "checked, so they are not counted as good", "warn", reasons)]


REMEASURED_TITLE = "Re-measured launches"
REMEASURED_COLUMNS = ["Cell", "Set aside", "Why", "Final launch"]


def remeasured_blocks(cells: pl.DataFrame) -> list[Heading | Text | Table]:
    """The cells whose launch the machine disturbed: those measured again (their perturbed attempts
    kept under perturbed/<cell id>/) and those whose final launch is still perturbed; nothing when none."""
    count = pl.col("remeasured") if "remeasured" in cells.columns else pl.lit(0)
    still = (pl.col("quality") == "perturbed") if "quality" in cells.columns else pl.lit(False)
    hit = cells.filter((count.fill_null(0) > 0) | still.fill_null(False)).sort("cell")
    if hit.is_empty():
        return []
    rows = [_remeasured_row(r) for r in hit.iter_rows(named=True)]
    again = int(hit.select(count.fill_null(0).sum()).item())
    left = hit.filter(still.fill_null(False)).height
    lead = (f"{again} launch(es) of {hit.height} cell(s) were perturbed (the machine took cpu time from their ranks) "
            "and measured again at the end of their job group; the perturbed attempts stay on disk under "
            f"perturbed/<cell id>/. {left} cell(s) end with a launch still perturbed: their samples are left out of "
            "medians and fits.")
    return [Heading(REMEASURED_TITLE), Text(lead),
            Table(REMEASURED_COLUMNS, rows, caption="Why: each set-aside attempt's judgement, in the order they ran.")]


def _remeasured_row(r: dict[str, Any]) -> list[Cell]:
    reasons = json.loads(r["remeasured_reasons"]) if r.get("remeasured_reasons") else []
    rep = f"rep{r['rep']}" if r.get("rep") is not None else "launch"
    why = " · ".join(f"{rep} re-measured: {reason or 'perturbed'}" for reason in reasons) or DASH
    perturbed = r.get("quality") == "perturbed"
    final = f"still perturbed: {r.get('quality_reason') or 'no reason recorded'}" if perturbed else str(r.get("quality") or "not judged")
    return [cell(r.get("cell")), cell(r.get("remeasured") or 0), Cell(why),
            Cell(final, cls="bad" if perturbed else "ok")]

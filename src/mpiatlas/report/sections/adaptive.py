"""Section "Adaptive repetitions": how many launches each series needed, and whether its median got
as precise as asked (campaign.repetitions {min, max, ci_halfwidth}; mpiatlas.matrix.adaptive).

Read from the last round's decision (``<campaign>/adaptive/round<r>.json``, beside ``tidy/``), with
the ok launches of each series counted from the cells table next to it: the decision says what
was asked for, the table what ran. None for a campaign with a fixed repetition count (whose
rounds, if any, only re-measure perturbed launches: its decision's ``spec`` is null).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from mpiatlas.matrix import adaptive
from mpiatlas.campaign.adaptive_rounds import final_decision
from mpiatlas.campaign.round_decision import RoundDecision, SeriesEntry
from mpiatlas.report.blocks import Cell, Section, Text, num_cell, table
from mpiatlas.report.data import ReportData

TITLE = "Adaptive repetitions"
SECTION_ID = "adaptive"
STATE_TEXT = {adaptive.REACHED: "target reached", adaptive.AT_MAX: "max reached, target not",
              adaptive.NO_DATA: "no per-size times (failed, or a kernel without one)",
              adaptive.MORE: "not finished (the campaign stopped before its next round)"}


def section_adaptive(data: ReportData) -> Section | None:
    decision = _decision_near(data.tidy_dir)
    if decision is None or (spec := decision["spec"]) is None:  # fixed repetitions (rounds of later re-measures only)
        return None
    series = decision["series"]
    launches = _ok_launches(data.cells)
    counts = Counter(entry["state"] for entry in series)
    target = 100 * float(spec["ci_halfwidth"])
    lead = (f"Each series (a cell without its repetition) started with {spec['min']} launches and got more, "
            f"in rounds, until the 95 % CI of its median was within ±{target:.3g} % of the median at every "
            f"size, or {spec['max']} launches existed. {len(series)} series after {decision['round'] + 1} "
            "round(s): " + ", ".join(f"{n} {STATE_TEXT.get(state, state)}" for state, n in sorted(counts.items())) + ".")
    rows = [[entry["series"], entry["reps"], launches.get(entry["series"]),
             _halfwidth_cell(entry),
             STATE_TEXT.get(entry["state"], entry["state"]), entry["round"]]
            for entry in sorted(series, key=lambda e: (-e["reps"], e["series"]))]
    columns = ["series", "repetitions", "ok launches", "worst CI half-width (% of median)", "state", "decided in round"]
    return Section(TITLE, [Text(lead), table(columns, rows, filterable=True, caption=(
        "Worst CI half-width: the largest over the series' sizes of (CI high − CI low) / 2 / median, the "
        "same bootstrap CI as the summary's; ok launches: from the cells table."))], id=SECTION_ID)


def _halfwidth_cell(entry: SeriesEntry) -> Cell | str:
    """The worst half-width in %; unbounded where a size had a single usable launch (no spread to
    bootstrap: the decision stores null), a dash where the series has no times at all."""
    if entry["halfwidth"] is not None:
        return num_cell(100 * entry["halfwidth"])
    return "—" if entry["state"] == adaptive.NO_DATA else "∞ (a size with one usable launch)"


def _decision_near(tidy_dir: Path | None) -> RoundDecision | None:
    """The campaign's last adaptive decision: beside tidy/ (full view) or beside partial/ (partial view)."""
    if tidy_dir is None:
        return None
    for campaign in (tidy_dir.parent, tidy_dir.parent.parent):
        decision = final_decision(campaign)
        if decision is not None:
            return decision
    return None


def _ok_launches(cells: pl.DataFrame | None) -> dict[str, int]:
    """Per series id (a cell id without ``/rep<r>``), its ok cells in the cells table."""
    if cells is None or cells.height == 0:
        return {}
    ok = cells.filter(pl.col("status") == "ok").select(pl.col("cell").str.replace(r"/rep\d+$", "").alias("series"))
    return dict(ok.group_by("series").len().iter_rows())

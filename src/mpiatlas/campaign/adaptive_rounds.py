"""Adaptive repetitions in the DAG: rounds of cells, each decided from the cells sealed so far.

Round 0 is the campaign's own cells, ``min`` repetitions of every series (programs.expand with
adaptive.initial_repetitions). After round r's job groups are done, the checkpoint ``adaptive_round``
(workflow/rules/cells.smk) writes the decision of round r, ``R/adaptive/round<r>.json``:

* every series (a cell minus its ``rep``): the repetitions it has, its worst relative CI
  half-width, and its state (adaptive.MORE, REACHED, AT_MAX, NO_DATA) — carried over unchanged
  once final, so the last round's file describes the whole campaign (the report reads it);
* the cells of round r + 1 (the next repetitions of every series still at MORE) cut into job
  groups as any cells are (resources.job_groups), their ids prefixed ``r<r+1>.``;
* next to it ``R/cells.round<r>.json``: every cell id planned so far, the manifest tidy reads.

A decision is a function of sealed cells only: series at MORE after round r-1 with n planned
launches are judged on their repetitions 0..n-1 as sealed under ``R/raw``. A decision
recomputed after an interruption (or a re-run of the checkpoint) is the same one, and the cells it
asks for that are sealed already are skipped by run-cell as always.

The same rounds carry the later re-measure round (campaign.remeasure_later, runner.run.run_group's
``later``), adaptive or not: a decision also lists the cells of the round just run that are still
perturbed with later launches left (their status.json), cut into groups ``r<r+1>.again.<id>``
(named in ``later_remeasure``) that run-cell runs in the later mode: each such cell is set aside
and launched again after a bounded wait for a quiet machine. A campaign of fixed repetitions then
has rounds too (:func:`has_rounds`): its series are recorded at state adaptive.FIXED, and its
decision's ``spec`` is null.

Per-size values come from each sealed cell's own rows (Program.rows, as tidy reads them); a
program says what a size and its time are in its ``measure`` (mpiatlas.programs.base.Measure).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mpiatlas.programs import expand, program_named
from mpiatlas.stats.quality import PERTURBED
from mpiatlas.tables.tidy import cell_row
from mpiatlas.runner.run import wants_remeasure
from mpiatlas.campaign.resources import job_groups
from mpiatlas.campaign.round_decision import RoundDecision, SeriesEntry, SpecFields, read_decision

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

from mpiatlas import files
from mpiatlas.matrix import adaptive, layout
from mpiatlas.matrix.cells import Cell
from mpiatlas.spine.cell_coords import CellFields

ADAPTIVE_DIR = "adaptive"
# A round group's id: r<round>.<the id job_groups gives its cells> (static ids hold no '.').
_ROUND_GROUP = re.compile(r"r(\d+)\.(.+)")
AGAIN = "again"  # r<round>.again.<id>: a later re-measure group


# -- file names ----------------------------------------------------------------------------------


def decision_path(results: str, round_: int | str) -> str:
    return f"{results}/{ADAPTIVE_DIR}/round{round_}.json"


def manifest_path(results: str, round_: int | str) -> str:
    """Every cell id planned through a round; beside raw/ (tidy finds raw/ next to its manifest)."""
    return f"{results}/cells.round{round_}.json"


def _last_round_file(directory: Path, prefix: str) -> Path | None:
    """``<prefix><r>.json`` of the highest round r in ``directory`` (numerically: round10 after round9)."""
    rounds = sorted((int(m.group(1)), p) for p in directory.glob(f"{prefix}*.json")
                    if (m := re.fullmatch(rf"{re.escape(prefix)}(\d+)\.json", p.name)))
    return rounds[-1][1] if rounds else None


def final_decision(results_dir: Path) -> RoundDecision | None:
    """The last round's decision under ``results_dir`` (the whole campaign's series), or None."""
    path = _last_round_file(results_dir / ADAPTIVE_DIR, "round")
    return read_decision(path) if path is not None else None


def latest_manifest(results_dir: Path) -> Path | None:
    """The manifest of the last round decided so far under ``results_dir``: every cell planned up to now."""
    return _last_round_file(results_dir, Path(manifest_path("", "")).stem)


# -- series ----------------------------------------------------------------------------------------


def series_id(cell: Cell) -> str:
    """A cell's id without its ``rep<r>`` segment: the series it repeats."""
    return cell.id.rsplit("/", 1)[0]


def round_of_group(group: str) -> int | None:
    """The round a group id belongs to (None: a group of the campaign's own cells, round 0)."""
    match = _ROUND_GROUP.fullmatch(group)
    return int(match.group(1)) if match else None


def cells_of_round_group(decision: RoundDecision, group: str) -> list[Cell]:
    """The cells of ``group`` as the decision that created it lists them."""
    try:
        members = decision["groups"][group]
    except KeyError:
        raise ValueError(f"{group} is not a job group of adaptive round {decision.get('round', '?')} + 1") from None
    return [Cell(**coords) for coords in members]


class RoundGroups:
    """Group id -> cells for the workflow: the campaign's own groups, then any round group, read
    from the decision that created it (cached per file and modification time)."""

    def __init__(self, results: str, static: dict[str, list[Cell]]) -> None:
        self._results = results
        self._static = static
        self._read: dict[str, tuple[int, RoundDecision]] = {}

    def get(self, group: str, default: list[Cell] | None = None) -> list[Cell] | None:
        found = self._static.get(group)
        if found is not None:
            return found
        round_ = round_of_group(group)
        if round_ is None:
            return default
        decision = self.decision(round_ - 1)
        if decision is None or group not in decision["groups"]:
            return default
        return cells_of_round_group(decision, group)

    def is_later_remeasure(self, group: str) -> bool:
        """Is ``group`` one of the later re-measure round's (the decision that created it says so)?"""
        round_ = None if group in self._static else round_of_group(group)
        decision = None if round_ is None else self.decision(round_ - 1)
        return decision is not None and is_later_remeasure(decision, group)

    def __getitem__(self, group: str) -> list[Cell]:
        found = self.get(group)
        if found is None:
            raise KeyError(group)
        return found

    def decision(self, round_: int) -> RoundDecision | None:
        path = Path(decision_path(self._results, round_))
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        cached = self._read.get(str(path))
        if cached is None or cached[0] != mtime:
            cached = self._read[str(path)] = (mtime, read_decision(path))
        return cached[1]


# -- per-size values of a sealed cell --------------------------------------------------------------


def cell_values(cell_dir: Path) -> dict[tuple[Any, ...], float]:
    """A sealed cell's time per size (its program's rows and ``measure``); {} for a failed cell,
    a launch left perturbed (re-measures spent: mpiatlas.stats.quality, the same rule as the medians'), or
    a program without a measure."""
    row, prov = cell_row(cell_dir)
    if row["status"] != "ok" or row.get("quality") == PERTURBED:
        return {}
    program = program_named(row["kind"], row["benchmark"])
    tables = program.rows(cell_dir, row, prov) if program else {}
    values: dict[tuple[Any, ...], float] = {}
    measure = program.measure if program else None
    for table, frame in tables.items():
        if measure is None or measure.value not in frame.columns:
            continue
        for name, wanted in measure.filters:
            if name in frame.columns:
                frame = frame.filter(frame[name] == wanted)
        keys = [k for k in measure.keys if k in frame.columns]
        for record in frame.select(*keys, measure.value).iter_rows():
            if record[-1] is not None:
                values[(table, *record[:-1])] = float(record[-1])
    return values


def series_values(raw: Path, cells: list[Cell]) -> dict[tuple[Any, ...], list[float]]:
    """Per size, the values of the sealed cells among ``cells`` (one series' repetitions)."""
    by_size: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for cell in cells:
        cell_dir = raw / cell.id
        if layout.is_sealed(cell_dir):
            for size, value in cell_values(cell_dir).items():
                by_size[size].append(value)
    return by_size


# -- one round's decision --------------------------------------------------------------------------


def first_round_series(config: Campaign) -> list[SeriesEntry]:
    """Every series of the campaign's own cells, at state MORE with their initial repetitions."""
    counts: dict[str, int] = {}
    base: dict[str, Cell] = {}
    for cell in expand(config):
        key = series_id(cell)
        counts[key] = counts.get(key, 0) + 1
        base.setdefault(key, replace(cell, rep=0))
    return [{"series": key, "cell": cell_coords(base[key]), "reps": counts[key], "halfwidth": None,
             "state": adaptive.MORE, "round": 0} for key in sorted(base)]


def later_launches(config: Campaign) -> int:
    """Extra launches per cell of the later re-measure round (0 when re-measures are off)."""
    if config.campaign.remeasure <= 0:
        return 0
    return config.campaign.remeasure_later.launches


def has_rounds(config: Campaign) -> bool:
    """Does the campaign decide rounds after its groups (adaptive repetitions, or a later re-measure round)?"""
    return adaptive.spec_of(config) is not None or later_launches(config) > 0


def still_perturbed(config: Campaign, raw: Path, cells: list[Cell]) -> list[Cell]:
    """The sealed cells among ``cells`` whose launch is still perturbed with later launches left
    (their perturbed attempts on disk count what was spent, in-group and later)."""
    budget = config.campaign.remeasure + later_launches(config)
    return [cell for cell in cells if wants_remeasure(raw / cell.id, cell.id, budget)]


def cells_of_round(config: Campaign, round_: int, previous: RoundDecision | None) -> list[Cell]:
    """The cells round ``round_`` ran: the campaign's own (round 0), or those of the groups round - 1 asked for."""
    if previous is None:
        return expand(config)
    return [Cell(**coords) for members in previous["groups"].values() for coords in members]


def decide_round(config: Campaign, raw: Path, round_: int,
                 previous: RoundDecision | None) -> RoundDecision:
    """The decision after round ``round_`` (``previous``: round - 1's decision, None for round 0):
    adaptive repetitions (:func:`decide_series`), and the later re-measures of its cells."""
    if not has_rounds(config):
        raise ValueError("campaign.repetitions is a fixed count and remeasure_later is off: no rounds to decide")
    spec = adaptive.spec_of(config)
    decision: RoundDecision
    if spec is None:  # fixed repetitions: the series are what they are
        series = (previous["series"] if previous
                  else [SeriesEntry(**{**e, "state": adaptive.FIXED}) for e in first_round_series(config)])
        decision = {"round": round_, "spec": None, "series": series, "groups": {}}
    else:
        decision = decide_series(config, raw, round_, previous, spec)
    again = still_perturbed(config, raw, cells_of_round(config, round_, previous)) if later_launches(config) else []
    groups = _round_groups(config, round_ + 1, again, f"{AGAIN}.")
    decision["groups"] = {**decision["groups"], **groups}
    decision["later_remeasure"] = sorted(groups)
    return decision


def decide_series(config: Campaign, raw: Path, round_: int, previous: RoundDecision | None,
                  spec: adaptive.AdaptiveSpec) -> RoundDecision:
    """The adaptive part of a decision: every series' state, and round + 1's new repetitions."""
    series = first_round_series(config) if previous is None else previous["series"]
    decided: list[SeriesEntry] = []
    new_cells: list[Cell] = []
    for entry in series:
        if entry["state"] != adaptive.MORE:
            decided.append(entry)  # final in an earlier round: unchanged
            continue
        base = Cell(**entry["cell"])
        n = entry["reps"]
        halfwidth = adaptive.worst_halfwidth(series_values(raw, [replace(base, rep=r) for r in range(n)]))
        state, wanted = adaptive.decide(n, halfwidth, spec)
        # JSON has no infinity: a size whose spread is unknown (one usable value) is stored as null.
        known = halfwidth if halfwidth is not None and math.isfinite(halfwidth) else None
        decided.append(SeriesEntry(**{**entry, "halfwidth": known, "state": state, "round": round_, "reps": wanted}))
        new_cells += [replace(base, rep=r) for r in range(n, wanted)]
    return {"round": round_, "spec": cast(SpecFields, asdict(spec)), "series": decided,
            "groups": _round_groups(config, round_ + 1, new_cells)}


def planned_cell_ids(decision: RoundDecision) -> list[str]:
    """Every cell id a decision has planned: each series' repetitions 0..reps-1."""
    return sorted(replace(Cell(**entry["cell"]), rep=r).id
                  for entry in decision["series"] for r in range(entry["reps"]))


def write_decision(decision: RoundDecision, decision_file: str | Path, manifest_file: str | Path) -> None:
    files.write_json_atomic(manifest_file, planned_cell_ids(decision))
    files.write_json_atomic(decision_file, decision)


def _round_groups(config: Campaign, round_: int, cells: list[Cell],
                  kind: str = "") -> dict[str, list[CellFields]]:
    groups = job_groups(config, cells) if cells else {}
    return {f"r{round_}.{kind}{gid}": [cell_coords(c) for c in members] for gid, members in groups.items()}


def is_later_remeasure(decision: RoundDecision, group: str) -> bool:
    """Is ``group`` (of the round ``decision`` asked for) a later re-measure group?"""
    return group in (decision.get("later_remeasure") or [])


def cell_coords(cell: Cell) -> CellFields:
    """A cell as JSON: every field, so that Cell(**coords) is the cell (threads are not in its id)."""
    return cast(CellFields, asdict(cell))

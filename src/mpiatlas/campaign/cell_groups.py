"""What ``mpiatlas run-cell`` does (:mod:`mpiatlas.commands.run_cell` parses its command line): run every
cell of one job group in this one process (``--group``), or one cell from its spec (``--spec``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpiatlas.runner import CellInterrupted, run_cell, run_group
from mpiatlas.matrix.config import load
from mpiatlas.programs import cell_spec, expand
from mpiatlas.campaign.resources import CellCosts, job_groups
from mpiatlas.campaign.adaptive_rounds import cells_of_round_group, is_later_remeasure, later_launches
from mpiatlas.campaign.round_decision import read_decision
from mpiatlas import files
from mpiatlas.matrix import layout
from mpiatlas.runner.quiet import QuietRule
from mpiatlas.runner.run import DEFERRED, Deadline, Later
from mpiatlas.runner.scheduler_state import job_time_left_s

if TYPE_CHECKING:
    from mpiatlas.matrix.cells import Cell
    from mpiatlas.spine.campaign import Campaign


def main(args: argparse.Namespace) -> int:
    try:
        if args.group:
            return _run_group(args)
        return _run_one(args)
    except CellInterrupted as exc:
        # Stopped from outside (scancel, time limit, Ctrl-C): no result, no raw directory; the job
        # fails so that Snakemake runs the group again next time (its sealed cells are skipped).
        print(f"mpiatlas run-cell: {exc}", file=sys.stderr)
        return 75  # EX_TEMPFAIL


def _run_one(args: argparse.Namespace) -> int:
    if not args.spec or not args.out:
        raise SystemExit("mpiatlas run-cell: give --spec JSON --out DIR, or --group ID --config FILE --done FILE")

    outcome = run_cell(json.loads(args.spec), args.out)
    print(f"{args.out}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    # A failed cell is a result, not a workflow error: the campaign goes on.
    return 0


def group_cells(config_path: Path, group: str, round_cells: Path | None = None) -> tuple[Campaign, list[Cell]]:
    """The campaign config and the cells of ``group``: re-expanded from the config, or for a later
    adaptive round's group read from that round's decision (``round_cells``)."""
    config = load(config_path)
    if round_cells is not None:
        return config, _round_group_cells(round_cells, group)
    groups = job_groups(config, expand(config))
    if group not in groups:
        raise SystemExit(f"mpiatlas run-cell: {config_path}: no job group {group!r} in this campaign "
                         f"({len(groups)} groups, e.g. {next(iter(groups), 'none')})")
    return config, groups[group]


def _round_group_cells(decision_file: Path, group: str) -> list[Cell]:
    try:
        decision = read_decision(decision_file)
    except ValueError as exc:
        raise SystemExit(f"mpiatlas run-cell: --round-cells {decision_file}: not a readable decision ({exc})") from None
    try:
        return cells_of_round_group(decision, group)
    except ValueError as exc:
        raise SystemExit(f"mpiatlas run-cell: --round-cells {decision_file}: {exc}") from None


def _run_group(args: argparse.Namespace) -> int:
    if not args.config or not args.done:
        raise SystemExit("mpiatlas run-cell --group needs --config FILE and --done FILE")

    config, cells = group_cells(args.config, args.group, args.round_cells)
    specs = [cell_spec(config, cell) for cell in cells]
    results = layout.results_dir(config.campaign.name)
    outs = [Path(layout.raw_dir(results, spec["id"])) for spec in specs]
    done = run_group(specs, outs, remeasure=config.campaign.remeasure,
                     later=later_round(config, args.group, args.round_cells), deadline=job_deadline(config, cells))
    for entry in done:
        print(f"{entry['cell']}: {entry['status']}" + ("" if entry["ran"] else " (sealed before, skipped)")
              + _quality_note(entry))
    files.write_json_atomic(args.done, {"group": args.group, "cells": done})
    return 0


def job_deadline(config: Campaign, cells: list[Cell]) -> Deadline | None:
    """The end of the scheduler job this group runs in, with what one more launch of each cell
    may take (:meth:`CellCosts.relaunch_s`), or None outside a job with a time limit."""
    left_s = job_time_left_s()
    if left_s is None:
        return None
    return Deadline.after(left_s, list(map(CellCosts(config).relaunch_s, cells)))


def later_round(config: Campaign, group: str, round_cells: Path | None) -> Later | None:
    """The later re-measure round's budget and wait (runner.run.Later) when ``group`` is one of its
    groups (the decision that created it names it), else None."""
    if round_cells is None:
        return None

    if not is_later_remeasure(read_decision(round_cells), group):
        return None
    later, perturbation = config.campaign.remeasure_later, config.campaign.perturbation
    return Later(later_launches(config), QuietRule(later.max_wait_s, later.window_s, later.max_load_per_cpu,
                                                   perturbation.other_cpu_share, perturbation.steal_share))


def _quality_note(entry: dict[str, Any]) -> str:
    """What the group log says of a cell's re-measures, and of a launch still perturbed."""
    notes = [f"{entry['remeasured']} perturbed launch(es) set aside and measured again"] if entry.get("remeasured") else []
    if entry.get("quiet_wait"):
        notes.append(f"last launch after a wait for a quiet machine: {entry['quiet_wait']}")
    if entry.get("quality") == "perturbed":
        notes.append("still perturbed: left out of medians and fits")
    if entry.get(DEFERRED):
        notes.append(entry[DEFERRED])
    return f" ({'; '.join(notes)})" if notes else ""

"""``mpiatlas run-cell``: run campaign cells into their raw output directories.

``--group ID --config CAMPAIGN.json --done FILE`` (the workflow's form) runs every cell of one job
group (mpiatlas.campaign.resources.job_groups) in this one process, skipping cells already sealed, and
writes FILE (the group's cells and their statuses) once every cell of the group is sealed. The
group's cells are expanded here from the campaign's config, so a group of any size needs no long
command line. ``--spec JSON --out DIR`` runs one cell (for ad-hoc use).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec
    from mpiatlas.spine.campaign import Campaign


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run-cell", help="run campaign cells: one (--spec) or a job group (--group; the workflow's)")
    p.add_argument("--spec", help="one cell's spec as JSON (mpiatlas.programs.cell_spec)")
    p.add_argument("--out", type=Path, help="with --spec: raw output directory to create")
    p.add_argument("--group", help="a job group id (mpiatlas.campaign.resources.job_groups)")
    p.add_argument("--config", type=Path, help="with --group: the campaign's config (YAML or JSON)")
    p.add_argument("--done", type=Path, help="with --group: the file listing the group's cells, written at the end")
    p.add_argument("--round-cells", type=Path, metavar="FILE",
                   help="with --group: the adaptive round's decision that lists the group's cells "
                        "(mpiatlas.campaign.adaptive_rounds; the workflow passes it for groups r<round>.<id>)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from mpiatlas.runner import CellInterrupted

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
    from mpiatlas.runner import run_cell

    outcome = run_cell(json.loads(args.spec), args.out)
    print(f"{args.out}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    # A failed cell is a result, not a workflow error: the campaign goes on.
    return 0


def group_specs(config_path: Path, group: str, round_cells: Path | None = None) -> tuple[Campaign, list[CellSpec]]:
    """The campaign config and the specs of the cells of ``group``: re-expanded from the config, or
    for a later adaptive round's group read from that round's decision (``round_cells``)."""
    from mpiatlas.matrix.config import load
    from mpiatlas.programs import cell_spec, expand
    from mpiatlas.campaign.resources import job_groups

    config = load(config_path)
    if round_cells is not None:
        return config, [cell_spec(config, cell) for cell in _round_group_cells(round_cells, group)]
    groups = job_groups(config, expand(config))
    if group not in groups:
        raise SystemExit(f"mpiatlas run-cell: {config_path}: no job group {group!r} in this campaign "
                         f"({len(groups)} groups, e.g. {next(iter(groups), 'none')})")
    return config, [cell_spec(config, cell) for cell in groups[group]]


def _round_group_cells(decision_file: Path, group: str) -> list[Any]:
    from mpiatlas.campaign.adaptive_rounds import cells_of_round_group

    try:
        decision = json.loads(decision_file.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"mpiatlas run-cell: --round-cells {decision_file}: not a readable decision ({exc})") from None
    try:
        return cells_of_round_group(decision, group)
    except ValueError as exc:
        raise SystemExit(f"mpiatlas run-cell: --round-cells {decision_file}: {exc}") from None


def _run_group(args: argparse.Namespace) -> int:
    if not args.config or not args.done:
        raise SystemExit("mpiatlas run-cell --group needs --config FILE and --done FILE")
    from mpiatlas import files
    from mpiatlas.matrix import layout
    from mpiatlas.runner import run_group

    config, specs = group_specs(args.config, args.group, args.round_cells)
    results = layout.results_dir(config.campaign.name)
    outs = [Path(layout.raw_dir(results, spec["id"])) for spec in specs]
    done = run_group(specs, outs, remeasure=config.campaign.remeasure,
                     later=_later(config, args.group, args.round_cells))
    for entry in done:
        print(f"{entry['cell']}: {entry['status']}" + ("" if entry["ran"] else " (sealed before, skipped)")
              + _quality_note(entry))
    files.write_json_atomic(args.done, {"group": args.group, "cells": done})
    return 0


def _later(config: Campaign, group: str, round_cells: Path | None) -> Any:
    """The later re-measure round's budget and wait (runner.run.Later) when ``group`` is one of its
    groups (the decision that created it names it), else None."""
    if round_cells is None:
        return None
    from mpiatlas.campaign.adaptive_rounds import is_later_remeasure, later_launches
    from mpiatlas.runner.quiet import QuietRule
    from mpiatlas.runner.run import Later

    if not is_later_remeasure(json.loads(round_cells.read_text()), group):
        return None
    return Later(later_launches(config), QuietRule.of_config(config["campaign"]))


def _quality_note(entry: dict[str, Any]) -> str:
    """What the group log says of a cell's re-measures, and of a launch still perturbed."""
    notes = [f"{entry['remeasured']} perturbed launch(es) set aside and measured again"] if entry.get("remeasured") else []
    if entry.get("quiet_wait"):
        notes.append(f"last launch after a wait for a quiet machine: {entry['quiet_wait']}")
    if entry.get("quality") == "perturbed":
        notes.append("still perturbed: left out of medians and fits")
    return f" ({'; '.join(notes)})" if notes else ""

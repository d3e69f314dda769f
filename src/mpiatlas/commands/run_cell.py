"""``mpiatlas run-cell``: run campaign cells into their raw output directories.

``--group ID --config CAMPAIGN.json --done FILE`` (the workflow's form) runs every cell of one job
group (mpiatlas.campaign.resources.job_groups) in this one process, skipping cells already sealed, and
writes FILE (the group's cells and their statuses) once every cell of the group is sealed. The
group's cells are expanded here from the campaign's config, so a group of any size needs no long
command line. ``--spec JSON --out DIR`` runs one cell (for ad-hoc use).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run-cell", help=COMMAND_HELP["run-cell"])
    p.add_argument("--spec", help="one cell's spec as JSON (mpiatlas.programs.cell_spec)")
    p.add_argument("--out", type=Path, help="with --spec: raw output directory to create")
    p.add_argument("--group", help="a job group id (mpiatlas.campaign.resources.job_groups)")
    p.add_argument("--config", type=Path, help="with --group: the campaign's config (YAML or JSON)")
    p.add_argument("--done", type=Path, help="with --group: the file listing the group's cells, written at the end")
    p.add_argument("--round-cells", type=Path, metavar="FILE",
                   help="with --group: the adaptive round's decision that lists the group's cells "
                        "(mpiatlas.campaign.adaptive_rounds; the workflow passes it for groups r<round>.<id>)")
    # Resolved by the cli when the command runs: parsing a cell group job's command line imports none of
    # what running it needs (the campaign, its programs, the runner).
    p.set_defaults(func="mpiatlas.campaign.cell_groups:main")

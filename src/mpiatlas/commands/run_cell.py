"""``mpiatlas run-cell``: run one campaign cell into its raw output directory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mpiatlas.runner import run_cell


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-cell", help="run one campaign cell (used by the workflow)")
    p.add_argument("--spec", required=True, help="the cell spec as JSON (from mpiatlas.matrix.cell_spec)")
    p.add_argument("--out", required=True, type=Path, help="raw output directory to create")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    outcome = run_cell(json.loads(args.spec), args.out)
    print(f"{args.out}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    # A failed cell is a result, not a workflow error: the campaign goes on.
    return 0

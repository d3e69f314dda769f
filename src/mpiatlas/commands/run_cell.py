"""``mpiatlas run-cell``: run one campaign cell into its raw output directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path



def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-cell", help="run one campaign cell (used by the workflow)")
    p.add_argument("--spec", required=True, help="the cell spec as JSON (mpiatlas.matrix.cell_spec for IMB cells, "
                   "mpiatlas.kernel_matrix.kernel_spec for kernel cells: \"kind\": \"kernel\")")
    p.add_argument("--out", required=True, type=Path, help="raw output directory to create")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from mpiatlas.runner import CellInterrupted

    try:
        return _run_one(args)
    except CellInterrupted as exc:
        # Stopped from outside (scancel, time limit, Ctrl-C): no result, no raw directory; the job
        # fails so that Snakemake runs the cell again next time.
        print(f"mpiatlas run-cell: {exc}", file=sys.stderr)
        return 75  # EX_TEMPFAIL


def _run_one(args: argparse.Namespace) -> int:
    spec = json.loads(args.spec)
    if spec.get("kind") == "kernel":
        from mpiatlas.kernel_runner import run_kernel_cell

        outcome = run_kernel_cell(spec, args.out)
    else:
        from mpiatlas.runner import run_cell

        outcome = run_cell(spec, args.out)
    print(f"{args.out}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    # A failed cell is a result, not a workflow error: the campaign goes on.
    return 0

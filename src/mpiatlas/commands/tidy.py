"""``mpiatlas tidy``: raw cell directories -> tidy parquet tables (a bar on a terminal, one summary line)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from mpiatlas.matrix import layout
from mpiatlas.campaign.progress import progress_bar
from mpiatlas.tables.tidy import tidy
from mpiatlas.commands.aggregate import write_summary
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tidy", help=COMMAND_HELP["tidy"])
    p.add_argument("cells", nargs="*", type=Path, help="raw cell directories (besides those found with --raw)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--expected", type=Path, default=None, metavar="FILE",
                   help="JSON list of every cell id of the campaign: those without a directory get status 'missing'")
    p.add_argument("--raw", type=Path, default=None, metavar="DIR",
                   help="the campaign's raw directory: every sealed cell of --expected under it is read")
    p.add_argument("--notes", type=Path, default=None, metavar="FILE",
                   help="notes on cells not planned (JSON), copied into the tidy directory for the report")
    p.add_argument("--summary", type=Path, default=None, metavar="FILE",
                   help="also write the per-size summary of the samples (what `mpiatlas aggregate` writes) here")
    p.set_defaults(func=_main)


def sealed_cells(raw: Path, cell_ids: list[str]) -> list[Path]:
    """The raw directories of the cells that have a result (a cell still running has none)."""
    return [raw / cell_id for cell_id in cell_ids if layout.is_sealed(raw / cell_id)]


def _main(args: argparse.Namespace) -> int:
    expected = json.loads(args.expected.read_text()) if args.expected else None
    cells = list(args.cells)
    if args.raw is not None:
        if expected is None:
            raise SystemExit("mpiatlas tidy: --raw needs --expected (the campaign's cell ids)")
        cells += sealed_cells(args.raw, expected)
    with progress_bar(len(cells), "cells") as advance:  # a bar on a terminal; nothing per cell
        counts = tidy(cells, args.out, expected, progress=advance)
    notes = args.out / layout.NOTES
    if args.notes is not None:
        shutil.copyfile(args.notes, notes)
    elif not notes.exists():
        notes.write_text("[]\n")
    print(f"{args.out}: {counts['cells']} cells ({counts['missing']} missing), {counts['samples']} sample rows")
    if args.summary is not None:
        # In this process: a job of its own paid an interpreter, polars and numpy again, and a
        # Snakemake job hand-over, on the path between the last cell and the report.

        print(f"{args.summary}: {write_summary(args.out / layout.IMB_SAMPLES, args.summary)} rows")
    return 0

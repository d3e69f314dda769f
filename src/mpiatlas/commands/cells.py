"""``mpiatlas cells``: list the campaign matrix (what ``snakemake -n`` will run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.config import load
from mpiatlas.matrix import imb_cells


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cells", help="validate a config and list its cells")
    p.add_argument("--config", default="config/config.yaml", type=Path)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    cells = imb_cells(load(args.config))
    for cell in cells:
        print(cell.id)
    print(f"# {len(cells)} cells")
    return 0

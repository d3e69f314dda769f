"""``mpiatlas cells``: list the campaign matrix (what ``snakemake -n`` will run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.config import load
from mpiatlas.kernel_matrix import kernel_cells
from mpiatlas.matrix import imb_cells


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cells", help="validate a config and list its cells")
    p.add_argument("--config", default="config/config.yaml", type=Path)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    config = load(args.config)
    cells = imb_cells(config)
    kernels = kernel_cells(config)
    for cell in [*cells, *kernels]:
        print(cell.id)
    print(f"# {len(cells) + len(kernels)} cells ({len(cells)} IMB, {len(kernels)} kernel)")
    return 0

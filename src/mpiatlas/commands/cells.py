"""``mpiatlas cells``: list the campaign matrix (what ``snakemake -n`` will run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.matrix.config import load
from mpiatlas.programs import expand


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cells", help="validate a config and list its cells")
    p.add_argument("--config", default="config/config.yaml", type=Path)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    config = load(args.config)
    cells = expand(config)
    for cell in cells:
        print(cell.id)
    imb = sum(1 for c in cells if c.kind == "imb")
    print(f"# {len(cells)} cells ({imb} IMB, {len(cells) - imb} kernel)")
    return 0

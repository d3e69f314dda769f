"""``mpiatlas tidy``: raw cell directories -> tidy parquet tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.tidy import tidy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tidy", help="parse raw cell outputs into parquet tables")
    p.add_argument("cells", nargs="+", type=Path, help="raw cell directories")
    p.add_argument("--out", required=True, type=Path)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    counts = tidy(args.cells, args.out)
    print(f"{args.out}: {counts['cells']} cells, {counts['samples']} sample rows")
    return 0

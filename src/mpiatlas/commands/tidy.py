"""``mpiatlas tidy``: raw cell directories -> tidy parquet tables."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mpiatlas.tidy import tidy


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tidy", help="parse raw cell outputs into parquet tables")
    p.add_argument("cells", nargs="*", type=Path, help="raw cell directories")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--expected", type=Path, default=None, metavar="FILE",
                   help="JSON list of every cell id of the campaign: those without a directory get status 'missing'")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    expected = json.loads(args.expected.read_text()) if args.expected else None
    counts = tidy(args.cells, args.out, expected)
    print(f"{args.out}: {counts['cells']} cells ({counts['missing']} missing), {counts['samples']} sample rows")
    return 0

"""``mpiatlas aggregate``: samples -> per-size statistics over repetitions."""

from __future__ import annotations

import argparse
from pathlib import Path



def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("aggregate", help="median, min, 95%% CI and CV per cell and size")
    p.add_argument("samples", type=Path, help="imb_samples.parquet")
    p.add_argument("--out", required=True, type=Path, help="imb_summary.parquet")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    import polars as pl

    from mpiatlas.aggregate import summarize

    summary = summarize(pl.read_parquet(args.samples))
    summary.write_parquet(args.out)
    print(f"{args.out}: {summary.height} rows")
    return 0

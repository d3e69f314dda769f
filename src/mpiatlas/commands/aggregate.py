"""``mpiatlas aggregate``: samples -> per-size statistics over repetitions."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("aggregate", help="median, min, 95%% CI and CV per cell and size")
    p.add_argument("samples", type=Path, help="imb_samples.parquet")
    p.add_argument("--out", required=True, type=Path, help="imb_summary.parquet")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    import polars as pl

    from mpiatlas.stats.aggregate import SUMMARY_KEYS, VALUE_COLUMNS, summarize

    # Only the columns the summary reads: a 1 M-row import's paths and line numbers are never loaded.
    wanted = {*SUMMARY_KEYS, *VALUE_COLUMNS}
    columns = [c for c in pl.read_parquet_schema(args.samples) if c in wanted]
    summary = summarize(pl.read_parquet(args.samples, columns=columns))
    summary.write_parquet(args.out)
    print(f"{args.out}: {summary.height} rows")
    return 0

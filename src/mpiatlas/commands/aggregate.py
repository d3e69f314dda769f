"""``mpiatlas aggregate``: samples -> per-size statistics over repetitions."""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from mpiatlas.stats.aggregate import SUMMARY_KEYS, VALUE_COLUMNS, summarize
from mpiatlas.stats.quality import require_judgement
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("aggregate", help=COMMAND_HELP["aggregate"])
    p.add_argument("samples", type=Path, help="imb_samples.parquet")
    p.add_argument("--out", required=True, type=Path, help="imb_summary.parquet")
    p.set_defaults(func=_main)


def write_summary(samples: Path, out: Path) -> int:
    """The summary of the samples table ``samples`` written to ``out``; its rows. Also the tidy
    job's last step (``mpiatlas tidy --summary``), in the process that wrote the samples."""
    # Only the columns the summary reads: a 1 M-row import's paths and line numbers are never loaded;
    # the file's own schema says whether its launches were judged (the quality column is read).
    wanted = {*SUMMARY_KEYS, *VALUE_COLUMNS}
    schema = list(pl.read_parquet_schema(samples))
    require_judgement(schema, str(samples))
    columns = [c for c in schema if c in wanted]
    summary = summarize(pl.read_parquet(samples, columns=columns))
    summary.write_parquet(out)
    return summary.height


def _main(args: argparse.Namespace) -> int:
    print(f"{args.out}: {write_summary(args.samples, args.out)} rows")
    return 0

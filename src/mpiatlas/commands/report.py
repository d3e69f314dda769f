"""``mpiatlas report``: tidy tables + fitted models -> one offline HTML file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mpiatlas.report.build import build_report
from mpiatlas.commands import COMMAND_HELP


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "report",
        help=COMMAND_HELP["report"],
        description="Build one self-contained HTML report (charts inlined, no network needed) from the tidy "
        "tables and the fitted models. Missing inputs are reported in the page, not fatal.",
    )
    p.add_argument("--tidy", type=Path, required=True, metavar="DIR",
                   help="directory with imb_samples.parquet, imb_summary.parquet, cells.parquet, provenance.json")
    p.add_argument("--fits", type=Path, default=None, metavar="DIR", help="directory with hockney.json and other fits")
    p.add_argument("--limits", type=Path, default=None, metavar="FILE",
                   help="the campaign's physical limits (limits.json of `mpiatlas limits`); without it the report "
                   "sets no bandwidth against a copy rate")
    p.add_argument("--tuning", type=Path, default=None, metavar="DIR",
                   help="the campaign's `mpiatlas tune` directory (decision.json, tuning files, validation): a Tuning "
                   "section")
    p.add_argument("--topology", default=None, metavar="XML|SYNTHETIC",
                   help="the measured node's topology (hwloc XML file or synthetic description such as 'pack:2 core:4 "
                   "pu:1'), for the placements of the measured-vs-predicted collectives (default: this machine's, "
                   "used only if the cells ran on it)")
    p.add_argument("--out", type=Path, default=Path("results/report.html"), metavar="FILE",
                   help="output HTML file (default: %(default)s)")
    p.add_argument("--title", default=None, help="report title (default: 'mpiatlas report')")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = build_report(args.tidy, args.fits, args.out, args.title, limits=args.limits, tuning=args.tuning,
                       topology=args.topology)
    size = out.stat().st_size
    print(f"report written to {out} ({size / 1e6:.2f} MB)", file=sys.stderr)
    return 0

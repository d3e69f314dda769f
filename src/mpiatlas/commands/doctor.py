"""``mpiatlas doctor``: the checks ``mpiatlas campaign`` runs before anything, as a table."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mpiatlas.commands.campaign import is_slurm
from mpiatlas.campaign.auto_plan import load
from mpiatlas.campaign.preflight import run_checks
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help=COMMAND_HELP["doctor"])
    p.add_argument("--config", default="config/config.yaml", type=Path, help="campaign config (default: %(default)s)")
    p.add_argument("--profile", default="profiles/local", help="Snakemake profile (default: %(default)s)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    config = load(args.config)
    checks = run_checks(config, slurm=is_slurm(args.profile))
    table = Table(title=f"prerequisites of campaign {config.campaign.name!r}")
    for column in ("check", "", "found", "how to fix"):
        table.add_column(column, overflow="fold")
    for check in checks:
        table.add_row(check.name, "ok" if check.ok else "MISSING", check.found, check.fix)
    Console(highlight=False).print(table)
    return 0 if all(c.ok for c in checks) else 1

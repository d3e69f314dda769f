"""``mpiatlas campaign``: run the whole Snakemake DAG and print where the report is."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from mpiatlas.config import load


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("campaign", help="run a campaign end to end (Snakemake) and print the report path")
    p.add_argument("--config", default="config/config.yaml", type=Path, help="campaign config (default: %(default)s)")
    p.add_argument("--profile", default="profiles/local", help="Snakemake profile (default: %(default)s)")
    p.add_argument("--directory", default=".", type=Path, help="repository root (default: current directory)")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="extra Snakemake arguments after --")
    p.set_defaults(func=_main)


def snakemake_argv(args: argparse.Namespace) -> list[str]:
    extra = [a for a in args.snakemake_args if a != "--"]
    return [sys.executable, "-m", "snakemake", "--snakefile", "workflow/Snakefile",
            "--configfile", str(args.config), "--profile", args.profile, *extra]


def _main(args: argparse.Namespace) -> int:
    root = args.directory.resolve()
    load(root / args.config)  # fail fast with a clear message before Snakemake starts
    env = dict(os.environ)
    # Rules call the `mpiatlas` entry point of this very environment.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    rc = subprocess.run(snakemake_argv(args), cwd=root, env=env).returncode
    report = root / "results" / "report.html"
    if rc == 0 and report.exists():
        print(f"report: {report}")
    return rc

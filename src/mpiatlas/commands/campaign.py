"""``mpiatlas campaign``: run the whole Snakemake DAG and print where the report is.

When the run ends with cells missing (a batch job was killed, the run was interrupted, a job
failed), the complete report cannot be built: Snakemake's report depends on every cell. The
command then writes a *partial* report from the cells that exist, listing every missing cell
(status ``missing``), at results/partial/report.html. Re-running the same command runs only
the missing cells and builds the complete results/report.html.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from mpiatlas.config import load
from mpiatlas.matrix import imb_cells
from mpiatlas.runner import STATUS

PARTIAL_DIR = Path("results/partial")


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


def _run_snakemake(argv: list[str], root: Path, env: dict[str, str]) -> int:
    """Run Snakemake in its own session; SIGINT/SIGTERM/SIGHUP to this command reach it exactly
    once, as SIGINT: Snakemake ignores SIGTERM while jobs run, and on SIGINT it cancels its
    batch jobs (scancel) and marks unfinished outputs incomplete."""
    proc = subprocess.Popen(argv, cwd=root, env=env, start_new_session=True)

    def forward(signum: int, frame: Any) -> None:
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def campaign_cells(config: dict[str, Any]) -> list[Any]:
    """Every cell of the campaign (IMB, and the C kernels where the config has them)."""
    cells: list[Any] = list(imb_cells(config))
    try:
        from mpiatlas.kernel_matrix import kernel_cells
    except ImportError:
        return cells
    return cells + list(kernel_cells(config))


def missing_cells(root: Path, config: dict[str, Any]) -> tuple[list[str], list[Path]]:
    """(ids of campaign cells without a sealed raw directory, the raw directories that exist)."""
    missing, present = [], []
    for cell in campaign_cells(config):
        cell_dir = root / "results" / "raw" / cell.id
        if (cell_dir / STATUS).is_file():
            present.append(cell_dir)
        else:
            missing.append(cell.id)
    return missing, present


def partial_report(root: Path, config: dict[str, Any], env: dict[str, str]) -> tuple[Path, int, int] | None:
    """Tidy, fit and report whatever cells exist, listing the missing ones; None if nothing ran."""
    missing, present = missing_cells(root, config)
    if not missing or not present:
        return None
    out = root / PARTIAL_DIR
    (out / "fits").mkdir(parents=True, exist_ok=True)
    expected = out / "cells.json"
    expected.write_text(json.dumps([c.id for c in campaign_cells(config)]) + "\n")
    mpiatlas = [sys.executable, "-m", "mpiatlas.cli"]
    tidy_dir, fits = out / "tidy", out / "fits" / "hockney.json"
    title = f"{config['campaign']['name']} (partial: {len(missing)} of {len(missing) + len(present)} cells missing)"
    with (out / "partial.log").open("w") as log:
        def step(*argv: str, stdout: Any = log) -> bool:
            return subprocess.run([*mpiatlas, *argv], cwd=root, env=env, stdout=stdout, stderr=log).returncode == 0

        if not step("tidy", "--out", str(tidy_dir), "--expected", str(expected), *map(str, present)):
            return None
        step("aggregate", str(tidy_dir / "imb_samples.parquet"), "--out", str(tidy_dir / "imb_summary.parquet"))
        with fits.open("w") as fh:
            step("fit", str(tidy_dir), "--model", "hockney", "--json", stdout=fh)
        if not step("report", "--tidy", str(tidy_dir), "--fits", str(fits.parent), "--out",
                    str(out / "report.html"), "--title", title):
            return None
    return out / "report.html", len(missing), len(missing) + len(present)


def _main(args: argparse.Namespace) -> int:
    root = args.directory.resolve()
    config = load(root / args.config)  # fail fast with a clear message before Snakemake starts
    env = dict(os.environ)
    # Rules call the `mpiatlas` entry point of this very environment.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    argv = snakemake_argv(args)
    rc = _run_snakemake(argv, root, env)
    report = root / "results" / "report.html"
    if rc == 0 and report.exists():
        print(f"report: {report}")
    dry = any(a in ("-n", "--dry-run", "--dryrun") for a in argv)
    if rc != 0 and not dry:
        partial = partial_report(root, config, env)
        if partial is not None:
            path, n_missing, n_total = partial
            print(f"partial report: {path} ({n_missing} of {n_total} cells missing; "
                  "run the same command again to run them)")
    return rc

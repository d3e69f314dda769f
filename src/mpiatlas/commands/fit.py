"""``mpiatlas fit``: fit performance models to the samples tables under a directory.

``--model hockney`` fits the piecewise Hockney model T(s) = λ + s/B to PingPong and PingPing
(one-way time; PingPing's under concurrent traffic in both directions). Uniband/Biband print no
time, only bandwidth, and are not fitted with Hockney.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mpiatlas.models.hockney import HOCKNEY_BENCHMARKS, fit_hockney_table

# Pipeline samples identify a measurement cell by these; imported samples have them null.
CELL_COLUMNS: tuple[str, ...] = ("stack", "transport", "mapping", "np", "algorithm")
REQUIRED_COLUMNS: tuple[str, ...] = ("benchmark", "bytes", "t_usec")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fit", help="fit performance models to samples tables", description=__doc__)
    p.add_argument("dir", type=Path, metavar="DIR", help="directory searched recursively for *samples.parquet")
    p.add_argument("--model", choices=["hockney", "kernels"], default="hockney",
                   help="model to fit (default hockney); kernels: the ring/matsum/jacobi models of "
                   "mpiatlas.models.kernels on DIR/kernel_*.parquet")
    p.add_argument("--hockney", type=Path, default=None, metavar="FILE",
                   help="--model kernels: λ and B from this hockney.json (default: fit DIR's PingPong samples)")
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.add_argument(
        "--benchmark",
        nargs="+",
        action="extend",
        metavar="NAME",
        help=f"benchmarks to fit (default: {' '.join(HOCKNEY_BENCHMARKS)})",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.model == "kernels":
        from mpiatlas.commands.kernels import fit_kernels_main

        return fit_kernels_main(args)
    samples, problem = load_samples(args.dir)
    if samples is None:
        print(f"mpiatlas fit: {problem}", file=sys.stderr)
        return 2
    if samples.height == 0:
        print(f"mpiatlas fit: {problem}: nothing fitted", file=sys.stderr)
        print("[]" if args.json else "nothing fitted")
        return 0
    benchmarks = _select_benchmarks(args.benchmark)
    if not benchmarks:
        print("mpiatlas fit: none of the requested benchmarks can be fitted with --model hockney", file=sys.stderr)
        return 2
    keys = ["label", *(c for c in CELL_COLUMNS if c in samples.columns)]
    results = fit_hockney_table(samples, keys, benchmarks=benchmarks, seed=args.seed)
    if not results:
        # Samples exist but none to fit (e.g. a collectives-only campaign): an empty, valid answer.
        print(f"mpiatlas fit: no {'/'.join(benchmarks)} samples under {args.dir}: nothing fitted", file=sys.stderr)
    for r in results:
        if "error" in r:
            print(f"mpiatlas fit: {_cell_name(r)} {r['benchmark']}: not fitted: {r['error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results)
    return 0


def load_samples(directory: Path) -> tuple[pl.DataFrame | None, str]:
    """All ``*samples.parquet`` under ``directory`` concatenated, or (None, why not)."""
    files = sorted(directory.rglob("*samples.parquet")) if directory.is_dir() else []
    if not files:
        return None, f"no *samples.parquet under {directory}"
    samples = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    if samples.height == 0:
        # A campaign whose IMB cells were all unavailable/failed: nothing to fit is a valid answer.
        return samples, f"the samples tables under {directory} are empty: {', '.join(map(str, files))}"
    missing = [c for c in REQUIRED_COLUMNS if c not in samples.columns]
    if missing:
        return None, f"samples under {directory} lack column(s) {missing}"
    if "label" not in samples.columns:
        samples = samples.with_columns(pl.lit(None, dtype=pl.String).alias("label"))
    return samples, ""


def _select_benchmarks(requested: list[str] | None) -> list[str]:
    if not requested:
        return list(HOCKNEY_BENCHMARKS)
    for name in requested:
        if name not in HOCKNEY_BENCHMARKS:
            why = "a bandwidth-only table (no time column)" if name in ("Uniband", "Biband") else "not a single-message p2p time"
            print(f"mpiatlas fit: skipping {name}: {why}; Hockney fits {', '.join(HOCKNEY_BENCHMARKS)}", file=sys.stderr)
    return [b for b in dict.fromkeys(requested) if b in HOCKNEY_BENCHMARKS]


def _cell_name(r: dict[str, Any]) -> str:
    if r.get("label") is None:
        return "/".join(f"{c}={r[c]}" for c in CELL_COLUMNS if r.get(c) is not None) or "(unlabelled)"
    # A pipeline label names stack/transport/mapping; np and algorithm still tell cells apart.
    extra = [f"{c}={r[c]}" for c in ("np", "algorithm") if r.get(c) is not None]
    return " ".join([str(r["label"]), *extra])


def _fmt(v: float | None, digits: int) -> str:
    return "inf" if v is None else f"{v:.{digits}f}"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _print_table(results: list[dict[str, Any]]) -> None:
    table = Table(title="Hockney T(s) = λ + s/B, 95 % bootstrap CI")
    table.add_column("label / cell", overflow="fold")
    table.add_column("benchmark")
    table.add_column("λ µs (CI)", justify="right")
    table.add_column("B MB/s (CI)", justify="right")
    table.add_column("breakpoints")
    table.add_column("sizes", justify="right")
    for r in results:
        if "error" in r:
            table.add_row(escape(_cell_name(r)), r["benchmark"], "-", "-", escape(r["error"]), "-")
            continue
        lo, hi = r["latency_ci_us"]
        blo, bhi = r["bandwidth_ci_MBps"]
        table.add_row(
            escape(_cell_name(r)),
            r["benchmark"],
            f"{_fmt(r['latency_us'], 3)} ({_fmt(lo, 3)}–{_fmt(hi, 3)})",
            f"{_fmt(r['bandwidth_MBps'], 0)} ({_fmt(blo, 0)}–{_fmt(bhi, 0)})",
            " ".join(_fmt_bytes(b) for b in r["breakpoints_bytes"]) or "none",
            str(r["n_sizes"]),
        )
    Console().print(table)

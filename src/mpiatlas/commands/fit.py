"""``mpiatlas fit``: fit performance models to the samples tables under a directory.

``--model hockney`` fits the piecewise Hockney model T(s) = λ + s/B to PingPong and PingPing
(one-way time; PingPing's under concurrent traffic in both directions). Uniband/Biband print no
time, only bandwidth, and are not fitted with Hockney.

``--model alphabeta --bandwidth-gbit-s B`` fits the Alltoall / Allgather α-β models over nodes
(:mod:`mpiatlas.models.alphabeta`) against the nominal link bandwidth B; prints one JSON object
(network, fits, notes).

``--model all --out-dir FITS`` fits every model in one process (the workflow's fit rule) and
writes each one's file to FITS/<model>.json (schema: mpiatlas/data/schemas/fits-<model>.schema.json),
the same document ``--model <model> --json`` prints; the kernel models take λ and B from the
Hockney fits just made. The region-aware ring model places each ring cell's ranks on the topology
its node recorded (tidy/topologies.json), wherever the fit runs; ``--regions TABLE.csv`` prices its
hops from a region table (``mpiatlas predict``'s CSV, e.g. ``mpiatlas regions --csv``) instead of the
campaign's per-region PingPong fits. Both are :func:`mpiatlas.models.fits.fit_all` and
:func:`mpiatlas.models.fits.write_fits`: this command only turns arguments into options and prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mpiatlas.models.fit_records import HockneyRecord, hockney_records
from mpiatlas.models.fits import FitError, FitOptions, Fits, cell_name, fit_all, write_fits
from mpiatlas.models.fits_files import FitsFileError, MODELS, dumps, read
from mpiatlas.models.region_latency import RegionTableError, read_region_table
from mpiatlas.models.hockney import HOCKNEY_BENCHMARKS
from mpiatlas.programs import modelled_kernels
from mpiatlas.commands import COMMAND_HELP

# Heavy imports (polars, scipy, rich) stay inside the functions: every CLI call imports this module.

ALL = "all"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("fit", help=COMMAND_HELP["fit"], description=__doc__)
    p.add_argument("dir", type=Path, metavar="DIR", help="directory searched recursively for *samples.parquet")
    p.add_argument("--model", choices=[*MODELS, ALL], default="hockney",
                   help="model to fit (default hockney); kernels: the ring/matsum/jacobi models of "
                   "mpiatlas.models.kernels on DIR/kernel_*.parquet; alphabeta: the Alltoall/Allgather "
                   "models over nodes of mpiatlas.models.alphabeta; all: every model in one process "
                   "(needs --out-dir and --bandwidth-gbit-s; the kernel models use the Hockney fits just made)")
    p.add_argument("--out-dir", type=Path, default=None, metavar="FITS",
                   help="write each model's file to FITS/<model>.json (validated against its schema, written "
                   "aside and renamed) instead of printing it")
    for option in fields(FitOptions):  # the library's options, defined once (mpiatlas.models.fits)
        if "flag" in option.metadata:
            p.add_argument(option.metadata["flag"], dest=option.name, type=type(option.default)
                           if option.default is not None else float, default=option.default,
                           metavar=option.metadata["metavar"], help=option.metadata["help"] + ("" if option.default is None else f" (default {option.default})"))
    p.add_argument("--hockney", type=Path, default=None, metavar="FILE",
                   help="--model kernels: λ and B from this hockney.json (default: fit DIR's PingPong samples)")
    p.add_argument("--regions", type=Path, default=None, metavar="TABLE.csv",
                   help="--model kernels/all: price the ring's hops from this region table (mpiatlas predict's CSV, "
                   "e.g. from mpiatlas regions --csv) instead of the campaign's per-region PingPong fits")
    p.add_argument("--json", action="store_true", help="print the fits file's JSON instead of a table")
    p.add_argument("--benchmark", nargs="+", action="extend", metavar="NAME",
                   help="benchmarks to fit (default: every benchmark the model applies to; Hockney: PingPong, "
                   "PingPing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    refusal = _refusal(args)
    if refusal:
        print(f"mpiatlas fit: {refusal}", file=sys.stderr)
        return 2
    try:
        fits = fit_all(args.dir, _options(args))
    except (FitError, FitsFileError) as exc:
        print(f"mpiatlas fit: {exc}", file=sys.stderr)
        return 2
    for problem in fits.problems:
        print(f"mpiatlas fit: {problem}", file=sys.stderr)
    if args.out_dir is not None:
        try:
            write_fits(fits, args.out_dir)
        except FitsFileError as exc:  # a fit the schema does not accept: a bug, said plainly
            print(f"mpiatlas fit: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.json:
        print(dumps(fits.documents()[args.model]), end="")
    else:
        PRINTERS[args.model](fits)
    return 0


def _refusal(args: argparse.Namespace) -> str | None:
    """Why these arguments cannot be honoured (None: they can)."""
    if args.model == ALL and args.out_dir is None:
        return f"--model {ALL} needs --out-dir (the directory of the fits' JSON files)"
    if args.model == ALL and (args.hockney is not None or args.benchmark):
        return (f"--model {ALL} fits every model on its own benchmarks and Hockney itself; "
                "--benchmark and --hockney are for a single --model")
    if args.regions is not None and args.model not in ("kernels", ALL):
        return "--regions prices the ring kernel's hops: it needs --model kernels or --model all"
    if args.model in ("alphabeta", ALL) and args.bandwidth_gbit_s is None:
        return "--model alphabeta needs --bandwidth-gbit-s (the nominal link bandwidth, Gbit/s)"
    return None


def _options(args: argparse.Namespace) -> FitOptions:
    """The library's options from the command line; raises FitError/FitsFileError on a bad one."""
    given: dict[str, Any] = {f.name: getattr(args, f.name) for f in fields(FitOptions) if "flag" in f.metadata}
    given["models"] = MODELS if args.model == ALL else (args.model,)
    if args.model == "hockney":
        given["hockney_benchmarks"] = tuple(_select_benchmarks(args.benchmark))
        if not given["hockney_benchmarks"]:
            raise FitError("none of the requested benchmarks can be fitted with --model hockney")
    if args.model == "alphabeta" and args.benchmark:
        given["alphabeta_benchmarks"] = tuple(args.benchmark)
    if args.model == "kernels" and args.hockney is not None:
        given["hockney_fits"] = tuple(_read_hockney(args.hockney))
    if args.regions is not None:
        try:
            given["region_table"] = read_region_table(args.regions)
        except RegionTableError as exc:
            raise FitError(f"--regions: {exc}") from exc
    return FitOptions(**given)


def _read_hockney(path: Path) -> list[HockneyRecord]:
    """``--hockney FILE``: its entries, checked against the schema; no file: no IMB λ (said)."""
    if not path.is_file():
        print(f"mpiatlas fit: {path}: no such Hockney fits file; kernel models use their own λ", file=sys.stderr)
        return []
    return hockney_records(read(path, "hockney"), str(path))


def _select_benchmarks(requested: list[str] | None) -> list[str]:
    if not requested:
        return list(HOCKNEY_BENCHMARKS)
    for name in requested:
        if name not in HOCKNEY_BENCHMARKS:
            why = "a bandwidth-only table (no time column)" if name in ("Uniband", "Biband") else "not a single-message p2p time"
            print(f"mpiatlas fit: skipping {name}: {why}; Hockney fits {', '.join(HOCKNEY_BENCHMARKS)}", file=sys.stderr)
    return [b for b in dict.fromkeys(requested) if b in HOCKNEY_BENCHMARKS]


def _fmt(v: float | None, digits: int) -> str:
    return "inf" if v is None else f"{v:.{digits}f}"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _print_table(fits: Fits) -> None:
    results = fits.hockney or []
    if not results:
        print("nothing fitted")
        return

    table = Table(title="Hockney T(s) = λ + s/B, 95 % bootstrap CI")
    table.add_column("label / cell", overflow="fold")
    table.add_column("benchmark")
    table.add_column("λ µs (CI)", justify="right")
    table.add_column("asymptotic B MB/s (CI)", justify="right")
    table.add_column("peak B MB/s (CI)", justify="right")
    table.add_column("breakpoints")
    table.add_column("sizes", justify="right")
    for r in results:
        if r.error is not None:
            table.add_row(escape(cell_name(r)), r.benchmark, "-", "-", "-", escape(r.error), "-")
            continue
        lo, hi = r.latency_ci_us
        blo, bhi = r.asymptotic_bandwidth_ci_MBps
        plo, phi = r.peak_bandwidth_ci_MBps
        table.add_row(
            escape(cell_name(r)),
            r.benchmark,
            f"{_fmt(r.latency_us, 3)} ({_fmt(lo, 3)}–{_fmt(hi, 3)})",
            f"{_fmt(r.asymptotic_bandwidth_MBps, 0)} ({_fmt(blo, 0)}–{_fmt(bhi, 0)})",
            f"{_fmt(r.peak_bandwidth_MBps, 0)} ({_fmt(plo, 0)}–{_fmt(phi, 0)})",
            " ".join(_fmt_bytes(b) for b in r.breakpoints_bytes) or "none",
            str(r.n_sizes),
        )
    Console().print(table)


def _print_alphabeta(fits: Fits) -> None:
    result = fits.alphabeta
    if result is None:
        print("nothing fitted")
        return
    net = result.network
    table = Table(title=f"α-β models over nodes, b = {net.bandwidth_gbit_s:g} Gbit/s ({escape(net.name)}), "
                        "95 % bootstrap CI")
    for col in ("cell", "benchmark", "k", "nodes", "α (CI)", "β µs (CI)", "points", "R²", "rel RMS"):
        table.add_column(col, justify="right" if col in ("k", "points", "R²", "rel RMS") else "left")
    for f in result.fits:
        ident = [escape(cell_name(f)), f.benchmark, str(f.ppn)]
        if f.error is not None:
            table.add_row(*ident, "-", escape(f"not fitted: {f.error}"), "-", "-", "-", "-")
            continue
        (alo, ahi), (blo, bhi) = f.alpha_ci, f.beta_ci_us
        table.add_row(*ident, ",".join(map(str, f.nodes)),
                      f"{_fmt(f.alpha, 3)} ({_fmt(alo, 3)}–{_fmt(ahi, 3)})",
                      f"{_fmt(f.beta_us, 2)} ({_fmt(blo, 2)}–{_fmt(bhi, 2)})",
                      str(f.n_points), _fmt(f.r2, 4), _fmt(f.rel_rms, 3))
    Console().print(table)


def _print_kernels(fits: Fits) -> None:
    # The file's view: each kernel model's entries carry their own keys (label, headline, fails_where).
    result: dict[str, Any] = {} if fits.kernels is None else fits.kernels.to_json()
    table = Table(title="Kernel models")
    table.add_column("kernel")
    table.add_column("label")
    table.add_column("result")
    table.add_column("where it fails", overflow="fold")
    for kernel in modelled_kernels():
        for fit in result.get(kernel, []):
            label = str(fit.get("label")) + (f" {fit['collective']} P={fit['np']}" if "collective" in fit else "")
            table.add_row(kernel, escape(label), escape(fit.get("headline", "")),
                          escape(fit.get("fails_where", fit.get("error", ""))))
    Console().print(table)


PRINTERS: dict[str, Callable[[Fits], None]] = {"hockney": _print_table, "kernels": _print_kernels, "alphabeta": _print_alphabeta}

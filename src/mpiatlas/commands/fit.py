"""``mpiatlas fit``: fit performance models to the samples tables under a directory.

``--model hockney`` fits the piecewise Hockney model T(s) = λ + s/B to PingPong and PingPing
(one-way time; PingPing's under concurrent traffic in both directions). Uniband/Biband print no
time, only bandwidth, and are not fitted with Hockney.

``--model alphabeta --bandwidth-gbit-s B`` fits the Alltoall / Allgather α-β models over nodes
(:mod:`mpiatlas.models.alphabeta`) against the nominal link bandwidth B; prints one JSON object
(network, fits, notes).

``--model all --out-dir FITS`` fits every model in one process (the workflow's fit rule) and
writes each one's JSON to FITS/<model>.json, the same bytes ``--model <model> --json`` prints;
the kernel models take λ and B from the Hockney fits just written.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpiatlas.layout import ALPHABETA_FIT, HOCKNEY_FIT, KERNELS_FIT
from mpiatlas.layout import write_text_atomic

# Heavy imports (polars, scipy, rich) stay inside the functions: every CLI call imports this module.

# The models, in the order --model all fits them (kernels after hockney: they use its fits).
MODELS: tuple[str, ...] = ("hockney", "kernels", "alphabeta")
MODEL_FILES = {"hockney": HOCKNEY_FIT, "kernels": KERNELS_FIT, "alphabeta": ALPHABETA_FIT}
ALL = "all"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("fit", help="fit performance models to samples tables", description=__doc__)
    p.add_argument("dir", type=Path, metavar="DIR", help="directory searched recursively for *samples.parquet")
    p.add_argument("--model", choices=[*MODELS, ALL], default="hockney",
                   help="model to fit (default hockney); kernels: the ring/matsum/jacobi models of "
                   "mpiatlas.models.kernels on DIR/kernel_*.parquet; alphabeta: the Alltoall/Allgather "
                   "models over nodes of mpiatlas.models.alphabeta; all: every model in one process "
                   "(needs --out-dir and --bandwidth-gbit-s; the kernel models use the Hockney fits just made)")
    p.add_argument("--out-dir", type=Path, default=None, metavar="FITS",
                   help="write each model's JSON to FITS/<model>.json (written aside and renamed) instead "
                   "of printing it")
    p.add_argument("--bandwidth-gbit-s", type=float, default=None, metavar="GBIT",
                   help="--model alphabeta (required): nominal link bandwidth b in Gbit/s "
                   "(config network.bandwidth_gbit_s)")
    p.add_argument("--network-name", default="nominal link", metavar="NAME",
                   help="--model alphabeta: label of the link (config network.name)")
    p.add_argument("--hockney", type=Path, default=None, metavar="FILE",
                   help="--model kernels: λ and B from this hockney.json (default: fit DIR's PingPong samples)")
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.add_argument(
        "--benchmark",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="benchmarks to fit (default: every benchmark the Hockney model applies to: PingPong, PingPing)",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.model == ALL or args.out_dir is not None:
        return fit_to_files(args)
    return MODEL_MAINS[args.model](args)


def fit_to_files(args: argparse.Namespace) -> int:
    """``--out-dir``: each model's ``--json`` output into FITS/<model>.json, in one process.

    One process for every model (the workflow's fit rule, once per campaign view after all
    cells) saves an interpreter, the polars/numpy imports and a job start per model, and the
    kernel fits need not wait for a Hockney job to finish. Each file holds exactly what
    ``--model <model> --json`` prints, so the outputs are those of separate runs; it is written
    aside and renamed, and only when that model's fit succeeded: a failed fit never leaves a
    truncated file behind.
    """
    if args.out_dir is None:
        print(f"mpiatlas fit: --model {ALL} needs --out-dir (the directory of the fits' JSON files)", file=sys.stderr)
        return 2
    if args.model == ALL and (args.hockney is not None or args.benchmark):
        print(f"mpiatlas fit: --model {ALL} fits every model on its own benchmarks and Hockney itself; "
              "--benchmark and --hockney are for a single --model", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for model in (MODELS if args.model == ALL else [args.model]):
        one = argparse.Namespace(**{**vars(args), "model": model, "json": True})
        if args.model == ALL and model == "kernels":
            # λ and B from the Hockney fits written above, read back as `--hockney FILE` reads
            # them: the kernel models see exactly what a separate `--model kernels` run would.
            one.hockney = args.out_dir / MODEL_FILES["hockney"]
        code = _write_output(MODEL_MAINS[model], one, args.out_dir / MODEL_FILES[model])
        if code != 0:
            return code
    return 0


def _write_output(main: Callable[[argparse.Namespace], int], args: argparse.Namespace, out: Path) -> int:
    """Run one model's main with its stdout captured; keep the text as ``out`` if it succeeded."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main(args)
    if code == 0:
        write_text_atomic(out, text.getvalue())
    return code


def fit_hockney_main(args: argparse.Namespace) -> int:
    """``--model hockney``: the piecewise Hockney fits of the PingPong/PingPing samples under DIR."""
    from mpiatlas.models.hockney import fit_hockney_table
    from mpiatlas.samples import CELL_COLUMNS, load_samples

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


def _select_benchmarks(requested: list[str] | None) -> list[str]:
    from mpiatlas.models.hockney import HOCKNEY_BENCHMARKS

    if not requested:
        return list(HOCKNEY_BENCHMARKS)
    for name in requested:
        if name not in HOCKNEY_BENCHMARKS:
            why = "a bandwidth-only table (no time column)" if name in ("Uniband", "Biband") else "not a single-message p2p time"
            print(f"mpiatlas fit: skipping {name}: {why}; Hockney fits {', '.join(HOCKNEY_BENCHMARKS)}", file=sys.stderr)
    return [b for b in dict.fromkeys(requested) if b in HOCKNEY_BENCHMARKS]


def _cell_name(r: dict[str, Any]) -> str:
    from mpiatlas.samples import CELL_COLUMNS

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
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

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


def fit_alphabeta_main(args: argparse.Namespace) -> int:
    """``--model alphabeta``: the Alltoall/Allgather α-β fits of the samples under DIR."""
    from mpiatlas.models.alphabeta import ALPHABETA_BENCHMARKS, Network, fit_alphabeta_table
    from mpiatlas.samples import load_samples

    if args.bandwidth_gbit_s is None:
        print("mpiatlas fit: --model alphabeta needs --bandwidth-gbit-s (the nominal link bandwidth, Gbit/s)",
              file=sys.stderr)
        return 2
    try:
        network = Network(args.network_name, args.bandwidth_gbit_s)
    except ValueError as exc:
        print(f"mpiatlas fit: --bandwidth-gbit-s: {exc}", file=sys.stderr)
        return 2
    benchmarks = list(dict.fromkeys(args.benchmark or ALPHABETA_BENCHMARKS))
    unknown = [b for b in benchmarks if b not in ALPHABETA_BENCHMARKS]
    if unknown:
        print(f"mpiatlas fit: no α-β model for {', '.join(unknown)}; models: {', '.join(ALPHABETA_BENCHMARKS)}",
              file=sys.stderr)
        return 2
    samples, problem = load_samples(args.dir)
    if samples is None:
        print(f"mpiatlas fit: {problem}", file=sys.stderr)
        return 2
    result = fit_alphabeta_table(samples, network, benchmarks=benchmarks, seed=args.seed)
    for note in result["notes"]:
        print(f"mpiatlas fit: alphabeta: {note}", file=sys.stderr)
    for f in result["fits"]:
        if "error" in f:
            print(f"mpiatlas fit: alphabeta: {_cell_name(f)} {f['benchmark']} ppn={f['ppn']}: not fitted: "
                  f"{f['error']}", file=sys.stderr)
    if not result["fits"]:
        print(f"mpiatlas fit: no multi-node {'/'.join(benchmarks)} samples under {args.dir}: nothing fitted",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        _print_alphabeta(result)
    return 0


def _print_alphabeta(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    net = result["network"]
    table = Table(title=f"α-β models over nodes, b = {net['bandwidth_gbit_s']:g} Gbit/s ({escape(net['name'])}), "
                        "95 % bootstrap CI")
    for col in ("cell", "benchmark", "k", "nodes", "α (CI)", "β µs (CI)", "points", "R²", "rel RMS"):
        table.add_column(col, justify="right" if col in ("k", "points", "R²", "rel RMS") else "left")
    for f in result["fits"]:
        ident = [escape(_cell_name(f)), f["benchmark"], str(f["ppn"])]
        if "error" in f:
            table.add_row(*ident, "-", escape(f"not fitted: {f['error']}"), "-", "-", "-", "-")
            continue
        (alo, ahi), (blo, bhi) = f["alpha_ci"], f["beta_ci_us"]
        table.add_row(*ident, ",".join(map(str, f["nodes"])),
                      f"{_fmt(f['alpha'], 3)} ({_fmt(alo, 3)}–{_fmt(ahi, 3)})",
                      f"{_fmt(f['beta_us'], 2)} ({_fmt(blo, 2)}–{_fmt(bhi, 2)})",
                      str(f["n_points"]), _fmt(f["r2"], 4), _fmt(f["rel_rms"], 3))
    Console().print(table)


def fit_kernels_main(args: argparse.Namespace) -> int:
    """``--model kernels``: lives with the other kernel commands (mpiatlas.commands.kernels)."""
    from mpiatlas.commands.kernels import fit_kernels_main as kernels_main

    return kernels_main(args)


MODEL_MAINS: dict[str, Callable[[argparse.Namespace], int]] = {
    "hockney": fit_hockney_main, "kernels": fit_kernels_main, "alphabeta": fit_alphabeta_main,
}

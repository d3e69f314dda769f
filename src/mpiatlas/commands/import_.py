"""``mpiatlas import``: parse raw IMB or OSU Micro-Benchmarks output (text or the OSU CSV exports) into
DIR/imb_samples.parquet."""

from __future__ import annotations

import argparse
from pathlib import Path

from mpiatlas.layout import IMB_SAMPLES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import",
        help="import raw IMB-MPI1/IMB-EXT or OSU output files as a samples table",
        description=__doc__,
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="raw IMB or OSU stdout files, or OSU CSV exports")
    p.add_argument("--np", type=int, default=None, metavar="N",
                   help="rank count of OSU collective output (OSU does not print it; IMB files carry their own)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help=f"directory for {IMB_SAMPLES}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from mpiatlas.importer import import_files, write_samples

    out, err = Console(), Console(stderr=True)
    result = import_files(args.files, osu_processes=args.np)
    for f in result.files:
        if f.error is not None:
            # soft_wrap: keep "file:line: message" on one line whatever the terminal width.
            err.print(f"[red]failed[/red] {escape(f.error)}", soft_wrap=True)
        else:
            out.print(f"[green]ok[/green] {escape(str(f.path))}: {f.rows} rows, {escape(', '.join(f.benchmarks))}", soft_wrap=True)
    for label, n in result.duplicate_labels().items():
        err.print(f"[yellow]note[/yellow] label {escape(label)!r} is shared by {n} files: their rows are pooled", soft_wrap=True)
    if result.samples is not None:
        path = write_samples(result.samples, args.out)
        out.print(f"wrote {escape(str(path))} ({result.samples.height} rows from {len(result.files) - len(result.failed)} files)", soft_wrap=True)
    else:
        err.print("[red]nothing imported[/red]: every file failed", soft_wrap=True)
    return 1 if result.failed else 0

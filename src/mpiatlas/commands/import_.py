"""``mpiatlas import``: parse raw IMB or OSU Micro-Benchmarks output (text or the OSU CSV exports) into
DIR/imb_samples.parquet.

Rows with one label are one system's repetitions. By default each file's label is its stem, with as many
parent directories as it takes to tell apart files that share a name (8 partitions' rfm_IMB_PingPong_job.out
stay 8 systems); --pool, --label and --labels pool files on purpose."""

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
    p.add_argument("--pool", action="store_true",
                   help="label each file by its stem alone: files sharing a name (rep00/x.txt, rep01/x.txt) "
                        "are pooled as repetitions of one system")
    p.add_argument("--label", default=None, metavar="NAME",
                   help="one label for every file (they are one system); not with --pool or --labels")
    p.add_argument("--labels", default=None, type=Path, metavar="CSV",
                   help="a CSV with the columns path,label (paths relative to the CSV) labelling the files it "
                        "lists; the others get the default label (or their stem with --pool)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from mpiatlas.import_labels import LabelError
    from mpiatlas.importer import import_files, write_samples

    out, err = Console(), Console(stderr=True)
    try:
        result = import_files(args.files, label=args.label, labels_csv=args.labels, pool=args.pool,
                              osu_processes=args.np)  # fmt: skip
    except LabelError as exc:  # raised before any file is read: nothing written
        err.print(f"[red]mpiatlas import:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2
    for f in result.files:
        if f.error is not None:
            # soft_wrap: keep "file:line: message" on one line whatever the terminal width.
            err.print(f"[red]failed[/red] {escape(f.error)}", soft_wrap=True)
        else:
            out.print(f"[green]ok[/green] {escape(str(f.path))}: {f.rows} rows, {escape(', '.join(f.benchmarks))} "
                      f"(label {escape(repr(f.label))})", soft_wrap=True)  # fmt: skip
    for label, n in result.pooled_labels().items():
        err.print(f"[yellow]note[/yellow] label {escape(repr(label))} pools {n} files ({_pooled_by(args)}): "
                  "their rows are repetitions of one system", soft_wrap=True)  # fmt: skip
    if result.samples is not None:
        path = write_samples(result.samples, args.out)
        out.print(f"wrote {escape(str(path))} ({result.samples.height} rows from {len(result.files) - len(result.failed)} files)", soft_wrap=True)
    else:
        err.print("[red]nothing imported[/red]: every file failed", soft_wrap=True)
    return 1 if result.failed else 0


def _pooled_by(args: argparse.Namespace) -> str:
    """The flags that pooled files under one label (the default labels never give two files one label)."""
    flags = [flag for flag, on in (("--label", args.label is not None), ("--labels", args.labels is not None),
                                   ("--pool", args.pool)) if on]  # fmt: skip
    return f"as {' / '.join(flags)} asked" if flags else "by their labels"

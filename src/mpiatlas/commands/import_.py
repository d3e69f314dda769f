"""``mpiatlas import``: parse raw IMB or OSU Micro-Benchmarks output (text or the OSU CSV exports) into
DIR/imb_samples.parquet.

Rows with one label are one system's repetitions. By default each file's label is its stem, with as many
parent directories as it takes to tell apart files that share a name (8 partitions' rfm_IMB_PingPong_job.out
stay 8 systems); --pool, --label and --labels pool files on purpose.

It prints a progress bar on a terminal (nothing per file elsewhere), the files it could not import (one
line each, with what was wrong) and one summary; --verbose adds a line per imported file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mpiatlas.matrix.layout import IMB_SAMPLES
from mpiatlas.tables.import_labels import LabelError
from mpiatlas.tables.importer import import_files, write_samples
from mpiatlas.campaign.progress import progress_bar
from mpiatlas.commands import COMMAND_HELP


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "import",
        help=COMMAND_HELP["import"],
        description=__doc__,
    )
    # Names, not Path objects: an import of 25 k files pays ~0.1 s for pathlib's parsing of each.
    p.add_argument("files", nargs="+", metavar="FILE", help="raw IMB or OSU stdout files, or OSU CSV exports")
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
    p.add_argument("-v", "--verbose", action="store_true",
                   help="a line per imported file (its rows, benchmarks and label) and every pooled label")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        with progress_bar(len(args.files), "files") as advance:
            result = import_files(args.files, label=args.label, labels_csv=args.labels, pool=args.pool,
                                  osu_processes=args.np, progress=advance)  # fmt: skip
    except LabelError as exc:  # raised before any file is read: nothing written
        print(f"mpiatlas import: {exc}", file=sys.stderr)
        return 2
    failed = result.failed
    if args.verbose:
        sys.stdout.writelines(f"ok {f.path}: {f.rows} rows, {', '.join(f.benchmarks)} (label {f.label!r})\n"
                              for f in result.files if f.error is None)  # fmt: skip
    # The problems, one line each: the message names the file (and line) and what was wrong.
    sys.stderr.writelines(f"failed {f.error}\n" for f in failed)
    _print_pooled(result.pooled_labels(), _pooled_by(args), args.verbose)
    if result.samples is None:
        print(f"nothing imported: every file failed ({_count(len(failed), 'problem')} listed above)", file=sys.stderr)
        return 1
    path = write_samples(result.samples, args.out)
    listed = " (listed above)" if failed else ""
    print(f"wrote {path}: {result.samples.height} rows, {_count(result.samples['label'].n_unique(), 'label')} from "
          f"{len(result.files) - len(failed)} of {len(result.files)} files; {_count(len(failed), 'problem')}{listed}")
    return 1 if failed else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# More pooled labels than this are counted in one note (--verbose names each).
POOLED_NOTES = 8


def _print_pooled(pooled: dict[str, int], by: str, verbose: bool) -> None:
    """Notes on labels that pool several files: one per label when they are few, else one in all."""
    if not pooled:
        return
    if verbose or len(pooled) <= POOLED_NOTES:
        sys.stderr.writelines(f"note: label {label!r} pools {n} files ({by}): their rows are repetitions of one "
                              "system\n" for label, n in pooled.items())  # fmt: skip
        return
    low, high = min(pooled.values()), max(pooled.values())
    files = str(low) if low == high else f"{low}..{high}"
    print(f"note: {len(pooled)} labels pool {files} files each ({by}): each label's rows are repetitions of one "
          "system (--verbose names them)", file=sys.stderr)  # fmt: skip


def _pooled_by(args: argparse.Namespace) -> str:
    """The flags that pooled files under one label (the default labels never give two files one label)."""
    flags = [flag for flag, on in (("--label", args.label is not None), ("--labels", args.labels is not None),
                                   ("--pool", args.pool)) if on]  # fmt: skip
    return f"as {' / '.join(flags)} asked" if flags else "by their labels"

"""``mpiatlas compare A B``: two campaigns compared per cell and size, with significance.

``mpiatlas compare --a A1 A2 A3 --b B1 B2 B3``: each side several runs of its campaign, so that
the CI includes run-to-run variation (see :mod:`mpiatlas.stats.two_level`).

Exit status: 0 when nothing is significantly slower beyond ``--fail-on-regression`` (or without
that option), 1 when something is, 2 on bad input (a missing or malformed directory or file), or
when ``--fail-on-regression`` is given but no size could be judged (a gate must not pass blind).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from mpiatlas.files import write_text_atomic
from mpiatlas.compare.campaigns import CompareError, compare, load_runs, tidy_record, Comparison
from mpiatlas.stats.ratios import FASTER, SAME, SLOWER, regressions
from mpiatlas.compare.summary import summary_lines
from mpiatlas.compare.report import write_report
from mpiatlas.commands import COMMAND_HELP


HELP = COMMAND_HELP["compare"]


DESCRIPTION = (
    "Match the cells of A and B on every axis both carry (an axis with one value on each side, e.g. transport "
    "shm in A and ofi-tcp in B, is the compared setting), then per message size: the ratio B/A of the medians "
    "over repetitions with a 95 % bootstrap CI, significant when it excludes 1 (judged with at least 5 "
    "repetitions per side); the kernel tables likewise (ring, matsum and Jacobi time per P, pingpong and coll "
    "per size); Hockney and alpha-beta parameter differences; cells on one side only are listed. "
    "One run per side does not carry the machine's run-to-run variation: repeat each campaign and pass the runs "
    "as --a A1 A2 A3 --b B1 B2 B3; with at least 2 runs per side the CI resamples runs, then repetitions "
    "(two-level bootstrap). "
    "Exit status: 0, or 1 with --fail-on-regression when a size got significantly slower beyond it; 2 on bad "
    "input, or when --fail-on-regression is given and no size could be judged.")


def threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05 (argparse type)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5% or a fraction such as 0.05, "
                                         f"got {text!r}") from exc
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected a threshold between 0% and 1000%, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("compare", help=HELP, description=DESCRIPTION)
    p.add_argument("a", type=Path, nargs="?", default=None, metavar="A",
                   help="baseline: a results directory (results/<name>), its tidy/ directory, or an imported "
                   "imb_samples.parquet")
    p.add_argument("b", type=Path, nargs="?", default=None, metavar="B",
                   help="the campaign compared with A (same forms)")
    p.add_argument("--a", dest="a_runs", type=Path, nargs="+", action="extend", default=[], metavar="DIR",
                   help="runs of the baseline campaign (instead of A): its CI then includes run-to-run variation")
    p.add_argument("--b", dest="b_runs", type=Path, nargs="+", action="extend", default=[], metavar="DIR",
                   help="runs of the compared campaign (instead of B)")
    p.add_argument("--out", type=Path, default=None, metavar="FILE", help="write the HTML diff report here")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help="write the comparison as JSON (and FILE with .parquet: the per-size table)")
    p.add_argument("--fail-on-regression", type=threshold, default=None, metavar="PCT",
                   help="exit 1 when a size is significantly slower by more than PCT (e.g. 5%%): the lower end "
                   "of its ratio CI above 1 + PCT")
    p.add_argument("--ignore", action="append", default=[], metavar="AXIS",
                   help="do not match on AXIS (e.g. transport), repeatable; refused when cells would be pooled")
    p.add_argument("--plain", action="store_true", help="plain text summary (no colours)")
    p.set_defaults(func=run)


def _print_summary(lines: list[str], plain: bool) -> None:
    if plain:
        print("\n".join(lines))
        return

    console = Console()
    styles = {"slower": "red", "faster": "green", "regressions": "bold"}
    for line in lines:
        style = next((v for k, v in styles.items() if line.startswith(k)), None)
        text = escape(line)
        console.print(f"[{style}]{text}[/{style}]" if style else text, soft_wrap=True)


def _write_json(cmp: Comparison, path: Path) -> None:
    write_text_atomic(path, json.dumps(tidy_record(cmp), indent=1, allow_nan=False, default=str))
    cmp.sizes.write_parquet(path.with_suffix(".parquet"))


def sides(args: argparse.Namespace) -> tuple[list[Path], list[Path]]:
    """The runs of A and of B: ``A B`` (one each) or ``--a … --b …``; raises ValueError when mixed or missing."""
    if args.a_runs or args.b_runs:
        if args.a is not None or args.b is not None:
            raise ValueError("give the sides either as two positional directories A B or as --a DIR… --b DIR…, "
                             "not both")
        if not args.a_runs or not args.b_runs:
            raise ValueError("--a and --b both need at least one results directory")
        return list(args.a_runs), list(args.b_runs)
    if args.a is None or args.b is None:
        raise ValueError("expected two results directories A B (or --a A1 A2 … --b B1 B2 …)")
    return [args.a], [args.b]


def run(args: argparse.Namespace) -> int:
    try:
        runs_a, runs_b = sides(args)
    except ValueError as exc:
        print(f"mpiatlas compare: {exc}", file=sys.stderr)
        return 2
    try:
        cmp = compare(load_runs(runs_a, "A"), load_runs(runs_b, "B"), ignore=args.ignore)
    except CompareError as exc:
        print(f"mpiatlas compare: {exc}", file=sys.stderr)
        return 2
    _print_summary(summary_lines(cmp, args.fail_on_regression), args.plain)
    if args.json is not None:
        _write_json(cmp, args.json)
        print(f"comparison written to {args.json} and {args.json.with_suffix('.parquet')}", file=sys.stderr)
    if args.out is not None:
        out = write_report(cmp, args.out, args.fail_on_regression)
        print(f"report written to {out} ({out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    if args.fail_on_regression is None:
        return 0
    every = cmp.all_sizes()  # IMB's sizes and the kernels' points
    judged = every.filter(every["verdict"].is_in([SLOWER, FASTER, SAME])).height
    if judged == 0:
        print("mpiatlas compare: no size could be judged (nothing matched, or too few repetitions): "
              "--fail-on-regression cannot decide", file=sys.stderr)
        return 2
    return 1 if regressions(every, args.fail_on_regression).height else 0

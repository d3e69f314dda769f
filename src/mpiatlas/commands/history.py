"""``mpiatlas history``: every campaign remembered in one file (default results/history.sqlite).

``history add DIR [--label NAME]``: add a finished campaign's results directory, its partial view,
or a directory written by ``mpiatlas import`` (fitted first when it has no fits). Adding the same
data twice does nothing, and says so. ``history list [--json]``: the entries. ``history show
SERIES``: the series whose name contains SERIES, over time. ``history check [--json]``: exit 1
when the newest entry of a series is worse than its history beyond the between-run variation the
history shows (the test is printed). Exit 2: a store or directory that cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
import polars as pl

from mpiatlas.history.store import DEFAULT_DB, SERIES_FIELDS, EntryTrust, HistoryError, SeriesIdentity, open_store
from mpiatlas.history.entry import build_entry
from mpiatlas.history.check import MIN_CHANGE, alarm_lines, alarm_record, check, figures_frame, series_name, size_text
from mpiatlas.commands import COMMAND_HELP

# Entries shown per series by `history show` without --all (the newest ones).
SHOW_ROWS = 40


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("history", help=COMMAND_HELP["history"], description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", type=Path, default=Path(DEFAULT_DB), metavar="PATH",
                        help="the history store (default: %(default)s)")
    sub = p.add_subparsers(dest="history_command", required=True)
    add = sub.add_parser("add", parents=[common],
                         help="add a campaign's results directory or an `mpiatlas import` directory")
    add.add_argument("dir", type=Path, metavar="DIR")
    add.add_argument("--label", default=None, metavar="NAME", help="a name for the entry (e.g. 'after BIOS update')")
    add.add_argument("--system", default=None, metavar="NAME",
                     help="the system its series belong to (default: the campaign's name; an import's labels)")
    add.add_argument("--date", default=None, metavar="ISO",
                     help="when it was measured (default: the first cell's start; an import: its file time)")
    add.set_defaults(func=_add)
    lst = sub.add_parser("list", parents=[common], help="list the entries")
    lst.add_argument("--json", action="store_true", help="print the entries as JSON")
    lst.set_defaults(func=_list)
    show = sub.add_parser("show", parents=[common], help="print the series whose name contains SERIES, over time")
    show.add_argument("series", metavar="SERIES", help="text in the series name (`history check` and the report "
                      "print names such as 'orfeo Scatter np=24 median time (µs)')")
    show.add_argument("--all", action="store_true", help=f"every entry (default: the newest {SHOW_ROWS} rows)")
    show.set_defaults(func=_show)
    chk = sub.add_parser("check", parents=[common], help="exit 1 when the newest entry of a series is significantly worse")
    chk.add_argument("--json", action="store_true", help="print the result as JSON")
    chk.add_argument("--min-change", type=float, default=None, metavar="FRACTION",
                     help="smallest change that counts (default 0.05: 5 %%)")
    chk.set_defaults(func=_check)


def _fail(exc: Exception) -> int:
    print(f"mpiatlas history: {exc}", file=sys.stderr)
    return 2


def _add(args: argparse.Namespace) -> int:
    try:
        entry = build_entry(args.dir, label=args.label, system=args.system, date=args.date)
        with open_store(args.db) as store:
            result = store.add(entry)
    except HistoryError as exc:
        return _fail(exc)
    for note in entry.notes or []:
        print(f"note: {note}", file=sys.stderr)
    if not result.added:
        print(f"already in {args.db} as entry {result.entry_id} (the same measured data): nothing added")
        return 0
    replaced = f"; replaced {result.replaced_partial} partial entry of the same campaign" if result.replaced_partial else ""
    kind = "partial entry" if entry.partial else "entry"
    print(f"added {kind} {result.entry_id} to {args.db}: {result.figures} figures of "
          f"{len({f.series for f in entry.figures or []})} series, dated {entry.date[:10]}{replaced}")
    return 0


def _list(args: argparse.Namespace) -> int:
    try:
        with open_store(args.db, create=False) as store:
            entries = store.entries()
    except HistoryError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0

    table = Table(title=f"{args.db}: {len(entries)} entries")
    for column in ("id", "date", "label", "figures", "stacks", "trust", "source"):
        table.add_column(column, overflow="fold")
    for e in entries:
        stacks = ", ".join(f"{k} {v}" if v else k for k, v in e["stack_versions"].items()) or "-"
        table.add_row(str(e["id"]), e["date"][:16], escape(e["label"] or "-") + (" (partial)" if e["partial"] else ""),
                      str(e["figures"]), escape(stacks), escape(_trust_text(e["trust"])), escape(e["source"]))
    Console().print(table)
    return 0


def _trust_text(trust: EntryTrust) -> str:
    parts = []
    cells = trust.get("cells")
    if cells:
        parts.append(", ".join(f"{n} {status}" for status, n in cells.items()))
    for count, noun in ((trust.get("perturbed"), "perturbed"), (trust.get("noisy_sizes"), "noisy sizes"),
                        (trust.get("fit_warnings"), "fit warnings")):
        if count:
            parts.append(f"{count} {noun}")
    return "; ".join(parts) or "-"


def _stored_figures(db: Path) -> pl.DataFrame:
    """Every figure of the store ``db`` as one table (history.check.figures_frame); HistoryError when the
    store cannot be read."""
    with open_store(db, create=False) as store:
        return figures_frame(store.figures())


def _show(args: argparse.Namespace) -> int:
    try:
        figures = _stored_figures(args.db)
    except HistoryError as exc:
        return _fail(exc)
    names = {key: series_name(SeriesIdentity(*row)) for key, row in
             zip(figures["series"], figures.select(SERIES_FIELDS).iter_rows())}
    wanted = sorted({key for key, name in names.items() if args.series.lower() in name.lower()}, key=names.__getitem__)
    if not wanted:
        print(f"mpiatlas history: no series name contains {args.series!r} ({len(set(names))} series in {args.db})",
              file=sys.stderr)
        return 2
    for key in wanted:
        rows = figures.filter(pl.col("series") == key).sort("bytes", "date", "entry_id", nulls_last=True)
        print(names[key])
        shown = rows if args.all else rows.tail(SHOW_ROWS)
        for r in shown.iter_rows(named=True):
            ci = f" [{r['ci_low']:.4g}, {r['ci_high']:.4g}]" if r["ci_low"] is not None and r["ci_high"] is not None else ""
            size = size_text(r["bytes"]) if r["bytes"] is not None else "-"
            print(f"  {r['date'][:10]}  entry {r['entry_id']:<4} {size:>9}  {r['value']:.4g}{ci}"
                  f"{'  ' + r['label'] if r['label'] else ''}")
        if shown.height < rows.height:
            print(f"  ({rows.height - shown.height} more rows not shown; --all shows them)")
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        figures = _stored_figures(args.db)
    except HistoryError as exc:
        return _fail(exc)
    result = check(figures, min_change=MIN_CHANGE if args.min_change is None else args.min_change)
    if args.json:
        print(json.dumps({"test": result.test, "judged_series": result.judged, "not_judged_series": result.not_judged,
                          "alarms": [alarm_record(a) for a in result.alarms]}, indent=1))
    else:
        print(f"test: {result.test}")
        for alarm in result.alarms:
            print("\n".join(alarm_lines(alarm)))
        print(f"{len(result.alarms)} of {result.judged} series judged worse; {result.not_judged} series not judged "
              f"(fewer than 2 earlier entries)")
    return 1 if result.alarms else 0

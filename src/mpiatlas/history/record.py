"""The end of ``mpiatlas campaign``: add the campaign to its checkout's history store.

Never raises: a store that cannot be written (a bad file, a full disk, a lock held too long) must not
cost the campaign its results, which are already written; what went wrong is said instead."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mpiatlas.history.entry import build_entry
from mpiatlas.history.store import HistoryError, open_store


def record_campaign(results: Path, db: Path) -> list[str]:
    """Lines for the terminal: what was added to ``db`` from the campaign under ``results``, or why nothing was."""
    try:
        entry = build_entry(results)
        with open_store(db) as store:
            added = store.add(entry)
    except (HistoryError, sqlite3.Error, OSError) as exc:
        return [f"history: not recorded ({exc}); the campaign's results are unaffected; "
                f"add them later with `mpiatlas history add {results} --db {db}`"]
    if not added.added:
        return [f"history: this campaign's data is already entry {added.entry_id} of {db}: nothing added"]
    what = "partial entry (only the cells that ran)" if entry.partial else "entry"
    return [f"history: added {what} {added.entry_id} to {db} ({added.figures} figures); "
            f"`mpiatlas history check --db {db}` compares it with the earlier ones"]

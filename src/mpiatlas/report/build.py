"""The report of a campaign's tidy tables and fits, written to one file (``mpiatlas report``, the workflow's report rule)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mpiatlas.files import write_text_atomic
from mpiatlas.report.data import load_data
from mpiatlas.report.render import render_html


def build_report(
    tidy_dir: str | Path | None,
    fits_dir: str | Path | None,
    out: str | Path,
    title: str | None = None,
    *,
    now: datetime | None = None,
    limits: str | Path | None = None,
    tuning: str | Path | None = None,
    topology: str | None = None,
) -> Path:
    """Build the self-contained HTML report and return its path (written atomically). ``limits``:
    the campaign's physical limits file (R/limits/limits.json), None for none; ``topology``: the
    measured node's (hwloc XML or synthetic description), None for this machine's."""
    data = load_data(tidy_dir, fits_dir, title=title, now=now, limits=limits, tuning=tuning, topology=topology)
    html = render_html(data)
    return write_text_atomic(out, html)

"""The offline HTML report: tidy tables + fitted models -> one self-contained file.

Layout of the package (imports only go down this list; no module imports this one):

* :mod:`.formatting` — numbers, sizes, bindings as text;
* :mod:`.blocks` — the plain-data blocks (Heading, Notice, Table, ChartBlock, ...) a section is made of;
* :mod:`.data` — the tidy tables and fits read into one :class:`~.data.ReportData`;
* :mod:`.cells`, :mod:`.imb` — what the sections share about cells and the IMB summary;
* :mod:`.findings` — the sentences the report opens with (pure functions over polars frames);
* :mod:`.charts` — the altair chart builders the sections share;
* :mod:`.sections` — one module per section, and ``ORDER``, the order they appear in;
* :mod:`.trust` — the paragraph the Findings open with (perturbed, re-measured, noisy, widest intervals);
* :mod:`.kernel_blocks` — blocks the kernel sections share; :mod:`.physical_limits` — the nodes' copy rates;
* :mod:`.bundle` — the Vega scripts inlined, cached per version;
* :mod:`.render` — Jinja rendering (autoescaped ``mpiatlas/templates/report.html.j2``).

Only :func:`build_report` lives here; it imports the rest when called, so ``import
mpiatlas.report`` stays cheap (no altair, polars or jinja2 until a report is built).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mpiatlas.files import write_text_atomic
from mpiatlas.report.data import load_data
from mpiatlas.report.render import render_html

__all__ = ["build_report"]


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

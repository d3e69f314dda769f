"""The offline HTML report: tidy tables + fitted models -> one self-contained file.

The report is a list of *sections*.  Each section is a function
``section_xxx(data: ReportData) -> Section | None`` registered with
:func:`register_section`; sections are rendered in registration order, so a
later model (kernels, collective models, ...) adds its section by appending one
function::

    @register_section
    def section_kernels(data: ReportData) -> Section | None:
        fits = data.fits.get("kernels")
        ...

A section is made of *blocks* (text, notices, tables, charts, collapsible
details).  Blocks carry plain strings only: all HTML is produced by the Jinja
template with autoescaping on, so a label or hostname taken from the inputs can
never inject markup.  Chart specs (Vega-Lite, built with altair) are embedded as
one JSON document whose ``<``, ``>`` and ``&`` are ``\\u``-escaped, and the
Vega/Vega-Lite/vega-embed bundle (from vl-convert) is inlined exactly once, so
the file needs no network.

Inputs may be partially missing; every missing or unreadable input, every cell
that did not produce data, and every section that could not be drawn is said so
in the report rather than silently dropped.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import altair as alt
import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from mpiatlas import __version__

__all__ = [
    "Cell",
    "ChartBlock",
    "Details",
    "Heading",
    "KeyValues",
    "Notice",
    "Pre",
    "ReportData",
    "SECTIONS",
    "Section",
    "Table",
    "Text",
    "build_report",
    "fmt_bytes",
    "fmt_num",
    "load_data",
    "register_section",
    "render_html",
]

# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------

DASH = "—"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_num(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, thousands-grouped when >= 1000.

    ``None``/NaN give an em dash.  Used for every figure in the tables, so a test
    can format a fitted value the same way and look for it in the HTML.
    """
    if not _finite(x):
        return DASH
    x = float(x)
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 1e-3:
        decimals = max(0, digits - 1 - math.floor(math.log10(ax)))
        return f"{x:.{decimals}f}"
    return f"{x:.{max(digits - 1, 0)}e}"


def fmt_ci(ci: Any, digits: int = 3, unbounded: str | None = None) -> str:
    """``[lo, hi]`` of a confidence interval, or a dash.

    ``unbounded``: text for a null bound when the other one is finite (e.g. ``∞`` for a
    bandwidth whose JSON stored an infinite bound as null).
    """
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2):
        return DASH
    if all(_finite(v) for v in ci):
        return f"[{fmt_num(ci[0], digits)}, {fmt_num(ci[1], digits)}]"
    if unbounded is not None and any(_finite(v) for v in ci):
        return "[" + ", ".join(fmt_num(v, digits) if _finite(v) else unbounded for v in ci) + "]"
    return DASH


def fmt_pins(value: Any) -> str:
    """Requested pins (JSON list or plain text) as cpu ranges."""
    if value is None:
        return DASH
    obj = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except ValueError:
            return value
    if isinstance(obj, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in obj):
        return _ranges(obj) if len(set(obj)) == len(obj) else ",".join(map(str, obj))
    return str(value)


def fmt_bytes(n: Any) -> str:
    """Message size with binary units: ``0 B``, ``512 B``, ``4 KiB``, ``1.5 MiB``."""
    if not _finite(n):
        return DASH
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B" if n == int(n) else f"{n:.3g} B"


def fmt_pct(x: Any, digits: int = 1) -> str:
    return DASH if not _finite(x) else f"{100 * float(x):.{digits}f} %"


def fmt_bool(x: Any) -> str:
    if x is None:
        return DASH
    return "yes" if x else "no"


def _ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def fmt_binding(value: Any) -> str:
    """Compact ``rank:cpus`` text for a JSON rank -> cpus binding (or its raw text)."""
    if value is None:
        return DASH
    obj = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except ValueError:
            return value
    if isinstance(obj, list):
        obj = dict(enumerate(obj))
    if not isinstance(obj, dict):
        return str(value)

    def cpus(v: Any) -> str:
        if isinstance(v, list) and all(isinstance(c, int) for c in v):
            return _ranges(v)
        return str(v)

    def key(k: Any) -> tuple[int, Any]:
        try:
            return (0, int(k))
        except (TypeError, ValueError):
            return (1, str(k))

    return " ".join(f"{k}:{cpus(obj[k])}" for k in sorted(obj, key=key))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------
# Blocks and sections (plain data; the template turns them into HTML)
# ---------------------------------------------------------------------------


@dataclass
class Cell:
    """A table cell: text, optional hover title and a CSS class from a fixed set."""

    text: str
    title: str | None = None
    cls: str | None = None
    colspan: int = 1


@dataclass
class Text:
    kind: ClassVar[str] = "text"
    text: str
    cls: str | None = None


@dataclass
class Heading:
    kind: ClassVar[str] = "heading"
    text: str
    level: int = 3


@dataclass
class Notice:
    """A highlighted message; ``level`` is ``info``, ``warn`` or ``error``."""

    kind: ClassVar[str] = "notice"
    text: str
    level: str = "warn"
    items: list[str] = field(default_factory=list)


@dataclass
class Table:
    kind: ClassVar[str] = "table"
    columns: list[str]
    rows: list[list[Cell]]
    caption: str | None = None
    filterable: bool = False
    scroll: bool = False
    id: str = ""


@dataclass
class KeyValues:
    kind: ClassVar[str] = "kv"
    items: list[tuple[str, Cell]]


@dataclass
class Pre:
    kind: ClassVar[str] = "pre"
    text: str


@dataclass
class ChartBlock:
    kind: ClassVar[str] = "chart"
    spec: dict[str, Any]
    caption: str | None = None
    id: str = ""


@dataclass
class Details:
    kind: ClassVar[str] = "details"
    summary: str
    blocks: list[Any]
    open: bool = False


@dataclass
class Section:
    title: str
    blocks: list[Any]
    id: str = ""
    lead: str | None = None


def cell(value: Any, *, title: str | None = None, cls: str | None = None) -> Cell:
    if isinstance(value, Cell):
        return value
    if value is None:
        text = DASH
    elif isinstance(value, bool):
        text = fmt_bool(value)
    elif isinstance(value, float):
        text = fmt_num(value)
    else:
        text = str(value)
    return Cell(text, title, cls)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], **kw: Any) -> Table:
    return Table(list(columns), [[cell(v) for v in row] for row in rows], **kw)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

TIDY_FILES = {
    "samples": "imb_samples.parquet",
    "summary": "imb_summary.parquet",
    "cells": "cells.parquet",
    "provenance": "provenance.json",
}
STATUS_ORDER = ("failed", "timeout", "invalid", "unavailable", "ok")
KNOWN_STATUS = frozenset(STATUS_ORDER)
SUMMARY_KEYS = ("label", "stack", "transport", "mapping", "np", "algorithm", "benchmark", "processes", "bytes")


@dataclass
class InputFile:
    name: str
    path: str
    state: str  # ok | missing | error
    detail: str = ""


@dataclass
class ReportData:
    title: str
    generated: datetime
    tidy_dir: Path | None = None
    fits_dir: Path | None = None
    samples: pl.DataFrame | None = None
    summary: pl.DataFrame | None = None
    cells: pl.DataFrame | None = None
    provenance: list[dict[str, Any]] | None = None
    fits: dict[str, Any] = field(default_factory=dict)
    inputs: list[InputFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # input-level problems for the header
    summary_derived: bool = False

    @property
    def hockney(self) -> list[dict[str, Any]] | None:
        fits = self.fits.get("hockney")
        return fits if isinstance(fits, list) else None


def _read_parquet(path: Path, name: str, data: ReportData) -> pl.DataFrame | None:
    if not path.is_file():
        data.inputs.append(InputFile(name, str(path), "missing"))
        return None
    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is reported, not fatal
        data.inputs.append(InputFile(name, str(path), "error", f"{type(exc).__name__}: {exc}"))
        return None
    data.inputs.append(InputFile(name, str(path), "ok", f"{df.height} rows"))
    return df


def _read_json(path: Path, name: str, data: ReportData) -> Any:
    if not path.is_file():
        data.inputs.append(InputFile(name, str(path), "missing"))
        return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001
        data.inputs.append(InputFile(name, str(path), "error", f"{type(exc).__name__}: {exc}"))
        return None
    n = f"{len(obj)} entries" if isinstance(obj, (list, dict)) else type(obj).__name__
    data.inputs.append(InputFile(name, str(path), "ok", n))
    return obj


def _derive_summary(samples: pl.DataFrame) -> pl.DataFrame | None:
    """Median over repetitions from the samples, for when imb_summary.parquet is missing."""
    keys = [k for k in SUMMARY_KEYS if k in samples.columns]
    if "benchmark" not in keys or "label" not in keys:
        return None
    tcols = [c for c in ("t_usec", "t_avg_usec") if c in samples.columns]
    if not tcols:
        return None
    df = samples
    if "status" in df.columns:
        df = df.filter(pl.col("status").is_null() | (pl.col("status") == "ok"))
    t = pl.coalesce([pl.col(c) for c in tcols])
    aggs = [
        pl.len().cast(pl.Int32).alias("n_reps"),
        t.median().alias("t_median_usec"),
        t.min().alias("t_min_usec"),
        (t.std() / t.mean()).alias("t_cv"),
    ]
    if "bandwidth_MBps" in df.columns:
        aggs.append(pl.col("bandwidth_MBps").median().alias("bw_median_MBps"))
    if "oversubscribed" in df.columns:
        aggs.append(pl.col("oversubscribed").any().alias("oversubscribed"))
    out = df.group_by(keys, maintain_order=True).agg(aggs)
    return out.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("t_ci_low_usec"),
        pl.lit(None, dtype=pl.Float64).alias("t_ci_high_usec"),
    )


def load_data(
    tidy_dir: str | Path | None,
    fits_dir: str | Path | None,
    title: str | None = None,
    now: datetime | None = None,
) -> ReportData:
    """Read whatever inputs exist; record the missing and unreadable ones."""
    if now is None:
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        now = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch and epoch.isdigit() else datetime.now(timezone.utc)
    data = ReportData(title=title or "mpiatlas report", generated=now)

    if tidy_dir is None:
        data.notes.append("No tidy directory was given: no measurements, cells or provenance.")
    else:
        data.tidy_dir = Path(tidy_dir)
        if not data.tidy_dir.is_dir():
            data.notes.append(f"Tidy directory {data.tidy_dir} does not exist.")
        data.samples = _read_parquet(data.tidy_dir / TIDY_FILES["samples"], "samples", data)
        data.summary = _read_parquet(data.tidy_dir / TIDY_FILES["summary"], "summary", data)
        data.cells = _read_parquet(data.tidy_dir / TIDY_FILES["cells"], "cells", data)
        prov = _read_json(data.tidy_dir / TIDY_FILES["provenance"], "provenance", data)
        if prov is not None:
            if isinstance(prov, dict):
                prov = [prov]
            good = [p for p in prov if isinstance(p, dict)] if isinstance(prov, list) else []
            if not isinstance(prov, list) or len(good) != len(prov):
                data.notes.append("provenance.json: entries that are not JSON objects were ignored "
                                  f"({(len(prov) if isinstance(prov, list) else 1) - len(good)}).")
            data.provenance = good
        if data.summary is None and data.samples is not None:
            derived = _derive_summary(data.samples)
            if derived is not None:
                data.summary = derived
                data.summary_derived = True
                data.notes.append("imb_summary.parquet is missing: medians were recomputed from the samples "
                                  "(no confidence intervals).")

    if fits_dir is None:
        data.notes.append("No fits directory was given: no fitted models.")
    else:
        data.fits_dir = Path(fits_dir)
        if not data.fits_dir.is_dir():
            data.inputs.append(InputFile("fits", str(data.fits_dir), "missing"))
        else:
            files = sorted(data.fits_dir.glob("*.json"))
            if not any(f.stem == "hockney" for f in files):
                data.inputs.append(InputFile("fits:hockney", str(data.fits_dir / "hockney.json"), "missing"))
            for f in files:
                obj = _read_json(f, f"fits:{f.stem}", data)
                if obj is not None:
                    data.fits[f.stem] = obj
        hock = data.fits.get("hockney")
        if hock is not None:
            if not isinstance(hock, list):
                data.notes.append("fits/hockney.json is not a JSON array: ignored.")
                data.fits.pop("hockney")
            else:
                good = [h for h in hock if isinstance(h, dict) and h.get("label") is not None and h.get("benchmark")]
                if len(good) != len(hock):
                    data.notes.append(f"fits/hockney.json: {len(hock) - len(good)} entries without label/benchmark ignored.")
                data.fits["hockney"] = good
    return data


# ---------------------------------------------------------------------------
# Chart helpers
# ---------------------------------------------------------------------------

SIZE_LABEL_EXPR = (
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB'"
    " : datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB'"
    " : datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB'"
    " : format(datum.value, '~g') + ' B'"
)
CHART_W = 380
CHART_H = 260
P2P_ORDER = (
    "PingPong", "PingPongSpecificSource", "PingPongAnySource", "PingPing", "PingPingSpecificSource",
    "PingPingAnySource", "Sendrecv", "Exchange", "Uniband", "Biband", "Unirandom", "Birandom",
    "Corandom", "Stencil2D", "Stencil3D",
)
COLL_ORDER = (
    "Barrier", "Bcast", "Reduce", "Allreduce", "Reduce_scatter", "Reduce_scatter_block", "Gather",
    "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Reduce_local",
)
_P2P = {b.lower() for b in P2P_ORDER}
_COLL = {b.lower() for b in COLL_ORDER}


def benchmark_family(name: str) -> str:
    """``p2p``, ``collective`` (blocking or IMB-NBC ``I...``) or ``other``."""
    n = name.removeprefix("Multi-").lower()
    if n in _P2P:
        return "p2p"
    if n in _COLL or (n.startswith("i") and n[1:] in _COLL):
        return "collective"
    return "other"


def _bench_sort_key(name: str) -> tuple[int, str]:
    order = {b.lower(): i for i, b in enumerate(P2P_ORDER + COLL_ORDER)}
    n = name.removeprefix("Multi-").lower()
    base = n[1:] if n.startswith("i") and n[1:] in _COLL else n
    return (order.get(base, len(order)), name)


def _size_ticks(lo: float, hi: float, max_ticks: int = 12) -> list[int]:
    """Powers of 4 (16, 64 for wide ranges) covering [lo, hi]: byte-sized axis ticks."""
    if not (_finite(lo) and _finite(hi)) or hi <= 0:
        return []
    lo = max(lo, 1)
    ticks: list[int] = []
    for base in (4, 16, 64, 1024):
        ticks = [base**k for k in range(0, 32) if lo <= base**k <= hi]
        if len(ticks) <= max_ticks:
            break
    return ticks or [int(lo)]


def _size_x(df: pl.DataFrame, field_: str = "bytes", title: str = "message size", max_ticks: int = 12) -> alt.X:
    col = df.get_column(field_)
    ticks = _size_ticks(col.min(), col.max(), max_ticks) if df.height else []
    axis = alt.Axis(labelExpr=SIZE_LABEL_EXPR, values=ticks) if ticks else alt.Axis(labelExpr=SIZE_LABEL_EXPR)
    return alt.X(f"{field_}:Q", scale=alt.Scale(type="log"), axis=axis, title=title)


def _color(domain: list[str], title: str = "series", field_: str = "series") -> alt.Color:
    scheme = "tableau10" if len(domain) <= 10 else "tableau20"
    # symbolOpacity: the legend would otherwise take a faint layer's opacity (CI bands).
    return alt.Color(f"{field_}:N", scale=alt.Scale(domain=domain, scheme=scheme), title=title,
                     legend=alt.Legend(labelLimit=320, symbolLimit=80, symbolOpacity=1))


def _round(df: pl.DataFrame, sig: int = 5) -> pl.DataFrame:
    """Round float columns for the embedded chart data (smaller file; tooltips stay exact enough)."""
    exprs = [pl.col(c).round_sig_figs(3 if c == "t_cv" else sig)
             for c, t in df.schema.items() if t in (pl.Float32, pl.Float64)]
    return df.with_columns(exprs) if exprs else df


def _clean_json(obj: Any) -> Any:
    """Non-finite floats -> None, so the specs are valid JSON for ``JSON.parse``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean_json(v) for v in obj]
    return obj


def chart_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """Vega-Lite dict of an altair chart, without the schema URL, JSON-clean."""
    with alt.data_transformers.enable("default", max_rows=None):
        spec = chart.to_dict()
    spec.pop("$schema", None)
    return _clean_json(spec)


def _pick() -> alt.Parameter:
    return alt.selection_point(name="pick", fields=["series"], bind="legend")


def _opacity(sel: alt.Parameter, on: float, off: float = 0.07) -> alt.OpacityValue:
    return alt.condition(sel, alt.value(on), alt.value(off))


def _tt_size() -> alt.Tooltip:
    return alt.Tooltip("size:N", title="size")


def _with_size(df: pl.DataFrame, field_: str = "bytes") -> pl.DataFrame:
    return df.with_columns(pl.col(field_).map_elements(fmt_bytes, return_dtype=pl.String).alias("size"))


# ---------------------------------------------------------------------------
# Section registry
# ---------------------------------------------------------------------------

SectionFn = Callable[[ReportData], "Section | None"]
SECTIONS: list[SectionFn] = []


def register_section(fn: SectionFn) -> SectionFn:
    """Append a section function; the report shows sections in registration order."""
    SECTIONS.append(fn)
    return fn


def _has(df: pl.DataFrame | None, *cols: str) -> bool:
    return df is not None and all(c in df.columns for c in cols)


def _distinct(values: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v is not None and v != "" and v not in out:
            out.append(v)
    return out


def _status_cls(status: Any) -> str:
    return f"st-{status}" if status in KNOWN_STATUS else "st-other"


def _status_rank(status: Any) -> int:
    """Problems first (failed, timeout, invalid, unavailable, unknown statuses), ok last."""
    if status == "ok":
        return len(STATUS_ORDER)
    return STATUS_ORDER.index(status) if status in KNOWN_STATUS else len(STATUS_ORDER) - 1


def _cell_desc(row: dict[str, Any]) -> str:
    parts = [str(row.get(k)) for k in ("stack", "transport", "mapping") if row.get(k) is not None]
    extra = [f"np={row['np']}" if row.get("np") is not None else None,
             row.get("benchmark"),
             f"alg={row['algorithm']}" if row.get("algorithm") not in (None, "default") else None,
             f"rep={row['rep']}" if row.get("rep") is not None else None]
    return " ".join(["/".join(parts), *[str(e) for e in extra if e]])


# ---------------------------------------------------------------------------
# 1. Header
# ---------------------------------------------------------------------------


@register_section
def section_header(data: ReportData) -> Section:
    prov = data.provenance or []
    blocks: list[Any] = []

    hosts = _distinct(p.get("host") for p in prov)
    cpus = _distinct(p.get("cpu_model") for p in prov)
    versions = _distinct(p.get("mpiatlas_version") for p in prov)
    imb = _distinct(p.get("imb_version") for p in prov)
    if not imb and _has(data.samples, "imb_version"):
        imb = _distinct(data.samples.get_column("imb_version").unique(maintain_order=True).to_list())
    starts = [str(p["start"]) for p in prov if p.get("start")]
    ends = [str(p["end"]) for p in prov if p.get("end")]
    unknown = "unknown (no provenance)" if not prov else DASH
    items = [
        ("Generated", Cell(data.generated.strftime("%Y-%m-%d %H:%M:%S %Z"))),
        ("Host(s)", Cell(", ".join(map(str, hosts)) or unknown)),
        ("CPU", Cell("; ".join(map(str, cpus)) or unknown)),
        ("mpiatlas (campaign)", Cell(", ".join(map(str, versions)) or unknown)),
        ("mpiatlas (report)", Cell(__version__)),
        ("IMB version(s)", Cell(", ".join(map(str, imb)) or unknown)),
    ]
    if starts or ends:
        items.append(("Campaign span", Cell(f"{min(starts) if starts else '?'} → {max(ends) if ends else '?'}")))
    blocks.append(KeyValues(items))

    # Cells by status -------------------------------------------------------
    cells = data.cells
    if cells is None:
        blocks.append(Notice("cells.parquet is missing: the status of campaign cells (failed, timed out, "
                             "unavailable, invalid) is unknown.", "error"))
    elif "status" not in cells.columns:
        blocks.append(Notice("cells.parquet has no status column.", "error"))
    else:
        counts = cells.group_by("status").len().iter_rows()
        counts = sorted(counts, key=lambda r: (_status_rank(r[0]), str(r[0])))
        blocks.append(Heading("Cells by status"))
        blocks.append(Table(
            ["Status", "Cells"],
            [[Cell(str(s) if s is not None else "(none)", cls=_status_cls(s)), Cell(str(n))] for s, n in counts]
            + [[Cell("total"), Cell(str(cells.height))]],
        ))
        blocks.extend(_problem_blocks(data))

    # Input inventory --------------------------------------------------------
    missing = [f for f in data.inputs if f.state != "ok"]
    if data.notes or missing:
        blocks.append(Notice(
            "Some inputs are missing or unusable; the sections that depend on them say so.",
            "warn",
            [f"{f.name}: {f.state} ({f.path}){' – ' + f.detail if f.detail else ''}" for f in missing] + data.notes,
        ))
    blocks.append(Details("Input files", [table(
        ["Input", "Path", "State", "Detail"],
        [[f.name, f.path, Cell(f.state, cls="st-ok" if f.state == "ok" else "st-failed"), f.detail or DASH]
         for f in data.inputs],
    )]))
    return Section("Campaign", blocks, id="header")


def _problem_blocks(data: ReportData) -> list[Any]:
    """Every cell that did not produce trustworthy data, with its reason."""
    cells = data.cells
    assert cells is not None
    blocks: list[Any] = []
    rows = list(cells.iter_rows(named=True))
    bad = [r for r in rows if r.get("status") != "ok"]
    bad.sort(key=lambda r: (_status_rank(r.get("status")), str(r.get("cell"))))
    if bad:
        blocks.append(Notice(
            f"{len(bad)} of {len(rows)} cells did not produce results. They are listed here and excluded "
            "from the charts.", "error"))
        blocks.append(Table(
            ["Status", "Cell", "What", "Reason"],
            [[Cell(str(r.get("status")), cls=_status_cls(r.get("status"))), cell(r.get("cell")),
              Cell(_cell_desc(r)), Cell(r.get("reason") or "no reason recorded")] for r in bad],
            caption="Missing, failed, timed-out, invalid and unavailable cells",
            scroll=len(bad) > 25, filterable=len(bad) > 25,
        ))
    else:
        blocks.append(Notice(f"All {len(rows)} cells completed with status ok.", "info"))

    warn: list[str] = []
    for r in rows:
        if r.get("status") != "ok":
            continue
        what = f"{r.get('cell')} ({_cell_desc(r)})"
        if r.get("transport_ok") is False:
            warn.append(f"{what}: transport requested {r.get('requested_transport')!s}, "
                        f"obtained {r.get('obtained_transport')!s}")
        if r.get("binding_ok") is False:
            warn.append(f"{what}: binding requested {fmt_pins(r.get('requested_pins'))}, "
                        f"obtained {fmt_binding(r.get('obtained_binding'))}")
    if _has(data.samples, "cell") and "cell" in cells.columns:
        have = set(data.samples.get_column("cell").unique().to_list())
        for r in rows:
            if r.get("status") == "ok" and r.get("cell") not in have:
                warn.append(f"{r.get('cell')} ({_cell_desc(r)}): status ok but no parsed samples")
    if warn:
        blocks.append(Notice(f"{len(warn)} cells completed but their results are suspect:", "warn", warn))
    return blocks


# ---------------------------------------------------------------------------
# 2. Point-to-point
# ---------------------------------------------------------------------------


def _no_summary_text(data: ReportData) -> str:
    if data.summary is None:
        return "No summary table (imb_summary.parquet missing or unreadable): nothing to plot."
    lacking = [c for c in ("benchmark", "label", "t_median_usec") if c not in data.summary.columns]
    return f"imb_summary.parquet lacks column(s) {', '.join(lacking)}: nothing to plot."


def _family_summary(data: ReportData, family: str) -> pl.DataFrame | None:
    s = data.summary
    if not _has(s, "benchmark", "label", "t_median_usec"):
        return None
    s = s.filter(pl.col("benchmark").map_elements(benchmark_family, return_dtype=pl.String) == family)
    for c, dt in (("np", pl.Int64), ("algorithm", pl.String), ("bytes", pl.Int64), ("t_ci_low_usec", pl.Float64),
                  ("t_ci_high_usec", pl.Float64), ("bw_median_MBps", pl.Float64), ("t_cv", pl.Float64),
                  ("n_reps", pl.Int32), ("oversubscribed", pl.Boolean), ("t_min_usec", pl.Float64)):
        if c not in s.columns:
            s = s.with_columns(pl.lit(None, dtype=dt).alias(c))
    return s


def series_name(label: Any, np_: Any = None, algorithm: Any = None, *, multi_np: bool = False,
                multi_alg: bool = False) -> str:
    """Point-to-point series: the label, plus np / algorithm when a benchmark has several."""
    s = str(label) if label is not None else "(no label)"
    if multi_np:
        s += f" np={np_ if np_ is not None else '?'}"
    if multi_alg:
        s += f" alg={algorithm or 'default'}"
    return s


def _p2p_series(df: pl.DataFrame) -> tuple[pl.DataFrame, bool, bool]:
    multi_np = df.get_column("np").n_unique() > 1
    multi_alg = df.get_column("algorithm").fill_null("default").n_unique() > 1
    names = [series_name(lab, n, a, multi_np=multi_np, multi_alg=multi_alg)
             for lab, n, a in df.select("label", "np", "algorithm").iter_rows()]
    return df.with_columns(pl.Series("series", names, dtype=pl.String)), multi_np, multi_alg


def _fit_matches(fit: dict[str, Any], label: Any, np_: Any, algorithm: Any) -> bool:
    """A fit belongs to a summary series when every key the fit carries agrees."""
    if fit.get("label") != label:
        return False
    if fit.get("np") is not None and np_ is not None and fit["np"] != np_:
        return False
    fa = fit.get("algorithm")
    return fa is None or algorithm is None or fa == algorithm


def hockney_curve(fit: dict[str, Any], lo: float, hi: float, points: int = 24) -> list[dict[str, Any]]:
    """Points of the (piecewise) Hockney model t(m) = λ + m / B on a log grid.

    With B in MB/s (10^6 B/s) and t in µs, m bytes / B is directly in µs.
    Segment i covers [from_bytes_i, from_bytes_{i+1}) (the model's own rule: the last
    segment starting at or below a size), the last one up to its ``to_bytes`` or ``hi``.
    A null bandwidth is an unbounded one (JSON has no inf): a flat segment t = λ.
    """
    segs = [s for s in fit.get("segments") or [] if isinstance(s, dict)]
    if not segs and _finite(fit.get("latency_us")):
        segs = [{"from_bytes": None, "to_bytes": None, "latency_us": fit["latency_us"],
                 "bandwidth_MBps": fit.get("bandwidth_MBps")}]
    out: list[dict[str, Any]] = []
    for i, seg in enumerate(segs):
        lam, bw = seg.get("latency_us"), seg.get("bandwidth_MBps")
        if not _finite(lam) or (bw is not None and (not _finite(bw) or bw <= 0)):
            continue
        inv_bw = 0.0 if bw is None else 1.0 / bw
        # The first segment also covers sizes below its first fitted size; the last runs to hi.
        a = seg.get("from_bytes") if i > 0 else None
        nxt = segs[i + 1].get("from_bytes") if i + 1 < len(segs) else None
        a = max(float(a) if _finite(a) else lo, 1.0)
        b = float(nxt) if _finite(nxt) else hi
        if b < a:
            continue
        n = points if b > a else 1
        for k in range(n):
            m = a * (b / a) ** (k / (n - 1)) if n > 1 else a
            out.append({"segment": i, "bytes": m, "t_model_usec": lam + m * inv_bw})
    return out


@register_section
def section_p2p(data: ReportData) -> Section:
    blocks: list[Any] = []
    s = _family_summary(data, "p2p")
    if s is None:
        return Section("Point-to-point", [Notice(_no_summary_text(data), "error")],
                       id="p2p")
    if s.height == 0:
        return Section("Point-to-point", [Notice("No point-to-point benchmark in the summary.", "info")], id="p2p")
    fits = data.hockney
    if fits is None:
        blocks.append(Notice("No fits: the Hockney model (fits/hockney.json) is missing, so no model is overlaid.",
                             "warn"))
    if data.summary_derived:
        blocks.append(Notice("Summary recomputed from samples: no confidence-interval bands.", "warn"))
    blocks.append(Text(
        "Median over repetitions (line), 95 % confidence interval of the median (band), fitted Hockney model "
        "t(m) = λ + m/B per segment (dashed) and its breakpoints (dotted rules). Click a legend entry to "
        "highlight a series. 0-byte messages cannot be drawn on a log axis; their medians are listed in the "
        "parameters table."))

    benches = sorted(s.get_column("benchmark").unique().to_list(), key=_bench_sort_key)
    unfitted: list[str] = []
    failed_fits: list[str] = []
    for bench in benches:
        df, multi_np, multi_alg = _p2p_series(s.filter(pl.col("benchmark") == bench))
        measured = df.select("label", "np", "algorithm", "series").unique().sort("series").rows()
        bench_fits = [f for f in (fits or []) if f.get("benchmark") == bench]
        named: list[tuple[dict[str, Any], str]] = []
        for f in bench_fits:
            match = [sr for lab, n, a, sr in measured if _fit_matches(f, lab, n, a)]
            name = match[0] if len(match) == 1 else series_name(
                f.get("label"), f.get("np"), f.get("algorithm"), multi_np=multi_np, multi_alg=multi_alg)
            if f.get("error") is not None:
                failed_fits.append(f"{bench}: {name}: {f['error']}")
            else:
                named.append((f, name))
        blocks.append(Heading(bench))
        if fits is not None and not bench_fits:
            blocks.append(Text(f"hockney.json has no fit for {bench}: measurements only.", cls="muted"))
        elif bench_fits:
            for lab, n, a, sr in measured:
                if not any(_fit_matches(f, lab, n, a) for f in bench_fits):
                    unfitted.append(f"{bench}: {sr}")
        blocks.extend(_p2p_bench_blocks(bench, df, named))
    if failed_fits:
        blocks.insert(0, Notice("The Hockney fit failed for these series:", "warn", failed_fits))
    if unfitted:
        blocks.insert(0, Notice("No Hockney fit for these measured series:", "warn", unfitted))

    over = s.filter(pl.col("oversubscribed").fill_null(False))
    if over.height:
        blocks.insert(0, Notice("These series ran oversubscribed (more ranks than cores); their timings are not "
                                "representative:", "warn",
                                sorted({f"{b}: {l} np={n}" for b, l, n in over.select("benchmark", "label", "np")
                                        .iter_rows()})))
    return Section("Point-to-point", blocks, id="p2p")


def _bw_factor(df: pl.DataFrame) -> float | None:
    """IMB's bytes-counted-per-time factor for a benchmark (1 PingPong, 2 Sendrecv, 4 Exchange),
    estimated from the data as median(bw * t / m)."""
    r = df.filter((pl.col("bytes") > 0) & (pl.col("t_median_usec") > 0) & (pl.col("bw_median_MBps") > 0))
    if r.height == 0:
        return None
    k = r.select((pl.col("bw_median_MBps") * pl.col("t_median_usec") / pl.col("bytes")).median()).item()
    return float(k) if _finite(k) and k > 0 else None


def _p2p_bench_blocks(bench: str, df: pl.DataFrame, fits: list[tuple[dict[str, Any], str]]) -> list[Any]:
    pos = _with_size(df.filter(pl.col("bytes") > 0).sort("series", "bytes"))
    if pos.height == 0:
        return [Notice(f"{bench}: no positive message sizes to plot.", "info")]
    series = sorted(pos.get_column("series").unique().to_list())
    factor = _bw_factor(pos)

    ranges = {r[0]: (r[1], r[2]) for r in pos.group_by("series").agg(pl.col("bytes").min().alias("lo"),
                                                                   pl.col("bytes").max().alias("hi"))
              .iter_rows()}
    model_rows: list[dict[str, Any]] = []
    bp_rows: list[dict[str, Any]] = []
    res_rows: list[dict[str, Any]] = []
    for f, name in fits:
        lo, hi = ranges.get(name, (None, None))
        if lo is None:
            # Fit for a series without summary rows: draw over the fit's own residual sizes.
            sizes = [r.get("bytes") for r in f.get("residuals") or [] if _finite(r.get("bytes")) and r["bytes"] > 0]
            if not sizes:
                continue
            lo, hi = min(sizes), max(sizes)
        if name not in series:
            series.append(name)
        for p in hockney_curve(f, lo, hi):
            p["series"] = name
            p["bw_model_MBps"] = factor * p["bytes"] / p["t_model_usec"] if factor and p["t_model_usec"] > 0 else None
            model_rows.append(p)
        for b in f.get("breakpoints_bytes") or []:
            if _finite(b) and b > 0:
                bp_rows.append({"series": name, "bytes": b, "size": fmt_bytes(b)})
        for r in f.get("residuals") or []:
            if _finite(r.get("bytes")) and r["bytes"] > 0 and _finite(r.get("rel_err")):
                res_rows.append({"series": name, "bytes": r["bytes"], "size": fmt_bytes(r["bytes"]),
                                 "rel_err": r["rel_err"], "measured_us": r.get("measured_us"),
                                 "predicted_us": r.get("predicted_us")})

    sel = _pick()
    color = _color(series)
    x = _size_x(pos, max_ticks=8)
    meas = _round(pos.select("series", "label", "np", "bytes", "size", "t_median_usec", "t_ci_low_usec",
                             "t_ci_high_usec", "t_min_usec", "t_cv", "n_reps", "bw_median_MBps"))
    base = alt.Chart(meas)
    tips = [alt.Tooltip("series:N"), _tt_size(), alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
            alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
            alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"),
            alt.Tooltip("t_min_usec:Q", title="min t (µs)", format=".4~g"),
            alt.Tooltip("t_cv:Q", title="CV", format=".2%"), alt.Tooltip("n_reps:Q", title="repetitions"),
            alt.Tooltip("bw_median_MBps:Q", title="median bw (MB/s)", format=",.4~g")]
    ylat = alt.Y("t_median_usec:Q", scale=alt.Scale(type="log"), title="latency t (µs)")
    band = base.transform_filter("datum.t_ci_low_usec > 0 && datum.t_ci_high_usec > 0").mark_area().encode(
        x=x, y=alt.Y("t_ci_low_usec:Q", scale=alt.Scale(type="log")), y2="t_ci_high_usec:Q", color=color,
        opacity=_opacity(sel, 0.22, 0.03))
    line = base.mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20)).encode(
        x=x, y=ylat, color=color, opacity=_opacity(sel, 1.0), tooltip=tips).add_params(sel)
    lat_layers: list[alt.Chart] = [band, line]

    bw_chart = None
    bw = meas.filter(pl.col("bw_median_MBps") > 0)
    if bw.height:
        bw_layers = [alt.Chart(bw).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20)).encode(
            x=x, y=alt.Y("bw_median_MBps:Q", scale=alt.Scale(type="log"), title="bandwidth (MB/s, 10⁶ B/s)"),
            color=color, opacity=_opacity(sel, 1.0), tooltip=tips)]
    if model_rows:
        model = _round(pl.DataFrame(model_rows, infer_schema_length=None).with_columns(
            pl.col("bytes").map_elements(fmt_bytes, return_dtype=pl.String).alias("size")))
        mtips = [alt.Tooltip("series:N"), _tt_size(), alt.Tooltip("segment:O"),
                 alt.Tooltip("t_model_usec:Q", title="model t (µs)", format=".4~g")]
        lat_layers.append(alt.Chart(model).mark_line(strokeDash=[5, 3], strokeWidth=2.4).encode(
            x=x, y="t_model_usec:Q", color=color, detail="segment:N", opacity=_opacity(sel, 0.9), tooltip=mtips))
        if bw.height and factor:
            bw_layers.append(alt.Chart(model).mark_line(strokeDash=[5, 3], strokeWidth=2.4).encode(
                x=x, y="bw_model_MBps:Q", color=color, detail="segment:N", opacity=_opacity(sel, 0.9),
                tooltip=[*mtips, alt.Tooltip("bw_model_MBps:Q", title="model bw (MB/s)", format=",.4~g")]))
    if bp_rows:
        lat_layers.append(alt.Chart(pl.DataFrame(bp_rows)).mark_rule(strokeDash=[2, 3]).encode(
            x="bytes:Q", color=color, opacity=_opacity(sel, 0.7, 0.03),
            tooltip=[alt.Tooltip("series:N"), alt.Tooltip("size:N", title="breakpoint")]))
    lat_chart = alt.layer(*lat_layers).properties(width=CHART_W, height=CHART_H, title=f"{bench}: latency")
    if bw.height:
        bw_chart = alt.layer(*bw_layers).properties(width=CHART_W, height=CHART_H, title=f"{bench}: bandwidth")
    top = alt.hconcat(lat_chart, bw_chart) if bw_chart is not None else lat_chart
    caption = f"{bench}: {len(pos.get_column('series').unique())} series, {pos.height} (series, size) points."
    if model_rows and bw.height and factor:
        caption += (f" Model bandwidth = {fmt_num(factor)} × m / t(m); the factor is IMB's bytes-per-time "
                    "convention for this benchmark, estimated from the measured medians.")
    out: list[Any] = [ChartBlock(chart_spec(top), caption)]

    if res_rows:
        res = _round(pl.DataFrame(res_rows, infer_schema_length=None))
        rsel = _pick()
        rchart = alt.layer(
            alt.Chart(pl.DataFrame({"zero": [0.0]})).mark_rule(color="#888").encode(y="zero:Q"),
            alt.Chart(res).mark_line(point=alt.OverlayMarkDef(size=22)).encode(
                x=_size_x(res), y=alt.Y("rel_err:Q", title="relative error (model − measured)/measured",
                                        axis=alt.Axis(format="%")),
                color=_color(series), opacity=_opacity(rsel, 1.0),
                tooltip=[alt.Tooltip("series:N"), _tt_size(), alt.Tooltip("rel_err:Q", format=".2%"),
                         alt.Tooltip("measured_us:Q", title="measured (µs)", format=".4~g"),
                         alt.Tooltip("predicted_us:Q", title="predicted (µs)", format=".4~g")]).add_params(rsel),
        ).properties(width=2 * CHART_W, height=180, title=f"{bench}: Hockney fit residuals")
        out.append(ChartBlock(chart_spec(rchart), f"{bench}: relative error of the fitted model per size."))
    return out


# ---------------------------------------------------------------------------
# 3. Parameters table
# ---------------------------------------------------------------------------


@register_section
def section_parameters(data: ReportData) -> Section:
    fits = data.hockney
    if fits is None:
        why = "no fits directory" if data.fits_dir is None or not data.fits_dir.is_dir() else "hockney.json missing"
        return Section("Model parameters", [Notice(f"No fits ({why}): the Hockney parameters are not available.",
                                                   "warn")], id="parameters")
    if not fits:
        return Section("Model parameters", [Notice("fits/hockney.json holds no fits.", "warn")], id="parameters")

    zero: dict[tuple[Any, Any, Any], float] = {}
    s = data.summary
    if _has(s, "label", "benchmark", "bytes", "t_median_usec"):
        z = s.filter(pl.col("bytes") == 0)
        npc = pl.col("np") if "np" in z.columns else pl.lit(None)
        for lab, np_, b, t in z.select("label", npc.alias("np"), "benchmark", "t_median_usec").iter_rows():
            zero[(lab, np_, b)] = t
            zero.setdefault((lab, None, b), t)

    def key(f: dict[str, Any]) -> tuple[Any, ...]:
        return (_bench_sort_key(str(f.get("benchmark"))), str(f.get("label")), f.get("np") or 0,
                str(f.get("algorithm")))

    def bw_text(f: dict[str, Any], v: Any) -> str:
        # The fit stores an unbounded (flat) bandwidth as null.
        return "∞" if v is None and f.get("error") is None and f.get("segments") else fmt_num(v)

    show_alg = any(f.get("algorithm") not in (None, "default") for f in fits)
    show_method = any(f.get("ci_method") for f in fits)
    rows: list[list[Cell]] = []
    seg_rows: list[list[Cell]] = []
    for f in sorted(fits, key=key):
        ident = [cell(f.get("benchmark")), cell(f.get("label")), cell(f.get("np"))]
        if show_alg:
            ident.append(cell(f.get("algorithm")))
        res = [abs(r["rel_err"]) for r in f.get("residuals") or [] if isinstance(r, dict) and _finite(r.get("rel_err"))]
        bps = [b for b in f.get("breakpoints_bytes") or [] if _finite(b)]
        excl = [b for b in f.get("excluded_bytes") or [] if _finite(b)]
        if _finite(f.get("zero_byte_us")):
            z = Cell(fmt_num(f["zero_byte_us"]), title="zero_byte_us from the fit", cls="num")
        else:
            zs = zero.get((f.get("label"), f.get("np"), f.get("benchmark")))
            z = Cell(fmt_num(zs), title="median of the 0-byte rows in the summary" if zs is not None else None,
                     cls="num")
        if f.get("error") is not None:
            rows.append([*ident, Cell(f"not fitted: {f['error']}", cls="bad wrap", colspan=8 + show_method), z])
            continue
        bp_text = ", ".join(fmt_bytes(b) for b in bps) or "none"
        if excl:
            bp_text += f" (spikes excluded: {', '.join(fmt_bytes(b) for b in excl)})"
        rows.append([
            *ident,
            Cell(fmt_num(f.get("latency_us")), cls="num"), Cell(fmt_ci(f.get("latency_ci_us")), cls="num"),
            Cell(bw_text(f, f.get("bandwidth_MBps")), cls="num"),
            Cell(fmt_ci(f.get("bandwidth_ci_MBps"), unbounded="∞"), cls="num"),
            Cell(bp_text, title=", ".join(f"{int(b)} B" for b in bps) or None),
            cell(len(f.get("segments") or []) or 1), cell(f.get("n_sizes")),
            Cell(fmt_pct(max(res)) if res else DASH, cls="num"),
            *([cell(f.get("ci_method"))] if show_method else []),
            z,
        ])
        for i, seg in enumerate(f.get("segments") or []):
            if not isinstance(seg, dict):
                continue
            seg_rows.append([*ident, cell(i),
                             Cell(fmt_bytes(seg.get("from_bytes"))), Cell(fmt_bytes(seg.get("to_bytes"))),
                             cell(seg.get("n_sizes")),
                             Cell(fmt_num(seg.get("latency_us")), cls="num"),
                             Cell(bw_text(f, seg.get("bandwidth_MBps")), cls="num")])
    id_cols = ["Benchmark", "Label", "np", *(["Algorithm"] if show_alg else [])]
    blocks: list[Any] = [
        Text("Hockney model t(m) = λ + m/B per label and benchmark (λ in µs, B in MB/s = 10⁶ B/s) with the "
             "fit's 95 % confidence intervals. For a piecewise fit, λ is the first (small-message) segment's and "
             "B the last (asymptotic) segment's; every segment is listed below. ∞ = unbounded bandwidth (flat "
             "segment). t(0 B) is the 0-byte time, not part of the fit."),
        Table([*id_cols, "λ (µs)", "λ 95 % CI", "B (MB/s)", "B 95 % CI", "Breakpoints", "Segments", "Sizes",
               "max |rel err|", *(["CI method"] if show_method else []), "t(0 B) (µs)"], rows,
              caption="Hockney parameters"),
    ]
    if seg_rows:
        blocks.append(Details(f"Piecewise segments ({len(seg_rows)})", [Table(
            [*id_cols, "#", "from", "to", "sizes", "λ (µs)", "B (MB/s)"], seg_rows)]))
    others = sorted(k for k in data.fits if k not in ("hockney", "kernels", "alphabeta"))  # shown elsewhere
    if others:
        blocks.append(Notice("Other model files found but not yet shown by this report version:", "info",
                             [f"{k}.json" for k in others]))
    return Section("Model parameters", blocks, id="parameters")


# ---------------------------------------------------------------------------
# Point-to-point by region (cache-size rules, intra- vs inter-node): mpiatlas.report_regions
# ---------------------------------------------------------------------------


@register_section
def section_p2p_regions(data: ReportData) -> Section:
    from mpiatlas.report_regions import section_regions

    return section_regions(data)


# ---------------------------------------------------------------------------
# 4. Collectives
# ---------------------------------------------------------------------------


def _coll_series(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(
        pl.col("algorithm").fill_null("default").alias("algorithm"),
    ).with_columns(pl.concat_str([pl.col("label").cast(pl.String), pl.lit(" · "), pl.col("algorithm"),
                                  pl.lit(" · np="), pl.col("np").cast(pl.String).fill_null("?")]).alias("series"))


def _latency_chart(df: pl.DataFrame, title: str) -> tuple[alt.TopLevelMixin, int]:
    """Latency vs size, one line per label · algorithm · np; one panel per np when there are several.

    Returns the chart and the number of lines drawn.
    """
    nps = df.get_column("np").unique().to_list()
    multi_np = len(nps) > 1
    key = "line" if multi_np else "series"
    d = df.with_columns(pl.concat_str([pl.col("label").cast(pl.String), pl.lit(" · "), pl.col("algorithm")])
                        .alias("line"))
    data = _round(d.select("series", "line", "label", "algorithm", "np", "bytes", "size", "t_median_usec",
                           "t_ci_low_usec", "t_ci_high_usec", "t_cv", "n_reps"))
    domain = sorted(data.get_column(key).unique().to_list())
    sel = alt.selection_point(name="pick", fields=[key], bind="legend")
    tips = [alt.Tooltip("label:N"), alt.Tooltip("algorithm:N"), alt.Tooltip("np:Q"), _tt_size(),
            alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
            alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
            alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"),
            alt.Tooltip("t_cv:Q", title="CV", format=".2%"), alt.Tooltip("n_reps:Q", title="repetitions")]
    color = _color(domain, "label · algorithm" if multi_np else "label · algorithm · np", field_=key)
    chart = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=_size_x(data, max_ticks=7 if multi_np else 12),
        y=alt.Y("t_median_usec:Q", scale=alt.Scale(type="log"), title="latency t (µs)"),
        color=color, opacity=_opacity(sel, 1.0), tooltip=tips,
    ).add_params(sel)
    if not multi_np:
        return chart.properties(width=2 * CHART_W, height=CHART_H + 40, title=title), len(domain)
    cols = min(len(nps), 3)
    return chart.properties(width=300, height=230).facet(
        facet=alt.Facet("np:O", title="processes (np)", header=alt.Header(labelFontWeight="bold")), columns=cols,
    ).properties(title=title), data.select("series").n_unique()


def _np_chart(df: pl.DataFrame, title: str) -> alt.TopLevelMixin:
    """Size-less collectives (Barrier): latency vs np per label × algorithm."""
    d = _round(df.with_columns(pl.concat_str([pl.col("label"), pl.lit(" · "), pl.col("algorithm")]).alias("series"))
               .select("series", "np", "t_median_usec", "t_ci_low_usec", "t_ci_high_usec", "n_reps"))
    series = sorted(d.get_column("series").unique().to_list())
    sel = _pick()
    return alt.Chart(d).mark_line(point=alt.OverlayMarkDef(size=30)).encode(
        x=alt.X("np:Q", title="processes (np)", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted(d.get_column("np").drop_nulls().unique().to_list()), format="d")),
        y=alt.Y("t_median_usec:Q", title="latency t (µs)", scale=alt.Scale(type="log")),
        color=_color(series), opacity=_opacity(sel, 1.0),
        tooltip=["series:N", "np:Q", alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"), "n_reps:Q"],
    ).add_params(sel).properties(width=2 * CHART_W, height=CHART_H, title=title)


def best_algorithms(df: pl.DataFrame) -> pl.DataFrame:
    """Per (label, benchmark, np, bytes): fastest algorithm and its gain over ``default``.

    ``speedup`` = t_default / t_best (>= 1); ``separated`` is true when the best
    algorithm's CI lies entirely below default's.
    """
    keys = ["label", "benchmark", "np", "bytes"]
    d = df.with_columns(pl.col("algorithm").fill_null("default"))
    best = (d.sort("t_median_usec").group_by(keys, maintain_order=True)
            .agg(pl.col("algorithm").first().alias("best"), pl.col("t_median_usec").first().alias("t_best"),
                 pl.col("t_ci_high_usec").first().alias("best_ci_high"), pl.len().alias("n_algorithms")))
    dflt = d.filter(pl.col("algorithm") == "default").select(
        *keys, pl.col("t_median_usec").alias("t_default"), pl.col("t_ci_low_usec").alias("default_ci_low"))
    out = best.join(dflt, on=keys, how="left", nulls_equal=True)
    return out.with_columns(
        (pl.col("t_default") / pl.col("t_best")).alias("speedup"),
        (pl.col("best_ci_high") < pl.col("default_ci_low")).alias("separated"),
    ).sort("benchmark", "label", "np", "bytes", nulls_last=False)


@register_section
def section_collectives(data: ReportData) -> Section:
    s = _family_summary(data, "collective")
    if s is None:
        return Section("Collectives", [Notice(_no_summary_text(data), "error")],
                       id="collectives")
    if s.height == 0:
        return Section("Collectives", [Notice("No collective benchmark in the summary.", "info")], id="collectives")
    s = _coll_series(s)
    blocks: list[Any] = [Text(
        "Median latency over repetitions per collective, one line per label · algorithm · np (click the legend "
        "to highlight). With several process counts, heatmaps show latency over (size, np) per algorithm, and "
        "the fastest algorithm per point with its speed-up over \"default\" (t_default / t_best; * = the "
        "95 % confidence intervals do not overlap).")]
    over = s.filter(pl.col("oversubscribed").fill_null(False))
    if over.height:
        blocks.append(Notice("Oversubscribed series (timings not representative):", "warn",
                             sorted({f"{b}: {x}" for b, x in over.select("benchmark", "series").iter_rows()})))
    for bench in sorted(s.get_column("benchmark").unique().to_list(), key=_bench_sort_key):
        df = s.filter(pl.col("benchmark") == bench)
        blocks.append(Heading(bench))
        blocks.extend(_collective_blocks(bench, df))
    return Section("Collectives", blocks, id="collectives")


def _where(r: dict[str, Any]) -> str:
    size = f" @ {fmt_bytes(r['bytes'])}" if r.get("bytes") is not None else ""
    return f"{r['best']}{size}, np={r['np']}"


def _collective_blocks(bench: str, df: pl.DataFrame) -> list[Any]:
    out: list[Any] = []
    sized = df.filter(pl.col("bytes").is_not_null())
    if sized.height == 0:
        out.append(ChartBlock(chart_spec(_np_chart(df, f"{bench}: latency vs processes")),
                              f"{bench} has no message size: latency against the number of processes."))
    else:
        pos = _with_size(sized.filter(pl.col("bytes") > 0)).sort("series", "bytes")
        if pos.height:
            chart, n = _latency_chart(pos, f"{bench}: latency")
            out.append(ChartBlock(chart_spec(chart), f"{bench}: {n} lines (label · algorithm · np)."))
    nps = df.get_column("np").drop_nulls().unique().sort().to_list()
    algs = df.get_column("algorithm").unique().sort().to_list()
    hm = _with_size(df).with_columns(pl.col("size").fill_null("n/a"))
    size_order = [fmt_bytes(b) if b is not None else "n/a"
                  for b in hm.get_column("bytes").unique().sort(nulls_last=False).to_list()]
    if len(nps) > 1 and sized.height:
        d = _round(hm.select("label", "algorithm", "np", "bytes", "size", "t_median_usec"))
        heat = alt.Chart(d).mark_rect().encode(
            x=alt.X("size:O", sort=size_order, title="message size"),
            y=alt.Y("np:O", sort="descending", title="np"),
            color=alt.Color("t_median_usec:Q", scale=alt.Scale(type="log", scheme="viridis"), title="median t (µs)",
                            legend=alt.Legend(format=".3~g")),
            tooltip=["label:N", "algorithm:N", "np:O", "size:N",
                     alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g")],
        ).properties(width=max(160, 16 * len(size_order)), height=max(60, 18 * len(nps))).facet(
            row=alt.Row("label:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=260)),
            column=alt.Column("algorithm:N", title="algorithm"),
        ).properties(title=f"{bench}: latency over (size, np)")
        out.append(ChartBlock(chart_spec(heat), f"{bench}: median latency per algorithm (columns) and label (rows)."))
    elif len(nps) == 1:
        out.append(Text(f"Only np = {nps[0]} was measured for {bench}: no (size × np) heatmap.", cls="muted"))

    if len(algs) <= 1:
        out.append(Text(f"Only algorithm \"{algs[0] if algs else 'default'}\" was measured for {bench}: "
                        "no algorithm comparison.", cls="muted"))
        return out
    best = best_algorithms(df)
    if "default" not in algs:
        out.append(Notice(f"{bench}: no \"default\" algorithm run, so gains over default cannot be computed.",
                          "warn"))
    b = _round(_with_size(best).with_columns(
        pl.col("size").fill_null("n/a"),
        pl.when(pl.col("speedup").is_not_null())
        .then(pl.concat_str([pl.lit("×"), pl.col("speedup").round(2).cast(pl.String),
                             pl.when(pl.col("separated").fill_null(False)).then(pl.lit("*")).otherwise(pl.lit(""))]))
        .otherwise(pl.lit("")).alias("gain"),
    ).select("label", "np", "bytes", "size", "best", "t_best", "t_default", "speedup", "gain", "n_algorithms"))
    # Sized collectives: (size × np) per label; size-less ones (Barrier): np × label.
    if sized.height:
        xenc, yenc = alt.X("size:O", sort=size_order, title="message size"), alt.Y("np:O", sort="descending")
        width, height = max(160, 34 * len(size_order)), max(40, 20 * len(nps))
    else:
        xenc, yenc = alt.X("np:O", title="processes (np)"), alt.Y("label:N", title=None)
        width, height = max(120, 40 * len(nps)), alt.Step(22)
    base = alt.Chart().encode(x=xenc, y=yenc)
    best_chart = alt.layer(
        base.mark_rect().encode(
            color=alt.Color("best:N", title="fastest algorithm", scale=alt.Scale(scheme="set2")),
            tooltip=["label:N", "np:O", "size:N", alt.Tooltip("best:N", title="fastest"),
                     alt.Tooltip("t_best:Q", title="t best (µs)", format=".4~g"),
                     alt.Tooltip("t_default:Q", title="t default (µs)", format=".4~g"),
                     alt.Tooltip("speedup:Q", title="speed-up vs default", format=".3f"),
                     alt.Tooltip("n_algorithms:Q", title="algorithms compared")]),
        base.mark_text(fontSize=9).encode(text="gain:N"),
    ).properties(width=width, height=height)
    if sized.height:
        best_chart = best_chart.facet(
            row=alt.Row("label:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=260)),
            data=b)
    else:
        best_chart = best_chart.properties(data=b)
    best_chart = best_chart.properties(title=f"{bench}: fastest algorithm per (size, np)")
    out.append(ChartBlock(chart_spec(best_chart),
                          f"{bench}: fastest algorithm; text = speed-up over default (* = CIs separated)."))

    wins = best.filter((pl.col("best") != "default") & pl.col("speedup").is_not_null())
    summary_rows = []
    for (lab,), g in best.group_by(["label"], maintain_order=True):
        w = g.filter((pl.col("best") != "default") & pl.col("speedup").is_not_null())
        sep = w.filter(pl.col("separated").fill_null(False))
        top = w.sort("speedup", descending=True).head(1)
        summary_rows.append([
            cell(lab), cell(g.height), cell(w.height), cell(sep.height),
            Cell(fmt_num(top.get_column("speedup").item()) if top.height else DASH, cls="num"),
            Cell(_where(top.row(0, named=True)) if top.height else DASH),
        ])
    out.append(Table(["Label", "(size, np) points", "non-default wins", "… with separated CIs", "max speed-up",
                      "where"], summary_rows, caption=f"{bench}: algorithm choice vs default"))
    detail_rows = [[cell(r["label"]), cell(r["np"]), Cell(fmt_bytes(r["bytes"]) if r["bytes"] is not None else "n/a"),
                    cell(r["best"]), Cell(fmt_num(r["t_best"]), cls="num"), Cell(fmt_num(r["t_default"]), cls="num"),
                    Cell(fmt_num(r["speedup"]) if r["speedup"] is not None else DASH, cls="num"),
                    Cell(fmt_pct(1 - 1 / r["speedup"]) if _finite(r["speedup"]) and r["speedup"] > 0 else DASH,
                         cls="num"),
                    cell(r["separated"])] for r in best.iter_rows(named=True)]
    out.append(Details(f"{bench}: best algorithm per (label, np, size) — {best.height} rows, "
                       f"{wins.height} non-default wins", [Table(
                           ["Label", "np", "Size", "Best", "t best (µs)", "t default (µs)", "speed-up",
                            "time saved", "CIs separated"], detail_rows, scroll=True)]))
    return out


# ---------------------------------------------------------------------------
# Alltoall / Allgather over nodes (α-β models, fits/alphabeta.json): mpiatlas.report_alphabeta
# ---------------------------------------------------------------------------


@register_section
def section_alphabeta(data: ReportData) -> Section | None:
    from mpiatlas.report_alphabeta import section_alphabeta as build

    return build(data)


# ---------------------------------------------------------------------------
# Other benchmarks (neither p2p nor collective): shown, never dropped
# ---------------------------------------------------------------------------


@register_section
def section_other(data: ReportData) -> Section | None:
    s = _family_summary(data, "other")
    if s is None or s.height == 0:
        return None
    s = _coll_series(s)
    blocks: list[Any] = [Text("Benchmarks this report version does not model specifically.")]
    for bench in sorted(s.get_column("benchmark").unique().to_list()):
        df = s.filter(pl.col("benchmark") == bench)
        blocks.append(Heading(bench))
        pos = _with_size(df.filter(pl.col("bytes") > 0)).sort("series", "bytes")
        if pos.height:
            blocks.append(ChartBlock(chart_spec(_latency_chart(pos, f"{bench}: latency")[0])))
        else:
            blocks.append(ChartBlock(chart_spec(_np_chart(df, f"{bench}: latency vs processes"))))
    return Section("Other benchmarks", blocks, id="other")


# ---------------------------------------------------------------------------
# Kernels (ring, matsum, jacobi): built in mpiatlas.report_kernels, registered here so they
# come before the cell list.
# ---------------------------------------------------------------------------


@register_section
def section_kernel_ring(data: ReportData) -> Section | None:
    from mpiatlas.report_kernels import section_ring

    return section_ring(data)


@register_section
def section_kernel_matsum(data: ReportData) -> Section | None:
    from mpiatlas.report_kernels import section_matsum

    return section_matsum(data)


@register_section
def section_kernel_jacobi(data: ReportData) -> Section | None:
    from mpiatlas.report_kernels import section_jacobi

    return section_jacobi(data)


@register_section
def section_kernel_p2p_coll(data: ReportData) -> Section | None:
    # mpiatlas's own pingpong/coll kernels (not IMB): Open MPI's only p2p/collective data here.
    from mpiatlas.report_kernels import section_p2p_coll

    return section_p2p_coll(data)


# ---------------------------------------------------------------------------
# 5. Cells
# ---------------------------------------------------------------------------


@register_section
def section_cells(data: ReportData) -> Section:
    cells = data.cells
    if cells is None:
        return Section("Cells", [Notice("cells.parquet is missing: no per-cell status.", "error")], id="cells")
    extra: dict[str, dict[str, Any]] = {}
    smp = data.samples
    if _has(smp, "cell"):
        aggs = []
        if "oversubscribed" in smp.columns:
            aggs.append(pl.col("oversubscribed").any().alias("oversubscribed"))
        if "region" in smp.columns:
            aggs.append(pl.col("region").drop_nulls().unique().sort().str.join(",").alias("region"))
        aggs.append(pl.len().alias("n_samples"))
        extra = {r["cell"]: r for r in smp.group_by("cell").agg(aggs).iter_rows(named=True)}

    def ok_cell(req: Any, obt: Any, ok: Any, fmt_req: Callable[[Any], str] = str,
                fmt_obt: Callable[[Any], str] = str) -> Cell:
        obt_s = fmt_obt(obt) if obt is not None else DASH
        req_s = fmt_req(req) if req is not None else DASH
        mark = {True: "✓", False: "✗"}.get(ok, "?")
        text = f"{mark} {req_s} → {_short(obt_s)}"
        # The full value on hover only when the cell had to shorten it.
        title = f"requested {req_s}; obtained {obt_s}" if _short(obt_s) != obt_s else None
        return Cell(text, title=title, cls={True: "ok", False: "bad"}.get(ok, None))

    rows: list[list[Cell]] = []
    recs = sorted(cells.iter_rows(named=True), key=lambda r: (_status_rank(r.get("status")), str(r.get("cell"))))
    for r in recs:
        e = extra.get(r.get("cell"), {})
        over = r.get("oversubscribed")
        over = e.get("oversubscribed") if over is None else over
        region = r.get("region") or e.get("region") or None
        digest = r.get("image_digest")
        rows.append([
            cell(r.get("cell")), cell(r.get("stack")), cell(r.get("transport")), cell(r.get("mapping")),
            cell(r.get("np")), cell(r.get("benchmark")), cell(r.get("algorithm")), cell(r.get("rep")),
            Cell(str(r.get("status")), cls=_status_cls(r.get("status"))), cell(r.get("reason")),
            ok_cell(r.get("requested_transport"), r.get("obtained_transport"), r.get("transport_ok")),
            ok_cell(r.get("requested_pins"), r.get("obtained_binding"), r.get("binding_ok"), fmt_pins, fmt_binding),
            cell(region),
            Cell(fmt_bool(over), cls="bad" if over else None),
            cell(r.get("containerized")),
            Cell(_short(str(digest), 19), title=str(digest)) if digest else Cell(DASH),
            Cell(fmt_num(r.get("wall_s")), cls="num"),
            cell(e.get("n_samples", 0 if extra else None)),
        ])
    t = Table(["Cell", "Stack", "Transport", "Mapping", "np", "Benchmark", "Algorithm", "Rep", "Status", "Reason",
               "Transport req → obtained", "Binding req → obtained", "Region", "Oversub.", "Container", "Image",
               "Wall (s)", "Samples"], rows, filterable=True, scroll=True,
              caption=f"{len(rows)} cells (problems first). ✓/✗ = check passed/failed, ? = not checked.")
    return Section("Cells", [t], id="cells")


# ---------------------------------------------------------------------------
# 6. Provenance
# ---------------------------------------------------------------------------


def _topology_items(topo: dict[str, Any]) -> list[tuple[str, Cell]]:
    items: list[tuple[str, Cell]] = []
    for k, v in topo.items():
        if k == "cache_sizes" and isinstance(v, dict):
            text = ", ".join(f"{lvl} {fmt_bytes(sz)}" for lvl, sz in v.items()) or DASH
        elif isinstance(v, (dict, list)):
            text = _short(json.dumps(v, sort_keys=True, default=str), 300)
        else:
            text = DASH if v is None else str(v)
        items.append((str(k), Cell(text)))
    return items


_PROV_FIRST = ("host", "cpu_model", "stack_version", "imb_version", "start", "end", "containerized", "image_digest",
               "mpiatlas_version")
_PROV_SEPARATE = ("cell", "argv", "env", "topology")


def _prov_value(v: Any) -> str:
    if v is None:
        return DASH
    if isinstance(v, (dict, list)):
        return _short(json.dumps(v, sort_keys=True, default=str), 400)
    return str(v)


def _argv_text(argv: Any) -> str:
    if isinstance(argv, list):
        return shlex.join(str(a) for a in argv)
    return str(argv) if argv is not None else "(no command line recorded)"


def _per_cell_provenance(prov: list[dict[str, Any]], stack_of: dict[Any, Any],
                         status_of: dict[Any, Any]) -> list[Any]:
    """Each cell's command line and environment, collapsible and grouped by stack.

    Fields and environment variables identical in every cell are shown once, above the
    per-cell entries, so a campaign of thousands of cells stays a reasonable file.
    """
    fields = sorted({k for p in prov for k in p if k not in _PROV_SEPARATE})
    common_fields = [k for k in fields if len({_prov_value(p.get(k)) for p in prov}) == 1]
    envs = [p.get("env") if isinstance(p.get("env"), dict) else {} for p in prov]
    env_keys = sorted({str(k) for e in envs for k in e})
    common_env = {k: str(envs[0][k]) for k in env_keys
                  if envs and all(k in e for e in envs) and len({str(e[k]) for e in envs}) == 1}

    out: list[Any] = [Heading(f"Command lines and environment of the {len(prov)} cells", 3)]
    if common_fields:
        out.append(Text("Common to every cell:", cls="muted"))
        out.append(KeyValues([(k, Cell(_prov_value(prov[0].get(k)))) for k in
                              [k for k in _PROV_FIRST if k in common_fields]
                              + [k for k in common_fields if k not in _PROV_FIRST]]))
    if common_env:
        out.append(Details(f"Environment common to every cell ({len(common_env)} variables)", [
            Pre("\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(common_env.items())))], open=False))
    varying = [k for k in fields if k not in common_fields and k not in ("host", "start", "end")]
    varying = [k for k in _PROV_FIRST if k in varying] + [k for k in varying if k not in _PROV_FIRST]
    groups: dict[str, list[list[Cell]]] = {}
    for p, env in sorted(zip(prov, envs), key=lambda pe: str(pe[0].get("cell"))):
        own_env = {str(k): str(v) for k, v in env.items() if str(k) not in common_env}
        env_text = "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(own_env.items()))
        if not env:
            env_text = "(no environment recorded)"
        other = "\n".join(f"{k}: {_prov_value(p.get(k))}" for k in varying if k in p)
        status = status_of.get(p.get("cell"))
        groups.setdefault(str(stack_of.get(p.get("cell")) or "unknown stack"), []).append([
            cell(p.get("cell")), Cell(str(status) if status else "unknown", cls=_status_cls(status)),
            cell(p.get("host")), Cell(f"{p.get('start') or '?'}\n{p.get('end') or '?'}", cls="code"),
            Cell(_argv_text(p.get("argv")), cls="code"), Cell(env_text or DASH, cls="code"),
            Cell(other or DASH, cls="code"),
        ])
    cols = ["Cell", "Status", "Host", "Start / end", "Command line",
            "Environment" + (" (besides the common one)" if common_env else ""), "Other recorded fields"]
    for stack, rows in sorted(groups.items()):
        out.append(Details(f"{stack} — {len(rows)} cells", [
            Table(cols, rows, filterable=len(rows) > 10, scroll=len(rows) > 10)]))
    return out


@register_section
def section_provenance(data: ReportData) -> Section:
    prov = data.provenance
    if prov is None:
        return Section("Provenance", [Notice("provenance.json is missing: no versions, hosts or command lines.",
                                             "error")], id="provenance")
    blocks: list[Any] = []
    stack_of: dict[Any, Any] = {}
    status_of: dict[Any, Any] = {}
    if _has(data.cells, "cell"):
        for r in data.cells.iter_rows(named=True):
            stack_of[r["cell"]] = r.get("stack")
            status_of[r["cell"]] = r.get("status")

    stack_versions: dict[str, list[str]] = {}
    for p in prov:
        if p.get("stack_version"):
            stack_versions.setdefault(str(stack_of.get(p.get("cell"), "?")), [])
            if str(p["stack_version"]) not in stack_versions[str(stack_of.get(p.get("cell"), "?"))]:
                stack_versions[str(stack_of.get(p.get("cell"), "?"))].append(str(p["stack_version"]))
    digests = _distinct(p.get("image_digest") for p in prov)
    n_cont = sum(1 for p in prov if p.get("containerized"))
    blocks.append(KeyValues([
        ("Cells with provenance", Cell(str(len(prov)))),
        ("mpiatlas", Cell(", ".join(map(str, _distinct(p.get("mpiatlas_version") for p in prov))) or DASH)),
        ("MPI stacks", Cell("; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(stack_versions.items())) or DASH)),
        ("IMB", Cell(", ".join(map(str, _distinct(p.get("imb_version") for p in prov))) or DASH)),
        ("Hosts", Cell(", ".join(map(str, _distinct(p.get("host") for p in prov))) or DASH)),
        ("CPU models", Cell("; ".join(map(str, _distinct(p.get("cpu_model") for p in prov))) or DASH)),
        ("Containerized cells", Cell(f"{n_cont} of {len(prov)}")),
        ("Image digests", Cell(", ".join(map(str, digests)) or DASH)),
    ]))
    if data.cells is not None and "cell" in data.cells.columns:
        have = {p.get("cell") for p in prov}
        lacking = [c for c in data.cells.get_column("cell").to_list() if c not in have]
        if lacking:
            blocks.append(Notice(f"{len(lacking)} cells have no provenance record:", "warn",
                                 [str(c) for c in lacking]))

    # Topology per host (distinct topologies only).
    seen: list[tuple[str, str]] = []
    for p in prov:
        topo = p.get("topology")
        if not isinstance(topo, dict):
            continue
        key = (str(p.get("host")), json.dumps(topo, sort_keys=True, default=str))
        if key in seen:
            continue
        seen.append(key)
        blocks.append(Heading(f"Topology of {p.get('host') or 'unknown host'}", 3))
        blocks.append(KeyValues(_topology_items(topo)))
    if not seen:
        blocks.append(Notice("No topology recorded in the provenance.", "warn"))

    blocks.extend(_per_cell_provenance(prov, stack_of, status_of))
    return Section("Provenance", blocks, id="provenance")


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """The Vega + Vega-Lite + vega-embed JavaScript, from vl-convert (no network)."""
    import vl_convert

    version = None
    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    if wanted in vl_convert.get_vegalite_versions():
        version = wanted
    js = vl_convert.javascript_bundle(vl_version=version)
    # Inline-script safety: nothing may close the <script> element early.
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def library_versions() -> dict[str, str]:
    import vl_convert

    return {"vega": vl_convert.get_vega_version(), "vega-embed": vl_convert.get_vega_embed_version(),
            "vega-lite": alt.SCHEMA_VERSION, "altair": alt.__version__, "polars": pl.__version__}


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("mpiatlas", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "separators": (",", ":"), "allow_nan": False}
    return env


def _error_section(fn: SectionFn, exc: BaseException) -> Section:
    name = getattr(fn, "__name__", "section")
    title = name.removeprefix("section_").replace("_", " ").capitalize()
    return Section(title, [Notice(f"This section could not be built: {type(exc).__name__}: {exc}", "error"),
                           Details("Traceback", [Pre(traceback.format_exc())])], id=name)


def build_sections(data: ReportData, sections: Sequence[SectionFn] | None = None) -> list[Section]:
    out: list[Section] = []
    for fn in sections if sections is not None else SECTIONS:
        try:
            sec = fn(data)
        except Exception as exc:  # noqa: BLE001 - a broken section must not lose the rest of the report
            sec = _error_section(fn, exc)
        if sec is not None:
            out.append(sec)
    return out


def pack_dataset(records: list[Any]) -> Any:
    """Records -> columnar form (``{"n": rows, "c": {col: {"v": [...]} | {"d": uniques, "i": codes}}}``).

    Chart data repeats long labels on every row; stored by column, with repeated strings
    dictionary-encoded, it is several times smaller. The page's script (and
    :func:`unpack_dataset`) turns it back into records before Vega sees it.
    """
    if not records or not all(isinstance(r, dict) for r in records):
        return None
    cols: list[str] = []
    for r in records:
        for k in r:
            if k not in cols:
                cols.append(k)
    out: dict[str, Any] = {}
    for k in cols:
        vals = [r.get(k) for r in records]
        if all(v is None or isinstance(v, str) for v in vals):
            uniq: dict[str, int] = {}
            codes = [-1 if v is None else uniq.setdefault(v, len(uniq)) for v in vals]
            if len(uniq) * 2 <= len(vals):
                out[k] = {"d": list(uniq), "i": codes}
                continue
        out[k] = {"v": vals}
    return {"n": len(records), "c": out}


def unpack_dataset(packed: dict[str, Any]) -> list[dict[str, Any]]:
    """Inverse of :func:`pack_dataset` (the page does the same in JavaScript)."""
    rows: list[dict[str, Any]] = [{} for _ in range(packed["n"])]
    for k, col in packed["c"].items():
        vals = col["v"] if "v" in col else [None if j < 0 else col["d"][j] for j in col["i"]]
        for row, v in zip(rows, vals):
            row[k] = v
    return rows


def full_spec(spec: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """A chart spec with its datasets restored from the page's shared store."""
    out = dict(spec)
    if "datasets" in spec:
        out["datasets"] = {k: unpack_dataset(store[k]) if v is None else v for k, v in spec["datasets"].items()}
    return out


def _assign_ids(sections: list[Section]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Give charts and tables ids; move chart datasets into one shared, packed store."""
    specs: dict[str, dict[str, Any]] = {}
    store: dict[str, Any] = {}
    used: set[str] = set()
    n_tables = 0

    def walk(blocks: list[Any], prefix: str) -> None:
        for b in blocks:
            if isinstance(b, ChartBlock):
                b.id = f"chart-{len(specs) + 1}"
                spec = dict(b.spec)
                if isinstance(spec.get("datasets"), dict):
                    refs: dict[str, Any] = {}
                    for name, records in spec["datasets"].items():
                        # altair names a dataset by its content hash: equal data is stored once.
                        packed = store.get(name) or pack_dataset(records)
                        if packed is None:
                            refs[name] = records
                        else:
                            store[name] = packed
                            refs[name] = None
                    spec["datasets"] = refs
                specs[b.id] = spec
            elif isinstance(b, Table):
                nonlocal n_tables
                n_tables += 1
                b.id = b.id or f"table-{prefix}-{n_tables}"
            elif isinstance(b, Details):
                walk(b.blocks, prefix)

    for i, sec in enumerate(sections):
        sid = sec.id or f"section-{i + 1}"
        while sid in used:
            sid += "-x"
        sec.id = sid
        used.add(sid)
        walk(sec.blocks, sid)
    return specs, store


def render_html(data: ReportData, sections: list[Section] | None = None) -> str:
    sections = build_sections(data) if sections is None else sections
    specs, store = _assign_ids(sections)
    template = _environment().get_template("report.html.j2")
    return template.render(
        title=data.title,
        generated=data.generated.strftime("%Y-%m-%d %H:%M:%S %Z"),
        version=__version__,
        sections=sections,
        specs=specs,
        store=store,
        vega_bundle=Markup(vega_bundle()) if specs else Markup(""),
        libs=library_versions(),
    )


def build_report(
    tidy_dir: str | Path | None,
    fits_dir: str | Path | None,
    out: str | Path,
    title: str | None = None,
    *,
    now: datetime | None = None,
) -> Path:
    """Build the self-contained HTML report and return its path."""
    data = load_data(tidy_dir, fits_dir, title=title, now=now)
    html = render_html(data)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out

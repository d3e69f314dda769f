"""A results directory -> the history :class:`~mpiatlas.history.store.Entry` it adds.

Three kinds of directory are read:

* a finished campaign, ``results/<name>/`` with ``tidy/`` and ``fits/``;
* a partial campaign (cells missing): its ``partial/{tidy,fits}`` view, only what ran, marked partial;
* a directory written by ``mpiatlas import`` (``imb_samples.parquet``), fitted here when it has no
  ``fits/hockney.json`` (the fits are written beside it, as a campaign keeps them).

The figures: per series and message size, the median time over repetitions with its 95 % CI (the
summary table's ``t_median_usec``); per Hockney fit, λ (``latency_us``) and B (``bandwidth_MBps``),
each with its interval. A series is named by system, stack + version, transport, mapping,
benchmark, algorithm, knobs, np and the parameter (:data:`mpiatlas.history.store.SERIES_FIELDS`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import polars as pl

from mpiatlas.history.store import Entry, EntryTrust, Figure, HistoryError, SeriesIdentity
from mpiatlas.matrix import layout
from mpiatlas.tables.samples import load_samples
from mpiatlas.stats.aggregate import summarize
from mpiatlas.models.fits import FitError, FitOptions, fit_all, write_fits
from mpiatlas.models.fit_records import FitRecordError, HockneyRecord, JsonValue, hockney_records
from mpiatlas.models.fits_files import FitsFileError, read

TIME = "t_median_usec"
LATENCY = "latency_us"
BANDWIDTH = "asymptotic_bandwidth_MBps"  # the headline B (mpiatlas.models.asymptote)
PEAK = "peak_bandwidth_MBps"
# Figures where a larger value is better; every other one is a time (smaller is better).
HIGHER_IS_BETTER = frozenset({BANDWIDTH, PEAK})
PARAMETER_TEXT = {TIME: "median time (µs)", LATENCY: "Hockney λ (µs)", BANDWIDTH: "asymptotic B (MB/s)", PEAK: "peak B (MB/s)"}


@dataclass(frozen=True)
class View:
    """Where a directory's tables are, and what kind of directory it is."""

    root: Path
    tidy: Path
    fits: Path
    partial: bool
    imported: bool


def find_view(directory: Path) -> View:
    """The tables of ``directory``; raises HistoryError naming what was expected."""
    root = Path(directory)
    if not root.is_dir():
        raise HistoryError(f"{root}: no such directory (expected a campaign's results directory or an "
                           "`mpiatlas import` output directory)")
    tidy, partial_tidy = root / "tidy", root / layout.PARTIAL / "tidy"
    if (tidy / layout.IMB_SAMPLES).is_file():
        return View(root, tidy, root / "fits", partial=False, imported=False)
    if (partial_tidy / layout.IMB_SAMPLES).is_file():
        return View(root, partial_tidy, root / layout.PARTIAL / "fits", partial=True, imported=False)
    if (root / layout.IMB_SAMPLES).is_file():
        return View(root, root, root / "fits", partial=False, imported=True)
    raise HistoryError(f"{root}: no {layout.IMB_SAMPLES} in tidy/, {layout.PARTIAL}/tidy/ or the directory itself "
                       "(expected a campaign's results directory or an `mpiatlas import` output directory)")


def build_entry(directory: Path, *, label: str | None = None, system: str | None = None,
                date: str | None = None) -> Entry:
    """The entry ``directory`` adds (fitting an import first when it has no Hockney fits)."""
    view = find_view(directory)
    samples, problem = load_samples(view.tidy)
    if samples is None:
        raise HistoryError(problem)
    notes: list[str] = []
    summary = _summary(view, samples)
    fits = _hockney_fits(view, notes)
    config = _read_json(view.root / layout.CAMPAIGN_CONFIG)
    name = system or _system_name(view, config)
    versions = _stack_versions(view.tidy)
    figures = [*_size_figures(summary, name, versions, view.imported), *_fit_figures(fits, name, versions, view.imported)]
    if view.partial:
        notes.append(f"partial campaign: only the cells that ran ({_cells_ran(view)}) are added")
    when, how = _date(view, date)
    if how:
        notes.append(how)
    return Entry(
        source_key=_data_hash(view.tidy), source=str(view.root.resolve()), date=when, label=label,
        partial=view.partial, config_hash=_json_hash(config), topology_hash=_json_hash(
            _read_json(view.tidy / layout.TOPOLOGIES_TABLE)), stack_versions=versions,
        trust=_trust(view, summary, fits), notes=notes, figures=figures)


def _summary(view: View, samples: pl.DataFrame) -> pl.DataFrame:
    """The campaign's summary table, or (an import) the same statistics computed here."""
    path = view.tidy / layout.IMB_SUMMARY
    if path.is_file():
        return pl.read_parquet(path)

    return summarize(samples)


def _hockney_fits(view: View, notes: list[str]) -> list[HockneyRecord]:
    """The Hockney fits of the view; an import without them is fitted now (and the file written beside it)."""
    path = view.fits / layout.HOCKNEY_FIT
    if path.is_file():
        try:
            return hockney_records(read(path, "hockney"), str(path))
        except (FitsFileError, FitRecordError) as exc:
            raise HistoryError(str(exc)) from exc
    if not view.imported:
        notes.append(f"no {path}: no Hockney figures")
        return []
    try:
        made = fit_all(view.tidy, FitOptions(models=("hockney",)))
    except FitError as exc:
        notes.append(f"not fitted: {exc}")
        return []
    try:
        write_fits(made, view.fits)
        notes.append(f"fitted here (no fits before): {path}")
    except (OSError, FitsFileError) as exc:
        notes.append(f"fitted here, but {path} could not be written ({exc})")
    return list(made.hockney or [])


def _system_name(view: View, config: JsonValue) -> str | None:
    """A campaign's system: its config's campaign name (one config re-run is one system); an import's:
    None here (each row's own label names it)."""
    if view.imported:
        return None
    campaign = config.get("campaign") if isinstance(config, dict) else None
    if isinstance(campaign, dict) and campaign.get("name"):
        return str(campaign["name"])
    return view.root.name


def _stack_versions(tidy: Path) -> dict[str, str | None]:
    """Stack -> the version its cells recorded, from every sample row (those of perturbed launches too:
    a campaign whose launches were all perturbed still ran on its stacks)."""
    wanted = ["stack", "stack_version"]
    tables = [pl.read_parquet(p, columns=wanted) for p in sorted(tidy.rglob("*samples.parquet"))
              if set(wanted) <= set(pl.read_parquet_schema(p))]
    if not tables:
        return {}
    samples = pl.concat(tables)
    rows = samples.filter(pl.col("stack").is_not_null()).group_by("stack").agg(pl.col("stack_version").drop_nulls().first())
    return {str(stack): (None if version is None else str(version)) for stack, version in rows.iter_rows()}


class CellText(NamedTuple):
    """The cell fields a series identity takes from a summary row or a fit (None: not recorded)."""

    label: str | None
    stack: str | None
    transport: str | None
    mapping: str | None
    benchmark: str
    algorithm: str | None
    knobs: str | None  # the knob set and the IMB options, joined
    ranks: int | None


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _identity(cell: CellText, system: str | None, versions: dict[str, str | None], imported: bool,
              parameter: str) -> SeriesIdentity:
    name = cell.label if imported and system is None else system
    return SeriesIdentity(name, cell.stack, versions.get(cell.stack) if cell.stack else None, cell.transport,
                          cell.mapping, cell.benchmark, cell.algorithm, cell.knobs, cell.ranks, parameter)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _column(frame: pl.DataFrame, name: str, dtype: type[pl.DataType]) -> pl.Expr:
    """``name`` as ``dtype``; all null when the table has no such column (an older or imported table)."""
    return pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype=dtype).alias(name)


def _size_figures(summary: pl.DataFrame, system: str | None, versions: dict[str, str | None],
                  imported: bool) -> list[Figure]:
    if summary.height == 0 or TIME not in summary.columns:
        return []
    rows = summary.filter(pl.col(TIME).is_not_null() & pl.col(TIME).is_finite() & (pl.col(TIME) > 0)).select(
        *(_column(summary, c, pl.String) for c in ("label", "stack", "transport", "mapping")),
        pl.col("benchmark").cast(pl.String),  # every summary row has one
        *(_column(summary, c, pl.String) for c in ("algorithm", "knobs", "options")),
        pl.coalesce(_column(summary, "processes", pl.Int64), _column(summary, "np", pl.Int64)).alias("ranks"),
        _column(summary, "bytes", pl.Int64), pl.col(TIME).cast(pl.Float64),
        *(_column(summary, c, pl.Float64) for c in ("t_ci_low_usec", "t_ci_high_usec")),
        _column(summary, "n_reps", pl.Int64))
    out = []
    for label, stack, transport, mapping, benchmark, algorithm, knobs, options, ranks, size, t, low, high, n \
            in rows.iter_rows():
        joined = "; ".join(v for v in (_text(knobs), _text(options)) if v) or None
        cell = CellText(_text(label), _text(stack), _text(transport), _text(mapping), str(benchmark), _text(algorithm),
                        joined, ranks)
        out.append(Figure(_identity(cell, system, versions, imported, TIME), size, t, _finite(low), _finite(high), n))
    return out


def _fit_cell(fit: HockneyRecord) -> CellText:
    # A fit's cell key has no knob set or options: the Hockney fit groups by the cell columns only.
    return CellText(_text(fit.label), _text(fit.stack), _text(fit.transport), _text(fit.mapping), fit.benchmark,
                    _text(fit.algorithm), None, fit.np)


def _fit_figures(fits: list[HockneyRecord], system: str | None, versions: dict[str, str | None],
                 imported: bool) -> list[Figure]:
    out = []
    for fit in fits:
        if not fit.fitted:
            continue
        # Each figure under its own fixed name: a fits file written before the two bandwidth estimands has
        # no asymptotic_bandwidth_MBps, and its one bandwidth_MBps (peak or plateau by the curve's shape)
        # is never filed under either (issue #33): such a campaign adds its times and λ only.
        for parameter, value, (low, high) in ((LATENCY, fit.latency_us, fit.latency_ci_us),
                                              (BANDWIDTH, fit.asymptotic_bandwidth_MBps, fit.asymptotic_bandwidth_ci_MBps),
                                              (PEAK, fit.peak_bandwidth_MBps, fit.peak_bandwidth_ci_MBps)):
            if value is None or not value > 0:
                continue  # an unresolved λ or an unbounded B is no figure to follow
            out.append(Figure(_identity(_fit_cell(fit), system, versions, imported, parameter), None, float(value),
                              _finite(low), _finite(high), fit.n_sizes))
    return out


def _read_json(path: Path) -> JsonValue:
    try:
        document: JsonValue = json.loads(path.read_text())
        return document
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise HistoryError(f"{path}: not readable JSON ({exc})") from exc


def _json_hash(document: JsonValue) -> str | None:
    if document is None:
        return None
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _data_hash(tidy: Path) -> str:
    """sha256 of the samples tables' bytes (names relative to the tidy directory): the measured data itself."""
    digest = hashlib.sha256()
    for path in sorted(tidy.rglob("*samples.parquet")):
        digest.update(str(path.relative_to(tidy)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _date(view: View, given: str | None) -> tuple[str, str | None]:
    """(ISO date, how it was found when not from the campaign's own records)."""
    if given is not None:
        try:
            return datetime.fromisoformat(given).isoformat(), None
        except ValueError as exc:
            raise HistoryError(f"--date {given!r}: expected an ISO date such as 2026-11-30 ({exc})") from exc
    records = _read_json(view.tidy / layout.PROVENANCE_TABLE)
    starts = [str(r["start"]) for r in records if isinstance(r, dict) and r.get("start")] if isinstance(records, list) else []
    if starts:
        return min(starts), None
    mtime = (view.tidy / layout.IMB_SAMPLES).stat().st_mtime
    return (datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds"),
            "date: the samples table's modification time (no cell start recorded; give --date)")


def _trust(view: View, summary: pl.DataFrame, fits: list[HockneyRecord]) -> EntryTrust:
    """How far the entry's figures can be trusted: cells by status, perturbed launches, noisy sizes, fit warnings."""
    out: EntryTrust = {"noisy_sizes": summary.filter(pl.col("quality") == "noisy").height
                           if "quality" in summary.columns else None,
                           "fit_warnings": sum(1 for f in fits if f.ci_warning)}
    cells_path = view.tidy / layout.CELLS_TABLE
    if cells_path.is_file():
        cells = pl.read_parquet(cells_path)
        out["cells"] = dict(sorted(cells.group_by("status").len().iter_rows())) if "status" in cells.columns else None
        out["perturbed"] = cells.filter(pl.col("quality") == "perturbed").height if "quality" in cells.columns else None
    return out


def _cells_ran(view: View) -> str:
    cells_path = view.tidy / layout.CELLS_TABLE
    ran = pl.read_parquet(cells_path, columns=["cell"]).height if cells_path.is_file() else None
    manifest = _read_json(view.root / layout.CELLS_MANIFEST)
    planned = len(manifest) if isinstance(manifest, list) else None
    if ran is None:
        return "their number is not recorded"
    return f"{ran} of {planned} cells" if planned is not None else f"{ran} cells"

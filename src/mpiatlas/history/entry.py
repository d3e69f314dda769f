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
from typing import Any

import polars as pl

from mpiatlas.history.store import Entry, EntryTrust, Figure, HistoryError
from mpiatlas.matrix import layout
from mpiatlas.tables.samples import load_samples
from mpiatlas.stats.aggregate import summarize
from mpiatlas.models.fits import FitError, FitOptions, fit_all, write_fits
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


def _hockney_fits(view: View, notes: list[str]) -> list[dict[str, Any]]:
    """The Hockney fits of the view; an import without them is fitted now (and the file written beside it)."""
    path = view.fits / layout.HOCKNEY_FIT
    if path.is_file():
        try:
            fits: list[dict[str, Any]] = read(path, "hockney")
        except FitsFileError as exc:
            raise HistoryError(str(exc)) from exc
        return fits
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
    return [f.to_json() for f in made.hockney or []]  # the file's view, as read above


def _system_name(view: View, config: Any) -> str | None:
    """A campaign's system: its config's campaign name (one config re-run is one system); an import's:
    None here (each row's own label names it)."""
    if view.imported:
        return None
    if isinstance(config, dict) and isinstance(config.get("campaign"), dict) and config["campaign"].get("name"):
        return str(config["campaign"]["name"])
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


def _text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    return None if value is None or value == "" else str(value)


def _identity(row: dict[str, Any], system: str | None, versions: dict[str, str | None], imported: bool,
              parameter: str) -> tuple[Any, ...]:
    stack = _text(row, "stack")
    knobs = "; ".join(v for v in (_text(row, "knobs"), _text(row, "options")) if v) or None
    ranks = row.get("processes") if row.get("processes") is not None else row.get("np")
    name = _text(row, "label") if imported and system is None else system
    return (name, stack, versions.get(stack) if stack else None, _text(row, "transport"), _text(row, "mapping"),
            str(row["benchmark"]), _text(row, "algorithm"), knobs, None if ranks is None else int(ranks), parameter)


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _size_figures(summary: pl.DataFrame, system: str | None, versions: dict[str, str | None],
                  imported: bool) -> list[Figure]:
    if summary.height == 0 or TIME not in summary.columns:
        return []
    out = []
    for row in summary.filter(pl.col(TIME).is_not_null() & pl.col(TIME).is_finite() & (pl.col(TIME) > 0)).iter_rows(named=True):
        out.append(Figure(_identity(row, system, versions, imported, TIME), row.get("bytes"), float(row[TIME]),
                          _finite(row.get("t_ci_low_usec")), _finite(row.get("t_ci_high_usec")), row.get("n_reps")))
    return out


def _fit_figures(fits: list[dict[str, Any]], system: str | None, versions: dict[str, str | None],
                 imported: bool) -> list[Figure]:
    out = []
    for fit in fits:
        if "error" in fit:
            continue
        # Each figure under its own fixed name: a fits file written before the two bandwidth estimands has
        # no asymptotic_bandwidth_MBps, and its one bandwidth_MBps (peak or plateau by the curve's shape)
        # is never filed under either (issue #33): such a campaign adds its times and λ only.
        for parameter, value, ci in ((LATENCY, fit.get(LATENCY), fit.get("latency_ci_us")),
                                     (BANDWIDTH, fit.get(BANDWIDTH), fit.get("asymptotic_bandwidth_ci_MBps")),
                                     (PEAK, fit.get(PEAK), fit.get("peak_bandwidth_ci_MBps"))):
            if value is None or not value > 0:
                continue  # an unresolved λ or an unbounded B is no figure to follow
            low, high = (ci if isinstance(ci, list) and len(ci) == 2 else (None, None))
            out.append(Figure(_identity(fit, system, versions, imported, parameter), None, float(value),
                              _finite(low), _finite(high), fit.get("n_sizes")))
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise HistoryError(f"{path}: not readable JSON ({exc})") from exc


def _json_hash(document: Any) -> str | None:
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
    starts = [r["start"] for r in records if isinstance(r, dict) and r.get("start")] if isinstance(records, list) else []
    if starts:
        return min(starts), None
    mtime = (view.tidy / layout.IMB_SAMPLES).stat().st_mtime
    return (datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds"),
            "date: the samples table's modification time (no cell start recorded; give --date)")


def _trust(view: View, summary: pl.DataFrame, fits: list[dict[str, Any]]) -> EntryTrust:
    """How far the entry's figures can be trusted: cells by status, perturbed launches, noisy sizes, fit warnings."""
    out: EntryTrust = {"noisy_sizes": summary.filter(pl.col("quality") == "noisy").height
                           if "quality" in summary.columns else None,
                           "fit_warnings": sum(1 for f in fits if f.get("ci_warning"))}
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

"""The report's inputs: the tidy tables and fits of a campaign, read into one plain object.

Inputs may be partially missing; every missing or unreadable input is recorded (``inputs``,
``notes``) so that the report says so rather than silently dropping it. Nothing here draws or
formats: the sections read :class:`ReportData`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from collections.abc import Callable
from typing import TypeVar

import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.report.physical_limits import PhysicalLimits, load_limits
from mpiatlas.stats.quality import UnjudgedTableError, trusted
from mpiatlas.node.topology import Topology, TopologyError, detect
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.stats.aggregate import summarize
from mpiatlas.models.kernel_records import CollFit, GridComparison, PingpongFit
from mpiatlas.models.jacobi_records import JacobiFit
from mpiatlas.models.matsum_records import MatsumFit
from mpiatlas.models.ring_records import RingFit
from mpiatlas.models.fit_records import FitRecordError, HockneyRecord
from mpiatlas.models.json_fields import JsonObject, JsonValue
from mpiatlas.models.fits_files import FILES, problems, schema_name

KERNEL_PREFIX, KERNEL_SUFFIX = layout.KERNEL_TABLE.split("{name}")


# A record type of fits/kernels.json, read by its own from_json.
Record = TypeVar("Record")

@dataclass
class InputFile:
    name: str
    path: str
    state: str  # ok | missing | error
    detail: str = ""


@dataclass(frozen=True)
class PlannedNote:
    """Cells the campaign did not plan, and why (``notes.json``: e.g. Open MPI's IMB, not buildable offline)."""

    what: str
    why: str
    cells: int


@dataclass(frozen=True)
class TuningOutput:
    """What ``mpiatlas tune`` wrote (``--tuning DIR``): decision.json and validation.json as the
    tuning section reads them (JSON objects; the tuning package owns their shape), and the texts
    of the exported files by name."""

    dir: str
    decision: JsonObject
    validation: JsonObject | None
    files: dict[str, str]


@dataclass
class ReportData:
    title: str
    generated: datetime
    tidy_dir: Path | None = None
    fits_dir: Path | None = None
    limits_path: Path | None = None  # the campaign's limits.json (mpiatlas report --limits); None: not given
    limits: PhysicalLimits | None = None
    limits_error: str | None = None  # why the given limits file could not be used
    tuning: TuningOutput | None = None  # mpiatlas tune's output (--tuning DIR): see _load_tuning
    # The trusted views (stats.quality.trusted: no perturbed or unknown launch): every median, chart,
    # finding, fit and model of the report reads these. The *_all tables keep every launch, for the
    # sections that count launches (the cell table, the header's checks) and nothing else.
    samples: pl.DataFrame | None = None
    samples_all: pl.DataFrame | None = None
    summary: pl.DataFrame | None = None
    cells: pl.DataFrame | None = None
    provenance: list[JsonObject] | None = None  # tidy provenance.json's records, each a JSON object
    kernels: dict[str, pl.DataFrame] = field(default_factory=dict)  # kernel name -> its trusted rows
    kernels_all: dict[str, pl.DataFrame] = field(default_factory=dict)  # kernel name -> its (non-empty) table
    planned: list[PlannedNote] = field(default_factory=list)
    fits: dict[str, JsonValue] = field(default_factory=dict)  # fits file stem -> its document, but hockney.json:
    hockney_fits: list[HockneyRecord] | None = None  # its entries as typed records (None: no such file)
    inputs: list[InputFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # input-level problems for the header
    summary_derived: bool = False
    topology_spec: str | None = None  # mpiatlas report --topology (XML or synthetic); None: this machine's
    _topology: tuple[Topology | None, str | None] | None = None  # (topology, why none), read on first use

    def node_topology(self) -> Topology | None:
        """The measured node's topology (:class:`mpiatlas.node.topology.Topology`) or None: the one
        given (``topology_spec``), else this machine's, detected once on first use (the models check
        that the cells ran on it). ``topology_problem`` says why there is none."""
        if self._topology is None:
            try:
                self._topology = (read_topology(self.topology_spec) if self.topology_spec else detect(), None)
            except (TopologyError, OSError, ValueError) as exc:
                self._topology = (None, f"no topology of the measured node ({exc})")
        return self._topology[0]

    @property
    def topology_problem(self) -> str | None:
        return self._topology[1] if self._topology is not None else None

    @property
    def hockney(self) -> list[HockneyRecord] | None:
        return self.hockney_fits

    def kernel_table(self, name: str) -> pl.DataFrame | None:
        """The trusted rows of ``kernel_<name>.parquet`` when it exists and has rows."""
        return self.kernels.get(name)

    def _kernel_records(self, name: str, read: Callable[[JsonValue, str, str], Record]) -> list[Record] | None:
        """fits/kernels.json's ``name`` entries read as records (None when the file or the key is
        absent); an entry not of that shape is left out (the schema check on load names it)."""
        entries = self.kernel_fits(name)
        if entries is None:
            return None
        out = []
        for i, entry in enumerate(entries):
            try:
                out.append(read(entry, f"fits/{layout.KERNELS_FIT}", f"$.{name}[{i}]"))
            except FitRecordError:
                continue
        return out

    def kernel_hockney_fits(self, name: str) -> list[HockneyRecord] | None:
        """The Hockney part of fits/kernels.json's ``name`` entries (pingpong: the kernel's λ and B,
        fitted as IMB PingPong's are)."""
        return self._kernel_records(name, HockneyRecord.from_json)

    def pingpong_fits(self) -> list[PingpongFit] | None:
        """fits/kernels.json's pingpong entries."""
        return self._kernel_records("pingpong", PingpongFit.from_json)

    def matsum_grids(self) -> list[GridComparison] | None:
        """fits/kernels.json's matsum_grids."""
        return self._kernel_records("matsum_grids", GridComparison.from_json)

    def ring_fits(self) -> list[RingFit] | None:
        """fits/kernels.json's ring entries."""
        return self._kernel_records("ring", RingFit.from_json)

    def matsum_fits(self) -> list[MatsumFit] | None:
        """fits/kernels.json's matsum entries."""
        return self._kernel_records("matsum", MatsumFit.from_json)

    def jacobi_fits(self) -> list[JacobiFit] | None:
        """fits/kernels.json's jacobi entries."""
        return self._kernel_records("jacobi", JacobiFit.from_json)

    def coll_fits(self) -> list[CollFit] | None:
        """fits/kernels.json's coll entries."""
        return self._kernel_records("coll", CollFit.from_json)

    def kernel_fits(self, name: str) -> list[JsonObject] | None:
        """The ``name`` entries of fits/kernels.json (None when the file or the key is absent)."""
        fits = self.fits.get("kernels")
        if not isinstance(fits, dict):
            return None
        entries = fits.get(name)
        return [f for f in entries if isinstance(f, dict)] if isinstance(entries, list) else None


# -- readers ---------------------------------------------------------------------------------


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


def _read_json(path: Path, name: str, data: ReportData) -> JsonValue:
    if not path.is_file():
        data.inputs.append(InputFile(name, str(path), "missing"))
        return None
    try:
        obj: JsonValue = json.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001
        data.inputs.append(InputFile(name, str(path), "error", f"{type(exc).__name__}: {exc}"))
        return None
    n = f"{len(obj)} entries" if isinstance(obj, (list, dict)) else type(obj).__name__
    data.inputs.append(InputFile(name, str(path), "ok", n))
    return obj


def planned_notes(obj: JsonValue, source: str = layout.NOTES) -> tuple[list[PlannedNote], list[str]]:
    """``notes.json`` -> the notes, merged by (what, why), and one message per malformed entry.

    Expected: a JSON list of ``{"what": str, "why": str, "cells": int >= 0}``.
    """
    if not isinstance(obj, list):
        return [], [f"{source}: expected a JSON list of {{what, why, cells}} objects, got {type(obj).__name__}."]
    cells: dict[tuple[str, str], int] = {}
    errors: list[str] = []
    for i, entry in enumerate(obj):
        note = _note(entry)
        if isinstance(note, str):
            errors.append(f"{source}: entry {i}: {note}; ignored.")
            continue
        key = (note.what, note.why)
        cells[key] = cells.get(key, 0) + note.cells
    return [PlannedNote(what, why, n) for (what, why), n in cells.items()], errors


def _note(entry: JsonValue) -> PlannedNote | str:
    """One entry of notes.json as a note, or what is wrong with it."""
    if not isinstance(entry, dict):
        return f"expected an object, got {type(entry).__name__}"
    what, why, n = entry.get("what"), entry.get("why"), entry.get("cells")
    if not isinstance(what, str) or not what.strip():
        return f"'what' must be a non-empty string, got {what!r}"
    if not isinstance(why, str) or not why.strip():
        return f"'why' must be a non-empty string, got {why!r}"
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return f"'cells' must be an integer >= 0, got {n!r}"
    return PlannedNote(what, why, n)


def _trusted_view(df: pl.DataFrame, path: Path, data: ReportData) -> pl.DataFrame | None:
    """``df``'s trusted rows (stats.quality.trusted), or None with the reason in the header's notes when
    the table cannot say which launches were perturbed."""
    try:
        return trusted(df, str(path))
    except UnjudgedTableError as exc:
        data.notes.append(f"{exc}: left out of every table, chart, finding and model.")
        return None


def _read_kernel_tables(tidy: Path, data: ReportData) -> None:
    for path in sorted(tidy.glob(f"{KERNEL_PREFIX}*{KERNEL_SUFFIX}")):
        name = path.name[len(KERNEL_PREFIX):len(path.name) - len(KERNEL_SUFFIX)]
        df = _read_parquet(path, f"kernel:{name}", data)
        if df is not None and df.height:
            data.kernels_all[name] = df
            view = _trusted_view(df, path, data)
            if view is not None:
                data.kernels[name] = view


def _read_provenance(tidy: Path, data: ReportData) -> None:
    prov = _read_json(tidy / layout.PROVENANCE_TABLE, "provenance", data)
    if prov is None:
        return
    if isinstance(prov, dict):
        prov = [prov]
    good = [p for p in prov if isinstance(p, dict)] if isinstance(prov, list) else []
    if not isinstance(prov, list) or len(good) != len(prov):
        data.notes.append(f"{layout.PROVENANCE_TABLE}: entries that are not JSON objects were ignored "
                          f"({(len(prov) if isinstance(prov, list) else 1) - len(good)}).")
    data.provenance = good


def _derive_summary(data: ReportData) -> None:
    """The summary from the samples, by the pipeline's own :func:`mpiatlas.stats.aggregate.summarize`."""
    assert data.samples is not None
    try:
        derived = summarize(data.samples)
    except Exception as exc:  # noqa: BLE001 - a samples table without the expected columns is reported
        data.notes.append(f"{layout.IMB_SUMMARY} is missing and could not be recomputed from the samples: "
                          f"{type(exc).__name__}: {exc}")
        return
    data.summary, data.summary_derived = derived, True
    data.notes.append(f"{layout.IMB_SUMMARY} is missing: medians and their confidence intervals were recomputed "
                      "from the samples.")


def _load_tidy(tidy: Path, data: ReportData) -> None:
    data.tidy_dir = tidy
    if not tidy.is_dir():
        data.notes.append(f"Tidy directory {tidy} does not exist.")
    data.samples_all = _read_parquet(tidy / layout.IMB_SAMPLES, "samples", data)
    data.samples = None if data.samples_all is None else _trusted_view(data.samples_all, tidy / layout.IMB_SAMPLES, data)
    data.summary = _read_parquet(tidy / layout.IMB_SUMMARY, "summary", data)
    data.cells = _read_parquet(tidy / layout.CELLS_TABLE, "cells", data)
    _read_provenance(tidy, data)
    _read_kernel_tables(tidy, data)
    if (tidy / layout.NOTES).is_file():  # optional: absent = every cell was planned
        obj = _read_json(tidy / layout.NOTES, "notes", data)
        if obj is not None:
            data.planned, errors = planned_notes(obj)
            data.notes.extend(errors)
    if data.summary is None and data.samples is not None:
        _derive_summary(data)


def _load_fits(fits_dir: Path, data: ReportData) -> None:
    data.fits_dir = fits_dir
    if not fits_dir.is_dir():
        data.inputs.append(InputFile("fits", str(fits_dir), "missing"))
        return
    files = sorted(fits_dir.glob("*.json"))
    if not any(f.stem == "hockney" for f in files):
        data.inputs.append(InputFile("fits:hockney", str(fits_dir / layout.HOCKNEY_FIT), "missing"))
    for f in files:
        obj = _read_json(f, f"fits:{f.stem}", data)
        if obj is not None:
            data.fits[f.stem] = obj
            _check_fits_schema(f, obj, data)
    hock = data.fits.pop("hockney", None)
    if hock is None:
        return
    if not isinstance(hock, list):
        data.notes.append(f"fits/{layout.HOCKNEY_FIT} is not a JSON array: ignored.")
        return
    good = [h for h in hock if isinstance(h, dict) and h.get("label") is not None and h.get("benchmark")]
    if len(good) != len(hock):
        data.notes.append(f"fits/{layout.HOCKNEY_FIT}: {len(hock) - len(good)} entries without label/benchmark "
                          "ignored.")
    data.hockney_fits = []
    for i, entry in enumerate(good):
        try:
            data.hockney_fits.append(HockneyRecord.from_json(entry, f"fits/{layout.HOCKNEY_FIT}", f"$[{i}]"))
        except FitRecordError as exc:  # shown as far as it goes: the other entries
            data.notes.append(f"{exc}: entry ignored.")


def _check_fits_schema(path: Path, obj: JsonValue, data: ReportData) -> None:
    """A fits file that departs from its schema is still shown as far as it goes (the sections
    read what they can); the page says where it departs."""
    model = next((m for m, name in FILES.items() if name == path.name), None)
    found = problems(obj, model) if model is not None else []
    if model is not None and found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        data.notes.append(f"fits/{path.name} does not follow {schema_name(model)}: {found[0]}{more}.")


def _load_limits(path: Path, data: ReportData) -> None:
    data.limits_path = path
    try:
        data.limits = load_limits(path)
    except ValueError as exc:  # LimitsError: the file is missing or malformed, and the message names it
        data.limits_error = str(exc)
        state = "missing" if not path.is_file() else "error"
        data.inputs.append(InputFile("limits", str(path), state, "" if state == "missing" else str(exc)))
        return
    data.inputs.append(InputFile("limits", str(path), "ok", f"{len(data.limits.rates)} levels"))


def report_time() -> datetime:
    """Now, or ``SOURCE_DATE_EPOCH`` (reproducible builds)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    return datetime.fromtimestamp(int(epoch), UTC) if epoch and epoch.isdigit() else datetime.now(UTC)


def load_data(
    tidy_dir: str | Path | None,
    fits_dir: str | Path | None,
    title: str | None = None,
    now: datetime | None = None,
    limits: str | Path | None = None,
    tuning: str | Path | None = None,
    topology: str | None = None,
) -> ReportData:
    """Read whatever inputs exist; record the missing and unreadable ones. ``limits``: the
    campaign's physical limits file (none given: the report has no limits and says so);
    ``tuning``: the directory of ``mpiatlas tune`` (none: no Tuning section); ``topology``: the
    measured node's (hwloc XML or synthetic; none: this machine's, used if the cells ran on it)."""
    data = ReportData(title=title or "mpiatlas report", generated=now or report_time(), topology_spec=topology)
    if tidy_dir is None:
        data.notes.append("No tidy directory was given: no measurements, cells or provenance.")
    else:
        _load_tidy(Path(tidy_dir), data)
    if fits_dir is None:
        data.notes.append("No fits directory was given: no fitted models.")
    else:
        _load_fits(Path(fits_dir), data)
    if limits is not None:
        _load_limits(Path(limits), data)
    if tuning is not None:
        _load_tuning(Path(tuning), data)
    return data


def _load_tuning(path: Path, data: ReportData) -> None:
    """decision.json, validation.json (beside it or in validation/) and the exported files' texts."""
    try:
        decision = json.loads((path / "decision.json").read_text())
    except (OSError, ValueError) as exc:
        data.inputs.append(InputFile("tuning", str(path), "missing" if isinstance(exc, OSError) else "error", str(exc)))
        return
    validation = None
    for candidate in (path / "validation" / "validation.json", path / "validation.json"):
        if candidate.is_file():
            try:
                validation = json.loads(candidate.read_text())
            except ValueError as exc:
                data.notes.append(f"{candidate}: unreadable ({exc})")
            break
    # The exported files: every file of the directory but the decision's own records.
    files = {f.name: f.read_text(errors="replace") for f in sorted(path.iterdir())
             if f.is_file() and f.suffix in (".rules", ".env", ".json", ".md")
             and f.name not in ("decision.json", "validation.json")}
    if not isinstance(decision, dict):
        data.inputs.append(InputFile("tuning", str(path), "error", "decision.json: expected a JSON object"))
        return
    if validation is not None and not isinstance(validation, dict):
        data.notes.append(f"{path}: validation.json is not a JSON object: ignored")
        validation = None
    data.tuning = TuningOutput(str(path), decision, validation, files)
    series = decision.get("series", [])
    data.inputs.append(InputFile("tuning", str(path), "ok", f"{len(series) if isinstance(series, list) else 0} series"
                                 + (", validated" if validation else "")))

"""Every performance model of a campaign fitted in one call: :func:`fit_all` -> :class:`Fits`.

The models (in the order fitted): the piecewise Hockney fits of IMB PingPong/PingPing
(:mod:`mpiatlas.models.hockney`), the kernel models (ring with its region-aware variant, matsum,
jacobi, pingpong, coll: :mod:`mpiatlas.models.kernels`), which take λ and B from those Hockney
fits, and the α-β models of Alltoall/Allgather over nodes (:mod:`mpiatlas.models.alphabeta`)
against the nominal link bandwidth. :func:`write_fits` writes one file per model, each checked
against its documented schema (:mod:`mpiatlas.models.fits_files`). ``mpiatlas fit`` and the
workflow's fit rule both call these; nothing is printed and captured.

Only the standard library at import time: the CLI imports this module to build its options
(:class:`FitOptions` is where the options of a fit are defined once); polars and the models are
imported by the functions that fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from mpiatlas.models.alphabeta_records import AlphaBetaFits, Network
from mpiatlas.models.fit_records import Fit, FitRecordError, HockneyRecord, JsonValue, hockney_document, hockney_records
from mpiatlas.models.json_fields import JsonObject
from mpiatlas.models.fits_files import FILES, FitsFileError, MODELS, read
from mpiatlas.models.fits_files import write as write_documents
from mpiatlas.matrix.layout import CELLS_TABLE, PROVENANCE_TABLE, TOPOLOGIES_TABLE
from mpiatlas.models.kernels import fit_kernels, load_kernel_tables
from mpiatlas.models.kernel_records import KernelFits
from mpiatlas.node.topology import TopologyError, Topology
from mpiatlas.node.topology_record import read_topologies
from mpiatlas.tables.samples import CELL_COLUMNS, load_samples
from mpiatlas.models.alphabeta import ALPHABETA_BENCHMARKS, fit_alphabeta_table
from mpiatlas.models.hockney import HOCKNEY_BENCHMARKS, fit_hockney_table
from mpiatlas.models.ring_regions import region_inputs_from

if TYPE_CHECKING:
    from mpiatlas.models.region_latency import RegionTable


class FitError(ValueError):
    """The fits cannot be made from this input or these options; the message says why."""


@dataclass(frozen=True)
class FitOptions:
    """What a fit may be told. The fields with a ``flag`` are ``mpiatlas fit``'s options of the same
    name (the CLI builds them from here)."""

    bandwidth_gbit_s: float | None = field(default=None, metadata={
        "flag": "--bandwidth-gbit-s", "metavar": "GBIT",
        "help": "nominal link bandwidth b in Gbit/s (config network.bandwidth_gbit_s); the α-β models need it"})
    network_name: str = field(default="nominal link", metadata={
        "flag": "--network-name", "metavar": "NAME", "help": "label of the link (config network.name)"})
    seed: int = field(default=0, metadata={"flag": "--seed", "metavar": "N", "help": "bootstrap RNG seed"})
    # Which models, and on which benchmarks (None: every benchmark the model applies to).
    models: tuple[str, ...] = MODELS
    hockney_benchmarks: tuple[str, ...] | None = None
    alphabeta_benchmarks: tuple[str, ...] | None = None
    # λ and B for the kernel models when Hockney is not fitted in the same call (a hockney.json's
    # entries); None: fit the PingPong samples for them.
    hockney_fits: tuple[HockneyRecord, ...] | None = None
    # A region latency table (mpiatlas predict's CSV) pricing every ring hop instead of the
    # campaign's per-region PingPong fits; None: those fits.
    region_table: RegionTable | None = None


@dataclass
class TidyTables:
    """What the fits read from a tidy directory: the IMB samples, the kernel tables, and the cells
    table and provenance records the region-aware ring model places its hops with."""

    where: str
    samples: pl.DataFrame | None
    samples_problem: str = ""
    kernels: dict[str, pl.DataFrame | None] = field(default_factory=dict)
    cells: pl.DataFrame | None = None
    provenance: list[JsonObject] = field(default_factory=list)  # provenance.json's records (one per cell)
    topologies: dict[str, Topology] = field(default_factory=dict)  # host -> the node topology it recorded

    @classmethod
    def load(cls, directory: str | Path) -> TidyTables:
        directory = Path(directory)
        samples, problem = load_samples(directory)
        cells_path, prov_path = directory / CELLS_TABLE, directory / PROVENANCE_TABLE
        try:
            provenance = json.loads(prov_path.read_text()) if prov_path.is_file() else []
            topologies = read_topologies(directory / TOPOLOGIES_TABLE)
        except ValueError as exc:
            raise FitError(f"{prov_path}: not JSON ({exc})") from exc
        except TopologyError as exc:
            raise FitError(str(exc)) from exc
        return cls(str(directory), samples, problem, load_kernel_tables(directory),
                   pl.read_parquet(cells_path) if cells_path.is_file() else None, _records(provenance, prov_path),
                   topologies)


def _records(document: JsonValue, path: Path) -> list[JsonObject]:
    """provenance.json's records: an array of JSON objects, else a :class:`FitError` naming the file."""
    if not isinstance(document, list):
        raise FitError(f"{path}: expected an array of provenance records, got {type(document).__name__}")
    for i, record in enumerate(document):
        if not isinstance(record, dict):
            raise FitError(f"{path}: [{i}]: expected a provenance record (a JSON object), got {record!r}")
    return [r for r in document if isinstance(r, dict)]


@dataclass
class Fits:
    """Each model's fit, as its fits file holds it (None: that model was not asked for), and what a
    reader of the run should be told (groups not fitted, fallbacks), one line each."""

    hockney: list[HockneyRecord] | None = None
    kernels: KernelFits | None = None
    alphabeta: AlphaBetaFits | None = None
    problems: list[str] = field(default_factory=list)

    def documents(self) -> dict[str, JsonValue]:
        """model -> the document of its fits file, for every model fitted, in fitting order (the
        typed records become JSON here, at the file boundary)."""
        found: dict[str, JsonValue] = {
            "hockney": None if self.hockney is None else hockney_document(self.hockney),
            "kernels": None if self.kernels is None else self.kernels.to_json(),
            "alphabeta": None if self.alphabeta is None else self.alphabeta.to_json()}
        return {m: found[m] for m in MODELS if found[m] is not None}

    def kernel(self, name: str) -> list[JsonValue]:
        """One kernel model's entries (ring, matsum, matsum_grids, jacobi, pingpong, coll) as its file
        holds them; none when the kernel models were not fitted."""
        return [] if self.kernels is None else self.kernels.entries(name)


def read_fits(fits_dir: str | Path) -> Fits:
    """The fits files under ``fits_dir`` back as :class:`Fits`, each checked against its schema
    (a model whose file is absent is None; a bad file raises FitsFileError naming file and key)."""
    paths = {m: Path(fits_dir) / FILES[m] for m in MODELS}
    found = {m: read(path, m) for m, path in paths.items() if path.is_file()}
    hockney, kernels, alphabeta = found.get("hockney"), found.get("kernels"), found.get("alphabeta")
    try:
        return Fits(hockney=None if hockney is None else hockney_records(hockney, str(paths["hockney"])),
                    kernels=None if kernels is None else KernelFits.from_json(kernels, str(paths["kernels"])),
                    alphabeta=None if alphabeta is None else AlphaBetaFits.from_json(alphabeta, str(paths["alphabeta"])))
    except FitRecordError as exc:  # the schema holds, the record does not: still a bad file, named
        raise FitsFileError(str(exc)) from exc


def fit_all(tidy: str | Path | TidyTables, options: FitOptions | None = None) -> Fits:
    """Fit every model of ``options.models`` to a tidy directory (or tables already loaded).

    Raises :class:`FitError` before fitting anything when an input or option a model needs is
    missing (no samples table, no nominal bandwidth for the α-β models): no half set of fits."""
    options = options or FitOptions()
    unknown = [m for m in options.models if m not in MODELS]
    if unknown:
        raise FitError(f"no model {', '.join(unknown)}; models: {', '.join(MODELS)}")
    tables = tidy if isinstance(tidy, TidyTables) else TidyTables.load(tidy)
    needs_samples = [m for m in ("hockney", "alphabeta") if m in options.models]
    if needs_samples and tables.samples is None:
        raise FitError(tables.samples_problem)
    network = _network(options) if "alphabeta" in options.models else None
    alphabeta_benchmarks = _alphabeta_benchmarks(options) if network is not None else []
    fits = Fits()
    if "hockney" in options.models:
        fits.hockney = _fit_hockney(tables, options, fits.problems)
    if "kernels" in options.models:
        hockney = fits.hockney if fits.hockney is not None else _hockney_for_kernels(tables, options)
        fits.kernels = _fit_kernels(tables, hockney, options, fits.problems)
    if network is not None:
        fits.alphabeta = _fit_alphabeta(tables, network, alphabeta_benchmarks, options, fits.problems)
    return fits


def write_fits(fits: Fits, out_dir: str | Path) -> list[Path]:
    """Each fitted model's file under ``out_dir`` (fits_files.FILES), validated against its schema;
    a document that fails leaves no file written. Returns the paths written."""
    return write_documents(fits.documents(), out_dir)


# -- the models ---------------------------------------------------------------------------------


def _network(options: FitOptions) -> Network:
    if options.bandwidth_gbit_s is None:
        raise FitError("the α-β models need the nominal link bandwidth (bandwidth_gbit_s, Gbit/s; "
                       "config network.bandwidth_gbit_s)")
    try:
        return Network(options.network_name, options.bandwidth_gbit_s)
    except ValueError as exc:
        raise FitError(f"bandwidth_gbit_s: {exc}") from exc


def _cell_keys(samples: pl.DataFrame) -> list[str]:
    return ["label", *(c for c in CELL_COLUMNS if c in samples.columns)]


def _fit_hockney(tables: TidyTables, options: FitOptions, problems: list[str]) -> list[HockneyRecord]:
    samples = tables.samples
    assert samples is not None  # fit_all checked
    if samples.height == 0:
        problems.append(f"{tables.samples_problem}: nothing fitted")
        return []
    benchmarks = list(options.hockney_benchmarks or HOCKNEY_BENCHMARKS)
    results = fit_hockney_table(samples, _cell_keys(samples), benchmarks=benchmarks, seed=options.seed)
    if not results:
        # Samples exist but none to fit (e.g. a collectives-only campaign): an empty, valid answer.
        problems.append(f"no {'/'.join(benchmarks)} samples under {tables.where}: nothing fitted")
    problems += [f"{cell_name(r)} {r.benchmark}: not fitted: {r.error}" for r in results if r.error is not None]
    return results


def _hockney_for_kernels(tables: TidyTables, options: FitOptions) -> list[HockneyRecord]:
    """λ and B of the kernel models when Hockney is not fitted in the same call."""
    if options.hockney_fits is not None:
        return list(options.hockney_fits)

    if tables.samples is None:
        return []
    return fit_hockney_table(tables.samples, _cell_keys(tables.samples), benchmarks=["PingPong"], seed=options.seed)


def _fit_kernels(tables: TidyTables, hockney: list[HockneyRecord], options: FitOptions,
                 problems: list[str]) -> KernelFits:
    if not any(t is not None and t.height for t in tables.kernels.values()):
        problems.append(f"no kernel_*.parquet rows under {tables.where}: nothing fitted")
    ring_regions = None
    if tables.kernels.get("ring") is not None:  # hop regions of the ring cells' placements, per-region λ, B

        ring_regions = region_inputs_from(tables.cells, tables.provenance, hockney, table=options.region_table,
                                          missing=f"no {CELLS_TABLE} under {tables.where}",
                                          topologies=tables.topologies)
    result = fit_kernels(tables.kernels, hockney, seed=options.seed, ring_regions=ring_regions)
    problems += [f"kernels: {note}" for note in result.notes]
    return result


def _alphabeta_benchmarks(options: FitOptions) -> list[str]:
    benchmarks = list(dict.fromkeys(options.alphabeta_benchmarks or ALPHABETA_BENCHMARKS))
    unknown = [b for b in benchmarks if b not in ALPHABETA_BENCHMARKS]
    if unknown:
        raise FitError(f"no α-β model for {', '.join(unknown)}; models: {', '.join(ALPHABETA_BENCHMARKS)}")
    return benchmarks


def _fit_alphabeta(tables: TidyTables, network: Network, benchmarks: list[str], options: FitOptions,
                   problems: list[str]) -> AlphaBetaFits:
    assert tables.samples is not None  # fit_all checked
    result = fit_alphabeta_table(tables.samples, network, benchmarks=benchmarks, seed=options.seed)
    problems += [f"alphabeta: {note}" for note in result.notes]
    problems += [f"alphabeta: {cell_name(f)} {f.benchmark} ppn={f.ppn}: not fitted: {f.error}"
                 for f in result.fits if f.error is not None]
    if not result.fits:
        problems.append(f"no multi-node {'/'.join(benchmarks)} samples under {tables.where}: nothing fitted")
    return result


def cell_name(fit: Fit) -> str:
    """How a fit's cell is named in messages: its label (with np and algorithm, which a pipeline
    label leaves out), else its cell columns."""
    if fit.label is None:
        return "/".join(f"{c}={v}" for c in CELL_COLUMNS if (v := getattr(fit, c)) is not None) or "(unlabelled)"
    extra = [f"{c}={v}" for c in ("np", "algorithm") if (v := getattr(fit, c)) is not None]
    return " ".join([fit.label, *extra])


__all__ = [
    "FILES",
    "MODELS",
    "FitError",
    "FitOptions",
    "Fits",
    "FitsFileError",
    "TidyTables",
    "cell_name",
    "fit_all",
    "read_fits",
    "write_fits",
]

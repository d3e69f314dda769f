"""Measured collectives set against the region model's prediction, per process count.

For every group of series that share a region table and a placement (a campaign label: stack,
transport, mapping, options, knobs) and a collective, each algorithm measured at two process counts
or more is predicted at one message size (:func:`pick_size`: 4 B where every point has it, else the
smallest positive size they share) in two ways:

* **uncalibrated**: :func:`mpiatlas.models.collective_regions.predict`, the region table's latencies
  alone, ``completion_us`` (when the last rank has its data: the studies' quantity, as
  tests/test_predict_orfeo.py quotes it);
* **measured o and g** (only where the campaign ran loggp kernel cells of the group's stack,
  transport and regions): :func:`mpiatlas.models.loggp.predict` with the region table's λ and B
  and the o and g measured per region (:mod:`mpiatlas.stats.region_loggp`), nothing fitted,
  ``rank_mean``;
* **calibrated** (only where the group measured two modelled algorithms or more):
  :func:`mpiatlas.models.loggp_fit.predict_held_out`, LogGP fitted on the group's *other*
  algorithms (leave-one-algorithm-out), ``rank_mean`` (the mean over ranks, IMB's t_avg and OSU's
  Avg Latency); runs a ``perturbed`` column flags (:mod:`.perturbed_runs`) are not calibrated on.

The error at one P is ``(predicted − measured) / measured`` (:mod:`.prediction_errors`).
:func:`compare` works on any measurements (the ORFEO OSU imports in the tests);
:func:`campaign_comparison` builds its inputs from a campaign's tidy tables: the summary's
collectives, the PingPong Hockney fits per region (:func:`.ring_regions.region_inputs_from`, the
ring model's tables) and each P's placement from its own cell: each rank's recorded host and cpus
(the binding the launch reported, else the planned pins; ranks sharing one cpu set spread over it) on
the topology its node recorded
(``topologies.json``; this machine's only when the cells ran on it). Whatever is not predicted is
a note saying why, once per reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import polars as pl

from mpiatlas.models import collective_regions as latency_only
from mpiatlas.models import loggp
from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.loggp_fit import Measured, predict_held_out
from mpiatlas.models.prediction_errors import error_summary
from mpiatlas.matrix.cells import fills_nodes
from mpiatlas.models.region_latency import Placement, RegionTable, with_loggp
from mpiatlas.node.topology import Topology
from mpiatlas.models.ring_regions import cell_label, cell_placement, rank_order, region_inputs_from, topology_mismatch
from mpiatlas.stats.region_loggp import loggp_by_series

__all__ = [
    "POINT_COLUMNS",
    "SUMMARY_COLUMNS",
    "Comparison",
    "OwnPlacements",
    "SeriesInputs",
    "campaign_comparison",
    "compare",
    "pick_size",
    "series_placements",
]

LATENCY_BYTES = 4
MEASURED_COLUMNS = ("group", "collective", "algorithm", "np", "bytes", "measured_us")
POINT_COLUMNS = (*MEASURED_COLUMNS, "predicted_us", "error", "loggp_us", "loggp_error", "calibrated_us",
                 "calibrated_error")
# Per (group, collective, algorithm): error_summary's figures over P, region model, measured o/g, calibrated.
_FIGURES = ("median_abs", "median_signed", "worst_abs", "worst_np")
_PREFIXES = ("", "loggp_", "calibrated_")
_SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "group": pl.String(), "collective": pl.String(), "algorithm": pl.String(), "bytes": pl.Int64(),
    "points": pl.Int64(),
    **{f"{prefix}{f}": pl.Int64() if f == "worst_np" else pl.Float64() for prefix in _PREFIXES for f in _FIGURES},
    "calibrated_on": pl.String(),
}  # fmt: skip
SUMMARY_COLUMNS = tuple(_SUMMARY_SCHEMA)
CELL_COLUMNS = ("cell", "status", "benchmark", "region", "requested_pins", "stack", "transport", "mapping")
_SCHEMA: dict[str, pl.DataType] = {
    "group": pl.String(), "collective": pl.String(), "algorithm": pl.String(), "np": pl.Int64(),
    "bytes": pl.Int64(), "measured_us": pl.Float64(), "predicted_us": pl.Float64(), "error": pl.Float64(),
    "loggp_us": pl.Float64(), "loggp_error": pl.Float64(), "calibrated_us": pl.Float64(),
    "calibrated_error": pl.Float64(),
}  # fmt: skip



class PointRow(TypedDict):
    """One row of Comparison.points (``_SCHEMA``): a measured (group, collective, algorithm, P) and its predictions."""

    group: str
    collective: str
    algorithm: str
    np: int
    bytes: int
    measured_us: float
    predicted_us: float | None  # the region model, uncalibrated
    error: float | None
    loggp_us: float | None  # LogGP with the o and g measured per region
    loggp_error: float | None
    calibrated_us: float | None  # leave-one-algorithm-out
    calibrated_error: float | None


# One figure of a summary row: error_summary's, or None where nothing was predicted.
SummaryFigure = float | int | None

# Reasons a series is not predicted (the keys of Comparison.notes, each said once).
SINGLE_P = "measured at one process count only"
NOT_MODELLED = "algorithm not modelled (the models build Open MPI 4.1 coll_tuned's schedules and MPICH's scatter-allgather Bcast)"
NO_TABLE = "no region table (no PingPong Hockney fit per region for this stack/transport)"
NO_PLACEMENT = "no placement (no topology of the cells' node, or no pins recorded)"
NOT_OMPI_DEFAULT = "'default' of a stack other than Open MPI (its decision rules are not modelled)"
MODEL_FAILED = "the model could not price it"


@dataclass(frozen=True)
class SeriesInputs:
    """What prices one group: its region table and the placement of its largest P; ``measured``: the
    table with the o and g the loggp kernel measured per region (None: the campaign measured none)."""

    table: RegionTable
    placement: Placement
    measured: RegionTable | None = None


@dataclass
class Comparison:
    points: pl.DataFrame  # POINT_COLUMNS: one row per (group, algorithm, P)
    summary: pl.DataFrame  # SUMMARY_COLUMNS: median |error| per (group, algorithm)
    notes: dict[str, list[str]] = field(default_factory=dict)  # reason -> what it concerns

    def note_lines(self) -> list[str]:
        return [f"{why}: {', '.join(sorted(set(what)))}" for why, what in self.notes.items()]


def pick_size(sizes_per_point: Sequence[set[int]]) -> int | None:
    """4 B when every point measured it, else the smallest positive size they all have (None: none)."""
    if not sizes_per_point:
        return None
    common = set.intersection(*sizes_per_point)
    positive = sorted(b for b in common if b > 0)
    if LATENCY_BYTES in common:
        return LATENCY_BYTES
    return positive[0] if positive else None


def _error(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else (predicted - measured) / measured


def compare(measured: pl.DataFrame, inputs: Mapping[str, SeriesInputs], *, calibrate: bool = True,
            notes: dict[str, list[str]] | None = None) -> Comparison:  # fmt: skip
    """Uncalibrated and leave-one-algorithm-out predictions of ``measured`` (``MEASURED_COLUMNS``,
    one size per group already chosen, ``measured_us`` > 0) from each group's ``inputs``. An optional
    boolean ``perturbed`` column (:func:`.perturbed_runs.perturbed_launches`) keeps the runs it flags out of
    every calibration; they are still predicted and compared."""
    notes = {} if notes is None else notes
    lacking = [c for c in MEASURED_COLUMNS if c not in measured.columns]
    if lacking:
        raise ValueError(f"measurements lack column(s) {', '.join(lacking)}; expected {', '.join(MEASURED_COLUMNS)}")
    rows: list[PointRow] = []
    for (group, coll), g in measured.sort("group", "collective", "algorithm", "np").group_by(
            ["group", "collective"], maintain_order=True):  # fmt: skip
        rows += _group_rows(str(group), str(coll).lower(), g, inputs.get(str(group)), calibrate, notes)
    points = pl.DataFrame(rows, schema=_SCHEMA)
    return Comparison(points, _summary(points), notes)


def _group_rows(group: str, coll: str, g: pl.DataFrame, inputs: SeriesInputs | None, calibrate: bool,
                notes: dict[str, list[str]]) -> list[PointRow]:  # fmt: skip
    what = f"{group} {coll}"
    kept: list[Measured] = []
    flagged = _perturbed_runs(coll, g)
    for (alg,), a in g.group_by(["algorithm"], maintain_order=True):
        name = f"{what} {alg}"
        if a.get_column("np").n_unique() < 2:
            notes.setdefault(SINGLE_P, []).append(name)
        elif alg not in latency_only.algorithms_for(coll):
            notes.setdefault(NOT_MODELLED, []).append(name)
        else:
            kept += [Measured(coll, str(alg), int(n), int(b), float(t))
                     for n, b, t in a.select("np", "bytes", "measured_us").iter_rows()]  # fmt: skip
    if not kept:
        return []
    if inputs is None:
        notes.setdefault(NO_TABLE, []).append(what)
        return []
    place, table = inputs.placement, inputs.table
    rows: list[PointRow] = []
    for m in kept:
        try:
            pred: float | None = latency_only.predict(
                coll, m.algorithm, place.prefix(m.np), table, m.bytes
            ).completion_us
        except ValueError as exc:  # a region the table lacks, a P beyond the placement
            notes.setdefault(MODEL_FAILED, []).append(f"{what} {m.algorithm} P={m.np} ({exc})")
            pred = None
        og = _measured_og(coll, m, inputs, what, notes)
        rows.append({"group": group, "collective": coll, "algorithm": m.algorithm, "np": m.np, "bytes": m.bytes,
                     "measured_us": m.latency_us, "predicted_us": pred, "error": _error(pred, m.latency_us),
                     "loggp_us": og, "loggp_error": _error(og, m.latency_us),
                     "calibrated_us": None, "calibrated_error": None})  # fmt: skip
    algorithms = sorted({m.algorithm for m in kept})
    if calibrate and len(algorithms) > 1:
        index = {(r["algorithm"], r["np"]): r for r in rows}
        for alg in algorithms:
            try:
                _, pairs = predict_held_out(kept, place, table, (coll, alg), quantity="rank_mean",
                                            perturbed=flagged)
            except ValueError as exc:
                notes.setdefault(MODEL_FAILED, []).append(f"{what} {alg} calibrated ({exc})")
                continue
            for m, p in pairs:
                row = index[(alg, m.np)]
                row["calibrated_us"], row["calibrated_error"] = p, _error(p, m.latency_us)
    return rows


def _perturbed_runs(coll: str, g: pl.DataFrame) -> set[Measured]:
    """The runs of ``g`` its optional boolean ``perturbed`` column flags (:mod:`.perturbed_runs`)."""
    if "perturbed" not in g.columns:
        return set()
    rows = g.filter(pl.col("perturbed").fill_null(False)).select("algorithm", "np", "bytes", "measured_us")
    return {Measured(coll, str(a), int(n), int(b), float(t)) for a, n, b, t in rows.iter_rows()}


def _measured_og(coll: str, m: Measured, inputs: SeriesInputs, what: str,
                 notes: dict[str, list[str]]) -> float | None:  # fmt: skip
    """LogGP with the o and g measured per region (nothing fitted): the mean over ranks, or None."""
    if inputs.measured is None:
        return None
    try:
        return loggp.predict(coll, m.algorithm, inputs.placement.prefix(m.np), inputs.measured, m.bytes).rank_mean_us
    except ValueError as exc:
        notes.setdefault(MODEL_FAILED, []).append(f"{what} {m.algorithm} P={m.np} with measured o, g ({exc})")
        return None


def _errors(g: pl.DataFrame, column: str, prefix: str) -> dict[str, SummaryFigure]:
    """:func:`.prediction_errors.error_summary` of one prediction column (nulls where nothing was predicted)."""
    pairs = [(n, p, m) for n, p, m in g.select("np", column, "measured_us").iter_rows() if p is not None]
    if not pairs:
        return {f"{prefix}median_abs": None, f"{prefix}median_signed": None, f"{prefix}worst_abs": None,
                f"{prefix}worst_np": None}  # fmt: skip
    e = error_summary({n: p for n, p, _ in pairs}, {n: m for n, _, m in pairs})
    return {f"{prefix}median_abs": e.median_abs, f"{prefix}median_signed": e.median_signed,
            f"{prefix}worst_abs": e.worst_abs, f"{prefix}worst_np": e.worst_np}  # fmt: skip


def _summary(points: pl.DataFrame) -> pl.DataFrame:
    # Each value only passes through to the frame, whose _SUMMARY_SCHEMA types it.
    out: list[dict[str, object]] = []
    for (group, coll, alg), g in points.group_by(["group", "collective", "algorithm"], maintain_order=True):
        others = sorted(set(points.filter((pl.col("group") == group) & (pl.col("collective") == coll))
                            .get_column("algorithm").to_list()) - {alg})  # fmt: skip
        calibrated = _errors(g, "calibrated_us", "calibrated_")
        out.append({"group": group, "collective": coll, "algorithm": alg, "bytes": g.get_column("bytes").min(),
                    "points": g.height, **_errors(g, "predicted_us", ""), **_errors(g, "loggp_us", "loggp_"),
                    **calibrated,
                    "calibrated_on": ", ".join(others) if calibrated["calibrated_median_abs"] is not None else None})  # fmt: skip
    return pl.DataFrame(out, schema=_SUMMARY_SCHEMA)


# -- a campaign's tables -------------------------------------------------------------------------


def _at_one_size(coll: pl.DataFrame) -> pl.DataFrame:
    """Each (group, collective)'s rows at :func:`pick_size`'s size (groups without one are dropped)."""
    parts = []
    for _, g in coll.group_by(["group", "collective"], maintain_order=True):
        sizes = [set(p.get_column("bytes").drop_nulls().to_list())
                 for _, p in g.group_by(["algorithm", "np"])]  # fmt: skip
        size = pick_size(sizes)
        if size is not None:
            parts.append(g.filter(pl.col("bytes") == size))
    return pl.concat(parts) if parts else coll.clear()


@dataclass(frozen=True)
class OwnPlacements(Placement):
    """A series' placement at its largest P whose ``prefix(n)`` is P = n's own recorded placement
    (where the campaign has a cell of that P with pins), not the largest P's first n ranks: under
    `node` round-robin, rank 2 of P = 3 is not where rank 2 of P = 4 sits on every shape."""

    own: tuple[tuple[int, Placement], ...] = ()

    def prefix(self, size: int) -> Placement:
        for n, place in self.own:
            if n == size:
                return place
        return super().prefix(size)


def _rank_pins(row: Mapping[str, Any]) -> list[Any]:
    """Each rank's cpus as the launch recorded them (``obtained_binding``: {rank: cpus}), else as
    planned (``requested_pins``) when the binding was not read for every rank."""
    pins = json.loads(row["requested_pins"])
    obtained = json.loads(row["obtained_binding"]) if row.get("obtained_binding") else {}
    if isinstance(obtained, Mapping) and len(obtained) == len(pins) and all(obtained.values()):
        return [sorted(obtained[k]) for k in sorted(obtained, key=int)]
    return list(pins)


def _spread_shared_sets(pins: list[Any], hosts: Sequence[str] | None) -> list[Any]:
    """Ranks given one cpu set together (more ranks than a shared machine has cores: every rank may
    use every core) each priced on its own cpu of the set, in rank order per host: the kernel
    spreads busy ranks over the set's cpus, it does not stack them on its first one."""
    seen: dict[tuple[str, tuple[int, ...]], int] = {}
    out: list[Any] = []
    for rank, pin in enumerate(pins):
        if not isinstance(pin, (list, tuple)) or len(pin) < 2:
            out.append(pin)
            continue
        cpus = tuple(sorted(int(c) for c in pin))
        key = (hosts[rank] if hosts and rank < len(hosts) else "", cpus)
        index = seen.get(key, 0)
        seen[key] = index + 1
        out.append([cpus[index % len(cpus)]])
    return out


def _cell_topology(row: Mapping[str, Any], topologies: Mapping[str, Topology], summary_of: Mapping[str, Any],
                   fallback: Topology | None) -> Topology | None:  # fmt: skip
    """The topology the cell's nodes recorded (rank 0's host, else the cell's own host, in
    ``topologies.json``), else ``fallback`` (checked to be the cells' node)."""
    hosts = rank_order(json.loads(row["hosts"])) if row.get("hosts") else None
    for host in (hosts[0] if hosts else None, (summary_of.get(row["cell"]) or {}).get("hostname")):
        if isinstance(host, str) and host in topologies:
            return topologies[host]
    return fallback


def series_placements(cells: pl.DataFrame, topologies: Mapping[str, Topology], topo: Topology | None,
                notes: dict[str, list[str]], records: Sequence[Mapping[str, Any]],
                ) -> tuple[dict[str, Placement], dict[str, str], str | None]:  # fmt: skip
    """label -> its placements, every P its own (an :class:`OwnPlacements` of its largest P): each
    rank's recorded host and cpus on the topology its node recorded (``topologies``: host ->
    topology, the tidy directory's ``topologies.json``), else ``topo`` when the cells' provenance
    says they ran on it; label -> the stack kind; why no cell can be placed (None: they can, one by one)."""
    kinds: dict[str, str] = {}
    summary_of = {str(r.get("cell")): r.get("topology") or {} for r in records}
    unrecorded = [summary_of.get(c) or {} for c in cells.get_column("cell").to_list()
                  if (summary_of.get(c) or {}).get("hostname") not in topologies]  # fmt: skip
    fallback_why = "no topology of the cells' node" if topo is None else topology_mismatch(topo, unrecorded)
    fallback = None if fallback_why else topo
    why = fallback_why if not topologies else None
    own: dict[str, dict[int, Placement]] = {}
    ok = cells.filter((pl.col("status") == "ok") & pl.col("requested_pins").is_not_null())
    for row in ok.sort("np", descending=True).iter_rows(named=True):
        label, np = cell_label(row), int(row["np"])
        kinds.setdefault(label, str(row.get("stack_kind") or ""))
        node = None if why else _cell_topology(row, topologies, summary_of, fallback)
        if np in own.get(label, {}) or node is None:
            continue
        hosts = rank_order(json.loads(row["hosts"])) if row.get("hosts") else None
        try:
            own.setdefault(label, {})[np] = cell_placement(
                node, _spread_shared_sets(_rank_pins(row), hosts), nodes=int(row.get("nodes") or 1), hosts=hosts,
                placement=row.get("placement"), fills=fills_nodes(row["mapping"], int(row.get("nodes") or 1)))
        except ValueError as exc:
            notes.setdefault(NO_PLACEMENT, []).append(f"{label} {row['benchmark']} P={np} ({exc})")
    out: dict[str, Placement] = {}
    for label, by_np in own.items():
        largest = by_np[max(by_np)]
        out[label] = OwnPlacements(largest.topology, largest.node_of, largest.cpu_of, tuple(sorted(by_np.items())))
    return out, kinds, why


def campaign_comparison(summary: pl.DataFrame, cells: pl.DataFrame | None, provenance: Sequence[Mapping[str, Any]],
                        hockney: Sequence[HockneyRecord] | None,
                        topo: Topology | Callable[[], Topology | None] | None, *,
                        calibrate: bool = True, loggp_rows: pl.DataFrame | None = None,
                        topologies: Mapping[str, Topology] | None = None) -> Comparison:  # fmt: skip
    """:func:`compare` on a campaign: the summary's modelled collectives (``label, stack, transport,
    benchmark, algorithm, np, bytes, t_median_usec``), grouped by label, against the PingPong
    region tables and the cells' placements on ``topo`` (None: nothing is placed, said once; a
    function: called only when some series has a region table, e.g. to detect the node);
    ``topologies``: host -> the topology each cell's node recorded (``topologies.json``), which
    places a cell before ``topo`` does.
    ``loggp_rows``: :func:`mpiatlas.stats.region_loggp.region_loggp`'s o and g per region, which
    price the groups of their stack, transport and knob set a third way (nothing fitted)."""
    notes: dict[str, list[str]] = {}
    modelled = {c.lower() for c in latency_only.ALGORITHMS}
    s = summary.filter(pl.col("benchmark").str.to_lowercase().is_in(list(modelled))
                       & pl.col("np").is_not_null() & (pl.col("t_median_usec") > 0))  # fmt: skip
    coll = s.select(pl.col("label").cast(pl.String).alias("group"),
                    pl.col("benchmark").str.to_lowercase().alias("collective"),
                    pl.col("algorithm").fill_null("default"), pl.col("np").cast(pl.Int64),
                    pl.col("bytes").cast(pl.Int64), pl.col("t_median_usec").alias("measured_us"),
                    pl.col("stack").cast(pl.String), pl.col("transport").cast(pl.String),
                    # The series' knob set is the summary's own column (a summary from before knobs has none).
                    (pl.col("knobs") if "knobs" in s.columns else pl.lit(None)).cast(pl.String).fill_null("")
                    .alias("knobs"),
                    pl.col("benchmark").alias("imb"))  # fmt: skip
    coll = _at_one_size(coll)
    inputs: dict[str, SeriesInputs] = {}
    lacking = [c for c in CELL_COLUMNS if cells is None or c not in cells.columns]
    if cells is None or lacking:
        if coll.height:
            why = "no cells table" if cells is None else f"the cells table lacks {', '.join(lacking)}"
            notes.setdefault(NO_TABLE, []).append(f"every series ({why})")
        return compare(coll.clear().select(MEASURED_COLUMNS), inputs, notes=notes)
    regions = region_inputs_from(cells.filter(pl.col("benchmark") == "PingPong"), provenance, hockney)
    if callable(topo):
        topo = topo() if regions.tables else None
    places, kinds, why_unplaced = series_placements(cells, topologies or {}, topo, notes, provenance)
    measured_og = loggp_by_series(loggp_rows) if loggp_rows is not None else {}
    keep = []
    for (group, imb, stack, transport, knobs), g in coll.group_by(["group", "imb", "stack", "transport", "knobs"],
                                                                   maintain_order=True):
        group, imb, series = str(group), str(imb), (str(stack), str(transport), str(knobs))
        default_nps = g.filter(pl.col("algorithm") == "default").get_column("np").n_unique()
        if kinds.get(group) != "openmpi" and default_nps > 1:  # a single-P default is noted as such by compare
            notes.setdefault(NOT_OMPI_DEFAULT, []).append(f"{group} {imb}")
            g = g.filter(pl.col("algorithm") != "default")
        table = regions.table_of(series)
        place = places.get(group)
        if table is not None and place is not None:
            og = with_loggp(table, measured_og.get(series) or {})
            inputs[group] = SeriesInputs(table, place, og if og.overhead_us or og.gap_us else None)
        elif table is not None and g.height:
            if why_unplaced is None and group not in {c.split(" ")[0] for c in notes.get(NO_PLACEMENT, [])}:
                notes.setdefault(NO_PLACEMENT, []).append(f"{group} {imb} (no cell with pins)")
            elif why_unplaced is not None:
                notes.setdefault(NO_PLACEMENT, []).append(f"every series: {why_unplaced}")
            g = g.clear()
        keep.append(g)
    measured = pl.concat(keep).select(MEASURED_COLUMNS) if keep else coll.clear().select(MEASURED_COLUMNS)
    return compare(measured, inputs, calibrate=calibrate, notes=notes)

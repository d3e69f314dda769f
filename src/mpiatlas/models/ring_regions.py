"""Region-aware ring model: every hop priced by the region its two ranks share.

The single-(λ, B) ring model (:mod:`mpiatlas.models.kernels`) charges every message the
PingPong time of the ring's own stack/transport/mapping. A ring is as fast as its slowest hop:
in the kernel's exchange every rank waits for its neighbour in every phase, so one hop that
crosses a socket (or a node) sets the pace of all. With ranks placed block-wise over two sockets
of ``c`` cores, P ≤ c keeps every hop inside socket 0; at P = c + 1 two hops cross (c−1 → c and
the wrap-around c → 0), and the whole ring jumps to the other-socket latency. That is the spike
the studies saw at P = cores/socket + 1.

* :class:`RingHops` — the region of every hop i → i+1 (mod P) of a placement
  (:class:`mpiatlas.models.region_latency.Placement`, whose pair regions are
  :func:`mpiatlas.node.topology.region`'s: no second region mapper), and how many cross a socket or a
  node (``boundary_hops``).
* :func:`exchange_time` — the kernel's ring (all ranks exchange at once; P steps of m messages in
  φ phases each): ``T = P · m · φ · max_hops t_region(s)``, ``t = λ_r + s/B_r`` (ssend:
  ``2λ_r + s/B_r``, a rendezvous round trip first), φ from the caller (kernels.ring_phases).
* :func:`token_time` — a ring where one token goes around (Open MPI's ``double_ring`` barrier:
  two passes, each rank receives from the left, then sends to the right): the hops run one after
  the other, ``T = passes · Σ_hops t_region(s)``.
* :func:`region_inputs` — what a campaign gives the model: per ring (label, P) the hops of the
  cell's actual placement (its ``requested_pins`` and hosts from ``cells.parquet``, on the topology
  its node recorded, ``topologies.json``, whatever host runs the fit), and per stack/transport a :class:`RegionTable` from the per-region PingPong Hockney
  fits (a PingPong label's region is the ``region`` its cells recorded for ranks 0 and 1), or one
  region latency table (``mpiatlas predict``'s CSV) for every label.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from mpiatlas.matrix.cells import distribution_of_id, fills_nodes
from mpiatlas.spine.series import SeriesKey
from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.ring_records import PlacementBoundary
from mpiatlas.models.region_latency import Placement, RegionTable, RegionTableError
from mpiatlas.node.topology import REGIONS, Topology, TopologyError, detect
from mpiatlas.node.topology_record import UNKNOWN_HOST, read_topologies
from mpiatlas.matrix.layout import CELLS_TABLE, PROVENANCE_TABLE, TOPOLOGIES_TABLE


__all__ = [
    "BOUNDARY_REGIONS",
    "MeasuredRegion",
    "RegionInputs",
    "RingHops",
    "RingPrediction",
    "cell_key",
    "cell_label",
    "cell_placement",
    "exchange_time",
    "hop_cost",
    "knob_series",
    "pingpong_regions",
    "placement_boundaries",
    "region_inputs",
    "region_inputs_from",
    "region_pingpong_fits",
    "ring_hops",
    "series_keys",
    "table_from_hockney",
    "token_time",
    "topology_mismatch",
]

# A hop in one of these crosses a socket or a node boundary.
BOUNDARY_REGIONS = ("other_socket", "other_node")


@dataclass(frozen=True)
class RingHops:
    """Regions of the hops r → r+1 (mod P), r = 0..P−1 (P = 2: the pair twice, both directions)."""

    regions: tuple[str, ...]

    @property
    def boundary_hops(self) -> int:
        return sum(r in BOUNDARY_REGIONS for r in self.regions)

    def counts(self) -> dict[str, int]:
        """Hops per region, closest region first."""
        c = Counter(self.regions)
        return {r: c[r] for r in REGIONS if c[r]}


def placement_boundaries(hops: RingHops) -> list[PlacementBoundary]:
    """Where a ring's ranks first cross a socket or a node, in rank order: a :class:`PlacementBoundary` for
    each rank r + 1 whose hop from rank r reaches another socket or node while the hop before did
    not (a block fill of 2 x 24 cores over 2 sockets: other_socket at P = 13, other_node at 25,
    other_socket at 37; round-robin over sockets or nodes crosses at every hop: drawn once, at P = 2).
    ``np``: the first process count whose ring holds rank r + 1. The wrap-around hop is no boundary.
    Read from the largest ring of a series: a rank's place does not depend on how many follow
    (block and cyclic over nodes alike; the `node` mapping's block, np / m per node, is the exception)."""
    ordered = hops.regions[:-1]
    return [PlacementBoundary(np=r + 2, region=region) for r, region in enumerate(ordered)
            if region in BOUNDARY_REGIONS and (r == 0 or ordered[r - 1] != region)]


def ring_hops(place: Placement) -> RingHops:
    """The hops of a ring over ``place``'s ranks in rank order (one rank: no hop)."""
    n = place.size
    return RingHops(tuple(place.region(r, (r + 1) % n) for r in range(n)) if n > 1 else ())


def hop_cost(table: RegionTable, region: str, nbytes: float, *, ssend: bool = False) -> float:
    """µs of one s-byte message over a hop of ``region``: λ + s/B, or 2λ + s/B for an ssend."""
    cost = table.cost(region, nbytes)
    return cost + table.latency_us[region] if ssend else cost


@dataclass(frozen=True)
class RingPrediction:
    predicted_us: float
    slowest_region: str | None  # the region whose hop sets the pace (None: no hop)
    boundary_hops: int
    hop_regions: dict[str, int] = field(default_factory=dict)


def exchange_time(hops: RingHops, table: RegionTable, *, np: int, streams: int, phases: int, nbytes: float,
                  ssend: bool = False) -> RingPrediction:
    """The kernel's ring: ``P · m · φ · max_hops t(s)`` (every phase waits for its slowest hop).

    Region ties go to the farther region (the one a reader looks for: a crossing)."""
    costs = [(hop_cost(table, r, nbytes, ssend=ssend), REGIONS.index(r), r) for r in set(hops.regions)]
    slowest = max(costs, default=(0.0, -1, None))
    return RingPrediction(np * streams * phases * slowest[0], slowest[2], hops.boundary_hops, hops.counts())


def token_time(hops: RingHops, table: RegionTable, *, nbytes: float = 0.0, passes: int = 1) -> float:
    """A token passed around the ring ``passes`` times: the hops run one after the other."""
    return passes * sum(hop_cost(table, r, nbytes) for r in hops.regions)


# -------------------------------------------------------------------------- a campaign's inputs


def cell_placement(topo: Topology, pins: Sequence[Any], *, nodes: int = 1,
                   hosts: Sequence[str] | None = None, placement: str | None = None,
                   fills: bool = False) -> Placement:
    """The placement a cell ran with: ``pins`` (a cpu, or a cpu set, per rank: its first cpu
    decides the region) on ``topo``'s node(s). Node of a rank: its host when recorded, else the
    plan's: ``placement`` cyclic (the default) deals ranks round-robin over ``nodes``; block puts a
    node's share on it before the next -- np / nodes ranks for the `node` mapping, a node's cores for a
    cell filling nodes (``fills``: core-n2)."""
    cpus = tuple(int(p[0]) if isinstance(p, (list, tuple)) else int(p) for p in pins)
    if hosts and len(hosts) == len(cpus):
        index: dict[str, int] = {}
        node_of = tuple(index.setdefault(h, len(index)) for h in hosts)
    elif placement == "block" and nodes > 1:
        per_node = topo.n_cores if fills else -(-len(cpus) // nodes)
        node_of = tuple(r // per_node for r in range(len(cpus)))
    else:
        node_of = tuple(r % max(nodes, 1) for r in range(len(cpus)))
    missing = sorted({c for c in cpus if c not in topo.pus})
    if missing:
        raise ValueError(f"pins {missing} are not cpus of the topology ({topo.hostname or topo.source})")
    return Placement(topo, node_of, cpus)


def rank_order(hosts: Mapping[str, str] | Sequence[str] | None) -> list[str] | None:
    """The cells table's ``hosts`` ({rank: host}, JSON object keys) as a list in rank order."""
    if isinstance(hosts, Mapping):
        return [hosts[k] for k in sorted(hosts, key=int)]
    return list(hosts) if hosts else None


# Which PingPong fits may price a ring: those of its stack, transport and knob set (the mapping differs).
KnobSeries = tuple[str, str, str]


def knob_series(key: SeriesKey) -> KnobSeries:
    """A series' (stack, transport, knobs): its fields, never its label taken apart."""
    return (key.stack, key.transport, key.knobs)


def cell_key(row: Mapping[str, Any]) -> SeriesKey:
    """A cells-table row's series key (the placement over nodes as the cell's id has it)."""
    return SeriesKey(stack=row["stack"], transport=row["transport"], mapping=row["mapping"], nodes=int(row.get("nodes") or 1),
                     placement=distribution_of_id(str(row.get("cell") or "")), options=row.get("options") or "",
                     knobs=row.get("knobs") or "")


def cell_label(row: Mapping[str, Any]) -> str:
    """A cells-table row's series label, as the tables name it (stack/transport/mapping [options]
    [knobs] [placement=block]): rendered from :func:`cell_key`."""
    return cell_key(row).label


def series_keys(cells: pl.DataFrame) -> dict[str, SeriesKey]:
    """Series label -> its key, for every series of a cells table: how a stage that holds a table's
    label finds the series' fields without taking the label apart."""
    columns = [c for c in ("cell", "stack", "transport", "mapping", "nodes", "options", "knobs") if c in cells.columns]
    keys: dict[str, SeriesKey] = {}
    for row in cells.select(columns).unique(maintain_order=True).iter_rows(named=True):
        key = cell_key(row)
        keys.setdefault(key.label, key)
    return keys


@dataclass(frozen=True)
class MeasuredRegion:
    """The region a PingPong series' ranks 0 and 1 sat in, and the series (from the cells' own columns)."""

    region: str
    series: SeriesKey


def pingpong_regions(cells: pl.DataFrame) -> dict[str, MeasuredRegion]:
    """PingPong label -> the region its ``ok`` cells recorded for ranks 0 and 1 (the first one)."""
    pp = cells.filter((pl.col("status") == "ok") & (pl.col("benchmark") == "PingPong") & pl.col("region").is_not_null())
    region_of: dict[str, MeasuredRegion] = {}
    for row in pp.iter_rows(named=True):
        key = cell_key(row)
        region_of.setdefault(key.label, MeasuredRegion(row["region"], key))
    return region_of


def region_pingpong_fits(hockney: Iterable[HockneyRecord], region_of_label: Mapping[str, MeasuredRegion],
                         ) -> dict[KnobSeries, dict[str, HockneyRecord]]:
    """Per (stack, transport, knobs) and region, the PingPong Hockney fit that prices the region
    (one with a λ): where two mappings measured one region, the first fit (lowest λ)."""
    found: dict[KnobSeries, dict[str, HockneyRecord]] = {}
    for fit in hockney:
        measured = region_of_label.get(fit.label or "")
        if fit.benchmark != "PingPong" or not fit.fitted or fit.latency_us is None or measured is None:
            continue
        held = found.setdefault(knob_series(measured.series), {})
        if measured.region not in held or fit.latency_us < _latency(held[measured.region]):
            held[measured.region] = fit
    return found


def _latency(fit: HockneyRecord) -> float:
    """λ of a fit :func:`region_pingpong_fits` kept (it keeps only fits with one)."""
    assert fit.latency_us is not None
    return fit.latency_us


def table_from_hockney(hockney: Iterable[HockneyRecord], region_of_label: Mapping[str, MeasuredRegion],
                       ) -> tuple[dict[KnobSeries, RegionTable], list[str]]:
    """Per (stack, transport, knobs): λ (first segment) and asymptotic B of each region's PingPong
    Hockney fit (:func:`region_pingpong_fits`)."""
    tables = {}
    notes: list[str] = []
    for key, regions in region_pingpong_fits(hockney, region_of_label).items():
        source = "PingPong Hockney fits " + ", ".join(f"{r}: {f.label}" for r, f in regions.items())
        try:
            tables[key] = RegionTable({r: _latency(f) for r, f in regions.items()},
                                      {r: bw for r, f in regions.items() if (bw := f.model_bandwidth_MBps)}, source)
        except RegionTableError as exc:  # a zero λ (an unusable fit): say so, keep the others
            notes.append(f"{'/'.join(key[:2])}: no region table: {exc}")
    return tables, notes


@dataclass
class RegionInputs:
    """What :func:`mpiatlas.models.kernels.fit_ring` needs for the region-aware prediction."""

    hops: dict[tuple[str, int], RingHops] = field(default_factory=dict)  # (ring label, P) -> hops
    tables: dict[KnobSeries, RegionTable] = field(default_factory=dict)
    table: RegionTable | None = None  # a given region latency table: prices every label
    notes: list[str] = field(default_factory=list)
    series: dict[str, SeriesKey] = field(default_factory=dict)  # label -> its key, of the cells given

    def table_for(self, label: str, stack: str, transport: str) -> RegionTable | None:
        """The table pricing a series of the cells given: its knob set is its key's (a label not among
        them has none)."""
        key = self.series.get(label)
        return self.table_of((stack, transport, key.knobs if key is not None else ""))

    def table_of(self, series: KnobSeries) -> RegionTable | None:
        """The table pricing a (stack, transport, knobs) series."""
        return self.table or self.tables.get(series)


def topology_mismatch(topo: Topology, summaries: Iterable[Mapping[str, Any]]) -> str | None:
    """Why ``topo`` is not the node the cells ran on (None: it is)."""
    for s in summaries:
        host = s.get("hostname")
        if host and topo.hostname and host != topo.hostname:
            return f"the cells ran on {host}, this topology is {topo.hostname}'s"
        if s.get("packages") not in (None, topo.packages):
            return f"the cells' node has {s.get('packages')} package(s), this topology {topo.packages}"
    return None


def region_inputs(tidy_dir: str | Path, hockney: Sequence[HockneyRecord] | None, *,
                  topo: Topology | None = None, table: RegionTable | None = None) -> RegionInputs:
    """Ring hops and region tables from a tidy directory (``cells.parquet``, ``provenance.json``,
    ``topologies.json``): :func:`region_inputs_from` on what the directory holds."""
    cells_path = Path(tidy_dir) / CELLS_TABLE
    if not cells_path.is_file():
        return region_inputs_from(None, [], hockney, topo=topo, table=table,
                                  missing=f"no {CELLS_TABLE} under {tidy_dir}")
    prov_path = Path(tidy_dir) / PROVENANCE_TABLE
    records = json.loads(prov_path.read_text()) if prov_path.is_file() else []
    return region_inputs_from(pl.read_parquet(cells_path), records, hockney, topo=topo, table=table,
                              topologies=read_topologies(Path(tidy_dir) / TOPOLOGIES_TABLE))


def _fallback_topology(topo: Topology | None, summaries: Sequence[Mapping[str, Any]],
                       notes: list[str]) -> Topology | None:
    """For cells whose host recorded no topology (a campaign run before topologies were
    recorded): ``topo``, or this machine's, when the cells' provenance says they ran on it."""
    if topo is None:
        try:
            topo = detect()
        except TopologyError as exc:
            notes.append(f"region-aware ring model: no topology ({exc})")
            return None
    why = topology_mismatch(topo, summaries)
    if why:
        notes.append(f"region-aware ring model not applied: {why} (its hop regions are unknown here)")
        return None
    return topo


def region_inputs_from(cells: pl.DataFrame | None, records: Sequence[Mapping[str, Any]], hockney: Sequence[HockneyRecord] | None,
                       *, topo: Topology | None = None, table: RegionTable | None = None,
                       missing: str = "no cells table given",
                       topologies: Mapping[str, Topology] | None = None) -> RegionInputs:
    """Ring hops and region tables from a cells table (a polars frame, None when absent: ``missing``
    says why) and the cells' provenance records.

    A ring cell's ranks are placed on the topology its host recorded (``topologies``: host ->
    topology, the tidy directory's ``topologies.json``), whatever host runs this. For a cell
    whose host recorded none, ``topo`` (by default the machine this runs on) is used only when
    the cells' provenance says they ran on it (hostname, packages). ``table``: a region latency
    table pricing every label instead of the PingPong fits. Whatever is missing is a note."""
    out = RegionInputs(table=table)
    if cells is None:
        out.notes.append(f"region-aware ring model: {missing}")
        return out
    cells = cells.filter(pl.col("status") == "ok")
    out.series = series_keys(cells)
    if table is None:
        out.tables, notes = table_from_hockney(hockney or [], pingpong_regions(cells))
        out.notes += notes
    ring = cells.filter((pl.col("benchmark") == "ring") & pl.col("requested_pins").is_not_null())
    if ring.height == 0:
        return out
    recorded = dict(topologies or {})
    summary_of = {r.get("cell"): r.get("topology") or {} for r in records}
    host_of = {cell: summary_of.get(cell, {}).get("hostname") or UNKNOWN_HOST for cell in ring["cell"].to_list()}
    unrecorded = [c for c, h in host_of.items() if h not in recorded]
    fallback = (_fallback_topology(topo, [summary_of.get(c, {}) for c in unrecorded], out.notes)
                if unrecorded else None)
    for row in ring.iter_rows(named=True):
        key = (cell_label(row), int(row["np"]))
        node = recorded.get(host_of[row["cell"]]) or fallback
        if key in out.hops or node is None:
            continue
        hosts = json.loads(row["hosts"]) if row.get("hosts") else None
        nodes = int(row.get("nodes") or 1)
        try:
            place = cell_placement(node, json.loads(row["requested_pins"]), nodes=nodes, hosts=rank_order(hosts),
                                   placement=row.get("placement"), fills=fills_nodes(row["mapping"], nodes))
        except ValueError as exc:
            out.notes.append(f"ring {key[0]} P={key[1]}: no hop regions: {exc}")
            continue
        out.hops[key] = ring_hops(place)
    return out

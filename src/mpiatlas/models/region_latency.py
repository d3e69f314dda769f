"""Per-region point-to-point costs and where ranks sit: the inputs of the collective models.

* :class:`RegionTable` — λ (µs) and optionally B (MB/s), LogGP's o (send/receive overhead, µs) and
  g (gap between consecutive sends, µs) per region (:data:`REGIONS` names), read from a CSV
  ``region,latency_us[,bandwidth_MBps][,overhead_us][,gap_us]``. A message of ``m`` bytes between
  two ranks costs ``λ + m / B`` µs (Hockney per region; bytes / (MB/s) is µs). Without a bandwidth
  the latency is taken as the cost at every size: a "4 B latency" table predicts small messages
  only. With o and g the schedules are priced by :mod:`.loggp` (without them, by latency alone).
  :func:`format_region_table` writes that CSV (``mpiatlas regions --csv``); :func:`with_loggp` adds the o and g
  the loggp kernel measured (:mod:`mpiatlas.stats.region_loggp`).
* :class:`Placement` — node and OS cpu of every rank, built by :func:`place` from a topology
  and the placement (``block``/``cyclic`` over nodes, or a mapping name), so the region of any
  rank pair is the one :func:`mpiatlas.node.topology.region` gives for that pair.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from mpiatlas.node.topology import REGIONS, SPREAD_MAPPINGS, Topology, pin_list, region

__all__ = ["PLACEMENTS", "Placement", "RegionTable", "RegionTableError", "format_region_table", "place",
           "read_region_table"]

PLACEMENTS = ("block", "cyclic")


class RegionTableError(ValueError):
    """A region table that cannot be used (bad CSV, unknown or missing region)."""


@dataclass(frozen=True)
class RegionTable:
    latency_us: dict[str, float]
    bandwidth_MBps: dict[str, float] = field(default_factory=dict)
    source: str = "<table>"
    overhead_us: dict[str, float] = field(default_factory=dict)  # LogGP o (0 is allowed: o and g may vanish)
    gap_us: dict[str, float] = field(default_factory=dict)  # LogGP g

    def __post_init__(self) -> None:
        for name, value in [*self.latency_us.items(), *self.bandwidth_MBps.items()]:
            if name not in REGIONS:
                raise RegionTableError(f"{self.source}: unknown region {name!r}; expected one of {', '.join(REGIONS)}")
            if not (math.isfinite(value) and value > 0):
                raise RegionTableError(f"{self.source}: region {name!r} needs a positive number, got {value!r}")
        for name, value in [*self.overhead_us.items(), *self.gap_us.items()]:
            if name not in self.latency_us:
                raise RegionTableError(f"{self.source}: region {name!r} has o or g but no latency_us")
            if not (math.isfinite(value) and value >= 0):
                raise RegionTableError(f"{self.source}: region {name!r}: o and g must be >= 0, got {value!r}")

    def cost(self, region_name: str, nbytes: float) -> float:
        """µs for ``nbytes`` between two ranks of ``region_name``."""
        try:
            lat = self.latency_us[region_name]
        except KeyError:
            raise RegionTableError(
                f"{self.source}: the placement has rank pairs in region {region_name!r}, which the table lacks "
                f"(it has {', '.join(self.latency_us) or 'none'})"
            ) from None
        bw = self.bandwidth_MBps.get(region_name)
        return lat + (nbytes / bw if bw and nbytes > 0 else 0.0)


_OPTIONAL = ("bandwidth_MBps", "overhead_us", "gap_us")
_HEADER = "region,latency_us[,bandwidth_MBps][,overhead_us][,gap_us]"


def read_region_table(path: str | Path) -> RegionTable:
    """Read ``region,latency_us[,bandwidth_MBps][,overhead_us][,gap_us]`` (optional columns in that
    order, an empty cell leaves that region without the value); errors name the file, line and region."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RegionTableError(f"cannot read region table {source}: {exc.strerror or exc}") from exc
    rows = list(csv.reader(line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")))
    if not rows:
        raise RegionTableError(f"{source}: empty; expected a header '{_HEADER}'")
    header = [h.strip() for h in rows[0]]
    if header[:2] != ["region", "latency_us"] or header[2:] != [c for c in _OPTIONAL if c in header[2:]]:
        raise RegionTableError(f"{source}:1: header {','.join(header)!r}, expected '{_HEADER}'")
    latency: dict[str, float] = {}
    extra: dict[str, dict[str, float]] = {c: {} for c in _OPTIONAL}
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() and not line.lstrip().startswith("#")]
    for line, row in zip(lines[1:], rows[1:]):
        cells = [c.strip() for c in row]
        if len(cells) not in (2, len(header)):
            raise RegionTableError(f"{source}:{line}: expected {len(header)} values, got {len(cells)}: {','.join(row)!r}")
        name = cells[0]
        if name not in REGIONS:
            raise RegionTableError(f"{source}:{line}: unknown region {name!r}; expected one of {', '.join(REGIONS)}")
        if name in latency:
            raise RegionTableError(f"{source}:{line}: region {name!r} listed twice")
        latency[name] = _positive(cells[1], "latency_us", source, line, name)
        for column, cell in zip(header[2:], cells[2:]):
            if cell:
                extra[column][name] = _positive(cell, column, source, line, name, zero=column != "bandwidth_MBps")
    if not latency:
        raise RegionTableError(f"{source}: no regions after the header")
    return RegionTable(latency, extra["bandwidth_MBps"], source, extra["overhead_us"], extra["gap_us"])


def with_loggp(table: RegionTable, regions: Mapping[str, Mapping[str, Any]]) -> RegionTable:
    """``table`` with the measured o (``overhead_us``) and g (``gap_us``) of the regions it prices;
    a measured value below 0 (a clock's noise around 0) counts as 0. Unchanged without any."""
    overhead = {r: max(float(v["overhead_us"]), 0.0) for r, v in regions.items()
                if r in table.latency_us and v.get("overhead_us") is not None}
    gap = {r: max(float(v["gap_us"]), 0.0) for r, v in regions.items()
           if r in table.latency_us and v.get("gap_us") is not None}
    if not overhead and not gap:
        return table
    return replace(table, overhead_us={**table.overhead_us, **overhead}, gap_us={**table.gap_us, **gap},
                   source=f"{table.source}; o and g measured by the loggp kernel")


def format_region_table(table: RegionTable, comments: Iterable[str] = ()) -> str:
    """``table`` as the CSV :func:`read_region_table` reads (regions closest first; the optional
    columns the table has; ``comments`` as leading ``#`` lines, which the reader skips)."""
    columns = [c for c, values in zip(_OPTIONAL, (table.bandwidth_MBps, table.overhead_us, table.gap_us)) if values]
    lines = [f"# {c}" for c in comments] + [",".join(["region", "latency_us", *columns])]
    for name in (r for r in REGIONS if r in table.latency_us):
        values = {"bandwidth_MBps": table.bandwidth_MBps, "overhead_us": table.overhead_us, "gap_us": table.gap_us}
        cells = [f"{values[c][name]:.10g}" if name in values[c] else "" for c in columns]
        lines.append(",".join([name, f"{table.latency_us[name]:.10g}", *cells]))
    return "\n".join(lines) + "\n"


def _positive(text: str, column: str, source: str, line: int, name: str, *, zero: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RegionTableError(f"{source}:{line}: region {name!r}: {column} {text!r} is not a number") from None
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        raise RegionTableError(f"{source}:{line}: region {name!r}: {column} must be {'>=' if zero else '>'} 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Placement:
    """Where each rank of one run sits: ``node_of[r]`` and OS ``cpu_of[r]`` on ``topology``'s nodes."""

    topology: Topology
    node_of: tuple[int, ...]
    cpu_of: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.cpu_of)

    @cached_property
    def _core_index(self) -> tuple[int, ...]:
        return tuple(self.topology.core_of(cpu).index for cpu in self.cpu_of)

    def region(self, a: int, b: int) -> str:
        """Region of ranks ``a`` and ``b`` (one of :data:`REGIONS`)."""
        return region(self.topology, self.cpu_of[a], self.cpu_of[b], same_node=self.node_of[a] == self.node_of[b])

    def prefix(self, size: int) -> Placement:
        """The first ``size`` ranks (their places do not depend on how many follow under block)."""
        return Placement(self.topology, self.node_of[:size], self.cpu_of[:size])


def place(
    topo: Topology,
    np: int,
    *,
    nodes: int = 1,
    ppn: int | None = None,
    placement: str = "block",
    mapping: str = "core",
) -> Placement:
    """Rank -> (node, cpu) for ``np`` ranks on ``nodes`` nodes shaped like ``topo``.

    ``placement`` ``block`` fills node 0 with ``ppn`` ranks, then node 1 (Open MPI
    ``--map-by core``/``socket`` on a multi-node allocation, SLURM block); ``cyclic`` deals ranks
    round-robin over nodes (``--map-by node``). Inside a node, ranks take cores in ``mapping``
    order (``core``: consecutive cores; ``socket``/``numa``/``die``/``l3``: round-robin over those
    domains, as :func:`mpiatlas.node.topology.pin_list`); mapping ``node`` means cyclic + core.
    ``ppn`` defaults to the cores of a node; oversubscription is refused.
    """
    if mapping not in SPREAD_MAPPINGS:  # a region mapping places one pair, no collective
        raise ValueError(f"unknown mapping {mapping!r}; choose from {', '.join(SPREAD_MAPPINGS)}")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose from {', '.join(PLACEMENTS)}")
    if mapping == "node":
        placement, mapping = "cyclic", "core"
    per_node = topo.n_cores if ppn is None else ppn
    if nodes < 1 or per_node < 1:
        raise ValueError(f"nodes and ppn must be >= 1 (got nodes={nodes}, ppn={per_node})")
    if per_node > topo.n_cores:
        raise ValueError(f"ppn={per_node} exceeds the {topo.n_cores} cores of a node (no oversubscription)")
    if np < 1 or np > nodes * per_node:
        raise ValueError(f"np={np} does not fit {nodes} node(s) x {per_node} ranks per node")
    if placement == "block":
        node_of = [r // per_node for r in range(np)]
        local = [r % per_node for r in range(np)]
    else:
        node_of = [r % nodes for r in range(np)]
        local = [r // nodes for r in range(np)]
    order = list(pin_list(topo, mapping, per_node))  # cpu of the j-th rank on a node
    return Placement(topo, tuple(node_of), tuple(order[j] for j in local))

"""A node's topology as JSON, recorded with the cells that ran on it, and read back anywhere.

The runner writes the topology it pinned a cell's ranks with into the cell's raw directory
(:data:`mpiatlas.matrix.layout.TOPOLOGY`); the tidy step keeps one per host
(:data:`mpiatlas.matrix.layout.TOPOLOGIES_TABLE`, ``{hostname: record}``). The fits then place a
cell's ranks on the topology of the node that ran it, whichever host runs the fits (a login node
under SLURM): :func:`read_topologies`.

* :func:`topology_record` / :func:`topology_from_record` — a :class:`Topology` to a JSON-ready
  dict and back (every field; the cores as lists).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from mpiatlas.node.topology import Core, Topology, TopologyError

__all__ = ["UNKNOWN_HOST", "collect_topologies", "read_topologies", "topology_from_record", "topology_record"]

# The key of a topology that names no host (sysfs read without uname, a synthetic description).
UNKNOWN_HOST = "unknown"
_CORE_FIELDS = {f.name for f in fields(Core)}


def topology_record(topo: Topology) -> dict[str, Any]:
    """Every field of ``topo``, JSON-ready."""
    return asdict(topo)


def topology_from_record(record: Mapping[str, Any], source: str = "topology record") -> Topology:
    """The :class:`Topology` of :func:`topology_record`; a record that is not one raises
    TopologyError naming ``source`` and what is wrong."""
    try:
        cores = tuple(
            Core(**{**{k: v for k, v in c.items() if k in _CORE_FIELDS}, "pus": tuple(c["pus"])})
            for c in record["cores"]
        )
        rest = {f.name: record[f.name] for f in fields(Topology) if f.name != "cores" and f.name in record}
        rest["numa_os_index"] = tuple(rest.get("numa_os_index", ()))
        topo = Topology(cores=cores, **rest)
    except (KeyError, TypeError, AttributeError) as exc:
        raise TopologyError(f"{source}: not a topology record (expected {{cores: [{{index, pu, pus, package, "
                            f"numa, l3, die}}], hostname, ...}}): {exc!r}") from exc
    if not cores:
        raise TopologyError(f"{source}: a topology record without cores")
    return topo


def collect_topologies(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """One record per host from the cells' topology files. Under srun a runner records only the
    cores its batch job was given (Topology.restricted_to keeps their hwloc ids), so two jobs on one
    host may record different cores of it: the host's record holds every core any of them saw."""
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        held = out.setdefault(record.get("hostname") or UNKNOWN_HOST, record)
        if held is not record:
            cores = {c["pu"]: c for c in (*held["cores"], *record["cores"])}
            held["cores"] = sorted(cores.values(), key=lambda c: (c["index"], c["pu"]))
    return out


def read_topologies(path: str | Path) -> dict[str, Topology]:
    """Host -> topology from a tidy directory's topologies table (none when the file is absent:
    a campaign tidied before topologies were recorded)."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        table = json.loads(path.read_text())
    except ValueError as exc:
        raise TopologyError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(table, dict):
        raise TopologyError(f"{path}: expected {{hostname: topology record}}, got {type(table).__name__}")
    return {host: topology_from_record(rec, f"{path} [{host}]") for host, rec in table.items()}

"""``mpiatlas topology``: show the node topology and where a mapping pins ranks.

The topology comes from hwloc's ``lstopo`` where it is installed, else from Linux sysfs;
the ``source`` line says which.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from typing import NotRequired, TypedDict

from mpiatlas.node.topology import (
    MAPPINGS,
    REGIONS,
    MappingUnavailable,
    OversubscriptionError,
    Topology,
    TopologyError,
    TopologySummary,
    detect,
    pair_regions,
    pin_list,
)
from mpiatlas.commands import COMMAND_HELP


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "topology",
        help=COMMAND_HELP["topology"],
        description=__doc__,
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--xml", metavar="FILE", help="hwloc XML to read instead of detecting this node")
    source.add_argument(
        "--sysfs",
        metavar="DIR",
        help="Linux sysfs tree to read instead of detecting this node: /sys/devices/system or a copy of it",
    )
    p.add_argument("--mapping", choices=MAPPINGS, help="mapping whose pins and regions to show")
    p.add_argument("--np", type=int, default=2, metavar="N", help="number of ranks for --mapping (default 2)")
    p.add_argument("--nodes", type=int, default=1, metavar="K", help="nodes for the 'node' mapping (default 1)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more ranks than cores (wrap around)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


class MappingReport(TypedDict):
    """Where ``--mapping`` puts the ranks (``--json``'s ``mapping`` object)."""

    mapping: str
    np: int
    nodes: int
    pins: list[int]
    node_of: list[int]
    oversubscribed: bool
    region_0_1: str | None
    region_counts: dict[str, int]  # region -> rank pairs in it, closest first
    pair_regions: dict[str, str]  # "i,j" -> region


class TopologyReport(TypedDict):
    summary: TopologySummary  # Topology.summary(), as provenance records it
    mapping: NotRequired[MappingReport]


def run(args: argparse.Namespace) -> int:
    try:
        topo = _read_topology(args)
    except TopologyError as exc:
        print(f"mpiatlas topology: {exc}", file=sys.stderr)
        return 1
    out: TopologyReport = {"summary": topo.summary()}
    if args.mapping:
        try:
            out["mapping"] = _mapping_report(topo, args)
        except (MappingUnavailable, OversubscriptionError, ValueError) as exc:
            print(f"mpiatlas topology: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_text(out)
    return 0


def _read_topology(args: argparse.Namespace) -> Topology:
    if args.xml:
        return Topology.from_hwloc_xml(args.xml)
    if args.sysfs:
        return Topology.from_sysfs(args.sysfs)
    return detect()


def _mapping_report(topo: Topology, args: argparse.Namespace) -> MappingReport:
    pins = pin_list(topo, args.mapping, args.np, nodes=args.nodes, oversubscribe=args.oversubscribe)
    regions = pair_regions(topo, pins)
    return {
        "mapping": args.mapping,
        "np": args.np,
        "nodes": args.nodes,
        "pins": list(pins),
        "node_of": list(pins.node_of),
        "oversubscribed": pins.oversubscribed,
        "region_0_1": regions.get((0, 1)),
        "region_counts": _region_counts(regions.values()),
        "pair_regions": {f"{i},{j}": r for (i, j), r in regions.items()},
    }


def _region_counts(regions: Iterable[str]) -> dict[str, int]:
    counts = Counter(regions)
    return {r: counts[r] for r in REGIONS if r in counts}  # closest first


def _print_text(out: TopologyReport) -> None:
    summary = out["summary"]
    for key, value in summary.items():
        if key == "cache_sizes":
            value = ", ".join(f"{lvl} {_human(size)}" for lvl, size in summary["cache_sizes"].items()) or "-"
        print(f"{key:>14}: {value if value is not None else '-'}")
    rep = out.get("mapping")
    if not rep:
        return
    print()
    flag = "  (OVERSUBSCRIBED)" if rep["oversubscribed"] else ""
    print(f"mapping {rep['mapping']}, np={rep['np']}, nodes={rep['nodes']}{flag}")
    for rank, (cpu, node) in enumerate(zip(rep["pins"], rep["node_of"])):
        print(f"  rank {rank:>4} -> node {node} cpu {cpu}")
    if rep["region_0_1"]:
        print(f"ranks 0,1: {rep['region_0_1']}")
        print("pairs: " + ", ".join(f"{r} {n}" for r, n in rep["region_counts"].items()))


def _human(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"

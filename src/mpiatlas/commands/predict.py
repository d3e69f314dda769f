"""``mpiatlas predict``: a collective's time from a per-region latency table, for a machine not measured yet.

Inputs: a region table (CSV ``region,latency_us[,bandwidth_MBps]``, regions as ``mpiatlas
topology`` names them: same_core, same_l3, same_die, same_numa, same_socket, other_socket,
other_node), the node's topology (an hwloc XML file or a synthetic description such as
``pack:2 numa:4 die:2 l3:2 core:4 pu:1``), the placement, the collective and the algorithm by
Open MPI coll_tuned's name. The models and their cost rules: :mod:`mpiatlas.models.collective_regions`
(latency only) and, when the table has ``overhead_us``/``gap_us`` or ``--calibrate`` is given,
:mod:`mpiatlas.models.loggp` (LogGP). ``--calibrate MEASURED.csv`` fits what the table lacks
(:mod:`mpiatlas.models.loggp_fit`) on measurements taken with the same placement options.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TypedDict

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mpiatlas.node.topology import MappingUnavailable, SPREAD_MAPPINGS, TopologyError
from mpiatlas.models.collective_regions import ModelError
from mpiatlas.models.loggp import predict
from mpiatlas.models.loggp_fit import MeasuredError, calibrate, read_measured
from mpiatlas.models.region_latency import RegionTableError, place, read_region_table
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.commands import COMMAND_HELP

_RANGE = re.compile(r"^(\d+)\.\.(\d+)(?::(\d+))?$")


class PredictionRow(TypedDict):
    """One process count's prediction, as ``--json`` prints it."""

    np: int
    bytes: int
    predicted_us: float
    rank_mean_us: float
    algorithm: str


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "predict", help=COMMAND_HELP["predict"],
        description=__doc__,
    )  # fmt: skip
    p.add_argument("table", metavar="TABLE.csv", help="region table: region,latency_us[,bandwidth_MBps]")
    p.add_argument("--topology", required=True, metavar="XML|SYNTHETIC",
                   help="hwloc XML file of one node, or hwloc's synthetic description, e.g. 'pack:2 l3:4 core:8 pu:1'")
    p.add_argument("--collective", required=True, help="bcast, scatter, gather, reduce or allreduce")
    p.add_argument("--algorithm", required=True,
                   help="Open MPI coll_tuned name (bcast: basic_linear, chain, pipeline, binary_tree, binomial, "
                   "knomial, default; scatter/gather: basic_linear, binomial; allreduce: recursive_doubling, ring, "
                   "rabenseifner; reduce: rabenseifner)")
    p.add_argument("--np", required=True, metavar="LIST|A..B[:STEP]",
                   help="process counts: '2,4,8', '2..256' or '2..256:2' (ranges include both ends)")
    p.add_argument("--bytes", type=int, default=4, metavar="N", help="message size in bytes (default 4)")
    p.add_argument("--nodes", type=int, default=1, metavar="K", help="nodes shaped like --topology (default 1)")
    p.add_argument("--ppn", type=int, default=None, metavar="N", help="ranks per node (default: cores per node)")
    p.add_argument("--placement", choices=["block", "cyclic"], default="block",
                   help="ranks over nodes: block fills a node first (map-by core), cyclic deals them round-robin")
    p.add_argument("--mapping", choices=SPREAD_MAPPINGS, default="core",
                   help="order of cores inside a node (core, l3, die, numa, socket); 'node' = cyclic over nodes")
    p.add_argument("--segsize", type=int, default=0, metavar="BYTES",
                   help="segment size of chain/pipeline/tree algorithms (default 0: none, Open MPI's forced default)")
    p.add_argument("--overlap", type=float, default=1.0, metavar="F",
                   help="latency-only tree models: each level costs F x its slowest edge (default 1; unused with LogGP)")
    p.add_argument("--calibrate", metavar="MEASURED.csv", default=None,
                   help="fit LogGP o, g and the per-level term the table lacks on measurements "
                   "(collective,algorithm,np,bytes,latency_us; run with the same --nodes/--ppn/--placement/--mapping); "
                   "the fitted values and their CIs go to stderr")
    p.add_argument("--measured-as", choices=["rank_mean", "completion"], default="rank_mean",
                   help="what the measured latency_us is: the mean over ranks of their time in the call (OSU's Avg "
                   "Latency, IMB's t_avg; default) or the time until the last rank has its data")
    p.add_argument("--json", action="store_true", help="print a JSON list of {np, bytes, predicted_us}")
    p.set_defaults(func=run)


def parse_np(text: str) -> list[int]:
    """``2,4,8`` / ``2..256`` / ``2..256:2`` -> sorted unique counts; ValueError otherwise."""
    counts: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        match = _RANGE.match(part)
        if match:
            lo, hi, step = int(match[1]), int(match[2]), int(match[3] or 1)
            if lo > hi or step < 1:
                raise ValueError(f"--np range {part!r}: need A <= B and STEP >= 1")
            counts.update(range(lo, hi + 1, step))
        elif part.isdigit():
            counts.add(int(part))
        else:
            raise ValueError(f"--np: cannot read {part!r}; expected N, A..B or A..B:STEP")
    if not counts or min(counts) < 2:
        raise ValueError("--np: every count must be >= 2 (a collective needs two ranks)")
    return sorted(counts)


def run(args: argparse.Namespace) -> int:
    try:
        counts = parse_np(args.np)
        table = read_region_table(args.table)
        topo = read_topology(args.topology)
        measured = read_measured(args.calibrate) if args.calibrate else []
        largest = max([*counts, *(m.np for m in measured)])
        full = place(topo, largest, nodes=args.nodes, ppn=args.ppn, placement=args.placement, mapping=args.mapping)
        params = None
        if measured:
            fit = calibrate(measured, full, table, segsize=args.segsize, quantity=args.measured_as)
            print("\n".join(fit.lines()), file=sys.stderr)
            params = fit.params
        rows = [
            predict(args.collective, args.algorithm, full.prefix(n), table, args.bytes, params=params,
                    segsize=args.segsize, overlap=args.overlap)
            for n in counts
        ]  # fmt: skip
    except (ValueError, TopologyError, MappingUnavailable, RegionTableError, ModelError, MeasuredError) as exc:
        print(f"mpiatlas predict: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out: list[PredictionRow] = [
            {"np": r.np, "bytes": r.bytes, "predicted_us": round(r.completion_us, 6),
             "rank_mean_us": round(r.rank_mean_us, 6), "algorithm": r.algorithm}
            for r in rows
        ]  # fmt: skip
        print(json.dumps(out, indent=1))
        return 0
    _print_table(args, rows, missing_bandwidth=args.bytes > 1024 and not table.bandwidth_MBps)
    return 0


def _print_table(args: argparse.Namespace, rows: list[Any], *, missing_bandwidth: bool) -> None:
    title = (f"{args.collective} {args.algorithm}, {args.bytes} B, {args.nodes} node(s), "
             f"{args.placement}/{args.mapping}")  # fmt: skip
    table = Table(title=escape(title))
    for name in ("np", "algorithm", "predicted µs", "rank mean µs", "rule"):
        table.add_column(name, justify="right" if name != "algorithm" else "left")
    for r in rows:
        table.add_row(str(r.np), escape(r.algorithm), f"{r.completion_us:.3f}", f"{r.rank_mean_us:.3f}", r.shape)
    console = Console()
    console.print(table)
    console.print("predicted: the last rank has its data; rank mean: the mean over ranks of when each is done "
                  "(what OSU's Avg Latency averages)")  # fmt: skip
    if missing_bandwidth:
        console.print("note: the table has no bandwidth_MBps column, so every message costs its region's latency "
                      "whatever its size")  # fmt: skip

"""``mpiatlas cells``: list the campaign matrix (what ``snakemake -n`` will run) and its time estimate.

``mappings: auto`` / ``processes: auto`` are planned for this host, the config's ``topology``, or the
node given here (``--topology`` an hwloc XML file or a synthetic description, ``--sysfs`` a copy of a
node's /sys/devices/system): what the campaign would run there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mpiatlas.campaign import auto_plan
from mpiatlas.programs import expand, unplanned_notes
from mpiatlas.campaign.resources import estimate
from mpiatlas.node.topology import Topology, TopologyError
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cells", help=COMMAND_HELP["cells"],
                       description=__doc__)
    p.add_argument("--config", default="config/config.yaml", type=Path)
    node = p.add_mutually_exclusive_group()
    node.add_argument("--topology", metavar="XML|SYNTHETIC",
                      help="plan `auto` for this node: an hwloc XML file or a synthetic description such as "
                      "'pack:2 numa:4 die:2 l3:2 core:4 pu:1'")
    node.add_argument("--sysfs", metavar="DIR", type=Path,
                      help="plan `auto` for the node of this Linux sysfs tree (/sys/devices/system or a copy)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        topology = (read_topology(args.topology) if args.topology
                    else Topology.from_sysfs(args.sysfs) if args.sysfs else None)
    except TopologyError as exc:
        print(f"mpiatlas cells: {'--topology' if args.topology else '--sysfs'}: {exc}", file=sys.stderr)
        return 2
    config = auto_plan.load(args.config, topology=topology)  # a ConfigError is reported by the cli, exit 2
    cells = expand(config)
    for cell in cells:
        print(cell.id)
    imb = sum(1 for c in cells if c.kind == "imb")
    print(f"# {len(cells)} cells ({imb} IMB, {len(cells) - imb} kernel)")
    for left_out in unplanned_notes(config):  # one line per reason: no cell is dropped silently
        print(f"# not planned: {left_out['what']}: {left_out['why']} ({left_out['cells']} cells)")
    note = auto_plan.note(config.auto)
    if note:
        print(f"# {note}")
    print(f"# {estimate(config, cells).line()}")
    return 0

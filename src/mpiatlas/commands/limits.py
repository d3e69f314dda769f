"""``mpiatlas limits``: measure the node's memory copy bandwidth per cache level (likwid-bench).

Writes ``<out-dir>/<node>.json`` for this node and ``<out-dir>/limits.json`` with every node's
record. Inside a multi-node SLURM allocation it runs itself once per node (``srun
--ntasks-per-node=1``), so each node of the campaign is measured on that node. Without likwid-bench,
mpiatlas's own copy kernel (src/kernels/stream.c, built with the C compiler) measures the same levels
(the record's ``tool`` says which). A failing likwid-bench, or neither, gives a record with
``available: false`` and the reason, and exit code 0: the limit is optional, the campaign goes on.

The record is cached per node and boot (``--cache-dir``, default ``$XDG_CACHE_HOME/mpiatlas/limits``
or ``~/.cache/mpiatlas/limits``; key: hostname, boot id, likwid-bench version (without it the copy
kernel's source and compiler), CPU model, cache sizes): a node's copy rate does not change within a boot,
and re-measuring it alone on the machine every campaign costs ~20 s. A cached record is copied with
``cached_from`` naming the cache file and its original ``measured_at``; ``--fresh`` measures (and re-caches)
anyway. Unavailable records are never cached, and installing likwid changes the key, so it takes effect at once.

Each record also lists the node's network links (/sys/class/net, /sys/class/infiniband) and the
rate of the one inter-node traffic uses: the ``--tcp-interface`` the stacks are configured with,
else the default route's; ``--bandwidth-gbit-s`` (config ``network.bandwidth_gbit_s``) stands in
when that link's rate cannot be read (a veth, a VM NIC). Read fresh on every run, never cached.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from mpiatlas.node import limits
from mpiatlas.files import write_json_atomic
from mpiatlas.commands import COMMAND_HELP


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("limits", help=COMMAND_HELP["limits"],
                              description=__doc__)
    p.add_argument("--out-dir", required=True, metavar="DIR", help="directory for <node>.json and limits.json")
    p.add_argument("--this-node", action="store_true",
                   help="measure this node only, even inside a multi-node SLURM allocation (what srun runs)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="cache of records per node and boot (default: $XDG_CACHE_HOME/mpiatlas/limits, "
                   "else ~/.cache/mpiatlas/limits)")
    p.add_argument("--fresh", action="store_true", help="measure even when the cache holds this node's record")
    p.add_argument("--tcp-interface", action="append", default=[], metavar="IFACE",
                   help="interface the stacks' inter-node traffic uses (config stacks.*.tcp_interface; repeatable, "
                   "first present wins); default: the default route's")
    p.add_argument("--bandwidth-gbit-s", type=_positive, default=None, metavar="GBIT",
                   help="link rate when the link's own cannot be read (config network.bandwidth_gbit_s)")
    p.add_argument("--network-name", default=None, help="label of that configured link (config network.name)")
    p.set_defaults(func=run)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of Gbit/s > 0, got {text!r}")
    return value


def _network_argv(args: argparse.Namespace) -> list[str]:
    """The link options again, for the per-node runs under srun."""
    out = [a for iface in args.tcp_interface for a in ("--tcp-interface", iface)]
    if args.bandwidth_gbit_s is not None:
        out += ["--bandwidth-gbit-s", repr(args.bandwidth_gbit_s)]
    if args.network_name is not None:
        out += ["--network-name", args.network_name]
    return out


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nodes = limits.slurm_nodes()
    if nodes > 1 and not args.this_node and shutil.which("srun"):
        argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                sys.executable, "-m", "mpiatlas.cli", "limits", "--this-node", "--out-dir", str(out_dir),
                *(["--cache-dir", str(args.cache_dir)] if args.cache_dir is not None else []),
                *(["--fresh"] if args.fresh else []), *_network_argv(args)]
        rc = subprocess.run(argv, check=False).returncode
        if rc != 0:
            print(f"mpiatlas limits: {' '.join(argv)} exited {rc}; merging the nodes that wrote a record",
                  file=sys.stderr)
    else:
        record = limits.node_record(args.cache_dir, fresh=args.fresh, tcp_interfaces=args.tcp_interface,
                                    config_gbit_s=args.bandwidth_gbit_s, config_name=args.network_name)
        write_json_atomic(out_dir / f"{record['node']}.json", record)
    records = []
    for path in sorted(out_dir.glob("*.json")):
        if path.name == "limits.json":
            continue
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"mpiatlas limits: {path}: unreadable record ({exc})", file=sys.stderr)
    limits.write_records(records, out_dir / "limits.json")
    for r in records:
        state = "available" if r.get("available") else f"unavailable: {r.get('reason')}"
        spreads = limits.level_spreads(r)
        rates = ", ".join(f"{k} {v:.0f} MB/s" + (f" (runs within {spreads[k]:.0%})" if k in spreads else "")
                          for k, v in limits.level_limits(r).items())
        origin = f"; cached, measured {r.get('measured_at')}" if r.get("cached_from") else ""
        tool = f"{r.get('tool')} " if r.get("tool") else ""
        print(f"{r.get('node')}: {state}" + (f" ({tool}copy rate, 1 core, best run: {rates}{origin})" if rates else ""))
        print(f"{r.get('node')}: {_link_line(r.get('network_link'))}")
    return 0


def _link_line(net: object) -> str:
    if not isinstance(net, dict):
        return "network link not recorded"
    iface = net.get("interface") or "no interface"
    how = f", {net['chosen_by']}" if net.get("chosen_by") else ""
    rate = f"{net['gbit_s']:g} Gbit/s ({net.get('source')})" if net.get("gbit_s") else "rate unknown"
    note = f"; {net['note']}" if net.get("note") else ""
    return f"link {iface}{how}: {rate}{note}"

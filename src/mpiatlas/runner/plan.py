"""Where a cell's ranks go: the launcher, one node's pins or cpu sets, or a placement over nodes.

One node: ``threads`` cores per rank under the mapping (a rank of a hybrid cell owns a *set* of
cores: consecutive ones for `core`, one per domain round for the spreading mappings); a stack
whose launch layer cannot bind a rank to a set (``Stack.multi_core_pins``) runs the cell unpinned
and says so. Under the likwid pinner (runner.likwid_pin) the same cpus go to likwid-pin instead,
one list per rank, and the stack binds nothing. Several nodes (the `node` mapping, or a spread
mapping filling nodes such as core-n2: :func:`plan_fill`; hybrid ranks: runner.hybrid_nodes): srun inside the
allocation, or mpirun over ssh to the config's hosts (mpiatlas.node.ssh_hosts); either way the nodes are
probed, ranks placed block or cyclic over them, co-located nodes recognised by their kernel boot id
(mpiatlas.node.multinode).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from mpiatlas.node import multinode, ssh_hosts, topology
from mpiatlas.evidence.provenance import PlanFacts
from mpiatlas.matrix.cells import fills_nodes
from mpiatlas.models.region_latency import place
from mpiatlas.runner import likwid_pin
from mpiatlas.runner.hybrid_nodes import plan_hybrid_nodes, rank_cpu_sets
from mpiatlas.stacks import Stack, StackError, fabrics
from mpiatlas.stacks.base import SHM, medium

if TYPE_CHECKING:
    from mpiatlas.spine.cell_coords import Coords
    from mpiatlas.spine.cell_spec import CellSpec




class PlanRefused(Exception):
    """The cell cannot be placed (``cause``: MappingUnavailable or StackError); ``facts``: what
    planning found before it refused (an unavailable cell's provenance keeps them)."""

    def __init__(self, cause: topology.MappingUnavailable | StackError, facts: PlanFacts) -> None:
        super().__init__(str(cause))
        self.cause, self.facts = cause, facts


@dataclass
class Plan:
    """A cell's placement: a cpu per rank (``pins``) or a set per rank (``pin_sets``)."""

    pins: list[int] | None
    pin_sets: list[tuple[int, ...]] | None
    oversubscribed: bool
    facts: PlanFacts = field(default_factory=PlanFacts)
    # Over several nodes: what the probe found (judged after the launch).
    node_facts: list[multinode.NodeFacts] | None = None
    # Why a hybrid cell runs unpinned (its stack cannot bind a rank to a set), else None.
    unpinned_note: str | None = None
    # The likwid pinner: each rank's cpus, in thread order (likwid-pin pins thread i to the i-th); the
    # stack binds nothing (pins and pin_sets are None), and likwid-pin's path.
    likwid_sets: list[tuple[int, ...]] | None = None
    likwid_pin: str | None = None
    # Over nodes: each rank's node index (the allocation's nodes in host order), checked after the launch.
    planned: list[int] | None = None
    # A cell filling nodes (core-n2): the nodes its ranks use and, for block, the ranks a full node
    # holds (its cores); the launch is told both (LaunchSpec.fill). None for every other cell.
    fill: tuple[int, int | None] | None = None


def resolve_launcher(requested: str | None, environ: Mapping[str, str] | None = None) -> str:
    """campaign.launcher -> the launcher to use here: auto is srun inside a SLURM job, else mpirun."""
    environ = os.environ if environ is None else environ
    if requested in (None, "", "auto"):
        return "srun" if environ.get("SLURM_JOB_ID") else "mpirun"
    if requested not in ("mpirun", "srun"):
        raise ValueError(f"unknown launcher {requested!r}; choose auto, mpirun or srun")
    return requested


def launch_topology(launcher: str) -> topology.Topology:
    """The node's topology; under srun only the cores this batch job was given (its affinity):
    on a node shared with other jobs, a `core` cell must pin to its own cpus, not to cpu 0."""
    topo = topology.detect()
    if launcher == "srun" and os.environ.get("SLURM_JOB_ID"):
        topo = topo.restricted_to(os.sched_getaffinity(0))
    return topo


def cell_nodes(cell: Coords) -> tuple[int, int | None]:
    """(nodes, ranks per node) of a cell's launch: the most ranks a node holds (np / nodes rounded up,
    round-robin as ``--map-by node``: 3 over 2 is 2 + 1); None on one node."""
    nodes = int(cell.get("nodes", 1))
    return nodes, (-(-int(cell["np"]) // nodes) if nodes > 1 else None)


def cell_distribution(cell: Coords) -> str:
    """How a cell's ranks go over nodes: its ``distribution`` coordinate, cyclic when it has none."""
    return cell.get("distribution") or "cyclic"


def _same_node_region(topo: topology.Topology, pins: list[int] | None,
                      pin_sets: list[tuple[int, ...]] | None) -> str | None:
    """The region of ranks 0 and 1 on one node: that of their cpus, or None when they were given the
    same cpu set (co-located, oversubscribed nodes: the kernel places them, no region is planned)."""
    if pins is not None:
        return topology.region(topo, pins[0], pins[1])
    if pin_sets is None or set(pin_sets[0]) == set(pin_sets[1]):
        return None
    return topology.region(topo, pin_sets[0][0], pin_sets[1][0])


def interface_env(stack: Stack, spec: CellSpec) -> dict[str, str]:
    """Variables keeping the stack's TCP traffic on the cell's ``tcp_interface`` ({} without one),
    and an InfiniBand transport on the stack's ``net_devices``: UCX_NET_DEVICES naming the TCP
    interface would leave an IB transport no device, so it is dropped for those."""
    iface, transport = spec.get("tcp_interface"), spec["cell"]["transport"]
    env = stack.interface_env(iface) if iface else {}
    if fabrics.needs_rdma(transport):
        env.pop("UCX_NET_DEVICES", None)
    return env | fabrics.net_device_env(transport, spec.get("net_devices"))


def plan_single_node(stack: Stack, spec: CellSpec, topo: topology.Topology, launcher: str,
                     record: PlanFacts, threads: int = 1, threaded: bool = False) -> Plan:
    """The placement of a one-node cell: ``threads`` cores per rank under the mapping; a hybrid
    rank gets a cpu set where the stack can bind one. ``threaded`` programs record the cores asked for."""
    cell = spec["cell"]
    ncores, cores = len(topo.cores), cell["np"] * threads
    # same_core on a node without SMT: both ranks on one cpu (topology.region_pair's share_cpu).
    shared = cell["mapping"] == "same_core" and not any(len(core.pus) > 1 for core in topo.cores)
    oversubscribed = record.oversubscribed = cores > ncores or shared
    if threaded:
        record.cores_requested = cores
    if oversubscribed and not spec["allow_oversubscribe"]:
        wanted = f"{cell['np']} ranks x {threads} threads" if threaded else f"{cell['np']} ranks"
        why = "two ranks on one cpu (no core has SMT siblings)" if shared else f"{wanted} > {ncores} cores"
        raise topology.MappingUnavailable(cell["mapping"], f"{why} and oversubscription is off")
    sets = rank_cpu_sets(topo, cell["mapping"], cell["np"], threads, oversubscribe=oversubscribed)
    plan = Plan(None, None, oversubscribed, record)
    if threaded and likwid_pin.is_likwid(spec):
        plan.likwid_sets, plan.likwid_pin = sets, likwid_pin.likwid_pin_path()
        record.requested_pins = [list(s) for s in sets]
    elif threads == 1:
        plan.pins = [s[0] for s in sets]
        record.requested_pins = plan.pins
    elif launcher in getattr(stack, "multi_core_pins", ()):
        plan.pin_sets = sets
        record.requested_pins = [list(s) for s in sets]
    else:
        record.requested_pins = None
        record.wanted_cpu_sets = [list(s) for s in sets]
        plan.unpinned_note = (f"hybrid ({threads} threads per rank): the {stack.kind} launch layer cannot bind a "
                              f"rank to several cores with {launcher}, so the ranks ran unpinned "
                              f"(wanted {[list(s) for s in sets]})")
    firsts = [s[0] for s in sets]
    record.region = topology.region(topo, firsts[0], firsts[1]) if len(firsts) > 1 else None
    return plan


def plan_multinode(stack: Stack, spec: CellSpec, topo: topology.Topology, launcher: str,
                   record: PlanFacts, threads: int = 1) -> Plan:
    """A cell over nodes: refuse what cannot cross nodes, probe the allocation's nodes, and place
    the ranks (`node`: multinode.placement; a spread mapping filling nodes: :func:`plan_fill`;
    hybrid ranks, ``threads`` > 1: runner.hybrid_nodes, a cpu set per rank on its node)."""
    cell = spec["cell"]
    nodes, np = int(cell["nodes"]), int(cell["np"])
    if launcher != "srun" and not spec.get("hosts"):
        raise StackError(f"unavailable: a cell over {nodes} nodes runs inside a SLURM allocation with launcher "
                         f"srun (profiles/slurm), or with launcher mpirun over ssh to the config's hosts: list "
                         f"(or hostfile:); launcher {launcher} without hosts cannot cross nodes")
    transport = stack.transport(cell["transport"])
    if medium(transport.expect) == SHM and not transport.mixed:
        raise StackError(f"unavailable: transport {cell['transport']!r} of {stack.kind} is shared memory "
                         f"({transport.expect}) and cannot connect ranks on different nodes")
    if launcher == "srun":
        facts = multinode.probe_nodes(nodes)
    else:  # mpirun over ssh to the config's hosts
        facts = _probe_ssh_hosts(spec, nodes, -(-np // nodes), record)
    # An InfiniBand/RoCE transport needs an active port on every node (unavailable otherwise).
    fabrics.require_devices(cell["transport"], {f.host: f.rdma_ports for f in facts}, spec.get("net_devices"))
    shared = multinode.colocated(facts)
    record.node_facts, record.colocated = multinode.facts_record(facts), shared
    if threads > 1:
        sets, planned, fill = plan_hybrid_nodes(stack, spec, topo, launcher, facts, threads, record)
        return Plan(None, sets, bool(record.oversubscribed), record, facts, planned=planned, fill=fill)
    if fills_nodes(cell["mapping"], nodes):
        return plan_fill(spec, topo, facts, record)
    oversubscribed = record.oversubscribed = multinode.machine_oversubscribed(np, facts) or np // nodes > len(topo.cores)
    if oversubscribed and not spec["allow_oversubscribe"]:
        raise topology.MappingUnavailable("node", f"{np} ranks on {nodes} nodes need more cpus than the machine(s) "
                                          "have and oversubscription is off")
    distribution = cell_distribution(cell)
    pins, pin_sets = multinode.placement(topo, np, nodes, shared_machine=shared,
                                         policy=spec.get("colocated_nodes", "spread"), distribution=distribution)
    record.requested_pins = pins if pins is not None else [list(s) for s in pin_sets or []]
    planned = multinode.planned_nodes(np, nodes, distribution)
    record.distribution, record.planned_nodes = distribution, planned
    # The region of ranks 0 and 1 (a PingPong's pair): another node, unless the placement puts both on one.
    record.region = None if np < 2 else "other_node" if planned[0] != planned[1] else _same_node_region(
        topo, pins, pin_sets)
    return Plan(pins, pin_sets, oversubscribed, record, facts, planned=planned)


def plan_fill(spec: CellSpec, topo: topology.Topology, facts: list[multinode.NodeFacts], record: PlanFacts) -> Plan:
    """A spread mapping over nodes (core-n2, socket-n2): rank -> (node, cpu) as
    :func:`mpiatlas.models.region_latency.place` models it -- block fills a node's cores in the
    mapping's order before the next node, cyclic deals ranks round-robin -- with this node's
    topology for every node. Any P up to nodes x cores; more is refused (no node has room).

    Nodes sharing one machine (policy ``spread``): once the ranks span two of them, every rank may
    use every core, as for the `node` mapping (each "node" would otherwise pin its first rank on
    the same physical core); the hosts are checked as planned all the same."""
    cell = spec["cell"]
    mapping, nodes, np = cell["mapping"], int(cell["nodes"]), int(cell["np"])
    distribution = cell_distribution(cell)
    cores = len(topo.cores)
    if np > nodes * cores:
        raise topology.MappingUnavailable(mapping, f"{np} ranks do not fit {nodes} nodes x {cores} cores (a cell "
                                          "filling nodes is never oversubscribed)")
    placed = place(topo, np, nodes=nodes, placement=distribution, mapping=mapping)
    planned, pins = list(placed.node_of), list(placed.cpu_of)
    used = max(planned) + 1
    shared = multinode.colocated(facts) and spec.get("colocated_nodes", "spread") == "spread" and used > 1
    every = sorted(c for core in topo.cores for c in core.pus)
    # Each set leads with the rank's planned cpu: the same set to the launcher, but the recorded
    # plan (requested_pins, first cpu of a set) still places the rank for the region-aware models.
    pin_sets = [(cpu, *(c for c in every if c != cpu)) for cpu in pins] if shared else None
    record.oversubscribed = multinode.plan_oversubscribed(planned, facts)
    if record.oversubscribed and not spec["allow_oversubscribe"]:
        raise topology.MappingUnavailable(mapping, f"{np} ranks placed {distribution} on {used} node(s) sharing one "
                                          "machine need more cpus than it has and oversubscription is off")
    record.requested_pins = [list(s) for s in pin_sets] if pin_sets else pins
    record.distribution, record.planned_nodes = distribution, planned
    record.region = None if np < 2 else "other_node" if planned[0] != planned[1] else _same_node_region(
        topo, None if pin_sets else pins, pin_sets)
    fill = (used, cores if distribution == "block" else None)
    return Plan(None if pin_sets else pins, pin_sets, bool(record.oversubscribed), record, facts,
                planned=planned, fill=fill)


def _probe_ssh_hosts(spec: CellSpec, nodes: int, ppn: int, record: PlanFacts) -> list[multinode.NodeFacts]:
    """mpirun over ssh: the cell's hosts (the first ``nodes`` of the config's), probed through its ssh agent."""
    hosts, ssh = ssh_hosts.cell_hosts(spec, nodes, ppn), ssh_hosts.spec_ssh(spec)
    record.ssh, record.launch_hosts = ssh.record(), [h.name for h in hosts]
    return ssh_hosts.probe_hosts(hosts, ssh)


class SshLaunch(TypedDict, total=False):
    """The LaunchSpec fields of mpirun over ssh (none on one node or under srun)."""

    hosts: list[str]
    rsh_agent: str
    rsh_args: tuple[str, ...]


def launch_hosts(spec: CellSpec, launcher: str, nodes: int) -> SshLaunch:
    """LaunchSpec fields of mpirun over ssh (hosts, rsh agent and its options); {} otherwise."""
    if launcher == "srun" or nodes == 1 or not spec.get("hosts"):
        return {}
    ssh = ssh_hosts.spec_ssh(spec)
    return {"hosts": [h["name"] for h in spec["hosts"][:nodes]], "rsh_agent": ssh.agent, "rsh_args": ssh.args}


def plan(stack: Stack, spec: CellSpec, topo: topology.Topology, launcher: str, threads: int,
         threaded: bool) -> Plan:
    """The placement of any cell: over nodes for the `node` mapping, else on this node; its facts
    in ``Plan.facts``, or PlanRefused with those found before the cell proved unplaceable."""
    # The facts are gathered here as planning goes: a refusal part-way keeps what was found.
    facts = PlanFacts()
    try:
        return _plan(stack, spec, topo, launcher, facts, threads, threaded)
    except (topology.MappingUnavailable, StackError) as exc:
        raise PlanRefused(exc, facts) from exc


def _plan(stack: Stack, spec: CellSpec, topo: topology.Topology, launcher: str, record: PlanFacts,
          threads: int, threaded: bool) -> Plan:
    cell = spec["cell"]
    nodes, _ = cell_nodes(cell)
    if threaded and likwid_pin.is_likwid(spec):
        likwid_pin.check_pinnable(spec, launcher, nodes)
    if nodes == 1:
        stack.transport(cell["transport"])  # an unknown transport is named before the device is looked for
        fabrics.require_local(cell["transport"], spec.get("net_devices"))
        return plan_single_node(stack, spec, topo, launcher, record, threads, threaded)
    placed = plan_multinode(stack, spec, topo, launcher, record, threads)
    if threaded:
        record.cores_requested = cell["np"] * threads
    return placed

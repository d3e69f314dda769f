"""Cells over several nodes: what the allocation's nodes are, where ranks go, and whether the
placement that really happened is one a user may publish.

Multi-node cells run inside a SLURM allocation and are launched by srun (rank i on node
i mod m). Nodes can share one machine -- namespace or container "nodes" such as the CI
cluster, where every node believes it owns all cores. Pinning each node's first rank to
"core 0" then stacks the ranks of different nodes on one physical core, and their latency
reads ~1000x too high. Such nodes share a kernel, so they are recognised by their kernel
boot id; a cell whose co-located ranks could not all run at once is invalid, never averaged in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from collections.abc import Sequence
from typing import TypedDict

from mpiatlas.node import topology
from mpiatlas.stacks import fabrics
from mpiatlas.stacks.base import SRUN_BIND, StackError, local_index, node_of_rank

# Printed by every node of the allocation: hostname, kernel boot id, cpus this process may use, and
# its RDMA ports (stacks.fabrics: an InfiniBand transport needs one on every node).
PROBE_CODE = fabrics.PORTS_CODE + (
    "\nimport os, socket; print('mpiatlas-node', socket.gethostname(), "
    "open('/proc/sys/kernel/random/boot_id').read().strip(), len(os.sched_getaffinity(0)), "
    "os.cpu_count(), ','.join(rdma_ports()) or '-')")


@dataclass(frozen=True)
class NodeFacts:
    host: str
    boot_id: str
    cpus: int  # cpus of the machine (os.cpu_count): what co-located nodes share
    # InfiniBand/RoCE ports (stacks.fabrics); None when the probe did not list them.
    rdma_ports: tuple[fabrics.Port, ...] | None = None


def probe_nodes(nodes: int, timeout_s: float = 60) -> list[NodeFacts]:
    """One srun task per node of the allocation reports its host, boot id and cpu count."""
    srun = shutil.which("srun")
    if srun is None:
        raise StackError("unavailable: multi-node cells need a SLURM allocation (srun not on PATH)")
    argv = [srun, "-N", str(nodes), "--ntasks-per-node=1", "-n", str(nodes), sys.executable, "-c", PROBE_CODE]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise StackError(f"failed: probing the {nodes} nodes of the allocation took over {timeout_s} s") from None
    facts = parse_probe(out.stdout)
    if out.returncode != 0 or len(facts) != nodes:
        raise StackError(f"failed: probing {nodes} nodes with srun gave {len(facts)} answers "
                         f"(exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return facts


def parse_probe(text: str) -> list[NodeFacts]:
    facts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) in (5, 6) and parts[0] == "mpiatlas-node":
            ports = fabrics.parse_ports(parts[5]) if len(parts) == 6 else None
            facts.append(NodeFacts(parts[1], parts[2], int(parts[4]), ports))
    return sorted(facts, key=lambda f: f.host)


def colocated(facts: Sequence[NodeFacts]) -> bool:
    """Do some of these nodes share one machine (one kernel)?"""
    return len({f.boot_id for f in facts}) < len(facts)


def srun_hosts(output: str) -> dict[int, str]:
    """rank -> host, from srun's ``--cpu-bind=verbose`` lines ("... - node2, task  1  0 [..]: mask ...")."""
    hosts: dict[int, str] = {}
    for line in output.splitlines():
        match = SRUN_BIND.search(line)
        if match:
            host = line[: match.start(1)].split(" - ", 1)[-1].split(",")[0].strip()
            hosts[int(match.group(1))] = host
    return hosts


def placement(topo: topology.Topology, np: int, nodes: int, *, shared_machine: bool,
              policy: str, distribution: str = "cyclic") -> tuple[list[int] | None, list[tuple[int, ...]] | None]:
    """(pins, pin_sets) of the ranks of a `node`-mapped cell, each rank's cpus *on its own node*.

    A real cluster: consecutive cores on each node (topology.pin_list), the same on every node.
    Nodes sharing one machine with policy ``spread``: each node's ranks split that node's cores
    between them as cpu sets, so the kernel can run the ranks of different nodes side by side
    (a rank per node gets all cores; the check below still verifies the result). ``distribution``
    says which ranks share a node; a rank's cpus follow its index among them."""
    ppn = -(-np // nodes)  # the most ranks a node holds (round-robin: 3 over 2 is 2 + 1)
    local = [local_index(rank, np, nodes, distribution) for rank in range(np)]
    if not (shared_machine and policy == "spread"):
        # pin_list numbers ranks cyclically: rank j * nodes is local rank j of the first node.
        cyclic = topology.pin_list(topo, "node", np, nodes=nodes, oversubscribe=True)
        return [cyclic[j * nodes] for j in local], None
    cores = sorted(c for core in topo.cores for c in core.pus)
    if np > len(topo.cores):
        # More ranks than the shared machine has cores: fixed sets would put a measuring pair (ranks 0
        # and 1, local rank 0 of two nodes under cyclic) on one core; every rank may use every core,
        # and the kernel spreads the busy ones (measured: MPICH's cyclic PingPong timed out otherwise).
        return None, [tuple(cores)] * np
    chunk = max(1, len(cores) // ppn)
    local_sets = [tuple(cores[(j * chunk) % len(cores):(j * chunk) % len(cores) + chunk]) for j in range(ppn)]
    return None, [local_sets[j] for j in local]


def planned_nodes(np: int, nodes: int, distribution: str = "cyclic") -> list[int]:
    """The node index (in the allocation's order) of every rank under ``distribution``."""
    return [node_of_rank(rank, np, nodes, distribution) for rank in range(np)]


def placement_problems(np: int, nodes: int, rank_hosts: dict[int, str], binding: dict[int, set[int]],
                       facts: Sequence[NodeFacts], distribution: str = "cyclic",
                       planned: Sequence[int] | None = None) -> list[str]:
    """Why the placement that really happened is not the one asked for, if it is not: every
    rank's host is checked against the plan (which ranks share a node and which do not). The plan
    is ``planned`` (each rank's node index) when given -- a cell filling nodes, whose ranks per node
    depend on the node's cores -- else the `node` mapping's ``distribution`` over ``nodes``."""
    problems = []
    if len(rank_hosts) < np:
        return [f"the launch reported the host of {len(rank_hosts)} of {np} ranks, so the placement cannot be verified"]
    plan = list(planned) if planned is not None else planned_nodes(np, nodes, distribution)
    used, wanted = sorted(set(rank_hosts.values())), len(set(plan))
    if len(used) != wanted:
        problems.append(f"ranks ran on {len(used)} host(s) {used}, not on {wanted} nodes")
    # The first rank planned on each node names that node's host; every other rank is compared with it.
    first = {node: plan.index(node) for node in sorted(set(plan))}
    for rank in range(np):
        lead = first[plan[rank]]
        if rank != lead and rank_hosts[rank] != rank_hosts[lead]:
            problems.append(f"ranks {lead} and {rank} ran on {rank_hosts[lead]} and {rank_hosts[rank]}: "
                            f"the {distribution} placement puts them on one node")
    for lead in first.values():
        if lead and rank_hosts[lead] == rank_hosts[0]:
            problems.append(f"ranks 0 and {lead} both ran on {rank_hosts[0]}: the {distribution} placement puts them "
                            "on different nodes")
    problems += time_sliced(rank_hosts, binding, facts)
    return problems


def time_sliced(rank_hosts: dict[int, str], binding: dict[int, set[int]], facts: Sequence[NodeFacts]) -> list[str]:
    """Ranks of one machine bound to fewer cpus than there are ranks, although the machine has
    enough cpus for all of them: they take turns on a core, and every timing is that of the
    scheduler, not of MPI. (More ranks than the machine has cpus is oversubscription, labelled
    as such elsewhere.)"""
    boot_of = {f.host: f.boot_id for f in facts}
    cpus_of = {f.boot_id: f.cpus for f in facts}
    by_machine: dict[str, list[int]] = {}
    for rank, host in sorted(rank_hosts.items()):
        by_machine.setdefault(boot_of.get(host, host), []).append(rank)
    problems = []
    for machine, ranks in by_machine.items():
        hosts = sorted({rank_hosts[r] for r in ranks})
        if len(ranks) < 2 or len(hosts) < 2 or any(r not in binding for r in ranks):
            continue
        union = set().union(*(binding[r] for r in ranks))
        if len(union) < len(ranks) <= cpus_of.get(machine, len(ranks)):
            where = ", ".join(f"rank {r} ({rank_hosts[r]}) cpus {sorted(binding[r])}" for r in ranks)
            problems.append(
                f"mis-pinned: nodes {hosts} share one machine (kernel boot id {machine[:8]}) and their "
                f"{len(ranks)} ranks were bound to {len(union)} cpu(s) ({where}): they take turns on a core, "
                "so the timings measure the scheduler, not MPI")
    return problems


def plan_oversubscribed(planned: Sequence[int], facts: Sequence[NodeFacts]) -> bool:
    """More ranks than cpus on some machine when rank r runs on node ``planned[r]`` (the
    allocation's nodes in host order; co-located nodes add up)."""
    per_machine: dict[str, int] = {}
    for node in planned:
        boot = facts[node].boot_id if node < len(facts) else str(node)
        per_machine[boot] = per_machine.get(boot, 0) + 1
    cpus = {f.boot_id: f.cpus for f in facts}
    return any(n > cpus.get(boot, n) for boot, n in per_machine.items())


def machine_oversubscribed(np: int, facts: Sequence[NodeFacts]) -> bool:
    """More ranks than cpus on some machine (co-located nodes add up)."""
    ranks_per_node = -(-np // max(1, len(facts)))
    per_machine: dict[str, int] = {}
    for f in facts:
        per_machine[f.boot_id] = per_machine.get(f.boot_id, 0) + ranks_per_node
    return any(n > next(f.cpus for f in facts if f.boot_id == b) for b, n in per_machine.items())


class NodeFactsRecord(TypedDict):
    """A node's facts as provenance.json keeps them (``node_facts``)."""

    host: str
    boot_id: str
    cpus: int
    rdma_ports: list[str] | None  # stacks.fabrics.Port.describe of each


def facts_record(facts: Sequence[NodeFacts]) -> list[NodeFactsRecord]:
    return [{"host": f.host, "boot_id": f.boot_id, "cpus": f.cpus,
             "rdma_ports": None if f.rdma_ports is None else [p.describe() for p in f.rdma_ports]} for f in facts]

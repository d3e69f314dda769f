"""Hybrid MPI + OpenMP cells over several nodes: each rank owns ``threads`` cpus *on its node*.

A rank of ``t`` threads is one slot of ``t`` cores. The `node` mapping puts ``np / nodes`` ranks on
every node (cyclic or block, as for pure cells: multinode.planned_nodes), a spread mapping over nodes
(core-n2) fills a node with ``cores // t`` ranks before the next (block) or deals them round-robin
(cyclic). On its node, local rank j takes the j-th set of
(consecutive cores for `core` and `node`, one per domain round for l3/numa/socket;
:func:`rank_cpu_sets`, the one-node plan's too): the same sets on
every node, which is what srun's ``mask_cpu`` (indexed by the local task id), a rankfile and
I_MPI_PIN_DOMAIN all express. The launch is ``srun -N m --cpus-per-task=t --cpu-bind=mask_cpu:...``
under SLURM, ``mpirun`` with a rankfile (Open MPI) or hydra's ``-ppn`` with the masks (Intel MPI,
MPICH) over ssh hosts: the stacks' own ``pin_sets`` launches.

Threads are then pinned one per cpu of the set (programs.kernels.OMP_BINDING), so thread i of a rank
runs on the i-th cpu of its set in ascending order, and the kernel's ``thread_cpus`` (``sched_getcpu``
of every thread, on the rank's host) are checked against exactly that (programs.kernels.thread_problems).

Nodes sharing one machine (the namespace cluster) get the same sets on every node, so their ranks'
threads share the machine's cpus: counted per machine (threads, not ranks), that is oversubscription,
refused unless ``allow_oversubscribe``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mpiatlas.evidence.provenance import PlanFacts
from mpiatlas.matrix.cells import hybrid_fit_problem
from mpiatlas.node import multinode, topology
from mpiatlas.stacks import Stack, StackError
from mpiatlas.stacks.base import check_distribution

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec

def rank_cpu_sets(topo: topology.Topology, mapping: str, np: int, threads: int, *,
                  oversubscribe: bool) -> list[tuple[int, ...]]:
    """The OS cpus of each rank: ``threads`` cores per rank under ``mapping``."""
    if mapping in topology.REGION_MAPPINGS and threads > 1:
        raise topology.MappingUnavailable(mapping, f"a region mapping places one cpu per rank; this cell has "
                                                   f"{threads} threads per rank")
    slots = topology.pin_list(topo, mapping, np * threads, oversubscribe=oversubscribe)
    if threads == 1:
        return [(cpu,) for cpu in slots]
    if mapping == "core":
        # Neighbouring cores (sharing the closest caches) for one rank's threads.
        return [tuple(slots[r * threads:(r + 1) * threads]) for r in range(np)]
    # l3/numa/socket order is round-robin over domains: stride np keeps a rank in its domain.
    return [tuple(slots[r + k * np] for k in range(threads)) for r in range(np)]


def node_slots(np: int, nodes: int, per_node: int | None, distribution: str) -> tuple[list[int], list[int]]:
    """(node, local index) of every rank: ``per_node`` ranks fill a node first (block), or ranks are
    dealt round-robin over ``nodes`` (cyclic); ``per_node`` None: np / nodes (the `node` mapping)."""
    if check_distribution(distribution) == "cyclic":
        return [r % nodes for r in range(np)], [r // nodes for r in range(np)]
    per = per_node or -(-np // nodes)
    return [r // per for r in range(np)], [r % per for r in range(np)]


def machine_threads_oversubscribed(planned: Sequence[int], threads: int,
                                   facts: Sequence[multinode.NodeFacts]) -> bool:
    """More threads than cpus on some machine when rank r (of ``threads`` threads) runs on node
    ``planned[r]``: co-located nodes add up."""
    per_machine: dict[str, int] = {}
    for node in planned:
        boot = facts[node].boot_id if node < len(facts) else str(node)
        per_machine[boot] = per_machine.get(boot, 0) + threads
    cpus = {f.boot_id: f.cpus for f in facts}
    return any(n > cpus.get(boot, n) for boot, n in per_machine.items())


def check_stack_binds_sets(stack: Stack, launcher: str, nodes: int) -> None:
    """A hybrid rank over nodes needs its stack to bind it to a cpu set with this launcher."""
    if launcher not in stack.multi_core_pins:
        raise StackError(f"unavailable: {stack.kind} cannot bind a rank to a set of cpus with {launcher}, so "
                         f"hybrid ranks over {nodes} nodes cannot be pinned")


def plan_hybrid_nodes(stack: Stack, spec: CellSpec, topo: topology.Topology, launcher: str,
                      facts: list[multinode.NodeFacts], threads: int, record: PlanFacts,
                      ) -> tuple[list[tuple[int, ...]], list[int], tuple[int, int | None] | None]:
    """(each rank's cpu set on its node, each rank's node, the fill of a spread mapping or None) of a
    hybrid cell over nodes; ``record`` gets the plan. Refuses (MappingUnavailable) a rank with more
    threads than a node has cores, more ranks than the nodes hold, and oversubscription when it is off."""
    cell = spec["cell"]
    mapping, nodes, np = cell["mapping"], int(cell["nodes"]), int(cell["np"])
    distribution = cell.get("distribution") or "cyclic"
    check_stack_binds_sets(stack, launcher, nodes)
    cores = len(topo.cores)
    allow = bool(spec["allow_oversubscribe"])
    problem = hybrid_fit_problem(mapping, nodes, np, threads, cores, allow)
    if problem is not None:
        raise topology.MappingUnavailable(mapping, problem)
    if mapping == "node":
        ppn = -(-np // nodes)  # the most ranks a node holds (3 over 2: 2 + 1)
        per_node_over = ppn * threads > cores
        planned, local = node_slots(np, nodes, None, distribution)
        local_sets = rank_cpu_sets(topo, "core", ppn, threads, oversubscribe=per_node_over)
        fill = None
    else:
        per_node = cores // threads
        planned, local = node_slots(np, nodes, per_node, distribution)
        local_sets = rank_cpu_sets(topo, mapping, max(local) + 1, threads, oversubscribe=False)
        fill = (max(planned) + 1, per_node if distribution == "block" else None)
        per_node_over = False
    sets = [local_sets[j] for j in local]
    over = record.oversubscribed = per_node_over or machine_threads_oversubscribed(planned, threads, facts)
    if over and not allow:
        raise topology.MappingUnavailable(mapping, f"{np} ranks x {threads} threads on nodes sharing one machine need "
                                          "more cpus than it has and oversubscription is off")
    record.requested_pins = [list(s) for s in sets]
    record.distribution, record.planned_nodes = distribution, planned
    record.cores_requested = np * threads
    record.region = None if np < 2 else "other_node" if planned[0] != planned[1] else (
        None if set(sets[0]) == set(sets[1]) else topology.region(topo, sets[0][0], sets[1][0]))
    return sets, planned, fill

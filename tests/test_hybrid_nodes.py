"""Hybrid MPI + OpenMP over nodes (issue 24, item 2): planning, the launch per stack, the thread check.

runner.hybrid_nodes gives each rank of ``t`` threads a set of ``t`` cpus on its node: the `node` mapping
k = np / m ranks per node (block or cyclic), a spread mapping over nodes (core-n2) fills a node with
cores // t such ranks. Checked here on synthetic nodes: the plan, srun's / mpirun's / hydra's argv for
it, the refusals, and the per-thread check of jacobi's ``thread_cpus`` (OpenMP's binding: thread i on
the i-th cpu of its rank's set). The namespace-cluster run is tests/test_two_node_hybrid.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from mpiatlas import programs
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.evidence.provenance import PlanFacts
from mpiatlas.matrix.cells import hybrid_fit_problem
from mpiatlas.matrix.config import validate
from mpiatlas.node import multinode, topology
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.programs import unplanned_notes
from mpiatlas.programs.kernels import OMP_BINDING, thread_binding_env, thread_problems, threads_checked
from mpiatlas.runner.judge import judge_placement, omp_bound, set_binding_problems, set_bound
from mpiatlas.runner.hybrid_nodes import machine_threads_oversubscribed, node_slots, plan_hybrid_nodes
from mpiatlas.stacks import LaunchSpec, StackError
from mpiatlas.stacks.base import srun_argv
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI

NODE = parse_synthetic("pack:2 core:4 pu:1")  # 8 cores a node, 4 a socket
REAL = [multinode.NodeFacts("cn001", "a" * 36, 8), multinode.NodeFacts("cn002", "b" * 36, 8)]
SHARED = [multinode.NodeFacts("node1", "c" * 36, 2), multinode.NodeFacts("node2", "c" * 36, 2)]
HOSTS = ["cn001", "cn002"]


def _spec(mapping: str, np_: int, threads: int, distribution: str = "cyclic", nodes: int = 2,
          oversubscribe: bool = False) -> dict:
    cell = {"kind": "kernel", "stack": "intelmpi", "transport": "ofi-tcp", "mapping": mapping, "np": np_,
            "nodes": nodes, "benchmark": "jacobi", "algorithm": f"weak-L16-t{threads}", "rep": 0, "threads": threads}
    if distribution != "cyclic":
        cell["distribution"] = distribution
    return {"cell": cell, "colocated_nodes": "spread", "allow_oversubscribe": oversubscribe}


def _plan(mapping: str, np_: int, threads: int, distribution: str = "cyclic", facts: list | None = None,
          oversubscribe: bool = False, topo: topology.Topology = NODE, launcher: str = "srun"):
    record = PlanFacts()
    stack = IntelMPI(Path("/nonexistent/impi"))
    sets, planned, fill = plan_hybrid_nodes(stack, _spec(mapping, np_, threads, distribution,
                                                         oversubscribe=oversubscribe),
                                            topo, launcher, facts or REAL, threads, record)
    return sets, planned, fill, record


def test_node_mapping_gives_each_rank_its_threads_cores_on_its_node() -> None:
    # 4 ranks x 2 threads over 2 nodes of 8 cores: 2 ranks per node, consecutive cores 0-1 and 2-3 on each.
    sets, planned, fill, record = _plan("node", 4, 2, "cyclic")
    assert planned == [0, 1, 0, 1] and sets == [(0, 1), (0, 1), (2, 3), (2, 3)] and fill is None
    assert record.cores_requested == 8 and record.oversubscribed is False and record.region == "other_node"
    sets, planned, _, record = _plan("node", 4, 2, "block")
    assert planned == [0, 0, 1, 1] and sets == [(0, 1), (2, 3), (0, 1), (2, 3)]
    assert record.region == "same_socket" and record.requested_pins == [[0, 1], [2, 3], [0, 1], [2, 3]]
    # Equal cores: 2 ranks x 4 threads (one per socket of... one node's first half) and 8 x 1 per node.
    sets, planned, _, _ = _plan("node", 2, 4, "cyclic")
    assert planned == [0, 1] and sets == [(0, 1, 2, 3), (0, 1, 2, 3)]


def test_a_spread_mapping_fills_a_node_with_ranks_of_t_cores_before_the_next() -> None:
    # core-n2, 3 threads a rank: a node of 8 cores holds 2 such ranks; 3 ranks spill onto node 2.
    sets, planned, fill, _ = _plan("core", 3, 3, "block")
    assert planned == [0, 0, 1] and sets == [(0, 1, 2), (3, 4, 5), (0, 1, 2)] and fill == (2, 2)
    # socket-n2: a rank's threads stay in one socket (stride over the domains), ranks alternate sockets.
    sets, planned, fill, _ = _plan("socket", 4, 2, "block")
    assert planned == [0, 0, 0, 0] and fill == (1, 4)
    assert [topology.region(NODE, s[0], s[1]) for s in sets] == ["same_socket"] * 4
    assert topology.region(NODE, sets[0][0], sets[1][0]) == "other_socket"
    sets, planned, fill, _ = _plan("core", 3, 4, "cyclic")
    assert planned == [0, 1, 0] and sets == [(0, 1, 2, 3), (0, 1, 2, 3), (4, 5, 6, 7)] and fill == (2, None)


def test_cells_that_cannot_run_are_refused_with_why() -> None:
    with pytest.raises(topology.MappingUnavailable, match="a rank of 16 threads needs 16 cores; a node has 8"):
        _plan("node", 2, 16)
    with pytest.raises(topology.MappingUnavailable, match="5 ranks x 4 threads do not fit 2 nodes x 8 cores"):
        _plan("core", 5, 4, "block")
    with pytest.raises(topology.MappingUnavailable, match="6 ranks x 2 threads per node > 8 cores"):
        _plan("node", 12, 2)
    # Co-located nodes (one machine of 2 cpus): 1 rank x 2 threads on each is 4 threads on 2 cpus.
    with pytest.raises(topology.MappingUnavailable, match="more cpus than it has"):
        _plan("node", 2, 2, facts=SHARED, topo=parse_synthetic("core:2 pu:1"))
    sets, planned, _, record = _plan("node", 2, 2, facts=SHARED, topo=parse_synthetic("core:2 pu:1"),
                                     oversubscribe=True)
    assert sets == [(0, 1), (0, 1)] and planned == [0, 1] and record.oversubscribed is True
    assert machine_threads_oversubscribed([0, 1], 2, SHARED) and not machine_threads_oversubscribed([0, 1], 2, REAL)
    assert node_slots(5, 2, 3, "block") == ([0, 0, 0, 1, 1], [0, 1, 2, 0, 1])


def test_stacks_launch_hybrid_ranks_over_two_nodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    sets, _, _, _ = _plan("node", 4, 2, "block")
    # srun: 2 tasks a node, each owning 2 cpus (the step's --cpus-per-task), bound by mask per local task.
    argv = srun_argv(LaunchSpec(np=4, transport="ofi-tcp", pin_sets=sets, nodes=2, ppn=2, launcher="srun",
                                distribution="block"))
    assert argv[argv.index("-N"):argv.index("-N") + 3] == ["-N", "2", "--distribution=block"]
    assert "--cpus-per-task=2" in argv and argv[-1] == "--cpu-bind=verbose,mask_cpu:0x3,0xc"
    spec = LaunchSpec(np=4, transport="ofi-tcp", pin_sets=sets, nodes=2, ppn=2, hosts=HOSTS, distribution="block",
                      workdir=tmp_path, rsh_agent="/usr/bin/ssh")
    # Intel MPI's hydra: -ppn 2 per host, one mask per local rank.
    impi = IntelMPI(tmp_path / "impi").launch(["jacobi"], spec)
    assert impi.argv[1:7] == ["-n", "4", "-hosts", "cn001,cn002", "-ppn", "2"]
    assert impi.env["I_MPI_PIN_DOMAIN"] == "[0x3,0xc]" and impi.env["I_MPI_PIN"] == "1"
    # MPICH's hydra: the same with -bind-to user sets.
    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2").launch(["jacobi"], spec)
    assert mpich.argv[1:9] == ["-n", "4", "-hosts", "cn001,cn002", "-ppn", "2", "-bind-to", "user:0+1,2+3"]
    # Open MPI: a rankfile naming each rank's host and its cpus.
    ompi = OpenMPI(tmp_path / "ompi", source="system", version="4.1.4").launch(
        ["./jacobi"], LaunchSpec(**{**spec.__dict__, "transport": "ob1-tcp"}))
    assert ompi.argv[ompi.argv.index("--host") + 1] == "cn001:2,cn002:2" and "--rankfile" in ompi.argv
    assert (tmp_path / "rankfile").read_text().splitlines() == [
        "rank 0=cn001 slot=0,1", "rank 1=cn001 slot=2,3", "rank 2=cn002 slot=0,1", "rank 3=cn002 slot=2,3"]
    cyclic, _, _, _ = _plan("node", 4, 2, "cyclic")
    argv = srun_argv(LaunchSpec(np=4, transport="ofi-tcp", pin_sets=cyclic, nodes=2, ppn=2, launcher="srun"))
    assert "--distribution=cyclic" in argv and argv[-1] == "--cpu-bind=verbose,mask_cpu:0x3,0xc"


def test_a_stack_that_cannot_bind_a_set_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IntelMPI, "multi_core_pins", ("mpirun",))
    with pytest.raises(StackError, match="cannot bind a rank to a set of cpus with srun"):
        _plan("node", 2, 2)


def _records(cpus: dict[int, list[int]]) -> pl.DataFrame:
    return pl.DataFrame({"rank": list(cpus), "host": [f"node{r % 2 + 1}" for r in cpus],
                         "thread_cpus": list(cpus.values())})


def test_every_thread_is_checked_against_its_planned_cpu() -> None:
    sets = [(2, 3), (0, 1)]
    assert thread_binding_env(2, sets) == OMP_BINDING and thread_binding_env(1, sets) == {}
    assert thread_binding_env(2, None) == {}
    good = _records({0: [2, 3], 1: [0, 1]})
    assert thread_problems(good, sets) == [] and threads_checked(good, sets) == 4
    # Thread 1 of rank 1 on cpu 0, inside its set but not where OpenMP's binding puts it.
    (problem,) = thread_problems(_records({0: [2, 3], 1: [0, 0]}), sets)
    assert problem == "rank 1 (node2): OpenMP thread 1 ran on cpu 0, planned cpu 1 (threads on [0, 0], planned [0, 1])"
    (problem,) = thread_problems(_records({0: [3, 2], 1: [0, 1]}), sets)
    assert problem.startswith("rank 0 (node1): OpenMP thread 0 ran on cpu 3, planned cpu 2")
    # A one-thread rank: inside its set is all that is planned.
    assert thread_problems(_records({0: [3], 1: [0]}), sets) == []
    (problem,) = thread_problems(_records({0: [5], 1: [0]}), sets)
    assert problem == "rank 0 (node1): OpenMP threads ran on cpus [5], outside its set [2, 3]"
    assert threads_checked(good, None) == 0


SRUN_HYBRID = """\
cpu-bind=MASK - node1, task  0  0 [17290]: mask 0x3 set
cpu-bind=MASK - node2, task  1  0 [17295]: mask 0x3 set
"""


def test_a_hybrid_rank_reported_on_its_main_threads_cpu_is_bound_as_planned() -> None:
    """Intel MPI's pin table reads a rank's binding inside MPI_Init, after OpenMP pinned its main thread to
    the set's first cpu (measured on the namespace cluster: {0} for the set {0, 1}); srun's lines show the
    set. Either is the plan; another cpu is not, and co-located hybrid ranks are judged on their sets."""
    spec = _spec("node", 2, 2)
    sets = [(0, 1), (0, 1)]
    assert set_bound({0}, (0, 1), True) and set_bound({0, 1}, (0, 1), False) and not set_bound({0}, (0, 1), False)
    assert not set_bound({1}, (0, 1), True)
    assert omp_bound(spec, sets) and not omp_bound(_spec("node", 2, 1), sets) and not omp_bound(spec, None)
    main_thread = Outcome("ok", None, {"obtained_binding": {"0": [0], "1": [0]}})
    judged = judge_placement(main_thread, spec, sets, SHARED, SRUN_HYBRID, [0, 1])
    assert judged.status == "ok" and judged.details["binding_ok"] is True, judged.reason
    assert judged.details["rank_hosts"] == {"0": "node1", "1": "node2"}
    wrong = Outcome("ok", None, {"obtained_binding": {"0": [0], "1": [1]}})
    judged = judge_placement(wrong, spec, sets, SHARED, SRUN_HYBRID, [0, 1])
    assert judged.status == "invalid" and "ranks [1] were not bound to the cpu sets asked for" in judged.reason
    assert set_binding_problems([(2, 3)], {0: {2}}, omp=True) == []
    assert set_binding_problems([(2, 3)], {0: {3}}, omp=True) == ["rank 0 asked for cpus [2, 3] but got [3]"]


def _topology_config(**top: object):
    return validate({
        "campaign": {"name": "t", "repetitions": 1, "allow_oversubscribe": False},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["ofi-tcp"]}},
        "mappings": ["core", "node"], "nodes": [2], "over_nodes": [2], "processes": [2],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 4], "time_s": 0.1, "mem_gb": 0.5},
        "kernels": {"jacobi": {"L": 8, "processes": [2, 4], "hybrid": {"processes": [1, 2, 4], "threads": [2, 4]}}},
        **top,
    })


def test_hybrid_cells_the_declared_nodes_cannot_hold_are_not_planned_and_noted_once() -> None:
    config = _topology_config(topology="core:2 pu:1")  # nodes of 2 cores
    hybrid = sorted((c.placement, c.np, c.threads) for c in programs.expand(config) if c.threads > 1)
    # core-n2 holds one 2-thread rank a node (np <= 2); node2 one per node; no 4-thread rank fits a node.
    assert hybrid == [("core-n2", 1, 2), ("core-n2", 2, 2), ("node2", 2, 2)]
    # The 1 x 2 and 1 x 4 hybrids have no `node` cell over 2 nodes (a rank for each node): said, not dropped.
    assert unplanned_notes(config) == [{
        "what": "cells of a mapping at a process count it cannot place", "cells": 2,
        "why": "mapping 'node' over 2 nodes needs a rank on each node: P = 1 < 2"}, {
        "what": "hybrid cells over nodes of core:2 pu:1", "cells": 7,
        "why": "a rank of 4 threads needs 4 cores; a node has 2; 4 ranks x 2 threads do not fit 2 nodes x 2 cores "
               "(1 such ranks per node; a cell filling nodes is never oversubscribed); 2 ranks x 2 threads per node "
               "> 2 cores and oversubscription is off"}]
    # Without a declared topology every cell that has a rank for each node is planned: the runner refuses
    # what its node cannot hold.
    plain = _topology_config()
    assert len([c for c in programs.expand(plain) if c.threads > 1]) == 10
    assert [n["why"] for n in unplanned_notes(plain)] == ["mapping 'node' over 2 nodes needs a rank on each node: "
                                                          "P = 1 < 2"]
    assert hybrid_fit_problem("node", 2, 4, 2, 8, False) is None

"""Any P over nodes (issue 24, item 1): the spread mappings (core, l3, die, numa, socket) over m nodes.

`over_nodes: [2]` plans a `core` cell over two nodes (id segment core-n2) for every P, odd ones too;
runner.plan.plan_fill places rank r on (node, cpu): block fills a node's cores in the mapping's order
before the next node, cyclic deals ranks round-robin. Checked here on the sysfs tree of a 2-socket
Xeon and on synthetic nodes, for P = 1 .. 2 x cores: the plan, srun's argv for it, the per-rank host
check, and the ring model pricing every hop of such a placement by its region, across nodes too,
with the boundaries the ring chart draws. The namespace-cluster run is tests/test_two_node_fill.py.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema.core import load_schema

from conftest import REPO
from mpiatlas import programs
from mpiatlas.campaign import resources
from mpiatlas.evidence.provenance import PlanFacts
from mpiatlas.matrix.cells import fills_nodes, parse_id, parse_mapping_segment
from mpiatlas.spine.series import mapping_segment
from mpiatlas.matrix.config import validate
from mpiatlas.models.region_latency import RegionTable
from mpiatlas.models.kernels import fit_ring
from mpiatlas.models.ring_records import PlacementBoundary, RingFit
from mpiatlas.models.ring_regions import (
    RegionInputs,
    RingHops,
    cell_placement,
    exchange_time,
    placement_boundaries,
    region_inputs_from,
    ring_hops,
)
from mpiatlas.node import multinode, topology
from mpiatlas.node.topology import Topology, pin_list
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.report.charts import chart_spec, measured_vs_model
from mpiatlas.report.sections.kernel_ring import boundary_rows
from mpiatlas.runner.plan import plan_fill
from mpiatlas.stacks import LaunchSpec
from mpiatlas.stacks.base import srun_argv
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.openmpi import OpenMPI
from mpiatlas.tables.tidy import missing_row

XEON = Topology.from_sysfs(REPO / "tests" / "data" / "sysfs" / "xeon_2s_smt_interleaved" / "sys" / "devices" / "system")
TWO_SOCKETS = parse_synthetic("pack:2 core:4 pu:1")  # 8 cores a node, 4 a socket
# Two real nodes (their own kernels), and two namespace "nodes" of one machine (one boot id).
REAL = [multinode.NodeFacts("cn001", "a" * 36, 16), multinode.NodeFacts("cn002", "b" * 36, 16)]
SHARED = [multinode.NodeFacts("node1", "c" * 36, 2), multinode.NodeFacts("node2", "c" * 36, 2)]
TABLE = RegionTable({"same_socket": 0.5, "other_socket": 1.5, "other_node": 4.0},
                    {"same_socket": 10000.0, "other_socket": 5000.0, "other_node": 1000.0}, "test table")


def fill_config(**top: object):
    return validate({
        "campaign": {"name": "t", "repetitions": 1},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["ofi-tcp"]}},
        "mappings": ["core", "socket", "node"], "processes": [2], "nodes": [2], "over_nodes": [2],
        "placement": ["block", "cyclic"],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 4], "time_s": 0.1, "mem_gb": 0.5},
        "kernels": {"ring": {"variants": ["nonblocking"], "processes": [1, 2, 3, 4, 5]}},
        **top,
    })


def _spec(mapping: str, np_: int, distribution: str, nodes: int = 2, oversubscribe: bool = False) -> dict:
    cell = {"kind": "kernel", "stack": "intelmpi", "transport": "ofi-tcp", "mapping": mapping, "np": np_,
            "nodes": nodes, "benchmark": "ring", "algorithm": "nonblocking", "rep": 0}
    if distribution != "cyclic":
        cell["distribution"] = distribution
    return {"cell": cell, "colocated_nodes": "spread", "allow_oversubscribe": oversubscribe}


# -- the matrix ----------------------------------------------------------------------------------


def test_spread_mappings_over_nodes_plan_every_p_once_per_placement() -> None:
    config = fill_config()
    ring = sorted((c.mapping, c.np, c.distribution or "cyclic") for c in programs.cells_of_kind(config, "kernel")
                  if c.fills_nodes)
    # Every P, odd ones too, for core and socket over 2 nodes, once per placement (P = 1 too: each
    # placement's series starts there).
    assert ring == sorted((m, p, d) for m in ("core", "socket") for p in (1, 2, 3, 4, 5) for d in ("block", "cyclic"))
    ids = {c.id: c for c in programs.cells_of_kind(config, "kernel")}
    cell = ids["kernel/intelmpi/ofi-tcp/core-n2/np3/ring/nonblocking/placement=block/rep0"]
    assert (cell.mapping, cell.nodes, cell.label) == ("core", 2, "intelmpi/ofi-tcp/core-n2 [placement=block]")
    parsed = parse_id(cell.id)
    assert (parsed["mapping"], parsed["nodes"], parsed["np"], parsed["distribution"]) == ("core", 2, 3, "block")
    # Whole nodes, no fixed ranks per node; P = 1 over 2 nodes still asks SLURM for a task per node.
    assert resources.slurm_extra(config, cell) == "--exclusive"
    assert resources.allocation(config, cell) == "kernel_intelmpi_np3_t1_nodes2_excl_fill"
    # Its own allocation: a `node` cell of the same np and nodes sets --ntasks-per-node, which srun steps inherit.
    node4 = ids["kernel/intelmpi/ofi-tcp/node2/np4/ring/nonblocking/placement=block/rep0"]
    fill4 = ids["kernel/intelmpi/ofi-tcp/core-n2/np4/ring/nonblocking/placement=block/rep0"]
    groups = resources.job_groups(config, [node4, fill4])
    assert sorted(groups) == ["kernel_intelmpi_np4_t1_nodes2_excl_0", "kernel_intelmpi_np4_t1_nodes2_excl_fill_0"]
    one = ids["kernel/intelmpi/ofi-tcp/core-n2/np1/ring/nonblocking/placement=block/rep0"]
    assert resources.group_resources(config, [one])["tasks"] == 2
    # The `node` mapping places every P with a rank for each node, round-robin (3 over 2: 2 + 1, ppn the
    # most a node holds), with its own segment.
    node = sorted((c.np, c.ppn) for c in ids.values() if c.mapping == "node" and c.distribution != "block")
    assert node == [(2, 1), (3, 2), (4, 2), (5, 3)]
    # A missing cell's row: ranks per node unknown for a cell filling nodes.
    row = missing_row(cell.id)
    assert (row["mapping"], row["nodes"], row["ppn"], row["placement"]) == ("core", 2, None, "block")
    # Without over_nodes every spread mapping stays on one node, ids unchanged.
    plain = {c.id for c in programs.cells_of_kind(fill_config(over_nodes=[1]), "kernel")}
    assert "kernel/intelmpi/ofi-tcp/core/np3/ring/nonblocking/rep0" in plain
    assert not any("-n2/" in i for i in plain)


def test_mapping_segments_over_nodes_round_trip() -> None:
    for mapping, nodes in (("core", 2), ("l3", 2), ("same_l3", 1), ("socket", 16), ("node", 2), ("l3", 1)):
        assert parse_mapping_segment(mapping_segment(mapping, nodes)) == (mapping, nodes)
    assert mapping_segment("l3", 2) == "l3-n2" and mapping_segment("node", 3) == "node3"
    assert fills_nodes("core", 2) and not fills_nodes("node", 2) and not fills_nodes("core", 1)


# -- rank -> (node, cpu) -------------------------------------------------------------------------


@pytest.mark.parametrize("topo,mapping", [(XEON, "core"), (XEON, "socket"), (TWO_SOCKETS, "core"),
                                          (TWO_SOCKETS, "socket")])
def test_block_fills_a_node_in_the_mappings_order_then_the_next(topo: Topology, mapping: str) -> None:
    cores = topo.n_cores
    order = list(pin_list(topo, mapping, cores))  # the cpu the j-th rank of a node takes
    for np_ in range(1, 2 * cores + 1):
        plan = plan_fill(_spec(mapping, np_, "block"), topo, REAL, PlanFacts())
        assert plan.planned == [r // cores for r in range(np_)], np_
        assert plan.pins == [order[r % cores] for r in range(np_)] and plan.pin_sets is None
        used = -(-np_ // cores)
        assert plan.fill == (used, cores) and not plan.oversubscribed
        assert plan.facts.region == (None if np_ == 1 else topology.region(topo, order[0], order[1]))
        # Every rank on its planned host passes the check; rank np-1 on the other host does not.
        hosts = {r: REAL[n].host for r, n in enumerate(plan.planned)}
        binding = {r: {c} for r, c in enumerate(plan.pins)}
        assert multinode.placement_problems(np_, 2, hosts, binding, REAL, "block", plan.planned) == []
        if np_ > 1:
            moved = {**hosts, np_ - 1: REAL[1 - plan.planned[-1]].host}
            assert multinode.placement_problems(np_, 2, moved, binding, REAL, "block", plan.planned)
    # The Xeon's 8 cores, 4 a socket, numbered alternately: `core` fills socket 0 (cpus 0, 2, 4, 6) first.
    if topo is XEON and mapping == "core":
        assert order == [0, 2, 4, 6, 1, 3, 5, 7] and topology.region(topo, order[3], order[4]) == "other_socket"


def test_cyclic_deals_ranks_round_robin_and_more_than_every_core_is_refused() -> None:
    cores = XEON.n_cores
    order = list(pin_list(XEON, "core", cores))
    for np_ in range(1, 2 * cores + 1):
        plan = plan_fill(_spec("core", np_, "cyclic"), XEON, REAL, PlanFacts())
        assert plan.planned == [r % 2 for r in range(np_)] and plan.pins == [order[r // 2] for r in range(np_)]
        assert plan.fill == (min(2, np_), None)
        assert plan.facts.region == (None if np_ == 1 else "other_node")
    with pytest.raises(topology.MappingUnavailable, match="17 ranks do not fit 2 nodes x 8 cores"):
        plan_fill(_spec("core", 2 * cores + 1, "block"), XEON, REAL, PlanFacts())


def test_nodes_of_one_machine_share_its_cores_once_ranks_span_two() -> None:
    vm = parse_synthetic("pack:1 core:2 pu:1")  # what each namespace node of the CI machine sees
    alone = plan_fill(_spec("core", 2, "block"), vm, SHARED, PlanFacts())
    assert alone.planned == [0, 0] and alone.pins == [0, 1] and not alone.oversubscribed
    for np_ in (3, 4):
        with pytest.raises(topology.MappingUnavailable, match="need more cpus than it has"):
            plan_fill(_spec("core", np_, "block"), vm, SHARED, PlanFacts())
        plan = plan_fill(_spec("core", np_, "block", oversubscribe=True), vm, SHARED, PlanFacts())
        assert plan.planned == [0, 0, 1, 1][:np_] and plan.pins is None
        # Every rank may use both cpus (3, 4 ranks on the machine's 2: oversubscribed); its planned cpu first.
        assert plan.pin_sets == [(0, 1), (1, 0), (0, 1), (1, 0)][:np_] and plan.oversubscribed
        assert plan.facts.requested_pins == [list(s) for s in plan.pin_sets]
    argv_sets = plan_fill(_spec("core", 4, "block", oversubscribe=True), vm, SHARED, PlanFacts()).pin_sets
    assert argv_sets is not None and {frozenset(s) for s in argv_sets} == {frozenset({0, 1})}


@pytest.mark.parametrize("np_,used,cpus", [(1, 1, "0"), (8, 1, "0,1,2,3,4,5,6,7"), (11, 2, "0,1,2,3,4,5,6,7")])
def test_srun_places_a_block_fill_as_planned(monkeypatch: pytest.MonkeyPatch, np_: int, used: int, cpus: str) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    plan = plan_fill(_spec("core", np_, "block"), TWO_SOCKETS, REAL, PlanFacts())
    assert plan.fill is not None
    nodes, ppn = plan.fill
    argv = srun_argv(LaunchSpec(np=np_, transport="ofi-tcp", pins=plan.pins, nodes=nodes, ppn=ppn, fill=True,
                                distribution="block", launcher="srun"))
    # plane=<cores>: ranks 0..7 on the first node, the rest on the second (srun's block would balance them).
    at = argv.index("-N")
    assert argv[at:at + 3] == ["-N", str(used), "--distribution=" + ("plane=8" if used > 1 else "block")]
    assert "--ntasks-per-node" not in argv and argv[-1] == f"--cpu-bind=verbose,map_cpu:{cpus}"
    cyclic = plan_fill(_spec("core", 3, "cyclic"), TWO_SOCKETS, REAL, PlanFacts())
    assert cyclic.fill is not None
    argv = srun_argv(LaunchSpec(np=3, transport="ofi-tcp", pins=cyclic.pins, nodes=cyclic.fill[0], fill=True,
                                launcher="srun"))
    assert "--distribution=cyclic" in argv and argv[-1] == "--cpu-bind=verbose,map_cpu:0,1"


# -- the ring model and chart over nodes ---------------------------------------------------------


def test_ring_over_two_nodes_prices_each_hop_by_its_region() -> None:
    cores = TWO_SOCKETS.n_cores
    order = list(pin_list(TWO_SOCKETS, "core", cores))
    slowest, boundary_hops = {}, {}
    for np_ in range(2, 2 * cores + 1):
        # As the cells table records a block fill without hosts: each rank's cpu on its own node.
        pins = [order[r % cores] for r in range(np_)]
        hops = ring_hops(cell_placement(TWO_SOCKETS, pins, nodes=2, placement="block", fills=True))
        pred = exchange_time(hops, TABLE, np=np_, streams=2, phases=1, nbytes=1000)
        slowest[np_], boundary_hops[np_] = pred.slowest_region, hops.boundary_hops
        cost = {"same_socket": 0.5 + 1000 / 10000, "other_socket": 1.5 + 1000 / 5000, "other_node": 4.0 + 1000 / 1000}
        assert pred.predicted_us == pytest.approx(np_ * 2 * cost[pred.slowest_region])
    # P <= 4: one socket; 5..8: both sockets of node 1; 9..16: the ring reaches node 2.
    assert {p: slowest[p] for p in (2, 4, 5, 8, 9, 16)} == {
        2: "same_socket", 4: "same_socket", 5: "other_socket", 8: "other_socket", 9: "other_node", 16: "other_node"}
    # Leaving a socket: the crossing and the wrap-around; at P = 9 the socket crossing 3 -> 4 stays
    # and 7 -> 8, 8 -> 0 cross the node; at 13 and 16 a socket crossing on node 2 (11 -> 12) adds one.
    assert (boundary_hops[4], boundary_hops[5], boundary_hops[9], boundary_hops[13], boundary_hops[16]) == (0, 2, 3, 4, 4)
    full = ring_hops(cell_placement(TWO_SOCKETS, [order[r % cores] for r in range(16)], nodes=2, placement="block",
                                    fills=True))
    assert placement_boundaries(full) == [PlacementBoundary(5, "other_socket"), PlacementBoundary(9, "other_node"),
                                          PlacementBoundary(13, "other_socket")]
    # Cyclic over nodes crosses at every hop: one boundary, at P = 2.
    cyc = ring_hops(cell_placement(TWO_SOCKETS, [order[r // 2] for r in range(6)], nodes=2))
    assert placement_boundaries(cyc) == [PlacementBoundary(2, "other_node")]


def test_region_inputs_read_each_ranks_host_from_the_cells_table() -> None:
    """The cells table's ``hosts`` is {rank: host}: ranks on one host share a node, whatever their number."""
    rows = [{"cell": f"kernel/i/t/core-n2/np{p}/ring/nonblocking/placement=block/rep0", "status": "ok",
             "benchmark": "ring", "stack": "i", "transport": "t", "mapping": "core", "nodes": 2, "np": p,
             "options": "", "knobs": "", "placement": "block", "region": None,
             "requested_pins": json.dumps([r % 8 for r in range(p)]),
             "hosts": json.dumps({str(r): "cn001" if r < 8 else "cn002" for r in range(p)})} for p in (4, 10)]
    node = replace(TWO_SOCKETS, hostname="cn001")
    records = [{"cell": r["cell"], "topology": {"hostname": "cn001"}} for r in rows]
    inputs = region_inputs_from(pl.DataFrame(rows), records, [], table=TABLE, topologies={"cn001": node})
    assert inputs.hops[("i/t/core-n2 [placement=block]", 4)].counts() == {"same_socket": 4}
    assert inputs.hops[("i/t/core-n2 [placement=block]", 10)].counts() == {"same_socket": 7, "other_socket": 1, "other_node": 2}


def test_ring_chart_draws_the_boundaries_of_the_placement() -> None:
    fits = [RingFit(label="i/t/core-n2", boundaries=(PlacementBoundary(5, "other_socket"),
                                                     PlacementBoundary(9, "other_node")))]
    rules = boundary_rows(fits)
    assert rules is not None and rules.rows() == [("i/t/core-n2", 5, "socket boundary (P ≥ 5)"),
                                                  ("i/t/core-n2", 9, "node boundary (P ≥ 9)")]
    points = pl.DataFrame({"label": ["i/t/core-n2"] * 3, "series": ["a"] * 3, "np": [4, 8, 12],
                           "measured_us": [1.0, 2.0, 5.0], "predicted_us": [1.1, 2.1, 4.0],
                           "placement": ["P ≤ cores"] * 3})
    spec = chart_spec(measured_vs_model(points, "np", "P", "measured_us", "predicted_us", "t", "ring",
                                        boundaries=rules))
    text = json.dumps(spec, ensure_ascii=False)
    assert '"rule"' in text and "node boundary (P ≥ 9)" in text and "socket boundary (P ≥ 5)" in text
    assert validate_jsonschema(spec, load_schema(), raise_error=False) is None  # valid Vega-Lite
    data = next(iter(spec["datasets"].values()))
    assert sorted(d["boundary_x"] for d in data if d.get("boundary")) == [4.5, 8.5]
    assert boundary_rows([RingFit(label="x")]) is None


def test_mpirun_over_hosts_fills_them_as_planned(tmp_path: Path, ompi41: OpenMPI) -> None:
    """hydra and Open MPI over ssh hosts: the plan's ranks per node (a node's cores) for block, one
    at a time for cyclic; Open MPI's rankfile names each rank's planned host."""
    hosts = ["cn001", "cn002"]
    impi = IntelMPI(tmp_path / "impi")
    block = plan_fill(_spec("core", 11, "block"), TWO_SOCKETS, REAL, PlanFacts())
    assert block.fill == (2, 8)
    launch = impi.launch(["ring"], LaunchSpec(np=11, transport="ofi-tcp", nodes=2, ppn=8, hosts=hosts, fill=True,
                                              distribution="block"))
    assert launch.argv[1:5] == ["-n", "11", "-hosts", "cn001,cn002"] and launch.argv[5:7] == ["-ppn", "8"]
    cyclic = impi.launch(["ring"], LaunchSpec(np=3, transport="ofi-tcp", nodes=2, hosts=hosts, fill=True))
    assert cyclic.argv[5:7] == ["-ppn", "1"]
    ompi = ompi41.launch(["./ring"], LaunchSpec(np=11, transport="ob1-tcp", nodes=2, ppn=8, hosts=hosts, fill=True,
                                                distribution="block", pins=block.pins, workdir=tmp_path / "w"))
    assert "--host" in ompi.argv and ompi.argv[ompi.argv.index("--host") + 1] == "cn001:8,cn002:8"
    lines = (tmp_path / "w" / "rankfile").read_text().splitlines()
    assert [line.split("=")[1].split()[0] for line in lines] == ["cn001"] * 8 + ["cn002"] * 3
    assert lines[8] == f"rank 8=cn002 slot={block.pins[8]}" and block.pins[8] == block.pins[0]


def test_ring_fit_from_one_rank_up_prices_what_has_hops() -> None:
    """A series that starts at P = 1 (every placement's does): one rank has no hop, so no region
    prediction there; the others are priced, and the fit names where the ranks reach node 2."""
    rows = [{"label": "i/t/core-n2", "stack": "i", "transport": "t", "mapping": "core", "cell_status": "ok",
             "cell": f"kernel/i/t/core-n2/np{p}/ring/nonblocking/rep{rep}", "rep": rep, "np": p, "rank": r,
             "variant": "nonblocking", "streams": 2, "bytes": 1000, "time_us": 10.0 * p + rep, "oversubscribed": False}
            for p in (1, 2, 3) for rep in range(3) for r in range(p)]
    hops = {("i/t/core-n2", 1): RingHops(()), ("i/t/core-n2", 2): RingHops(("same_socket", "same_socket")),
            ("i/t/core-n2", 3): RingHops(("same_socket", "other_node", "other_node"))}
    (fit,) = [f.to_json() for f in fit_ring(pl.DataFrame(rows), [], regions=RegionInputs(hops=hops, table=TABLE))]
    by_np = {p["np"]: p for p in fit["points"]}
    assert by_np[1]["region_predicted_us"] is None and by_np[1]["boundary_hops"] == 0
    assert by_np[2]["region_predicted_us"] == pytest.approx(2 * 2 * (0.5 + 1000 / 10000))
    assert by_np[3]["slowest_region"] == "other_node" and by_np[3]["boundary_hops"] == 2
    assert fit["boundaries"] == [{"np": 3, "region": "other_node"}]

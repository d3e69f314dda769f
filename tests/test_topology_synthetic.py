"""hwloc synthetic descriptions without hwloc, Die objects in hwloc XML, and the same_die region."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import require_infra
from mpiatlas.node.topology import REGIONS, Topology, TopologyError, pair_regions, pin_list, region
from mpiatlas.node.topology_synthetic import parse_synthetic, read_topology, synthetic_via_hwloc

DATA = Path(__file__).parent / "data" / "topology"
EPYC_7H12_NODE = "pack:2 numa:4 die:2 l3:2 core:4 pu:1"


def test_regions_keep_their_order_with_same_die_between_l3_and_numa() -> None:
    assert REGIONS == ("same_core", "same_l3", "same_die", "same_numa", "same_socket", "other_socket", "other_node")


def test_epyc_node_from_its_synthetic_description() -> None:
    topo = parse_synthetic(EPYC_7H12_NODE)
    assert (topo.n_cores, topo.packages, topo.numa_nodes, topo.l3_domains, topo.source) == (128, 2, 8, 32, "synthetic")
    assert [c.die for c in topo.cores[:17:4]] == [0, 0, 1, 1, 2]
    # Core 0 against cores of the same CCX, same CCD, same NUMA (NPS4), same socket, other socket.
    assert [region(topo, 0, cpu) for cpu in (0, 3, 4, 8, 16, 64)] == [
        "same_core", "same_l3", "same_die", "same_numa", "same_socket", "other_socket",
    ]  # fmt: skip
    assert region(topo, 0, 1, same_node=False) == "other_node"


def test_smt_and_levels_without_a_region() -> None:
    topo = parse_synthetic("socket:2 group:1 l2:2 l1d:1 core:2 pu:2")
    assert topo.n_cores == 8 and topo.n_pus == 16 and topo.cores[1].pus == (2, 3)
    assert region(topo, 0, 1) == "same_core" and region(topo, 0, 2) == "same_socket"
    assert topo.l3_domains == 0 and topo.numa_nodes == 1


def test_numa_as_memory_child_and_above_packages() -> None:
    assert parse_synthetic("pack:2 [numa] core:2 pu:1").numa_nodes == 2
    # NUMA spanning two packages says nothing inside a socket: pairs in one package are same_socket.
    spanning = parse_synthetic("numa:2 pack:2 core:2 pu:1")
    assert spanning.packages == 4 and region(spanning, 0, 1) == "same_socket"


def test_a_die_spanning_numa_nodes_is_not_same_die() -> None:
    # Intel SNC-like: a die with two NUMA nodes; same die but another NUMA node is farther than
    # same NUMA, so it cannot be reported as the closer same_die.
    topo = parse_synthetic("pack:2 die:2 numa:2 core:2 pu:1")
    assert region(topo, 0, 1) == "same_numa"
    assert region(topo, 0, 2) == "same_socket"


def test_die_from_hwloc_xml() -> None:
    # lstopo -i "pack:2 numa:2 die:2 l3:2 core:2 pu:2" --of xml (hwloc 2.9)
    topo = Topology.from_hwloc_xml(DATA / "synthetic-dies.xml")
    assert topo.n_cores == 32 and len({c.die for c in topo.cores}) == 8
    pins = pin_list(topo, "core", 5)
    assert [pair_regions(topo, pins)[(0, j)] for j in (1, 2, 4)] == ["same_l3", "same_die", "same_numa"]
    assert topo.cores == parse_synthetic("pack:2 numa:2 die:2 l3:2 core:2 pu:2").cores


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pack:2 core:4", "the last level must be pu"),
        ("pack:2 ccx:2 core:4 pu:1", "unknown level type 'ccx'"),
        ("pack:2 core4 pu:1", "cannot read 'core4'"),
        ("machine:2 core:2 pu:1", "one machine per description"),
        ("pack:0 core:2 pu:1", "count below 1"),
        ("pack:2 [l3] core:2 pu:1", "only \\[numa\\] memory children"),
        ("pack:2000 core:1000 pu:1", "more than 65536 PUs"),
    ],
)
def test_bad_descriptions(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_synthetic(text)


def test_read_topology_takes_a_file_or_a_description(tmp_path: Path) -> None:
    assert read_topology(str(DATA / "synthetic-dies.xml")).source == "hwloc"
    assert read_topology("pack:1 core:2 pu:1").source == "synthetic"
    with pytest.raises(TopologyError, match="neither an hwloc XML file nor a synthetic description"):
        read_topology(str(tmp_path / "missing.xml"))


DESCRIPTIONS = [
    EPYC_7H12_NODE,
    "pack:2 node:2 core:2 pu:1",
    "socket:2 numa:2 l2:2 core:2 pu:2",
    "pack:2 [numa] core:2 pu:1",
    "package:2 l3:2(size=32MB) core:2 pu:1",
    "numa:2 pack:2 core:2 pu:1",
    "l3:2 core:2 pu:1",
    "Package:2 NUMANode:2 Core:1 PU:1",
    "[numa] pack:2 core:1 pu:1",
    "pack:2 die:2 numa:2 core:1 pu:1",
    "pack:2 l3:2 die:2 core:2 pu:1",
    "pack:2 pu:3",
]


@pytest.mark.infra
@pytest.mark.parametrize("description", DESCRIPTIONS)
def test_same_topology_as_hwloc_builds(description: str) -> None:
    require_infra(shutil.which("lstopo") is not None, "hwloc's lstopo")
    ours, hwlocs = parse_synthetic(description), synthetic_via_hwloc(description)
    assert ours.cores == hwlocs.cores
    assert (ours.packages, ours.numa_nodes, ours.l3_domains) == (hwlocs.packages, hwlocs.numa_nodes, hwlocs.l3_domains)

"""Topology parsing, pin lists, regions and binding checks.

Fixtures in tests/data/topology/ were written by hwloc 2.9.0's lstopo:
  epyc_like.xml  lstopo --input "pack:2 numa:4 l3:2 core:8 pu:1" --of xml -
  thin_node.xml  lstopo --input "pack:2 core:12 pu:1" --of xml -      (no L3 level)
  smt_linux.xml  lstopo --input "pack:2 l3:1 core:4 pu:2(indexes=0,8,1,9,...,7,15)"
                 (Linux-style SMT numbering: siblings are cpu i and i+8)
  vm_2core.xml   lstopo --of xml -   on the 2-core development VM
OS indices asserted below were read from those files, not assumed.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from conftest import require_infra
from mpiatlas.commands import topology as topology_cmd
from mpiatlas.node.topology import (
    MappingUnavailable,
    OversubscriptionError,
    Topology,
    TopologyError,
    check_binding,
    detect,
    mapping_region,
    pair_regions,
    pin_list,
    region,
)

DATA = Path(__file__).parent / "data" / "topology"


@pytest.fixture(scope="module")
def epyc() -> Topology:
    return Topology.from_hwloc_xml(DATA / "epyc_like.xml")


@pytest.fixture(scope="module")
def thin() -> Topology:
    return Topology.from_hwloc_xml(DATA / "thin_node.xml")


@pytest.fixture(scope="module")
def smt() -> Topology:
    return Topology.from_hwloc_xml(DATA / "smt_linux.xml")


@pytest.fixture(scope="module")
def vm() -> Topology:
    return Topology.from_hwloc_xml(DATA / "vm_2core.xml")


# -- parsing ------------------------------------------------------------------


def test_epyc_like_counts_and_domains(epyc: Topology) -> None:
    assert (epyc.packages, epyc.numa_nodes, epyc.l3_domains, epyc.n_cores, epyc.n_pus) == (2, 8, 16, 128, 128)
    assert epyc.cache_sizes == {"L3": 16 * 1024 * 1024}
    assert epyc.hostname is None and epyc.cpu_model is None  # synthetic topology
    c8, c16, c64 = epyc.cores[8], epyc.cores[16], epyc.cores[64]
    assert (c8.pu, c8.package, c8.numa, c8.l3) == (8, 0, 0, 1)  # second CCX, same NUMA
    assert (c16.pu, c16.package, c16.numa, c16.l3) == (16, 0, 1, 2)  # second NUMA, same socket
    assert (c64.pu, c64.package, c64.numa, c64.l3) == (64, 1, 4, 8)  # second socket
    assert epyc.numa_os_index == tuple(range(8))
    assert [len(d) for d in epyc.domains("l3")] == [8] * 16


def test_thin_node_has_no_l3_and_one_numa(thin: Topology) -> None:
    # lstopo puts the single NUMA node at machine level and emits no cache objects.
    assert (thin.packages, thin.numa_nodes, thin.l3_domains, thin.n_cores) == (2, 1, 0, 24)
    assert thin.cache_sizes == {}
    assert all(c.l3 is None and c.numa == 0 for c in thin.cores)
    assert thin.cores[12].package == 1 and thin.cores[12].pu == 12


def test_smt_siblings_are_one_core(smt: Topology) -> None:
    assert (smt.n_cores, smt.n_pus) == (8, 16)
    assert smt.cores[0].pus == (0, 8) and smt.cores[7].pus == (7, 15)
    assert smt.core_of(12).index == 4
    assert smt.summary()["smt"] == 2


def test_vm_summary_is_json_ready(vm: Topology) -> None:
    s = vm.summary()
    assert json.loads(json.dumps(s)) == s
    assert s["hostname"] == "vm"
    assert s["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert (s["packages"], s["numa_nodes"], s["l3_domains"], s["cores"], s["pus"]) == (1, 1, 1, 2, 2)
    assert s["cache_sizes"] == {"L1d": 49152, "L2": 2097152, "L3": 314572800}


def test_from_xml_text_equals_from_path(vm: Topology) -> None:
    text = (DATA / "vm_2core.xml").read_text()
    assert Topology.from_hwloc_xml(text) == vm
    assert Topology.from_hwloc_xml(str(DATA / "vm_2core.xml")) == vm


@pytest.mark.parametrize(
    "text",
    ["<topology><object", "<root/>", '<topology version="1.0"><object type="Machine"/></topology>'],
)
def test_bad_xml_raises(text: str) -> None:
    with pytest.raises(TopologyError):
        Topology.from_hwloc_xml(text)


def test_missing_xml_file_raises(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="not found"):
        Topology.from_hwloc_xml(tmp_path / "nope.xml")


def test_detect_without_lstopo_is_clear(tmp_path: Path) -> None:
    # Without lstopo detect() reads sysfs (tests/test_topology_sysfs.py); with no sysfs either it must say so.
    with pytest.raises(TopologyError, match="install hwloc"):
        detect(lstopo="no-such-lstopo-binary", sysfs_root=tmp_path)


# -- pin lists ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "pins", "region_01"),
    [
        ("core", [0, 1, 2, 3], "same_l3"),
        ("l3", [0, 8, 16, 24], "same_numa"),  # first core of each CCX, NUMA 0 first
        ("numa", [0, 16, 32, 48], "same_socket"),  # 4 NUMA per socket
        ("socket", [0, 64, 1, 65], "other_socket"),
    ],
)
def test_epyc_like_pins(epyc: Topology, mapping: str, pins: list[int], region_01: str) -> None:
    got = pin_list(epyc, mapping, 4)
    assert got == pins
    assert not got.oversubscribed
    assert mapping_region(epyc, mapping) == region_01


def test_epyc_like_round_robin_wraps_to_next_core(epyc: Topology) -> None:
    assert pin_list(epyc, "l3", 18)[15:] == [120, 1, 9]  # after 16 CCX, back to CCX 0
    assert pin_list(epyc, "numa", 10)[7:] == [112, 1, 17]
    for mapping in ("core", "l3", "numa", "socket"):
        assert sorted(pin_list(epyc, mapping, 128)) == list(range(128))  # every core exactly once


def test_epyc_like_pair_regions(epyc: Topology) -> None:
    assert pair_regions(epyc, pin_list(epyc, "l3", 3)) == {
        (0, 1): "same_numa",
        (0, 2): "same_socket",
        (1, 2): "same_socket",
    }


def test_node_mapping_round_robins_over_nodes(epyc: Topology) -> None:
    pins = pin_list(epyc, "node", 5, nodes=2)
    assert pins == [0, 0, 1, 1, 2]
    assert pins.node_of == (0, 1, 0, 1, 0)
    assert pair_regions(epyc, pins)[(0, 1)] == "other_node"
    assert pair_regions(epyc, pins)[(0, 2)] == "same_l3"
    assert mapping_region(epyc, "node") == "other_node"


def test_thin_node_pins(thin: Topology) -> None:
    assert pin_list(thin, "socket", 4) == [0, 12, 1, 13]
    assert mapping_region(thin, "socket") == "other_socket"
    assert pin_list(thin, "core", 2) == [0, 1]
    # The one NUMA node spans both sockets, so it says nothing: same_socket, not same_numa.
    assert mapping_region(thin, "core") == "same_socket"
    with pytest.raises(MappingUnavailable, match="no L3"):
        pin_list(thin, "l3", 2)
    with pytest.raises(MappingUnavailable, match="single NUMA"):
        pin_list(thin, "numa", 2)


def test_smt_pins_use_first_pu_of_each_core(smt: Topology) -> None:
    assert pin_list(smt, "core", 8) == [0, 1, 2, 3, 4, 5, 6, 7]  # never an SMT sibling
    assert pin_list(smt, "socket", 2) == [0, 4]
    assert pin_list(smt, "l3", 2) == [0, 4]  # one L3 per socket: cannot stay in the socket
    assert mapping_region(smt, "l3") == "other_socket"


@pytest.mark.parametrize("mapping", ["socket", "numa", "l3"])
def test_vm_cannot_express_spread_mappings(vm: Topology, mapping: str) -> None:
    with pytest.raises(MappingUnavailable) as err:
        pin_list(vm, mapping, 2)
    assert err.value.mapping == mapping
    assert "single" in err.value.reason
    with pytest.raises(MappingUnavailable):
        mapping_region(vm, mapping)


def test_node_mapping_needs_two_nodes(vm: Topology) -> None:
    with pytest.raises(MappingUnavailable, match="nodes >= 2"):
        pin_list(vm, "node", 2)


def test_vm_core_mapping(vm: Topology) -> None:
    assert pin_list(vm, "core", 2) == [0, 1]
    assert mapping_region(vm, "core") == "same_l3"


def test_oversubscription_raises_unless_allowed(vm: Topology) -> None:
    with pytest.raises(OversubscriptionError, match="only 2 cores"):
        pin_list(vm, "core", 3)
    pins = pin_list(vm, "core", 3, oversubscribe=True)
    assert pins == [0, 1, 0] and pins.oversubscribed
    # `node` counts ranks per node: 4 ranks on 2 nodes fit 2 cores each, 5 do not.
    assert not pin_list(vm, "node", 4, nodes=2).oversubscribed
    with pytest.raises(OversubscriptionError, match="3 ranks per node"):
        pin_list(vm, "node", 5, nodes=2)


def test_bad_arguments(vm: Topology, epyc: Topology) -> None:
    with pytest.raises(ValueError, match="unknown mapping"):
        pin_list(vm, "scatter", 2)
    with pytest.raises(ValueError, match="nranks"):
        pin_list(vm, "core", 0)
    with pytest.raises(ValueError, match="only applies"):
        pin_list(epyc, "socket", 2, nodes=2)


# -- regions ------------------------------------------------------------------


def test_region_ladder(epyc: Topology, smt: Topology) -> None:
    assert region(smt, 0, 8) == "same_core"
    assert region(epyc, 0, 7) == "same_l3"
    assert region(epyc, 0, 8) == "same_numa"
    assert region(epyc, 0, 16) == "same_socket"
    assert region(epyc, 0, 64) == "other_socket"
    assert region(epyc, 0, 0, same_node=False) == "other_node"


def test_region_unknown_cpu(vm: Topology) -> None:
    with pytest.raises(ValueError, match="cpu 7"):
        region(vm, 0, 7)


# -- binding check ------------------------------------------------------------


def test_check_binding_ok() -> None:
    assert check_binding([0, 8], [{0}, {8}]) == []


def test_check_binding_both_on_core_zero() -> None:
    problems = check_binding([0, 8], [{0}, {0}])
    assert "rank 1 asked for cpu 8 but got {0}" in problems
    assert "ranks 0, 1 are all pinned to the same single cpu 0" in problems
    assert len(problems) == 2


def test_check_binding_unpinned_and_missing() -> None:
    problems = check_binding([0, 1, 2], [{0, 1, 2, 3}, set()])
    assert problems == [
        "3 ranks requested but 2 reported their binding",
        "rank 0 asked for cpu 0 but is not pinned: bound to {0-3}",
        "rank 1 asked for cpu 1 but reported no binding",
    ]


def test_check_binding_deliberate_oversubscription_is_not_a_clash() -> None:
    assert check_binding([0, 1, 0], [{0}, {1}, {0}]) == []


# -- CLI ----------------------------------------------------------------------


def _run_cli(argv: list[str]) -> int:
    # Only this command's parser: other subcommands are not this test's business.
    parser = argparse.ArgumentParser(prog="mpiatlas")
    topology_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["topology", *argv])
    return args.func(args)


def test_cli_json_mapping(capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run_cli(["--xml", str(DATA / "epyc_like.xml"), "--mapping", "numa", "--np", "3", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["cores"] == 128
    assert out["mapping"]["pins"] == [0, 16, 32]
    assert out["mapping"]["region_0_1"] == "same_socket"
    assert out["mapping"]["pair_regions"] == {"0,1": "same_socket", "0,2": "same_socket", "1,2": "same_socket"}


def test_cli_text_and_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli(["--xml", str(DATA / "thin_node.xml"), "--mapping", "socket"]) == 0
    text = capsys.readouterr().out
    assert "rank    1 -> node 0 cpu 12" in text and "ranks 0,1: other_socket" in text
    assert _run_cli(["--xml", str(DATA / "vm_2core.xml"), "--mapping", "socket"]) == 2
    assert "single socket" in capsys.readouterr().err


# -- the real node ------------------------------------------------------------


def _sysfs_core_count() -> int:
    # One entry per physical core: the sibling list is shared by SMT threads.
    lists = Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/core_cpus_list")
    return len({p.read_text().strip() for p in lists})


@pytest.mark.infra
def test_detect_real_node() -> None:
    require_infra(shutil.which("lstopo") is not None, "hwloc lstopo")
    topo = detect()
    assert topo.n_cores == _sysfs_core_count()  # 2 on the development VM
    assert topo.packages >= 1 and topo.numa_nodes >= 1
    assert json.loads(json.dumps(topo.summary()))["cores"] == topo.n_cores
    pins = pin_list(topo, "core", topo.n_cores)
    assert len(set(pins)) == topo.n_cores  # one distinct cpu per core

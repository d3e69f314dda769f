"""Topology from Linux sysfs (no hwloc): it must be the topology hwloc gives for the same machine.

tests/data/sysfs/xeon_2s_smt_interleaved/ is a two-socket SMT Xeon whose cpu numbering alternates
sockets (see tests/data/sysfs/README.md); its ``.hwloc.xml`` is what hwloc 2.9.0's lstopo made of
the same tree.  Variants (no L3, offline cpus, broken files, ...) are written into tmp dirs by the
same generator, tests/data/sysfs/make_tree.py.  The infra tests read trees and this machine with
both hwloc and the sysfs reader and require identical results.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import platform
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import require_infra
from mpiatlas.commands import topology as topology_cmd
from mpiatlas.node.topology import (
    MAPPINGS,
    MappingUnavailable,
    Topology,
    TopologyError,
    detect,
    mapping_region,
    pair_regions,
    pin_list,
    region,
)

DATA = Path(__file__).parent / "data" / "sysfs"


def _load_generator() -> ModuleType:
    """tests/data/sysfs/make_tree.py, which lives beside the trees it writes (not a package)."""
    spec = importlib.util.spec_from_file_location("make_tree", DATA / "make_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


make_tree = _load_generator()
Machine, TREES, write_tree = make_tree.Machine, make_tree.TREES, make_tree.write_tree

XEON = DATA / "xeon_2s_smt_interleaved"
SYSTEM = Path("sys") / "devices" / "system"


@pytest.fixture(scope="module")
def xeon() -> Topology:
    return Topology.from_sysfs(XEON / SYSTEM)


def _tree(tmp_path: Path, machine: Any) -> Path:  # a make_tree.Machine
    """``machine`` written as a Linux root under tmp_path; returns its /sys/devices/system."""
    return write_tree(tmp_path / "root", machine) / SYSTEM


def _same_machine(a: Topology, b: Topology) -> bool:
    """Equal apart from where they were read (source) and hwloc's extra info keys."""
    return replace(a, source="x", info={}) == replace(b, source="x", info={})


# -- the committed tree --------------------------------------------------------


def test_committed_tree_is_what_the_generator_writes(tmp_path: Path) -> None:
    for name, machine in TREES.items():
        fresh = write_tree(tmp_path / name, machine)
        committed = sorted(p.relative_to(DATA / name) for p in (DATA / name).rglob("*") if p.is_file())
        written = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
        assert committed == written
        _, mismatch, errors = filecmp.cmpfiles(DATA / name, fresh, [str(p) for p in written], shallow=False)
        assert (mismatch, errors) == ([], [])


def test_xeon_counts_caches_and_model(xeon: Topology) -> None:
    assert xeon.source == "sysfs"
    assert (xeon.packages, xeon.numa_nodes, xeon.l3_domains, xeon.n_cores, xeon.n_pus) == (2, 2, 2, 8, 16)
    assert xeon.cache_sizes == {"L1d": 32 * 1024, "L2": 1024 * 1024, "L3": 16896 * 1024}
    assert xeon.cpu_model == "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz"
    assert xeon.info == {"CPUVendor": "GenuineIntel"}
    assert xeon.hostname is None  # a copied tree says nothing about the host reading it
    assert xeon.numa_os_index == (0, 1)
    s = xeon.summary()
    assert s["source"] == "sysfs" and s["smt"] == 2 and json.loads(json.dumps(s)) == s


def test_xeon_cores_in_hwloc_order(xeon: Topology) -> None:
    # Package by package; in a package by first cpu; siblings at +8.
    assert [c.pus for c in xeon.cores] == [(0, 8), (2, 10), (4, 12), (6, 14), (1, 9), (3, 11), (5, 13), (7, 15)]
    assert [c.index for c in xeon.cores] == list(range(8))
    assert [(c.package, c.numa, c.l3) for c in xeon.cores] == [(0, 0, 0)] * 4 + [(1, 1, 1)] * 4


def test_xeon_equals_hwlocs_reading_of_the_same_tree(xeon: Topology) -> None:
    hwloc = Topology.from_hwloc_xml(DATA / "xeon_2s_smt_interleaved.hwloc.xml")
    assert hwloc.source == "hwloc"
    assert _same_machine(xeon, hwloc)
    assert hwloc.cores == xeon.cores and hwloc.cache_sizes == xeon.cache_sizes


def test_xeon_pin_lists(xeon: Topology) -> None:
    socket = pin_list(xeon, "socket", 2)
    assert socket == [0, 1]
    assert xeon.core_of(socket[0]).package != xeon.core_of(socket[1]).package
    assert pin_list(xeon, "socket", 4) == [0, 1, 2, 3]
    assert pin_list(xeon, "socket", 8) == [0, 1, 2, 3, 4, 5, 6, 7]
    # `core` packs socket 0's cores first, never an SMT sibling.
    core = pin_list(xeon, "core", 4)
    assert core == [0, 2, 4, 6] and {xeon.core_of(c).package for c in core} == {0}
    assert pin_list(xeon, "core", 8) == [0, 2, 4, 6, 1, 3, 5, 7]
    assert pin_list(xeon, "l3", 3) == [0, 1, 2]
    assert pin_list(xeon, "numa", 3) == [0, 1, 2]
    assert pin_list(xeon, "core", 9, oversubscribe=True)[8] == 0
    node = pin_list(xeon, "node", 4, nodes=2)
    assert node == [0, 0, 2, 2] and node.node_of == (0, 1, 0, 1)


def test_xeon_regions(xeon: Topology) -> None:
    assert region(xeon, 0, 8) == "same_core"
    assert region(xeon, 9, 1) == "same_core"
    assert region(xeon, 0, 2) == "same_l3"
    assert region(xeon, 1, 15) == "same_l3"  # cpu 15: last core of socket 1, second thread
    assert region(xeon, 0, 1) == "other_socket"
    assert region(xeon, 8, 9) == "other_socket"
    assert mapping_region(xeon, "core") == "same_l3"
    assert mapping_region(xeon, "socket") == "other_socket"
    assert pair_regions(xeon, pin_list(xeon, "socket", 3)) == {
        (0, 1): "other_socket",
        (0, 2): "same_l3",
        (1, 2): "other_socket",
    }


# -- other machines ------------------------------------------------------------


def test_machine_without_l3(tmp_path: Path) -> None:
    topo = Topology.from_sysfs(_tree(tmp_path, Machine(l3_k=None)))
    assert topo.l3_domains == 0 and all(c.l3 is None for c in topo.cores)
    assert topo.cache_sizes == {"L1d": 32 * 1024, "L2": 1024 * 1024}
    with pytest.raises(MappingUnavailable, match="no L3"):
        pin_list(topo, "l3", 2)
    # With no L3, the per-socket NUMA node is the closest shared domain.
    assert region(topo, 0, 2) == "same_numa"
    assert pin_list(topo, "numa", 2) == [0, 1]


def test_grouped_numbering(tmp_path: Path) -> None:
    topo = Topology.from_sysfs(_tree(tmp_path, Machine(numbering="grouped")))
    assert [c.pus for c in topo.cores[:5]] == [(0, 8), (1, 9), (2, 10), (3, 11), (4, 12)]
    assert pin_list(topo, "socket", 4) == [0, 4, 1, 5]
    assert region(topo, 0, 3) == "same_l3" and region(topo, 3, 4) == "other_socket"


def test_package_ids_do_not_decide_logical_order(tmp_path: Path) -> None:
    # physical_package_id 1 holds cpu 0: hwloc calls it package L#0, and so must we.
    topo = Topology.from_sysfs(_tree(tmp_path, Machine(package_ids=(1, 0))))
    assert topo.cores[0].pus == (0, 8) and topo.cores[0].package == 0


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    # cpu 3 and its sibling 11 offline: that core is gone; cpu 10 offline: its core keeps cpu 2.
    topo = Topology.from_sysfs(_tree(tmp_path, Machine(offline=(3, 10, 11))))
    assert topo.n_cores == 7 and topo.n_pus == 13
    assert [c.pus for c in topo.cores] == [(0, 8), (2,), (4, 12), (6, 14), (1, 9), (5, 13), (7, 15)]
    assert pin_list(topo, "socket", 4) == [0, 1, 2, 5]
    with pytest.raises(ValueError, match="cpu 3 is not a PU"):
        region(topo, 0, 3)


def test_cpuless_memory_node_is_numbered_where_hwloc_attaches_it(tmp_path: Path) -> None:
    # Node 2 (CXL-like, no cpus) is closest to node 0: hwloc hangs it off package 0 after node 0.
    topo = Topology.from_sysfs(_tree(tmp_path, Machine(memory_nodes=1)))
    assert topo.numa_nodes == 3 and topo.numa_os_index == (0, 2, 1)
    assert [c.numa for c in topo.cores] == [0] * 4 + [2] * 4
    assert pin_list(topo, "numa", 2) == [0, 1]


def test_kernel_without_numa_gives_one_node(tmp_path: Path) -> None:
    system = _tree(tmp_path, Machine())
    shutil.rmtree(system / "node")
    topo = Topology.from_sysfs(system)
    assert (topo.numa_nodes, topo.numa_os_index) == (1, (0,))
    assert {c.numa for c in topo.cores} == {0}
    assert region(topo, 0, 2) == "same_l3"


# -- broken trees ----------------------------------------------------------------


def _broken(tmp_path: Path, relative: str) -> Path:
    system = _tree(tmp_path, Machine())
    target = system / relative
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    return system


@pytest.mark.parametrize(
    "missing",
    [
        "cpu/cpu5/topology/physical_package_id",
        "cpu/cpu5/topology",
        "cpu/cpu5/cache/index3/shared_cpu_list",
        "node/node1/cpulist",
    ],
)
def test_missing_file_names_the_file(tmp_path: Path, missing: str) -> None:
    system = _broken(tmp_path, missing)
    with pytest.raises(TopologyError, match="not found") as err:
        Topology.from_sysfs(system)
    assert str(system / missing) in str(err.value)


def test_missing_core_sibling_lists_names_both(tmp_path: Path) -> None:
    system = _tree(tmp_path, Machine())
    for name in ("core_cpus_list", "thread_siblings_list"):
        (system / "cpu/cpu4/topology" / name).unlink()
    with pytest.raises(TopologyError, match=r"neither .*cpu4/topology/core_cpus_list nor .*thread_siblings_list"):
        Topology.from_sysfs(system)


def test_thread_siblings_list_serves_old_kernels(tmp_path: Path, xeon: Topology) -> None:
    system = _tree(tmp_path, Machine())
    for path in system.glob("cpu/cpu*/topology/core_cpus_list"):
        path.unlink()  # kernels before 5.7 have only thread_siblings_list
    assert Topology.from_sysfs(system).cores == xeon.cores


@pytest.mark.parametrize(
    ("relative", "content", "expected"),
    [
        ("cpu/cpu2/cache/index2/size", "lots", "expected a cache size like '32K', got 'lots'"),
        ("cpu/cpu2/topology/physical_package_id", "zero", "expected an integer, got 'zero'"),
        ("cpu/online", "0-3,x", "expected a cpu list like '0-3,8', got '0-3,x'"),
        ("node/node0/distance", "10", "expected 2 integer distances, got '10'"),
    ],
)
def test_malformed_file_names_file_and_content(tmp_path: Path, relative: str, content: str, expected: str) -> None:
    system = _tree(tmp_path, Machine())
    (system / relative).write_text(content + "\n")
    with pytest.raises(TopologyError) as err:
        Topology.from_sysfs(system)
    assert str(err.value) == f"{system / relative}: {expected}"


def test_not_a_sysfs_tree(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=f"{tmp_path / 'cpu'} is not a directory"):
        Topology.from_sysfs(tmp_path)


def test_all_cpus_offline_is_an_error(tmp_path: Path) -> None:
    system = _tree(tmp_path, Machine())
    (system / "cpu/online").write_text("\n")
    with pytest.raises(TopologyError, match="no online cpu"):
        Topology.from_sysfs(system)


# -- detect() and the CLI ----------------------------------------------------------


def test_detect_falls_back_to_sysfs_without_lstopo(xeon: Topology) -> None:
    topo = detect(lstopo="no-such-lstopo-binary", sysfs_root=XEON / SYSTEM)
    assert topo.source == "sysfs" and topo.cores == xeon.cores
    # The live host's identity, as lstopo would report it.
    assert topo.hostname == (platform.node() or None)
    assert topo.info["OSName"] == platform.system() and topo.info["CPUVendor"] == "GenuineIntel"


def test_detect_fails_clearly_when_both_fail(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as err:
        detect(lstopo="no-such-lstopo-binary", sysfs_root=tmp_path)
    message = str(err.value)
    assert "'no-such-lstopo-binary' not found on PATH" in message and "install hwloc" in message
    assert f"{tmp_path / 'cpu'} is not a directory" in message


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mpiatlas")
    topology_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["topology", *argv])
    return args.func(args)


def test_cli_reads_a_sysfs_tree_and_prints_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli(["--sysfs", str(XEON / SYSTEM), "--mapping", "socket", "--np", "2"]) == 0
    text = capsys.readouterr().out
    assert "source: sysfs" in text and "rank    1 -> node 0 cpu 1" in text and "ranks 0,1: other_socket" in text
    assert _run_cli(["--xml", str(DATA / "xeon_2s_smt_interleaved.hwloc.xml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["source"] == "hwloc"


# -- against hwloc itself (infra: needs lstopo) ---------------------------------------


def _lstopo() -> str:
    exe = shutil.which("lstopo")
    require_infra(exe is not None, "hwloc lstopo (apt-get install hwloc)")
    assert exe is not None
    return exe


def _hwloc_reads(lstopo: str, linux_root: Path) -> Topology:
    # hwloc's Linux backend reads a copied root (sys/ + proc/) given as --input DIR.
    proc = subprocess.run([lstopo, "--input", str(linux_root), "--of", "xml", "-"],
                          capture_output=True, text=True, check=True)
    assert "invalid information" not in proc.stderr, proc.stderr
    return Topology.from_hwloc_xml(proc.stdout)


HWLOC_VARIANTS = {
    "xeon": Machine(),
    "grouped": Machine(numbering="grouped"),
    "no_l3": Machine(l3_k=None),
    "offline": Machine(offline=(3, 10, 11)),
    "package_ids_swapped": Machine(package_ids=(1, 0)),
    "snc2": Machine(numa_per_socket=2),
    "ccx_strided": Machine(cores=8, core_ids=tuple(range(8)), l3_per_socket=2, l3_stride=True),
    "four_sockets_no_smt": Machine(sockets=4, threads=1, package_ids=(0, 1, 2, 3)),
    "memory_nodes": Machine(memory_nodes=3),
    "memory_node_per_socket_snc": Machine(memory_nodes=2, numa_per_socket=2),
}


@pytest.mark.infra
@pytest.mark.parametrize("name", sorted(HWLOC_VARIANTS))
def test_hwloc_reads_the_same_tree_the_same_way(tmp_path: Path, name: str) -> None:
    lstopo = _lstopo()
    linux_root = write_tree(tmp_path / name, HWLOC_VARIANTS[name])
    ours, hwloc = Topology.from_sysfs(linux_root / SYSTEM), _hwloc_reads(lstopo, linux_root)
    assert ours.cores == hwloc.cores
    assert ours.numa_os_index == hwloc.numa_os_index
    assert _same_machine(ours, hwloc)


@pytest.mark.infra
def test_committed_hwloc_xml_is_hwlocs_reading(tmp_path: Path) -> None:
    hwloc = _hwloc_reads(_lstopo(), XEON)
    assert hwloc == Topology.from_hwloc_xml(DATA / "xeon_2s_smt_interleaved.hwloc.xml")


@pytest.mark.infra
def test_this_machine_hwloc_and_sysfs_agree() -> None:
    _lstopo()
    hwloc, sysfs = detect(), detect(lstopo="no-such-lstopo-binary")
    assert (hwloc.source, sysfs.source) == ("hwloc", "sysfs")
    assert sysfs.n_cores == hwloc.n_cores and sysfs.cores == hwloc.cores
    assert sysfs.cache_sizes == hwloc.cache_sizes
    assert {k: v for k, v in hwloc.summary().items() if k not in ("source", "hwloc_version")} == {
        k: v for k, v in sysfs.summary().items() if k != "source"
    }
    for mapping in MAPPINGS:
        nodes = 2 if mapping == "node" else 1
        for np in range(1, hwloc.n_cores * nodes + 1):
            assert _pins_or_reason(hwloc, mapping, np, nodes) == _pins_or_reason(sysfs, mapping, np, nodes)
    for a in hwloc.pus:
        for b in hwloc.pus:
            assert region(hwloc, a, b) == region(sysfs, a, b), (a, b)


def _pins_or_reason(topo: Topology, mapping: str, np: int, nodes: int) -> object:
    try:
        pins = pin_list(topo, mapping, np, nodes=nodes)
    except MappingUnavailable as exc:
        return exc.reason
    return list(pins), pins.node_of, pair_regions(topo, pins)

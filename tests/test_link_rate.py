"""Network links from sysfs: kinds, speeds, InfiniBand rates, the link a campaign uses and its source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpiatlas.node import link_rate

# A default route on eth0 (metric 100) and one on eth1 (metric 50), as /proc/net/route prints them.
ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth1\t00000000\t01020A0A\t0003\t0\t0\t50\t00000000\t0\t0\t0
"""
ROUTE6 = ("00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
          "fe800000000000000000000000000001 00000400 00000001 00000000 00000003 ens5\n"
          "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
          "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n")


def _iface(net: Path, name: str, *, speed: str | None, oper: str = "up", device: bool = True,
           devtype: str | None = None, ifindex: int = 2, iflink: int | None = None) -> Path:
    d = net / name
    d.mkdir(parents=True)
    if speed is not None:  # no file: the kernel's EINVAL, as lo, ifb and down links give
        (d / "speed").write_text(f"{speed}\n")
    (d / "operstate").write_text(f"{oper}\n")
    (d / "uevent").write_text(f"INTERFACE={name}\nIFINDEX={ifindex}\n" + (f"DEVTYPE={devtype}\n" if devtype else ""))
    (d / "ifindex").write_text(f"{ifindex}\n")
    (d / "iflink").write_text(f"{iflink or ifindex}\n")
    if device:
        (d / "device").mkdir()
    return d


def _ib_port(ib: Path, dev: str, port: int, rate: str, *, layer: str = "InfiniBand", state: str = "4: ACTIVE",
             ndevs: tuple[str, ...] = ()) -> None:
    d = ib / dev / "ports" / str(port)
    (d / "gid_attrs" / "ndevs").mkdir(parents=True)
    (d / "rate").write_text(f"{rate}\n")
    (d / "state").write_text(f"{state}\n")
    (d / "phys_state").write_text("5: LinkUp\n")
    (d / "link_layer").write_text(f"{layer}\n")
    for i, name in enumerate(ndevs):
        (d / "gid_attrs" / "ndevs" / str(i)).write_text(f"{name}\n")


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    """A node with a 25 GbE NIC (default route), a VM-style NIC (-1), a veth, a bridge, lo, an IPoIB
    interface on an EDR HCA and a 25 GbE RoCE NIC."""
    net, ib = tmp_path / "net", tmp_path / "infiniband"
    _iface(net, "lo", speed=None, device=False, ifindex=1)
    _iface(net, "eth0", speed="25000")
    _iface(net, "eth1", speed="-1")
    _iface(net, "cl0", speed="10000", device=False, ifindex=5, iflink=6)  # veth: its peer's index
    _iface(net, "br0", speed=None, device=False, devtype="bridge", ifindex=7)
    _iface(net, "bond0", speed="50000", device=False, devtype="bond", ifindex=8)
    ib0 = _iface(net, "ib0", speed="100000", ifindex=9)
    (ib0 / "device" / "infiniband" / "mlx5_0").mkdir(parents=True)
    (ib0 / "dev_port").write_text("0\n")
    _iface(net, "ens2f0", speed="25000", ifindex=10)
    _ib_port(ib, "mlx5_0", 1, "100 Gb/sec (4X EDR)")
    _ib_port(ib, "mlx5_1", 1, "25 Gb/sec (1X EDR)", layer="Ethernet", ndevs=("ens2f0", "ens2f0"))
    (tmp_path / "route").write_text(ROUTE)
    (tmp_path / "route6").write_text(ROUTE6)
    return {"sys_net": net, "sys_ib": ib, "route": tmp_path / "route", "route6": tmp_path / "route6"}


def test_parses_infiniband_rates_to_data_rates() -> None:
    edr = link_rate.parse_ib_rate("100 Gb/sec (4X EDR)")
    assert edr == {"rate_gbit_s": 100.0, "lanes": 4, "speed": "EDR", "data_gbit_s": 100.0}
    assert link_rate.parse_ib_rate("40 Gb/sec (4X QDR)")["data_gbit_s"] == pytest.approx(32.0)  # 8b/10b
    assert link_rate.parse_ib_rate("56 Gb/sec (4X FDR)")["data_gbit_s"] == pytest.approx(54.545, abs=1e-3)  # 64b/66b
    assert link_rate.parse_ib_rate("200 Gb/sec (4X HDR)")["data_gbit_s"] == 200.0
    sdr = link_rate.parse_ib_rate("10 Gb/sec (4X)")  # older kernels name no speed for SDR
    assert sdr["speed"] == "SDR" and sdr["data_gbit_s"] == pytest.approx(8.0)
    # RoCE: an Ethernet rate printed with an IB speed name is already a data rate.
    assert link_rate.parse_ib_rate("40 Gb/sec (4X QDR)", "Ethernet")["data_gbit_s"] == 40.0
    with pytest.raises(ValueError, match="100 Gb/sec"):
        link_rate.parse_ib_rate("unknown")


def test_links_kinds_and_speeds(node: dict[str, Path]) -> None:
    ports = link_rate.read_rdma_ports(node["sys_ib"])
    assert [(p["id"], p["data_gbit_s"], p["link_layer"]) for p in ports] == [
        ("mlx5_0/1", 100.0, "InfiniBand"), ("mlx5_1/1", 25.0, "Ethernet")]
    links = {lk["name"]: lk for lk in link_rate.read_links(node["sys_net"], ports)}
    assert "lo" not in links
    assert {n: (lk["kind"], lk["virtual"], lk["speed_mbit_s"]) for n, lk in links.items()} == {
        "eth0": ("physical", False, 25000), "eth1": ("physical", False, None), "cl0": ("veth", True, 10000),
        "br0": ("bridge", True, None), "bond0": ("bond", False, 50000), "ib0": ("physical", False, 100000),
        "ens2f0": ("physical", False, 25000)}
    assert links["ib0"]["rdma_ports"] == ["mlx5_0/1"] and links["ens2f0"]["rdma_ports"] == ["mlx5_1/1"]
    assert links["eth0"]["rdma_ports"] == [] and links["eth0"]["operstate"] == "up"


def test_unsigned_unknown_speed_is_unknown(tmp_path: Path) -> None:
    d = _iface(tmp_path, "eno1", speed=str(2**32 - 1))
    assert link_rate.speed_mbit_s(d) is None
    (d / "speed").write_text("garbage\n")
    assert link_rate.speed_mbit_s(d) is None


def test_default_route_lowest_metric_then_ipv6(tmp_path: Path) -> None:
    (tmp_path / "route").write_text(ROUTE)
    (tmp_path / "route6").write_text(ROUTE6)
    assert link_rate.default_route_interface(tmp_path / "route", tmp_path / "route6") == "eth1"  # metric 50
    only_header = ROUTE.splitlines()[0] + "\n" + ROUTE.splitlines()[2] + "\n"  # no default IPv4 route
    (tmp_path / "route").write_text(only_header)
    assert link_rate.default_route_interface(tmp_path / "route", tmp_path / "route6") == "ens5"
    assert link_rate.default_route_interface(tmp_path / "none", tmp_path / "none6") is None


def test_choice_of_link() -> None:
    links = [{"name": "eth0"}, {"name": "cl0"}]
    assert link_rate.choose_link(links, ["ib0", "cl0"], "eth0") == {"interface": "cl0",
                                                                   "chosen_by": "config tcp_interface"}
    missing = link_rate.choose_link(links, ["ib0"], "eth0")
    assert missing["interface"] is None and "ib0 not on this node" in missing["note"]
    assert link_rate.choose_link(links, [], "eth0") == {"interface": "eth0", "chosen_by": "default route"}
    assert link_rate.choose_link(links, [], None)["interface"] is None


def test_sources_sysfs_infiniband_roce_and_config(node: dict[str, Path]) -> None:
    # The default route's NIC: its sysfs speed; the EDR port behind ib0 is noted as another path.
    net = link_rate.network_record(**node)["network_link"]
    assert net["interface"] == "eth1" and net["gbit_s"] is None and "speed unknown" in net["note"]
    (node["route"]).write_text(ROUTE.replace("\t50\t", "\t500\t"))
    rec = link_rate.network_record(**node)
    net = rec["network_link"]
    assert (net["interface"], net["chosen_by"], net["source"], net["gbit_s"], net["MBps"]) == (
        "eth0", "default route", "sysfs:eth0", 25.0, 3125.0)
    assert net["other_rdma"] == ["mlx5_0/1 (100 Gbit/s)", "mlx5_1/1 (25 Gbit/s)"]
    assert rec["default_route"] == "eth0" and len(rec["links"]) == 7
    # IPoIB: the port's rate, not the interface's speed file.
    net = link_rate.network_record(["ib0"], **node)["network_link"]
    assert (net["source"], net["gbit_s"], net["MBps"]) == ("infiniband:mlx5_0/1", 100.0, 12500.0)
    assert net["other_rdma"] == ["mlx5_1/1 (25 Gbit/s)"]
    net = link_rate.network_record(["ens2f0"], **node)["network_link"]
    assert (net["source"], net["gbit_s"]) == ("infiniband:mlx5_1/1", 25.0)
    assert link_rate.network_record(["bond0"], **node)["network_link"]["source"] == "sysfs:bond0"
    # A veth (the netns test cluster's cl0): its 10000 Mbit/s is no link rate; the config stands in.
    net = link_rate.network_record(["cl0"], 10, "veth-tcp", **node)["network_link"]
    assert (net["interface"], net["source"], net["gbit_s"], net["config_name"]) == ("cl0", "config", 10.0, "veth-tcp")
    assert "veth" in net["note"] and "10000 Mbit/s" in net["note"]
    net = link_rate.network_record(["cl0"], **node)["network_link"]
    assert net["gbit_s"] is None and net["source"] is None and "MBps" not in net
    net = link_rate.network_record(["br0"], **node)["network_link"]
    assert net["gbit_s"] is None and "bridge" in net["note"]


def test_a_down_ib_port_is_not_the_rate(node: dict[str, Path]) -> None:
    (node["sys_ib"] / "mlx5_0" / "ports" / "1" / "state").write_text("1: DOWN\n")
    net = link_rate.network_record(["ib0"], **node)["network_link"]
    assert net["source"] == "sysfs:ib0" and net["gbit_s"] == 100.0  # the IPoIB speed file, as read
    assert link_rate.network_record(["eth0"], **node)["network_link"]["other_rdma"] == ["mlx5_1/1 (25 Gbit/s)"]


def test_this_machines_links_read_without_error() -> None:
    rec = link_rate.network_record(["no-such-if0"], 10, "nominal")
    names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    assert [lk["name"] for lk in rec["links"]] == names
    assert all(lk["speed_mbit_s"] is None or lk["speed_mbit_s"] > 0 for lk in rec["links"])
    net = rec["network_link"]
    assert net["interface"] is None and net["source"] == "config" and net["MBps"] == 1250.0
    default = link_rate.default_route_interface()
    chosen = link_rate.network_record()["network_link"]
    assert chosen["interface"] == default
    if default is not None:
        assert chosen["gbit_s"] is not None or chosen["note"].startswith(default)


def test_the_nodes_nics_name_rate_and_link_layer(node: dict[str, Path]) -> None:
    """What a cell's provenance records of its node's NICs (issue #34): each interface's rate and link
    layer, the RDMA port behind it, and an IB port behind no interface as an entry of its own."""
    (node["sys_net"] / "eth0" / "type").write_text("1\n")
    _ib_port(node["sys_ib"], "mlx4_0", 1, "40 Gb/sec (4X QDR)")  # no IPoIB interface over it
    nics = {n["name"]: n for n in link_rate.node_nics(node["sys_net"], node["sys_ib"])}
    assert "lo" not in nics
    assert (nics["eth0"]["speed_mbit_s"], nics["eth0"]["link_layer"], nics["eth0"]["rdma_ports"]) == (
        25000, "Ethernet", [])
    assert nics["eth1"]["speed_mbit_s"] is None  # a VM's -1
    ib0 = nics["ib0"]
    assert ib0["link_layer"] == "InfiniBand" and ib0["rdma_ports"] == [
        {"id": "mlx5_0/1", "rate": "100 Gb/sec (4X EDR)", "data_gbit_s": 100.0, "link_layer": "InfiniBand",
         "state": "4: ACTIVE"}]
    assert nics["ens2f0"]["link_layer"] == "Ethernet" and nics["ens2f0"]["rdma_ports"][0]["id"] == "mlx5_1/1"
    qdr = nics["mlx4_0/1"]
    assert qdr["kind"] == "rdma" and qdr["rdma_ports"][0]["data_gbit_s"] == pytest.approx(32.0)



def _provenance_blocks(data):  # the provenance section's blocks of a ReportData
    from mpiatlas.report.sections.provenance import section_provenance

    return section_provenance(data).blocks


def _nic_table(blocks):  # the NIC table among them, or the notice that there is none
    from mpiatlas.report.blocks import Notice, Table

    tables = [b for b in blocks if isinstance(b, Table) and b.columns[:2] == ["Host", "Interface"]]
    return tables[0] if tables else next(b for b in blocks if isinstance(b, Notice) and "NICs" in b.text)


def _with_provenance(prov: list[dict[str, object]]):
    from datetime import UTC, datetime

    from mpiatlas.report.data import ReportData

    data = ReportData(title="nics", generated=datetime(2026, 12, 5, tzinfo=UTC))
    data.provenance = prov
    return data


def test_the_report_shows_the_nics_the_recorded_campaign_over_nodes_recorded() -> None:
    """The provenance section's NIC table (issue #34, part 5), read as the report reads it from the recorded
    two-node campaign (tests/data/two_node_placement: 36 cells launched from node1, its veth cl0 at 10 Gbit/s)."""
    from mpiatlas.report.blocks import Details, KeyValues
    from mpiatlas.report.data import load_data

    data_dir = Path(__file__).parent / "data" / "two_node_placement"
    data = load_data(data_dir / "tidy", data_dir / "fits")
    assert data.provenance is not None and len(data.provenance) == 36 and all(p["nics"] for p in data.provenance)
    blocks = _provenance_blocks(data)
    # 36 cells, one launching node, one interface record: one row, not 36
    assert [[c.text for c in row] for row in _nic_table(blocks).rows] == [
        ["node1", "cl0", "veth", "up", "10 Gbit/s", "Ethernet", "—"]]
    # the table replaces the raw JSON among the fields common to every cell
    common = next(b for b in blocks if isinstance(b, KeyValues) and any(k == "stack_kind" for k, _ in b.items))
    assert all(k != "nics" for k, _ in common.items)
    assert any(isinstance(b, Details) for b in blocks)


def test_the_report_shows_each_rdma_port_behind_a_nic(node: dict[str, Path]) -> None:
    """An IPoIB interface, a RoCE NIC and a VM NIC without a speed, as node_nics reads them from sysfs."""
    nics = link_rate.node_nics(node["sys_net"], node["sys_ib"])
    table = _nic_table(_provenance_blocks(_with_provenance([{"host": "n1", "cell": "c", "nics": nics}])))
    rows = {row[1].text: [c.text for c in row] for row in table.rows}
    assert rows["ib0"][4:] == ["100 Gbit/s", "InfiniBand", "mlx5_0/1: 100 Gb/sec (4X EDR), InfiniBand, 4: ACTIVE"]
    assert rows["ens2f0"][4:] == ["25 Gbit/s", "Ethernet", "mlx5_1/1: 25 Gb/sec (1X EDR), Ethernet, 4: ACTIVE"]
    assert rows["eth1"][4] == "—"  # a VM's -1: no rate
    # records from before mpiatlas read the NICs: said, not an empty table
    assert _nic_table(_provenance_blocks(_with_provenance([{"host": "n1", "cell": "c"}]))).text.startswith(
        "No NICs recorded")

"""InfiniBand / RoCE transports (issue 13, part 4): ucx-rc/dc/ud, Open MPI 4 ob1-openib, Intel
ofi-verbs/ofi-mlx; their argv and environment, the device check on every node, and the evidence
parsers read on REAL verbose output quoted from public sources (tests/data/ib/, each file names its
source in its first lines):

* UCX >= 1.14, labelled rc:   https://github.com/parthenon-hpc-lab/parthenon/issues/1260
* UCX < 1.14 ep_cfg, rc:      https://github.com/open-mpi/ompi/issues/9080 (4 nodes),
                              https://github.com/openucx/ucx/issues/8440 (one node, posix first)
* UCX picking tcp over IPoIB: https://github.com/openucx/ucx/issues/9560 (the mismatch case)
* DC: only a line a public how-to prints as its run's "expected confirmation" (not a raw log)
* Intel verbs;ofi_rxm / mlx / sockets: public ORFEO course notes (IMPI 2019.5), public notes on
  IMPI 2021.9, https://github.com/UCL-ARC/rcps-buildscripts/issues/224
* openib port lines: https://github.com/open-mpi/ompi/pull/6137
* ibv_devinfo: public notes on the ibverbs tools (two ConnectX-3, ports 2 down)

Not found in any public source searched, so not tested on real output: a UCX endpoint configuration
using ud_verbs/ud_mlx5 (ucx-ud is checked through the same parser, with no real ud line), and Open
MPI's "mca: bml: Using openib btl for send to" line (the bml line is tested with vader/tcp on
captured runs in tests/data/mixed/; here only openib's own port lines are).

The infra test runs a real campaign on this machine, which has no RDMA device: the cells asking
for ucx-rc (Open MPI from PyPI) and ofi-verbs (Intel MPI) end ``unavailable`` with the reason, and
the report says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.node import multinode
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.runner.judge import mixed_transport_evidence, transport_reason
from mpiatlas.runner.plan import interface_env
from mpiatlas.stacks import LaunchSpec, StackError, fabrics
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI

DATA = REPO / "tests" / "data" / "ib"


def real(name: str) -> str:
    return (DATA / name).read_text()


# -- transports: argv and environment ------------------------------------------------------------


def test_openmpi_ucx_ib_transports_ask_for_the_tl_with_shared_memory(ompi5: OpenMPI) -> None:
    launch = ompi5.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-rc"))
    prefix = str(ompi5.launcher_path())
    assert launch.argv == [prefix, "--allow-run-as-root", "-np", "2", "--report-bindings",
                           "--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
                           "-x", "UCX_TLS=rc,sm,self", "-x", "UCX_LOG_LEVEL=info", "-x", "UCX_LOG_FILE=stderr", "./a.out"]
    for name, tl in (("ucx-dc", "dc"), ("ucx-ud", "ud")):
        transport = ompi5.transport(name)
        assert transport.env == {"UCX_TLS": f"{tl},sm,self"}
        assert (transport.expect, transport.expect_inter, transport.mixed) == ("ucx:sm", f"ucx:{tl}", True)


def test_openib_is_open_mpi_4_only(ompi41: OpenMPI, ompi5: OpenMPI) -> None:
    assert ompi41.transport("ob1-openib").args == (
        "--mca", "pml", "ob1", "--mca", "btl", "self,openib", "--mca", "btl_openib_allow_ib", "1")
    argv = ompi41.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-openib")).argv
    assert argv[-4:] == ["--mca", "btl_base_verbose", "1", "./a.out"]  # the bml lines are its evidence
    with pytest.raises(StackError, match=r"needs Open MPI 4 .*removed in 5.0"):
        ompi5.transport("ob1-openib")


def test_mpich_ucx_ib_transports(tmp_path: Path) -> None:
    mpich5 = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")
    argv = mpich5.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-dc")).argv
    assert argv[1:] == ["-n", "2", "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "MPIR_CVAR_CH4_NETMOD", "ucx",
                        "-genv", "UCX_TLS", "dc,sm,self", "-genv", "UCX_LOG_LEVEL", "info",
                        "-genv", "UCX_LOG_FILE", "stderr", "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "1", "./a.out"]
    mpich4 = MPICH(tmp_path / "mpich4", source="system", version="4.0.2")
    assert mpich4.transport("ucx-ud").env == {"UCX_TLS": "ud,sm,self"}


def test_intel_verbs_and_mlx_keep_their_env(tmp_path: Path) -> None:
    impi = IntelMPI(tmp_path / "impi")
    assert impi.launch(["./a.out"], LaunchSpec(np=2, transport="ofi-verbs")).env == {
        "I_MPI_FABRICS": "ofi", "FI_PROVIDER": "verbs", "I_MPI_DEBUG": "5"}
    assert impi.transport("ofi-mlx").env == {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "mlx"}


def test_net_devices_reach_each_transport_and_replace_the_tcp_interface(ompi5: OpenMPI) -> None:
    spec = {"cell": {"transport": "ucx-rc"}, "tcp_interface": "eth0", "net_devices": ["mlx5_0:1"]}
    env = interface_env(ompi5, spec)
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1" and env["OMPI_MCA_btl_tcp_if_include"] == "eth0"
    # Without net_devices an IB transport is not pinned to the TCP interface (it would have no device).
    assert "UCX_NET_DEVICES" not in interface_env(ompi5, {**spec, "net_devices": None})
    assert interface_env(ompi5, {**spec, "cell": {"transport": "ucx-tcp"}})["UCX_NET_DEVICES"] == "eth0"
    assert fabrics.net_device_env("ob1-openib", ["mlx5_0:1", "mlx5_1:1"]) == {
        "OMPI_MCA_btl_openib_if_include": "mlx5_0:1,mlx5_1:1"}
    assert fabrics.net_device_env("ofi-verbs", ["mlx5_2:1"]) == {"FI_VERBS_DEVICE_NAME": "mlx5_2"}
    assert fabrics.net_device_env("ofi-mlx", ["mlx5_2:1"]) == {"UCX_NET_DEVICES": "mlx5_2:1"}
    assert fabrics.net_device_env("ofi-tcp", ["mlx5_2:1"]) == {}


def test_config_takes_the_new_transports_and_net_devices() -> None:
    config = yaml.safe_load((REPO / "config" / "test" / "tiny.yaml").read_text())
    config["stacks"]["ompi"] = {"kind": "openmpi", "transports": ["ucx-rc", "ucx-dc", "ucx-ud"],
                                "net_devices": ["mlx5_0:1", "mlx5_1"]}
    config["imb"]["stacks"] = ["intelmpi"]
    validate(config)
    config["stacks"]["ompi"]["net_devices"] = ["mlx5 0"]
    with pytest.raises(ConfigError, match="net_devices"):
        validate(config)


# -- devices ---------------------------------------------------------------------------------------


def _sysfs(root: Path, ports: dict[str, tuple[str, str]], driver: str = "mlx5_core") -> Path:
    """A /sys/class/infiniband tree: ``{"mlx5_0/1": ("4: ACTIVE", "InfiniBand")}``."""
    for where, (state, layer) in ports.items():
        dev, port = where.split("/")
        (root / dev / "ports" / port).mkdir(parents=True, exist_ok=True)
        (root / dev / "ports" / port / "state").write_text(state + "\n")
        (root / dev / "ports" / port / "link_layer").write_text(layer + "\n")
        drivers = root.parent / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (root / dev / "device").mkdir(exist_ok=True)
        if not (root / dev / "device" / "driver").exists():
            (root / dev / "device" / "driver").symlink_to(drivers)
    return root


def test_sysfs_ports_with_state_link_layer_and_driver(tmp_path: Path) -> None:
    root = _sysfs(tmp_path / "infiniband", {"mlx5_0/1": ("4: ACTIVE", "InfiniBand"),
                                            "mlx5_1/1": ("1: DOWN", "Ethernet")})
    ports = fabrics.local_ports(str(root), ibv_devinfo="/nonexistent")
    assert ports == (fabrics.Port("mlx5_0", "1", "ACTIVE", "InfiniBand", "mlx5_core"),
                     fabrics.Port("mlx5_1", "1", "DOWN", "Ethernet", "mlx5_core"))
    assert fabrics.local_ports(str(tmp_path / "none"), ibv_devinfo="/nonexistent") == ()


def test_ibv_devinfo_real_output() -> None:
    ports = fabrics.parse_ibv_devinfo(real("ibv_devinfo_mlx4.txt"))
    assert [(p.name, p.state, p.link_layer) for p in ports] == [
        ("mlx4_1:1", "ACTIVE", "InfiniBand"), ("mlx4_1:2", "DOWN", "InfiniBand"),
        ("mlx4_0:1", "ACTIVE", "InfiniBand"), ("mlx4_0:2", "DOWN", "InfiniBand")]
    # mlx4 has no DC; a configured device that is down is refused, an active one is fine.
    assert "no mlx5 device on n1" in str(fabrics.device_problem("ucx-dc", "n1", ports))
    assert fabrics.device_problem("ucx-rc", "n1", ports, ["mlx4_0:1"]) is None
    assert fabrics.device_problem("ucx-rc", "n1", ports, ["mlx4_0:2"]) == (
        "InfiniBand device mlx4_0:2 not active on n1 (has mlx4_1:1 ACTIVE InfiniBand, mlx4_1:2 DOWN InfiniBand, "
        "mlx4_0:1 ACTIVE InfiniBand, mlx4_0:2 DOWN InfiniBand)")


def test_every_node_without_a_device_is_named(tmp_path: Path) -> None:
    active = (fabrics.Port("mlx5_0", "1", "ACTIVE", "Ethernet", "mlx5_core"),)
    down = (fabrics.Port("mlx5_0", "1", "DOWN", "InfiniBand", "mlx5_core"),)
    with pytest.raises(StackError) as info:
        fabrics.require_devices("ucx-rc", {"node1": active, "node2": (), "node3": down})
    assert str(info.value) == ("unavailable: no InfiniBand device on node2 (transport ucx-rc needs an active "
                               "InfiniBand/RoCE port); no active InfiniBand port on node3 (mlx5_0:1 DOWN InfiniBand)")
    fabrics.require_devices("ucx-rc", {"node1": active})  # RoCE counts
    fabrics.require_devices("ucx-tcp", {"node2": ()})  # not an RDMA transport: nothing asked


def test_node_probe_carries_each_nodes_ports(tmp_path: Path) -> None:
    """The probe text runs as-is (as on each node), and its answer parses back into the ports."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", multinode.PROBE_CODE], capture_output=True, text=True, timeout=60)
    facts = multinode.parse_probe(out.stdout)
    assert out.returncode == 0 and len(facts) == 1
    assert facts[0].rdma_ports == fabrics.local_ports()
    line = "mpiatlas-node node2 9875 2 2 mlx5_0:1:ACTIVE:InfiniBand:mlx5_core,mlx5_1:1:DOWN:Ethernet:mlx5_core"
    (node,) = multinode.parse_probe(line)
    assert [p.describe() for p in node.rdma_ports] == ["mlx5_0:1 ACTIVE InfiniBand", "mlx5_1:1 DOWN RoCE"]
    # A probe record that lists no ports (written before ports were probed): unknown, and said so.
    (old,) = multinode.parse_probe("mpiatlas-node node3 9875 2 2")
    assert old.rdma_ports is None
    with pytest.raises(StackError, match="no InfiniBand device on node3 known: its node probe does not list"):
        fabrics.require_devices("ucx-rc", {old.host: old.rdma_ports})


def test_ib_cells_here_are_unavailable_exactly_when_the_host_has_no_active_port() -> None:
    import socket

    assert fabrics.hello_transport(["ucx-rc", "ob1-sm"]) == "ob1-sm"  # a non-RDMA transport comes first anyway
    ports = fabrics.local_ports()
    if any(p.state == "ACTIVE" for p in ports):  # a host with InfiniBand/RoCE: its port carries the cells
        fabrics.require_local("ucx-rc")
        assert fabrics.hello_transport(["ucx-rc", "ucx-ud"]) == "ucx-rc"
        return
    no_port = f"^unavailable: no (active )?InfiniBand (device|port) on {socket.gethostname()}"
    with pytest.raises(StackError, match=no_port):
        fabrics.require_local("ucx-rc")
    assert fabrics.hello_transport(["ucx-rc", "ucx-ud"]) is None


# -- evidence, on real output -------------------------------------------------------------------


def test_labelled_ucx_log_reads_rc_between_nodes_and_shared_memory_within(ompi5: OpenMPI) -> None:
    output = real("ucx_labelled_rc_parthenon1260.txt")
    inter, intra = fabrics.ucx_configs(output)
    assert (inter.label, inter.host, inter.pid, inter.transport) == ("inter-node", "jpbo-007-31", 2814548, "ucx:rc")
    assert inter.devices == ["mlx5_2:1", "mlx5_0:1", "mlx5_1:1", "mlx5_3:1"]
    # The intra-node configuration lists rc lanes for large messages, but its first lane is sysv.
    assert (intra.label, intra.transport, intra.devices[0]) == ("intra-node", "ucx:sm", "mlx5_3:1")
    details = mixed_transport_evidence(ompi5, "ucx-rc", output, nodes=2)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["ucx:sm"], "cross_node": ["ucx:rc"]}
    assert details["obtained_transport"] == "ucx:sm+ucx:rc"
    # The same output for a DC cell: the cross-node pairs used RC, named with UCX's own line.
    wrong = mixed_transport_evidence(ompi5, "ucx-dc", output, nodes=2)
    assert wrong["transport_ok"] is False
    assert wrong["transport_problems"] == [
        "cross-node pair(s) all pairs of the class used 'ucx:rc', not 'ucx:dc': " + output.splitlines()[2].strip()]


def test_unlabelled_ucx_log_over_four_nodes(tmp_path: Path) -> None:
    output = real("ucx_epcfg_rc_ompi9080.txt")
    evidence = fabrics.ucx_pair_evidence(output, {})
    # ep_cfg[0] holds the self lane (an endpoint to itself): skipped; the four others cross nodes over rc.
    assert [(e.pair_class, e.transport) for e in evidence] == [("cross_node", "ucx:rc")] * 4
    assert [c.devices for c in fabrics.ucx_configs(output)] == [["mlx5_0:1", "mlx5_1:1"]] * 4
    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")  # MPICH reads the same UCX log
    details = mixed_transport_evidence(mpich, "ucx-rc", output, nodes=4)
    assert details["transport_ok"] and details["pair_classes"]["cross_node"] == ["ucx:rc"]


def test_unlabelled_ucx_log_on_one_node_is_shared_memory(ompi5: OpenMPI) -> None:
    output = real("ucx_epcfg_onnode_ucx8440.txt")
    (config,) = fabrics.ucx_configs(output)  # ep_cfg[1] has the self lane
    assert (config.transport, config.host, config.devices) == ("ucx:sm", "node001", ["mlx5_1:1"])
    details = mixed_transport_evidence(ompi5, "ucx-rc", output, nodes=1)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["ucx:sm"], "cross_node": []}


def test_ucx_rc_cell_whose_output_shows_tcp_is_invalid(ompi5: OpenMPI) -> None:
    output = real("ucx_epcfg_tcp_over_ipoib_ucx9560.txt")
    evidence = fabrics.ucx_pair_evidence(output, {0: "n1", 1: "n1", 2: "n2", 3: "n2"})
    assert [(e.pair_class, e.transport) for e in evidence] == [
        ("on_node", "ucx:sm"), ("on_node", "ucx:sm"), ("cross_node", "ucx:tcp")]
    details = mixed_transport_evidence(ompi5, "ucx-rc", output, nodes=2)
    assert details["transport_ok"] is False and details["pair_classes"]["cross_node"] == ["ucx:tcp"]
    assert transport_reason(details) == (
        "mixed transport: cross-node pair(s) all pairs of the class used 'ucx:tcp', not 'ucx:rc': "
        "ucp_worker.c:1783 UCX INFO ep_cfg[3]: tag(tcp/ib1 tcp/ib0)")


def test_dc_line_as_documented(ompi5: OpenMPI) -> None:
    (config,) = fabrics.ucx_configs(real("ucx_labelled_dc_expected_vortex.txt"))
    assert (config.label, config.transport, config.devices) == ("inter-node", "ucx:dc", ["mlx5_2:1"])
    assert fabrics.tl_family("ud_mlx5") == fabrics.tl_family("ud_verbs") == "ud"  # no real ud line found


def test_intel_providers_on_real_output(tmp_path: Path) -> None:
    impi = IntelMPI(tmp_path / "impi")
    assert impi.obtained_transport(real("impi_verbs_orfeo.txt")) == "verbs"  # "verbs;ofi_rxm"
    assert impi.obtained_transport(real("impi_mlx_2021.txt")) == "mlx"
    sockets = impi.obtained_transport(real("impi_sockets_ucl224.txt"))
    assert sockets == "sockets" != impi.transport("ofi-verbs").expect  # an ofi-verbs cell here is invalid


def test_openib_port_lines() -> None:
    assert fabrics.openib_devices(real("openib_init_port_ompi6137.txt")) == ["mlx5_1:1"]


# -- a real campaign on this machine (no RDMA device) --------------------------------------------


@pytest.mark.infra
def test_campaign_cells_asking_for_infiniband_are_unavailable_with_the_reason(tmp_path: Path) -> None:
    require_infra(not fabrics.local_ports(), "a host without RDMA ports (this campaign shows the no-device path)")
    import socket

    work = campaign_workdir(tmp_path, "config/test/ib_absent.yaml")
    done = run_campaign(work, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    statuses = [json.loads(p.read_text()) for p in (work / "results" / "ib-absent" / "raw").rglob("status.json")]
    assert len(statuses) == 2
    host = socket.gethostname()
    for status in statuses:
        assert status["status"] == "unavailable"
        assert status["reason"].startswith(f"no InfiniBand device on {host} (transport ")
    html = (work / "results" / "ib-absent" / "report.html").read_text()
    assert f"no InfiniBand device on {host}" in html

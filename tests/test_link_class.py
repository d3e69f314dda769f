"""Inter-node B set against the link of its transport's class: a TCP transport against the TCP
link (network_link), an RDMA one (ucx-rc, ofi-verbs, ...) against the node's InfiniBand/RoCE port."""

from __future__ import annotations

import json
from pathlib import Path

from mpiatlas.models.fit_records import Fit
from mpiatlas.node.link_rate import parse_ib_rate
from mpiatlas.report.blocks import Table
from mpiatlas.report.data import load_data
from mpiatlas.report.physical_limits import RDMA_CLASS, TCP_CLASS, transport_class
from mpiatlas.report.sections.parameters import section_parameters

ETH25 = {"interface": "eth0", "chosen_by": "default route", "gbit_s": 25.0, "source": "sysfs:eth0",
         "other_rdma": ["mlx5_0/1 (100 Gbit/s)"]}


def _port(port_id: str, rate: str, state: str = "4: ACTIVE") -> dict:
    # As link_rate.read_rdma_ports records it.
    return {"id": port_id, "rate": rate, "link_layer": "InfiniBand", "state": state, **parse_ib_rate(rate)}


def _node(name: str, ports: list[dict]) -> dict:
    return {"node": name, "available": False, "reason": "likwid-bench not found", "network_link": ETH25,
            "rdma_ports": ports}


def _fit(label: str, bandwidth: float) -> dict:
    # A fitted Hockney entry as fits/hockney.json holds it (its cell key: label, stack, transport, ...);
    # only what the limit columns read matters.
    stack, transport, _ = label.split("/")
    return {"label": label, "stack": stack, "transport": transport, "benchmark": "PingPong", "np": 2,
            "mapping": "node2", "latency_us": 1.5,
            "latency_ci_us": [1.4, 1.6], "n_sizes": 20, "segments": [], "residuals": [],
            # A link's curve rises to its largest size: the asymptotic and the peak B are the same s/t.
            **{f"{figure}_bandwidth_MBps": bandwidth for figure in ("asymptotic", "peak")},
            **{f"{figure}_bandwidth_ci_MBps": [bandwidth * 0.99, bandwidth] for figure in ("asymptotic", "peak")},
            "asymptotic_bytes": 4 << 20, "peak_bytes": 4 << 20}


def _table(tmp_path: Path, nodes: list[dict]) -> tuple[dict[str, list], list, Table]:
    fits = tmp_path / "fits"
    fits.mkdir(exist_ok=True)
    (fits / "hockney.json").write_text(json.dumps([_fit("ompi/ucx-rc/node2", 12047.46),
                                                   _fit("ompi/ob1-tcp/node2", 2911.5)]))
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"nodes": nodes}))
    section = section_parameters(load_data(None, fits, limits=limits))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    return {row[1].text: row for row in table.rows}, section.blocks, table


def test_transport_classes() -> None:
    # The class is the fit's own transport field's (its label is not taken apart: a fit without one is TCP's).
    assert transport_class(Fit("PingPong", transport="ucx-rc", label="ompi/ucx-rc/node2")) == RDMA_CLASS
    assert transport_class(Fit("PingPong", transport="ofi-verbs", label="impi/ofi-verbs/node2")) == RDMA_CLASS
    assert transport_class(Fit("PingPong", transport="ob1-openib", label="ompi/ob1-openib/node2")) == RDMA_CLASS
    assert transport_class(Fit("PingPong", transport="shm+ofi-tcp", label="x")) == TCP_CLASS
    assert transport_class(Fit("PingPong", transport="shm+ucx-rc", label="x")) == RDMA_CLASS  # the network part
    assert transport_class(Fit("PingPong", transport="ucx", label="ompi/ucx/node2")) == TCP_CLASS  # UCX's own choice: the named link, as before
    assert transport_class(Fit("PingPong", transport="ob1-tcp", label="ompi/ob1-tcp/node2")) == TCP_CLASS
    assert transport_class(Fit("PingPong", label="ompi/ucx-rc/node2")) == TCP_CLASS


def test_rdma_b_is_set_against_the_ib_port_and_tcp_b_against_the_tcp_link(tmp_path: Path) -> None:
    """HDR100 (100 Gb/s of data, 12500 MB/s) beside a 25 GbE link (3125 MB/s): 12047.46 MB/s over
    ucx-rc is 96.4 % of the port, 2911.5 MB/s over TCP 93.2 % of the Ethernet link. Both nodes have
    an active HDR100 port; n1's HDR200 port is down, so it does not count."""
    hdr = _port("mlx5_0/1", "100 Gb/sec (2X HDR)")
    down = _port("mlx5_1/1", "200 Gb/sec (4X HDR)", state="1: DOWN")
    rows, blocks, table = _table(tmp_path, [_node("n1", [hdr, down]), _node("n2", [hdr])])
    col = table.columns.index("Asymptotic B % of copy")
    assert rows["ompi/ucx-rc/node2"][col].text == "96.4 % (infiniband:mlx5_0/1)"
    assert rows["ompi/ob1-tcp/node2"][col].text == "93.2 % (sysfs:eth0)"
    texts = [getattr(b, "text", "") for b in blocks]
    assert any(t.startswith("Inter-node B of RDMA transports (InfiniBand/RoCE) is set against the link rate, "
                            "100 Gbit/s") for t in texts)
    assert any(t.startswith("Inter-node B is set against the link rate, 25 Gbit/s") for t in texts)


def test_a_node_without_an_active_port_leaves_the_rdma_limit_unknown_and_says_why(tmp_path: Path) -> None:
    rows, _blocks, table = _table(tmp_path, [_node("n1", [_port("mlx5_0/1", "100 Gb/sec (2X HDR)", "1: DOWN")])])
    cell = rows["ompi/ucx-rc/node2"][table.columns.index("Asymptotic B % of copy")]
    assert cell.text == "link rate unknown"
    assert "n1: no active InfiniBand/RoCE port with a rate recorded" in cell.title
    assert rows["ompi/ob1-tcp/node2"][table.columns.index("Asymptotic B % of copy")].text == "93.2 % (sysfs:eth0)"

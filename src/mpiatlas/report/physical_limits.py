"""The campaign's physical limits (R/limits/limits.json, :mod:`mpiatlas.node.limits`) as the report uses them.

The report is given the file (``mpiatlas report --limits``; the report rule passes the campaign's
R/limits/limits.json to both views unless ``campaign.limits`` is ``off``). One record per node;
with several nodes each level's limit is the median over the nodes that measured it (a campaign's
nodes are one node type).

The network limit depends on the transport's class. A TCP (or generic) transport is bounded by
the link each node's record names (``network_link``, see :mod:`mpiatlas.node.link_rate`: the stacks'
``tcp_interface`` or the default route); an RDMA transport (``ucx-rc``, ``ofi-verbs``, ...,
:func:`mpiatlas.stacks.base.medium` RDMA) by the node's fastest active InfiniBand/RoCE port
(its ``rdma_ports``), which is what UCX and libfabric pick without UCX_NET_DEVICES, and need not be
behind the TCP interface. Either way the slowest node bounds it (a transfer between two nodes goes
no faster than the slower end), with where it came from: ``sysfs:<iface>``,
``infiniband:<dev>/<port>`` or ``config``. Records without one (older files) fall back to the
α-β fits' ``network.bandwidth_gbit_s``, the config value.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mpiatlas.models.alphabeta_records import Network
from mpiatlas.models.fit_records import Fit, HockneyRecord
from mpiatlas.node.limits import MEMORY, LimitsError, level_for_size, level_kernels, level_limits
from mpiatlas.node.link_rate import gbit_to_MBps, port_active
from mpiatlas.stacks.base import RDMA, TCP, medium

# Transport classes, for the link an inter-node transfer is bounded by.
TCP_CLASS = TCP
RDMA_CLASS = RDMA


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class NodeLink:
    """A node's link as the limits record names it (``network_link``, :class:`mpiatlas.node.link_rate.NetworkLink`),
    or the RDMA link :func:`rdma_link` picks: read leniently, as older records lack fields and a
    figure that is no positive number is unknown (``gbit_s`` None)."""

    interface: str | None = None
    chosen_by: str | None = None
    gbit_s: float | None = None
    source: str | None = None
    config_name: str | None = None
    note: str | None = None
    other_rdma: tuple[str, ...] = ()  # active InfiniBand ports the TCP link is not on

    @classmethod
    def from_json(cls, net: dict[str, object]) -> NodeLink:
        others = net.get("other_rdma") or []
        return cls(interface=_optional_text(net.get("interface")), chosen_by=_optional_text(net.get("chosen_by")),
                   gbit_s=_gbit(net.get("gbit_s")), source=_optional_text(net.get("source")),
                   config_name=_optional_text(net.get("config_name")), note=_optional_text(net.get("note")),
                   other_rdma=tuple(str(o) for o in others) if isinstance(others, list) else ())


@dataclass(frozen=True)
class RdmaPortFacts:
    """What the report reads of a node's RDMA port (:class:`mpiatlas.node.link_rate.RdmaPort`)."""

    id: str | None
    state: str | None
    data_gbit_s: float | None  # None: no positive rate recorded

    @classmethod
    def from_json(cls, port: dict[str, object]) -> RdmaPortFacts:
        return cls(id=_optional_text(port.get("id")), state=_optional_text(port.get("state")),
                   data_gbit_s=_gbit(port.get("data_gbit_s")))


@dataclass
class PhysicalLimits:
    source: str
    rates: dict[str, float] = field(default_factory=dict)  # level -> MB/s copied by one core
    caches: dict[str, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)  # "node: reason"
    links: dict[str, NodeLink] = field(default_factory=dict)  # node -> its record's network_link
    rdma_ports: dict[str, list[RdmaPortFacts]] = field(default_factory=dict)  # node -> its record's rdma_ports
    # What measured the rates: likwid-bench, or mpiatlas's copy kernel where likwid-bench is missing.
    tools: list[str] = field(default_factory=list)
    # level -> the kernel behind its rate (of the first node that measured the level), e.g. "stream nt".
    kernels: dict[str, str] = field(default_factory=dict)

    def level_of(self, size_bytes: float) -> str:
        return level_for_size({"caches": self.caches}, size_bytes)

    def fraction(self, bandwidth: object, level: str) -> float | None:
        rate = self.rates.get(level)
        if rate is None or not isinstance(bandwidth, (int, float)) or bandwidth <= 0:
            return None
        return float(bandwidth) / rate


def load_limits(path: Path) -> PhysicalLimits:
    """The limits file at ``path``; LimitsError naming the file when it is missing or cannot be read."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise LimitsError(f"{path}: unreadable ({exc})") from exc
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise LimitsError(f"{path}: expected an object with a 'nodes' list")
    out = PhysicalLimits(source=str(path))
    per_level: dict[str, list[float]] = {}
    for rec in nodes:
        net = rec.get("network_link") if isinstance(rec, dict) else None
        if isinstance(net, dict):
            out.links[str(rec.get("node"))] = NodeLink.from_json(net)
        ports = rec.get("rdma_ports") if isinstance(rec, dict) else None
        if isinstance(ports, list):
            out.rdma_ports[str(rec.get("node"))] = [RdmaPortFacts.from_json(p) for p in ports if isinstance(p, dict)]
        rates = level_limits(rec)
        if not rates:
            out.unavailable.append(f"{rec.get('node')}: {rec.get('reason') or 'no usable run'}")
            continue
        for level, rate in rates.items():
            per_level.setdefault(level, []).append(rate)
        for level, kernel in level_kernels(rec).items():
            out.kernels.setdefault(level, kernel)
        tool = str(rec.get("tool") or "likwid-bench")
        if tool not in out.tools:
            out.tools.append(tool)
        caches = rec.get("caches")
        if isinstance(caches, dict) and not out.caches:
            out.caches = {str(k): int(v) for k, v in caches.items() if isinstance(v, (int, float))}
    out.rates = {level: statistics.median(v) for level, v in per_level.items()}
    return out


def is_intra_node(fit: Fit) -> bool:
    """A fit of ranks on one node (its copies are what the memory limit bounds): it names a mapping
    and that mapping does not spread the ranks over nodes (``node``, ``node2``, …)."""
    return bool(fit.mapping) and not is_inter_node(fit)


def limit_cells(fit: HockneyRecord, limits: PhysicalLimits) -> tuple[float | None, str, float | None, str]:
    """(asymptotic B / copy rate of the level that holds the largest measured message, that level,
    peak B / copy rate of the level the peak size fits in, that level): each figure against the copy
    of the same working set, never an in-cache figure against memory or the reverse."""
    peak_level = limits.level_of(fit.peak_bytes) if fit.peak_bytes is not None else MEMORY
    largest = max((r.bytes for r in fit.residuals), default=fit.asymptotic_bytes)
    asym_level = limits.level_of(largest) if largest is not None else MEMORY
    return (limits.fraction(fit.asymptotic_bandwidth_MBps, asym_level), asym_level,
            limits.fraction(fit.peak_bandwidth_MBps, peak_level), peak_level)


@dataclass(frozen=True)
class LinkLimit:
    """The link rate inter-node B is set against: Gbit/s of data (None: unknown), its source
    (``sysfs:eth0``, ``infiniband:mlx5_0/1``, ``config``), and notes on what is unknown or may
    differ (a node whose link reports no rate, an InfiniBand port the TCP link is not on)."""

    gbit_s: float | None
    source: str = ""
    detail: str = ""
    notes: tuple[str, ...] = ()

    @property
    def MBps(self) -> float | None:  # the unit's spelling (MB/s), not snake_case
        return gbit_to_MBps(self.gbit_s) if self.gbit_s is not None else None

    def fraction(self, bandwidth: object) -> float | None:
        rate = self.MBps
        if rate is None or isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or bandwidth <= 0:
            return None
        return float(bandwidth) / rate


def _gbit(value: object) -> float | None:
    """A positive rate, else None (unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def transport_class(fit: Fit) -> str:
    """RDMA_CLASS for a fit of a transport that needs an InfiniBand/RoCE port (the network part of a
    mixed one, after ``+``), else TCP_CLASS. The transport is the fit's own field (its label is for
    people, not taken apart); a fit without one is TCP_CLASS's."""
    transport = fit.transport or ""
    return RDMA_CLASS if medium(transport.split("+")[-1]) == RDMA else TCP_CLASS


def rdma_link(ports: list[RdmaPortFacts]) -> NodeLink:
    """A node's RDMA link, as a ``network_link`` names one: its fastest active port with a rate."""
    active = [(p.data_gbit_s, p) for p in ports if port_active(p.state) and p.data_gbit_s is not None]
    if not active:
        return NodeLink(note="no active InfiniBand/RoCE port with a rate recorded")
    gbit, best = max(active, key=lambda rated: rated[0])
    return NodeLink(interface=best.id, chosen_by="fastest active RDMA port", gbit_s=gbit,
                    source=f"infiniband:{best.id}")


def link_limit(limits: PhysicalLimits | None, nominal: Network | None, transport_cls: str = TCP_CLASS
               ) -> LinkLimit | None:
    """The campaign's link limit for a class of transports: the slowest node's recorded link (the
    TCP link, or for RDMA_CLASS the fastest active InfiniBand/RoCE port), else ``nominal``, the α-β
    fits' configured network; None when neither says anything."""
    if limits is None:
        links: dict[str, NodeLink] = {}
    elif transport_cls == RDMA_CLASS:
        links = {node: rdma_link(limits.rdma_ports.get(node, [])) for node in sorted({*limits.links, *limits.rdma_ports})}
    else:
        links = limits.links
    notes: list[str] = []
    known: list[tuple[float, str, str]] = []  # (Gbit/s, source, node)
    for node, net in sorted(links.items()):
        if net.note:
            notes.append(f"{node}: {net.note}")
        for other in net.other_rdma:
            notes.append(f"{node}: InfiniBand port {other} is active too: a verbs/UCX transport uses it, "
                         f"not {net.interface}")
        if net.gbit_s is not None:
            known.append((net.gbit_s, net.source or "unknown", node))
    if known:
        slowest = min(g for g, _, _ in known)
        sources = ", ".join(sorted({src for g, src, _ in known if g == slowest}))
        detail = "; ".join(f"{node}: {_link_text(links[node])}" for _, _, node in known)
        return LinkLimit(slowest, sources, detail, tuple(notes))
    if nominal is not None:  # a Network's bandwidth is finite and > 0
        if not links:
            notes.append("no link read from the nodes (no limits record names one)")
        return LinkLimit(nominal.bandwidth_gbit_s, "config",
                         f"network.bandwidth_gbit_s of the α-β fits ({nominal.name or 'network'})", tuple(notes))
    return LinkLimit(None, notes=tuple(notes)) if notes else None


def _link_text(net: NodeLink) -> str:
    iface = net.interface or "no interface"
    how = f" ({net.chosen_by})" if net.chosen_by else ""
    named = f" {net.config_name}" if net.source == "config" and net.config_name else ""
    return f"{iface}{how}, {net.gbit_s:g} Gbit/s from {net.source}{named}"


def is_inter_node(fit: Fit) -> bool:
    """A fit whose ranks are on different nodes: its region is ``other_node``, or its mapping spreads
    the ranks over nodes (``node``, ``node2``, …)."""
    return fit.region == "other_node" or (fit.mapping is not None and fit.mapping.startswith("node"))

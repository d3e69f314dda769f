"""The node's network links, and the rate of the one a campaign's inter-node traffic uses.

The report sets an inter-node bandwidth against it (B as a % of the link rate), so the figure
must be the rate the link *carries data* at, and must say where it came from:

* ``sysfs:<iface>``: /sys/class/net/<iface>/speed (Mbit/s, what ethtool prints). Only for a link
  backed by hardware (a NIC, or a bond/VLAN over NICs): a veth or a bridge reports a kernel
  default (veth: 10000) that limits nothing, and a VM's virtio NIC reports -1;
* ``infiniband:<dev>/<port>``: /sys/class/infiniband/<dev>/ports/<port>/rate (``100 Gb/sec (4X
  EDR)``) of the InfiniBand/RoCE port behind the interface. IB rates name the signalling rate:
  SDR/DDR/QDR lose 20 % to 8b/10b line coding and FDR 2.6 % to 64b/66b (EDR and later state the
  data rate), so the data rate is the limit. A RoCE port is Ethernet: its rate is a data rate;
* ``config``: ``network.bandwidth_gbit_s`` when the link's rate cannot be read.

sysfs rather than ``ibstat``/``ibv_devinfo``: those read the same sysfs files, are missing on many
compute nodes, and their text differs between versions.

Which link: the interface the config makes the stacks use (``stacks.<label>.tcp_interface``),
else the interface of the default route (/proc/net/route, then /proc/net/ipv6_route), else none.
An active InfiniBand port that is not behind that interface is noted: a verbs/UCX transport uses
it and not the TCP interface, and the report says so rather than guessing which one a stack took.

Read fresh every time (a few small files): a link can be renegotiated or taken down between
campaigns, unlike a node's memory copy rate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

SYS_NET = Path("/sys/class/net")
SYS_INFINIBAND = Path("/sys/class/infiniband")
PROC_ROUTE = Path("/proc/net/route")
PROC_ROUTE6 = Path("/proc/net/ipv6_route")

# Kinds whose `speed` is a hardware link's (a bond's is the sum of its active NICs', a VLAN's its NIC's).
HARDWARE_KINDS = ("physical", "bond", "vlan")
# Data bits per signalled bit of the IB speeds whose sysfs rate is the signalling rate.
IB_ENCODING = {"SDR": 0.8, "DDR": 0.8, "QDR": 0.8, "FDR": 14.0625 * 64 / 66 / 14}
_IB_LANE_SPEED = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR"}  # older kernels print "(4X)" for SDR
_IB_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Za-z0-9]*)\))?")
_SPEED_UNKNOWN = 2**31  # the kernel's SPEED_UNKNOWN (-1) printed unsigned by some drivers


# The records below are TypedDicts: they are written as they are into the limits JSON and
# provenance.json, and the checker knows every key.

class Link(TypedDict):
    """One network interface (lo left out)."""

    name: str
    kind: str
    virtual: bool
    operstate: str
    speed_mbit_s: int | None
    rdma_ports: list[str]  # the ``<dev>/<port>`` ids behind it


class IbRate(TypedDict):
    """An RDMA port's rate text, parsed."""

    rate_gbit_s: float
    lanes: int | None
    speed: str | None
    data_gbit_s: float  # after line coding


class RdmaPort(TypedDict):
    """One port of an RDMA device; the rate figures when its rate text parses, else ``error``."""

    id: str
    rate: str | None
    link_layer: str
    state: str | None
    phys_state: str | None
    netdevs: list[str]
    rate_gbit_s: NotRequired[float]
    lanes: NotRequired[int | None]
    speed: NotRequired[str | None]
    data_gbit_s: NotRequired[float]
    error: NotRequired[str]


class LinkChoice(TypedDict):
    """Which interface the stacks' TCP traffic takes, and why (``note`` when none)."""

    interface: str | None
    chosen_by: str | None
    note: NotRequired[str]


class LinkRate(TypedDict):
    """A link's data rate and its source, or gbit_s None and a ``note`` saying why."""

    gbit_s: float | None
    source: str | None
    note: NotRequired[str]


class NetworkLink(LinkChoice):
    """The chosen link and its rate, as a node's limits record keeps it (``network_link``)."""

    gbit_s: float | None
    source: str | None
    config_name: NotRequired[str | None]
    MBps: NotRequired[float]
    other_rdma: NotRequired[list[str]]


class NetworkRecord(TypedDict):
    links: list[Link]
    rdma_ports: list[RdmaPort]
    default_route: str | None
    network_link: NetworkLink


class PortSummary(TypedDict):
    id: str
    rate: str | None
    data_gbit_s: float | None
    link_layer: str
    state: str | None


class Nic(TypedDict):
    """One of the node's NICs as a cell's provenance records it."""

    name: str
    kind: str
    operstate: str | None
    speed_mbit_s: int | None
    link_layer: str | None
    rdma_ports: list[PortSummary]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):  # EINVAL: no speed on a down or virtual link
        return None


def gbit_to_MBps(gbit_s: float) -> float:
    """Gbit/s (10^9 bit/s) -> MB/s (10^6 B/s), the unit the Hockney B is in."""
    return gbit_s * 1000 / 8


# -- the interfaces -------------------------------------------------------------------------------


def interface_kind(iface: Path) -> str:
    """physical (a ``device`` behind it), bond, vlan, bridge, … (uevent DEVTYPE), veth (a peer
    link, no device), else virtual (lo, ifb, dummy, tun)."""
    uevent = _read(iface / "uevent") or ""
    devtype = next((line.split("=", 1)[1] for line in uevent.splitlines() if line.startswith("DEVTYPE=")), None)
    if devtype:
        return devtype
    if (iface / "device").exists():
        return "physical"
    ifindex, iflink = _read(iface / "ifindex"), _read(iface / "iflink")
    if ifindex and iflink and ifindex != iflink:
        return "veth"
    return "virtual"


def speed_mbit_s(iface: Path) -> int | None:
    """The interface's speed in Mbit/s; None when unreadable, -1 or 0 (unknown, link down)."""
    text = _read(iface / "speed")
    try:
        value = int(text) if text is not None else -1
    except ValueError:
        return None
    return value if 0 < value < _SPEED_UNKNOWN else None


def read_links(sys_net: Path = SYS_NET, ports: Sequence[RdmaPort] = ()) -> list[Link]:
    """Every interface but lo: name, kind, virtual, operstate, speed (Mbit/s or None), and the
    RDMA ports (``<dev>/<port>``) behind it."""
    links: list[Link] = []
    for iface in sorted(sys_net.iterdir()) if sys_net.is_dir() else []:
        if iface.name == "lo":
            continue
        kind = interface_kind(iface)
        links.append({"name": iface.name, "kind": kind, "virtual": kind not in HARDWARE_KINDS,
                      "operstate": _read(iface / "operstate") or "unknown", "speed_mbit_s": speed_mbit_s(iface),
                      "rdma_ports": _rdma_ports_of(iface, ports)})
    return links


def _rdma_ports_of(iface: Path, ports: Sequence[RdmaPort]) -> list[str]:
    """The RDMA ports an interface rides on: IPoIB and RoCE interfaces share the PCI device of their
    HCA (``device/infiniband/<dev>``, port = dev_port + 1); RoCE ports also name their netdevs."""
    out = [p["id"] for p in ports if iface.name in p.get("netdevs", ())]
    devs = sorted(d.name for d in (iface / "device" / "infiniband").glob("*"))
    try:
        port = int(_read(iface / "dev_port") or "0") + 1
    except ValueError:
        port = 1
    out += [f"{dev}/{port}" for dev in devs if any(p["id"] == f"{dev}/{port}" for p in ports)]
    return list(dict.fromkeys(out))


# -- InfiniBand / RoCE ports ----------------------------------------------------------------------


def parse_ib_rate(text: str, link_layer: str = "InfiniBand") -> IbRate:
    """``100 Gb/sec (4X EDR)`` -> rate, lanes, speed and the data rate after line coding (Gbit/s).
    ValueError when the text is no rate."""
    m = _IB_RATE.match(text)
    if not m:
        raise ValueError(f"InfiniBand rate {text!r}: expected e.g. '100 Gb/sec (4X EDR)'")
    rate = float(m.group(1))
    lanes = int(m.group(2)) if m.group(2) else None
    speed = (m.group(3) or "").upper() or (_IB_LANE_SPEED.get(rate / lanes) if lanes else None)
    # RoCE ports print an IB speed name for an Ethernet rate, which is already a data rate.
    factor = IB_ENCODING.get(speed or "", 1.0) if link_layer == "InfiniBand" else 1.0
    return {"rate_gbit_s": rate, "lanes": lanes, "speed": speed, "data_gbit_s": rate * factor}


def read_rdma_ports(sys_ib: Path = SYS_INFINIBAND) -> list[RdmaPort]:
    """Every port of every RDMA device: id ``<dev>/<port>``, rate text and figures, state,
    link layer (InfiniBand or Ethernet = RoCE), the netdevs a RoCE port names."""
    ports: list[RdmaPort] = []
    for dev in sorted(sys_ib.iterdir()) if sys_ib.is_dir() else []:
        for port in sorted((dev / "ports").glob("*"), key=lambda p: (len(p.name), p.name)):
            text = _read(port / "rate")
            layer = _read(port / "link_layer") or "InfiniBand"
            entry: RdmaPort = {"id": f"{dev.name}/{port.name}", "rate": text, "link_layer": layer,
                               "state": _read(port / "state"), "phys_state": _read(port / "phys_state"),
                               "netdevs": sorted({n for f in (port / "gid_attrs" / "ndevs").glob("*")
                                                  if (n := _read(f))})}
            try:
                rate = parse_ib_rate(text or "", layer)
                entry |= {"rate_gbit_s": rate["rate_gbit_s"], "lanes": rate["lanes"], "speed": rate["speed"],
                          "data_gbit_s": rate["data_gbit_s"]}
            except ValueError as exc:
                entry["error"] = str(exc)
            ports.append(entry)
    return ports


def port_active(state: object) -> bool:
    """Whether a port's ``state`` (sysfs text such as ``4: ACTIVE``, or None) says active."""
    return "ACTIVE" in str(state or "").upper()


# -- which link, and its rate ---------------------------------------------------------------------


def default_route_interface(route: Path = PROC_ROUTE, route6: Path = PROC_ROUTE6) -> str | None:
    """The interface of the default route with the lowest metric: IPv4, else IPv6; None without one."""
    # /proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric(decimal) Mask … (a header line first)
    v4 = [(_int(f[6], 10), f[0]) for f in _rows(route)
          if len(f) >= 8 and f[1] == f[7] == "00000000" and _int(f[3], 16) & 1]  # RTF_UP
    # /proc/net/ipv6_route: dest dest_prefix src src_prefix next_hop metric refcnt use flags iface (hex)
    v6 = [(_int(f[5], 16), f[9]) for f in _rows(route6)
          if len(f) >= 10 and set(f[0]) == {"0"} and f[1] == "00" and f[9] != "lo" and _int(f[8], 16) & 1]
    for routes in (v4, v6):
        if routes:
            return min(routes)[1]
    return None


def _int(text: str, base: int) -> int:
    """A route file's number, 0 when malformed (malformed flags then count as not up)."""
    try:
        return int(text, base)
    except ValueError:
        return 0


def _rows(path: Path) -> list[list[str]]:
    return [line.split() for line in (_read(path) or "").splitlines()]


def choose_link(links: Sequence[Link], configured: Sequence[str], default_route: str | None) -> LinkChoice:
    """``{interface, chosen_by}`` (interface None and a ``note`` when there is none): the first
    configured interface, else the default route's. A configured interface missing on this node
    gives none: the stacks' traffic does not take the default route then either."""
    names = {link["name"] for link in links}
    if configured:
        present = [i for i in configured if i in names]
        if present:
            return {"interface": present[0], "chosen_by": "config tcp_interface"}
        return {"interface": None, "chosen_by": None,
                "note": f"configured tcp_interface {', '.join(configured)} not on this node"}
    if default_route:
        return {"interface": default_route, "chosen_by": "default route"}
    return {"interface": None, "chosen_by": None, "note": "no tcp_interface configured and no default route"}


def link_rate(link: Link | None, ports: Sequence[RdmaPort]) -> LinkRate:
    """``{gbit_s, source}`` of a link, or gbit_s None and a ``note`` saying why it is unknown."""
    if link is None:
        return {"gbit_s": None, "source": None, "note": "no such interface"}
    name = link["name"]
    for port in (p for p in ports if p["id"] in link["rdma_ports"]):
        if port_active(port["state"]) and (data := port.get("data_gbit_s")):
            return {"gbit_s": data, "source": f"infiniband:{port['id']}"}
    speed = link["speed_mbit_s"]
    if link["virtual"]:
        shown = f" ({speed} Mbit/s is a kernel default)" if speed else ""
        return {"gbit_s": None, "source": None,
                "note": f"{name} is a {link['kind']} interface, not a hardware link{shown}: rate unknown"}
    if speed is None:
        state = link["operstate"]
        why = f"link {state}" if state not in ("up", "unknown") else "the NIC reports none, as a VM's virtio NIC does"
        return {"gbit_s": None, "source": None, "note": f"{name}: speed unknown ({why})"}
    return {"gbit_s": speed / 1000, "source": f"sysfs:{name}"}


def network_record(configured: Sequence[str] = (), config_gbit_s: float | None = None, config_name: str | None = None,
                   *, sys_net: Path = SYS_NET, sys_ib: Path = SYS_INFINIBAND, route: Path = PROC_ROUTE,
                   route6: Path = PROC_ROUTE6) -> NetworkRecord:
    """This node's ``links``, ``rdma_ports``, ``default_route`` and ``network_link``: the chosen
    interface, its rate (Gbit/s of data, and MB/s), where that came from (``sysfs:<iface>``,
    ``infiniband:<dev>/<port>`` or ``config``) and, when the link's own rate is unknown, why."""
    ports = read_rdma_ports(sys_ib)
    links = read_links(sys_net, ports)
    default = default_route_interface(route, route6)
    choice = choose_link(links, configured, default)
    net: NetworkLink = {"interface": choice["interface"], "chosen_by": choice["chosen_by"], "gbit_s": None,
                        "source": None}
    if "note" in choice:
        net["note"] = choice["note"]
    chosen = next((link for link in links if link["name"] == net["interface"]), None)
    if chosen is not None:
        rate = link_rate(chosen, ports)
        net |= {"gbit_s": rate["gbit_s"], "source": rate["source"]}
        if "note" in rate:
            net["note"] = rate["note"]
    elif net["interface"] is not None:
        net["note"] = f"{net['interface']} (the default route's) is not in {sys_net}"
    if net["gbit_s"] is None and config_gbit_s is not None:
        net |= {"gbit_s": float(config_gbit_s), "source": "config", "config_name": config_name}
    if net["gbit_s"] is not None:
        net["MBps"] = gbit_to_MBps(net["gbit_s"])
    used = set(chosen["rdma_ports"]) if chosen else set()
    others = [f"{p['id']} ({data:g} Gbit/s)" for p in ports
              if port_active(p["state"]) and p["id"] not in used and (data := p.get("data_gbit_s"))]
    if others:
        net["other_rdma"] = others
    return {"links": links, "rdma_ports": ports, "default_route": default, "network_link": net}


# -- the node's NICs, as a cell's provenance records them ------------------------------------------

# /sys/class/net/<iface>/type (ARPHRD_*): the link layer of an interface without an RDMA port.
_ARPHRD = {"1": "Ethernet", "32": "InfiniBand"}


def _nic_link_layer(iface: Path, rdma: Sequence[RdmaPort]) -> str | None:
    """The RDMA port's link layer behind the interface (InfiniBand, or Ethernet for RoCE), else the
    interface's own ARP hardware type; None when neither says."""
    if rdma:
        return rdma[0]["link_layer"] or None
    return _ARPHRD.get(_read(iface / "type") or "")


def node_nics(sys_net: Path = SYS_NET, sys_ib: Path = SYS_INFINIBAND) -> list[Nic]:
    """The node's network interfaces (lo left out) and its RDMA ports: per interface its name, kind,
    state, rate (``speed_mbit_s`` from sysfs; None where the kernel reports none or -1) and link layer,
    with the RDMA ports behind it (id, rate text, data rate, state); an RDMA port behind no interface
    (InfiniBand without IPoIB) is an entry of its own, named by its port id."""
    ports = read_rdma_ports(sys_ib)
    by_id = {p["id"]: p for p in ports}
    nics: list[Nic] = []
    used: set[str] = set()
    for link in read_links(sys_net, ports):
        rdma = [by_id[p] for p in link["rdma_ports"]]
        used.update(link["rdma_ports"])
        nics.append({"name": link["name"], "kind": link["kind"], "operstate": link["operstate"],
                     "speed_mbit_s": link["speed_mbit_s"],
                     "link_layer": _nic_link_layer(sys_net / link["name"], rdma),
                     "rdma_ports": [_port_summary(p) for p in rdma]})
    nics += [{"name": p["id"], "kind": "rdma", "operstate": p["state"], "speed_mbit_s": None,
              "link_layer": p["link_layer"], "rdma_ports": [_port_summary(p)]}
             for p in ports if p["id"] not in used]
    return nics


def _port_summary(port: RdmaPort) -> PortSummary:
    return {"id": port["id"], "rate": port["rate"], "data_gbit_s": port.get("data_gbit_s"),
            "link_layer": port["link_layer"], "state": port["state"]}

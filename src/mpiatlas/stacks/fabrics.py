"""InfiniBand / RoCE: the transports that need an RDMA port, whether a node has one, and which
UCX transport and device a class of rank pairs used.

Transports: Open MPI and MPICH ``ucx-rc``, ``ucx-dc``, ``ucx-ud`` (``UCX_TLS=<tl>,sm,self``: UCX's
shared memory within a node, the named IB transport between nodes, so they are judged per pair
class like the other mixed transports); Open MPI 4's ``ob1-openib``; Intel MPI's ``ofi-verbs`` and
``ofi-mlx``. ``stacks.<label>.net_devices`` (``[mlx5_0:1]``) becomes ``UCX_NET_DEVICES``, Open MPI's
``btl_openib_if_include`` or libfabric's ``FI_VERBS_DEVICE_NAME``.

Devices: every node a cell uses is asked (the node probe ships :data:`PORTS_CODE` to each one, a
one-node cell runs it here) for its RDMA ports from /sys/class/infiniband (state, link layer,
driver), else from ``ibv_devinfo`` when the sysfs tree is missing but the tool answers. A node
without an active port makes the cell ``unavailable``: "no InfiniBand device on <host>".

Evidence (UCX's info log, ``UCX_LOG_LEVEL=info``), quoted in tests/data/ib/ from public logs:
UCX >= 1.14 labels each endpoint configuration ``intra-node cfg#N`` / ``inter-node cfg#N``;
older UCX prints ``ep_cfg[N]: tag(...)`` without a label, so a configuration whose lanes are all
shared memory is on-node and one with network lanes is cross-node when the run spans hosts.
A configuration's transport is that of its first tag lane: the lane short messages take.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from typing import Any

from mpiatlas.stacks.base import CROSS_NODE, ON_NODE, RDMA, PairEvidence, StackError, Transport, medium

# UCX_TLS aliases of the IB transports (rc = rc_verbs + rc_mlx5, ud = ud_verbs + ud_mlx5, dc = dc_mlx5).
UCX_IB_TLS = {"ucx-rc": "rc", "ucx-dc": "dc", "ucx-ud": "ud"}
# DC exists on mlx5 hardware only (Connect-IB and later).
_NEEDS_MLX5 = frozenset({"ucx-dc"})


def ucx_ib_transports(env: Mapping[str, str], args: tuple[str, ...] = (), what: str = "UCX") -> list[Transport]:
    """``ucx-rc``/``ucx-dc``/``ucx-ud`` of one stack: ``env``/``args`` select its UCX path (e.g. the
    UCX PML, MPICH's UCX netmod); on-node pairs must show UCX shared memory, cross-node pairs the tl."""
    return [Transport(name, {**env, "UCX_TLS": f"{tl},sm,self"}, args,
                      description=f"{what}: UCX shared memory within a node, InfiniBand/RoCE {tl.upper()} between nodes",
                      expect="ucx:sm", expect_inter=f"ucx:{tl}")
            for name, tl in UCX_IB_TLS.items()]


def needs_rdma(transport: str) -> bool:
    """Whether the transport needs an RDMA (InfiniBand or RoCE) port on every node of the cell."""
    return medium(transport) == RDMA


def net_device_env(transport: str, devices: Iterable[str] | None) -> dict[str, str]:
    """The variables that keep ``transport`` on the configured RDMA ``devices`` (``mlx5_0:1``)."""
    devices = list(devices or [])
    if not devices or not needs_rdma(transport):
        return {}
    if transport == "ob1-openib":
        return {"OMPI_MCA_btl_openib_if_include": ",".join(devices)}
    if transport == "ofi-verbs":
        # libfabric's verbs provider takes one device name (no port).
        return {"FI_VERBS_DEVICE_NAME": devices[0].split(":", 1)[0]}
    return {"UCX_NET_DEVICES": ",".join(devices)}  # ucx-* and ofi-mlx (libfabric's mlx provider is UCX)


# -- which RDMA ports a node has --------------------------------------------------------------

# Self-contained (standard library only): the node probe runs this text on every node with the
# launcher's python, and this module exec()s the same text to read this host. One port per
# entry: "<device>:<port>:<state>:<link layer>:<driver>".
PORTS_CODE = r'''
def parse_ibv_devinfo(text):
    out, dev, port, state = [], None, None, None
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            dev = value
        elif key == "port" and value.isdigit():
            port, state = value, None
        elif key == "state" and port:
            state = value.split()[0].replace("PORT_", "")
        elif key == "link_layer" and dev and port:
            out.append(":".join([dev, port, state or "UNKNOWN", value or "InfiniBand", "-"]))
            port = None
    return out


def rdma_ports(root="/sys/class/infiniband", ibv_devinfo=None):
    import os, shutil, subprocess

    def read(path, default="-"):
        try:
            with open(path) as fh:
                return fh.read().strip() or default
        except OSError:
            return default

    out = []
    for dev in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        ports = os.path.join(root, dev, "ports")
        driver = os.path.basename(os.path.realpath(os.path.join(root, dev, "device", "driver")))
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            state = read(os.path.join(ports, port, "state")).split(":")[-1].strip()
            layer = read(os.path.join(ports, port, "link_layer"), "InfiniBand")
            out.append(":".join([dev, port, state, layer, driver or "-"]))
    if not out:
        tool = ibv_devinfo or shutil.which("ibv_devinfo")
        if tool:
            try:
                done = subprocess.run([tool], capture_output=True, text=True, timeout=20)
                out = parse_ibv_devinfo(done.stdout)
            except (OSError, subprocess.SubprocessError):
                pass
    return out
'''



_NAMESPACE: dict[str, Any] = {}
exec(compile(PORTS_CODE, "<mpiatlas.stacks.fabrics.PORTS_CODE>", "exec"), _NAMESPACE)  # exec of our own text, not input


@dataclass(frozen=True)
class Port:
    device: str
    port: str
    state: str  # ACTIVE, DOWN, INIT, ARMED, ...
    link_layer: str  # InfiniBand | Ethernet (RoCE)
    driver: str = "-"

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"

    def describe(self) -> str:
        return f"{self.name} {self.state} {'RoCE' if self.link_layer == 'Ethernet' else self.link_layer}"


def parse_port(entry: str) -> Port:
    parts = entry.split(":")
    if len(parts) != 5:
        raise ValueError(f"RDMA port entry {entry!r}: expected <device>:<port>:<state>:<link layer>:<driver>")
    return Port(*parts)


def parse_ports(token: str) -> tuple[Port, ...]:
    """The node probe's ports token (comma-separated entries, ``-`` for none)."""
    return tuple(parse_port(e) for e in token.split(",") if e and e != "-")


def ports_token(entries: list[str]) -> str:
    return ",".join(entries) or "-"


def parse_ibv_devinfo(text: str) -> tuple[Port, ...]:
    return tuple(parse_port(e) for e in _NAMESPACE["parse_ibv_devinfo"](text))


def local_ports(root: str = "/sys/class/infiniband", ibv_devinfo: str | None = None) -> tuple[Port, ...]:
    """This host's RDMA ports (sysfs, else ``ibv_devinfo``)."""
    return tuple(parse_port(e) for e in _NAMESPACE["rdma_ports"](root, ibv_devinfo))


def device_problem(transport: str, host: str, ports: Iterable[Port] | None, net_devices: Iterable[str] | None = None
                   ) -> str | None:
    """Why ``host`` cannot carry ``transport`` (None when it can): no RDMA device, no active port,
    a configured device it lacks, or (DC) no mlx5 device. ``ports`` None: its probe did not say."""
    if ports is None:
        return (f"no InfiniBand device on {host} known: its node probe does not list RDMA ports "
                f"(an older probe record), so transport {transport} is not run there")
    ports = list(ports)
    if not ports:
        return f"no InfiniBand device on {host} (transport {transport} needs an active InfiniBand/RoCE port)"
    active = [p for p in ports if p.active]
    seen = ", ".join(p.describe() for p in ports)
    if not active:
        return f"no active InfiniBand port on {host} ({seen})"
    wanted = list(net_devices or [])
    if wanted:
        names = {p.name for p in active} | {p.device for p in active}
        missing = [d for d in wanted if d not in names]
        if missing:
            return f"InfiniBand device {', '.join(missing)} not active on {host} (has {seen})"
        active = [p for p in active if p.name in wanted or p.device in wanted]
    if transport in _NEEDS_MLX5 and not any(p.driver.startswith("mlx5") or p.device.startswith("mlx5") for p in active):
        return f"no mlx5 device on {host} for DC transport {transport} (has {seen})"
    return None


def require_devices(transport: str, ports_by_host: Mapping[str, Iterable[Port] | None],
                    net_devices: Iterable[str] | None = None) -> None:
    """Raise ``unavailable`` StackError naming every host that cannot carry ``transport``."""
    if not needs_rdma(transport):
        return
    problems = [p for host, ports in sorted(ports_by_host.items())
                if (p := device_problem(transport, host, ports, net_devices))]
    if problems:
        raise StackError("unavailable: " + "; ".join(problems))


def require_local(transport: str, net_devices: Iterable[str] | None = None) -> None:
    """A one-node cell: this host must carry ``transport``."""
    if needs_rdma(transport):
        require_devices(transport, {socket.gethostname(): local_ports()}, net_devices)


def hello_transport(transports: list[str]) -> str | None:
    """The transport a stack's preflight hello runs on: the first one this host can carry (an RDMA
    transport only with an active port here); None when none can (the cells say why)."""
    for name in transports:
        if not needs_rdma(name):
            return name
    try:
        require_local(transports[0])
    except StackError:
        return None
    return transports[0]


# -- evidence -----------------------------------------------------------------------------------

# "[1624984398.083715] [r39c2t5n1:22453:0]     ucp_worker.c:1720 UCX  INFO  ep_cfg[0]: tag(...)" (UCX < 1.14),
# "[...] [jpbo-007-31:2814548:0] ucp_worker.c:1903 UCX  INFO    ucp_context_0 inter-node cfg#8 tag(...)" (>= 1.14).
_UCX_CFG = re.compile(
    r"(?:\[[\d.]+\]\s+\[(?P<host>[^:\]\s]+):(?P<pid>\d+)\s*:\d+\][^\n]*?)?"
    r"(?:(?P<label>self|intra-node|inter-node)\s+cfg#\d+|ep_cfg\[\d+\]):?\s*tag\((?P<lanes>[^)]*)\)")
_SHM_TLS = ("sysv", "posix", "cma", "xpmem", "knem", "mm")
_IGNORED_TLS = ("cuda", "rocm", "gdr", "ze_")
# Open MPI 4 openib BTL, btl_base_verbose: "[jazz18][[3227,1],0][btl_openib_component.c:684:init_one_port] looking for mlx5_1:1 GID index 0"
_OPENIB_PORT = re.compile(r"init_one_port\] looking for (\S+:\d+)")


def tl_family(tl: str) -> str | None:
    """``rc_mlx5`` -> rc, ``ud_verbs`` -> ud, ``dc_mlx5`` -> dc, ``sysv`` -> sm, ``tcp`` -> tcp;
    None for GPU copy lanes, which say nothing about the path between hosts."""
    tl = tl.lower()
    if tl.startswith(_IGNORED_TLS):
        return None
    for family in ("rc", "dc", "ud"):
        if tl == family or tl.startswith(family + "_"):
            return family
    if tl.startswith(_SHM_TLS):
        return "sm"
    return tl


@dataclass(frozen=True)
class UcxConfig:
    """One endpoint configuration of UCX's info log."""

    line: str
    label: str | None  # self | intra-node | inter-node, None before UCX 1.14
    lanes: tuple[tuple[str, str], ...]  # (tl, device) of each tag lane, in order
    host: str | None = None
    pid: int | None = None

    @property
    def families(self) -> list[str]:
        return [f for tl, _ in self.lanes if (f := tl_family(tl))]

    @property
    def transport(self) -> str | None:
        """``ucx:<family>`` of the first lane (the one short messages take)."""
        families = self.families
        return f"ucx:{families[0]}" if families else None

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(dev for tl, dev in self.lanes if tl_family(tl) not in (None, "sm", "self")))


def ucx_configs(output: str) -> list[UcxConfig]:
    """Every endpoint configuration towards another process (``self`` ones are skipped)."""
    configs = []
    for match in _UCX_CFG.finditer(output):
        lanes = tuple(tuple(lane.split("/", 1)) if "/" in lane else (lane, "")
                      for lane in match["lanes"].split())
        if match["label"] == "self" or any(tl == "self" for tl, _ in lanes):
            continue
        line = output[output.rfind("\n", 0, match.start()) + 1:match.end()].strip()
        configs.append(UcxConfig(line, match["label"], lanes,
                                 match["host"], int(match["pid"]) if match["pid"] else None))
    return configs


def ucx_pair_evidence(output: str, rank_hosts: Mapping[int, str],
                      rank_of_pid: Mapping[int, int] | None = None) -> list[PairEvidence]:
    """What UCX's info log shows each class of pairs used: labelled configurations by their label;
    unlabelled ones (UCX < 1.14) on-node when they have a shared-memory lane (UCX offers one only to a
    peer on the same host) or every line names one host, else cross-node (network lanes only, in a
    run over several or unknown hosts). UCX names no
    peer: the evidence is per sending rank (when its pid is known)."""
    configs = [c for c in ucx_configs(output) if c.transport]
    hosts = set(rank_hosts.values()) | {c.host for c in configs if c.host}
    evidence = []
    for config in configs:
        if config.label:
            pair_class = ON_NODE if config.label == "intra-node" else CROSS_NODE
        elif "sm" in config.families or len(hosts) == 1:
            pair_class = ON_NODE
        else:
            pair_class = CROSS_NODE
        rank = (rank_of_pid or {}).get(config.pid) if config.pid is not None else None
        evidence.append(PairEvidence(pair_class, config.transport or "", config.line,
                                     ranks=(rank,) if rank is not None else ()))
    return evidence


def core_provider(provider: str) -> str:
    """libfabric's ``verbs;ofi_rxm`` (core provider ; utility provider) -> ``verbs``."""
    return provider.split(";", 1)[0].lower()


def openib_devices(output: str) -> list[str]:
    """The ports Open MPI's openib BTL opened (``btl_base_verbose``)."""
    return list(dict.fromkeys(_OPENIB_PORT.findall(output)))

"""Node hardware topology (from hwloc XML, or Linux sysfs without hwloc) and rank-to-CPU pin lists.

A benchmark result is only meaningful together with *where* its ranks ran:
a ping-pong between two cores of one L3 and one between two sockets are
different experiments.  This module reads the hwloc 2.x XML that
``lstopo --of xml`` writes, turns a mapping name (``core``, ``l3``, ``numa``,
``socket``, ``node``) into the OS CPU id of every rank, classifies rank pairs
by the closest hardware domain they share, and checks that the binding the
MPI launcher actually produced is the one that was requested.

Where ``lstopo`` is missing (a fresh machine), :func:`detect` reads Linux sysfs instead
(:mod:`mpiatlas.node.topology_sysfs`), which yields the same topology; ``Topology.source`` says which.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import combinations
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, get_args

from mpiatlas.node import topology_sysfs
from mpiatlas.node.topology_sysfs import cpu_list

Region = Literal["same_core", "same_l3", "same_die", "same_numa", "same_socket", "other_socket", "other_node"]
# Ordered from closest to farthest. ``same_die``: one die (AMD CCD, Intel tile) but not one L3; only
# where hwloc reports Die objects (or a synthetic description has a ``die`` level).
REGIONS: tuple[str, ...] = get_args(Region)

# Mappings that place any number of ranks: consecutive cores, or round-robin over a kind of domain
# (L3, die, NUMA node, package), or over nodes.
SpreadMapping = Literal["core", "l3", "die", "numa", "socket", "node"]
SPREAD_MAPPINGS: tuple[str, ...] = get_args(SpreadMapping)
# Mappings that place a PAIR of ranks on two cpus whose closest shared level is that region, found
# in the node's own topology where the cell runs (the campaign cannot know a compute node's shape
# when it plans): what a per-region latency table needs, one PingPong per region, whatever the
# node. `other_node` is the `node` mapping over two nodes.
REGION_MAPPINGS: tuple[str, ...] = tuple(r for r in REGIONS if r != "other_node")
MAPPINGS: tuple[str, ...] = SPREAD_MAPPINGS + REGION_MAPPINGS
# config `mappings: [regions]`: every region mapping (mpiatlas.matrix.config expands it).
ALL_REGIONS = "regions"

# hwloc 2.x cache object types -> the level names we report.
_CACHE_TYPES = {"L1Cache": "L1d", "L2Cache": "L2", "L3Cache": "L3"}
# hwloc info keys copied into the provenance summary when present.
_INFO_KEYS = {
    "CPUVendor": "cpu_vendor",
    "Architecture": "architecture",
    "OSName": "os_name",
    "OSRelease": "os_release",
    "hwlocVersion": "hwloc_version",
    "SyntheticDescription": "synthetic",
}


class TopologySummary(TypedDict):
    """A node's topology as provenance.json keeps it (``topology``)."""

    source: str
    hostname: str | None
    cpu_model: str | None
    packages: int
    numa_nodes: int
    l3_domains: int
    cores: int
    pus: int
    smt: int
    cache_sizes: dict[str, int]
    cpu_vendor: NotRequired[str]
    architecture: NotRequired[str]
    os_name: NotRequired[str]
    os_release: NotRequired[str]
    hwloc_version: NotRequired[str]
    synthetic: NotRequired[str]


class TopologyError(RuntimeError):
    """The topology could not be read (lstopo missing or failing, bad XML, unreadable sysfs)."""


class MappingUnavailable(ValueError):
    """The machine cannot express a mapping (e.g. ``socket`` on a one-socket node)."""

    def __init__(self, mapping: str, reason: str) -> None:
        super().__init__(f"mapping {mapping!r} is unavailable: {reason}")
        self.mapping = mapping
        self.reason = reason


class OversubscriptionError(ValueError):
    """More ranks than cores were requested without ``oversubscribe=True``."""


@dataclass(frozen=True)
class Core:
    """One physical core.  Domain ids are hwloc *logical* indices (0..n-1)."""

    index: int  # core logical index
    pu: int  # OS index of the core's first PU: the cpu id a rank is pinned to
    pus: tuple[int, ...]  # OS indices of all PUs (SMT siblings)
    package: int
    numa: int
    l3: int | None  # None when the machine has no L3 above this core
    die: int | None = None  # hwloc Die (CCD) logical index; None when no Die level is known


@dataclass(frozen=True)
class Topology:
    """What one node looks like, as far as rank placement is concerned."""

    cores: tuple[Core, ...]
    hostname: str | None = None
    cpu_model: str | None = None
    packages: int = 1
    numa_nodes: int = 1  # all NUMA nodes, including CPU-less ones (HBM, CXL)
    l3_domains: int = 0
    numa_os_index: tuple[int, ...] = ()  # logical NUMA id -> OS id (for numactl)
    cache_sizes: dict[str, int] = field(default_factory=dict)  # bytes per level
    info: dict[str, str] = field(default_factory=dict)
    source: str = "hwloc"  # "hwloc" (lstopo XML), "sysfs" (Linux /sys) or "synthetic" (mpiatlas.node.topology_synthetic)

    # -- construction -------------------------------------------------------

    @classmethod
    def from_hwloc_xml(cls, text_or_path: str | Path) -> Topology:
        """Parse hwloc 2.x XML given as text or as a path to a file."""
        return _parse(_read_xml_text(text_or_path))

    @classmethod
    def from_sysfs(
        cls, root: str | Path = topology_sysfs.DEFAULT_ROOT, cpuinfo: str | Path | None = None
    ) -> Topology:
        """Read Linux sysfs (``root`` is ``/sys/devices/system`` or a copy of it); see
        :func:`mpiatlas.node.topology_sysfs.read_sysfs`.  No hostname: that is the live machine's."""
        try:
            raw = topology_sysfs.read_sysfs(root, cpuinfo)
        except topology_sysfs.SysfsError as exc:
            raise TopologyError(str(exc)) from exc
        cores = tuple(
            Core(index=i, pu=c.pus[0], pus=c.pus, package=c.package, numa=c.numa, l3=c.l3)
            for i, c in enumerate(raw.cores)
        )
        return cls(
            cores=cores,
            cpu_model=raw.cpu_model,
            packages=raw.packages,
            numa_nodes=raw.numa_nodes,
            l3_domains=raw.l3_domains,
            numa_os_index=raw.numa_os_index,
            cache_sizes=dict(raw.cache_sizes),
            info={"CPUVendor": raw.cpu_vendor} if raw.cpu_vendor else {},
            source="sysfs",
        )

    def restricted_to(self, cpus: Iterable[int]) -> Topology:
        """Only the cores whose first PU is in ``cpus`` (e.g. the cpus a batch job was given on a
        shared node): pins must come from those, or srun refuses to bind outside the allocation."""
        allowed = set(cpus)
        kept = tuple(core for core in self.cores if core.pu in allowed)
        return replace(self, cores=kept) if kept and len(kept) < len(self.cores) else self

    # -- queries --------------------------------------------------------------

    @property
    def n_cores(self) -> int:
        return len(self.cores)

    @property
    def pus(self) -> tuple[int, ...]:
        return tuple(sorted(pu for core in self.cores for pu in core.pus))

    @property
    def n_pus(self) -> int:
        return len(self.pus)

    @cached_property
    def _core_by_cpu(self) -> dict[int, Core]:
        # Cached: pair_regions asks for every pair of a possibly large run.
        return {pu: core for core in self.cores for pu in core.pus}

    def core_of(self, cpu: int) -> Core:
        """The core holding OS cpu id ``cpu``."""
        try:
            return self._core_by_cpu[cpu]
        except KeyError:
            raise ValueError(f"cpu {cpu} is not a PU of this topology (PUs: {cpu_list(self.pus)})") from None

    @cached_property
    def _inside_package(self) -> frozenset[tuple[str, int]]:
        """(kind, id) of the L3 / NUMA / die domains whose cores all sit in one package (a die also
        in one NUMA node)."""
        packages: dict[tuple[str, int], set[int]] = {}
        numas: dict[int, set[int]] = {}
        for core in self.cores:
            for kind in ("l3", "numa", "die"):
                ident = getattr(core, kind)
                if ident is not None:
                    packages.setdefault((kind, ident), set()).add(core.package)
            if core.die is not None:
                numas.setdefault(core.die, set()).add(core.numa)
        # A die that spans NUMA nodes is farther than "same NUMA": it cannot sit between L3 and NUMA.
        return frozenset(
            key for key, pkgs in packages.items() if len(pkgs) == 1 and (key[0] != "die" or len(numas[key[1]]) == 1)
        )

    def domains(self, kind: str) -> list[list[Core]]:
        """Cores grouped by ``package``, ``numa`` or ``l3``, groups in logical order."""
        groups: dict[int, list[Core]] = {}
        for core in self.cores:
            key = getattr(core, kind)
            if key is not None:
                groups.setdefault(key, []).append(core)
        return [groups[k] for k in sorted(groups)]

    def summary(self) -> TopologySummary:
        """JSON-ready description for run provenance."""
        out: TopologySummary = {
            "source": self.source,
            "hostname": self.hostname,
            "cpu_model": self.cpu_model,
            "packages": self.packages,
            "numa_nodes": self.numa_nodes,
            "l3_domains": self.l3_domains,
            "cores": self.n_cores,
            "pus": self.n_pus,
            "smt": self.n_pus // self.n_cores if self.n_cores else 0,
            "cache_sizes": dict(self.cache_sizes),
        }
        # hwloc's info attributes, under their names in _INFO_KEYS
        info = self.info
        if "CPUVendor" in info:
            out["cpu_vendor"] = info["CPUVendor"]
        if "Architecture" in info:
            out["architecture"] = info["Architecture"]
        if "OSName" in info:
            out["os_name"] = info["OSName"]
        if "OSRelease" in info:
            out["os_release"] = info["OSRelease"]
        if "hwlocVersion" in info:
            out["hwloc_version"] = info["hwlocVersion"]
        if "SyntheticDescription" in info:
            out["synthetic"] = info["SyntheticDescription"]
        return out


# ---------------------------------------------------------------------------
# Reading hwloc XML
# ---------------------------------------------------------------------------


def detect(lstopo: str = "lstopo", *, sysfs_root: str | Path = topology_sysfs.DEFAULT_ROOT) -> Topology:
    """Topology of the machine we run on: ``lstopo --of xml -`` where hwloc is installed,
    else Linux sysfs under ``sysfs_root``.  Raises :class:`TopologyError` only if both fail."""
    try:
        return _detect_hwloc(lstopo)
    except TopologyError as hwloc_error:
        try:
            topo = Topology.from_sysfs(sysfs_root)
        except TopologyError as sysfs_error:
            raise TopologyError(
                f"cannot detect the node topology: {hwloc_error}; and reading Linux sysfs failed: {sysfs_error}"
            ) from sysfs_error
    return _with_host_info(topo)


def _detect_hwloc(lstopo: str) -> Topology:
    exe = shutil.which(lstopo)
    if exe is None:
        raise TopologyError(
            f"{lstopo!r} not found on PATH (install hwloc: Debian/Ubuntu apt-get install hwloc; "
            "Spack/modules: load hwloc)"
        )
    proc = subprocess.run([exe, "--of", "xml", "-"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TopologyError(f"{exe} --of xml - failed ({proc.returncode}): {proc.stderr.strip()}")
    return Topology.from_hwloc_xml(proc.stdout)


def _with_host_info(topo: Topology) -> Topology:
    """Add what lstopo reports about the running host (from uname) to a sysfs topology."""
    uname = platform.uname()
    host = {"OSName": uname.system, "OSRelease": uname.release, "Architecture": uname.machine}
    info = {**{k: v for k, v in host.items() if v}, **topo.info}
    return replace(topo, hostname=uname.node or None, info={k: info[k] for k in _INFO_KEYS if k in info})


def _read_xml_text(text_or_path: str | Path) -> str:
    # XML text always starts with '<'; anything else is taken to be a path.
    if isinstance(text_or_path, str) and text_or_path.lstrip().startswith("<"):
        return text_or_path
    path = Path(text_or_path)
    if not path.is_file():
        raise TopologyError(f"hwloc XML file not found: {path}")
    return path.read_text(encoding="utf-8")


def _parse(text: str) -> Topology:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise TopologyError(f"not valid XML: {exc}") from exc
    if root.tag != "topology":
        raise TopologyError(f"not an hwloc topology (root element <{root.tag}>)")
    if not root.get("version", "").startswith("2."):
        raise TopologyError(f"hwloc XML version {root.get('version')!r} unsupported: need hwloc 2.x (version=\"2.x\")")
    machine = root.find("object")
    if machine is None:
        raise TopologyError("hwloc XML has no top-level object")

    # Logical indices follow document order, as hwloc's do.
    logical = {
        kind: {id(el): i for i, el in enumerate(_objects(root, kind))}
        for kind in ("Package", "NUMANode", "L3Cache", "Die")
    }
    cores: list[Core] = []
    _walk(machine, {"package": None, "numa": None, "l3": None, "die": None}, logical, cores)
    if not cores:
        raise TopologyError("hwloc XML contains no PU")

    numa_nodes = list(_objects(root, "NUMANode"))
    info = _infos(root)
    return Topology(
        cores=tuple(cores),
        hostname=info.get("HostName"),
        cpu_model=info.get("CPUModel"),
        packages=max(len(logical["Package"]), 1),
        numa_nodes=max(len(numa_nodes), 1),
        l3_domains=len(logical["L3Cache"]),
        numa_os_index=tuple(int(el.get("os_index", i)) for i, el in enumerate(numa_nodes)),
        cache_sizes=_cache_sizes(root),
        info={k: info[k] for k in _INFO_KEYS if k in info},
    )


def _objects(root: ET.Element, kind: str) -> Iterable[ET.Element]:
    return (el for el in root.iter("object") if el.get("type") == kind)


def _children(el: ET.Element) -> list[ET.Element]:
    return [c for c in el if c.tag == "object"]


def _local_numa(el: ET.Element) -> ET.Element | None:
    """First NUMA node attached to ``el`` as a memory child (possibly under a MemCache).

    hwloc 2.x hangs NUMA nodes off the object whose CPUs they are local to; when
    an object has several (DRAM + HBM) the first, normally DRAM, is the home node.
    """
    for child in _children(el):
        if child.get("type") == "NUMANode":
            return child
        if child.get("type") == "MemCache":
            found = _local_numa(child)
            if found is not None:
                return found
    return None


def add_core(cores: list[Core], pus: list[int], ctx: dict[str, int | None]) -> None:
    """Append the next core (logical index = its position) on ``pus`` with the domains in ``ctx``."""
    cores.append(Core(index=len(cores), pu=pus[0], pus=tuple(pus), package=ctx["package"] or 0,
                      numa=ctx["numa"] or 0, l3=ctx["l3"], die=ctx["die"]))


def _walk(el: ET.Element, ctx: dict[str, int | None], logical: dict[str, dict[int, int]], out: list[Core]) -> None:
    """Depth-first walk that records every core with the domains above it."""
    kind = el.get("type")
    ctx = dict(ctx)
    if kind == "Package":
        ctx["package"] = logical["Package"][id(el)]
    elif kind == "L3Cache":
        ctx["l3"] = logical["L3Cache"][id(el)]
    elif kind == "Die":
        ctx["die"] = logical["Die"][id(el)]
    home = _local_numa(el)
    if home is not None:
        ctx["numa"] = logical["NUMANode"][id(home)]

    # A PU outside any Core (hwloc could not see cores) counts as its own core.
    if kind in ("Core", "PU"):
        pus = sorted(int(pu.get("os_index", "-1")) for pu in el.iter("object") if pu.get("type") == "PU")
        add_core(out, pus, ctx)
        return
    for child in _children(el):
        if child.get("type") not in ("NUMANode", "MemCache"):
            _walk(child, ctx, logical, out)


def _infos(root: ET.Element) -> dict[str, str]:
    """All ``<info>`` pairs, first occurrence wins (Machine before Package)."""
    found: dict[str, str] = {}
    for el in root.iter("info"):
        name, value = el.get("name"), el.get("value")
        if name and value is not None:
            found.setdefault(name, value)
    return found


def _cache_sizes(root: ET.Element) -> dict[str, int]:
    # Largest size per level: hybrid CPUs have P-cores with bigger L2 than E-cores.
    sizes: dict[str, int] = {}
    for el in root.iter("object"):
        level = _CACHE_TYPES.get(el.get("type", ""))
        if level and el.get("cache_size"):
            sizes[level] = max(sizes.get(level, 0), int(el.get("cache_size", "0")))
    return {k: sizes[k] for k in ("L1d", "L2", "L3") if k in sizes}


# ---------------------------------------------------------------------------
# Pin lists
# ---------------------------------------------------------------------------


class Pins(list[int]):
    """Per-rank OS cpu ids; compares equal to a plain list.

    ``node_of[i]`` is the node rank ``i`` lands on (all 0 unless mapping is
    ``node``) and ``oversubscribed`` says whether cpus were handed out twice.
    """

    def __init__(self, cpus: Iterable[int], *, mapping: str, node_of: Sequence[int], oversubscribed: bool) -> None:
        super().__init__(cpus)
        self.mapping = mapping
        self.node_of: tuple[int, ...] = tuple(node_of)
        self.oversubscribed = oversubscribed


def pin_list(
    topo: Topology, mapping: str, nranks: int, *, nodes: int = 1, oversubscribe: bool = False
) -> Pins:
    """OS cpu id each rank is pinned to under ``mapping``.

    ``core``: rank i on core i (neighbours share the closest domain);
    ``l3``/``die``/``numa``/``socket``: round-robin over L3 domains / dies / NUMA nodes /
    packages, so ranks 0 and 1 are in different domains of that kind;
    ``node``: round-robin over ``nodes`` nodes, consecutive cores on each;
    a region (``same_numa``, ...): two ranks on the first pair of cpus whose closest shared level
    is that region (:func:`region_pair`; ``same_core`` on a node without SMT, with ``oversubscribe``:
    one cpu twice, labelled oversubscribed).
    """
    if mapping not in MAPPINGS:
        raise ValueError(f"unknown mapping {mapping!r}; choose from {', '.join(MAPPINGS)}")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if mapping in REGION_MAPPINGS:
        if nodes != 1:
            raise ValueError(f"nodes={nodes} only applies to the 'node' mapping, not {mapping!r}")
        pair = region_pair(topo, mapping, nranks, share_cpu=oversubscribe)
        return Pins(pair, mapping=mapping, node_of=[0, 0], oversubscribed=pair[0] == pair[1])
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    if mapping != "node" and nodes != 1:
        # Spreading over nodes is what `node` means; refuse rather than guess.
        raise ValueError(f"nodes={nodes} only applies to the 'node' mapping, not {mapping!r}")

    order = _core_order(topo, mapping, nodes)
    node_of = [i % nodes for i in range(nranks)]
    local = [i // nodes for i in range(nranks)]  # rank's index among its node's ranks
    per_node = max(local) + 1
    over = per_node > len(order)
    if over and not oversubscribe:
        where = f"{per_node} ranks per node" if mapping == "node" else f"{nranks} ranks"
        raise OversubscriptionError(
            f"{where} but only {len(order)} cores on {topo.hostname or 'this node'}; "
            "pass oversubscribe=True to wrap around"
        )
    cpus = [order[j % len(order)].pu for j in local]
    return Pins(cpus, mapping=mapping, node_of=node_of, oversubscribed=over)


def _core_order(topo: Topology, mapping: str, nodes: int) -> list[Core]:
    """All cores of a node in the order ranks take them (a permutation)."""
    if mapping in ("core", "node"):
        if mapping == "node" and nodes < 2:
            raise MappingUnavailable(mapping, "needs nodes >= 2 (got nodes=1): ranks would share one node")
        return list(topo.cores)
    kind = {"l3": "l3", "die": "die", "numa": "numa", "socket": "package"}[mapping]
    groups = topo.domains(kind)
    if len(groups) < 2:
        raise MappingUnavailable(mapping, _why_unavailable(topo, mapping, len(groups)))
    return _round_robin(groups)


def _why_unavailable(topo: Topology, mapping: str, n: int) -> str:
    host = topo.hostname or "this node"
    if mapping == "l3":
        if n == 0:
            return f"{host} reports no L3 cache, so there are no L3 domains to spread over"
        return f"{host} has a single L3 domain shared by all {topo.n_cores} cores"
    if mapping == "die":
        if n == 0:
            return f"{host} reports no die level (hwloc Die objects: AMD CCDs, Intel tiles)"
        return f"{host} has a single die"
    if mapping == "numa":
        extra = f" ({topo.numa_nodes} NUMA nodes, only one has cores)" if topo.numa_nodes > 1 else ""
        return f"{host} has a single NUMA node with cores{extra}"
    return f"{host} has a single socket (package)"


def _round_robin(groups: list[list[Core]]) -> list[Core]:
    """Take one core from each group in turn, skipping groups that ran out."""
    order: list[Core] = []
    for depth in range(max(len(g) for g in groups)):
        order.extend(g[depth] for g in groups if depth < len(g))
    return order


# ---------------------------------------------------------------------------
# Regions
# ---------------------------------------------------------------------------


def region(topo: Topology, cpu_a: int, cpu_b: int, same_node: bool = True) -> str:
    """Closest hardware domain two cpus share, one of :data:`REGIONS`."""
    if not same_node:
        return "other_node"
    a, b = topo.core_of(cpu_a), topo.core_of(cpu_b)
    if a.index == b.index:
        return "same_core"  # SMT siblings (or the very same cpu)
    if a.package != b.package:
        return "other_socket"
    # A domain only counts if it sits inside the socket: on a node whose single
    # NUMA node spans both sockets, "same NUMA" says nothing about distance.
    if a.l3 is not None and a.l3 == b.l3 and ("l3", a.l3) in topo._inside_package:
        return "same_l3"
    if a.die is not None and a.die == b.die and ("die", a.die) in topo._inside_package:
        return "same_die"
    if a.numa == b.numa and ("numa", a.numa) in topo._inside_package:
        return "same_numa"
    return "same_socket"


def region_pair(topo: Topology, wanted: str, nranks: int = 2, *, share_cpu: bool = False) -> list[int]:
    """The cpus of a rank pair whose closest shared level is ``wanted``: SMT siblings of the first
    core that has two for ``same_core`` (none, and ``share_cpu``: the first core's cpu twice, both
    ranks time-sharing it as oversubscribed ranks of a larger cell do), else the first core and the
    first later core at exactly that region, trying each core in turn as the first (a restricted
    topology may lack the pair from core 0). Raises :class:`MappingUnavailable` naming the host when
    the node has no such pair."""
    if nranks != 2:
        raise MappingUnavailable(wanted, f"a region mapping places a pair of ranks, not {nranks}")
    if wanted == "same_core":
        for core in topo.cores:
            if len(core.pus) >= 2:
                return [core.pus[0], core.pus[1]]
        if share_cpu and topo.cores:
            return [topo.cores[0].pu, topo.cores[0].pu]
    else:
        for i, first in enumerate(topo.cores):
            for second in topo.cores[i + 1:]:
                if region(topo, first.pu, second.pu) == wanted:
                    return [first.pu, second.pu]
    host = topo.hostname or "this node"
    found = sorted({region(topo, a.pu, b.pu) for i, a in enumerate(topo.cores) for b in topo.cores[i + 1:]},
                   key=REGIONS.index)
    raise MappingUnavailable(wanted, f"{host} has no two cpus whose closest shared level is {wanted} "
                             f"(its {topo.n_cores} cores pair up as: {', '.join(found) or 'none'})")


def pair_regions(topo: Topology, pins: Sequence[int]) -> dict[tuple[int, int], str]:
    """Region of every rank pair (i < j); uses ``pins.node_of`` when present."""
    node_of = getattr(pins, "node_of", None) or (0,) * len(pins)
    return {
        (i, j): region(topo, pins[i], pins[j], same_node=node_of[i] == node_of[j])
        for i, j in combinations(range(len(pins)), 2)
    }


def mapping_region(topo: Topology, mapping: str) -> str:
    """Region of ranks 0 and 1 under ``mapping`` (what a ping-pong measures)."""
    pins = pin_list(topo, mapping, 2, nodes=2 if mapping == "node" else 1)
    return pair_regions(topo, pins)[(0, 1)]


# ---------------------------------------------------------------------------
# Binding check
# ---------------------------------------------------------------------------


def check_binding(requested: Sequence[int], obtained: Sequence[set[int]]) -> list[str]:
    """Problems between requested pins and the affinity each rank reported.

    Empty list means every rank is bound to exactly the cpu it asked for.
    """
    problems: list[str] = []
    if len(requested) != len(obtained):
        problems.append(f"{len(requested)} ranks requested but {len(obtained)} reported their binding")
    for rank, (want, got) in enumerate(zip(requested, obtained)):
        if not got:
            problems.append(f"rank {rank} asked for cpu {want} but reported no binding")
        elif got != {want}:
            what = "is not pinned: bound to" if want in got else "got"
            problems.append(f"rank {rank} asked for cpu {want} but {what} {{{cpu_list(got)}}}")

    # The classic launcher bug: every rank pinned to cpu 0.  Only flag it when
    # the ranks did not ask for that same cpu (deliberate oversubscription).
    by_cpu: dict[int, list[int]] = {}
    for rank, got in enumerate(obtained):
        if len(got) == 1:
            by_cpu.setdefault(next(iter(got)), []).append(rank)
    for cpu, ranks in sorted(by_cpu.items()):
        asked = {requested[r] for r in ranks if r < len(requested)}
        if len(ranks) > 1 and asked != {cpu}:
            problems.append(f"ranks {', '.join(map(str, ranks))} are all pinned to the same single cpu {cpu}")
    return problems

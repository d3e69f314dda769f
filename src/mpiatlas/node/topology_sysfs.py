"""Node topology read straight from Linux sysfs, for machines without hwloc's ``lstopo``.

The result must be the very topology :mod:`mpiatlas.node.topology` builds from hwloc XML on the same
machine, because pin lists and regions are derived from it.  hwloc numbers objects of a kind
(its *logical* indices) in depth-first order of its tree, and it keeps the children of every object
sorted by their first cpu.  Every hwloc object that holds cpus (package, die, cluster, cache,
NUMA node or the group hwloc adds for one, core) is a set of cpus, and those sets nest.  So a
core's position in hwloc's order is fixed by the first cpu of each set that contains it, from
the largest set down: sorting cores by that tuple reproduces hwloc's depth-first order without
building the tree.  NUMA nodes are ordered the way hwloc's XML lists them: a node comes just
before the first core of the object it is attached to, bigger objects first, cpu-less nodes with
no known locality last.  CPU-less nodes get their locality the way hwloc 2.x's Linux backend gives
it: from ``access0/initiators``, else from the closest nodes in the NUMA distance matrix.

This module only reads files and returns plain data (:class:`SysfsTopology`);
``Topology.from_sysfs`` turns it into a :class:`mpiatlas.node.topology.Topology`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

DEFAULT_ROOT = Path("/sys/devices/system")

_T = TypeVar("_T")

CpuSet = frozenset[int]

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
_INDEX_DIR = re.compile(r"index(\d+)")
_SIZE = re.compile(r"(\d+)([KMG]?)")
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# Cache level -> the name mpiatlas reports (as hwloc's L1Cache/L2Cache/L3Cache).
_LEVEL_NAMES = {1: "L1d", 2: "L2", 3: "L3"}


class SysfsError(RuntimeError):
    """A sysfs file is missing or does not hold what the kernel writes there."""


@dataclass(frozen=True)
class SysfsCore:
    """One core; package/numa/l3 are logical ids (0..n-1) in hwloc's order."""

    pus: tuple[int, ...]  # OS cpu ids, ascending
    package: int
    numa: int
    l3: int | None


@dataclass(frozen=True)
class SysfsTopology:
    cores: tuple[SysfsCore, ...]  # in hwloc's logical core order
    packages: int
    numa_nodes: int
    l3_domains: int
    numa_os_index: tuple[int, ...]
    cache_sizes: dict[str, int] = field(default_factory=dict)
    cpu_model: str | None = None
    cpu_vendor: str | None = None


@dataclass(frozen=True)
class _Cache:
    level: int
    kind: str  # "Data", "Instruction" or "Unified"
    size: int | None  # bytes; None when the kernel gives no size
    cpus: CpuSet


@dataclass(frozen=True)
class _Cpu:
    """What sysfs says about one online cpu (sets already restricted to online cpus)."""

    cpu: int
    package_id: int
    die_id: int
    core: CpuSet
    cluster: CpuSet | None
    caches: tuple[_Cache, ...]


@dataclass
class _Node:
    os_index: int
    cpus: CpuSet  # for a cpu-less node: the cpus hwloc attaches it to (maybe none)


def read_sysfs(root: Path | str = DEFAULT_ROOT, cpuinfo: Path | str | None = None) -> SysfsTopology:
    """Topology from ``root`` (``/sys/devices/system`` or a copy of it).

    ``cpuinfo`` defaults to ``proc/cpuinfo`` of the same Linux root (``/proc/cpuinfo`` for the
    live system); it only supplies the CPU model and vendor and may be absent.
    """
    root = Path(root)
    cpu_dir = root / "cpu"
    if not cpu_dir.is_dir():
        raise SysfsError(f"{cpu_dir} is not a directory: not a Linux sysfs tree (is /sys mounted?)")
    online = _online_cpus(cpu_dir)
    cpus = [_read_cpu(cpu_dir, cpu, online) for cpu in sorted(online)]
    nodes = _read_nodes(root / "node", online)
    ordered = _hwloc_core_order(_cores(cpus), cpus, nodes)
    node_order = _hwloc_node_order(nodes, ordered)
    cores, packages, l3_domains = _logical_cores(ordered, cpus, node_order, root)
    model, vendor = _cpu_model(Path(cpuinfo) if cpuinfo is not None else root.parent.parent.parent / "proc" / "cpuinfo")
    return SysfsTopology(
        cores=cores,
        packages=packages,
        numa_nodes=len(nodes),
        l3_domains=l3_domains,
        numa_os_index=tuple(n.os_index for n in node_order),
        cache_sizes=_cache_sizes(cpus),
        cpu_model=model,
        cpu_vendor=vendor,
    )


def _hwloc_core_order(cores: list[CpuSet], cpus: list[_Cpu], nodes: list[_Node]) -> list[CpuSet]:
    """Cores in hwloc's depth-first order: by the first cpu of each enclosing set, outermost first."""
    by_cpu = {c.cpu: c for c in cpus}
    keys = {core: tuple(min(s) for s in _containers(by_cpu[min(core)], cpus, nodes)) for core in cores}
    return sorted(cores, key=keys.__getitem__)


def _hwloc_node_order(nodes: list[_Node], ordered: list[CpuSet]) -> list[_Node]:
    position = {cpu: i for i, core in enumerate(ordered) for cpu in core}
    return sorted(nodes, key=lambda n: _node_sort_key(n, position))


def _logical_cores(
    ordered: list[CpuSet], cpus: list[_Cpu], node_order: list[_Node], root: Path
) -> tuple[tuple[SysfsCore, ...], int, int]:
    """(cores with logical package/NUMA/L3 ids, number of packages, number of L3 domains)."""
    by_cpu = {c.cpu: c for c in cpus}
    firsts = [by_cpu[min(core)] for core in ordered]  # hwloc names a core's domains by its first cpu
    package_ids = _first_seen(c.package_id for c in firsts)
    l3_ids = _first_seen(s for s in map(_l3_of, firsts) if s is not None)
    numa_ids = {id(n): i for i, n in enumerate(node_order)}
    cores = []
    for core, first in zip(ordered, firsts):
        l3 = _l3_of(first)
        cores.append(SysfsCore(
            pus=tuple(sorted(core)),
            package=package_ids[first.package_id],
            numa=numa_ids[id(_home_node(core, node_order, root))],
            l3=None if l3 is None else l3_ids[l3],
        ))
    return tuple(cores), len(package_ids), len(l3_ids)


# ---------------------------------------------------------------------------
# cpus
# ---------------------------------------------------------------------------


def _online_cpus(cpu_dir: Path) -> CpuSet:
    """Online cpus: ``cpu/online`` or, on kernels without it, cpuN dirs not switched off."""
    online_file = cpu_dir / "online"
    if online_file.exists():
        cpus = _read_cpulist(online_file)
    else:
        numbered = ((int(m.group(1)), p) for p in cpu_dir.iterdir() if (m := _CPU_DIR.fullmatch(p.name)))
        cpus = frozenset(cpu for cpu, p in numbered if not (p / "online").exists() or _read(p / "online") != "0")
    if not cpus:
        raise SysfsError(f"no online cpu under {cpu_dir} ({online_file} is empty or there is no cpuN directory)")
    return cpus


def _read_cpu(cpu_dir: Path, cpu: int, online: CpuSet) -> _Cpu:
    topo = cpu_dir / f"cpu{cpu}" / "topology"
    if not topo.is_dir():
        raise SysfsError(f"{topo} not found: cpu {cpu} is online ({cpu_dir / 'online'}) but has no topology")
    core = _first_existing(topo / "core_cpus_list", topo / "thread_siblings_list")
    core_cpus = _read_cpulist(core) & online
    if cpu not in core_cpus:
        raise SysfsError(f"{core} does not list cpu {cpu} itself (got {_read(core)!r})")
    cluster = topo / "cluster_cpus_list"
    die = topo / "die_id"
    return _Cpu(
        cpu=cpu,
        package_id=_read_int(topo / "physical_package_id"),
        die_id=_read_int(die) if die.exists() else 0,
        core=core_cpus,
        cluster=_read_cpulist(cluster) & online if cluster.exists() else None,
        caches=_read_caches(cpu_dir / f"cpu{cpu}" / "cache", online),
    )


def _read_caches(cache_dir: Path, online: CpuSet) -> tuple[_Cache, ...]:
    if not cache_dir.is_dir():
        return ()  # some VMs and ARM boards without PPTT expose no cache information
    index_dirs = sorted((int(m.group(1)), p) for p in cache_dir.iterdir() if (m := _INDEX_DIR.fullmatch(p.name)))
    caches = []
    for _, d in index_dirs:
        size_file = d / "size"
        caches.append(_Cache(
            level=_read_int(d / "level"),
            kind=_read(d / "type"),
            size=_parse_size(size_file) if size_file.exists() else None,
            cpus=_read_cpulist(d / "shared_cpu_list") & online,
        ))
    return tuple(caches)


def _cores(cpus: list[_Cpu]) -> list[CpuSet]:
    """Distinct cores; a core is named by its first cpu's sibling list, as hwloc does."""
    seen: set[int] = set()
    cores = []
    for c in cpus:
        if c.cpu not in seen:
            core = c.core - seen
            seen |= core
            cores.append(frozenset(core))
    return cores


def _containers(first: _Cpu, cpus: list[_Cpu], nodes: list[_Node]) -> list[CpuSet]:
    """Every hwloc object's cpu set holding the core of ``first``, largest first."""
    sets = {
        frozenset(c.cpu for c in cpus if c.package_id == first.package_id),
        frozenset(c.cpu for c in cpus if (c.package_id, c.die_id) == (first.package_id, first.die_id)),
        first.core,
    }
    if first.cluster:
        sets.add(first.cluster)
    sets.update(cache.cpus for cache in first.caches if cache.kind != "Instruction" and first.cpu in cache.cpus)
    sets.update(n.cpus for n in nodes if first.cpu in n.cpus)  # hwloc adds a Group when no object matches
    return sorted(sets, key=lambda s: (-len(s), min(s)))


def _l3_of(cpu: _Cpu) -> CpuSet | None:
    found = [c.cpus for c in cpu.caches if c.level == 3 and c.kind != "Instruction" and c.cpus]
    return found[0] if found else None


def _cache_sizes(cpus: list[_Cpu]) -> dict[str, int]:
    # Largest size per level, as the hwloc parser does (hybrid CPUs: P-core L2 > E-core L2).
    sizes: dict[str, int] = {}
    for c in cpus:
        for cache in c.caches:
            name = _LEVEL_NAMES.get(cache.level)
            if name and cache.kind != "Instruction" and cache.size is not None:
                sizes[name] = max(sizes.get(name, 0), cache.size)
    return {k: sizes[k] for k in _LEVEL_NAMES.values() if k in sizes}


# ---------------------------------------------------------------------------
# NUMA nodes
# ---------------------------------------------------------------------------


def _read_nodes(node_dir: Path, online: CpuSet) -> list[_Node]:
    """NUMA nodes with the cpus hwloc places them at; one node 0 on a kernel without NUMA."""
    if not node_dir.is_dir():
        return [_Node(0, online)]  # CONFIG_NUMA=n: hwloc makes one node holding everything
    online_file = node_dir / "online"
    if online_file.exists():
        indexes = sorted(_read_cpulist(online_file))
    else:
        indexes = sorted(int(m.group(1)) for p in node_dir.iterdir() if (m := _NODE_DIR.fullmatch(p.name)))
    if not indexes:
        raise SysfsError(f"no NUMA node listed in {node_dir} ({online_file} is empty or there is no nodeN directory)")
    nodes = [_Node(i, _read_cpulist(node_dir / f"node{i}" / "cpulist") & online) for i in indexes]
    distances = _distances(node_dir, indexes)
    for i, node in enumerate(nodes):
        if not node.cpus:
            node.cpus = _initiator_cpus(node_dir, node, nodes) or _closest_cpus(i, nodes, distances)
    return nodes


def _initiator_cpus(node_dir: Path, node: _Node, nodes: list[_Node]) -> CpuSet:
    """Cpus of the nodes the firmware (ACPI HMAT) names as this memory's initiators."""
    initiators = node_dir / f"node{node.os_index}" / "access0" / "initiators"
    if not initiators.is_dir():
        return frozenset()
    names = {p.name for p in initiators.iterdir()}
    return frozenset(cpu for other in nodes if f"node{other.os_index}" in names for cpu in other.cpus)


def _distances(node_dir: Path, indexes: list[int]) -> list[list[int]] | None:
    """The NUMA distance matrix, or None when hwloc would not use one (single node, file missing)."""
    if len(indexes) < 2:
        return None
    rows = []
    for i in indexes:
        path = node_dir / f"node{i}" / "distance"
        if not path.exists():
            return None
        row = _read(path).split()
        if len(row) != len(indexes) or not all(v.isdigit() for v in row):
            raise SysfsError(f"{path}: expected {len(indexes)} integer distances, got {_read(path)!r}")
        rows.append([int(v) for v in row])
    return rows


def _closest_cpus(i: int, nodes: list[_Node], distances: list[list[int]] | None) -> CpuSet:
    """hwloc's rule for a cpu-less node: local to the nodes strictly closest to it, unless
    every other node is equally far (then it has no locality and hangs off the machine)."""
    if distances is None:
        return frozenset()
    others = [j for j in range(len(nodes)) if j != i]
    nearest = min(distances[i][j] for j in others)
    ties = [j for j in others if distances[i][j] == nearest]
    if nearest <= distances[i][i] or len(ties) == len(others):
        return frozenset()
    return frozenset(cpu for j in ties for cpu in nodes[j].cpus)


def _node_sort_key(node: _Node, position: dict[int, int]) -> tuple[float, int, int]:
    # hwloc's XML lists an object's NUMA nodes before its children, so a node comes right before
    # the first core of its cpus; nodes of a bigger object first; unattached nodes at the end.
    # ``position``: cpu -> logical index of its core.
    firsts = [position[cpu] for cpu in node.cpus if cpu in position]
    if not firsts:
        return (float("inf"), 0, node.os_index)
    return (min(firsts), -len(node.cpus), node.os_index)


def _home_node(core: CpuSet, node_order: list[_Node], root: Path) -> _Node:
    """The node hwloc's XML parser gives a core: the first node of the smallest object above it."""
    holding = [n for n in node_order if core <= n.cpus]
    if not holding:
        raise SysfsError(f"cpus {cpu_list(core)} are in no NUMA node's cpulist ({root / 'node'}/node*/cpulist)")
    smallest = min(len(n.cpus) for n in holding)
    return next(n for n in holding if len(n.cpus) == smallest)


# ---------------------------------------------------------------------------
# small readers
# ---------------------------------------------------------------------------


def _cpu_model(path: Path) -> tuple[str | None, str | None]:
    """(model name, vendor id) of the first processor in /proc/cpuinfo; (None, None) without it."""
    if not path.is_file():
        return None, None
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "vendor_id"):
            found.setdefault(key.strip(), value.strip())
    return found.get("model name") or None, found.get("vendor_id") or None


def _first_existing(*paths: Path) -> Path:
    for path in paths:
        if path.exists():
            return path
    names = " nor ".join(str(p) for p in paths)
    raise SysfsError(f"neither {names} exists (Linux cpu topology file)")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        raise SysfsError(f"{path} not found (Linux sysfs topology file)") from None
    except OSError as exc:
        raise SysfsError(f"cannot read {path}: {exc}") from exc


def _read_int(path: Path) -> int:
    text = _read(path)
    try:
        return int(text)
    except ValueError:
        raise SysfsError(f"{path}: expected an integer, got {text!r}") from None


def _read_cpulist(path: Path) -> CpuSet:
    """Kernel cpu list ("0-3,8,10-11"; empty for none)."""
    text = _read(path)
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise SysfsError(f"{path}: expected a cpu list like '0-3,8', got {text!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def _parse_size(path: Path) -> int:
    text = _read(path)
    match = _SIZE.fullmatch(text)
    if not match:
        raise SysfsError(f"{path}: expected a cache size like '32K', got {text!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def _first_seen(values: Iterable[_T]) -> dict[_T, int]:
    """value -> 0, 1, ... in order of first appearance (hwloc's logical numbering)."""
    ids: dict[_T, int] = {}
    for v in values:
        ids.setdefault(v, len(ids))
    return ids


def cpu_list(values: Iterable[int]) -> str:
    """CPU ids in the kernel's cpulist format (``[0, 1, 2, 5]`` -> ``0-2,5``), the form sysfs and
    taskset print and users read, for messages and the report."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)

"""Write a faithful copy of the Linux sysfs/procfs files a topology reader looks at.

The tree is laid out as a Linux root (``<dest>/sys/devices/system/...`` and
``<dest>/proc/cpuinfo``) so that hwloc can read it too (``lstopo --input <dest>``),
which lets the tests check mpiatlas' sysfs reader against hwloc on the same files.

Run ``python tests/data/sysfs/make_tree.py`` to (re)write the committed tree(s) and, where hwloc's
``lstopo`` is installed, ``<name>.hwloc.xml``: what hwloc makes of the same tree, the reference the
sysfs reader is tested against.  Tests also import :func:`write_tree` to make variants (no L3,
offline cpus, ...) in tmp dirs.
File formats follow the kernel's: ``*_list`` files are cpu lists ("0,8"), masks are
comma-separated 32-bit hex words ("0101"), cache sizes are "<n>K".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Picks the online cpus whose (socket, core, thread) satisfies a predicate.
Group = Callable[[Callable[[tuple[int, int, int]], bool]], list[int]]


@dataclass(frozen=True)
class Machine:
    """A homogeneous SMT machine: ``sockets`` x ``cores`` x ``threads``."""

    sockets: int = 2
    cores: int = 4  # per socket
    threads: int = 2  # per core
    # "interleaved": cpu0 on socket 0, cpu1 on socket 1, ... (how e.g. Dell PowerEdge firmware
    # enumerates dual-socket Xeons), "grouped": cpus 0..c-1 on socket 0; in both, SMT siblings at +N.
    numbering: str = "interleaved"
    # core_id of each core of a socket: Skylake-SP parts with fused-off cores report gaps (values illustrative)
    core_ids: tuple[int, ...] = (0, 4, 9, 12)
    package_ids: tuple[int, ...] = (0, 1)  # physical_package_id of each socket, in cpu numbering order
    numa_per_socket: int = 1  # >1: sub-NUMA clustering (SNC), the socket's cores split into nodes
    # CPU-less memory nodes (CXL / HBM) numbered after the cpu nodes; memory node k is closest to
    # socket k % sockets, which is where hwloc attaches it
    memory_nodes: int = 0
    l3_per_socket: int = 1  # >1: AMD-style CCX/CCD, each with its own L3
    l3_stride: bool = False  # True: core c of a socket is in L3 c % l3_per_socket (cpu order != L3 order)
    l1d_k: int = 32
    l1i_k: int = 32
    l2_k: int = 1024
    l3_k: int | None = 16896  # None: no L3 (the largest cache is the per-core L2)
    mem_kb_per_node: int = 48 * 1024 * 1024
    model_name: str = "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz"
    family: int = 6
    model: int = 85
    stepping: int = 4
    offline: tuple[int, ...] = ()  # cpus taken offline (echo 0 > cpuN/online)

    @property
    def ncpus(self) -> int:
        return self.sockets * self.cores * self.threads

    def place(self, cpu: int) -> tuple[int, int, int]:
        """(socket, core index in socket, thread) of Linux cpu ``cpu``."""
        first_threads = self.sockets * self.cores
        thread, slot = divmod(cpu, first_threads)
        if self.numbering == "interleaved":
            core, socket = divmod(slot, self.sockets)
        elif self.numbering == "grouped":
            socket, core = divmod(slot, self.cores)
        else:
            raise ValueError(f"unknown numbering {self.numbering!r}")
        return socket, core, thread

    def l3(self, core: int) -> int:
        """Which of its socket's L3 caches core ``core`` of a socket sits under."""
        if self.l3_stride:
            return core % self.l3_per_socket
        return core * self.l3_per_socket // self.cores

    def node(self, socket: int, core: int) -> int:
        return socket * self.numa_per_socket + core * self.numa_per_socket // self.cores

    def distance(self, a: int, b: int) -> int:
        if a == b:
            return 10
        cpu_nodes = self.sockets * self.numa_per_socket
        if a >= cpu_nodes or b >= cpu_nodes:  # a memory node: near its socket, far from the rest
            mem, other = (a, b) if a >= cpu_nodes else (b, a)
            near = other < cpu_nodes and other // self.numa_per_socket == (mem - cpu_nodes) % self.sockets
            return 17 if near else 28
        return 11 if a // self.numa_per_socket == b // self.numa_per_socket else 21


def cpulist(cpus: Iterable[int]) -> str:
    """Kernel cpu list format: ranges "0-3", singles joined by commas."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpumask(cpus: Iterable[int], nbits: int) -> str:
    """Kernel mask format (%*pb): ceil(nbits/4) hex digits, a comma every 8 from the right."""
    value = sum(1 << c for c in set(cpus))
    digits = f"{value:0{(nbits + 3) // 4}x}"
    words: list[str] = []
    while digits:
        words.insert(0, digits[-8:])
        digits = digits[:-8]
    return ",".join(words)


def write_tree(dest: Path, m: Machine) -> Path:
    """Write the tree for ``m`` under ``dest`` (emptied first); returns ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    system = dest / "sys" / "devices" / "system"
    online = [c for c in range(m.ncpus) if c not in m.offline]
    where = {c: m.place(c) for c in range(m.ncpus)}

    def group(pred: Callable[[tuple[int, int, int]], bool]) -> list[int]:
        return [c for c in online if pred(where[c])]

    cpu_dir = system / "cpu"
    for name, cpus in (("online", online), ("possible", range(m.ncpus)), ("present", range(m.ncpus))):
        _write(cpu_dir / name, cpulist(cpus))
    _write(cpu_dir / "offline", cpulist(m.offline))
    _write(cpu_dir / "kernel_max", str(8191))
    for cpu in range(m.ncpus):
        d = cpu_dir / f"cpu{cpu}"
        if cpu != 0:  # x86 cannot offline cpu0, so the kernel gives it no online file
            _write(d / "online", "0" if cpu in m.offline else "1")
        if cpu in m.offline:
            continue  # the kernel removes topology/ and cache/ of an offline cpu
        socket, core, _ = where[cpu]
        _write_cpu_topology(d / "topology", m, socket, core, group)
        _write_caches(d / "cache", m, socket, core, group)

    node_dir = system / "node"
    nodes = range(m.sockets * m.numa_per_socket + m.memory_nodes)
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        _write(node_dir / name, cpulist(nodes))
    for node in nodes:
        cpus = [c for c in online if m.node(*where[c][:2]) == node]
        nd = node_dir / f"node{node}"
        _write(nd / "cpulist", cpulist(cpus))
        _write(nd / "cpumap", cpumask(cpus, m.ncpus))
        _write(nd / "distance", " ".join(str(m.distance(node, o)) for o in nodes))
        _write(nd / "meminfo", f"Node {node} MemTotal:       {m.mem_kb_per_node} kB\n"
                               f"Node {node} MemFree:        {m.mem_kb_per_node // 2} kB")
    _write(dest / "proc" / "cpuinfo", _cpuinfo(m, online))
    return dest


def _write_cpu_topology(d: Path, m: Machine, socket: int, core: int, group: Group) -> None:
    same_core = group(lambda p: p[:2] == (socket, core))
    same_pkg = group(lambda p: p[0] == socket)
    files = {
        "physical_package_id": str(m.package_ids[socket]),
        "die_id": "0",
        "core_id": str(m.core_ids[core]),
        "cluster_id": str(m.core_ids[core] + 64 * m.package_ids[socket]),  # x86: the L2 id
    }
    for name, cpus in (("core_cpus", same_core), ("thread_siblings", same_core), ("cluster_cpus", same_core),
                       ("die_cpus", same_pkg), ("package_cpus", same_pkg), ("core_siblings", same_pkg)):
        files[name] = cpumask(cpus, m.ncpus)
        files[f"{name}_list"] = cpulist(cpus)
    for name, text in files.items():
        _write(d / name, text)


def _write_caches(d: Path, m: Machine, socket: int, core: int, group: Group) -> None:
    same_core = group(lambda p: p[:2] == (socket, core))
    same_l3 = group(lambda p: p[0] == socket and m.l3(p[1]) == m.l3(core))
    # (level, type, size KiB, ways, sharing cpus, id)
    caches = [(1, "Data", m.l1d_k, 8, same_core, m.core_ids[core]),
              (1, "Instruction", m.l1i_k, 8, same_core, m.core_ids[core]),
              (2, "Unified", m.l2_k, 16, same_core, m.core_ids[core])]
    if m.l3_k is not None:
        caches.append((3, "Unified", m.l3_k, 11, same_l3, m.package_ids[socket] * m.l3_per_socket + m.l3(core)))
    for index, (level, kind, size_k, ways, cpus, ident) in enumerate(caches):
        files = {
            "level": str(level),
            "type": kind,
            "size": f"{size_k}K",
            "coherency_line_size": "64",
            "ways_of_associativity": str(ways),
            "number_of_sets": str(size_k * 1024 // (64 * ways)),
            "physical_line_partition": "1",
            "id": str(ident),
            "shared_cpu_list": cpulist(cpus),
            "shared_cpu_map": cpumask(cpus, m.ncpus),
        }
        for name, text in files.items():
            _write(d / f"index{index}" / name, text)


def _cpuinfo(m: Machine, online: list[int]) -> str:
    blocks = []
    for cpu in online:
        socket, core, thread = m.place(cpu)
        blocks.append("\n".join([
            f"processor\t: {cpu}",
            "vendor_id\t: GenuineIntel",
            f"cpu family\t: {m.family}",
            f"model\t\t: {m.model}",
            f"model name\t: {m.model_name}",
            f"stepping\t: {m.stepping}",
            f"cache size\t: {m.l3_k if m.l3_k is not None else m.l2_k} KB",
            f"physical id\t: {m.package_ids[socket]}",
            f"siblings\t: {m.cores * m.threads}",
            f"core id\t\t: {m.core_ids[core]}",
            f"cpu cores\t: {m.cores}",
            f"apicid\t\t: {m.package_ids[socket] * 32 + m.core_ids[core] * 2 + thread}",
        ]))
    return "\n\n".join(blocks) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n", encoding="ascii")


# The committed trees: name -> machine.  See README.md for what each mirrors.
TREES: dict[str, Machine] = {
    "xeon_2s_smt_interleaved": Machine(),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=HERE, help="directory to write the trees into")
    args = parser.parse_args()
    lstopo = shutil.which("lstopo")
    for name, machine in TREES.items():
        tree = write_tree(args.dest / name, machine)
        print(tree)
        if lstopo:
            xml = subprocess.run([lstopo, "--input", str(tree), "--of", "xml", "-"],
                                 capture_output=True, text=True, check=True).stdout
            (args.dest / f"{name}.hwloc.xml").write_text(xml)
            print(args.dest / f"{name}.hwloc.xml")


if __name__ == "__main__":
    main()

"""A node :class:`~mpiatlas.node.topology.Topology` from hwloc's synthetic description, without hwloc.

hwloc describes a machine it has not seen as a list of levels from the top down, each
``type:arity``: ``pack:2 numa:4 die:2 l3:2 core:4 pu:1`` is 2 packages of 4 NUMA nodes of 2
dies of 2 L3 caches of 4 cores of one PU (a 2 × AMD EPYC 7H12 node in NPS4 mode).
``lstopo -i '<description>' --of xml`` turns it into XML, which
:meth:`Topology.from_hwloc_xml` reads; this module gives the same topology where hwloc is not
installed (a laptop predicting a machine it does not have).

Accepted, as hwloc spells them (case-insensitive): ``machine`` (arity 1 only), ``pack``/
``package``/``socket``, ``numa``/``numanode``/``node``, ``die``, ``group``, ``l1``…``l5``
(``l1d``, ``l2cache``, …; instruction caches ``l1i`` etc. are accepted and ignored), ``core``,
``pu``. A level may carry hwloc attributes in parentheses (``l3:2(size=16MB)``), which are ignored,
and a memory child in brackets (``pack:2 [numa] core:4 pu:1``: one NUMA node per package).
The last level must be ``pu``, as hwloc requires. Without any NUMA level the node has one NUMA
node, as hwloc inserts then.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mpiatlas.node.topology import Core, Topology, TopologyError, add_core

__all__ = [
    "MAX_PUS", "SyntheticLevel", "looks_like_synthetic", "parse_levels", "parse_synthetic", "read_topology",
    "synthetic_via_hwloc",
]  # fmt: skip

MAX_PUS = 1 << 16  # a typo such as core:4000 must not build millions of cores

# Spelling -> the domain it stands for (None: a level the regions do not use).
_TYPES: dict[str, str | None] = {
    **dict.fromkeys(("machine",), "machine"),
    **dict.fromkeys(("pack", "package", "socket"), "package"),
    **dict.fromkeys(("numa", "numanode", "node"), "numa"),
    **dict.fromkeys(("die",), "die"),
    **dict.fromkeys(("group",), None),
    **dict.fromkeys(("l3", "l3d", "l3cache", "l3dcache", "l3u", "l3ucache"), "l3"),
    **dict.fromkeys(("core",), "core"),
    **dict.fromkeys(("pu",), "pu"),
}
_OTHER_CACHE = re.compile(r"^l[1-5](d|i|u)?(cache)?$|^l[1-5](d|i|u)cache$")
_TOKEN = re.compile(r"^(?P<type>[a-z0-9]+?)(?P<index>\d+)?:(?P<arity>\d+)(\([^)]*\))?$")
_MEMORY = re.compile(r"^\[(?P<type>[a-z0-9]+)(\([^)]*\))?\]$")


@dataclass(frozen=True)
class SyntheticLevel:
    """One level of the description: what it is and how many per parent."""

    kind: str | None  # machine/package/numa/die/l3/core/pu, or None (group, L1/L2, memory-side caches)
    arity: int
    numa_child: bool = False  # a ``[numa]`` memory child hangs off every object of this level


def looks_like_synthetic(text: str) -> bool:
    """True for a string such as ``pack:2 core:4 pu:1`` (not a path, not XML)."""
    words = text.split()
    return bool(words) and all(":" in w or _MEMORY.match(w.lower()) for w in words) and "/" not in text


def _kind(word: str, description: str) -> str | None:
    if word in _TYPES:
        return _TYPES[word]
    if _OTHER_CACHE.match(word):
        return None  # L1/L2/L4/L5 and instruction caches: no region of their own
    raise TopologyError(
        f"synthetic topology {description!r}: unknown level type {word!r} "
        "(expected pack, numa, die, group, l1..l5, core or pu, as hwloc spells them)"
    )


def parse_levels(description: str) -> list[SyntheticLevel]:
    """The levels of ``description``, top down; TopologyError naming the bad token."""
    levels: list[SyntheticLevel] = []
    numa_at_top = False
    for token in description.lower().split():
        memory = _MEMORY.match(token)
        if memory:
            if memory["type"] not in ("numa", "numanode", "node"):
                raise TopologyError(f"synthetic topology {description!r}: only [numa] memory children are modelled, got {token!r}")
            if levels:
                levels[-1] = SyntheticLevel(levels[-1].kind, levels[-1].arity, numa_child=True)
            else:
                numa_at_top = True
            continue
        match = _TOKEN.match(token)
        if not match:
            raise TopologyError(f"synthetic topology {description!r}: cannot read {token!r}: expected type:count, e.g. core:4")
        arity = int(match["arity"])
        if arity < 1:
            raise TopologyError(f"synthetic topology {description!r}: {token!r} has a count below 1")
        kind = _kind(match["type"] + (match["index"] or ""), description)
        if kind == "machine" and arity != 1:
            raise TopologyError(f"synthetic topology {description!r}: one machine per description (use --nodes for more)")
        levels.append(SyntheticLevel(kind, arity))
    if not levels or levels[-1].kind != "pu":
        raise TopologyError(f"synthetic topology {description!r}: the last level must be pu (e.g. '... core:4 pu:1')")
    if [lvl.kind for lvl in levels].count("core") > 1:
        raise TopologyError(f"synthetic topology {description!r}: more than one core level")
    if math.prod(lvl.arity for lvl in levels) > MAX_PUS:
        raise TopologyError(f"synthetic topology {description!r}: more than {MAX_PUS} PUs in one node")
    if numa_at_top:
        levels.insert(0, SyntheticLevel("machine", 1, numa_child=True))
    return levels


def parse_synthetic(description: str) -> Topology:
    """The topology hwloc would build from ``description`` (cores, packages, NUMA, L3, dies).

    Logical indices follow hwloc's: the i-th object of a level in depth-first order.
    """
    levels = parse_levels(description)
    counters = {"package": 0, "numa": 0, "die": 0, "l3": 0, "pu": 0}
    cores: list[Core] = []
    has_core_level = any(lvl.kind == "core" for lvl in levels)
    numa_levels = any(lvl.kind == "numa" or lvl.numa_child for lvl in levels)

    def walk(depth: int, ctx: dict[str, int | None], pus: list[int]) -> None:
        level = levels[depth]
        for _ in range(level.arity):
            here = dict(ctx)
            if level.kind in counters and level.kind != "pu":
                here[level.kind] = counters[level.kind]
                counters[level.kind] += 1
            if level.numa_child:
                here["numa"] = counters["numa"]
                counters["numa"] += 1
            if level.kind == "pu":
                pus.append(counters["pu"])  # PU os indices in depth-first order, as hwloc's synthetic backend
                counters["pu"] += 1
                if not has_core_level:  # a PU outside any core counts as its own core
                    add_core(cores, [pus.pop()], here)
                continue
            if level.kind == "core":
                core_pus: list[int] = []
                walk(depth + 1, here, core_pus)
                add_core(cores, core_pus, here)
                continue
            walk(depth + 1, here, pus)

    walk(0, {"package": None, "numa": None, "die": None, "l3": None}, [])
    return Topology(
        cores=tuple(cores),
        packages=max(counters["package"], 1),
        numa_nodes=max(counters["numa"], 1) if numa_levels else 1,
        l3_domains=counters["l3"],
        numa_os_index=tuple(range(max(counters["numa"], 1))),
        info={"SyntheticDescription": " ".join(description.split())},
        source="synthetic",
    )



def synthetic_via_hwloc(description: str, lstopo: str = "lstopo") -> Topology:
    """The same topology built by hwloc itself (``lstopo -i <description> --of xml -``)."""
    exe = shutil.which(lstopo)
    if exe is None:
        raise TopologyError(f"{lstopo!r} not found on PATH (install hwloc)")
    proc = subprocess.run([exe, "-i", description, "--of", "xml", "-"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TopologyError(f"{exe} -i {description!r} failed ({proc.returncode}): {proc.stderr.strip()}")
    return Topology.from_hwloc_xml(proc.stdout)


def read_topology(spec: str) -> Topology:
    """A topology from ``spec``: an hwloc XML file (or XML text), or a synthetic description."""
    if spec.lstrip().startswith("<") or Path(spec).is_file():
        return Topology.from_hwloc_xml(spec)
    if looks_like_synthetic(spec):
        return parse_synthetic(spec)
    raise TopologyError(
        f"topology {spec!r} is neither an hwloc XML file nor a synthetic description such as 'pack:2 core:4 pu:1'"
    )

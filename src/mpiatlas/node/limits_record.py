"""The records of a node's limits (limits.json, one per node, and the cache of it per boot).

TypedDicts, not dataclasses: each is written to limits.json as it is and read back by the report
(mpiatlas.report.physical_limits), so the checker knows every key and the file format is the record
itself. The readers of limits.json (mpiatlas.node.limits ``level_*``) check the JSON they are given.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from mpiatlas.node.link_rate import Link, NetworkLink, RdmaPort


class WorkingSet(TypedDict):
    """One level's run: the cache (None: memory) and the bytes of both arrays."""

    level: str
    cache_bytes: NotRequired[int | None]
    working_set_bytes: int


class PlannedRun(WorkingSet):
    """A likwid-bench run: its working set and kernel (``copy_avx512``, ``copy_mem_avx512``, ...)."""

    kernel: str


class KernelRun(TypedDict):
    """One line of the copy kernel's output (src/kernels/stream.c): one variant at one working set
    (``valid``: the copy came out right; None in recordings older than the check)."""

    variant: str
    working_set_bytes: int
    copy_MBps_runs: list[float]
    valid: bool | None
    kernel: NotRequired[str]
    cpu: NotRequired[int]
    array_bytes: NotRequired[int]
    passes: NotRequired[int]


class LevelEntry(WorkingSet, total=False):
    """A ``levels`` entry: likwid-bench's (``likwid_MByte_s``, ``runs_MByte_s``) or the copy
    kernel's (``variant``, ``runs_copy_MBps``, ...); ``copy_MBps`` None with an ``error``."""

    kernel: str
    argv: list[str]
    error: str
    copy_MBps: float | None
    likwid_MByte_s: float
    runs_MByte_s: list[float]
    variant: str
    runs_copy_MBps: list[float]
    median_copy_MBps: float
    spread: float
    valid: bool | None
    variants_copy_MBps: dict[str, float]


class CacheKey(TypedDict):
    """What a cached record must match: node, boot, tool version, cpu and caches."""

    host: str
    boot_id: str
    likwid_bench: str
    cpu_model: str
    caches: dict[str, int]


class LimitsRecord(TypedDict, total=False):
    """One node's record: the copy rates (``available``, ``levels``; or ``available: false`` and a
    ``reason``), the tool that measured them, and its network (mpiatlas.node.link_rate)."""

    node: str
    tool: str
    measured_at: str
    threads: int
    repeats: int
    available: bool
    reason: str
    version: str | None
    caches: dict[str, int]
    levels: list[LevelEntry]
    # the copy kernel's, where likwid-bench is missing
    source: str
    likwid_bench: str
    argv: list[str]
    cpu: int
    compiler: str | None
    flags: str | None
    # the cache's
    cache_key: CacheKey
    cached_from: str
    # the network's, read at every run
    links: list[Link]
    rdma_ports: list[RdmaPort]
    default_route: str | None
    network_link: NetworkLink


def level_entry_of(run: WorkingSet) -> LevelEntry:
    """A ``levels`` entry holding just the run's working set (its figures are added to it)."""
    entry: LevelEntry = {"level": run["level"], "working_set_bytes": run["working_set_bytes"]}
    if "cache_bytes" in run:  # a run of a plan has it; a hand-written one may leave it out
        entry["cache_bytes"] = run["cache_bytes"]
    return entry

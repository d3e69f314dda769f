"""The working sets a node's copy rate is measured on, per cache level and for memory.

Shared by both tools that measure it, likwid-bench (:mod:`mpiatlas.node.limits`) and mpiatlas's own
copy kernel (:mod:`mpiatlas.node.copy_kernel`), so the two measure the same levels on the same sizes,
and neither module has to import the other for it.

* half of each cache level (both arrays of the copy resident in it), from the node's real cache
  sizes (sysfs, :func:`mpiatlas.node.limits.cache_sizes`), never from a CPU vendor's usual sizes;
* for memory, 8 × the largest cache, at least 256 MiB.
"""

from __future__ import annotations

from mpiatlas.node.limits_record import PlannedRun

MIN_MEMORY_WS = 256 * 2**20
MEMORY_WS_FACTOR = 8
# The level a message of a given size is served from, for the peak: the smallest cache that holds it.
MEMORY = "memory"


def memory_working_set(caches: dict[str, int]) -> int:
    """Bytes (both arrays) of the memory level's working set: well past the largest cache."""
    return max(MIN_MEMORY_WS, MEMORY_WS_FACTOR * max(caches.values(), default=0))


def plan(caches: dict[str, int], suffix: str) -> list[PlannedRun]:
    """(level, cache size, working set, likwid kernel) of every run: half of each cache, then memory
    with ``copy`` and ``copy_mem`` (non-temporal stores) in the SIMD variant ``suffix``."""
    runs: list[PlannedRun] = [{"level": name, "cache_bytes": size, "working_set_bytes": size // 2, "kernel": f"copy{suffix}"}
            for name, size in caches.items()]
    mem_ws = memory_working_set(caches)
    for kernel in (f"copy{suffix}", f"copy_mem{suffix}"):
        runs.append({"level": MEMORY, "cache_bytes": None, "working_set_bytes": mem_ws, "kernel": kernel})
    return runs

"""One core's copy rate per cache level and memory from mpiatlas's own copy kernel (src/kernels/stream.c).

Where likwid-bench is not installed (a fresh machine), :func:`mpiatlas.node.limits.measure` takes the
node's limits from this instead, so the report still sets shared-memory B against a copy rate. The
kernel needs a C compiler only (no MPI): it is built into the user cache, keyed by the source, the cpu kind,
the compiler and the flags tried, and run pinned to one cpu (its ``--cpu``).

Built ``-O3 -march=native`` (``$CC`` if set; where the compiler refuses a flag, the next of
``BUILD_FLAGS`` is tried, down to plain ``-O3``; the binary prints the flags it got). It runs three
copy variants on every working set and the record keeps, per level, the best one, named in the
level's ``variant``/``kernel`` (every variant's best run stays in ``variants_copy_MBps``):

* ``loop``: ``a[i] = b[i]`` as the compiler vectorises it for this CPU (``-fno-tree-loop-distribute-patterns``
  keeps gcc from replacing it with a memcpy call);
* ``memcpy``: the C library's (glibc chooses its code per CPU at load time);
* ``nt``: non-temporal vector stores (SSE2/AVX/AVX-512, as the build targets), the fast way past the caches.

Why: the earlier scalar ``-O2`` loop ran 4–9× under glibc's memcpy in cache (an AMD EPYC VM: 13.4 vs
108.6 GB/s in L1), so every "% of limit" in cache on a fresh machine was that much too high. Measured on
this 2-core AMD EPYC VM with ``bench/copy_limit.py`` (its docstring has the table): the best variant gives
116.8 / 57.2 / 33.0 / 16.3 GB/s in L1 / L2 / L3 / memory, 1.00-1.63× glibc memcpy and 1.01-1.06×
likwid-bench. No single variant wins everywhere (the loop in cache, ``nt`` from memory), hence best per level.

Working sets are those likwid-bench gets (:func:`mpiatlas.node.copy_plan.plan`: half of each cache level,
8 x the largest cache, at least 256 MiB, for memory), the memory one capped at a quarter of the memory
available (a VM may report a cache of hundreds of MiB). The record has the likwid record's shape
(``levels`` with ``copy_MBps`` in MB/s of bytes copied, best of ``repeats`` runs) plus every run and
their spread, and ``tool: copy-kernel``. Bytes are counted as likwid-bench's halved figure and as a
message bandwidth counts them: bytes *copied* (one array's worth per pass), so "% of limit" has the
same bytes on both sides.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

from mpiatlas.node import c_tool
from mpiatlas.node.c_tool import CTool, CToolError
from mpiatlas.node.copy_plan import MEMORY, plan
from mpiatlas.node.limits_record import KernelRun, LevelEntry, LimitsRecord, WorkingSet, level_entry_of

TOOL = "copy-kernel"
SOURCE = "stream.c"
REPEATS = 5
MIN_TIME_MS = 50
RUN_TIMEOUT_S = 300
MEMINFO = Path("/proc/meminfo")
MEMORY_SHARE = 4  # at most 1 / MEMORY_SHARE of MemAvailable for the memory working set
# Flag sets tried in order until the compiler accepts one (a compiler without -march=native, or clang
# without gcc's loop-distribution switch, still builds the kernel).
BUILD_FLAGS: tuple[tuple[str, ...], ...] = (
    ("-O3", "-march=native", "-fno-tree-loop-distribute-patterns"),
    ("-O3", "-march=native"),
    ("-O3",),
)
LEGACY_VARIANT = "loop"  # records of format 1 (the scalar -O2 loop) name no variant


class CopyKernelError(RuntimeError):
    """The copy kernel could not be built or run, or its output is not what it prints."""


BUILD = CTool(SOURCE, BUILD_FLAGS, "copy-kernel")
compiler = c_tool.compiler
cpu_identity = c_tool.cpu_identity


def source_path() -> Path:
    """stream.c among the kernels' sources mpiatlas ships (package data, as for the MPI kernels)."""
    return BUILD.source_path()


def _digest(cc: str) -> str:
    """The build's identity: the source, the compiler's path and its ``--version``, the flags tried
    and the cpu they were tuned for (:func:`cpu_identity`)."""
    try:
        return BUILD.digest(cc)
    except CToolError as exc:
        raise CopyKernelError(str(exc)) from exc


def version_id() -> str | None:
    """``copy-kernel stream.c@<digest>``, what a limits record of the kernel is cached under; None
    without a compiler (nothing to measure with, nothing cached)."""
    cc = compiler()
    try:
        return f"{TOOL} {SOURCE}@{_digest(cc)}" if cc else None
    except (CopyKernelError, OSError):
        return None


def build(cache_dir: Path | None = None) -> Path:
    """The kernel's binary, compiled once per source and compiler into ``cache_dir``."""
    try:
        return BUILD.build(cache_dir)
    except CToolError as exc:
        raise CopyKernelError(str(exc)) from exc


def memory_available() -> int | None:
    """MemAvailable in bytes (None where /proc/meminfo does not say)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def working_sets(caches: dict[str, int], available: int | None) -> list[WorkingSet]:
    """(level, cache size, working set) per cache level and memory, as likwid-bench's plan."""
    runs: dict[str, WorkingSet] = {}
    for run in plan(caches, ""):
        runs.setdefault(run["level"], {"level": run["level"], "cache_bytes": run["cache_bytes"],
                                       "working_set_bytes": run["working_set_bytes"]})
    memory = runs[MEMORY]
    if available:
        cap = available // MEMORY_SHARE
        largest = max(caches.values(), default=0)
        # Capped, but never into the largest cache: that would measure a cache, not memory.
        memory["working_set_bytes"] = max(min(memory["working_set_bytes"], cap), 2 * largest)
    return list(runs.values())


def argv(binary: Path, sizes: list[int], cpu: int, repeats: int = REPEATS, min_time_ms: int = MIN_TIME_MS,
         variants: list[str] | None = None) -> list[str]:
    """The kernel's command line; ``variants`` None runs every variant the build has."""
    chosen = ["--variants", ",".join(variants)] if variants else []
    return [str(binary), "--sizes", ",".join(map(str, sizes)), "--cpu", str(cpu), "--repeats", str(repeats),
            "--min-time-ms", str(min_time_ms), *chosen]


def parse(output: str) -> tuple[dict[str, str], list[KernelRun]]:
    """(header, records) of the kernel's output; CopyKernelError naming what is wrong."""
    header: dict[str, str] = {}
    records: list[KernelRun] = []
    for number, line in enumerate(output.splitlines(), 1):
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip()] = value.strip()
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CopyKernelError(f"copy kernel output line {number}: not JSON ({exc})") from None
        runs = record.get("copy_MBps_runs") if isinstance(record, dict) else None
        if (not isinstance(runs, list) or not runs
                or not all(isinstance(r, (int, float)) and math.isfinite(r) and r > 0 for r in runs)):
            raise CopyKernelError(f"copy kernel output line {number}: copy_MBps_runs must be positive numbers, "
                                  f"got {runs!r}")
        if not isinstance(working_set := record.get("working_set_bytes"), int):
            raise CopyKernelError(f"copy kernel output line {number}: no working_set_bytes")
        records.append(_kernel_run(record, working_set, runs))
    if header.get("kernel") != "stream":
        raise CopyKernelError("copy kernel output has no '# kernel: stream' header")
    return header, records


def _kernel_run(line: dict[str, object], working_set: int, runs: list[float]) -> KernelRun:
    """An output line, its runs and working set checked, as its record: every field the kernel
    prints, the variant defaulted for recordings of the one-variant kernel."""
    valid = line.get("valid")
    run: KernelRun = {"variant": str(line.get("variant", LEGACY_VARIANT)), "working_set_bytes": working_set,
                      "copy_MBps_runs": runs, "valid": valid if isinstance(valid, bool) else None}
    if isinstance(kernel := line.get("kernel"), str):
        run["kernel"] = kernel
    if isinstance(cpu := line.get("cpu"), int):
        run["cpu"] = cpu
    if isinstance(array_bytes := line.get("array_bytes"), int):
        run["array_bytes"] = array_bytes
    if isinstance(passes := line.get("passes"), int):
        run["passes"] = passes
    return run


def level_entry(run: WorkingSet, record: KernelRun) -> LevelEntry:
    """A ``levels`` entry of the limits record from one variant's record: best run, median and spread
    (max - min over the median), and the variant that measured it."""
    runs = sorted(float(r) for r in record["copy_MBps_runs"])
    median = runs[len(runs) // 2] if len(runs) % 2 else (runs[len(runs) // 2 - 1] + runs[len(runs) // 2]) / 2
    variant = record["variant"]
    entry = level_entry_of(run)
    entry.update({"kernel": f"stream {variant}", "variant": variant, "runs_copy_MBps": record["copy_MBps_runs"],
                  "copy_MBps": runs[-1], "median_copy_MBps": median, "spread": (runs[-1] - runs[0]) / median,
                  "valid": record["valid"]})
    return entry


def best_level_entry(run: WorkingSet, records: list[KernelRun]) -> LevelEntry:
    """The level's entry from the variant with the highest best run among its valid ones (an invalid
    copy is never the limit; with none valid, the best invalid one, so the record says why), with
    every variant's best run beside it."""
    entries = [level_entry(run, record) for record in records]
    valid = [e for e in entries if e["valid"] is True] or entries
    best = max(valid, key=lambda e: e["copy_MBps"] or 0.0)
    chosen = best.copy()
    chosen["variants_copy_MBps"] = {e["variant"]: e["copy_MBps"] or 0.0 for e in entries}
    return chosen


def measure(caches: dict[str, int], cpu: int | None = None, cache_dir: Path | None = None,
            repeats: int = REPEATS, min_time_ms: int = MIN_TIME_MS) -> LimitsRecord:
    """The copy-rate part of a limits record (``available``, ``levels``, ...), or ``available: false``
    and why. ``cpu``: the cpu to pin to (default: the first this process may run on)."""
    base: LimitsRecord = {"tool": TOOL, "source": f"src/kernels/{SOURCE}", "repeats": repeats, "caches": caches}
    try:
        binary = build(cache_dir)
    except (CopyKernelError, OSError) as exc:
        return {**base, "available": False, "reason": str(exc)}
    sets = working_sets(caches, memory_available())
    pin = cpu if cpu is not None else min(os.sched_getaffinity(0))
    command = argv(binary, [run["working_set_bytes"] for run in sets], pin, repeats, min_time_ms)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise CopyKernelError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
        header, records = parse(done.stdout)
    except (CopyKernelError, OSError, subprocess.SubprocessError) as exc:
        return {**base, "available": False, "reason": str(exc)}
    by_size: dict[int, list[KernelRun]] = {}
    for r in records:
        by_size.setdefault(r["working_set_bytes"], []).append(r)
    levels = [best_level_entry(run, by_size[run["working_set_bytes"]]) for run in sets
              if run["working_set_bytes"] in by_size]
    invalid = [lv["level"] for lv in levels if lv["valid"] is not True]
    if invalid or len(levels) != len(sets):
        why = f"invalid copies at {', '.join(invalid)}" if invalid else "a working set without a record"
        return {**base, "available": False, "reason": f"copy kernel: {why}", "levels": levels}
    return {**base, "available": True, "version": f"{SOURCE}@{binary.name.split('-', 1)[1]}", "argv": command,
            "cpu": pin, "compiler": header.get("compiler"), "flags": header.get("flags"), "levels": levels}

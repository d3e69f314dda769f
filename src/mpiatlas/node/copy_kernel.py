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

import hashlib
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

from mpiatlas.files import shipped_kernel_sources, user_cache_dir
from mpiatlas.node.copy_plan import MEMORY, plan
from mpiatlas.node.limits_record import KernelRun, LevelEntry, LimitsRecord, WorkingSet, level_entry_of

TOOL = "copy-kernel"
SOURCE = "stream.c"
REPEATS = 5
MIN_TIME_MS = 50
RUN_TIMEOUT_S = 300
MEMINFO = Path("/proc/meminfo")
CPUINFO = Path("/proc/cpuinfo")
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


def source_path() -> Path:
    """stream.c among the kernels' sources mpiatlas ships (package data, as for the MPI kernels)."""
    return shipped_kernel_sources() / SOURCE


def compiler() -> str | None:
    """The C compiler: ``$CC``, else cc, else gcc, as found on PATH (None: none)."""
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc")):
        found = shutil.which(name)
        if found:
            return found
    return None


def cpu_identity(cpuinfo: Path = CPUINFO) -> str:
    """The first cpu's model and ISA flags: a ``-march=native`` binary runs only where they match, and
    the user cache may be a home directory shared by nodes of several kinds."""
    try:
        lines = cpuinfo.read_text().split("\n\n", 1)[0].splitlines()
    except OSError:
        return ""
    keep = ("model name", "flags", "Features", "CPU part", "cpu model", "isa")  # x86, Arm, MIPS, RISC-V
    return "\n".join(line for line in lines if line.split(":", 1)[0].strip() in keep)


def _digest(cc: str) -> str:
    """The build's identity: the source, the compiler's path and its ``--version``, the flags tried
    and the cpu they were tuned for (:func:`cpu_identity`)."""
    src = source_path()
    try:
        text = src.read_bytes()
    except OSError as exc:
        raise CopyKernelError(f"{src}: cannot read the copy kernel's source ({exc})") from exc
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    build = repr(BUILD_FLAGS) + cpu_identity()
    return hashlib.sha256(text + cc.encode() + version.encode() + build.encode()).hexdigest()[:16]


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
    cc = compiler()
    if cc is None:
        raise CopyKernelError("no C compiler on PATH (cc, gcc or $CC) to build the copy kernel")
    src = source_path()
    digest = _digest(cc)
    out_dir = user_cache_dir("copy-kernel") if cache_dir is None else cache_dir
    binary = out_dir / f"stream-{digest}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    aside = out_dir / f".stream-{digest}.{os.getpid()}"
    errors = []
    for flags in BUILD_FLAGS:
        command = [cc, *flags, f"-DBUILD_FLAGS=\"{' '.join(flags)}\"", "-o", str(aside), str(src)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            aside.replace(binary)  # atomic: a concurrent build of the same digest writes the same file
            return binary
        errors.append(f"{' '.join(flags)}: {done.stderr.strip()[-300:]}")
    raise CopyKernelError(f"{cc} could not build {src} with any of the flag sets: {'; '.join(errors)}")


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

"""Physical limits of a node: how fast one core copies memory, per cache level and from memory.

Measured with ``likwid-bench`` (Debian/Ubuntu package ``likwid``; it needs no hardware counters).
One record per node per campaign (R/limits/limits.json, ``mpiatlas limits``): the report sets a
shared-memory bandwidth against it (the Hockney plateau against memory, the in-cache peak against
the cache level the message fits in).

Choices, and why:

* kernels: ``copy`` in the widest SIMD variant this CPU runs (avx512 > avx > sse > scalar: likwid
  lists every compiled kernel, not the ones the CPU supports, so /proc/cpuinfo flags decide), and
  for memory also ``copy_mem`` (non-temporal stores, as glibc's memcpy uses for large copies); the
  memory limit is the better of the two;
* one thread on the first core (``-w S0:<size>:1``): a ping-pong's copies run one core at a time
  per direction, so one core's copy rate is the limit a single transfer can reach;
* working sets: half of each cache level (both arrays resident), and 8 × the largest cache (at
  least 256 MiB) for memory;
* likwid counts read + write volume (``MByte/s`` = 10^6 B/s over both arrays); the copy rate in
  bytes *copied* per second, the figure a message bandwidth compares with, is half of it;
* best of ``REPEATS`` runs: noise from other work on the node only lowers a bandwidth.

When likwid-bench is missing, mpiatlas's own copy kernel measures the same levels
(:mod:`mpiatlas.node.copy_kernel`, src/kernels/stream.c: a C compiler is all it needs), and the record's
``tool`` says which measured it. When that fails too, or likwid-bench fails, the record says
``available: false`` and why: the campaign goes on without the limit.

The record also holds the node's network links and the rate of the one inter-node traffic uses
(:func:`node_record`, :mod:`mpiatlas.node.link_rate`): read fresh every time (a few sysfs files), never
cached with the copy rate, since a link can be renegotiated or taken down within a boot.

Cached per node and boot (:func:`measure_cached`, ``~/.cache/mpiatlas/limits``): a node's copy rate
does not change within a boot, and re-measuring it alone on the machine every campaign costs ~20 s
(5 runs × ``REPEATS`` × ~1 s), more than the harness spends on all the cells of a small campaign.
The key is what would change the figure: the host, its boot id
(/proc/sys/kernel/random/boot_id: a reboot may bring another kernel, BIOS or memory settings), the
likwid-bench version (without it, the copy kernel's source and compiler), the CPU model and the cache sizes.
Unavailable records are not cached: they
cost nothing to redo, and installing likwid must take effect at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any, cast

from mpiatlas.node import copy_kernel, link_rate
from mpiatlas.node.copy_plan import MEMORY as MEMORY, plan as plan  # re-exported: the record readers use them
from mpiatlas.node.limits_record import CacheKey, LevelEntry, LimitsRecord, PlannedRun, level_entry_of
from mpiatlas.files import user_cache_dir, write_json_atomic

LIKWID_BENCH = "likwid-bench"
REPEATS = 3
TARGET_VOLUME_BYTES = 4e9  # per run: ~0.1–1 s at 5–60 GB/s, long enough to dwarf the timer
RUN_TIMEOUT_S = 120

log = logging.getLogger(__name__)

_MBYTES = re.compile(r"^MByte/s:\s+([0-9.eE+-]+)", re.MULTILINE)
_VERSION = re.compile(r"Version\s+(\S+)")

Runner = Callable[[list[str]], str]


class LimitsError(ValueError):
    """A limits record that cannot be used (names the file or key)."""


def cache_sizes(sysfs_cpu0: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """Data/unified cache sizes of the first cpu from sysfs: {"L1": bytes, "L2": ..., "L3": ...}."""
    sizes: dict[str, int] = {}
    for index in sorted(sysfs_cpu0.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            sizes[f"L{level}"] = size
    return dict(sorted(sizes.items()))


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text.upper())
    if not m:
        raise ValueError(f"cache size {text!r}: expected e.g. 32K or 512K")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def simd_suffix(cpuinfo: str) -> str:
    """The likwid kernel suffix for the widest SIMD the CPU flags allow."""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    for flag, suffix in (("avx512f", "_avx512"), ("avx", "_avx"), ("sse2", "_sse")):
        if flag in flags:
            return suffix
    return ""


def bench_argv(kernel: str, working_set_bytes: int) -> list[str]:
    iterations = max(10, int(TARGET_VOLUME_BYTES / working_set_bytes))
    # likwid reads kB as 10^3 bytes (256000 B for "256kB").
    return [LIKWID_BENCH, "-t", kernel, "-w", f"S0:{working_set_bytes // 1000}kB:1", "-i", str(iterations)]


def parse_mbytes(output: str) -> float:
    """likwid-bench's ``MByte/s:`` figure; ValueError when the output has none."""
    m = _MBYTES.search(output)
    if not m:
        raise ValueError("no 'MByte/s:' line in the likwid-bench output")
    value = float(m.group(1))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"likwid-bench MByte/s is {value}")
    return value


def run_command(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {tail[0]}")
    return done.stdout


def measure(runner: Runner = run_command, caches: dict[str, int] | None = None,
            cpuinfo: str | None = None, hostname: str | None = None) -> LimitsRecord:
    """This node's record: every planned run, best of REPEATS, or ``available: false`` and why."""
    hostname = socket.gethostname() if hostname is None else hostname
    record: LimitsRecord = {"node": hostname.split(".")[0], "tool": LIKWID_BENCH,
                            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
                            "threads": 1, "repeats": REPEATS}
    if runner is run_command and shutil.which(LIKWID_BENCH) is None:
        return measure_with_copy_kernel(record, caches)
    if cpuinfo is None:
        cpuinfo = read_cpuinfo()
    caches = cache_sizes() if caches is None else caches
    try:
        version = _VERSION.search(runner([LIKWID_BENCH, "-v"]))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return {**record, "available": False, "reason": str(exc)}
    record["version"] = version.group(1) if version else None
    record["caches"] = caches
    levels = record["levels"] = [_measure_one(runner, run) for run in plan(caches, simd_suffix(cpuinfo))]
    ok = [lv for lv in levels if lv.get("copy_MBps") is not None]
    record["available"] = bool(ok)
    if not ok:
        record["reason"] = "every likwid-bench run failed: " + str(levels[0].get("error"))
    return record


def measure_with_copy_kernel(record: LimitsRecord, caches: dict[str, int] | None = None) -> LimitsRecord:
    """The record from mpiatlas's own copy kernel (:mod:`mpiatlas.node.copy_kernel`), for a node
    without likwid-bench; ``available: false`` names both when that fails too."""
    measured = copy_kernel.measure(cache_sizes() if caches is None else caches)
    out: LimitsRecord = {**record, **measured, "likwid_bench": f"{LIKWID_BENCH} not found on PATH (package likwid)"}
    if not measured.get("available"):
        out["reason"] = (f"{LIKWID_BENCH} not found on PATH (package likwid), and the copy kernel: "
                         f"{measured.get('reason')}")
    return out


def _measure_one(runner: Runner, run: PlannedRun) -> LevelEntry:
    argv = bench_argv(run["kernel"], run["working_set_bytes"])
    values: list[float] = []
    try:
        for _ in range(REPEATS):
            values.append(parse_mbytes(runner(argv)))
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        entry = level_entry_of(run)
        entry.update({"kernel": run["kernel"], "argv": argv, "error": str(exc), "copy_MBps": None})
        return entry
    best = max(values)
    entry = level_entry_of(run)
    entry.update({"kernel": run["kernel"], "argv": argv, "likwid_MByte_s": best, "runs_MByte_s": values,
                  "copy_MBps": best / 2.0})
    return entry


# -- reading a record back ------------------------------------------------------------------------


def level_limits(record: dict[str, Any]) -> dict[str, float]:
    """level -> best copy rate (MB/s of bytes copied) of an available record; {} when unavailable."""
    if not isinstance(record, dict):
        raise LimitsError(f"a limits record must be a JSON object, got {type(record).__name__}")
    if not record.get("available"):
        return {}
    levels = record.get("levels")
    if not isinstance(levels, list):
        raise LimitsError(f"limits record of node {record.get('node')!r}: 'levels' must be a list")
    out: dict[str, float] = {}
    for lv in levels:
        rate = lv.get("copy_MBps") if isinstance(lv, dict) else None
        if isinstance(rate, (int, float)) and rate > 0:
            out[lv["level"]] = max(out.get(lv["level"], 0.0), float(rate))
    return out


def level_kernels(record: dict[str, Any]) -> dict[str, str]:
    """level -> the kernel that measured its best rate (likwid-bench's ``copy_avx512``, ``copy_mem_avx512``,
    ..., the copy kernel's ``stream loop``/``stream memcpy``/``stream nt``); {} when unavailable."""
    best: dict[str, tuple[float, str]] = {}
    for lv in record.get("levels") or [] if record.get("available") else []:
        rate = lv.get("copy_MBps") if isinstance(lv, dict) else None
        if isinstance(rate, (int, float)) and rate > best.get(lv["level"], (0.0, ""))[0]:
            best[lv["level"]] = (float(rate), str(lv.get("kernel") or "?"))
    return {level: kernel for level, (_, kernel) in best.items()}


def level_spreads(record: dict[str, Any]) -> dict[str, float]:
    """level -> (max - min) / max of the runs behind its best rate (likwid-bench's ``runs_MByte_s``, the
    copy kernel's ``runs_copy_MBps``): how far the runs spread below the figure; {} without runs."""
    best: dict[str, tuple[float, float]] = {}
    for lv in record.get("levels") or []:
        runs = (lv.get("runs_MByte_s") or lv.get("runs_copy_MBps")) if isinstance(lv, dict) else None
        if not runs or not all(isinstance(x, (int, float)) and x > 0 for x in runs):
            continue
        top, spread = float(max(runs)), (max(runs) - min(runs)) / max(runs)
        if top > best.get(lv["level"], (0.0, 0.0))[0]:
            best[lv["level"]] = (top, spread)
    return {level: spread for level, (_, spread) in best.items()}


def level_for_size(record: dict[str, Any], size_bytes: float) -> str:
    """The smallest cache level of the record that holds a message of ``size_bytes``, else memory."""
    caches = record.get("caches") if isinstance(record, dict) else None
    for name, size in sorted((caches or {}).items(), key=lambda kv: kv[1]):
        if size_bytes <= size:
            return str(name)
    return MEMORY


def write_records(records: list[LimitsRecord], out: Path) -> None:
    """The campaign's limits file: one record per node."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, {"nodes": sorted(records, key=lambda r: str(r.get("node")))})


def slurm_nodes() -> int:
    """Nodes of the SLURM allocation this process runs in (1 outside one)."""
    try:
        return max(1, int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    except ValueError:
        return 1


# -- the cache per node and boot (see the module docstring) ---------------------------------------

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CPUINFO = Path("/proc/cpuinfo")
_CPU_MODEL_KEYS = ("model name", "Processor", "cpu model", "cpu")  # x86, older Arm, MIPS, POWER


def read_cpuinfo() -> str:
    try:
        return CPUINFO.read_text()
    except OSError:
        return ""


def read_boot_id() -> str:
    """This boot's id ("" when the kernel does not say: then nothing is cached)."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def cpu_model(cpuinfo: str) -> str:
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return next((fields[k] for k in _CPU_MODEL_KEYS if fields.get(k)), "")


def likwid_version(runner: Runner = run_command) -> str | None:
    """``likwid-bench -v``'s version, None when it does not run or says none."""
    try:
        m = _VERSION.search(runner([LIKWID_BENCH, "-v"]))
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None
    return m.group(1) if m else None


@dataclass(frozen=True)
class KeySources:
    """Where the facts of the cache key come from; tests give fixed ones."""

    hostname: Callable[[], str] = socket.gethostname
    boot_id: Callable[[], str] = read_boot_id
    version: Callable[[], str | None] = likwid_version
    cpuinfo: Callable[[], str] = read_cpuinfo
    caches: Callable[[], dict[str, int]] = cache_sizes


def default_cache_dir() -> Path:
    return user_cache_dir("limits")


def cache_key(hostname: str, boot_id: str, version: str | None, cpuinfo: str,
              caches: dict[str, int]) -> CacheKey | None:
    """The facts a cached record must match; None (nothing cached) without a boot id or a
    likwid-bench version: a record could not be told from one of another boot or tool."""
    if not boot_id or not version:
        return None
    return {"host": hostname, "boot_id": boot_id, "likwid_bench": version, "cpu_model": cpu_model(cpuinfo),
            "caches": dict(sorted(caches.items()))}


def cache_path(cache_dir: Path, key: CacheKey) -> Path:
    """``<host>-<digest of the key>.json``: the host in the name for a person listing the dir."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", key["host"]) or "host"
    return cache_dir / f"{host}-{digest}.json"


def read_cached(path: Path, key: CacheKey) -> LimitsRecord | None:
    """The record cached at ``path`` for ``key``; None when there is none, and None with a warning
    when the file is not a usable record of that key (it is measured again and overwritten)."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or record.get("cache_key") != key or not level_limits(record):
            raise LimitsError("not an available limits record of this node and boot")
    except (OSError, ValueError) as exc:  # JSONDecodeError and LimitsError are ValueErrors
        log.warning("%s: cached limits record ignored (%s); measuring again", path, exc)
        return None
    # Checked above as an available record of this key, which only store_cached writes: passed on as read.
    return cast(LimitsRecord, record)


def store_cached(path: Path, record: LimitsRecord) -> None:
    """Write aside under a name of this process's own, then rename: concurrent writers (two
    campaigns on one node) each replace the file whole, and a reader never sees half of one."""
    try:
        write_json_atomic(path, record)
    except OSError:  # a cache that cannot be written costs a measurement next time, not this run
        raise


@contextmanager
def _measuring_alone(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` while looking up and measuring: a second campaign starting on this node
    waits and then reads the first one's record, rather than measuring beside it (each would see
    half the memory bandwidth). A lock file that cannot be made only costs that guarantee."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - held across the yield
    except OSError as exc:
        log.warning("%s: cannot lock the limits cache (%s); measuring without it", path.parent, exc)
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def measure_cached(cache_dir: Path | None = None, *, fresh: bool = False, runner: Runner = run_command,
                   sources: KeySources = KeySources()) -> LimitsRecord:
    """This node's record from the cache when it holds one for this node, boot and likwid-bench
    (marked ``cached_from``, its ``measured_at`` the original one), else measured and, when
    available, cached. ``fresh`` measures (and caches) even when the cache holds a record."""
    cache_dir = default_cache_dir() if cache_dir is None else cache_dir
    hostname, cpuinfo, caches = sources.hostname(), sources.cpuinfo(), sources.caches()
    version = sources.version()
    if version is None and runner is run_command and shutil.which(LIKWID_BENCH) is None:
        # The copy kernel measures instead: its source and compiler stand for the tool's version (a
        # record of it is cached alike; installing likwid-bench changes the key, and it measures).
        version = copy_kernel.version_id()
    key = cache_key(hostname, sources.boot_id(), version, cpuinfo, caches)
    if key is None:
        return measure(runner, caches=caches, cpuinfo=cpuinfo, hostname=hostname)
    path = cache_path(cache_dir, key)
    with _measuring_alone(path):
        hit = None if fresh else read_cached(path, key)
        if hit is not None:
            return {**hit, "cached_from": str(path)}
        record = measure(runner, caches=caches, cpuinfo=cpuinfo, hostname=hostname)
        if not record.get("available"):
            return record
        record["cache_key"] = key
        try:
            store_cached(path, record)
        except OSError as exc:
            log.warning("%s: limits record not cached (%s)", path, exc)
    return record


def node_record(cache_dir: Path | None = None, *, fresh: bool = False, tcp_interfaces: Sequence[str] = (),
                config_gbit_s: float | None = None, config_name: str | None = None) -> LimitsRecord:
    """This node's limits record: the copy rates (:func:`measure_cached`, cached) and, read now,
    its ``links`` and the ``network_link`` the campaign's inter-node traffic uses (:mod:`mpiatlas.node.link_rate`)."""
    record = measure_cached(cache_dir, fresh=fresh)
    net = link_rate.network_record(tcp_interfaces, config_gbit_s, config_name)
    return {**record, "links": net["links"], "rdma_ports": net["rdma_ports"], "default_route": net["default_route"],
            "network_link": net["network_link"]}

"""The cache-line round trip between the cpus a launch's ranks use, taken before and after the
launch (src/kernels/pair_latency.c), and the best this node has shown for each pair since it booted.

Why (issue #33): on this project's 2-core AMD EPYC VM, Intel MPI shm PingPong launches fell into two
states that nothing in /proc told apart: 0.15 µs at 8 B and 160 µs at 4 MiB, or 0.35 µs and
1.8 ms (10×), in runs of several consecutive launches lasting tens of seconds. The cache-line round
trip between the two vCPUs the ranks were pinned to showed the same two states: 52-67 ns (median of
100 batches of 100 round trips), or 305-366 ns. The hypervisor had moved the vCPUs onto cores that
share no cache; a launch in that state measured another machine than the one the cell planned.
memcpy on one vCPU (33-44 GB/s), run queues, steal and page faults were the same in both states.

On bare metal a pair's round trip is a property of the topology (a few tens of ns on one L3, some
hundreds across sockets), stable from launch to launch: the probe then costs ~1 ms per pair and
decides nothing. Each pair is judged against its own best, so pairs in different regions never
compare with each other.

The probe runs on at most ``MAX_PAIRS`` pairs of neighbouring planned cpus (a 256-rank launch is not
probed 32,640 times), for at most ``BUDGET_MS`` each: a cpu another process holds gives no answer
within it and the pair says so, it never holds the launch up.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import NotRequired, TypedDict

from mpiatlas.files import CACHE_ENV, user_cache_dir, write_text_atomic
from mpiatlas.node.c_tool import CTool, CToolError

SOURCE = "pair_latency.c"
BUILD = CTool(SOURCE, (("-O2", "-pthread"),), "node-tools", by_version=False)
BATCHES = 101       # the median of 101 batch means: one stretched batch moves it by nothing
PER_BATCH = 100     # round trips per batch: ~6 µs on one L3 here, well above the clock's resolution
BUDGET_MS = 50      # per pair; a quiet pair takes ~1 ms (101 x 100 x 60 ns)
MAX_PAIRS = 8
RUN_TIMEOUT_S = 30
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class PairLatencyError(RuntimeError):
    """The probe's output is not what it prints."""


class PairFigure(TypedDict):
    """One pair's round trip: the median batch, its quartiles, and how many batches it finished."""

    cpus: list[int]
    median_ns: float
    p25_ns: float
    p75_ns: float
    batches: int


class PairProbe(TypedDict):
    """What one probe run (before or after a launch) measured, and the pairs it could not."""

    pairs: list[PairFigure]
    errors: list[str]
    cost_s: float


class PairLatencyRecord(TypedDict):
    """The launch's ``machine.pair_latency``: the probes around it and, per pair ("a-b"), the best
    median this node showed since boot, this launch's included (what stats.quality judges against)."""

    tool: str
    before: PairProbe
    after: NotRequired[PairProbe]
    best_ns: dict[str, float]


@dataclass(frozen=True)
class Unprobed:
    """Why a launch's pairs were not probed (no compiler, one cpu, the tool failed)."""

    reason: str


def pairs_of(cpus: list[int] | None, limit: int = MAX_PAIRS) -> list[tuple[int, int]]:
    """Neighbouring distinct cpus, (c0, c1), (c1, c2), ..., at most ``limit`` of them spread evenly
    over the list (the first and the last pair kept): what a ring of ranks on those cpus uses."""
    ordered = sorted(set(cpus or []))
    pairs = list(pairwise(ordered))
    if len(pairs) <= limit:
        return pairs
    step = (len(pairs) - 1) / (limit - 1)
    return [pairs[round(i * step)] for i in range(limit)]


def pair_key(cpus: list[int] | tuple[int, int]) -> str:
    return f"{cpus[0]}-{cpus[1]}"


def parse(output: str) -> tuple[list[PairFigure], list[str]]:
    """(figures, errors in words) of the probe's output; PairLatencyError naming the bad line."""
    figures: list[PairFigure] = []
    errors: list[str] = []
    for number, line in enumerate(output.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] != "pair" or len(fields) < 4:
            raise PairLatencyError(f"pair_latency output line {number}: expected 'pair A B ...', got {line!r}")
        try:
            cpus = [int(fields[1]), int(fields[2])]
            if fields[3] == "error":
                errors.append(f"cpus {cpus[0]} and {cpus[1]}: {' '.join(fields[4:])}")
                continue
            median, p25, p75, batches = float(fields[3]), float(fields[4]), float(fields[5]), int(fields[6])
        except (ValueError, IndexError):
            raise PairLatencyError(f"pair_latency output line {number}: expected 'pair A B median p25 p75 "
                                   f"batches' or 'pair A B error WHY', got {line!r}") from None
        if not 0 < p25 <= median <= p75 or batches < 1:
            raise PairLatencyError(f"pair_latency output line {number}: quartiles must be positive and "
                                   f"ordered, batches at least 1: {line!r}")
        figures.append({"cpus": cpus, "median_ns": median, "p25_ns": p25, "p75_ns": p75, "batches": batches})
    return figures, errors


def argv(binary: Path, pairs: list[tuple[int, int]]) -> list[str]:
    return [str(binary), str(BATCHES), str(PER_BATCH), str(BUDGET_MS), *(str(c) for pair in pairs for c in pair)]


def tool_binary() -> Path | Unprobed:
    """The probe's binary, built on first use; once per process for a given cache, PATH and $CC (a
    group's run-cell probes every launch: no compiler process after the first)."""
    return _tool_binary(os.environ.get(CACHE_ENV), os.environ.get("PATH"), os.environ.get("CC"))


@lru_cache(maxsize=4)
def _tool_binary(cache: str | None, path: str | None, cc: str | None) -> Path | Unprobed:
    try:
        return BUILD.build()
    except (CToolError, OSError) as exc:
        return Unprobed(f"pair probe: {exc}")


def probe(binary: Path, pairs: list[tuple[int, int]]) -> PairProbe:
    """Run the probe once over ``pairs``; a probe that fails is recorded as the errors it gave."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv(binary, pairs), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              check=False)
        if done.returncode != 0:
            raise PairLatencyError(f"{binary.name} exited {done.returncode}: {done.stderr.strip()[-300:]}")
        figures, errors = parse(done.stdout)
    except (PairLatencyError, OSError, subprocess.SubprocessError) as exc:
        figures, errors = [], [str(exc)]
    return {"pairs": figures, "errors": errors, "cost_s": round(time.perf_counter() - start, 4)}


def _best_file() -> Path:
    """This node's bests since boot, in the user cache (a home shared by nodes: one file per host and boot)."""
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        boot = "unknown-boot"
    return user_cache_dir("pair-latency", f"{socket.gethostname()}-{boot}.json")


def _read_best(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # none yet, or unreadable: this launch's own figures start it again
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and v > 0} \
        if isinstance(data, dict) else {}


def remember_best(probes: list[PairProbe], path: Path | None = None) -> dict[str, float]:
    """The best median per pair this node has shown since boot, ``probes`` included, written back.
    Two launches writing at once may each keep only their own best: the file then holds a best a
    little higher than the node's, and a launch is judged a little more leniently, never harder."""
    path = path or _best_file()
    best = _read_best(path)
    measured: dict[str, float] = {}
    for figure in (f for p in probes for f in p["pairs"]):
        key = pair_key(figure["cpus"])
        measured[key] = min(measured.get(key, figure["median_ns"]), figure["median_ns"])
    changed = False
    for key, median in measured.items():
        if key not in best or median < best[key]:
            best[key], changed = median, True
    if changed:
        try:
            write_text_atomic(path, json.dumps(best, sort_keys=True) + "\n")
        except OSError:
            pass  # a read-only cache: judged on what is known now
    return {key: best[key] for key in measured}


def record(binary: Path, before: PairProbe, after: PairProbe | None) -> PairLatencyRecord:
    probes = [before] + ([after] if after is not None else [])
    out: PairLatencyRecord = {"tool": f"{SOURCE}@{binary.name.rsplit('-', 1)[-1]}", "before": before,
                              "best_ns": remember_best(probes)}
    if after is not None:
        out["after"] = after
    return out



@dataclass(frozen=True)
class PairLook:
    """The pair furthest above its best since boot, in one probe of a node's cpus."""

    cpus: str  # "a and b"
    median_ns: float
    best_ns: float

    @property
    def ratio(self) -> float:
        return self.median_ns / self.best_ns


def worst_pair(probe_run: PairProbe, best: dict[str, float]) -> PairLook | None:
    """The probed pair with the largest round trip over its best (None: no pair measured)."""
    looks = [PairLook(f"{f['cpus'][0]} and {f['cpus'][1]}", f["median_ns"], best[pair_key(f["cpus"])])
             for f in probe_run["pairs"] if best.get(pair_key(f["cpus"]))]
    return max(looks, key=lambda lk: lk.ratio, default=None)


def look_at_node() -> PairLook | None:
    """The cpus this process may use, probed once (at most MAX_PAIRS neighbouring pairs) and set
    against their best since boot, which the look also updates; None where nothing can be probed."""
    pairs = pairs_of(sorted(os.sched_getaffinity(0)))
    binary = tool_binary() if pairs else None
    if not isinstance(binary, Path):
        return None
    measured = probe(binary, pairs)
    return worst_pair(measured, remember_best([measured]))

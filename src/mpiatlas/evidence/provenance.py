"""Facts about where and how a number was measured."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import platform
import re
import shutil
import socket
import subprocess
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    # The records the stages write into this one, each kept by the module that makes it.
    from mpiatlas.evidence.mpi_library import LibraryRecord
    from mpiatlas.node.link_rate import Nic
    from mpiatlas.node.multinode import NodeFactsRecord
    from mpiatlas.node.ssh_hosts import SshRecord
    from mpiatlas.node.topology import TopologySummary
    from mpiatlas.runner.machine_record import MachineRecord
    from mpiatlas.runner.quiet import QuietWaitRecord
    from mpiatlas.spine.cell_coords import Coords

from mpiatlas import __version__

# Environment variables worth recording: they change what MPI does.
# Every prefix a knob set may use (mpiatlas.matrix.knobs) is among them.
RELEVANT_ENV_PREFIXES = ("I_MPI_", "FI_", "UCX_", "OMPI_", "PMIX_", "MPIR_", "MPICH_", "HYDRA_", "OMP_", "KMP_",
                         "SLURM_JOB", "MPIATLAS_")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# The dynamic loader's variables: they decide which libmpi the ranks load (mpiatlas.evidence.mpi_library).
LOADER_ENV = ("LD_LIBRARY_PATH", "LD_PRELOAD")


def relevant_env(env: dict[str, str], launch_env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``env`` (what a stack, a program and a knob set add) that change what MPI
    does, and the loader's variables as the launch really has them (``launch_env``: its whole
    environment, which holds the caller's LD_LIBRARY_PATH after the stack's; else from ``env``)."""
    relevant = {k: v for k, v in env.items() if k.startswith(RELEVANT_ENV_PREFIXES)}
    loader = env if launch_env is None else launch_env
    relevant |= {k: loader[k] for k in LOADER_ENV if k in loader}
    return dict(sorted(relevant.items()))


def host_facts() -> dict[str, str]:
    """Host, cpu model, kernel, Python and mpiatlas version (a fresh dict each call)."""
    return dict(_host_facts())


@cache
def _host_facts() -> dict[str, str]:
    # Read once per process: a cell group records them for every cell, and they cannot change
    # while the process runs.
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mpiatlas_version": __version__,
    }


# likwid-topology -O: "STRUCT,<name>,<rows>" headers, then "<key>:,<value>,..." rows. Which rows of
# which block describe the node (not its state: free memory changes from one call to the next).
_LIKWID_FIELDS = {("Info", "CPU name:"): "cpu_name", ("Info", "CPU type:"): "cpu_type",
                  ("Hardware Thread Topology", "Sockets:"): "sockets",
                  ("Hardware Thread Topology", "Cores per socket:"): "cores_per_socket",
                  ("Hardware Thread Topology", "Threads per core:"): "threads_per_core"}


class LikwidCache(TypedDict, total=False):
    size: str
    groups: int  # the cache's instances


class LikwidTopology(TypedDict, total=False):
    """likwid's view of the node (provenance.json ``likwid_topology``); ``error`` when it failed."""

    version: str | None
    error: str
    caches: dict[str, LikwidCache]  # by level ("Level 1", ...)
    cpu_name: int | str
    cpu_type: int | str
    sockets: int | str
    cores_per_socket: int | str
    threads_per_core: int | str
    numa_domains: int | str
    hwthreads: int


def likwid_topology() -> LikwidTopology | None:
    """likwid's view of this node (``likwid-topology -O``), beside hwloc's: cpu, sockets, cores per
    socket, threads per core, hardware threads, each cache's size and number of instances, NUMA
    domains, likwid's version (a summary, like hwloc's: the full table grows with the node);
    None where likwid-topology is not installed (a fresh dict each call)."""
    facts = _likwid_topology()
    return None if facts is None else copy.deepcopy(facts)


@cache
def _likwid_topology() -> LikwidTopology | None:
    # Asked once per process (~0.1 s): a cell group records it for every cell, and a node's topology
    # does not change under a running group.
    exe = shutil.which("likwid-topology")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-O"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        version = subprocess.run([exe, "-v"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"likwid-topology: {exc}", "caches": {}}
    if out.returncode != 0:
        return {"error": f"likwid-topology -O exited {out.returncode}: {out.stderr.strip()[-300:]}", "caches": {}}
    match = re.search(r"Version\s+(\S+)", version.stdout + version.stderr)
    facts = parse_likwid_topology(out.stdout)
    facts["version"] = match[1] if match else None
    return facts


def parse_likwid_topology(csv: str) -> LikwidTopology:
    """The node's facts from ``likwid-topology -O`` (see likwid_topology)."""
    caches: dict[str, LikwidCache] = {}
    facts: LikwidTopology = {"caches": caches}
    block, cache_level, hwthreads, in_table = "", "", 0, False
    for line in csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if cells[0] in ("STRUCT", "TABLE"):
            block, in_table = (cells[1] if len(cells) > 1 else ""), cells[0] == "TABLE"
            cache_level = block.removeprefix("Cache Topology ") if block.startswith("Cache Topology") else ""
            continue
        if in_table:
            hwthreads += bool(re.match(r"\d+\s", cells[0]))  # one row per hardware thread
            continue
        key, value = cells[0], cells[1] if len(cells) > 1 else ""
        if (block, key) in _LIKWID_FIELDS:
            _set_likwid_field(facts, _LIKWID_FIELDS[(block, key)], int(value) if value.isdigit() else value)
        elif cache_level and key == "Size:":
            caches[cache_level] = {"size": value}
        elif cache_level and key == "Cache groups:":
            # groups are comma-separated, the cpus of one group space-separated: "0,1" is two, "0 1," one.
            caches.setdefault(cache_level, {})["groups"] = sum(1 for c in cells[1:] if c)
        elif key == "NUMA domains:":
            facts["numa_domains"] = int(value) if value.isdigit() else value
    facts["hwthreads"] = hwthreads
    return facts


def _set_likwid_field(facts: LikwidTopology, name: str, value: int | str) -> None:
    # One branch per field of _LIKWID_FIELDS: a TypedDict's keys are named, not computed.
    if name == "cpu_name":
        facts["cpu_name"] = value
    elif name == "cpu_type":
        facts["cpu_type"] = value
    elif name == "sockets":
        facts["sockets"] = value
    elif name == "cores_per_socket":
        facts["cores_per_socket"] = value
    elif name == "threads_per_core":
        facts["threads_per_core"] = value


# -- One launch's record (provenance.json) ----------------------------------------------------------
# The runner's stages return their facts (runner.plan's PlanFacts, runner.run's launch facts, ...);
# run_cell gathers them into a Provenance and lifecycle writes it. A fact a stage never reached is
# absent from the file (UNSET), which is not the same as a fact recorded as null.

class Unset(enum.Enum):
    UNSET = "unset"


UNSET = Unset.UNSET


def set_fields(facts: Any) -> dict[str, Any]:
    """The fields of a facts dataclass that were set (UNSET ones left out)."""
    return {f.name: value for f in dataclasses.fields(facts) if (value := getattr(facts, f.name)) is not UNSET}


class KnobsRecord(TypedDict):
    """The cell's knob set as provenance.json keeps it (``knobs``): what it set and what it replaced."""

    name: str
    env: dict[str, str]
    replaced: dict[str, str]  # variable -> the value the knob replaced


class LikwidPin(TypedDict):
    """The likwid pinner a cell ran under (``likwid``): its path and version."""

    pin: str
    version: str | None


@dataclasses.dataclass
class PlanFacts:
    """What planning found, as provenance.json keeps it (:class:`Provenance` inherits these names);
    UNSET: planning stopped before it."""

    oversubscribed: bool | Unset = UNSET
    cores_requested: int | Unset = UNSET
    requested_pins: list[int] | list[list[int]] | Unset | None = UNSET  # a cpu per rank, or a set
    wanted_cpu_sets: list[list[int]] | Unset = UNSET
    region: str | Unset | None = UNSET
    node_facts: list[NodeFactsRecord] | Unset = UNSET
    colocated: bool | Unset = UNSET
    distribution: str | Unset = UNSET
    planned_nodes: list[int] | Unset = UNSET
    ssh: SshRecord | Unset = UNSET
    launch_hosts: list[str] | Unset = UNSET


@dataclasses.dataclass(kw_only=True)
class Provenance(PlanFacts):
    """Where and how one launch ran: serialised by :meth:`to_json` as provenance.json (one key per
    set field, the names tidy and the report read)."""

    cell: str
    coords: Coords
    start: str
    host: str
    cpu_model: str
    kernel: str
    python: str
    mpiatlas_version: str
    stack_kind: str
    scheduler: str | None
    slurm_job_id: str | None
    slurm: dict[str, str] | None
    containerized: bool = False
    image_digest: str | None = None
    removed_stale_attempts: list[str] | Unset = UNSET
    pinner: str | Unset = UNSET
    likwid_topology: LikwidTopology | Unset = UNSET
    # The node's NICs and RDMA ports (name, kind, rate, link layer; mpiatlas.node.link_rate.node_nics).
    nics: list[Nic] | Unset = UNSET
    launcher: str | Unset = UNSET
    topology: TopologySummary | Unset = UNSET
    threads: int | Unset = UNSET
    # runner.plan's facts: the fields of PlanFacts, inherited
    # the launch (runner.run)
    stack_version: str | Unset = UNSET
    image: str | Unset = UNSET
    likwid: LikwidPin | Unset = UNSET
    argv: list[str] | Unset = UNSET
    env: dict[str, str] | Unset = UNSET
    knobs: KnobsRecord | Unset = UNSET
    exit_code: int | Unset | None = UNSET
    wall_s: float | Unset = UNSET
    machine: MachineRecord | Unset | None = UNSET
    mpi_library: LibraryRecord | Unset = UNSET
    rank_hosts: dict[str, str] | Unset = UNSET
    # the later re-measure round's wait for a quiet machine (runner.quiet), when the launch was one of it
    quiet_wait: QuietWaitRecord | Unset = UNSET
    # the cell's end (runner.lifecycle)
    interrupted_by: str | Unset | None = UNSET
    end: str | Unset = UNSET

    def merge(self, facts: Any) -> None:
        """Take every set field of a stage's facts dataclass (its names are this record's)."""
        for name, value in set_fields(facts).items():
            setattr(self, name, value)

    def to_json(self) -> dict[str, Any]:
        return set_fields(self)

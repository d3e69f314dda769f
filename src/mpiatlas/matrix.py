"""The campaign matrix: a validated config expanded into cells.

A cell is one launch: stack x transport x mapping x process count x
benchmark x collective algorithm x repetition. Repetitions are separate
launches on purpose: run-to-run variance (placement, page layout, noise)
is what a user needs to see, and IMB's inner iterations hide it.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from mpiatlas.config import ConfigError
from mpiatlas.stacks import STACK_KINDS, collectives

# IMB runs these with exactly two active ranks; more processes would only wait.
TWO_RANK_BENCHMARKS = frozenset({"PingPong", "PingPing"})
COLLECTIVES = frozenset(
    {"Bcast", "Scatter", "Scatterv", "Gather", "Gatherv", "Reduce", "Reduce_scatter", "Allreduce",
     "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Barrier"}
)
DEFAULT_ALGORITHM = "default"


class PlacedCell:
    """Where a cell's ranks go, for IMB and kernel cells alike (dataclasses with these fields)."""

    stack: str
    transport: str
    mapping: str
    np: int
    nodes: int

    @property
    def ppn(self) -> int:
        """Ranks per node."""
        return self.np // self.nodes

    @property
    def placement(self) -> str:
        """The mapping as a path segment: ``node2`` for the `node` mapping over 2 nodes."""
        return mapping_segment(self.mapping, self.nodes)

    @property
    def label(self) -> str:
        return f"{self.stack}/{self.transport}/{self.placement}"


@dataclass(frozen=True, order=True)
class Cell(PlacedCell):
    stack: str
    transport: str
    mapping: str
    np: int
    benchmark: str
    algorithm: str
    rep: int
    kind: str = "imb"
    # Nodes the ranks are spread over (the `node` mapping: rank i on node i mod nodes); 1 otherwise.
    nodes: int = 1

    @property
    def id(self) -> str:
        return (f"{self.kind}/{self.stack}/{self.transport}/{self.placement}/np{self.np}/"
                f"{self.benchmark}/{self.algorithm}/rep{self.rep}")

    def coords(self) -> dict[str, Any]:
        return asdict(self)


def mapping_segment(mapping: str, nodes: int) -> str:
    return mapping if nodes == 1 else f"{mapping}{nodes}"


def parse_mapping_segment(segment: str) -> tuple[str, int]:
    """``node2`` -> ("node", 2); ``core`` -> ("core", 1): the inverse of :func:`mapping_segment`."""
    match = re.fullmatch(r"([a-z]+?)(\d*)", segment)
    if match is None:
        raise ValueError(f"{segment!r} is not a mapping segment (e.g. core, socket, node2)")
    return match.group(1), int(match.group(2) or 1)


def stack_prefix(config: dict[str, Any], label: str) -> str:
    stack = config["stacks"][label]
    if "prefix" in stack:
        return stack["prefix"]
    if stack.get("source", "pypi") == "system":
        return "/usr"
    return str(Path(config["campaign"]["stacks_dir"]) / label)


def imb_provider(config: dict[str, Any], label: str) -> str | None:
    """The Intel MPI stack whose IMB binaries an MPICH stack runs (MPICH ABI), if any."""
    if config["stacks"][label]["kind"] != "mpich":
        return None
    return next((name for name, s in config["stacks"].items() if s["kind"] == "intelmpi"), None)


def imb_provider_prefix(config: dict[str, Any], label: str) -> str | None:
    provider = imb_provider(config, label)
    return stack_prefix(config, provider) if provider else None


def _check_transports(config: dict[str, Any]) -> None:
    for label, stack in config["stacks"].items():
        known = STACK_KINDS.get(stack["kind"])
        if known is None:
            raise ConfigError(f"stacks.{label}.kind: {stack['kind']!r} has no launch module; known: {sorted(STACK_KINDS)}")
        for transport in stack["transports"]:
            if transport not in known.transports:
                raise ConfigError(
                    f"stacks.{label}.transports: {transport!r} is not a transport of {stack['kind']}; "
                    f"allowed values: {', '.join(sorted(known.transports))}"
                )


def known_algorithms(kind: str, collective: str) -> set[str]:
    """Every algorithm name any packaged version of ``kind`` accepts (the exact version is checked at launch)."""
    names = {DEFAULT_ALGORITHM}
    for version in collectives.available_tables().get(kind, []):
        names |= set(collectives.algorithms(kind, version, collective))
    return names


def _check_algorithms(config: dict[str, Any]) -> None:
    for label, stack in config["stacks"].items():
        for coll, requested in stack.get("algorithms", {}).items():
            known = known_algorithms(stack["kind"], coll)
            unknown = [a for a in requested if a not in known]
            if unknown:
                raise ConfigError(
                    f"stacks.{label}.algorithms.{coll}: {', '.join(map(repr, unknown))} not known for "
                    f"{stack['kind']}; allowed values: {', '.join(sorted(known))}"
                )


def algorithms_for(config: dict[str, Any], stack: str, benchmark: str) -> list[str]:
    if benchmark not in COLLECTIVES:
        return [DEFAULT_ALGORITHM]
    return list(config["stacks"][stack].get("algorithms", {}).get(benchmark, [DEFAULT_ALGORITHM]))


def process_counts(config: dict[str, Any], benchmark: str) -> list[int]:
    return [2] if benchmark in TWO_RANK_BENCHMARKS else sorted(config["processes"])


def node_counts(config: dict[str, Any], mapping: str, np: int) -> list[int]:
    """The node counts a cell of ``np`` ranks runs over: 1 for single-node mappings; for `node`,
    every configured m (``nodes``) that splits the ranks evenly (ppn = np / m ranks per node)."""
    if mapping != "node":
        return [1]
    return [m for m in config.get("nodes", [2]) if m <= np and np % m == 0]


def imb_unavailable_reason(config: dict[str, Any], label: str) -> str | None:
    """Why stack ``label`` cannot run IMB, known before anything runs (None: it can).

    Intel MPI ships IMB in its wheel; MPICH runs Intel's IMB through the MPICH ABI, so it needs an
    Intel MPI stack in the campaign; Open MPI needs IMB built from source, which only an image with
    ``imb: build`` or an IMB the user built (MPIATLAS_IMB_OPENMPI, <prefix>/imb) provides. Such cells
    are not planned: the report states the reason once instead of showing them as failures."""
    kind = config["stacks"][label]["kind"]
    if kind == "mpich" and imb_provider(config, label) is None:
        return ("MPICH runs Intel's IMB binaries through the MPICH ABI, and the campaign has no intelmpi "
                "stack to take them from")
    if kind != "openmpi":
        return None
    containers = config.get("containers") or {}
    image = (containers.get("stacks") or {}).get("openmpi") or {}
    if containers.get("enabled") and image.get("imb", "skip") == "build":
        return None
    if os.environ.get("MPIATLAS_IMB_OPENMPI") or (Path(stack_prefix(config, label)) / "imb").exists():
        return None
    return ("Open MPI needs IMB built from source, and no registry has IMB's source (no internet here); "
            "its point-to-point and collectives are measured by mpiatlas's own pingpong and coll kernels")


def imb_stacks(config: dict[str, Any]) -> list[str]:
    """Labels of the stacks with IMB cells: ``imb.stacks``, else every stack; never one that cannot
    run IMB (see :func:`imb_unavailable_reason`)."""
    chosen = config["imb"].get("stacks")
    return [label for label in config["stacks"]
            if (chosen is None or label in chosen) and imb_unavailable_reason(config, label) is None]


def unplanned_notes(config: dict[str, Any]) -> list[dict[str, Any]]:
    """One note per stack whose IMB cells were left out before the run: what, why, how many cells."""
    chosen = config["imb"].get("stacks")
    notes = []
    for label in config["stacks"]:
        reason = imb_unavailable_reason(config, label)
        if reason is None or (chosen is not None and label not in chosen):
            continue
        cells = len(_imb_cells_of(config, [label]))
        notes.append({"what": f"IMB cells of stack {label!r}", "why": reason, "cells": cells})
    return notes


def imb_cells(config: dict[str, Any]) -> list[Cell]:
    """Every IMB cell of the campaign, in a stable order."""
    _check_transports(config)
    _check_algorithms(config)
    return _imb_cells_of(config, imb_stacks(config))


def _imb_cells_of(config: dict[str, Any], stacks: list[str]) -> list[Cell]:
    reps = range(config["campaign"]["repetitions"])
    cells = [
        Cell(stack, transport, mapping, np, bench, algo, rep, nodes=nodes)
        for stack in stacks
        for transport in config["stacks"][stack]["transports"]
        for mapping in config["mappings"]
        for bench in config["imb"]["benchmarks"]
        for np in process_counts(config, bench)
        for nodes in node_counts(config, mapping, np)
        for algo in algorithms_for(config, stack, bench)
        for rep in reps
    ]
    return sorted(set(cells))


def container_spec(config: dict[str, Any], label: str) -> dict[str, Any] | None:
    """The image a cell of stack ``label`` runs in (hybrid model), or None when containers are off."""
    containers = config.get("containers") or {}
    if not containers.get("enabled"):
        return None
    images = containers.get("images_dir", "results/images").rstrip("/")
    kind = config["stacks"][label]["kind"]
    return {"image": f"{images}/{kind}.sif", "inspect": f"{images}/{kind}.inspect.json",
            "preflight": f"{images}/{label}.preflight.txt", "binds": list(containers.get("binds", []))}


def cell_spec(config: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """Everything the runner needs for one cell, JSON-ready (no config file needed at run time)."""
    stack = config["stacks"][cell.stack]
    imb = config["imb"]
    return {
        "cell": cell.coords(),
        "id": cell.id,
        "stack": {
            "label": cell.stack,
            "kind": stack["kind"],
            "source": stack.get("source", "pypi"),
            "prefix": stack_prefix(config, cell.stack),
            "imb_from": imb_provider_prefix(config, cell.stack),
        },
        "imb": {
            "msglog": list(imb["msglog"]),
            "time_s": imb["time_s"],
            "mem_gb": imb["mem_gb"],
            "iterations": imb.get("iterations"),
        },
        "container": container_spec(config, cell.stack),
        "timeout_s": config["campaign"]["timeout_s"],
        "allow_oversubscribe": config["campaign"]["allow_oversubscribe"],
        "colocated_nodes": config["campaign"].get("colocated_nodes", "spread"),
        "tcp_interface": stack.get("tcp_interface"),
        # auto|mpirun|srun; "auto" is resolved where the cell runs (runner.resolve_launcher).
        "launcher": config["campaign"].get("launcher", "auto"),
    }


# -- scheduler resources of a cell (profiles/slurm) ---------------------------------------------
#
# A batch job holds up to campaign.cells_per_job cells that all need the same allocation (same
# stack, transport, mapping and process count), run one after another. Snakemake sums the
# runtime of a group's cells and takes the maximum of the other resources (see profiles/slurm).

# Fixed cost of one cell inside a job: two nested Snakemake start-ups, the launcher (hydra/srun,
# ~1 s), MPI_Init and IMB's warm-up, topology detection.
RUNTIME_OVERHEAD_S = 30.0
# IMB stops a message size after about -time seconds, but one iteration of a large message can
# overshoot it, and a loaded node is slower: budget twice the nominal time.
RUNTIME_SAFETY = 2.0
RUNTIME_FLOOR_MIN = 1
# Per rank: the MPI library, its shared-memory segments and IMB itself, besides the buffers.
MEM_PER_RANK_MB = 256
# Per job: the Snakemake processes that run the cells.
MEM_PER_JOB_MB = 512
# Mappings whose placement only exists on a whole node: ranks spread over its L3/NUMA/package
# domains (or over nodes). `core` packs ranks onto the first cores the job was given.
EXCLUSIVE_MAPPINGS = frozenset({"l3", "numa", "socket", "node"})


def message_sizes(spec: dict[str, Any]) -> int:
    """How many message sizes IMB measures for the cell (0 bytes, then 2^lo .. 2^hi)."""
    if spec["cell"]["benchmark"] == "Barrier":
        return 1
    lo, hi = spec["imb"]["msglog"]
    return hi - lo + 2


def estimate_runtime_min(spec: dict[str, Any], attempt: int = 1) -> int:
    """Wall-clock minutes to request for one cell: sizes x IMB -time x a safety factor, plus a
    fixed overhead, never more than the launch timeout (the runner kills the launch there),
    at least RUNTIME_FLOOR_MIN. ``attempt`` > 1 (a Snakemake retry) scales it up."""
    seconds = RUNTIME_OVERHEAD_S + RUNTIME_SAFETY * message_sizes(spec) * float(spec["imb"]["time_s"])
    seconds = min(seconds, float(spec["timeout_s"]) + RUNTIME_OVERHEAD_S)
    return max(RUNTIME_FLOOR_MIN, -(-int(seconds * max(1, attempt)) // 60))


def estimate_mem_mb(spec: dict[str, Any]) -> int:
    """Memory to request for one cell: per rank the library plus IMB's buffers (a send and a
    receive buffer of the largest message per peer, capped by IMB -mem), plus the job's Snakemake."""
    np = int(spec["cell"]["np"])
    _, hi = spec["imb"]["msglog"]
    buffers_mb = min(float(spec["imb"]["mem_gb"]) * 1024, 2 * np * 2**hi / 2**20)
    return MEM_PER_JOB_MB + np * (MEM_PER_RANK_MB + int(buffers_mb + 1))


def nodes_for(cell: Cell) -> int:
    """Nodes a cell's allocation spans (the cell's ``nodes``: >1 only for the `node` mapping)."""
    return cell.nodes


class Placed(Protocol):
    """What the allocation helpers read of a cell, IMB or kernel (kernel_matrix.KernelCell)."""

    @property
    def mapping(self) -> str: ...

    @property
    def ppn(self) -> int: ...


def needs_exclusive(config: dict[str, Any], cell: Placed) -> bool:
    mode = config["campaign"].get("exclusive", "auto")
    return mode == "always" or (mode == "auto" and cell.mapping in EXCLUSIVE_MAPPINGS)


def slurm_extra(config: dict[str, Any], cell: Placed) -> str:
    """sbatch options the executor plugin does not derive from tasks/nodes/mem/runtime."""
    extra = [f"--ntasks-per-node={cell.ppn}"]
    if needs_exclusive(config, cell):
        extra.append("--exclusive")
    return " ".join(extra)


# Snakemake group of an IMB cell: cells that need the same allocation. Snakemake cuts each such
# group into batch jobs of campaign.cells_per_job cells (its --group-components, set from the
# config by workflow/rules/common.smk) among the cells that still have to run: a re-run after a
# killed job submits only the missing cells, packed again.
IMB_GROUP = "imb_{stack}_{transport}_{mapping}_np{np}"  # mapping: the placement (node2, ...)


def job_group(cell: Cell) -> str:
    return IMB_GROUP.format(stack=cell.stack, transport=cell.transport, mapping=cell.placement, np=cell.np)


def batch_jobs(config: dict[str, Any], cells: list[Cell]) -> int:
    """How many batch jobs the cells need under a scheduler profile."""
    size = int(config["campaign"].get("cells_per_job", 20))
    counts: dict[str, int] = {}
    for cell in cells:
        counts[job_group(cell)] = counts.get(job_group(cell), 0) + 1
    return sum(-(-n // size) for n in counts.values())

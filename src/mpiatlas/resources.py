"""Cells cut into job groups, and what a group asks of a scheduler (profiles/slurm).

A group is the unit of one Snakemake job and one ``mpiatlas run-cell --group`` process: cells
of one kind that share an allocation (stack x transport x placement x ranks x threads per rank),
cut into chunks of ``campaign.cells_per_job`` in the campaign's sorted cell order,
so a group's id and its cells are the same on every run of the same config. Its cells run one
after another in one allocation; each is sealed on its own, so a group re-run after a killed job
skips its sealed cells and resumes at the first unsealed one.

A group's resources come from its cells: tasks = ranks, cpus per task = threads, nodes, and
runtime = the sum over its cells of (overhead + safety x the program's modelled work), each
capped by the launch timeout; memory = the largest request among its cells.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from mpiatlas.cells import Cell, sort_cells
from mpiatlas.programs import program_named, program_of

# Fixed cost of one cell inside a group: the launcher (hydra/srun, ~1 s), MPI_Init and the
# program's warm-up; a margin for a slow shared file system when the cell is sealed.
RUNTIME_OVERHEAD_S = 30.0
# IMB stops a message size after about -time seconds, but one iteration of a large message can
# overshoot it, and a loaded node is slower: budget twice the modelled work.
RUNTIME_SAFETY = 2.0
RUNTIME_FLOOR_MIN = 1
# Mappings whose placement only exists on a whole node: ranks spread over its L3/NUMA/package
# domains (or over nodes). `core` packs ranks onto the first cores the job was given.
EXCLUSIVE_MAPPINGS = frozenset({"l3", "numa", "socket", "node"})
DEFAULT_CELLS_PER_JOB = 20


def allocation(cell: Cell) -> str:
    """What a cell needs of its allocation, as the first part of its group's id. IMB and kernel
    cells never share a group: kernel groups wait for their stack's kernel build, IMB groups need
    not, and a group's log and resources stay those of one program family."""
    return f"{cell.kind}_{cell.stack}_{cell.transport}_{cell.placement}_np{cell.np}_t{cell.threads}"


def job_groups(config: dict[str, Any], cells: list[Cell]) -> dict[str, list[Cell]]:
    """Group id -> its cells: each allocation's cells in sorted order, cut every cells_per_job."""
    size = int(config["campaign"].get("cells_per_job", DEFAULT_CELLS_PER_JOB))
    by_allocation: dict[str, list[Cell]] = defaultdict(list)
    for cell in sort_cells(cells):
        by_allocation[allocation(cell)].append(cell)
    groups: dict[str, list[Cell]] = {}
    for key in sorted(by_allocation):
        members = by_allocation[key]
        for chunk, start in enumerate(range(0, len(members), size)):
            groups[f"{key}_{chunk}"] = members[start:start + size]
    return groups


def batch_jobs(config: dict[str, Any], cells: list[Cell]) -> int:
    """How many batch jobs (groups) the cells need under a scheduler profile."""
    return len(job_groups(config, cells))


def needs_exclusive(config: dict[str, Any], cell: Cell) -> bool:
    mode = config["campaign"].get("exclusive", "auto")
    return mode == "always" or (mode == "auto" and cell.mapping in EXCLUSIVE_MAPPINGS)


def slurm_extra(config: dict[str, Any], cell: Cell) -> str:
    """sbatch options the executor plugin does not derive from tasks/nodes/mem/runtime."""
    extra = [f"--ntasks-per-node={cell.ppn}"]
    if needs_exclusive(config, cell):
        extra.append("--exclusive")
    return " ".join(extra)


def cell_runtime_s(config: dict[str, Any], cell: Cell) -> float:
    """Seconds to budget for one cell: its program's modelled work x RUNTIME_SAFETY plus the
    per-cell overhead, never more than the launch timeout (the runner kills the launch there)
    plus that overhead; an unmodelled program gets that ceiling."""
    ceiling_s = float(config["campaign"]["timeout_s"]) + RUNTIME_OVERHEAD_S
    program = program_named(cell.kind, cell.benchmark)
    work_s = program.work_s(config, cell) if program is not None else None
    if work_s is None:
        return ceiling_s
    return min(ceiling_s, RUNTIME_OVERHEAD_S + RUNTIME_SAFETY * work_s)


def runtime_min(config: dict[str, Any], cells: list[Cell], attempt: int = 1) -> int:
    """Minutes to request for cells run one after another, at least RUNTIME_FLOOR_MIN; ``attempt``
    > 1 (a Snakemake retry) scales it up."""
    seconds = sum(cell_runtime_s(config, cell) for cell in cells)
    return max(RUNTIME_FLOOR_MIN, -(-int(seconds * max(1, attempt)) // 60))


def mem_mb(config: dict[str, Any], cells: list[Cell]) -> int:
    """Memory for cells run one after another: the largest request among them."""
    return max(program_of(cell).mem_mb(config, cell) for cell in cells)


def group_resources(config: dict[str, Any], cells: list[Cell], attempt: int = 1) -> dict[str, Any]:
    """The Snakemake resources of a group job (every cell of a group shares its allocation)."""
    first = cells[0]
    return {
        "tasks": first.np,
        # A hybrid rank owns its OpenMP threads' cores.
        "cpus_per_task": first.threads,
        # The executor plugin's `mpi` flag: set for multi-rank groups only. The plugin refuses an
        # MPI job of one task, and that refusal (in its submit thread) hangs the whole run.
        "mpi": "srun" if first.np > 1 else "",
        "nodes": first.nodes,
        "slurm_extra": slurm_extra(config, first),
        "runtime": runtime_min(config, cells, attempt),
        "mem_mb": mem_mb(config, cells),
    }

"""Cells cut into job groups, and what a group asks of a scheduler (profiles/slurm).

A group is the unit of one Snakemake job and one ``mpiatlas run-cell --group`` process: cells
of one kind and stack that share an allocation, cut in the campaign's sorted cell order into
chunks whose budgeted runtime (below) stays within ``campaign.job_minutes`` and which hold at
most ``campaign.cells_per_job`` cells, so a group's id and its cells are the same on every run
of the same config. Cutting by time rather than by count alone keeps a batch job a sensible
length on a cluster (fast cells share one job instead of queueing for hundreds) and keeps the
number of Snakemake jobs, whose count is what a dry run and the scheduler pay for, proportional
to the campaign's machine time. Its cells run one after another in one allocation; each is
sealed on its own, so a group re-run after a killed job skips its sealed cells and resumes at
the first unsealed one.

An allocation is what a scheduler hands out: nodes x tasks (ranks, ``--ntasks-per-node`` =
ranks / nodes) x cpus per task (threads), on whole nodes or not (``needs_exclusive``). The
transport and the mapping are not part of it: each cell plans its own placement and builds its
own launch (srun/hydra/mpirun argv, transport environment) inside the allocation
(mpiatlas.runner), so cells of every transport of a stack, and of every mapping with the same
exclusivity, share one (campaign.exclusive auto: `core` on the cores the job is given, every
other mapping on whole nodes; always/never: every mapping alike). Fewer, longer groups are fewer
Snakemake jobs: a 177k-cell campaign of 11 transports and 5 mappings is ~520 jobs (~870 at 2 h each, 1,100
per transport and mapping).
The group id names the allocation and the chunk::

    <kind>_<stack>_np<ranks>_t<threads>[_nodes<N>][_excl][_fill]_<chunk>

``_nodes<N>`` only over several nodes, ``_excl`` only on whole nodes: ``imb_intelmpi_np4_t1_0``
(4 cores of a shared node), ``imb_intelmpi_np4_t1_excl_0`` (a whole node: the l3, numa, socket
mappings), ``imb_intelmpi_np4_t1_nodes2_excl_0`` (2 whole nodes, 2 ranks each),
``kernel_intelmpi_np3_t1_nodes2_excl_fill_0`` (a spread mapping filling 2 whole nodes, core-n2). Under
``grouping: machine`` (no scheduler) a group is ``<kind>_<stack>_machine_<chunk>``.

A group's resources come from its cells: tasks = ranks, cpus per task = threads, nodes, whole
nodes if any of its cells needs them, runtime = the sum over its cells of (overhead + safety x
the program's modelled work), each capped by the launch timeout; memory = the largest request
among its cells.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypedDict, TypeVar

from mpiatlas.matrix.cells import Cell, sort_cells
from mpiatlas.programs import program_named, program_of

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

# Fixed cost of one cell inside a group: the launcher (hydra/srun, ~1 s), MPI_Init (seconds at a
# thousand nodes) and the program's warm-up, and a margin for a slow shared file system when the
# cell is sealed. The harness itself adds ~0.1 s per cell (bench/group_cost.py).
RUNTIME_OVERHEAD_S = 10.0
# IMB stops a message size after about -time seconds, but one iteration of a large message can
# overshoot it, and a loaded node is slower: budget twice the modelled work.
RUNTIME_SAFETY = 2.0
RUNTIME_FLOOR_MIN = 1
# The time *estimate* (not the budget): a launch's cost beyond its program's work when nothing goes
# wrong, the launcher and MPI_Init (~1-2 s for a few ranks here, longer with many) and sealing the cell.
LAUNCH_S = 2.0
LAUNCH_PER_RANK_S = 0.02
# The machine as a Snakemake resource, in thousandths: the local profile provides MACHINE_WHOLE
# (`resources: [machine=1000]`) and gives every job one thousandth by default; a job that must run
# alone (a cell group timing launches, the limits job, a validation campaign) asks for all of it, so
# no other job runs beside it and none starts while it runs. Not threads: under SLURM a job's
# threads become sbatch --cpus-per-task, and a thread count says nothing about exclusion.
MACHINE_RESOURCE = "machine"
MACHINE_WHOLE = 1000
MACHINE_SHARE = 1
# Mappings whose placement fits the cores a job is given: `core` packs ranks onto the first of
# them. Every other mapping places ranks by the whole node's topology (spread over its L3, die,
# NUMA or package domains, or over nodes; or a pair of cpus in one region, topology.REGION_MAPPINGS),
# which a job only sees on whole nodes: under campaign.exclusive auto those ask for them.
SHARED_NODE_MAPPINGS = frozenset({"core"})


_Function = TypeVar("_Function", bound=Callable[..., object])
_Key = TypeVar("_Key", bound=Hashable)


def fixed_signature(func: _Function) -> _Function:
    """``func`` with its signature stored on it (``__signature__``, which inspect.signature returns
    as is). Snakemake inspects an input or resource function's parameters on every call: for the
    group functions that is once per job and resource, and recomputing the signature each time
    was a fifth of a 177k-cell dry run."""
    func.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]
    return func


class Wildcards(Protocol):
    """What a group job's resource function reads of Snakemake's wildcards: the group's id."""

    group: str


def allocation(config: Campaign, cell: Cell) -> str:
    """What a cell needs of its allocation, as the first part of its group's id (see the module
    docstring). IMB and kernel cells never share a group: kernel groups wait for their stack's
    kernel build, IMB groups need not, and a group's log and resources stay those of one program
    family."""
    return _allocation_id(allocation_key(config)(cell))


# A cell's allocation: (kind, stack, ranks, threads, nodes, whole nodes, fills nodes).
AllocationKey = tuple[str, str, int, int, int, bool, bool]
# A cell's machine group under grouping `machine`: (kind, stack).
MachineKey = tuple[str, str]
# A cell's fields but its repetition (each a str or an int, Cell): what its modelled runtime depends on.
CostKey = tuple[str | int, ...]

# A cell's allocation fields but exclusivity, read at C level (a 177k-cell campaign keys every cell).
_ALLOCATION_FIELDS: Callable[[Cell], tuple[str, str, int, int, int]] = attrgetter("kind", "stack", "np", "threads",
                                                                                  "nodes")
_MACHINE_FIELDS: Callable[[Cell], MachineKey] = attrgetter("kind", "stack")
_ALL_BUT_REP: Callable[[Cell], CostKey] = attrgetter(*(f.name for f in fields(Cell) if f.name != "rep"))


def allocation_key(config: Campaign) -> Callable[[Cell], AllocationKey]:
    """A cell -> its allocation: (kind, stack, ranks, threads, nodes, whole nodes, fills nodes)."""
    mode = _exclusive_mode(config)

    def key(cell: Cell) -> AllocationKey:  # needs_exclusive and fills_nodes inlined: it runs once per cell
        fills = cell.nodes > 1 and cell.mapping != "node"
        return (*_ALLOCATION_FIELDS(cell),
                mode == "always" or (mode == "auto" and (cell.mapping not in SHARED_NODE_MAPPINGS or fills)), fills)

    return key


def _allocation_id(key: AllocationKey) -> str:
    # A cell filling nodes (core-n2) gets its own allocation: no --ntasks-per-node, which a `node`
    # cell of the same np and nodes sets (its srun steps would inherit it).
    kind, stack, np, threads, nodes, exclusive, fills = key
    return (f"{kind}_{stack}_np{np}_t{threads}" + (f"_nodes{nodes}" if nodes > 1 else "")
            + ("_excl" if exclusive else "") + ("_fill" if fills else ""))


def _machine_id(key: MachineKey) -> str:
    kind, stack = key
    return f"{kind}_{stack}_machine"


def _cells_by_id(cells: Iterable[Cell], key_of: Callable[[Cell], _Key],
                 id_of: Callable[[_Key], str]) -> dict[str, list[Cell]]:
    """Group id -> its cells, by repetition: ``key_of`` keys every cell, ``id_of`` names each key once."""
    by_key: dict[_Key, list[Cell]] = defaultdict(list)
    for cell in cells:
        by_key[key_of(cell)].append(cell)
    # Repetition-major within an allocation (a stable sort: each repetition keeps the campaign
    # order): the repetitions of a cell are spread over the group's run instead of back to back,
    # so slow drift of the machine (frequency, other tenants, a warming cache) shows up as the
    # spread of the repetitions, which the CIs carry, rather than as a bias between cells.
    return {id_of(key): sorted(members, key=attrgetter("rep")) for key, members in by_key.items()}


def _by_allocation(config: Campaign, cells: Iterable[Cell]) -> dict[str, list[Cell]]:
    return _cells_by_id(cells, allocation_key(config), _allocation_id)


def _by_machine(config: Campaign, cells: Iterable[Cell]) -> dict[str, list[Cell]]:
    return _cells_by_id(cells, _MACHINE_FIELDS, _machine_id)


# config `grouping` -> (the config, its sorted cells) -> group id -> the group's cells. `machine`: no
# scheduler, so the only boundaries that remain are those of the DAG (kernel cells wait for their
# stack's build, IMB cells for the stack); each group then also mixes process counts, whose cells
# the runner plans one by one anyway.
GROUPINGS: dict[str, Callable[[Campaign, Iterable[Cell]], dict[str, list[Cell]]]] = {
    "allocation": _by_allocation,
    "machine": _by_machine,
}


class GroupBudget(NamedTuple):
    """What a group's cells add up to: the sum of their budgeted seconds, the largest memory request."""

    seconds: float
    mem_mb: int


class JobGroups(dict[str, list[Cell]]):
    """Group id -> its cells (what job_groups returns), and each group's budget (``budgets``),
    added up while the chunks were cut: Snakemake asks for every group's resources, and going
    over the 177k cells of a large campaign again for them cost ~4 % of its dry run."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: dict[str, GroupBudget] = {}

    def is_later_remeasure(self, group: str) -> bool:
        """A campaign's own groups are never the later re-measure round's (GroupLookup)."""
        return False


def job_groups(config: Campaign, cells: list[Cell], costs: CellCosts | None = None, *,
               presorted: bool = False) -> JobGroups:
    """Group id -> its cells: each allocation's cells by repetition, then in sorted order, cut into chunks of at most
    cells_per_job cells and job_minutes of budgeted runtime (a cell longer than that on its own is
    a group of one). ``presorted``: ``cells`` are in sort_cells order already, without duplicates
    (programs.expand's), so they are not sorted again."""
    size = int(config.campaign.cells_per_job)
    budget_s = 60.0 * float(config.campaign.job_minutes)
    by_id = GROUPINGS[config.grouping](config, cells if presorted else sort_cells(cells))
    cost = (costs or CellCosts(config)).cost
    groups = JobGroups()
    for key in sorted(by_id):
        for chunk, (members, budget) in enumerate(_chunks(by_id[key], size, budget_s, cost)):
            groups[f"{key}_{chunk}"] = members
            groups.budgets[f"{key}_{chunk}"] = budget
    return groups


def _chunks(cells: list[Cell], size: int, budget_s: float,
            cost: Callable[[Cell], tuple[float, int]]) -> list[tuple[list[Cell], GroupBudget]]:
    """(cells, their budget) of each chunk, in order."""
    chunks: list[tuple[list[Cell], GroupBudget]] = []
    current: list[Cell] = []
    used_s, top_mb = 0.0, 0
    for cell in cells:
        cost_s, cell_mb = cost(cell)
        if current and (len(current) >= size or used_s + cost_s > budget_s):
            chunks.append((current, GroupBudget(used_s, top_mb)))
            current, used_s, top_mb = [], 0.0, 0
        current.append(cell)
        used_s += cost_s
        if cell_mb > top_mb:
            top_mb = cell_mb
    if current:
        chunks.append((current, GroupBudget(used_s, top_mb)))
    return chunks


class CellCosts:
    """A cell's budgeted runtime and memory, modelled once per distinct cell apart from its
    repetition (repetitions cost the same: a 177k-cell campaign of 10 repetitions models ~18k)."""

    def __init__(self, config: Campaign) -> None:
        self._config = config
        self._runtime: dict[CostKey, float] = {}
        self._costs: dict[CostKey, tuple[float, int]] = {}
        self._expected: dict[CostKey, float] = {}

    def cost(self, cell: Cell) -> tuple[float, int]:
        """(budgeted seconds, memory request in MB) of ``cell``: one look-up for both where a group is cut."""
        key = _ALL_BUT_REP(cell)
        found = self._costs.get(key)
        if found is None:
            found = self._costs[key] = (self.runtime_s(cell), program_of(cell).mem_mb(self._config, cell))
        return found

    def runtime_s(self, cell: Cell) -> float:
        key = _ALL_BUT_REP(cell)
        found = self._runtime.get(key)
        if found is None:
            found = self._runtime[key] = cell_runtime_s(self._config, cell)
        return found

    def mem_mb(self, cell: Cell) -> int:
        return self.cost(cell)[1]

    def expected_s(self, cell: Cell) -> float:
        """Seconds ``cell`` is expected to take: its program's modelled work plus one launch, no
        safety factor (an unmodelled program: the launch timeout)."""
        key = _ALL_BUT_REP(cell)
        found = self._expected.get(key)
        if found is None:
            found = self._expected[key] = cell_expected_s(self._config, cell)
        return found

    def relaunch_s(self, cell: Cell) -> float:
        """Seconds one more launch of ``cell`` may take inside a running job (a re-measure under the
        job's deadline, runner.run.Deadline): RUNTIME_SAFETY times its expected seconds. Not
        :meth:`runtime_s`: that adds the 10 s of fixed cost a job pays once per cell in its request,
        and priced so a group of short cells in its 1 min request set aside re-measures that had
        ample time."""
        return RUNTIME_SAFETY * self.expected_s(cell)


class Estimate(NamedTuple):
    """A campaign's time before it runs: the expected seconds and the budgeted (a scheduler's) ones."""

    cells: int
    expected_s: float
    budget_s: float

    def line(self) -> str:
        """One line: the expected minutes, and the budget as their upper bound."""
        return (f"time estimate: ~{self.expected_s / 60:.1f} min for {self.cells} cells "
                f"(the cost model's work + {LAUNCH_S:g} s per launch; at most {self.budget_s / 60:.0f} min "
                f"as budgeted for a scheduler)")


def estimate(config: Campaign, cells: list[Cell], costs: CellCosts | None = None) -> Estimate:
    """The time ``cells`` of ``config`` take run one after another (a campaign's groups never run side by side)."""
    costs = costs or CellCosts(config)
    return Estimate(len(cells), sum(map(costs.expected_s, cells)), sum(map(costs.runtime_s, cells)))


def batch_jobs(config: Campaign, cells: list[Cell]) -> int:
    """How many batch jobs (groups) the cells need under a scheduler profile."""
    return len(job_groups(config, cells))


def _exclusive_mode(config: Campaign) -> str:
    return config.campaign.exclusive


def needs_exclusive(config: Campaign, cell: Cell) -> bool:
    """Whether ``cell`` runs on whole nodes (campaign.exclusive: auto = every mapping but `core`)."""
    mode = _exclusive_mode(config)
    # A cell that fills nodes (core-n2) takes every core of a node before the next: whole nodes.
    return mode == "always" or (mode == "auto" and (cell.mapping not in SHARED_NODE_MAPPINGS or cell.fills_nodes))


def group_needs_exclusive(config: Campaign, cells: list[Cell]) -> bool:
    """Whether any of ``cells`` runs on whole nodes (then the group's allocation must be whole nodes)."""
    mode = _exclusive_mode(config)
    return mode == "always" or (mode == "auto" and any(needs_exclusive(config, c) for c in cells))


def slurm_extra(config: Campaign, cell: Cell, exclusive: bool | None = None) -> str:
    """sbatch options the executor plugin does not derive from tasks/nodes/mem/runtime; ``exclusive``
    (whole nodes) defaults to what ``cell`` needs."""
    # A cell that fills nodes has no one count of ranks per node (its launch step says where each goes).
    extra = [] if cell.fills_nodes else [f"--ntasks-per-node={cell.ppn}"]
    if needs_exclusive(config, cell) if exclusive is None else exclusive:
        extra.append("--exclusive")
    return " ".join(extra)


def cell_runtime_s(config: Campaign, cell: Cell) -> float:
    """Seconds to budget for one cell: its program's modelled work x RUNTIME_SAFETY plus the
    per-cell overhead, never more than the launch timeout (the runner kills the launch there)
    plus that overhead; an unmodelled program gets that ceiling."""
    ceiling_s = float(config.campaign.timeout_s) + RUNTIME_OVERHEAD_S
    program = program_named(cell.kind, cell.benchmark)
    work_s = program.work_s(config, cell) if program is not None else None
    if work_s is None:
        return ceiling_s
    return min(ceiling_s, RUNTIME_OVERHEAD_S + RUNTIME_SAFETY * work_s)


def cell_expected_s(config: Campaign, cell: Cell) -> float:
    """Seconds one launch of ``cell`` is expected to take (see :meth:`CellCosts.expected_s`)."""
    program = program_named(cell.kind, cell.benchmark)
    work_s = program.expected_work_s(config, cell) if program is not None else None
    if work_s is None:
        return float(config.campaign.timeout_s)
    return LAUNCH_S + LAUNCH_PER_RANK_S * cell.np + min(work_s, float(config.campaign.timeout_s))


def runtime_min(config: Campaign, cells: list[Cell], attempt: int = 1, costs: CellCosts | None = None,
                seconds: float | None = None) -> int:
    """Minutes to request for cells run one after another, at least RUNTIME_FLOOR_MIN; ``attempt``
    > 1 (a Snakemake retry) scales it up. ``seconds``: their budgets' sum, when already known."""
    if seconds is None:
        seconds = sum(map((costs or CellCosts(config)).runtime_s, cells))
    return max(RUNTIME_FLOOR_MIN, -(-int(seconds * max(1, attempt)) // 60))


def later_round_seconds(config: Campaign, cells: list[Cell], costs: CellCosts | None = None) -> float:
    """Seconds to budget for a later re-measure group (runner.run's later round): up to
    ``remeasure_later.launches`` passes over its cells, each after a wait for a quiet machine of at
    most ``max_wait_s`` plus the window that ends it. Budgeted as one launch per cell, a group of two
    short cells got the 1 min floor and SLURM ended it during its first wait on a busy node."""
    later = config.campaign.remeasure_later
    costs = costs or CellCosts(config)
    per_pass = later.max_wait_s + later.window_s + sum(map(costs.runtime_s, cells))
    return later.launches * per_pass


def mem_mb(config: Campaign, cells: list[Cell], costs: CellCosts | None = None) -> int:
    """Memory for cells run one after another: the largest request among them."""
    return max(map((costs or CellCosts(config)).mem_mb, cells))


class JobResources(TypedDict):
    """A group job's Snakemake resources (what :func:`group_resources` returns; comments there)."""

    cells: int
    tasks: int
    cpus_per_task: int
    mpi: str
    nodes: int
    slurm_extra: str
    runtime: int
    mem_mb: int


def group_resources(config: Campaign, cells: list[Cell], attempt: int = 1,
                    costs: CellCosts | None = None, budget: GroupBudget | None = None) -> JobResources:
    """The Snakemake resources of a group job (under grouping `allocation` every cell of a group
    shares its allocation; under `machine` the largest cell's, though no scheduler reads them);
    whole nodes if any of its cells needs them. ``budget``: what the cells add up to, when known
    (JobGroups.budgets)."""
    first = max(cells, key=attrgetter("np", "threads", "nodes"))
    # A cell filling nodes may hold fewer ranks than the nodes it is given (P = 1 over 2 nodes):
    # SLURM allocates at least a task per node.
    tasks = max(first.np, first.nodes)
    return {
        # How many cells the group holds: a plain count, shown by `snakemake -n` with the others.
        "cells": len(cells),
        "tasks": tasks,
        # A hybrid rank owns its OpenMP threads' cores.
        "cpus_per_task": first.threads,
        # The executor plugin's `mpi` flag: set for multi-rank groups only. The plugin refuses an
        # MPI job of one task, and that refusal (in its submit thread) hangs the whole run.
        "mpi": "srun" if tasks > 1 else "",
        "nodes": first.nodes,
        "slurm_extra": slurm_extra(config, first, group_needs_exclusive(config, cells)),
        "runtime": runtime_min(config, cells, attempt, costs, budget.seconds if budget else None),
        "mem_mb": budget.mem_mb if budget else mem_mb(config, cells, costs),
    }


class GroupLookup(Protocol):
    """Group id -> cells: the groups' dict, or one that also resolves later adaptive rounds'
    groups (mpiatlas.campaign.adaptive_rounds.RoundGroups)."""

    def get(self, group: str, default: Any = None) -> Any: ...

    def is_later_remeasure(self, group: str) -> bool: ...


class GroupResources:
    """Every group's resources for the workflow's ``resources:`` directive, computed once per group
    and attempt. Snakemake calls each resource of each job separately (7 per job, and again
    whenever it re-evaluates the job): computed per call, a 177k-cell campaign would model every
    cell's runtime and memory seven times over. Computed when first asked, not all up front:
    inside a batch job Snakemake parses the workflow again but asks for one group only. ``budgets``:
    those job_groups added up already (JobGroups.budgets; a group not in it is added up here)."""

    def __init__(self, config: Campaign, groups: GroupLookup, costs: CellCosts | None = None,
                 budgets: Mapping[str, GroupBudget] | None = None) -> None:
        self._config = config
        self._groups = groups
        self._costs = costs or CellCosts(config)
        self._budgets = budgets or {}
        self._computed: dict[tuple[str, int], JobResources] = {}

    def of(self, group: str, attempt: int = 1) -> JobResources:
        """The resources of ``group`` at Snakemake ``attempt``; a clear error for an unknown group."""
        found = self._computed.get((group, attempt))
        if found is None:
            cells = self._groups.get(group)
            if cells is None:
                raise ValueError(f"{group} is not a job group of this campaign")
            budget = self._budgets.get(group)
            if self._groups.is_later_remeasure(group):
                budget = GroupBudget(later_round_seconds(self._config, cells, self._costs),
                                     mem_mb(self._config, cells, self._costs))
            found = self._computed[(group, attempt)] = group_resources(self._config, cells, attempt, self._costs,
                                                                       budget)
        return found

    def resource(self, name: str) -> Callable[[Wildcards, int], object]:
        """A function Snakemake calls for resource ``name`` of a job (its group is a wildcard)."""
        if name not in JobResources.__required_keys__:
            raise ValueError(f"{name!r} is not a group job resource (one of {sorted(JobResources.__required_keys__)})")

        def value(wildcards: Wildcards, attempt: int) -> object:
            return self.of(wildcards.group, attempt).get(name)

        value.__name__ = f"group_{name}"
        return fixed_signature(value)

"""Run cells: one (``run_cell``) or a group of them in one process (``run_group``).

A cell: open it, plan its placement, let its program build the argv of one rank (from the host
or through the cell's image), launch it with the stack's launcher under the timeout, judge it,
seal it. A group runs its cells one after another, reading the node's topology once and reusing
each stack; a cell already sealed (by an earlier, interrupted run of the group) is skipped, so
a re-run resumes at the group's first unsealed cell. A cell sealed ``failed`` because its job
lost a node (runner.scheduler_state) is the cluster's failure, not the cell's: a re-run sets that
attempt aside (layout.lost_attempt) and runs the cell again.

A launch the machine disturbed (status.json ``quality: perturbed``, judged when it is sealed) is
measured again at the group's end, when the slow period has likely passed: up to
``campaign.remeasure`` extra launches per cell, each pass over the group in its own order (so the
re-measures of a cell are spread out like its repetitions). Each perturbed attempt is moved aside
whole (layout.perturbed_attempt) and the cell runs again into its raw directory; the final
status.json lists the attempts set aside (``remeasured``). The attempts on disk are the count, so a
group resumed after an interruption neither loses nor repeats one; a launch still perturbed when the
budget is spent stays sealed ``perturbed``.

A slow period as long as the group spends those re-measures too. The campaign's later re-measure
round (campaign.remeasure_later; mpiatlas.campaign.adaptive_rounds decides it once every group has run,
through the adaptive rounds' checkpoint) runs such cells' groups again with ``later``: each cell
still perturbed gets up to ``later.launches`` more launches, in passes over the group, each pass
after a bounded wait for a quiet machine (runner.quiet), recorded as ``quiet_wait`` in the
provenance and status of every launch of the pass.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from mpiatlas.evidence import mpi_library, provenance
from mpiatlas.matrix import layout
from mpiatlas.node import ssh_hosts, topology
from mpiatlas.matrix.layout import NODE_LOST, QUIET_WAIT, REMEASURED, STDERR, STDOUT
from mpiatlas.node.topology_record import topology_record
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.programs import program_of_spec
from mpiatlas.programs.base import Program
from mpiatlas.programs.kernels import thread_binding_env
from mpiatlas.evidence.provenance import UNSET, KnobsRecord, LikwidPin, Provenance, Unset
from mpiatlas.stats.quality import PERTURBED
from mpiatlas.runner import likwid_pin
from mpiatlas.runner.judge import judge, judge_library, judge_placement
from mpiatlas.runner.knob_overlay import overlay_launch, shell_replaced
from mpiatlas.runner.lifecycle import close_cell, error_outcome, image_facts, open_cell, read_status
from mpiatlas.runner.plan import (
    Plan,
    PlanRefused,
    cell_distribution,
    cell_nodes,
    interface_env,
    launch_hosts,
    launch_topology,
    plan,
    resolve_launcher,
)
from mpiatlas.runner.machine_record import MachineRecord, with_nodes
from mpiatlas.runner.process import Probe, run_launch
from mpiatlas.runner.quiet import QuietRule, QuietWaitRecord, wait_until_quiet
from mpiatlas.runner.remote_nodes import RemoteNodes
from mpiatlas.runner.scheduler_state import NodeLossFacts
from mpiatlas.stacks import LaunchSpec, Stack, StackError, get_stack

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec, KnobsSpec


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float,
         probe: Probe | None = None) -> tuple[int | None, str, str, float, MachineRecord | None]:
    """Run the launch (see runner.process for how its wall time is measured) and read its output."""
    finished = run_launch(argv, env, cwd, cwd / STDOUT, cwd / STDERR, timeout_s, probe)
    return (finished.exit_code, (cwd / STDOUT).read_text(errors="replace"), (cwd / STDERR).read_text(errors="replace"),
            finished.wall_s, finished.machine)


def launch_probe(spec: LaunchSpec, program: list[str], colocated: bool = False) -> Probe:
    """What the machine probe can see of this launch: its own ranks unless srun starts them; the
    cpus the cell planned for them (on this node: other nodes get runner.remote_nodes); the names the ranks'
    processes may have (any word of the program's argv, e.g. IMB-MPI1 behind ``apptainer exec``);
    whether its hosts share this machine (``colocated``: their ranks are this launch's, wherever
    started, runner.machine_state)."""
    planned = spec.pins if spec.pins is not None else \
        sorted({c for s in spec.pin_sets for c in s}) if spec.pin_sets is not None else None
    return Probe(ranks_are_descendants=spec.launcher != "srun",
                 planned_cpus=sorted(set(planned)) if planned else None,
                 rank_names=frozenset(Path(a).name for a in program), colocated=colocated)


@dataclass
class LaunchFacts:
    """What provenance keeps of a launch before it runs: argv, the relevant environment, the knob
    set and what it replaced (UNSET without one)."""

    argv: list[str]
    env: dict[str, str]
    knobs: KnobsRecord | Unset = UNSET


@dataclass
class RunFacts:
    """What provenance keeps of a launch that ran: exit code, its own wall time (``wall_s``, see
    mpiatlas.runner.process), what the machine did meanwhile (``machine``, runner.machine_state;
    lifecycle judges it when the cell is sealed)."""

    exit_code: int | None
    wall_s: float
    machine: MachineRecord | None


@dataclass
class PreparedLaunch:
    """A launch ready to run: its argv and whole environment, and what provenance keeps of it."""

    argv: list[str]
    env: dict[str, str]
    facts: LaunchFacts


def prepare_launch(stack: Stack, program: list[str], launch_spec: LaunchSpec, extra_env: dict[str, str] | None = None,
                   knobs: KnobsSpec | None = None) -> PreparedLaunch:
    """Build the stack's launch of ``program``. ``extra_env`` (e.g. OMP_NUM_THREADS) goes to the
    launcher, which passes it on to the ranks. ``knobs`` (the cell's knob set: name and env) override all of it
    (runner.knob_overlay gives the precedence); provenance records them and what they replaced."""
    launch = stack.launch(program, launch_spec)
    knob_env = dict(knobs["env"]) if knobs else {}
    overlaid = overlay_launch(launch, program, knob_env)
    launch = overlaid.launch
    extra = dict(extra_env or {})
    replaced = overlaid.replaced | {k: v for k, v in extra.items() if k in knob_env and v != knob_env[k]}
    base = stack.env()
    replaced |= shell_replaced(base, knob_env, replaced)
    env = base | launch.env | extra | knob_env
    # The loader's variables as the launch has them (the caller's LD_LIBRARY_PATH after the stack's).
    facts = LaunchFacts(launch.argv, provenance.relevant_env(stack.runtime_env() | launch.env | extra | knob_env, env))
    if knobs:
        facts.knobs = {"name": knobs["name"], "env": knob_env, "replaced": replaced}
    return PreparedLaunch(launch.argv, env, facts)


def run_prepared(prepared: PreparedLaunch, launch_spec: LaunchSpec, program: list[str], work: Path,
                 timeout_s: float, colocated: bool = False) -> tuple[int | None, str, str, RunFacts]:
    """Run a prepared launch in ``work`` with the timeout: exit code, stdout, stderr and its facts (a
    multi-node cell's other nodes probed before and after, runner.remote_nodes)."""
    remote = remote_probe(launch_spec)
    if remote is not None:
        remote.start()
    rc, stdout, stderr, wall, machine = _run(prepared.argv, prepared.env, work, timeout_s,
                                             launch_probe(launch_spec, program, colocated))
    if remote is not None and machine is not None:
        machine = with_nodes(machine, remote.finish(wall))
    return rc, stdout, stderr, RunFacts(rc, round(wall, 3), machine)


def remote_probe(spec: LaunchSpec) -> RemoteNodes | None:
    """The probe of a multi-node cell's nodes (runner.remote_nodes), through srun or the ssh hosts; None on one node."""
    nodes = int(spec.nodes or 1)
    if nodes <= 1:
        return None
    if spec.launcher == "srun":
        return RemoteNodes("srun", nodes)
    return RemoteNodes(spec.launcher, nodes, spec.hosts, spec.rsh_agent, spec.rsh_args or ())


@dataclass
class Shared:
    """What the cells of one process share: the node's topology per launcher, and the stacks."""

    topologies: dict[str, topology.Topology] = field(default_factory=dict)
    stacks: dict[tuple[str, str, str, str | None], Stack] = field(default_factory=dict)

    def topology(self, launcher: str) -> topology.Topology:
        if launcher not in self.topologies:
            self.topologies[launcher] = launch_topology(launcher)
        return self.topologies[launcher]

    def stack(self, spec: CellSpec) -> Stack:
        imb_from = _absolute(spec["stack"].get("imb_from"))
        key = (spec["stack"]["kind"], spec["stack"]["prefix"], spec["stack"]["source"], str(imb_from))
        if key not in self.stacks:
            self.stacks[key] = get_stack(key[0], key[1], source=key[2], imb_from=imb_from)
        return self.stacks[key]


@dataclass
class ImageFacts:
    """The image a containerised cell's ranks run in, as provenance keeps it."""

    image: str
    image_digest: str
    containerized: bool = True


def program_argv(program: Program, spec: CellSpec, stack: Stack) -> tuple[list[str], ImageFacts | None]:
    """argv of one rank: the host's program, or ``apptainer exec IMAGE ...`` (hybrid model) and its image."""
    container = spec.get("container")
    if not container:
        return program.host_argv(spec, stack), None
    facts = image_facts(container)
    return program.image_argv(spec, facts), ImageFacts(facts["image"], facts["digest"])


def _launch_and_judge(program: Program, stack: Stack, spec: CellSpec, work: Path,
                      record: Provenance, shared: Shared) -> Outcome:
    """Plan, launch and judge one cell. ``record`` is the cell's provenance (run_cell's): each stage
    returns its facts and they are put into it here, as they come, so a cell that ends part-way
    (unavailable, an error) keeps what was found before."""
    cell = spec["cell"]
    threads = int(cell.get("threads", 1))
    launcher = record.launcher = resolve_launcher(spec.get("launcher"))
    topo = shared.topology(launcher)
    record.topology = topo.summary()
    # The whole topology beside the raw output: the fits place the ranks on it wherever they run.
    (work / layout.TOPOLOGY).write_text(json.dumps(topology_record(topo), separators=(",", ":")) + "\n")
    if program.threaded:
        record.threads = threads
    stack.check_launcher(launcher)
    try:
        placed: Plan = plan(stack, spec, topo, launcher, threads, program.threaded)
    except PlanRefused as refused:
        record.merge(refused.facts)
        raise refused.cause from None
    record.merge(placed.facts)
    record.stack_version = stack.version()
    argv, image = program_argv(program, spec, stack)
    if image is not None:
        record.merge(image)
    extras = program.launch_extras(spec, placed.oversubscribed)
    nodes, ppn = cell_nodes(cell) if placed.fill is None else placed.fill
    rank_argvs, likwid = _likwid_argvs(placed, argv, stack)
    if likwid is not None:
        record.likwid = likwid
    launch_spec = LaunchSpec(
        np=cell["np"], transport=cell["transport"], pins=placed.pins, pin_sets=placed.pin_sets,
        oversubscribe=placed.oversubscribed, collective=extras.collective, algorithm=extras.algorithm,
        workdir=work, launcher=launcher, nodes=nodes, ppn=ppn, rank_argvs=rank_argvs,
        distribution=cell_distribution(cell), fill=placed.fill is not None, **launch_hosts(spec, launcher, nodes))
    # Hybrid ranks bound to cpu sets: OpenMP pins thread i to the i-th cpu of the set (checked by the program).
    omp = thread_binding_env(threads, placed.pin_sets) if program.threaded else {}
    prepared = prepare_launch(stack, argv, launch_spec, extras.env | omp | interface_env(stack, spec),
                              spec.get("knobs"))
    record.merge(prepared.facts)
    rc, stdout, stderr, ran = run_prepared(prepared, launch_spec, argv, work, spec["timeout_s"],
                                           colocated=record.colocated is True)
    record.merge(ran)
    if record.ssh is not UNSET:  # mpirun over ssh: judged on whole lines (the raw files stay as launched)
        stdout, stderr = ssh_hosts.rejoin_split_lines(stdout), ssh_hosts.rejoin_split_lines(stderr)
    # The library the ranks ran (their banner, the libmpi the loader gives the program): judged last.
    library = record.mpi_library = mpi_library.evidence(
        stack, argv, prepared.facts.env.get("LD_LIBRARY_PATH"), stdout + "\n" + stderr, record.containerized)
    if placed.likwid_sets is not None:
        return judge_library(judge(stack, spec, None, placed.likwid_sets, rc, stdout, stderr), library)
    if placed.node_facts is None:
        return judge_library(judge(stack, spec, placed.pins, placed.pin_sets, rc, stdout, stderr,
                                   placed.unpinned_note), library)
    # Over nodes, each rank's cpu set is checked by judge_placement; a hybrid rank's threads by its program.
    outcome = judge(stack, spec, placed.pins, None, rc, stdout, stderr,
                    thread_sets=placed.pin_sets if threads > 1 else None)
    outcome = judge_placement(outcome, spec, placed.pin_sets, placed.node_facts, stdout + "\n" + stderr,
                              placed.planned)
    if outcome.details is not None and "rank_hosts" in outcome.details:
        record.rank_hosts = outcome.details["rank_hosts"]
    outcome = judge_library(outcome, library)
    if placed.pin_sets is not None and outcome.details is not None and "pinning" in outcome.details:
        outcome.details["pinning"] = "cpu set per rank"
    return outcome


def _likwid_argvs(placed: Plan, argv: list[str],
                  stack: Stack) -> tuple[list[list[str]] | None, LikwidPin | None]:
    """Under the likwid pinner, each rank's argv (runner.likwid_pin) and what provenance keeps of it;
    (None, None) otherwise. The program sees the launch's own LD_LIBRARY_PATH, which likwid-pin would change."""
    if placed.likwid_sets is None or placed.likwid_pin is None:
        return None, None
    facts: LikwidPin = {"pin": placed.likwid_pin, "version": likwid_pin.likwid_version(placed.likwid_pin)}
    return likwid_pin.rank_argvs(placed.likwid_pin, placed.likwid_sets, argv, stack.env().get("LD_LIBRARY_PATH")), facts


def run_cell(spec: CellSpec, out: Path, shared: Shared | None = None,
             remeasured: list[SetAside] | None = None, quiet_wait: QuietWaitRecord | None = None) -> Outcome:
    """Run the cell described by ``spec`` (programs.cell_spec) into directory ``out``;
    ``remeasured``: its perturbed attempts set aside before (:func:`remeasured_record`), recorded
    in its status; ``quiet_wait``: what the later round waited for before this launch (runner.quiet)."""
    shared = shared or Shared()
    program = program_of_spec(spec)
    work, record = open_cell(spec, out)
    if quiet_wait is not None:
        record.quiet_wait = quiet_wait
    record.pinner = spec.get("pinner", "stack")
    likwid_topology = provenance.likwid_topology()
    if likwid_topology is not None:  # likwid's view of the node, beside hwloc's (record.topology)
        record.likwid_topology = likwid_topology
    outcome = Outcome("failed", "not run")
    try:
        stack = shared.stack(spec)
        outcome = _launch_and_judge(program, stack, spec, work, record, shared)
    except (topology.MappingUnavailable, StackError) as exc:
        outcome = error_outcome(exc)
    finally:
        if remeasured or quiet_wait is not None:
            details = dict(outcome.details or {})
            if remeasured:
                details[REMEASURED] = remeasured
            if quiet_wait is not None:
                details[QUIET_WAIT] = quiet_wait
            outcome = Outcome(outcome.status, outcome.reason, details)
        close_cell(work, out, spec, record, outcome)
    return outcome


@dataclass(frozen=True)
class Later:
    """The later re-measure round's budget (extra launches per cell beyond ``remeasure``) and wait."""

    launches: int
    rule: QuietRule


# Kept free before the job's end: sealing the last cell, writing the group's done file, and
# Snakemake's own exit inside the job (seconds on a slow shared file system).
DEADLINE_MARGIN_S = 20.0
# The done file's key for a cell whose re-measures the job's end left to the later round.
DEFERRED = "deferred"


@dataclass(frozen=True)
class Deadline:
    """When the scheduler ends the group's job (``at``, on ``clock``) and each cell's budgeted
    seconds (the group's order). A re-measure is extra work the job's time request does not hold
    in full: it starts only when the cell's budget still fits, so SLURM never kills a job over one
    (which would fail the workflow with every cell sealed). A launch left perturbed that way keeps
    its re-measures for the later round, whose job requests them."""

    at: float
    cell_s: tuple[float, ...]
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, cell_s: Sequence[float],
              clock: Callable[[], float] = time.monotonic) -> Deadline:
        """``seconds`` from now on ``clock``, less a margin for sealing the cell and the group's done file."""
        return cls(clock() + seconds - DEADLINE_MARGIN_S, tuple(cell_s), clock)

    def left_s(self) -> float:
        return self.at - self.clock()

    def fits(self, indices: Sequence[int]) -> list[int]:
        """The cells of ``indices``, in order, whose budgets fit one after another before the end. A
        cell too long for what is left is passed over, not the end of the pass: a shorter cell after
        it may still fit (its launch left perturbed keeps its re-measures for the later round)."""
        left, fitting = self.left_s(), []
        for i in indices:
            if self.cell_s[i] <= left:
                left -= self.cell_s[i]
                fitting.append(i)
        return fitting

    def deferred_note(self) -> str:
        """What the group log says of a re-measure the job's end left to the later round."""
        return f"re-measure left for the later round: the job ends in {max(0.0, self.left_s() + DEADLINE_MARGIN_S):.0f} s"


def run_group(specs: list[CellSpec], outs: list[Path], remeasure: int = 0,
              later: Later | None = None, deadline: Deadline | None = None) -> list[dict[str, Any]]:
    """Run a group's cells one after another in this process; skip the ones already sealed; then
    measure the perturbed ones again, up to ``remeasure`` extra launches each (module docstring);
    with ``later`` (the campaign's later round), up to ``later.launches`` more, each after a wait
    for a quiet machine.

    Returns one entry per cell: its id, status, whether it ran now, its quality and how many of its
    launches were set aside as perturbed. A CellInterrupted stops the group (the cells after it stay
    missing until the group runs again)."""
    shared = Shared()
    results = []
    for spec, out in zip(specs, outs, strict=True):
        out = Path(out)
        if layout.is_sealed(out):
            status = read_status(out)
            if status.get(NODE_LOST) is None:
                results.append(_entry(spec, status, ran=False))
                continue
            set_aside_lost(out, spec["id"], status[NODE_LOST])
        # A cell whose perturbed attempt was set aside just before an interruption runs here.
        run_cell(spec, out, shared, remeasured_record(out, spec["id"]))
        results.append(_entry(spec, read_status(out), ran=True))
    for i in _remeasured_now(specs, [Path(o) for o in outs], remeasure, shared, deadline):
        results[i] = _entry(specs[i], read_status(Path(outs[i])), ran=True)
    budget = remeasure
    if later is not None and later.launches > 0:
        budget += later.launches
        for i in _remeasured_later(specs, [Path(o) for o in outs], budget, later.rule, shared, deadline):
            results[i] = _entry(specs[i], read_status(Path(outs[i])), ran=True)
    if deadline is not None:
        # Said in the done file and the group log: the attempts' count alone would not tell a re-measure
        # the job's end skipped from one never due.
        for i in _wanting(specs, [Path(o) for o in outs], budget):
            results[i][DEFERRED] = deadline.deferred_note()
    return results


def _remeasured_later(specs: list[CellSpec], outs: list[Path], budget: int, rule: QuietRule,
                      shared: Shared, deadline: Deadline | None = None) -> list[int]:
    """The later round: passes over the group as :func:`_remeasured_now`, each pass after a bounded
    wait for a quiet machine (runner.quiet; once per pass, not per launch: on a node that stays busy
    the round costs ``max_wait_s`` per pass, not per cell), its record kept with each launch of the pass.
    Under a ``deadline`` a pass runs the cells whose budgets fit after its wait, and waits less when
    the job's end is near."""
    rerun: list[int] = []
    passes = 0
    while todo := _wanting(specs, outs, budget):
        if deadline is not None:
            todo = deadline.fits(todo)
            if not todo:
                break
            spare_s = deadline.left_s() - sum(deadline.cell_s[i] for i in todo)
            rule = replace(rule, max_wait_s=max(0.0, min(rule.max_wait_s, spare_s - rule.window_s)))
        passes += 1
        waited = wait_until_quiet(rule).record()
        waited["pass"], waited["cells_in_pass"] = passes, len(todo)
        for i in todo:
            set_aside_perturbed(outs[i], specs[i]["id"])
            run_cell(specs[i], outs[i], shared, remeasured_record(outs[i], specs[i]["id"]), waited)
        rerun += [i for i in todo if i not in rerun]
    return rerun


def _wanting(specs: list[CellSpec], outs: list[Path], budget: int) -> list[int]:
    """The indices of the cells still perturbed with re-measures left within ``budget``."""
    return [i for i, (spec, out) in enumerate(zip(specs, outs)) if wants_remeasure(out, spec["id"], budget)]


def _remeasured_now(specs: list[CellSpec], outs: list[Path], budget: int, shared: Shared,
                    deadline: Deadline | None = None) -> list[int]:
    """Re-measure the group's perturbed cells: passes over the group, in its order, each running
    every cell still perturbed with re-measures left once more (under a ``deadline``, those whose
    budgets still fit). Returns the indices re-run."""
    rerun: list[int] = []
    while todo := _wanting(specs, outs, budget):
        if deadline is not None and not (todo := deadline.fits(todo)):
            break
        for i in todo:
            set_aside_perturbed(outs[i], specs[i]["id"])
            run_cell(specs[i], outs[i], shared, remeasured_record(outs[i], specs[i]["id"]))
        rerun += [i for i in todo if i not in rerun]
    return rerun


def wants_remeasure(out: Path, cell_id: str, budget: int) -> bool:
    """Is the launch sealed in ``out`` perturbed, with fewer than ``budget`` attempts set aside?"""
    if budget <= 0 or not layout.is_sealed(out):
        return False
    status = read_status(out)
    return (status.get("quality") == PERTURBED and status.get(NODE_LOST) is None
            and len(layout.perturbed_attempts(out, cell_id)) < budget)


def set_aside_perturbed(out: Path, cell_id: str) -> Path:
    """Move a perturbed attempt out of raw/ (whole, by rename, as it was sealed) to the next
    ``perturbed/<cell id>/attempt<k>``, so that the cell can run again."""
    aside = layout.perturbed_attempt(out, cell_id, len(layout.perturbed_attempts(out, cell_id)) + 1)
    aside.parent.mkdir(parents=True, exist_ok=True)
    out.rename(aside)
    return aside


class SetAside(TypedDict):
    """A perturbed attempt set aside, as the cell's next status.json records it (``remeasured``)."""

    path: str  # relative to the campaign's results directory
    quality_reason: str | None
    quiet_wait: NotRequired[QuietWaitRecord]  # an attempt of the later round: what it had waited for


def remeasured_record(out: Path, cell_id: str) -> list[SetAside]:
    """The cell's attempts set aside as perturbed, as its next status.json records them: each one's
    path (relative to the campaign's results directory) and why it was judged perturbed."""
    results = layout.results_of(out, cell_id)
    attempts: list[SetAside] = []
    for attempt in layout.perturbed_attempts(out, cell_id):
        status = read_status(attempt)
        entry: SetAside = {"path": str(attempt.relative_to(results)), "quality_reason": status.get("quality_reason")}
        if status.get(QUIET_WAIT) is not None:
            entry["quiet_wait"] = status[QUIET_WAIT]
        attempts.append(entry)
    return attempts


def _entry(spec: CellSpec, status: dict[str, Any], ran: bool) -> dict[str, Any]:
    """A cell's line in the group's done file."""
    entry = {"cell": spec["id"], "status": status["status"], "ran": ran, "quality": status.get("quality"),
             REMEASURED: len(status.get(REMEASURED) or [])}
    if status.get(QUIET_WAIT) is not None:
        entry[QUIET_WAIT] = status[QUIET_WAIT]["reason"]
    return entry


def set_aside_lost(out: Path, cell_id: str, lost: NodeLossFacts) -> Path:
    """Move a node-lost attempt out of raw/ (whole, by rename) so that the cell can run again."""
    # Read back from status.json: get, as before, so that an older file without the key still moves.
    aside = layout.lost_attempt(out, cell_id, str(lost.get("slurm_job_id")))
    aside.parent.mkdir(parents=True, exist_ok=True)
    out.rename(aside)
    return aside


def _absolute(path: str | None) -> Path | None:
    # Launches run in a scratch directory: relative prefixes would point nowhere.
    return Path(path).resolve() if path else None

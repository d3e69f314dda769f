"""One launch as a child process: its own session, a blocking wait, a kill at its deadline.

``wall_s`` (provenance.json) is the launch's own time: ``time.perf_counter()`` read just before
the launcher is spawned (fork + exec of the launcher included: starting it is part of launching)
and again as soon as the kernel reports the launcher's exit (``os.waitid`` with ``WNOWAIT``). It
excludes opening the output files, reaping the process and reading its output, and no polling
sleep can add to it: the main thread blocks in ``waitid`` and a timer thread enforces the
timeout. ``WNOWAIT`` leaves the exited launcher a zombie until the timer is stopped, so its
process group id cannot be reused by another process while the timer may still signal it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from mpiatlas.node import pair_latency
from mpiatlas.node.pair_latency import PairProbe, Unprobed
from mpiatlas.runner import machine_state
from mpiatlas.runner.machine_record import LaunchMachine, MachineRecord, ProbeCost, ProbeFailed

# Seconds between SIGTERM and SIGKILL: srun passes TERM on to the step and needs a moment.
TERM_GRACE_S = 10.0


@dataclass(frozen=True)
class Finished:
    """How a launch ended: its exit code (None: killed at its deadline), its own wall time, and what
    the machine did meanwhile (runner.machine_state; None when not probed)."""

    exit_code: int | None
    wall_s: float
    machine: MachineRecord | None = None


@dataclass(frozen=True)
class Probe:
    """Whether to look for the ranks among the launch's own processes (not under srun, whose ranks
    slurmstepd starts), and the cpus the cell planned for them (node-level figures without ranks)."""

    ranks_are_descendants: bool = True
    planned_cpus: list[int] | None = None
    rank_names: frozenset[str] = frozenset()  # what the ranks' processes may be called (the program's argv)
    # The cell's hosts share this machine (emulated nodes): their ranks are looked for machine-wide too.
    colocated: bool = False


class Deadline:
    """A timer thread that TERMs, then KILLs, a process group once ``timeout_s`` have passed,
    unless :meth:`stop` is called first (the process exited)."""

    def __init__(self, pgid: int, timeout_s: float) -> None:
        self._pgid = pgid
        self._timeout_s = timeout_s
        self._exited = threading.Event()
        self.fired = False
        self._thread = threading.Thread(target=self._watch, name=f"deadline-{pgid}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        if self._exited.wait(self._timeout_s):
            return
        self.fired = True
        for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, None)):
            if not kill_group(self._pgid, sig) or (grace is not None and self._exited.wait(grace)):
                return

    def stop(self) -> bool:
        """Stop the timer; True when it had fired (the launch timed out)."""
        self._exited.set()
        self._thread.join()
        return self.fired


def kill_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_exited(pid: int) -> None:
    """Block until child ``pid`` has exited, without reaping it (it stays a zombie). A signal
    handler that raises (CellInterrupted) interrupts the wait; others resume it (PEP 475)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        # SIGCHLD ignored by whoever started us: the kernel reaped the child already (Popen.wait
        # then reports exit code 0, as it always has in that case).
        pass


def stop_now(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """TERM the launch's process group (srun passes it on to the step), KILL what is left: the
    cell was interrupted from outside, so this path may poll (Popen.wait with a timeout)."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, None)):
        if not kill_group(proc.pid, sig):
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # What the launcher started may outlive it (see run_launch); while any of it lives, the group id
    # is theirs, so this reaches only what is left of the launch.
    kill_group(proc.pid, signal.SIGKILL)


def run_launch(argv: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path,
               timeout_s: float, probe: Probe | None = None) -> Finished:
    """Run ``argv`` in ``cwd`` in its own session (a timeout kills every rank, not just the
    launcher), its output to the files ``stdout`` and ``stderr``. With ``probe``, the machine's
    state around and during the launch is recorded (runner.machine_state): the node snapshots are
    taken outside ``wall_s``; the sampler thread, started before it, is given the launcher's pid."""
    cgroup = machine_state.own_cgroup() if probe else None
    # The cpu pairs' round trip before the node snapshot: its own cpu time is not the launch's.
    pairs = _pairs_before(probe) if probe else None
    before, unprobed = _before(cgroup) if probe else (None, None)
    sampler = machine_state.RankSampler(probe.rank_names, probe.planned_cpus, machine_wide=probe.colocated) \
        if probe and probe.ranks_are_descendants else None
    with stdout.open("w") as out, stderr.open("w") as err:
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            if sampler:
                sampler.stop()
            raise
    # From here on a stop signal (CellInterrupted) stops the launch's session whatever it
    # interrupts: a launch left running would outlive this cell and skew every later one.
    deadline: Deadline | None = None
    try:
        if sampler:
            sampler.watch(proc.pid)
        deadline = Deadline(proc.pid, timeout_s)
        wait_exited(proc.pid)
        wall_s = time.perf_counter() - start
        timed_out = deadline.stop()
        if timed_out:
            # The launcher left after our TERM; what it started may not have (Intel MPI's mpirun is a
            # script over mpiexec.hydra, which outlived it with its proxy in CI). The launcher, still an
            # unreaped zombie, holds the group id: nothing else can have it.
            kill_group(proc.pid, signal.SIGKILL)
    except BaseException:
        if deadline:
            deadline.stop()
        if sampler:
            sampler.stop()
        stop_now(proc)
        raise
    machine = _machine(probe, proc.pid, sampler, before, cgroup, wall_s) if probe and before else unprobed
    if machine is not None and pairs is not None:
        machine = _with_pairs(machine, pairs)
    exit_code = proc.wait()  # reaps the zombie: returns at once
    return Finished(None if timed_out else exit_code, wall_s, machine)


def _pairs_before(probe: Probe) -> tuple[Path, list[tuple[int, int]], PairProbe] | Unprobed | None:
    """The planned cpus' pair round trips before the launch (node.pair_latency): the binary, the
    pairs and what they gave; why not, where they could not be probed; None for fewer than two cpus."""
    pairs = pair_latency.pairs_of(probe.planned_cpus)
    if not pairs:
        return None
    binary = pair_latency.tool_binary()
    if isinstance(binary, Unprobed):
        return binary
    return binary, pairs, pair_latency.probe(binary, pairs)


def _with_pairs(machine: MachineRecord,
                pairs: tuple[Path, list[tuple[int, int]], PairProbe] | Unprobed) -> MachineRecord:
    """The record with the pairs probed again after the launch (after its node snapshot, as the
    first probe ran before the first one), and their best since boot; a record the probe could not
    make stays as it is."""
    if "error" in machine:
        return machine
    out = machine.copy()
    if isinstance(pairs, Unprobed):
        out["pair_latency_missing"] = pairs.reason
        return out
    binary, planned, before = pairs
    out["pair_latency"] = pair_latency.record(binary, before, pair_latency.probe(binary, planned))
    return out


def _before(cgroup: Path | None) -> tuple[machine_state.NodeSnapshot | None, ProbeFailed | None]:
    """The node before the launch; a probe that cannot read /proc never stops the launch (its
    record then says why: judged neither ok nor perturbed)."""
    try:
        return machine_state.node_snapshot(cgroup), None
    except (OSError, ValueError) as exc:
        return None, {"error": f"machine probe: {exc}"}


def _machine(probe: Probe, pid: int, sampler: machine_state.RankSampler | None,
             before: machine_state.NodeSnapshot, cgroup: Path | None, wall_s: float) -> MachineRecord:
    """The launch's machine record, read while the launcher is still an unreaped zombie (its stat
    then holds the cpu time of every descendant reaped below it)."""
    cost_start = time.thread_time()
    if sampler:
        sampler.stop()
    try:
        return _record(probe, pid, sampler, before, cgroup, wall_s, cost_start)
    except (OSError, ValueError) as exc:
        return {"error": f"machine probe: {exc}"}


def _record(probe: Probe, pid: int, sampler: machine_state.RankSampler | None,
            before: machine_state.NodeSnapshot, cgroup: Path | None, wall_s: float,
            cost_start: float) -> LaunchMachine:
    if sampler and sampler.error:
        raise ValueError(f"sampler: {sampler.error}")
    # srun's own stat holds none of the ranks' cpu time (slurmstepd starts them): not the launch tree.
    tree = machine_state.read_process(pid) if probe.ranks_are_descendants else None
    after = machine_state.node_snapshot(cgroup)
    own: ProbeCost = {"sampler_cpu_s": round(sampler.cpu_s, 6) if sampler else 0.0,
           "samples": sampler.samples if sampler else 0, "tree_walks": sampler.scans if sampler else 0,
           "sampler_cpus": sampler.cpus if sampler else []}
    record = machine_state.launch_record(before, after, wall_s, sampler.ranks() if sampler else [],
                                         sampler.window if sampler else [], tree[0] if tree else None,
                                         probe.planned_cpus, own, probe.colocated)
    own["snapshot_cpu_s"] = round(time.thread_time() - cost_start, 6)
    return record

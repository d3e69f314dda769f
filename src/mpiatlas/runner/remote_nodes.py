"""The machine probe on every node of a multi-node cell, not only the launching one.

The ranks a multi-node launch starts on other nodes are not our processes (ssh/hydra, or srun's
slurmstepd, starts them), so their run-queue wait cannot be read from here. What can be read cheaply
is each node's state before and after the launch: its per-cpu times (``/proc/stat``: busy and stolen
time), its load average (``/proc/loadavg``) and its cpu pressure (``/proc/pressure/cpu``, where the
kernel has PSI). One ``cat`` of those files per node, by the path the launch itself takes:

* SLURM: one ``srun -N<n> --ntasks-per-node=1 -l`` step of ``cat`` (``-l`` labels each line with
  its task, so the nodes' outputs are told apart);
* mpirun over ssh: ``<ssh agent> [-F file] <host> 'cat ...'`` to every host at once.

Each node's record (``machine.nodes`` in provenance.json) holds its hostname, load before and after,
the busy and stolen share of its cpus over the launch (runner.quiet.look: all of its cpus, the ranks'
own work included, since the ranks' cpu time on a remote node is not ours to read), and its cpu
pressure share. mpiatlas.stats.quality judges a remote node on steal (the hypervisor took cpus from it);
busy share, load and pressure are kept as evidence, since on a node the ranks fill they are mostly
the ranks' own. Cost: two remote commands per launch (before, after), outside ``wall_s``; their wall
time is recorded (``probe.remote_s``). On the namespace cluster (../shared/tools/netns-cluster) an srun
step is 0.1-0.15 s and an ssh command 0.1-0.6 s, so ~0.2-1.2 s per multi-node launch (one IMB launch is
seconds); a probe that fails records why (``remote_error``) and never stops the launch.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence

from mpiatlas.runner.machine_record import NodeRecord, OtherNodes, RemoteCost
from mpiatlas.runner.machine_state import NodeSnapshot, parse_loadavg, parse_pressure, parse_proc_stat
from mpiatlas.runner.quiet import look

# What one node answers: its name first (the files end without a marker of their own).
SNAPSHOT_FILES = ("/proc/sys/kernel/hostname", "/proc/stat", "/proc/loadavg", "/proc/pressure/cpu")
LOADAVG_LINE = re.compile(r"^\d+\.\d+ \d+\.\d+ \d+\.\d+ \d+/\d+ \d+$")
SRUN_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
TIMEOUT_S = 60.0


def snapshot_argv() -> list[str]:
    return ["cat", *SNAPSHOT_FILES]


def parse_node(text: str) -> tuple[str, NodeSnapshot]:
    """(hostname, snapshot) from one node's ``cat`` of SNAPSHOT_FILES (pressure may be missing)."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise ValueError("remote node snapshot: no hostname line")
    load = [ln for ln in lines if LOADAVG_LINE.match(ln.strip())]
    if not load:
        raise ValueError(f"remote node snapshot of {lines[0].strip()}: no /proc/loadavg line")
    return lines[0].strip(), NodeSnapshot(parse_proc_stat(text), parse_loadavg(load[0]), parse_pressure(text), None)


def parse_srun_labelled(text: str) -> dict[str, NodeSnapshot]:
    """Every node's snapshot from ``srun -l`` output (lines ``<task>: ...``), by hostname."""
    by_task: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = SRUN_LABEL.match(line)
        if match:
            by_task.setdefault(int(match.group(1)), []).append(match.group(2))
    return dict(parse_node("\n".join(lines)) for _, lines in sorted(by_task.items()))


def srun_snapshots(nodes: int) -> dict[str, NodeSnapshot]:
    srun = shutil.which("srun")
    if srun is None:
        raise OSError("srun not on PATH")
    argv = [srun, "-N", str(nodes), "--ntasks-per-node=1", "-n", str(nodes), "-l", *snapshot_argv()]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    found = parse_srun_labelled(out.stdout)
    if len(found) != nodes:
        raise OSError(f"{' '.join(argv[:7])} answered for {len(found)} of {nodes} nodes "
                      f"(exit {out.returncode}): {out.stderr.strip()[-200:]}")
    return found


def ssh_snapshots(hosts: Sequence[str], agent: str, args: Sequence[str]) -> dict[str, NodeSnapshot]:
    """Every host at once, through the cell's ssh agent (the remote login shell runs the one string)."""
    command = shlex.join(snapshot_argv())
    procs = [(host, subprocess.Popen([agent, *args, host, command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)) for host in hosts]
    found = {}
    for host, proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise OSError(f"{agent} {host}: no answer within {TIMEOUT_S:g} s") from None
        try:
            name, snap = parse_node(stdout)
        except ValueError as exc:
            raise OSError(f"{agent} {host} (exit {proc.returncode}): {exc}; {stderr.strip()[-200:]}") from None
        found[f"{host}" if name == host else f"{host} ({name})"] = snap
    return found


class RemoteNodes:
    """Snapshots of a cell's nodes before and after its launch, through srun or the ssh agent."""

    def __init__(self, launcher: str, nodes: int, hosts: Sequence[str] | None = None, agent: str | None = None,
                 args: Sequence[str] = ()) -> None:
        self.launcher, self.nodes = launcher, nodes
        self.hosts, self.agent, self.args = list(hosts or []), agent, tuple(args)
        self.before: dict[str, NodeSnapshot] | None = None
        self.error: str | None = None
        self.remote_s = 0.0

    def _snapshots(self) -> dict[str, NodeSnapshot] | None:
        if self.error is not None:
            return None
        start = time.perf_counter()
        try:
            if self.launcher == "srun":
                return srun_snapshots(self.nodes)
            if self.agent is None or not self.hosts:
                raise OSError("no srun and no ssh hosts: the cell's nodes cannot be reached")
            return ssh_snapshots(self.hosts, self.agent, self.args)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self.error = str(exc)[:500]
            return None
        finally:
            self.remote_s += time.perf_counter() - start

    def start(self) -> None:
        self.before = self._snapshots()

    def finish(self, wall_s: float) -> OtherNodes:
        """The ``nodes`` list (and the probe's cost) to add to the launch's machine record."""
        after = self._snapshots() if self.before is not None else None
        cost: RemoteCost = {"remote_s": round(self.remote_s, 3), "remote_commands": 2}
        if self.before is None or after is None:
            return {"remote_error": self.error or "no snapshot", "remote_probe": cost}
        return {"nodes": nodes_record(self.before, after, wall_s), "remote_probe": cost}


def nodes_record(before: dict[str, NodeSnapshot], after: dict[str, NodeSnapshot], wall_s: float) -> list[NodeRecord]:
    """One entry per node seen both before and after (mpiatlas.stats.quality reads ``steal_*``)."""
    out: list[NodeRecord] = []
    for host in sorted(set(before) & set(after)):
        seen = look(before[host], after[host])
        pressure = None
        start, end = before[host].pressure_us, after[host].pressure_us
        if start is not None and end is not None and wall_s > 0:
            pressure = round((end - start) / 1e6 / wall_s, 4)
        out.append({"host": host, "cpus": len(after[host].cpus),
                    "loadavg_before": before[host].loadavg, "loadavg_after": after[host].loadavg,
                    "busy_share": seen.busy_share, "busy_ticks": seen.busy_ticks, "steal_share": seen.steal_share,
                    "steal_ticks": seen.steal_ticks, "total_ticks": seen.total_ticks,
                    "cpu_pressure_share": pressure})
    return out

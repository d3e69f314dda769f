"""Did the batch job a cell ran in lose a node? SLURM's own word, read as the job ends.

When a node of a running job fails (its slurmd stops answering, or an admin sets it DOWN), SLURM
ends the job: srun prints ``Node failure on <node>``, slurmstepd ``CANCELLED ... DUE TO NODE
FAILURE``, and every process of the job gets SIGTERM, then SIGKILL KillWait seconds later. The
job's state is NODE_FAIL only once all of them are gone; while the group process still runs,
``scontrol show job`` says ``JobState=COMPLETING Reason=NodeDown`` (measured on SLURM 22.05).
Both are recorded: the cell ran, and failed because the cluster lost a node under it, which is
not the same as being cancelled (a cell with no result, left missing) nor a failure of the
cell's own (sealed for good). A node-lost cell is sealed as ``failed`` with that reason, and
runs again on the next run (runner.run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TypedDict

# srun 22.05: "srun: error: Node failure on node2"; slurmstepd: "*** STEP 2.0 ON node1 CANCELLED
# AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***".
_SRUN_NODE_FAILURE = re.compile(r"Node failure on (\S+)")
_STEP_NODE_FAILURE = re.compile(r"CANCELLED AT \S+ DUE TO NODE FAILURE")
# scontrol show job -o: one line of Key=Value fields.
_FIELD = re.compile(r"\b(JobState|Reason)=(\S+)")
# squeue -o %L: the job's time left, [[days-]hours:]minutes:seconds, or UNLIMITED / NOT_SET / INVALID.
_TIME_LEFT = re.compile(r"(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)")
LOST_NODE_REASONS = ("NodeDown", "NODE_FAIL")
SCONTROL_TIMEOUT_S = 10  # SLURM's KillWait (30 s by default, 5 s on the namespace cluster) bounds us


@dataclass(frozen=True)
class JobState:
    """A SLURM job's state and reason, as ``scontrol show job`` gives them."""

    job_id: str
    state: str
    reason: str


class NodeLossFacts(TypedDict):
    """A node loss as status.json keeps it (``node_lost``)."""

    slurm_job_id: str
    nodes: list[str]
    job_state: str | None
    job_reason: str | None
    evidence: list[str]  # the launch's lines that said so


@dataclass(frozen=True)
class NodeLoss:
    """Why a cell's job ended: the nodes srun named, and the job's state from SLURM."""

    job_id: str
    nodes: tuple[str, ...]
    job: JobState | None
    evidence: tuple[str, ...]

    @property
    def reason(self) -> str:
        where = ", ".join(self.nodes) or "a node of the job"
        state = (f"JobState={self.job.state} Reason={self.job.reason}" if self.job is not None
                 else "state unknown (scontrol did not answer)")
        return f"node lost: {where} failed under SLURM job {self.job_id} ({state})"

    def facts(self) -> NodeLossFacts:
        return {"slurm_job_id": self.job_id, "nodes": list(self.nodes),
                "job_state": self.job.state if self.job else None, "job_reason": self.job.reason if self.job else None,
                "evidence": list(self.evidence)}


def parse_job_state(job_id: str, scontrol_output: str) -> JobState | None:
    """JobState and Reason from ``scontrol show job [-o]`` output (None without both)."""
    fields = dict(_FIELD.findall(scontrol_output))
    if "JobState" not in fields:
        return None
    return JobState(job_id, fields["JobState"], fields.get("Reason", "None"))


def slurm_job_state(job_id: str) -> JobState | None:
    """The job's state now, from slurmctld (None when scontrol is missing or does not answer)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run([scontrol, "show", "job", "-o", job_id], capture_output=True, text=True,
                             timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_job_state(job_id, out.stdout) if out.returncode == 0 else None


def node_failure_lines(launch_output: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nodes srun named as failed, the lines saying so) in a launch's output."""
    nodes: list[str] = []
    lines = []
    for line in launch_output.splitlines():
        found = _SRUN_NODE_FAILURE.search(line)
        if found or _STEP_NODE_FAILURE.search(line):
            lines.append(line.strip())
        if found and found.group(1) not in nodes:
            nodes.append(found.group(1))
    return tuple(nodes), tuple(lines)


def is_node_loss(job: JobState | None, failure_lines: tuple[str, ...]) -> bool:
    """SLURM says the job lost a node (its state or reason), or srun/slurmstepd said so."""
    return bool(failure_lines) or (job is not None and (job.state == "NODE_FAIL" or job.reason in LOST_NODE_REASONS))


def node_loss(launch_output: str, environ: dict[str, str] | None = None) -> NodeLoss | None:
    """The node loss that ended this process's SLURM job, or None (no job, or it ended otherwise:
    scancel, a time limit, preemption)."""
    job_id = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    if not job_id:
        return None
    nodes, lines = node_failure_lines(launch_output)
    job = slurm_job_state(job_id)
    if not is_node_loss(job, lines):
        return None
    return NodeLoss(job_id, nodes, job, lines)


def parse_time_left(squeue_output: str) -> float | None:
    """Seconds from ``squeue -h -o %L`` (None for UNLIMITED, NOT_SET, INVALID or anything else)."""
    match = _TIME_LEFT.fullmatch(squeue_output.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def job_time_left_s(environ: dict[str, str] | None = None) -> float | None:
    """Seconds before SLURM ends the job this process runs in at its time limit; None outside a
    job, for a job without a limit, or when squeue is missing or does not answer."""
    job = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    squeue = shutil.which("squeue")
    if not job or squeue is None:
        return None
    try:
        out = subprocess.run([squeue, "-h", "-j", job, "-o", "%L"], capture_output=True, text=True,
                             timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_time_left(out.stdout) if out.returncode == 0 else None

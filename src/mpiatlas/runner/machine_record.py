"""The ``machine`` record of a launch (provenance.json): what the machine did while it ran.

mpiatlas.runner.machine_state and mpiatlas.runner.remote_nodes write it, mpiatlas.stats.quality
judges it (the launch's trust: ok, perturbed or unknown), tidy and the report read it back from the
file. TypedDicts: the record is that JSON as it is, and the checker knows every key of it.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from mpiatlas.node.pair_latency import PairLatencyRecord

# Per cpu (or summed beyond PER_CPU_DETAIL): seconds in total, busy and stolen.
CpuSeconds = dict[str, dict[str, float]]


class RankRecord(TypedDict):
    """One rank as last seen: its cpus, its run-queue wait and run time, and its cpu time."""

    pid: int
    comm: str
    cpus: list[int] | str  # beyond PER_CPU_DETAIL cpus, Linux's cpulist form ("0-127")
    last_cpu: int
    observed_s: float
    wait_s: float
    run_s: float
    cpu_s: float
    wait_share: float | None
    wait_share_of_wall: NotRequired[float | None]


class WindowRecord(TypedDict):
    """The ranks' cpus between the first and the last sample that saw ranks."""

    span_s: float
    cpu: CpuSeconds
    ranks_cpu_s: float
    other_cpu_s: float
    other_cpu_share: float | None


class ProbeCost(TypedDict):
    """What watching the launch cost this process."""

    sampler_cpu_s: float
    samples: int
    tree_walks: int
    sampler_cpus: list[int]
    snapshot_cpu_s: NotRequired[float]


class RemoteCost(TypedDict):
    remote_s: float
    remote_commands: int


class NodeRecord(TypedDict):
    """One node of a multi-node cell, seen before and after the launch (runner.remote_nodes)."""

    host: str
    cpus: int
    loadavg_before: list[float]
    loadavg_after: list[float]
    busy_share: float
    busy_ticks: int
    steal_share: float
    steal_ticks: int
    total_ticks: int
    cpu_pressure_share: float | None


class OtherNodes(TypedDict, total=False):
    """What the probe of a multi-node cell's other nodes adds: the ``nodes``, or why there are none."""

    nodes: list[NodeRecord]
    remote_error: str
    remote_probe: RemoteCost


class LaunchMachine(OtherNodes):
    """The machine record of a probed launch (see machine_state.launch_record for each figure)."""

    scope: str  # "local node", or "every node of the cell" with the other nodes'
    wall_s: float
    ranks_observed: bool
    cpus: list[int]
    cpus_from: str
    loadavg_before: list[float]
    loadavg_after: list[float]
    cpu: CpuSeconds
    launch_cpu_s: float | None
    other_cpu_s: float | None
    other_cpu_share: float | None
    other_cpu_ticks: int | None
    cpu_ticks: int | None
    other_cpu_share_launch: float | None
    during_ranks: WindowRecord | None
    steal_share: float
    steal_ticks: int
    steal_of_ticks: int
    node_cpu_pressure_share: float | None
    cgroup_cpu_pressure_share: float | None
    n_ranks: int
    ranks_outside_tree: int
    ranks: list[RankRecord]
    wait_share: float | None
    probe: ProbeCost
    missing: NotRequired[str]  # what could not be seen, in words
    # The planned cpus' cache-line round trip before and after (node.pair_latency), or why not.
    pair_latency: NotRequired[PairLatencyRecord]
    pair_latency_missing: NotRequired[str]


class ProbeFailed(OtherNodes):
    """The machine record of a launch the probe could not watch (judged neither ok nor perturbed)."""

    error: str
    scope: NotRequired[str]


MachineRecord = LaunchMachine | ProbeFailed


def with_nodes(machine: MachineRecord, remote: OtherNodes) -> MachineRecord:
    """The launch's record with the other nodes' (a multi-node cell)."""
    out = machine.copy()
    if "nodes" in remote:
        out["nodes"] = remote["nodes"]
    if "remote_error" in remote:
        out["remote_error"] = remote["remote_error"]
    if "remote_probe" in remote:
        out["remote_probe"] = remote["remote_probe"]
    out["scope"] = "every node of the cell"
    return out

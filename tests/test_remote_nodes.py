"""Every node of a multi-node cell probed (runner.remote_nodes), not only the launching one.

tests/data/machine_state/remote holds what the probe's one command printed on the namespace cluster
(../shared/tools/netns-cluster, 2 nodes on this 2-core VM, 2026-11-27): ``srun -N2 --ntasks-per-node=1
-l cat ...`` twice, a second apart, and once more where the two tasks' labelled lines came
interleaved (srun_interleaved.txt), and one node's answer over
the cluster's real sshd. The ssh path runs here through an agent that runs the command on this
machine (as tests/test_two_node_ssh.py's probe test); the infra test runs both paths on the cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from mpiatlas.stats import quality
from mpiatlas.runner import remote_nodes as rn
from mpiatlas.runner.machine_state import parse_proc_stat
from mpiatlas.runner.run import remote_probe
from mpiatlas.stacks import LaunchSpec
from test_two_node import netns_cluster  # noqa: F401  (the cluster fixture)
from test_two_node_ssh import _fake_agent

DATA = REPO / "tests/data/machine_state/remote"


def _recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_recorded_srun_output_gives_each_node_its_snapshot() -> None:
    before = rn.parse_srun_labelled(_recorded("srun_before.txt"))
    after = rn.parse_srun_labelled(_recorded("srun_after.txt"))
    assert sorted(before) == ["node1", "node2"]
    assert before["node1"].cpus[1] == {"user": 464217, "nice": 97, "system": 130843, "idle": 631665, "iowait": 11050,
                                       "irq": 0, "softirq": 6405, "steal": 494}
    assert before["node1"].loadavg == [5.45, 3.72, 2.24] and before["node2"].pressure_us == 2134624314
    # A capture whose two tasks' lines came interleaved: each node still gets only its own.
    mixed = rn.parse_srun_labelled(_recorded("srun_interleaved.txt"))
    assert mixed["node1"].cpus[1]["user"] == 463908 and mixed["node2"].cpus[1]["user"] == 463909
    assert (mixed["node1"].pressure_us, mixed["node2"].pressure_us) == (2131221637, 2131226354)
    nodes = rn.nodes_record(before, after, wall_s=1.0)
    assert [n["host"] for n in nodes] == ["node1", "node2"]
    for node in nodes:
        b, a = before[node["host"]], after[node["host"]]
        total = sum(a.cpus[c][k] - b.cpus[c][k] for c in a.cpus for k in a.cpus[c])
        steal = sum(a.cpus[c]["steal"] - b.cpus[c]["steal"] for c in a.cpus)
        assert (node["total_ticks"], node["steal_ticks"], node["cpus"]) == (total, steal, 2)
        assert node["cpu_pressure_share"] == round((a.pressure_us - b.pressure_us) / 1e6, 4)
        assert node["loadavg_before"] == b.loadavg and node["loadavg_after"] == a.loadavg


def test_one_recorded_ssh_answer_and_a_missing_loadavg() -> None:
    host, snap = rn.parse_node(_recorded("ssh_node2.txt"))
    assert host == "node2" and len(snap.cpus) == 2 and len(snap.loadavg) == 3
    with pytest.raises(ValueError, match="remote node snapshot of node2: no /proc/loadavg line"):
        rn.parse_node("node2\n" + "\n".join(_recorded("ssh_node2.txt").splitlines()[1:4]))


def test_a_node_whose_cpus_were_stolen_perturbs_the_launch() -> None:
    def snap(steal: int, idle: int) -> dict:
        return parse_proc_stat(f"cpu0 1000 0 0 {idle} 0 0 0 {steal} 0 0\ncpu1 1000 0 0 {idle} 0 0 0 {steal} 0 0\n")

    from mpiatlas.runner.machine_state import NodeSnapshot

    before = {"node2": NodeSnapshot(snap(0, 0), [1.0] * 3, None, None)}
    after = {"node2": NodeSnapshot(snap(60, 140), [1.0] * 3, None, None)}  # 120 of 400 ticks stolen
    nodes = rn.nodes_record(before, after, wall_s=2.0)
    assert nodes[0]["steal_share"] == 0.3
    assert quality.remote_reasons({"nodes": nodes}, quality.DEFAULT_LIMITS) == [
        "the hypervisor stole 30 % of node node2's cpus"]
    judged, reason = quality.judge_launch({"nodes": nodes, "ranks": [], "steal_share": 0.0})
    assert judged == quality.PERTURBED and reason == "the hypervisor stole 30 % of node node2's cpus"


def test_the_ssh_path_reads_every_host_through_the_cells_agent(tmp_path: Path) -> None:
    agent = _fake_agent(tmp_path)
    probe = remote_probe(LaunchSpec(np=2, transport="ofi-tcp", nodes=2, hosts=["node1", "node2"],
                                    rsh_agent=str(agent), rsh_args=("-F", "/c/ssh_config")))
    assert probe is not None and probe.hosts == ["node1", "node2"]
    probe.start()
    added = probe.finish(wall_s=0.5)
    # This machine answered for both hosts: each entry names the host asked and the name it gave.
    name = Path("/proc/sys/kernel/hostname").read_text().strip()
    assert [n["host"] for n in added["nodes"]] == [f"node1 ({name})", f"node2 ({name})"]
    assert all(n["cpus"] == os.cpu_count() for n in added["nodes"])
    assert added["remote_probe"]["remote_commands"] == 2 and added["remote_probe"]["remote_s"] > 0
    assert remote_probe(LaunchSpec(np=2, transport="shm")) is None
    failing = rn.RemoteNodes("mpirun", 2, ["node1"], "/bin/false")
    failing.start()
    assert failing.finish(1.0)["remote_error"].startswith("/bin/false node1 (exit 1): remote node snapshot: no hostname")


@pytest.mark.infra
def test_every_node_of_the_namespace_cluster_answers_through_srun(netns_cluster: Path) -> None:  # noqa: F811
    """The srun path on the namespace cluster's two nodes (the client wrappers first on PATH), from
    a child process so that this process's PATH stays as it is."""
    code = ("from mpiatlas.runner.remote_nodes import RemoteNodes\n"
            "p = RemoteNodes('srun', 2); p.start(); r = p.finish(1.0)\n"
            "print(sorted(n['host'] for n in r['nodes']), r['remote_probe']['remote_commands'])")
    env = dict(os.environ, PATH=f"{netns_cluster / 'bin'}:{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['node1', 'node2'] 2"

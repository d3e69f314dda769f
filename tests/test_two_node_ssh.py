"""mpirun over ssh without a scheduler (issue 13, part 3; mpiatlas.node.ssh_hosts).

Unit tests: the hosts / hostfile / ssh keys and their errors; each stack's argv over hosts (exact
lists: Open MPI --host + plm_rsh_agent, hydra -hosts + an ssh bootstrap); every rank's host read from
the stacks' own output captured over ssh (tests/data/ssh/); the node probe through an agent. The
infra test runs config/test/two_node_ssh.yaml -- the cells of config/test/two_node_mixed.yaml, 4 ranks
over 2 nodes, 2 per node, block and cyclic -- on the namespace cluster's `head` through the hosts'
real sshd, with Snakemake's local profile (no SLURM), and checks every rank's host against the plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import REPO, campaign_workdir
from mpiatlas import programs, runner
from mpiatlas.node import multinode, ssh_hosts
from mpiatlas.spine.campaign import Campaign
from mpiatlas.matrix.config import ConfigError, load, validate
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.runner.judge import judge_placement, mixed_transport_evidence
from mpiatlas.stacks import LaunchSpec, StackError
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI
from test_two_node import NETNS_SUBNET, ONE_JOB_AT_A_TIME, netns_cluster  # noqa: F401  (the cluster fixture)
from test_two_node_mixed import BLOCK_HOSTS, CYCLIC_HOSTS

DATA = REPO / "tests" / "data" / "ssh"
SSH = "config/test/two_node_ssh.yaml"
MIXED = "config/test/two_node_mixed.yaml"
RESULTS = "results/two-node-ssh"
BOOT = "abcaa82f-da04-4ccd-b6c8-0d6e13fafbe2"
SHARED = [multinode.NodeFacts("node1", BOOT, 2), multinode.NodeFacts("node2", BOOT, 2)]
SSH_CONFIG = "/c/etc/ssh/ssh_config"


def base_config(**top: object) -> dict:
    """4 ranks over 2 nodes, 2 per node, block and cyclic, under mpirun; ``top`` adds hosts etc."""
    return validate({
        "campaign": {"name": "t", "repetitions": 1, "launcher": "mpirun", "allow_oversubscribe": True},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm+ofi-tcp"]}},
        "mappings": ["node"], "processes": [4], "nodes": [2], "ppn": [2], "placement": ["block", "cyclic"],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 4], "time_s": 0.1, "mem_gb": 0.5},
        **top,
    })


def ssh_config(**top: object) -> dict:
    return base_config(**{"hosts": ["node1", "node2"], **top})


# -- configuration ------------------------------------------------------------------------------


def test_hostfile_in_open_mpi_or_hydra_form() -> None:
    text = "# the cluster\nnode1 slots=2\nnode2:4   # hydra's form\nnode3\nnode4 slots=2 max_slots=4\n"
    assert ssh_hosts.parse_hostfile(text) == [
        ssh_hosts.Host("node1", 2), ssh_hosts.Host("node2", 4), ssh_hosts.Host("node3"), ssh_hosts.Host("node4", 2)]
    with pytest.raises(StackError, match=r"hosts.txt:2: expected 'HOST', 'HOST slots=N' or 'HOST:N', got 'node2 x=1'"):
        ssh_hosts.parse_hostfile("node1\nnode2 x=1\n", "hosts.txt")
    with pytest.raises(StackError, match="-oProxyCommand"):
        ssh_hosts.parse_hostfile("-oProxyCommand=x\n")


def test_hosts_keys_reach_the_cell_spec_and_bad_ones_are_named(tmp_path: Path) -> None:
    config = ssh_config(hosts=["node1", {"name": "node2", "slots": 2}], ssh={"config": SSH_CONFIG})
    cell = next(c for c in programs.cells_of_kind(config, "imb"))
    spec = programs.cell_spec(config, cell)
    assert spec["hosts"] == [{"name": "node1", "slots": None}, {"name": "node2", "slots": 2}]
    assert spec["ssh"] == {"agent": "ssh", "config": SSH_CONFIG}
    # Without hosts a spec is what it was.
    plain = programs.cell_spec(base_config(), cell)
    assert "hosts" not in plain and "ssh" not in plain
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:2\nnode2:2\n")
    spec = programs.cell_spec(base_config(hostfile=str(hostfile)), cell)
    assert [h["name"] for h in spec["hosts"]] == ["node1", "node2"] and spec["ssh"]["agent"] == "ssh"
    with pytest.raises(ConfigError, match="hosts and hostfile: give one of them"):
        ssh_config(hostfile=str(hostfile))
    with pytest.raises(ConfigError, match="hostfile: cannot read"):
        base_config(hostfile=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="listed more than once"):
        ssh_config(hosts=["node1", "node1"])
    with pytest.raises(ConfigError, match=r"needs campaign.launcher mpirun"):
        ssh_config(campaign={"name": "t", "repetitions": 1, "launcher": "srun"})
    with pytest.raises(ConfigError, match=r"hosts\.0"):
        ssh_config(hosts=["-oProxyCommand=touch /tmp/x"])
    with pytest.raises(ConfigError, match=r"ssh\.agent"):
        ssh_config(ssh={"agent": "ssh -v"})


def test_the_ssh_campaign_has_the_cells_of_the_slurm_campaign() -> None:
    """The same cells run through SLURM (two_node_mixed) and mpirun over ssh (two_node_ssh): one id each."""
    def ids(path: str) -> set[str]:
        config = load(REPO / path)
        return {c.id for kind in ("imb", "kernel") for c in programs.cells_of_kind(config, kind)}

    ssh, slurm = ids(SSH), ids(MIXED)
    assert len(ssh) == 20 and ssh == slurm


# -- argv over hosts ------------------------------------------------------------------------------


def _spec(distribution: str, **kw: object) -> LaunchSpec:
    return LaunchSpec(np=4, transport=str(kw.pop("transport")), nodes=2, ppn=2, hosts=["node1", "node2"],
                      distribution=distribution, rsh_agent="/usr/bin/ssh", rsh_args=("-F", SSH_CONFIG),
                      **kw)  # type: ignore[arg-type]


def test_open_mpi_runs_over_ssh_with_plm_rsh_agent_and_a_rankfile_naming_the_hosts(tmp_path: Path) -> None:
    ompi = OpenMPI(tmp_path / "ompi", source="system", version="4.1.4")
    both = [(0, 1)] * 4  # two co-located nodes sharing 2 cores: every rank on both (multinode.placement)
    launch = ompi.launch(["./coll"], _spec("cyclic", transport="ob1-vader+tcp", pin_sets=both, workdir=tmp_path,
                                           oversubscribe=True))
    assert launch.argv[1:] == [
        "--allow-run-as-root", "-np", "4", "--host", "node1:2,node2:2",
        "--mca", "plm_rsh_agent", "/usr/bin/ssh", "--mca", "plm_rsh_args", f"-F {SSH_CONFIG}",
        "--report-bindings", "--rankfile", str(tmp_path / "rankfile"), "--mca", "rmaps_rank_file_physical", "1",
        "--use-hwthread-cpus", "--bind-to", "hwthread", "--oversubscribe",
        "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp", "--mca", "btl_base_verbose", "1", "./coll"]
    # Cyclic: ranks 0, 2 on node1 and 1, 3 on node2, each on its cpu set.
    assert (tmp_path / "rankfile").read_text().splitlines() == [
        "rank 0=node1 slot=0,1", "rank 1=node2 slot=0,1", "rank 2=node1 slot=0,1", "rank 3=node2 slot=0,1"]
    # A real cluster: one cpu per rank, the same local cores on each host (block: 0, 1 on node1).
    ompi.launch(["./coll"], _spec("block", transport="ob1-vader+tcp", pins=[0, 1, 0, 1], workdir=tmp_path))
    assert (tmp_path / "rankfile").read_text().splitlines() == [
        "rank 0=node1 slot=0", "rank 1=node1 slot=1", "rank 2=node2 slot=0", "rank 3=node2 slot=1"]


def test_hydra_runs_over_ssh_with_its_bootstrap_and_one_binding_list_per_host(tmp_path: Path) -> None:
    impi = IntelMPI(tmp_path / "impi")
    launch = impi.launch(["IMB-MPI1"], _spec("cyclic", transport="shm+ofi-tcp", pin_sets=[(0, 1)] * 4))
    assert launch.argv[1:] == ["-n", "4", "-hosts", "node1,node2", "-ppn", "1", "-bootstrap", "ssh",
                               "-bootstrap-exec", "/usr/bin/ssh", "-bootstrap-exec-args", f"-F {SSH_CONFIG}",
                               "IMB-MPI1"]
    # One mask per rank of a host (measured: 4 masks for 2 local ranks is an Intel MPI error).
    assert launch.env["I_MPI_PIN_DOMAIN"] == "[0x3,0x3]" and launch.env["I_MPI_FABRICS"] == "shm:ofi"
    pinned = impi.launch(["IMB-MPI1"], _spec("cyclic", transport="shm+ofi-tcp", pins=[4, 4, 5, 5]))
    assert pinned.env["I_MPI_PIN_PROCESSOR_LIST"] == "4,5"
    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")
    launch = mpich.launch(["IMB-MPI1"], _spec("block", transport="shm+ofi-tcp", pin_sets=[(0, 1)] * 4))
    assert launch.argv[1:] == ["-n", "4", "-hosts", "node1,node2", "-ppn", "2", "-bind-to", "user:0+1,0+1",
                               "-launcher", "ssh", "-launcher-exec", "/usr/bin/ssh",
                               "-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-genv", "FI_PROVIDER", "tcp",
                               "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "2", "IMB-MPI1"]
    # MPICH's hydra takes the agent's options from its environment only.
    assert launch.env == {"HYDRA_TOPO_DEBUG": "1", "HYDRA_LAUNCHER_EXTRA_ARGS": f"-F {SSH_CONFIG}"}
    # Without hosts nothing of it appears.
    local = impi.launch(["IMB-MPI1"], LaunchSpec(np=2, transport="shm"))
    assert local.argv[1:] == ["-n", "2", "IMB-MPI1"]


# -- every rank's host, from the stacks' own output over ssh --------------------------------------


def test_rank_hosts_from_open_mpi_report_bindings_and_intel_pin_table() -> None:
    ompi_out = (DATA / "openmpi_ob1-vader+tcp_cyclic.err").read_text()
    assert ssh_hosts.rank_hosts(ompi_out) == CYCLIC_HOSTS
    impi_out = (DATA / "intelmpi_shm+ofi-tcp_block.out").read_text()
    assert ssh_hosts.rank_hosts(impi_out) == BLOCK_HOSTS
    # srun's lines, where there are some, come first (tests/data/mixed: Intel MPI under srun).
    srun_out = (REPO / "tests/data/mixed/intelmpi_shm+ofi-tcp_cyclic.err").read_text()
    assert ssh_hosts.rank_hosts(srun_out) == CYCLIC_HOSTS
    # MPICH's hydra names no rank's host: nothing is guessed.
    assert ssh_hosts.rank_hosts((DATA / "mpich_shm+ofi-tcp_cyclic.out").read_text()) == {}


def test_a_rank_line_split_by_hydra_over_ssh_is_rejoined_before_the_judge(tmp_path: Path) -> None:
    # Intel MPI over ssh, block: rank 2's "[2] " prefix, then rank 0's whole line, then rank 2's text.
    split = (DATA / "intelmpi_shm+ofi-tcp_block_split.out").read_text()
    segment = "MPI startup(): shm segment size (1068 MB per rank) * (2 local ranks) = 2136 MB total"
    assert f"[0] [2] {segment}\n{segment}\n" in split
    impi = IntelMPI(tmp_path / "impi")
    assert mixed_transport_evidence(impi, "shm+ofi-tcp", split, nodes=2)["transport_ok"] is False
    whole = ssh_hosts.rejoin_split_lines(split)
    assert f"[2] {segment}\n[0] {segment}\n" in whole
    assert whole.replace(f"[2] {segment}\n[0] {segment}", "") == split.replace(f"[0] [2] {segment}\n{segment}", "")
    details = mixed_transport_evidence(impi, "shm+ofi-tcp", whole, nodes=2)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["shm"], "cross_node": ["tcp"]}
    assert ssh_hosts.rank_hosts(whole) == BLOCK_HOSTS
    # Lines of one rank each are left alone (IMB's tables, Open MPI's stderr).
    ompi_out = (DATA / "openmpi_ob1-vader+tcp_cyclic.err").read_text()
    assert ssh_hosts.rejoin_split_lines(ompi_out) == ompi_out


def test_cells_over_ssh_are_judged_like_slurm_cells(tmp_path: Path) -> None:
    ompi = OpenMPI(tmp_path / "ompi", source="system", version="4.1.4")
    output = (DATA / "openmpi_ob1-vader+tcp_cyclic.err").read_text()
    # Open MPI's per-pair lines: vader within node1 / node2, tcp between them.
    details = mixed_transport_evidence(ompi, "ob1-vader+tcp", output, nodes=2)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["vader"], "cross_node": ["tcp"]}
    both = {"obtained_binding": {str(r): [0, 1] for r in range(4)}}
    cyclic = {"cell": {"np": 4, "nodes": 2, "distribution": "cyclic"}}
    out = judge_placement(Outcome("ok", None, dict(both)), cyclic, [(0, 1)] * 4, SHARED, output)
    assert out.status == "ok" and out.details["rank_hosts"] == {str(r): h for r, h in CYCLIC_HOSTS.items()}
    block = {"cell": {"np": 4, "nodes": 2, "distribution": "block"}}
    out = judge_placement(Outcome("ok", None, dict(both)), block, [(0, 1)] * 4, SHARED, output)
    assert out.status == "invalid" and "the block placement puts them on one node" in out.reason
    # MPICH over ssh: no host per rank, so the placement is unproven and the cell invalid, said so.
    mpich_out = (DATA / "mpich_shm+ofi-tcp_cyclic.out").read_text()
    out = judge_placement(Outcome("ok", None, dict(both)), cyclic, None, SHARED, mpich_out)
    assert out.status == "invalid" and "reported the host of 0 of 4 ranks" in out.reason


# -- the node probe through the agent, and the cells that cannot run ------------------------------


def _fake_agent(tmp_path: Path) -> Path:
    """An 'ssh' that runs the remote command here (this machine answers for every host)."""
    agent = tmp_path / "fake-ssh"
    agent.write_text('#!/bin/sh\nwhile [ "$1" = -F ]; do shift 2; done\nshift\nexec /bin/sh -c "$1"\n')
    agent.chmod(0o755)
    return agent


def test_the_probe_goes_through_the_agent_and_names_what_failed(tmp_path: Path) -> None:
    agent = _fake_agent(tmp_path)
    facts = ssh_hosts.probe_hosts([ssh_hosts.Host("node1")], ssh_hosts.Ssh(str(agent), ("-F", SSH_CONFIG)))
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert [(f.host, f.boot_id, f.cpus) for f in facts] == [(os.uname().nodename, boot, os.cpu_count())]
    with pytest.raises(StackError, match=r"failed: probing host node1 with /bin/false node1 \(exit 1\)"):
        ssh_hosts.probe_hosts([ssh_hosts.Host("node1")], ssh_hosts.Ssh("/bin/false"))


def test_cells_over_more_hosts_or_slots_than_given_are_unavailable(tmp_path: Path) -> None:
    def run(config: Campaign, name: str) -> Outcome:
        cell = next(c for c in programs.cells_of_kind(config, "imb") if "placement=block" in c.id)
        config = config.revised(campaign={"stacks_dir": str(REPO / ".stacks")})
        return runner.run_cell(programs.cell_spec(config, cell), tmp_path / name)

    out = run(ssh_config(hosts=["node1"]), "a")
    assert out.status == "unavailable" and "hosts lists 1: ['node1']" in out.reason
    out = run(ssh_config(hosts=[{"name": "node1", "slots": 1}, "node2"]), "b")
    assert out.status == "unavailable" and "host(s) node1 (1) have fewer slots" in out.reason
    out = run(ssh_config(ssh={"agent": "no-such-ssh-agent"}), "c")
    assert out.status == "unavailable" and "ssh agent 'no-such-ssh-agent'" in out.reason


# -- on the namespace cluster, through its real sshd ----------------------------------------------


@pytest.fixture(scope="module")
def ssh_cluster(netns_cluster: Path) -> Path:  # noqa: F811
    """The module's namespace cluster with a real sshd on every host (`cluster.sh sshd start`; its
    `down` stops them)."""
    env = dict(os.environ, NETNS_ROOT=str(netns_cluster), SUBNET=NETNS_SUBNET)
    done = subprocess.run([str(netns_cluster / "cluster.sh"), "sshd", "start"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"cluster.sh sshd start: {done.stderr[-2000:]}"
    return netns_cluster


def _run_on_head(cluster: Path, work: Path, timeout: float) -> subprocess.CompletedProcess:
    """``mpiatlas campaign`` (local profile, one job at a time) on the cluster's `head` host: launchers
    must run inside the cluster (netns-cluster README, trap 3)."""
    argv = [str(cluster / "bin" / "on"), "head", sys.executable, "-m", "mpiatlas.cli", "campaign",
            "--config", "config/campaign.yaml", "--directory", str(work), *ONE_JOB_AT_A_TIME]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.infra
def test_the_mixed_cells_run_through_mpirun_over_ssh(ssh_cluster: Path, tmp_path: Path) -> None:
    work = campaign_workdir(tmp_path, SSH)
    path = work / "config" / "campaign.yaml"
    data = yaml.safe_load(path.read_text())
    data["ssh"]["config"] = str(ssh_cluster / "etc" / "ssh" / "ssh_config")
    path.write_text(yaml.safe_dump(data))
    done = _run_on_head(ssh_cluster, work, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = pl.read_parquet(work / RESULTS / "tidy" / "cells.parquet")
    assert cells.height == 20, cells.select("cell", "status").rows()
    # MPICH's hydra names no rank's host over ssh: its cells are invalid, with that reason.
    mpich = cells.filter(pl.col("stack") == "mpich")
    assert mpich.height == 8 and set(mpich["status"]) == {"invalid"}
    assert all("reported the host of 0 of 4 ranks" in r for r in mpich["reason"]), mpich["reason"].to_list()
    measured = cells.filter(pl.col("stack") != "mpich")
    assert measured.height == 12 and set(measured["status"]) == {"ok"}, measured.select("cell", "reason").rows()
    intra, inter = {"intelmpi": "shm", "openmpi": "vader"}, {"intelmpi": "tcp", "openmpi": "tcp"}
    for row in measured.iter_rows(named=True):
        raw = work / RESULTS / "raw" / row["cell"]
        status = json.loads((raw / "status.json").read_text())
        prov = json.loads((raw / "provenance.json").read_text())
        block = "/placement=block/" in row["cell"]
        # Every rank on the host its placement plans, as the stack's own output says.
        assert json.loads(row["hosts"]) == {str(r): h for r, h in (BLOCK_HOSTS if block else CYCLIC_HOSTS).items()}
        assert status["placement_ok"] is True and status["transport_ok"] is True
        assert status["pair_classes"] == {"on_node": [intra[row["stack"]]], "cross_node": [inter[row["stack"]]]}
        # Launched by mpirun over the real sshd (no SLURM), the hosts probed through the same ssh.
        assert row["launcher"] == "mpirun" and not row["slurm_job_id"]
        assert prov["ssh"] == {"agent": "/usr/bin/ssh", "args": ["-F", data["ssh"]["config"]]}
        argv = prov["argv"]
        if row["stack"] == "openmpi":
            assert argv[argv.index("plm_rsh_agent") + 1] == "/usr/bin/ssh" and "node1:2,node2:2" in argv
        else:
            assert argv[argv.index("-bootstrap") + 1] == "ssh" and argv[argv.index("-hosts") + 1] == "node1,node2"
        assert [f["host"] for f in prov["node_facts"]] == ["node1", "node2"] and prov["colocated"] is True

    # The coll kernel's own records (each rank writes its host) agree with the stack's output.
    coll = pl.read_parquet(work / RESULTS / "tidy" / "kernel_coll.parquet")
    for cell_id, ranks in coll.group_by("cell"):
        planned = BLOCK_HOSTS if "/placement=block/" in str(cell_id[0]) else CYCLIC_HOSTS
        assert set(ranks.select("rank", "host").iter_rows()) == set(planned.items()), cell_id

    summary = pl.read_parquet(work / RESULTS / "tidy" / "imb_summary.parquet")
    rows = summary.filter((pl.col("benchmark") == "PingPong") & (pl.col("bytes") == 4)
                          & (pl.col("stack") == "intelmpi"))
    on_node = rows.filter(pl.col("label").str.contains("placement=block"))["t_median_usec"]
    cross = rows.filter(~pl.col("label").str.contains("placement=block"))["t_median_usec"]
    cells = pl.read_parquet(work / RESULTS / "tidy" / "cells.parquet").filter(
        (pl.col("benchmark") == "PingPong") & (pl.col("stack") == "intelmpi"))
    for name, medians, block in (("on-node (block)", on_node, True), ("cross-node (cyclic)", cross, False)):
        if medians.len():
            print(f"intelmpi over ssh, 4 B PingPong {name}: {medians[0]:.3g} us")
            assert medians[0] > 0
            continue
        # No median: every launch of the series was judged untrusted (a busy machine), and the table says so.
        mine = cells.filter(pl.col("cell").str.contains("/placement=block/") == block)
        assert mine.height > 0 and set(mine["quality"]) <= {"perturbed", "unknown"}, (name, mine.select("cell", "quality"))

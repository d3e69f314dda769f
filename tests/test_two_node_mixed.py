"""Mixed transports, ranks per node and block/cyclic placement over nodes (issue 13, parts 1 and 2).

Unit tests: each stack's argv for a mixed transport, ``ppn`` and the placement (exact lists); the
``placement=block`` id segment; the per-pair-class judge on verbose output captured from real runs
on the namespace cluster (tests/data/mixed/, see its README). The infra test runs
config/test/two_node_mixed.yaml through SLURM on that cluster: 4 ranks over 2 nodes, 2 per node,
oversubscribed on this 2-core machine, so it checks function (paths, hosts), not speed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, campaign_workdir, run_campaign
from mpiatlas import programs
from mpiatlas.node import multinode
from mpiatlas.matrix.cells import Cell, parse_id
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.runner.judge import judge_placement, mixed_transport_evidence
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.stacks import LaunchSpec, StackError
from mpiatlas.stacks.base import per_node_local, srun_argv
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI
from test_two_node import ONE_JOB_AT_A_TIME, PROFILE, netns_cluster  # noqa: F401  (the cluster fixture)

DATA = REPO / "tests" / "data" / "mixed"
MIXED = "config/test/two_node_mixed.yaml"
RESULTS = "results/two-node-mixed"
BOOT = "98759039-6b1a-4554-bf2c-6e97bb14959e"
SHARED = [multinode.NodeFacts("node1", BOOT, 2), multinode.NodeFacts("node2", BOOT, 2)]
BLOCK_HOSTS = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
CYCLIC_HOSTS = {0: "node1", 1: "node2", 2: "node1", 3: "node2"}


def captured(name: str) -> str:
    return (DATA / name).read_text()


@pytest.fixture
def fake_srun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")


# -- argv --------------------------------------------------------------------------------------


def test_srun_argv_places_block_or_cyclic_and_binds_by_local_task(fake_srun: None) -> None:
    def spec(distribution: str, **kw: object) -> LaunchSpec:
        return LaunchSpec(np=4, transport="shm+ofi-tcp", nodes=2, ppn=2, launcher="srun", distribution=distribution,
                          **kw)  # type: ignore[arg-type]

    sets = [(0,), (1,), (0,), (1,)]  # block: ranks 0,1 on node 0 and 2,3 on node 1, local task j on cpu j
    assert srun_argv(spec("block", pin_sets=sets)) == [
        "/usr/bin/srun", "--mpi=pmix", "-n", "4", "--kill-on-bad-exit=1", "-N", "2", "--distribution=block",
        "--ntasks-per-node", "2", "--cpus-per-task=1", "--cpu-bind=verbose,mask_cpu:0x1,0x2"]
    cyclic = [(0,), (0,), (1,), (1,)]  # cyclic: ranks 0,2 on node 0 (local 0, 1), ranks 1,3 on node 1
    assert srun_argv(spec("cyclic", pin_sets=cyclic)) == [
        "/usr/bin/srun", "--mpi=pmix", "-n", "4", "--kill-on-bad-exit=1", "-N", "2", "--distribution=cyclic",
        "--ntasks-per-node", "2", "--cpus-per-task=1", "--cpu-bind=verbose,mask_cpu:0x1,0x2"]
    assert per_node_local([5, 6, 5, 6], 2, "block") == [5, 6] and per_node_local([5, 5, 6, 6], 2, "cyclic") == [5, 6]
    with pytest.raises(StackError, match="local task 0 of node 0 has 5"):
        per_node_local([5, 6, 6, 5], 2, "block")
    with pytest.raises(StackError, match="unknown placement over nodes 'round'"):
        srun_argv(spec("round"))


def test_mixed_transport_argv_of_each_stack(tmp_path: Path, ompi41: OpenMPI, fake_srun: None) -> None:
    # argv only: nothing is launched, so no SLURM is needed (fake_srun answers `which srun`).
    hosts = ["node1", "node2"]
    # Open MPI 4.1: vader within a node, tcp between; ppr:2:node, numbered by slot (block) or node (cyclic).
    for distribution, rank_by in (("block", "slot"), ("cyclic", "node")):
        launch = ompi41.launch(["./a.out"], LaunchSpec(np=4, transport="ob1-vader+tcp", nodes=2, ppn=2, hosts=hosts,
                                                       distribution=distribution))
        assert launch.argv[1:] == [
            "--allow-run-as-root", "-np", "4", "--host", "node1:2,node2:2", "--report-bindings",
            "--map-by", "ppr:2:node", "--rank-by", rank_by, "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
            "--mca", "btl_base_verbose", "1", "./a.out"]
    ompi5 = OpenMPI(tmp_path / "ompi5", source="pypi", version="5.0.11")
    assert ompi5.transport("ob1-sm+tcp").args == ("--mca", "pml", "ob1", "--mca", "btl", "self,sm,tcp")
    assert (ompi41.transport("ob1-sm+tcp").expect, ompi41.transport("ob1-sm+tcp").expect_inter) == ("vader", "tcp")
    # Srun: the same knobs as OMPI_MCA_* variables.
    srun = ompi41.launch(["./a.out"], LaunchSpec(np=4, transport="ob1-vader+tcp", nodes=2, ppn=2, launcher="srun",
                                                 distribution="block", pin_sets=[(0,), (1,), (0,), (1,)]))
    assert srun.env == {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_btl_base_verbose": "1"}

    # hydra (Intel MPI, MPICH): -ppn 2 fills a host first (block), -ppn 1 round-robins (cyclic).
    impi = IntelMPI(tmp_path / "impi")
    for distribution, ppn in (("block", "2"), ("cyclic", "1")):
        launch = impi.launch(["IMB-MPI1"], LaunchSpec(np=4, transport="shm+ofi-tcp", nodes=2, ppn=2, hosts=hosts,
                                                      distribution=distribution))
        assert launch.argv[1:] == ["-n", "4", "-hosts", "node1,node2", "-ppn", ppn, "IMB-MPI1"]
        assert launch.env == {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "tcp", "I_MPI_DEBUG": "10"}
    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")
    launch = mpich.launch(["IMB-MPI1"], LaunchSpec(np=4, transport="shm+ofi-tcp", nodes=2, ppn=2, hosts=hosts,
                                                   distribution="block"))
    assert launch.argv[1:] == ["-n", "4", "-hosts", "node1,node2", "-ppn", "2", "-genv", "MPIR_CVAR_CH4_NETMOD", "ofi",
                               "-genv", "FI_PROVIDER", "tcp", "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "2", "IMB-MPI1"]
    assert (mpich.transport("shm+ofi-tcp").expect, mpich.transport("shm+ofi-tcp").expect_inter) == ("shm", "ofi:tcp")


# -- cells: the axes and their id segments ----------------------------------------------------


def mixed_config(**top: object) -> dict:
    return validate({
        "campaign": {"name": "t", "repetitions": 1},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm+ofi-tcp"]}},
        "mappings": ["core", "node"], "processes": [2, 4, 6], "nodes": [2],
        "imb": {"benchmarks": ["PingPong", "Allreduce"], "msglog": [0, 4], "time_s": 0.1, "mem_gb": 0.5},
        **top,
    })


def test_ppn_and_placement_axes_and_their_id_segments() -> None:
    ids = {c.id for c in programs.cells_of_kind(mixed_config(ppn=[2], placement=["block", "cyclic"]), "imb")}
    node = sorted(i for i in ids if "/node2/" in i)
    # ppn 2: PingPong runs with 2 x 2 ranks (ranks 0, 1 measure), Allreduce only at np 4; once per placement.
    assert node == ["imb/intelmpi/shm+ofi-tcp/node2/np4/Allreduce/default/placement=block/rep0",
                    "imb/intelmpi/shm+ofi-tcp/node2/np4/Allreduce/default/rep0",
                    "imb/intelmpi/shm+ofi-tcp/node2/np4/PingPong/default/placement=block/rep0",
                    "imb/intelmpi/shm+ofi-tcp/node2/np4/PingPong/default/rep0"]
    # One-node cells are untouched by either axis.
    assert "imb/intelmpi/shm+ofi-tcp/core/np2/PingPong/default/rep0" in ids
    # Without the keys every id is what it was (cyclic, every np / m).
    plain = {c.id for c in programs.cells_of_kind(mixed_config(), "imb")}
    assert not any("placement=" in i for i in plain)
    assert {i for i in plain if "/node2/" in i and "Allreduce" in i} == {
        f"imb/intelmpi/shm+ofi-tcp/node2/np{n}/Allreduce/default/rep0" for n in (2, 4, 6)}
    # One rank per node places alike either way: such a cell runs once, as cyclic.
    one = {c.id for c in programs.cells_of_kind(mixed_config(ppn=[1], placement=["block"]), "imb")}
    assert {i for i in one if "/node2/" in i} == {"imb/intelmpi/shm+ofi-tcp/node2/np2/PingPong/default/rep0",
                                                  "imb/intelmpi/shm+ofi-tcp/node2/np2/Allreduce/default/rep0"}
    with pytest.raises(ConfigError, match="placement"):
        mixed_config(placement=["round-robin"])


def test_placement_segment_round_trips_with_the_other_axes() -> None:
    cell = Cell("kernel", "openmpi", "ob1-vader+tcp", "node", 4, "coll", "default", 1, nodes=2, knobs="k",
                pinner="likwid", distribution="block")
    assert cell.id == "kernel/openmpi/ob1-vader+tcp/node2/np4/coll/default/knobs=k/pinner=likwid/placement=block/rep1"
    assert cell.label == "openmpi/ob1-vader+tcp/node2 [knobs=k] [placement=block]"
    parsed = parse_id(cell.id)
    assert (parsed["distribution"], parsed["knobs"], parsed["pinner"], parsed["np"], parsed["nodes"]) == (
        "block", "k", "likwid", 4, 2)
    assert cell.coords()["distribution"] == "block" and "distribution" not in Cell(
        "imb", "i", "t", "node", 4, "Allreduce", "default", 0, nodes=2).coords()
    assert parse_id("imb/i/t/node2/np4/PingPong/default/placement=block/rep0")["distribution"] == "block"
    assert parse_id("imb/i/t/node2/np4/PingPong/default/rep0")["distribution"] == ""


# -- placement: every rank's host against the plan ----------------------------------------------


def test_every_rank_host_is_checked_against_the_planned_placement() -> None:
    assert multinode.planned_nodes(4, 2, "block") == [0, 0, 1, 1]
    assert multinode.planned_nodes(4, 2, "cyclic") == [0, 1, 0, 1]
    spread = {r: {0, 1} for r in range(4)}
    assert multinode.placement_problems(4, 2, BLOCK_HOSTS, spread, SHARED, "block") == []
    assert multinode.placement_problems(4, 2, CYCLIC_HOSTS, spread, SHARED, "cyclic") == []
    # A block cell whose ranks went round-robin (e.g. srun without --distribution=block) is caught.
    problems = multinode.placement_problems(4, 2, CYCLIC_HOSTS, spread, SHARED, "block")
    assert problems[0] == "ranks 0 and 1 ran on node1 and node2: the block placement puts them on one node"
    problems = multinode.placement_problems(4, 2, BLOCK_HOSTS, spread, SHARED, "cyclic")
    assert "ranks 0 and 1 both ran on node1: the cyclic placement puts them on different nodes" in problems


def test_placement_follows_block_or_cyclic_and_spreads_oversubscribed_shared_machines() -> None:
    from mpiatlas.node import topology

    thin = topology.Topology.from_hwloc_xml(REPO / "tests" / "data" / "topology" / "thin_node.xml")  # 2 x 12 cores
    second = thin.cores[1].pu
    # A real cluster: local rank j on the node's j-th core, whichever ranks share the node.
    assert multinode.placement(thin, 4, 2, shared_machine=False, policy="spread", distribution="block") == (
        [0, second, 0, second], None)
    assert multinode.placement(thin, 4, 2, shared_machine=False, policy="spread", distribution="cyclic") == (
        [0, 0, second, second], None)
    pins, sets = multinode.placement(thin, 4, 2, shared_machine=True, policy="spread", distribution="block")
    assert pins is None and sets[0] == sets[2] and sets[1] == sets[3] and not set(sets[0]) & set(sets[1])
    # 4 ranks of two co-located nodes on a 2-core machine (the CI cluster): every rank on every core,
    # not ranks 0 and 1 (local rank 0 of each node under cyclic) stacked on core 0.
    two = topology.Topology.from_hwloc_xml(REPO / "tests" / "data" / "topology" / "thin_node.xml")
    two = two.restricted_to({0, second})
    assert multinode.placement(two, 4, 2, shared_machine=True, policy="spread", distribution="cyclic") == (
        None, [(0, second)] * 4)


def test_real_srun_lines_of_block_and_cyclic_give_the_planned_hosts() -> None:
    # srun --cpu-bind=verbose of the Intel MPI runs below (namespace cluster, slurm 22.05).
    assert multinode.srun_hosts(captured("intelmpi_shm+ofi-tcp_block.err")) == BLOCK_HOSTS
    assert multinode.srun_hosts(captured("intelmpi_shm+ofi-tcp_cyclic.err")) == CYCLIC_HOSTS


# -- the per-pair-class judge on real verbose output ---------------------------------------------


def _output(stem: str) -> str:
    return captured(f"{stem}.out") + "\n" + captured(f"{stem}.err")


def test_openmpi_pairs_on_one_node_used_vader_and_across_nodes_tcp(ompi41: OpenMPI) -> None:
    # Open MPI 4.1.4, srun --mpi=pmix -n 4 -N 2 --distribution=block, an all-to-all (every pair talks).
    output = _output("openmpi_ob1-vader+tcp_block")
    evidence = ompi41.pair_evidence(output, multinode.srun_hosts(output))
    pairs = {e.pair: (e.pair_class, e.transport) for e in evidence}
    assert len(pairs) == 12  # 4 ranks x 3 peers
    assert pairs[(0, 1)] == ("on_node", "vader") and pairs[(3, 2)] == ("on_node", "vader")
    assert pairs[(0, 2)] == ("cross_node", "tcp") and pairs[(3, 1)] == ("cross_node", "tcp")
    details = mixed_transport_evidence(ompi41, "ob1-vader+tcp", output, nodes=2)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["vader"], "cross_node": ["tcp"]}
    assert details["obtained_transport"] == "vader+tcp" and details["requested_transport"] == "vader+tcp"


def test_openmpi_pair_that_took_the_wrong_path_makes_the_cell_invalid(ompi41: OpenMPI) -> None:
    # The same run, asked for tcp between nodes but one on-node pair went over TCP as well: invalid,
    # with the pair and Open MPI's own line.
    vader = "Using vader btl for send to [[59526,30206],1] on node node1"
    output = _output("openmpi_ob1-vader+tcp_block").replace(vader, vader.replace("vader", "tcp"))
    details = mixed_transport_evidence(ompi41, "ob1-vader+tcp", output, nodes=2)
    assert details["transport_ok"] is False and details["pair_classes"]["on_node"] == ["tcp", "vader"]
    assert details["transport_problems"] == [
        "on-node pair(s) ranks 0->1 used 'tcp', not 'vader': "
        "[node1:14031] mca: bml: Using tcp btl for send to [[59526,30206],1] on node node1"]


def test_intelmpi_nodes_shared_memory_and_tcp_between_them(tmp_path: Path) -> None:
    impi = IntelMPI(tmp_path / "impi")
    output = _output("intelmpi_shm+ofi-tcp_cyclic")  # I_MPI_DEBUG=10, I_MPI_FABRICS=shm:ofi, FI_PROVIDER=tcp
    evidence = impi.pair_evidence(output, multinode.srun_hosts(output))
    on = sorted(e.ranks for e in evidence if e.pair_class == "on_node")
    assert on == [(0, 2), (1, 3)]  # each node's ranks share one shm segment (cyclic: 0,2 on node1)
    assert [e.transport for e in evidence if e.pair_class == "cross_node"] == ["tcp"]
    details = mixed_transport_evidence(impi, "shm+ofi-tcp", output, nodes=2)
    assert details["transport_ok"] and details["obtained_transport"] == "shm+tcp"
    # The network path of a stack that fell back to another provider is caught.
    wrong = mixed_transport_evidence(impi, "shm+ofi-tcp", output.replace("libfabric provider: tcp",
                                                                         "libfabric provider: sockets"), nodes=2)
    assert wrong["transport_ok"] is False and "used 'sockets', not 'tcp'" in wrong["transport_problems"][0]
    # Without level 10 (no shm segment lines) the on-node pairs are unproven: invalid, said so.
    level5 = "\n".join(ln for ln in output.splitlines() if "shm segment" not in ln)
    unproven = mixed_transport_evidence(impi, "shm+ofi-tcp", level5, nodes=2)
    assert unproven["transport_ok"] is False and "no path for the pairs of ranks on one node" in unproven[
        "transport_problems"][0]


def test_mpich_posix_shared_memory_within_a_node_and_ofi_tcp_between(tmp_path: Path) -> None:
    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")
    output = _output("mpich_shm+ofi-tcp_block")  # MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp DEBUG_SUMMARY=2
    details = mixed_transport_evidence(mpich, "shm+ofi-tcp", output, nodes=2)
    assert details["transport_ok"] and details["pair_classes"] == {"on_node": ["shm"], "cross_node": ["ofi:tcp"]}
    assert "Rank: 0, Local_rank: 0 [ 0, 0 ]" in details["pair_evidence"]["on_node"]
    # The wheel's default netmod between nodes is UCX, not OFI: its output has no provider line, and
    # a cell asking for ofi:tcp whose output shows another provider is invalid.
    udp = output.replace("provider: tcp -", "provider: udp -")
    wrong = mixed_transport_evidence(mpich, "shm+ofi-tcp", udp, nodes=2)
    assert wrong["transport_ok"] is False and "cross-node" in wrong["transport_problems"][0]


def test_judge_placement_keeps_a_mixed_cell_ok_only_on_its_planned_hosts() -> None:
    output = _output("intelmpi_shm+ofi-tcp_cyclic")
    spec = {"cell": {"np": 4, "nodes": 2, "distribution": "block"}}
    spread = {"obtained_binding": {str(r): [0, 1] for r in range(4)}}
    out = judge_placement(Outcome("ok", None, dict(spread)), spec, None, SHARED, output)
    assert out.status == "invalid" and "the block placement puts them on one node" in out.reason
    assert out.details["rank_hosts"] == {"0": "node1", "1": "node2", "2": "node1", "3": "node2"}
    spec["cell"]["distribution"] = ""
    assert judge_placement(Outcome("ok", None, dict(spread)), spec, None, SHARED, output).status == "ok"


# -- on the namespace cluster, through SLURM ------------------------------------------------------


@pytest.mark.infra
def test_mixed_transports_and_placements_over_two_nodes(netns_cluster: Path, tmp_path: Path) -> None:  # noqa: F811
    # The campaign's own trust rules: 4 ranks on 2 shared cores are often judged perturbed, so this
    # run usually has a later re-measure round through SLURM, whose job must hold its waits
    # (resources.later_round_seconds; CI once saw SLURM end such a job at its 1 min request).
    work = campaign_workdir(tmp_path, MIXED)
    done = run_campaign(work, *PROFILE, *ONE_JOB_AT_A_TIME, timeout=600, path_prefix=netns_cluster / "bin")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = pl.read_parquet(work / RESULTS / "tidy" / "cells.parquet")
    assert cells.height == 20 and set(cells["status"]) == {"ok"}, cells.select("cell", "status", "reason").rows()
    inter = {"intelmpi": "tcp", "mpich": "ofi:tcp", "openmpi": "tcp"}
    intra = {"intelmpi": "shm", "mpich": "shm", "openmpi": "vader"}
    for row in cells.iter_rows(named=True):
        status = json.loads((work / RESULTS / "raw" / row["cell"] / "status.json").read_text())
        block = "/placement=block/" in row["cell"]
        # Every rank on the host its placement plans.
        assert json.loads(row["hosts"]) == {str(r): h for r, h in (BLOCK_HOSTS if block else CYCLIC_HOSTS).items()}
        # Pairs on one node used shared memory, pairs across nodes the network: the stack's own lines.
        classes = status["pair_classes"]
        assert classes["on_node"] == [intra[row["stack"]]], (row["cell"], status["pair_evidence"])
        assert classes["cross_node"] == [inter[row["stack"]]], (row["cell"], status["pair_evidence"])
        assert status["transport_ok"] is True and status["placement_ok"] is True
        # PingPong's pair (ranks 0, 1): two nodes under cyclic; under block one node, where 4 ranks on
        # 2 shared cores all get both cores (multinode.placement), so no region is planned for them.
        assert row["region"] == (None if block else "other_node"), (row["cell"], row["region"])
        # The tidy columns say it too: the placement, and where ranks 0 and 1 ran (from their hosts).
        assert (row["placement"], row["pair_class"]) == (("block", "on_node") if block else ("cyclic", "cross_node"))

    summary = pl.read_parquet(work / RESULTS / "tidy" / "imb_summary.parquet")
    for stack in ("intelmpi", "mpich"):
        def latency(label: str) -> float:
            rows = summary.filter((pl.col("benchmark") == "PingPong") & (pl.col("label") == label)
                                  & (pl.col("bytes") == 4))
            assert rows.height == 1, label
            return float(rows["t_median_usec"][0])

        on_node = latency(f"{stack}/shm+ofi-tcp/node2 [placement=block]")
        cross = latency(f"{stack}/shm+ofi-tcp/node2")
        # Oversubscribed (4 ranks, 2 cores): reported, not asserted beyond being measured.
        print(f"{stack} shm+ofi-tcp, 4 ranks over 2 nodes: 4 B PingPong on-node pair (block) {on_node:.3g} us, "
              f"cross-node pair (cyclic) {cross:.3g} us")
        assert on_node > 0 and cross > 0
    # The report's regions section shows PingPong by pair class, both placements of every IMB stack.
    html = (work / RESULTS / "report.html").read_text()
    section = html[html.index("PingPong by pair class"):]
    section = section[:section.index("</table>")]
    for stack in ("intelmpi", "mpich"):
        for pair, placement in (("on-node", "block"), ("cross-node", "cyclic")):
            assert re.search(rf"{stack}/shm\+ofi-tcp</td>\s*<td[^>]*>{pair}</td>\s*<td[^>]*>{placement}</td>", section), \
                (stack, pair, section[:3000])

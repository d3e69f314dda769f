"""A cell group's harness cost: what the runner does once per group (stack version, topology)
and what each cell's ``wall_s`` covers. Real Intel MPI + IMB (infra)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, require_infra
from mpiatlas import cli
from mpiatlas.evidence import mpi_library
from mpiatlas.matrix import layout
from mpiatlas.stacks import get_stack

INTELMPI = REPO / ".stacks" / "intelmpi"


def counting_subprocess_run(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every subprocess.run argv, the real subprocess.run still doing the work."""
    calls: list[list[str]] = []
    real = subprocess.run

    def run(argv: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append([str(a) for a in argv])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return calls


@pytest.mark.infra
def test_stack_version_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    require_infra((INTELMPI / "bin" / "mpirun").exists(), f"Intel MPI (PyPI) at {INTELMPI}")
    stack = get_stack("intelmpi", INTELMPI)
    calls = counting_subprocess_run(monkeypatch)
    versions = {stack.version() for _ in range(5)}
    assert len(versions) == 1 and "Intel" in versions.pop()
    assert len([c for c in calls if c[-1] == "--version"]) == 1


@pytest.mark.infra
def test_a_group_runs_the_version_probe_once_and_times_each_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_infra((INTELMPI / "bin" / "IMB-MPI1").exists(), f"Intel MPI with IMB (PyPI) at {INTELMPI}")
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load((REPO / "config" / "test" / "tiny.yaml").read_text()))
    config["campaign"].update(stacks_dir=str(REPO / ".stacks"), repetitions=3)
    config["stacks"]["intelmpi"]["transports"] = ["shm"]
    config["imb"].update(benchmarks=["PingPong"], msglog=[0, 10], time_s=0.1, iterations=50)
    config.pop("kernels", None)
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    calls = counting_subprocess_run(monkeypatch)
    # The loader's answer is cached per process (mpi_library.resolve_libmpi): an earlier test of this
    # process may hold IMB-MPI1's already; this test counts what one group of a fresh process asks.
    mpi_library.resolve_libmpi.cache_clear()
    group = "imb_intelmpi_np2_t1_0"
    done = tmp_path / "done.json"

    start = time.perf_counter()
    assert cli.main(["run-cell", "--group", group, "--config", "campaign.yaml", "--done", str(done)]) == 0
    elapsed = time.perf_counter() - start

    cells = json.loads(done.read_text())["cells"]
    assert len(cells) == 3 and all(c["status"] == "ok" and c["ran"] for c in cells), cells
    assert len([c for c in calls if c[-1] == "--version"]) == 1  # once per group, not per cell
    # The libmpi IMB-MPI1 loads (mpi_library): resolved once per program and LD_LIBRARY_PATH, not per cell.
    assert len([c for c in calls if Path(c[0]).name == "ldd"]) == 1
    results = Path(layout.results_dir("tiny"))
    provs = [json.loads((results / "raw" / c["cell"] / layout.PROVENANCE).read_text()) for c in cells]
    assert len({p["stack_version"] for p in provs}) == 1
    walls = [p["wall_s"] for p in provs]
    # Each wall_s is the launch's own time: positive, and together less than the group's time.
    assert all(w > 0 for w in walls) and sum(walls) < elapsed
    assert os.path.isdir(results / "raw" / cells[0]["cell"])

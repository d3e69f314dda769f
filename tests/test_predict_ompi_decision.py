"""The ``default`` Bcast the models price is the one Open MPI 4.1 really runs.

A real Open MPI (Debian's 4.1 here) runs one MPI_Bcast per (P, bytes) with an LD_PRELOAD probe
(tests/data/ompi_bcast_probe/probe.c) that names the coll/base algorithm coll/tuned's fixed
decision called; that name must be :func:`bcast_default_algorithm`'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import require_infra
from mpiatlas.models.collective_regions import bcast_default_algorithm

PROBE = Path(__file__).parent / "data" / "ompi_bcast_probe"
# coll/base function -> the coll_tuned algorithm name it implements.
FUNCTIONS = {
    "ompi_coll_base_bcast_intra_basic_linear": "basic_linear",
    "ompi_coll_base_bcast_intra_chain": "chain",
    "ompi_coll_base_bcast_intra_pipeline": "pipeline",
    "ompi_coll_base_bcast_intra_split_bintree": "split_binary_tree",
    "ompi_coll_base_bcast_intra_bintree": "binary_tree",
    "ompi_coll_base_bcast_intra_binomial": "binomial",
    "ompi_coll_base_bcast_intra_knomial": "knomial",
    "ompi_coll_base_bcast_intra_scatter_allgather": "scatter_allgather",
    "ompi_coll_base_bcast_intra_scatter_allgather_ring": "scatter_allgather_ring",
}
# Small communicators only (the machine has 2 cores): every arm of the table below 16 ranks at
# 4 B, plus sizes that switch arms.
CASES = [(2, 4), (3, 4), (4, 4), (7, 4), (8, 4), (9, 2048), (4, 100), (4, 8192), (2, 2048), (12, 100)]


def _open_mpi() -> tuple[str, str] | None:
    mpicc, mpirun = shutil.which("mpicc"), shutil.which("mpirun")
    if not (mpicc and mpirun):
        return None
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, check=False).stdout
    return (mpicc, mpirun) if "Open MPI) 4.1" in version else None


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    tools = _open_mpi()
    require_infra(tools is not None, "Open MPI 4.1 (mpicc, mpirun) on PATH")
    assert tools is not None
    mpicc, mpirun = tools
    out = tmp_path_factory.mktemp("ompi_probe")
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out / "probe.so"), str(PROBE / "probe.c"), "-ldl"], check=True)
    subprocess.run([mpicc, "-O1", "-o", str(out / "bcast_once"), str(PROBE / "bcast_once.c")], check=True)
    return mpirun, out / "probe.so", out / "bcast_once"


@pytest.mark.infra
@pytest.mark.parametrize(("np", "nbytes"), CASES)
def test_default_bcast_matches_open_mpi(probe: tuple[str, Path, Path], np: int, nbytes: int) -> None:
    mpirun, shim, program = probe
    argv = [mpirun, "--oversubscribe", "-np", str(np), "-x", f"LD_PRELOAD={shim}", str(program), str(nbytes)]
    if os.geteuid() == 0:
        argv.insert(1, "--allow-run-as-root")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    called = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("BCAST_ALGORITHM ")]
    assert len(called) == 1, proc.stderr[-2000:]
    assert FUNCTIONS[called[0]] == bcast_default_algorithm(np, nbytes)
